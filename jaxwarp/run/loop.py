"""The host loop of a training run: jitted chunks, progress, logs, checkpoints, plot.

The device program is `trainer.run` over ``chunk_updates`` updates, vmapped
over seeds and jitted once with the runner state donated; between chunks the
host writes metrics (JSONL, CSV, TensorBoard; `metrics`), shows progress and
saves an Orbax checkpoint every ``checkpoint_every`` updates (`checkpoint`).
Nothing syncs per env step. ``resume=True`` restores the latest checkpoint
of an output folder and continues; because every update is a pure function
of the restored state, the resumed run reproduces the uninterrupted one. At
the end the learning curve is drawn (`plot`).

`train_run` reads top to bottom: check the arguments, start
``jax.distributed`` (`_init_distributed`), take the folder and build the run
(`_start`: lock, config, trainer, restore or init, compile, config.yaml),
train chunk by chunk (`_train`: stop decisions, NaN check, checkpoints,
Ctrl-C), then the summary and the plot.

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
import dataclasses
import math
import os
import shutil
import signal
import sys
import threading
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxwarp.errors import (
    CheckpointError,
    CheckpointWarning,
    NonFiniteError,
    RunError,
    RunLockedError,
    StorageError,
    storage_fault,
)
from jaxwarp.run import distributed
from jaxwarp.run.checkpoint import (
    CONFIG_FILE,
    abstract_state,
    checkpointer,
    quiet_orbax,
    read_saved_config,
    restore_intact,
    save_checkpoint,
    saved_distributed,
    write_config,
)
from jaxwarp.run.metrics import (
    METRICS_CSV,
    METRICS_JSONL,
    SUMMARY_FILE,
    MetricWriter,
    NoWriter,
    final_means,
    final_rows,
    is_headline,
    metric_rows,
    read_metrics,
    write_summary,
)
from jaxwarp.run.plot import PLOT_FILE, plot_run
from jaxwarp.train import fused
from jaxwarp.train.compile import jit
from jaxwarp.train.config import ConfigError, TrainConfig, validate
from jaxwarp.train.rollout import env_metric_names
from jaxwarp.train.seeds import seed_keys
from jaxwarp.train.trainer import RunnerState, Trainer, build_trainer
from jaxwarp.units import device_name, rate_text

# The run's files and errors, where callers have always found them.
__all__ = [
    "CONFIG_FILE", "LOCK_FILE", "METRICS_CSV", "METRICS_JSONL", "PLOT_FILE", "SUMMARY_FILE",
    "CheckpointError", "CheckpointWarning", "NonFiniteError", "RunError", "RunLockedError",
    "RunResult", "StorageError", "plot_run", "read_metrics", "train_run",
]

LOCK_FILE = ".lock"


@dataclass
class RunResult:
    """What a run leaves behind (also on disk under `out_dir`)."""

    out_dir: Path
    state: RunnerState  # final state, leading [seeds] axis
    metrics: list[dict[str, float]]  # one row per (update, seed), this process's rows
    summary: dict[str, Any]


@dataclass
class _Run:
    """A run being trained: set up by `_start`, advanced by `_train`."""

    out: Path
    config: TrainConfig
    seeds: int
    trainer: Trainer
    proc: distributed.ProcessInfo
    lock: Any  # _RunLock, or _NoLock on processes other than 0
    t0: float  # perf_counter at the start of restore/compile: wall_s, time_limit_s
    seed_ids: list[int] = field(default_factory=list)
    env_metrics: tuple[str, ...] = ()  # the env's episode metrics (headline columns)
    rs: Any = None  # RunnerState with a leading [seeds] axis
    done_updates: int = 0
    # The update the newest checkpoint holds (None: none yet), and whether `rs`
    # is the state after exactly `done_updates` updates (not while a chunk is
    # in flight: its input was donated and its rows are not logged yet).
    saved_at: int | None = None
    settled: bool = True
    compiled: Any = None  # run_chunk compiled for `chunk` updates
    compile_s: float = 0.0
    run_s: float = 0.0
    mngr: Any = None  # Orbax CheckpointManager
    writer: Any = None  # MetricWriter, or NoWriter on processes other than 0
    rows: list[dict[str, float]] = field(default_factory=list)  # this process's rows
    stopped_early: bool = False
    failure: NonFiniteError | None = None
    created: bool = False  # out did not exist before this call (process 0)

    @property
    def primary(self) -> bool:
        return self.proc.process_id == 0

    @property
    def num_updates(self) -> int:
        return self.trainer.derived.num_updates

    @property
    def chunk(self) -> int:
        return min(self.config.chunk_updates, self.num_updates)



def train_run(config: TrainConfig | None = None, out_dir: str | Path = "runs/latest",
              seeds: int = 1, resume: bool = False, progress: bool | str = True,
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
    the run can be resumed later. progress: True, a progress bar when stdout
    is a terminal, else one line per chunk; "lines": one line per chunk;
    False: nothing. devices: when given, overrides the
    config's ``devices`` (also on resume: the saved state is restored onto the
    new mesh; config.yaml keeps the value the run started with).

    Several processes: call it in every process with the same arguments
    (``jax.distributed`` is initialized first when config.distributed or
    JAX_COORDINATOR_ADDRESS asks for it); see the module docstring.

    Reliability: the run holds an exclusive lock on out_dir/.lock (released
    on exit, also when killed; the file is removed when the run ends), so a
    second run on the same folder fails with RunLockedError. A first Ctrl-C
    stops the run at the end of the current chunk and checkpoints it (a
    second stops at once; any during the build and compile stop the run
    right after the compile); KeyboardInterrupt is raised after the checkpoint
    is written. A resume that finds no checkpoint starts from update 1 with
    a CheckpointWarning saying so. config.yaml is written once training starts; a
    folder this call created is removed again if the run fails before. A
    resumed run falls back past unreadable checkpoints (CheckpointWarning
    naming each; moved to checkpoints_corrupt/) and raises CheckpointError
    if none is intact. NaN/inf in a loss or in the parameters stops the run
    with NonFiniteError naming the update; no checkpoint is written after it.
    """
    out = Path(out_dir)
    _check_arguments(out, config, seeds, resume)
    # Ctrl-C from here on sets a flag (a KeyboardInterrupt raised inside XLA's
    # compiler or a gc callback crashes or is swallowed): the run stops at the
    # first chunk boundary, right after compiling when pressed before.
    ctrl_c = _CtrlC()
    ctrl_c.install()
    try:
        # Before anything touches a jax backend (a multi-host run starts here).
        proc = _init_distributed(out, config)
        # Whatever the run could not write (the named places below say what).
        with quiet_orbax(), _OutOfMemory() as oom, _writing(out, "the run's files"):
            run = oom.run = _start(out, config, seeds, resume, devices, env, models, proc,
                                   progress)
            _train(run, progress, stop_after_updates, time_limit_s, ctrl_c)
    finally:
        ctrl_c.uninstall()
    with quiet_orbax(), _writing(out, "the run's files"):
        summary = _summary(run)
        if run.primary:
            with _writing(out, SUMMARY_FILE):
                write_summary(out, summary)
        if run.failure is not None:
            raise run.failure
        if run.done_updates == run.num_updates and run.primary:
            with _writing(out, PLOT_FILE):
                plot_run(out, run.env_metrics)
    return RunResult(out_dir=out, state=run.rs, metrics=run.rows, summary=summary)


def _check_arguments(out: Path, config: TrainConfig | None, seeds: int, resume: bool) -> None:
    if resume and not (out / CONFIG_FILE).exists():
        raise FileNotFoundError(f"--resume {out}: no {CONFIG_FILE} there (not a jaxwarp run)")
    if not resume and config is None:
        raise ValueError("train_run: config is required unless resume=True")
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1; got {seeds}")


def _init_distributed(out: Path, config: TrainConfig | None) -> distributed.ProcessInfo:
    """`distributed.maybe_initialize` as the config (or the saved one) asks."""
    try:
        return distributed.maybe_initialize(
            config.distributed if config is not None else saved_distributed(out))
    except RuntimeError as e:  # one line for the CLI, naming the variables to set
        raise RunError(str(e)) from None


class _Handshake:
    """Before training, the processes of a multi-process run wait for each
    other in `distributed.all_ok`; one that fails before it is ready tells
    the others (`fail`), so that they stop instead of waiting."""

    def __init__(self, many: bool):
        self.many = many
        self.ready = False  # this process got past its checks

    def fail(self) -> None:
        if self.many and not self.ready:
            with contextlib.suppress(Exception):
                distributed.all_ok(False)

    def all_ready(self) -> bool:
        self.ready = True
        return distributed.all_ok(True)


def _start(out: Path, config: TrainConfig | None, seeds: int, resume: bool,
           devices: int | None, env: Any, models: Mapping[str, Any] | None,
           proc: distributed.ProcessInfo, progress: bool) -> _Run:
    """Takes out (folder, lock), resolves the config, builds the trainer,
    restores or initializes the state, compiles the chunk and writes
    config.yaml. On failure the lock is released and a folder this call
    created is removed again (unless config.yaml was written)."""
    primary = proc.process_id == 0
    handshake = _Handshake(proc.num_processes > 1)
    created = primary and not out.exists()  # only process 0 creates / removes the folder
    lock = _take_folder(out, primary, handshake)
    started = False  # config.yaml written: the folder holds a run from here on
    try:
        config, seeds = _run_config(out, config, seeds, resume, devices, primary)
        trainer = build_trainer(config, env=env, models=models)
        if not handshake.all_ready():
            raise RunError("another process of this run failed to start (see its error); "
                           "this one stops too")
        run = _Run(out=out, config=config, seeds=seeds, trainer=trainer, proc=proc, lock=lock,
                   t0=time.perf_counter(), seed_ids=list(range(config.seed, config.seed + seeds)),
                   env_metrics=env_metric_names(trainer.env, config.num_envs), created=created)
        _check_memory(run)
        _restore_or_init(run, resume, progress)
        run.compiled = _chunk_fn(trainer, run.chunk, config.deterministic).lower(run.rs).compile()
        run.compile_s = time.perf_counter() - run.t0
        if not resume and primary:
            with _writing(out, CONFIG_FILE):
                write_config(out, config, seeds)
        started = True
        with _writing(out, "checkpoints/"):
            run.mngr = checkpointer(out)
        with _writing(out, f"{METRICS_JSONL} and {METRICS_CSV}"):
            run.writer = MetricWriter(out, keep_until=run.done_updates if resume else None) \
                if primary else NoWriter()
    except BaseException as e:
        handshake.fail()
        lock.release()
        if created and (not started or _out_of_memory_text(e)):
            shutil.rmtree(out, ignore_errors=True)
        raise
    return run


def _take_folder(out: Path, primary: bool, handshake: _Handshake) -> Any:
    """Creates out and takes its lock (process 0; the others take none)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        handshake.fail()
        fault = storage_fault(e)
        raise (StorageError if fault else RunError)(
            f"cannot create the output folder {out}: {fault or e}") from None
    try:
        with _writing(out, LOCK_FILE):
            return _RunLock(out) if primary else _NoLock()
    except BaseException:
        handshake.fail()
        raise


def _run_config(out: Path, config: TrainConfig | None, seeds: int, resume: bool,
                devices: int | None, primary: bool) -> tuple[TrainConfig, int]:
    """(config, seeds) of the run: the saved ones on resume (a given config must
    equal the saved one up to ``devices``), with `devices` when given."""
    if resume:
        saved_config, seeds = read_saved_config(out)
        if config is not None and dataclasses.replace(config, devices=saved_config.devices) \
                != saved_config:
            raise ConfigError(f"--resume {out}: the given config differs from the saved one; "
                              "resume takes its config from the run folder")
        config = saved_config if config is None else dataclasses.replace(
            saved_config, devices=config.devices)
    elif primary and _holds_run(out):
        raise FileExistsError(f"{out} already holds a run; pass --resume {out} to continue "
                              "it or choose another --out")
    else:  # config.yaml must work from any folder (eval --run, --resume)
        config = _absolute_env_module(config)
    if devices is not None:
        config = dataclasses.replace(config, devices=devices)
        validate(config)
    return config, seeds


def _absolute_env_module(config: TrainConfig) -> TrainConfig:
    """The config with a relative ``env_module`` .py path made absolute (a
    module name stays as it is)."""
    m = config.env_module
    if m and m.endswith(".py") and not os.path.isabs(m) and os.path.exists(m):
        return dataclasses.replace(config, env_module=os.path.abspath(m))
    return config


def _chunk_fn(trainer: Trainer, n: int, deterministic: bool) -> Any:
    """The jitted program of `n` updates of every seed, the state donated
    (deterministic: the config's, see `compile.jit`)."""
    return jit(jax.vmap(lambda rs: trainer.run(rs, n)), deterministic, donate_argnums=0)


def _check_memory(run: _Run) -> None:
    """RunError naming the config keys when the run's arrays alone cannot fit
    in the memory of its platform (`jaxwarp.memory.memory_limit`: the host's RAM,
    or the GPUs' together), before anything is allocated. A lower bound, from
    shapes only: the runner state (parameters and optimiser state, the envs'
    state and observations) and one rollout's trajectory, num_envs x num_steps
    x agents x (an observation and 8 floats: action, log-prob, value, reward,
    done, advantage, return, mask), for every seed."""
    from jaxwarp.memory import memory_limit

    keys = jax.ShapeDtypeStruct((run.seeds, 2), np.uint32)
    try:
        shapes = jax.eval_shape(jax.vmap(run.trainer.init), keys)
    except Exception:  # noqa: BLE001  (the init itself reports it, with its own message)
        return

    def size(tree: Any) -> int:
        return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize
                   for x in jax.tree.leaves(tree))

    c = run.config
    model = size((shapes.params, shapes.opt_state))
    env = size((shapes.env_state, shapes.obs))
    agents = int(run.trainer.env.num_agents)
    trajectory = c.num_steps * (size(shapes.obs) + run.seeds * c.num_envs * agents * 8 * 4)
    backend = run.trainer.env.backend
    platform = {"cuda": "gpu", "cpu": "cpu"}.get(backend) or jax.default_backend()
    limit = memory_limit(platform)
    need = model + env + trajectory
    if limit is None or need <= limit:
        return
    hidden = ", ".join(f"policies.{g}.hidden_sizes" for g, _ in c.policies) or "hidden_sizes"
    where = "the host's memory" if platform == "cpu" else f"the {platform} devices' memory"
    raise RunError(
        f"the run needs at least {need / 1e9:.1f} GB, more than {where} ({limit / 1e9:.1f} GB): "
        f"parameters and optimiser state {model / 1e9:.1f} GB ({hidden}), env state "
        f"{env / 1e9:.1f} GB (num_envs={c.num_envs}), one rollout {trajectory / 1e9:.1f} GB "
        f"(num_envs x num_steps={c.num_steps}) x {run.seeds} seed(s); lower them")


def _out_of_memory_text(e: BaseException) -> str | None:
    """XLA's out-of-memory error (RESOURCE_EXHAUSTED, not a full disk) as one line."""
    if isinstance(e, RunError) or storage_fault(e) is not None:
        return None
    text = " ".join(str(e).split())
    if "RESOURCE_EXHAUSTED" not in text and not isinstance(e, MemoryError):
        return None
    return text[:200] + ("..." if len(text) > 200 else "")


class _OutOfMemory:
    """XLA running out of device or host memory (compiling or running a chunk)
    as a one-line RunError naming the keys that size the run; a folder that
    this run created and that holds no checkpoint yet is removed (`run`: set
    once the run is started)."""

    def __init__(self) -> None:
        self.run: _Run | None = None

    def __enter__(self) -> _OutOfMemory:
        return self

    def __exit__(self, kind: Any, e: Any, tb: Any) -> bool:
        text = None if not isinstance(e, Exception) else _out_of_memory_text(e)
        if text is None:
            return False
        run = self.run
        if run is not None and run.created and run.primary and run.saved_at is None:
            shutil.rmtree(run.out, ignore_errors=True)  # nothing of value in it yet
        raise RunError(f"out of memory ({text}); lower num_envs, num_steps or the policies' "
                       "hidden_sizes") from None


def _restore_or_init(run: _Run, resume: bool, progress: bool) -> None:
    """run.rs: the newest intact checkpoint on resume (run.done_updates its
    update), else the initial state of every seed."""
    keys = seed_keys(run.config.seed, run.seeds)
    if run.trainer.mesh is not None:
        keys = np.asarray(keys)  # host data: the same on every process, replicated by jit
    init = jax.jit(jax.vmap(run.trainer.init))
    out, primary = run.out, run.primary
    # stacklevel 5: the warnings point at train_run's caller.
    restored = restore_intact(out, abstract_state(run.trainer, init, keys), primary,
                              stacklevel=5) if resume else None
    if run.proc.num_processes > 1:  # every process restored the same checkpoint (or none)
        step = -1 if restored is None else restored[0]
        if not distributed.all_ok(step == distributed.same_on_all(step)):
            raise CheckpointError(f"--resume {out}: the processes restored different "
                                  "checkpoints; resume from an intact checkpoint folder")
    if restored is not None:
        run.done_updates, run.rs = restored
        run.saved_at = run.done_updates
        if progress and primary:  # which checkpoint the run continues from
            print(f"resuming {out} from update {run.done_updates}/{run.num_updates} "
                  f"(checkpoint {out / 'checkpoints' / str(run.done_updates)})",
                  file=sys.stderr)
        return
    if resume and primary:  # not silently: the updates logged before are redone
        warnings.warn(f"--resume {out}: no checkpoint was written before the run "
                      f"stopped; it starts from update 1 of {run.num_updates}",
                      CheckpointWarning, stacklevel=4)  # train_run's caller
    run.rs = init(keys)


def _train(run: _Run, progress: bool | str, stop_after_updates: int | None,
           time_limit_s: float | None, ctrl_c: _CtrlC) -> None:
    """Chunks until the run is done, stopped (`_stop_decision`) or non-finite.
    A first Ctrl-C stops at the next chunk boundary (`_CtrlC`); the chunks done
    are checkpointed and KeyboardInterrupt is raised. Releases the lock."""
    bar = _Progress(run.num_updates, run.done_updates, run.trainer.derived.batch_env_steps,
                    progress if run.primary else False, run.env_metrics,
                    agents=int(run.trainer.env.num_agents))
    try:
        ctrl_c.training = True
        while run.done_updates < run.num_updates:
            decision = _stop_decision(run, ctrl_c, stop_after_updates, time_limit_s)
            if decision == 2:
                raise KeyboardInterrupt
            if decision:
                run.stopped_early = True
                break
            if not _train_chunk(run, bar):
                break
    except KeyboardInterrupt:
        failing = True
        _save_interrupted(run, bar)
        raise
    except BaseException:
        failing = True
        raise
    else:
        failing = False
    finally:
        try:
            bar.close()
            with _writing(run.out, "a checkpoint"):
                run.mngr.wait_until_finished()
                run.mngr.close()
            run.writer.close()
        except Exception:
            if not failing:  # else the error that stopped the run is the one to tell
                raise
        finally:
            run.lock.release()


def _stop_decision(run: _Run, ctrl_c: _CtrlC, stop_after_updates: int | None,
                   time_limit_s: float | None) -> int:
    """0 go on, 1 stop (updates or time limit reached), 2 interrupted (Ctrl-C):
    process 0's clock and Ctrl-C decide for all."""
    stop = (stop_after_updates is not None
            and len(run.rows) // run.seeds >= stop_after_updates) \
        or (time_limit_s is not None and time.perf_counter() - run.t0 >= time_limit_s)
    return distributed.same_on_all(2 if ctrl_c.pressed else 1 if stop else 0)


def _train_chunk(run: _Run, bar: _Progress) -> bool:
    """One chunk: run it, log its rows, checkpoint when due. False when a loss
    or the parameters became non-finite (run.failure says where)."""
    n = min(run.chunk, run.num_updates - run.done_updates)
    if n != run.chunk:  # a last, shorter chunk compiles once more: not in its rate
        tc = time.perf_counter()
        run.compiled = _chunk_fn(run.trainer, n, run.config.deterministic).lower(run.rs).compile()
        run.compile_s += time.perf_counter() - tc
    t = time.perf_counter()
    run.settled = False
    run.rs, metrics = run.compiled(run.rs)
    metrics = jax.device_get(metrics)
    finite = np.asarray(metrics.pop("finite")) > 0  # [seeds, n]: one check per chunk
    dt = time.perf_counter() - t
    run.run_s += dt
    rate = n * run.trainer.derived.batch_env_steps * run.seeds / dt
    new = metric_rows(metrics, run.done_updates, run.seed_ids, rate, t - run.t0,
                      t - run.t0 + dt)
    if not finite.all():
        _stop_non_finite(run, new, finite)
        return False
    with _writing(run.out, METRICS_JSONL):
        run.writer.write(new)
    run.rows.extend(new)
    run.done_updates += n
    run.settled = True
    if run.done_updates % run.config.checkpoint_every == 0 \
            or run.done_updates == run.num_updates:
        with _writing(run.out, f"a checkpoint (saving update {run.done_updates})"):
            save_checkpoint(run.mngr, run.done_updates, run.rs)
        run.saved_at = run.done_updates
    bar.advance(n, rate, new)
    return True


def _stop_non_finite(run: _Run, new: list[dict[str, float]], finite: np.ndarray) -> None:
    """Logs the chunk's rows up to the first update with NaN/inf (for
    diagnosis) and sets run.failure naming it; finite: bool[seeds, n]."""
    i = int(np.argmin(finite.all(axis=0)))  # first update with NaN/inf
    bad = [run.seed_ids[s] for s in np.flatnonzero(~finite[:, i])]
    new = new[:(i + 1) * run.seeds]
    with _writing(run.out, METRICS_JSONL):
        run.writer.write(new)
    run.rows.extend(new)
    last = max(run.mngr.all_steps(), default=None)
    run.failure = NonFiniteError(
        f"update {run.done_updates + i + 1}: the loss or the parameters became "
        f"non-finite (NaN/inf) for seed(s) {bad}; training stopped, "
        + (f"checkpoints up to update {last} kept" if last is not None
           else "no checkpoint written")
        + " (lower the learning rate or check env_params)")


def _save_interrupted(run: _Run, bar: _Progress) -> None:
    """Ctrl-C: keeps the last completed chunk as a checkpoint as any other
    (Orbax writes it to a temporary folder and renames it when complete; the
    wait in `_train` lets it finish), so that --resume goes on from it."""
    if run.settled and run.done_updates > 0 and run.saved_at != run.done_updates:
        bar.close()
        if run.primary:
            print(f"jaxwarp train: interrupted; saving a checkpoint at update "
                  f"{run.done_updates}", file=sys.stderr)
        with _writing(run.out, f"a checkpoint (saving update {run.done_updates})"):
            save_checkpoint(run.mngr, run.done_updates, run.rs, force=True)


def _summary(run: _Run) -> dict[str, Any]:
    """summary.json's contents ("final": the headline figures of the last update;
    "error": why the run stopped, after a non-finite update)."""
    all_rows = read_metrics(run.out) if run.primary else run.rows
    batch = run.trainer.derived.batch_env_steps
    steps_done = len(run.rows) // run.seeds * batch * run.seeds
    mesh = run.trainer.mesh
    agents = int(run.trainer.env.num_agents)
    return {
        "env": run.config.env, "backend": run.trainer.env.backend, "seeds": run.seeds,
        "updates": run.done_updates, "num_updates": run.num_updates,
        "env_steps_per_seed": run.done_updates * batch,
        "compile_s": run.compile_s, "run_s": run.run_s,
        "env_steps_per_s": steps_done / run.run_s if run.run_s > 0 else math.nan,
        "agents_per_env": agents,
        "agent_steps_per_s": steps_done * agents / run.run_s if run.run_s > 0 else math.nan,
        "device": device_name(),
        "devices": [str(d) for d in jax.devices()],
        # Devices the envs are split over (all processes) and processes.
        "data_parallel_devices": 1 if mesh is None else int(mesh.size),
        "processes": run.proc.num_processes, "sampler": run.trainer.sampler,
        "rollout": fused.seeds_path(run.trainer.rollout_path, run.trainer.policy,
                                    run.trainer.env, run.trainer.sampler, run.config.num_envs,
                                    run.seeds),
        "model_layers": dict(run.trainer.model_layers or {}),
        "finished": run.done_updates == run.num_updates, "stopped_early": run.stopped_early,
        "final": final_means(all_rows, run.env_metrics),
    } | ({"error": str(run.failure)} if run.failure is not None else {})


@contextlib.contextmanager
def _writing(out: Path, what: str) -> Any:
    """Turns a failed write of `what` (in out) into a one-line StorageError
    when the folder is full, read-only or not ours to write (`storage_fault`,
    also where Orbax or TensorStore wrap the OSError); other errors pass."""
    try:
        yield
    except StorageError:
        raise
    except Exception as e:
        fault = storage_fault(e)
        if fault is None:
            raise
        if fault in ("no space left on device", "disk quota exceeded"):
            hint = (f"the checkpoints already written are kept; free space, then continue "
                    f"with: jaxwarp train --resume {out}")
        else:
            hint = "choose another --out (or copy the folder somewhere writable to resume it)"
        raise StorageError(f"cannot write {what} in {out}: {fault}; {hint}") from None


def _holds_run(out: Path) -> bool:
    """out already has checkpoints or logged metrics of a run."""
    ck, metrics = out / "checkpoints", out / METRICS_JSONL
    return (ck.is_dir() and any(ck.iterdir())) or (metrics.exists()
                                                    and metrics.stat().st_size > 0)


class _Progress:
    """Once per chunk, the rate and the headline figures of the chunk's last
    update: a rich progress bar (progress True and stdout a terminal), or one
    line on stdout (progress "lines", or stdout not a terminal: a log, a
    pipe, a batch job), or nothing (progress False)."""

    def __init__(self, total: int, done: int, batch: int, enabled: bool | str,
                 env_metrics: tuple[str, ...] = (), agents: int = 1):
        self.agents, self.total, self.done = agents, total, done
        self.env_metrics = env_metrics
        self.lines = enabled == "lines" or (bool(enabled) and not _is_tty(sys.stdout))
        self.enabled = bool(enabled) and not self.lines
        if not self.enabled:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.p = Progress(TextColumn("updates"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), TimeRemainingColumn(),
                          TextColumn("{task.fields[info]}"))
        self.task = self.p.add_task("train", total=total, completed=done, info="compiling")
        self.p.start()

    def advance(self, n: int, rate: float, rows: list[dict[str, float]]) -> None:
        self.done += n
        if not (self.enabled or self.lines):
            return
        final = final_rows(rows)
        parts = [rate_text(rate, self.agents, device_name())]
        for k in sorted(final[0]):
            if is_headline(k, self.env_metrics):
                vals = [r[k] for r in final if not math.isnan(r[k])]
                # NaN until an env finishes its first episode: said, not shown as nan
                parts.append(f"{k.replace('/episode_return', '')} {np.mean(vals):.3g}" if vals
                             else f"{k.replace('/episode_return', '')} - (no episode ended yet)")
        if self.lines:
            print(f"update {self.done}/{self.total}  " + "  ".join(parts), flush=True)
        else:
            self.p.update(self.task, advance=n, info="  ".join(parts))

    def close(self) -> None:
        if self.enabled:
            self.p.stop()


def _is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced or closed stream
        return False


class _CtrlC:
    """Ctrl-C (SIGINT) only sets `pressed`: the training loop reads it at the
    next chunk boundary, checkpoints the chunks done and raises
    KeyboardInterrupt there. Before training (building, restoring and
    compiling: `training` False) every Ctrl-C only sets it, so the run stops
    right after the compile (an interrupt inside XLA's compiler is not safe).
    During training a second Ctrl-C interrupts at once (the previous handler
    is back). Installed only in the main thread over Python's default
    handler; elsewhere KeyboardInterrupt arrives as usual (train_run then
    checkpoints the last completed chunk if no chunk is in flight)."""

    def __init__(self) -> None:
        self.pressed = False
        self.training = False
        self._previous: Any = None

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread() \
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        first, self.pressed = not self.pressed, True
        if not self.training:
            if first:
                print("jaxwarp train: interrupt: stopping once the program is compiled",
                      file=sys.stderr, flush=True)
            return
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
