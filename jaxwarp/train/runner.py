"""Host side of a training run: jitted chunks, progress, logs, checkpoints, plot.

The device program is `trainer.run` over ``chunk_updates`` updates, vmapped
over seeds and jitted once with the runner state donated; between chunks the
host writes metrics (JSONL, CSV, TensorBoard), shows progress and saves an
Orbax checkpoint every ``checkpoint_every`` updates. Nothing syncs per env
step. ``resume=True`` restores the latest checkpoint of an output folder and
continues; because every update is a pure function of the restored state,
the resumed run reproduces the uninterrupted one.

Several devices and processes (docs/sharding.md): the runner state is sharded
as the trainer's mesh says (env state split along envs, the rest
replicated); Orbax saves and restores it as global arrays, so a run resumes
onto the current mesh, whatever the device count it was saved from. With
``jax.distributed`` (several processes, one per host), every process runs
this same loop and takes part in each checkpoint; process 0 alone holds the
run lock and writes config.yaml, metrics, summary and plot, and its
decisions taken on the host (stop at a time limit) hold for all.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import math
import os
import shutil
import signal
import sys
import threading
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
import yaml

from jaxwarp.train import distributed
from jaxwarp.train.config import (ConfigError, TrainConfig, config_from_dict, validate,
                                  yaml_error)
from jaxwarp.train.compile import jit
from jaxwarp.train.seeds import seed_keys
from jaxwarp.train.trainer import RunnerState, build_trainer
from jaxwarp.units import device_name, rate_text

CONFIG_FILE = "config.yaml"
METRICS_JSONL = "metrics.jsonl"
METRICS_CSV = "metrics.csv"
SUMMARY_FILE = "summary.json"
PLOT_FILE = "learning_curve.png"
LOCK_FILE = ".lock"


@dataclass
class RunResult:
    """What a run leaves behind (also on disk under `out_dir`)."""

    out_dir: Path
    state: RunnerState  # final state, leading [seeds] axis
    metrics: list[dict[str, float]]  # one row per (update, seed), this process's rows
    summary: dict[str, Any]


def _rows(metrics: Mapping[str, np.ndarray], first_update: int, seeds: list[int],
          rate: float, wall_start: float, wall_end: float) -> list[dict[str, float]]:
    """name -> [seeds, n] arrays to one row per (update, seed); wall_s spreads
    the chunk's time evenly over its updates."""
    n = next(iter(metrics.values())).shape[1]
    rows = []
    for i in range(n):
        for s, seed in enumerate(seeds):
            # One column order for every env: update, seed, env_steps,
            # env_steps_per_s, wall_s, then the metrics by name.
            row: dict[str, float] = {"update": first_update + i + 1, "seed": seed,
                                     "env_steps": float(metrics["env_steps"][s, i]),
                                     "env_steps_per_s": rate,
                                     "wall_s": wall_start + (wall_end - wall_start) * (i + 1) / n}
            row.update({k: float(v[s, i]) for k, v in sorted(metrics.items())
                        if k != "env_steps"})
            rows.append(row)
    return rows


def _json_value(v: Any) -> Any:
    """NaN/inf -> None (null): strict JSON has no NaN or Infinity."""
    return None if isinstance(v, float) and not math.isfinite(v) else v


class _MetricWriter:
    """Appends rows to JSONL + CSV, and seed-means to TensorBoard when available."""

    def __init__(self, out_dir: Path, keep_until: int | None):
        self.jsonl = out_dir / METRICS_JSONL
        self.csv = out_dir / METRICS_CSV
        self.fields: list[str] | None = None
        if keep_until is not None:  # resume: drop rows logged after the checkpoint
            kept = [r for r in read_metrics(out_dir) if r["update"] <= keep_until]
            self.jsonl.write_text("".join(
                json.dumps({k: _json_value(v) for k, v in r.items()}) + "\n" for r in kept))
            self.csv.unlink(missing_ok=True)
            self._append_csv(kept)
        else:
            self.jsonl.write_text("")
            self.csv.unlink(missing_ok=True)
        try:
            from tensorboardX import SummaryWriter
            self.tb = SummaryWriter(str(out_dir / "tensorboard"))
        except ImportError:
            self.tb = None

    def _append_csv(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        new = not self.csv.exists()
        if self.fields is None:
            self.fields = list(rows[0])
        with self.csv.open("a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=self.fields, extrasaction="ignore")
            if new:
                w.writeheader()
            w.writerows(rows)

    def write(self, rows: list[dict[str, float]]) -> None:
        with self.jsonl.open("a") as f:
            for r in rows:
                f.write(json.dumps({k: _json_value(v) for k, v in r.items()}) + "\n")
        self._append_csv(rows)
        if self.tb is not None:
            by_update: dict[int, list[dict[str, float]]] = {}
            for r in rows:
                by_update.setdefault(int(r["update"]), []).append(r)
            for u, rs in by_update.items():
                step = int(rs[0]["env_steps"])
                for k in rs[0]:
                    if k in ("update", "seed", "env_steps"):
                        continue
                    vals = [r[k] for r in rs if math.isfinite(r[k])]
                    if vals:
                        self.tb.add_scalar(k, float(np.mean(vals)), step)
            self.tb.flush()

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def read_metrics(out_dir: str | Path) -> list[dict[str, float]]:
    """Rows of a run's metrics.jsonl (None back to NaN)."""
    path = Path(out_dir) / METRICS_JSONL
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            rows.append({k: (math.nan if v is None else v) for k, v in json.loads(line).items()})
    return rows


def _checkpointer(out_dir: Path):
    import orbax.checkpoint as ocp

    return ocp.CheckpointManager(
        (out_dir / "checkpoints").absolute(),
        options=ocp.CheckpointManagerOptions(max_to_keep=2, create=True))


def train_run(config: TrainConfig | None = None, out_dir: str | Path = "runs/latest",
              seeds: int = 1, resume: bool = False, progress: bool = True,
              stop_after_updates: int | None = None, time_limit_s: float | None = None,
              env: Any = None,
              models: Mapping[str, Any] | None = None,
              devices: int | None = None) -> RunResult:
    """Trains `seeds` seeds of `config` (seed, seed+1, ...) in one program.

    out_dir receives config.yaml, metrics.jsonl/.csv, tensorboard/ (with
    tensorboardX), checkpoints/ (Orbax), summary.json and
    learning_curve.png (with matplotlib). resume: continue the run saved in
    out_dir (its config.yaml; `config` must be None or equal to it).
    stop_after_updates: stop early after that many updates of this process
    (at a chunk boundary, as if killed; used by tests). time_limit_s: stop
    at the first chunk boundary after that many seconds (compile included);
    the run can be resumed later. devices: when given, overrides the
    config's ``devices`` (also on resume: the saved state is restored onto the
    new mesh; config.yaml keeps the value the run started with).

    Several processes: call it in every process with the same arguments
    (``jax.distributed`` is initialized first when config.distributed or
    JAX_COORDINATOR_ADDRESS asks for it); see the module docstring.

    Reliability: the run holds an exclusive lock on out_dir/.lock (released
    on exit, also when killed; the file is removed when the run ends), so a
    second run on the same folder fails with RunLockedError. A first Ctrl-C
    stops the run at the end of the current chunk and checkpoints it (a
    second stops at once); KeyboardInterrupt is raised after the checkpoint
    is written. A resume that finds no checkpoint starts from update 1 with
    a CheckpointWarning saying so. config.yaml is written once training starts; a
    folder this call created is removed again if the run fails before. A
    resumed run falls back past unreadable checkpoints (CheckpointWarning
    naming each; moved to checkpoints_corrupt/) and raises CheckpointError
    if none is intact. NaN/inf in a loss or in the parameters stops the run
    with NonFiniteError naming the update; no checkpoint is written after it.
    """
    import orbax.checkpoint as ocp

    out = Path(out_dir)
    if resume and not (out / CONFIG_FILE).exists():
        raise FileNotFoundError(f"--resume {out}: no {CONFIG_FILE} there (not a jaxwarp run)")
    if not resume and config is None:
        raise ValueError("train_run: config is required unless resume=True")
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1; got {seeds}")
    # Before anything touches a jax backend (a multi-host run starts here).
    try:
        proc = distributed.maybe_initialize(
            config.distributed if config is not None else _saved_distributed(out))
    except RuntimeError as e:  # one line for the CLI, naming the variables to set
        raise RunError(str(e)) from None
    primary, many = proc.process_id == 0, proc.num_processes > 1
    ready = False  # every process got past its checks (see distributed.all_ok)

    def fail_start() -> None:
        # The other processes wait in all_ok: tell them this one failed.
        if many and not ready:
            with contextlib.suppress(Exception):
                distributed.all_ok(False)

    created = primary and not out.exists()  # only process 0 creates / removes the folder
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        fail_start()
        raise RunError(f"cannot create the output folder {out}: {e}") from None
    try:
        lock = _RunLock(out) if primary else _NoLock()
    except BaseException:
        fail_start()
        raise
    started = False  # config.yaml written: the folder holds a run from here on
    try:
        if resume:
            saved_config, seeds = _read_saved_config(out)
            if config is not None and dataclasses.replace(config, devices=saved_config.devices) \
                    != saved_config:
                raise ConfigError(f"--resume {out}: the given config differs from the saved one; "
                                  "resume takes its config from the run folder")
            config = saved_config if config is None else dataclasses.replace(
                saved_config, devices=config.devices)
        elif primary and _holds_run(out):
            raise FileExistsError(f"{out} already holds a run; pass --resume {out} to continue "
                                  "it or choose another --out")
        if devices is not None:
            config = dataclasses.replace(config, devices=devices)
            validate(config)

        trainer = build_trainer(config, env=env, models=models)
        ready = True
        if not distributed.all_ok(True):
            raise RunError("another process of this run failed to start (see its error); "
                           "this one stops too")
        num_updates = trainer.derived.num_updates
        chunk = min(config.chunk_updates, num_updates)
        seed_ids = list(range(config.seed, config.seed + seeds))
        keys = seed_keys(config.seed, seeds)
        if trainer.mesh is not None:
            keys = np.asarray(keys)  # host data: the same on every process, replicated by jit

        init = jax.jit(jax.vmap(trainer.init))
        run_chunk = jit(jax.vmap(lambda rs: trainer.run(rs, chunk)), config.deterministic,
                        donate_argnums=0)

        t0 = time.perf_counter()
        done_updates = 0
        restored = _restore_intact(out, _abstract_state(trainer, init, keys), primary) \
            if resume else None
        if many:  # every process restored the same checkpoint (or none)
            step = -1 if restored is None else restored[0]
            if not distributed.all_ok(step == distributed.same_on_all(step)):
                raise CheckpointError(f"--resume {out}: the processes restored different "
                                      "checkpoints; resume from an intact checkpoint folder")
        if restored is not None:
            done_updates, rs = restored
            if progress and primary:  # which checkpoint the run continues from
                print(f"resuming {out} from update {done_updates}/{trainer.derived.num_updates} "
                      f"(checkpoint {out / 'checkpoints' / str(done_updates)})",
                      file=sys.stderr)
        else:
            if resume and primary:  # not silently: the updates logged before are redone
                warnings.warn(f"--resume {out}: no checkpoint was written before the run "
                              f"stopped; it starts from update 1 of {num_updates}",
                              CheckpointWarning, stacklevel=2)
            rs = init(keys)
        compiled = run_chunk.lower(rs).compile()
        compile_s = time.perf_counter() - t0

        if not resume and primary:
            (out / CONFIG_FILE).write_text(yaml.safe_dump(
                {"config": config.to_dict(), "seeds": seeds}, sort_keys=False))
        started = True
        mngr = _checkpointer(out)
        writer = _MetricWriter(out, keep_until=done_updates if resume else None) if primary \
            else _NoWriter()
    except BaseException:
        fail_start()
        lock.release()
        if created and not started:
            shutil.rmtree(out, ignore_errors=True)
        raise

    rows: list[dict[str, float]] = []
    bar = _Progress(num_updates, done_updates, trainer.derived.batch_env_steps,
                    progress and primary, agents=int(trainer.env.num_agents))
    run_s = 0.0
    stopped_early = False
    failure: NonFiniteError | None = None
    # Ctrl-C: the update the newest checkpoint holds, and whether `rs` is the
    # state after exactly `done_updates` updates (not while a chunk is in flight:
    # its input was donated and its rows are not logged yet).
    saved_at = done_updates if restored is not None else None
    settled = True
    ctrl_c = _CtrlC()
    try:
        ctrl_c.install()
        while done_updates < num_updates:
            stop = (stop_after_updates is not None and len(rows) // seeds >= stop_after_updates) \
                or (time_limit_s is not None and time.perf_counter() - t0 >= time_limit_s)
            # Process 0's clock and Ctrl-C decide for all: 1 stop, 2 interrupted.
            decision = distributed.same_on_all(2 if ctrl_c.pressed else 1 if stop else 0)
            if decision == 2:
                raise KeyboardInterrupt
            if decision:
                stopped_early = True
                break
            n = min(chunk, num_updates - done_updates)
            if n != chunk:  # a last, shorter chunk compiles once more: not in its rate
                tc = time.perf_counter()
                compiled = jit(jax.vmap(lambda r: trainer.run(r, n)), config.deterministic,
                               donate_argnums=0).lower(rs).compile()
                compile_s += time.perf_counter() - tc
            t = time.perf_counter()
            settled = False
            rs, metrics = compiled(rs)
            metrics = jax.device_get(metrics)
            finite = np.asarray(metrics.pop("finite")) > 0  # [seeds, n]: one check per chunk
            dt = time.perf_counter() - t
            run_s += dt
            rate = n * trainer.derived.batch_env_steps * seeds / dt
            new = _rows(metrics, done_updates, seed_ids, rate, t - t0, t - t0 + dt)
            if not finite.all():
                i = int(np.argmin(finite.all(axis=0)))  # first update with NaN/inf
                bad = [seed_ids[s] for s in np.flatnonzero(~finite[:, i])]
                new = new[:(i + 1) * seeds]  # logged up to the failing update, for diagnosis
                writer.write(new)
                rows.extend(new)
                last = max(mngr.all_steps(), default=None)
                failure = NonFiniteError(
                    f"update {done_updates + i + 1}: the loss or the parameters became "
                    f"non-finite (NaN/inf) for seed(s) {bad}; training stopped, "
                    + (f"checkpoints up to update {last} kept" if last is not None
                       else "no checkpoint written")
                    + " (lower the learning rate or check env_params)")
                break
            writer.write(new)
            rows.extend(new)
            done_updates += n
            settled = True
            if done_updates % config.checkpoint_every == 0 or done_updates == num_updates:
                mngr.save(done_updates, args=ocp.args.StandardSave(rs))
                saved_at = done_updates
            bar.advance(n, rate, new)
    except KeyboardInterrupt:
        # Keep the last completed chunk: a checkpoint as any other (Orbax
        # writes it to a temporary folder and renames it when complete; the
        # wait in `finally` lets it finish), so that --resume goes on from it.
        if settled and done_updates > 0 and saved_at != done_updates:
            bar.close()
            if primary:
                print(f"jaxwarp train: interrupted; saving a checkpoint at update "
                      f"{done_updates}", file=sys.stderr)
            mngr.save(done_updates, args=ocp.args.StandardSave(rs), force=True)
        raise
    finally:
        ctrl_c.uninstall()
        try:
            bar.close()
            mngr.wait_until_finished()
            mngr.close()
            writer.close()
        finally:
            lock.release()

    all_rows = read_metrics(out) if primary else rows
    steps_done = len(rows) // seeds * trainer.derived.batch_env_steps * seeds
    summary = {
        "env": config.env, "backend": trainer.env.backend, "seeds": seeds,
        "updates": done_updates, "num_updates": num_updates,
        "env_steps_per_seed": done_updates * trainer.derived.batch_env_steps,
        "compile_s": compile_s, "run_s": run_s,
        "env_steps_per_s": steps_done / run_s if run_s > 0 else math.nan,
        "agents_per_env": int(trainer.env.num_agents),
        "agent_steps_per_s": (steps_done * int(trainer.env.num_agents) / run_s if run_s > 0
                              else math.nan),
        "device": device_name(),
        "devices": [str(d) for d in jax.devices()],
        # Devices the envs are split over (all processes) and processes.
        "data_parallel_devices": 1 if trainer.mesh is None else int(trainer.mesh.size),
        "processes": proc.num_processes, "sampler": trainer.sampler,
        "finished": done_updates == num_updates, "stopped_early": stopped_early,
        "final": {k: v for k, v in _final_means(all_rows).items()},
    }
    if failure is not None:
        summary["error"] = str(failure)
    if primary:
        (out / SUMMARY_FILE).write_text(json.dumps(
            {k: _json_value(v) if isinstance(v, float) else v for k, v in summary.items()},
            indent=2))
    if failure is not None:
        raise failure
    if done_updates == num_updates and primary:
        plot_run(out)
    return RunResult(out_dir=out, state=rs, metrics=rows, summary=summary)


def _saved_distributed(out: Path) -> bool:
    """The ``distributed`` setting of the run saved in out (False when unreadable:
    the resume reports the problem itself, under the lock)."""
    try:
        meta = yaml.safe_load((out / CONFIG_FILE).read_text())
        return meta["config"].get("distributed") is True
    except Exception:  # noqa: BLE001
        return False


def _abstract_state(trainer: Any, init: Any, keys: Any) -> Any:
    """The runner state's shapes and dtypes with the shardings to restore onto:
    the trainer's mesh (env state split along envs, the rest replicated), or
    the default device. Orbax reads the global arrays, so a checkpoint saved
    from another device count restores onto this one."""
    abstract = jax.eval_shape(init, keys)
    if trainer.mesh is None:
        # One device (where init puts the state). Explicit, because Orbax would
        # otherwise restore onto the sharding saved in the checkpoint, e.g. the
        # mesh of a run saved with devices=2.
        one = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        shardings = jax.tree.map(lambda _: one, abstract)
    else:
        shardings = trainer.state_shardings(abstract, seed_axis=True)
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                        abstract, shardings)


class _CtrlC:
    """A first Ctrl-C (SIGINT) during the training loop only sets `pressed`:
    the loop reads it at the next chunk boundary, checkpoints the chunks done
    and raises KeyboardInterrupt there. A second Ctrl-C interrupts at once
    (the previous handler is back). Installed only in the main thread over
    Python's default handler; elsewhere KeyboardInterrupt arrives as usual
    (train_run then checkpoints the last completed chunk if no chunk is in
    flight)."""

    def __init__(self) -> None:
        self.pressed = False
        self._previous: Any = None

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread() \
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        self.pressed = True
        signal.signal(signal.SIGINT, self._previous)
        print("jaxwarp train: interrupt: stopping after the current chunk to save a "
              "checkpoint (Ctrl-C again stops at once, without it)", file=sys.stderr)

    def uninstall(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None


class _NoLock:
    """Processes other than 0 hold no lock (process 0's covers the run)."""

    def release(self) -> None:
        pass


class _NoWriter:
    """Processes other than 0 write no metrics."""

    def write(self, rows: list[dict[str, float]]) -> None:
        pass

    def close(self) -> None:
        pass


class RunError(RuntimeError):
    """A run that cannot start or go on; the message is one line (the CLI prints it)."""


class RunLockedError(RunError):
    """Another process holds the run folder's lock."""


class CheckpointError(RunError):
    """No intact checkpoint to resume from."""


class NonFiniteError(RunError):
    """A loss or a parameter became NaN/inf during training."""


class CheckpointWarning(UserWarning):
    """A corrupt checkpoint was skipped on resume."""


class _RunLock:
    """Exclusive `flock` on out_dir/.lock: held for the run, released on exit and
    by the kernel when the process dies (a killed run leaves no stale lock).

    A run that ends removes the file (a killed one leaves it, unlocked, and
    the next run takes it). The file is unlinked while still locked, so a
    process that opened it just before may lock the unlinked file: it checks
    after locking that the path still names the file it holds, else tries
    again."""

    def __init__(self, out: Path):
        import fcntl

        self.path = out / LOCK_FILE
        while True:
            self.fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = os.read(self.fd, 32).decode(errors="replace").strip()
                os.close(self.fd)
                self.fd = None
                who = f"process {holder}" if holder.isdigit() else "another process"
                raise RunLockedError(f"{out} is in use by a jaxwarp run ({who}); wait for it "
                                     "to end or choose another --out") from None
            try:
                same = os.stat(self.path).st_ino == os.fstat(self.fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(self.fd)  # locked a file its holder had just removed: again
        os.ftruncate(self.fd, 0)
        os.write(self.fd, f"{os.getpid()}\n".encode())

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):  # still locked here: no one else's file
                os.unlink(self.path)
            os.close(self.fd)  # closing the only descriptor drops the flock
            self.fd = None


def _holds_run(out: Path) -> bool:
    """out already has checkpoints or logged metrics of a run."""
    ck, metrics = out / "checkpoints", out / METRICS_JSONL
    return (ck.is_dir() and any(ck.iterdir())) or (metrics.exists()
                                                    and metrics.stat().st_size > 0)


def _one_line(e: BaseException, limit: int = 160) -> str:
    text = f"{type(e).__name__}: {' '.join(str(e).split())}"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _read_saved_config(out: Path) -> tuple[TrainConfig, int]:
    """(config, seeds) of the run saved in out; ConfigError if config.yaml is corrupt."""
    path = out / CONFIG_FILE
    try:
        meta = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"--resume {out}: {CONFIG_FILE} is not valid YAML "
                          f"({yaml_error(e)})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--resume {out}: cannot read {CONFIG_FILE} ({e})") from None
    if not isinstance(meta, Mapping) or not isinstance(meta.get("config"), Mapping) \
            or isinstance(meta.get("seeds"), bool) or not isinstance(meta.get("seeds"), int) \
            or meta["seeds"] < 1:
        raise ConfigError(f"--resume {out}: {CONFIG_FILE} is not a jaxwarp run config "
                          "(expected 'config:' mapping and 'seeds:' integer >= 1)")
    try:
        return config_from_dict(meta["config"]), meta["seeds"]
    except ConfigError as e:
        raise ConfigError(f"--resume {out}: {CONFIG_FILE}: {e}") from None


def _checkpoint_steps(out: Path) -> list[int]:
    ck = out / "checkpoints"
    if not ck.is_dir():
        return []
    return sorted((int(q.name) for q in ck.iterdir() if q.is_dir() and q.name.isdigit()),
                  reverse=True)


@contextlib.contextmanager
def _quiet_closed_loop_callbacks():
    """An Orbax restore that fails on one array returns while TensorStore still
    reads the others; when those reads finish they call into Orbax's closed
    event loop and Python prints a 'RuntimeError: Event loop is closed'
    traceback for each. Drop exactly those while checkpoints are probed."""
    previous = sys.unraisablehook

    def hook(u):
        if not (isinstance(u.exc_value, RuntimeError)
                and str(u.exc_value) == "Event loop is closed"):
            previous(u)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


def _restore_intact(out: Path, abstract: Any, primary: bool = True
                    ) -> tuple[int, Any] | None:
    """(update, state) of the newest checkpoint that restores with finite
    parameters, or None when there is no checkpoint. Unreadable newer ones are
    moved to checkpoints_corrupt/ with a CheckpointWarning each (so that the
    resumed run can save those steps again); CheckpointError if none restores."""
    import orbax.checkpoint as ocp

    steps = _checkpoint_steps(out)
    if not steps:
        return None
    skipped: list[tuple[int, str]] = []
    found = None
    with _quiet_closed_loop_callbacks(), ocp.StandardCheckpointer() as ckptr:
        for step in steps:
            path = (out / "checkpoints" / str(step)).absolute()
            try:
                for meta in ("_CHECKPOINT_METADATA", "default/_METADATA"):
                    # Orbax logs an emptied _CHECKPOINT_METADATA and reads on: not intact.
                    if (path / meta).exists() and not isinstance(
                            json.loads((path / meta).read_text()), dict):
                        raise ValueError(f"{meta} is not a JSON object")
                rs = ckptr.restore(path / "default", abstract)
                if not all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(rs.params)):
                    raise ValueError("non-finite parameters")
            except Exception as e:  # noqa: BLE001  (Orbax/TensorStore raise many kinds)
                skipped.append((step, _one_line(e)))
                time.sleep(0.2)  # let the reads of the other arrays finish (see below)
                continue
            found = step, rs
            break
    if found is not None:
        step, rs = found
        for bad, why in skipped if primary else ():  # process 0 moves the files
            dest = out / "checkpoints_corrupt" / str(bad)
            k = 1
            while dest.exists():
                dest, k = out / "checkpoints_corrupt" / f"{bad}.{k}", k + 1
            dest.parent.mkdir(exist_ok=True)
            shutil.move(str(out / "checkpoints" / str(bad)), str(dest))
            warnings.warn(f"checkpoint at update {bad} is unreadable ({why}); moved to {dest}, "
                          f"resuming from update {step}", CheckpointWarning, stacklevel=3)
        return found
    tried = "; ".join(f"update {s}: {why}" for s, why in skipped)
    raise CheckpointError(f"--resume {out}: no intact checkpoint ({tried}); start a new run "
                          "with another --out")


def _final_means(rows: list[dict[str, float]]) -> dict[str, float | None]:
    if not rows:
        return {}
    last = max(r["update"] for r in rows)
    final = [r for r in rows if r["update"] == last]
    out = {}
    for k in final[0]:
        if k.endswith("episode_return") or k == "tags_per_episode":
            vals = [r[k] for r in final if not math.isnan(r[k])]
            out[k] = float(np.mean(vals)) if vals else None
    return out


class _Progress:
    """A rich progress bar updated once per chunk (no-op when disabled)."""

    def __init__(self, total: int, done: int, batch: int, enabled: bool, agents: int = 1):
        self.enabled, self.agents = enabled, agents
        if not enabled:
            return
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)

        self.p = Progress(TextColumn("updates"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), TimeRemainingColumn(),
                          TextColumn("{task.fields[info]}"))
        self.task = self.p.add_task("train", total=total, completed=done, info="compiling")
        self.p.start()

    def advance(self, n: int, rate: float, rows: list[dict[str, float]]) -> None:
        if not self.enabled:
            return
        last = max(r["update"] for r in rows)
        final = [r for r in rows if r["update"] == last]
        parts = [rate_text(rate, self.agents, device_name())]
        for k in sorted(final[0]):
            if k.endswith("episode_return") or k == "tags_per_episode":
                vals = [r[k] for r in final if not math.isnan(r[k])]
                if vals:
                    parts.append(f"{k.replace('/episode_return', '')} {np.mean(vals):.3g}")
        self.p.update(self.task, advance=n, info="  ".join(parts))

    def close(self) -> None:
        if self.enabled:
            self.p.stop()


def _eval_json(out: Path) -> dict[str, Any] | None:
    """out/eval.json (`jaxwarp eval`, or the end of `jaxwarp train`) when it is
    readable and every evaluated episode finished; else None (a figure over
    unfinished episodes is the zeros they started from, not a level)."""
    try:
        ev = json.loads((out / "eval.json").read_text())
        finished = [figs.get("finished", {"mean": 1.0})["mean"]
                    for figs in ev["matchups"].values()]
        ev["gain"].items()
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return ev if all(f == 1.0 for f in finished) else None


def _random_levels(out: Path) -> dict[str, float]:
    """Curve name -> its level with every group random, from out/eval.json
    (see `_eval_json`); {} if none."""
    ev = _eval_json(out)
    if ev is None:
        return {}
    rand = ev["matchups"]["random"]
    levels = {f"{k[:-len('/return')]}/episode_return": v["mean"] for k, v in rand.items()
              if k.endswith("/return")}
    levels.update({k: v["mean"] for k, v in rand.items()
                   if not k.endswith("/return") and k != "finished"})
    return levels


def _plural(group: str) -> str:
    """tagger -> taggers, adversary -> adversaries, agent -> agents."""
    if group.endswith("y") and group[-2:-1] not in tuple("aeiou"):
        return group[:-1] + "ies"
    return group if group.endswith("s") else group + "s"


def _trained_groups(out: Path, groups: list[str]) -> dict[str, bool]:
    """group -> whether the run updates its policy (config.yaml; True where unreadable)."""
    try:
        config, _ = _read_saved_config(out)
        return {g: bool(config.policy(g).train) for g in groups}
    except Exception:  # noqa: BLE001 - labels only; the curve needs no config
        return {g: True for g in groups}


def _reference_lines(ev: Mapping[str, Any] | None, curve: str, groups: list[str],
                     trained: Mapping[str, bool]) -> list[tuple[float, str]]:
    """(level, label) of the eval levels that match `curve`, which was
    recorded with every group playing its training policy.

    One group: the uniformly random policy. Two groups: the curve's group
    random against the other's policy at the end of training (the level its
    curve would have without learning, where the other group's curve moved
    too); for a metric of the pair (e.g. tags), each group random against the
    other's policy. More groups: none (eval has no such matchup).
    """
    if ev is None:
        return []
    m = ev["matchups"]
    key = f"{curve[:-len('/episode_return')]}/return" if curve.endswith("/episode_return") \
        else curve
    if len(groups) == 1:
        fig = m.get("random", {}).get(key)
        return [(fig["mean"], f"random {_plural(groups[0])} (jaxwarp eval)")] if fig else []
    if len(groups) != 2:
        return []

    def policy_words(h: str) -> str:
        return f"trained {_plural(h)}" if trained.get(h, True) else \
            f"{_plural(h)}' fixed (untrained) policy"

    own = curve[:-len("/episode_return")] if curve.endswith("/episode_return") else None
    lines = []
    for g in groups:  # g random, the other group playing its final policy
        if own is not None and g != own:
            continue
        h = groups[1] if g == groups[0] else groups[0]
        fig = m.get(f"{h} trained", {}).get(key)
        if fig is not None:
            lines.append((fig["mean"], f"random {_plural(g)} vs {policy_words(h)}"))
    return lines


def _eval_title(ev: Mapping[str, Any] | None, curve: str, groups: list[str]) -> str:
    """The curve's name, what it plays against, and eval's figure against
    random opponents (eval.json) where there is one for this group."""
    own = curve[:-len("/episode_return")] if curve.endswith("/episode_return") else None
    others = [h for h in groups if h != own]
    title = curve
    if own is not None and len(groups) > 1:
        title += f" (vs training {' and '.join(_plural(h) for h in others)})"
    if ev is None or own is None or own not in ev.get("gain", {}):
        return title
    s = ev["gain"][own]
    who = "vs random " + " and ".join(_plural(h) for h in others) if others else "vs random"
    seeds = ev.get("seeds", 1)
    over = f", {seeds} seeds" if seeds > 1 else ""
    return (f"{title}\neval {who} (update {ev.get('update', '?')}{over}): trained "
            f"{s['trained']:.3g} vs random {s['random']:.3g}, {s['delta']:+.3g} ± "
            f"{s['ci95']:.2g}")


def _seed_band(vals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """vals f64[updates, seeds] (NaN before a seed's first finished episode)
    -> (mean, low, high) f64[updates]: the mean over the seeds that have a
    value and its 95% interval (Student's t, n - 1 degrees of freedom; NaN
    where fewer than 2 seeds have one)."""
    from scipy import stats  # a dependency of jax

    n = np.sum(np.isfinite(vals), axis=1)
    with warnings.catch_warnings():  # all-NaN rows before the first finished episode
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(vals, axis=1)
        sd = np.nanstd(vals, axis=1, ddof=1)
    half = np.full(mean.shape, np.nan)
    ok = n >= 2
    half[ok] = stats.t.ppf(0.975, n[ok] - 1) * sd[ok] / np.sqrt(n[ok])
    return mean, mean - half, mean + half


def plot_run(out_dir: str | Path) -> Path | None:
    """learning_curve.png: episode return per policy group (mean over seeds,
    shaded 95% interval over seeds with ``--seeds`` >= 2) and env-steps/s
    against env-steps. Every reference line says what it is (see
    `_reference_lines`: for groups trained against each other, a group random
    against the other's trained policy, not random against random), and each
    group's title gives eval's figure against random opponents when
    out/eval.json exists. Returns None without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    out = Path(out_dir)
    rows = read_metrics(out)
    if not rows:
        return None
    curves = sorted(k for k in rows[0] if k.endswith("episode_return")
                    or k == "tags_per_episode")
    groups = [k[:-len("/episode_return")] for k in curves if k.endswith("/episode_return")]
    updates = sorted({int(r["update"]) for r in rows})
    by_update: dict[int, list[dict[str, float]]] = {u: [] for u in updates}
    for r in rows:
        by_update[int(r["update"])].append(r)
    steps = np.array([by_update[u][0]["env_steps"] for u in updates])
    seeds = sorted({int(r.get("seed", 0)) for r in rows})
    ev = _eval_json(out)
    trained = _trained_groups(out, groups)
    fig, axes = plt.subplots(1, len(curves) + 1, figsize=(5.2 * (len(curves) + 1), 4.0))
    for ax, k in zip(axes, curves):
        vals = np.array([[r[k] for r in by_update[u]] for u in updates], dtype=float)
        mean, lo, hi = _seed_band(vals)
        ax.plot(steps, mean, label=f"mean of {len(seeds)} seeds" if len(seeds) > 1
                else f"seed {seeds[0]}")
        if len(seeds) > 1:
            ax.fill_between(steps, lo, hi, alpha=0.25, label="95% interval over seeds")
        styles = iter(("--", ":", "-."))
        for level, label in _reference_lines(ev, k, groups, trained):
            ax.axhline(level, color="grey", linestyle=next(styles), label=label)
        ax.legend(fontsize=7)
        ax.set_title(_eval_title(ev, k, groups), fontsize=8)
        ax.set_xlabel("env steps (per seed)")
        ax.grid(alpha=0.3)
    axes[-1].plot(steps, [by_update[u][0]["env_steps_per_s"] for u in updates])
    axes[-1].set_title("env-steps/s (all seeds)", fontsize=8)
    axes[-1].set_xlabel("env steps (per seed)")
    axes[-1].grid(alpha=0.3)
    fig.tight_layout()
    path = out / PLOT_FILE
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
