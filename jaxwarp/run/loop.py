"""The host loop of a training run: jitted chunks between which the run shell's
parts do their work.

The device program is `trainer.run` over ``chunk_updates`` updates, vmapped
over seeds and jitted once with the runner state donated; between chunks the
host writes metrics (JSONL, CSV, TensorBoard; `metrics`), shows progress
(`progress`) and saves an Orbax checkpoint every ``checkpoint_every`` updates
(`checkpoint`). Nothing syncs per env step. ``resume=True`` restores the
latest checkpoint of an output folder and continues (`resume`). At the end
the summary is written and the learning curve drawn (`summary`, `plot`).

`train_run` reads top to bottom: check the arguments, take Ctrl-C over
(`signals`), start the run (`_start`: ``jax.distributed`` (`handshake`),
folder and lock, config, trainer, memory check, restore or init, compile,
config.yaml), train chunk by chunk (`_train`: stop rules, NaN check,
checkpoints, Ctrl-C; `stop`), then the summary and the plot. Running out of
memory or disk is one line (`_guarded`: `memory_guard`, `storage`).

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
import shutil
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from jaxwarp.errors import (
    CheckpointError,
    CheckpointWarning,
    NonFiniteError,
    RunError,
    RunLockedError,
    StorageError,
)
from jaxwarp.run import distributed
from jaxwarp.run.checkpoint import (
    CONFIG_FILE,
    checkpointer,
    quiet_orbax,
    read_after_training,
    read_saved_config,
    read_saved_sweep,
    save_checkpoint,
    write_config,
)
from jaxwarp.run.handshake import Handshake, init_distributed
from jaxwarp.run.lock import LOCK_FILE, take_folder
from jaxwarp.run.member_chunks import compile_in_memory
from jaxwarp.run.memory_guard import OutOfMemory, check_memory, out_of_memory_text
from jaxwarp.run.metrics import (
    METRICS_CSV,
    METRICS_JSONL,
    SUMMARY_FILE,
    MetricWriter,
    NoWriter,
    metric_rows,
    read_metrics,
)
from jaxwarp.run.plot import PLOT_FILE, plot_run
from jaxwarp.run.progress import Progress
from jaxwarp.run.resume import absolute_env_module, restore_or_init, run_config, run_sweep
from jaxwarp.run.signals import CtrlC
from jaxwarp.run.state import Run, RunResult
from jaxwarp.run.stop import INTERRUPTED, save_interrupted, stop_decision, stop_non_finite
from jaxwarp.run.summary import conclude
from jaxwarp.run.sweep_plan import Placement, SweepPlan, place_run
from jaxwarp.storage import writing
from jaxwarp.train.compile import compiler_options, jit
from jaxwarp.train.config import TrainConfig, derived, setting_configs
from jaxwarp.train.mesh import MEMBERS
from jaxwarp.train.sweep import Sweep
from jaxwarp.train.trainer import trainer_for
from jaxwarp.units import device_name

# The run's files and errors, where callers have always found them.
__all__ = [
    "CONFIG_FILE", "LOCK_FILE", "METRICS_CSV", "METRICS_JSONL", "PLOT_FILE", "SUMMARY_FILE",
    "CheckpointError", "CheckpointWarning", "NonFiniteError", "RunError", "RunLockedError",
    "RunResult", "StorageError", "plot_run", "read_metrics", "train_run",
]

# Names that tests import from here, from before the run shell's parts had modules.
_Progress, _absolute_env_module = Progress, absolute_env_module

# Ctrl-C's notices: before training (building, restoring, compiling), then during it.
_COMPILING = "jaxwarp train: interrupt: stopping once the program is compiled"
_TRAINING = ("jaxwarp train: interrupt: stopping after the current chunk to save a "
             "checkpoint (Ctrl-C again stops at once, without it)")


def train_run(config: TrainConfig | None = None, out_dir: str | Path = "runs/latest",
              seeds: int = 1, resume: bool = False, progress: bool | str = True,
              stop_after_updates: int | None = None, time_limit_s: float | None = None,
              env: Any = None, models: Mapping[str, Any] | None = None,
              devices: int | None = None, after_training: Mapping[str, Any] | None = None,
              sweep: Sweep | None = None) -> RunResult:
    """Trains `seeds` seeds of `config` (seed, seed+1, ...) in one program; with
    `sweep`, each of its settings with those seeds (docs/sweeps.md). out_dir
    receives config.yaml, metrics.jsonl/.csv, tensorboard/ (with
    tensorboardX), checkpoints/ (Orbax), summary.json and learning_curve.png
    (with matplotlib). resume: continue the run saved in out_dir (its
    config.yaml; `config` None or equal to it but for devices, or for a larger
    total_env_steps: extends the run, `resume`). stop_after_updates: stop
    early after that many updates of this process (at a chunk boundary, as
    if killed; used by tests). time_limit_s: stop at the first chunk boundary
    after that many seconds (compile included). progress: True, a progress
    bar when stdout is a terminal, else one line per chunk; "lines": one line
    per chunk; False: nothing. devices: when given, overrides the config's
    ``devices`` (also on resume: the saved state is restored onto the new
    mesh; config.yaml keeps the value the run started with). after_training:
    the CLI's ``eval_episodes``, kept in config.yaml for a resume.

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
    ctrl_c = CtrlC(_COMPILING)
    ctrl_c.install()
    try:
        run = _start(out, config, seeds, resume, devices, env, models, progress,
                     after_training, sweep)
        with _guarded(out, run):
            _train(run, progress, stop_after_updates, time_limit_s, ctrl_c)
    finally:
        ctrl_c.release()
    with quiet_orbax(), writing(out, "the run's files"):
        summary = conclude(run)
    return RunResult(out_dir=out, state=run.rs, metrics=run.rows, summary=summary)


def _check_arguments(out: Path, config: TrainConfig | None, seeds: int, resume: bool) -> None:
    if resume and not (out / CONFIG_FILE).exists():
        raise FileNotFoundError(f"--resume {out}: no {CONFIG_FILE} there (not a jaxwarp run)")
    if not resume and config is None:
        raise ValueError("train_run: config is required unless resume=True")
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1; got {seeds}")


def _start(out: Path, config: TrainConfig | None, seeds: int, resume: bool,
           devices: int | None, env: Any, models: Mapping[str, Any] | None,
           progress: bool | str, after_training: Mapping[str, Any] | None = None,
           sweep: Sweep | None = None) -> Run:
    """Starts ``jax.distributed`` where asked, places a new sweep and checks it
    whole (`sweep_plan.place_run`), takes out (folder, lock), resolves the
    config, places the run (the env on its devices), builds the trainer,
    restores or initializes the state, compiles the chunk and writes
    config.yaml. On failure the lock is released and a folder this call
    created is removed again (unless config.yaml was written)."""
    # Before anything touches a jax backend (a multi-host run starts here); not
    # `_guarded`: a failed start of jax is no fault of the run's files.
    proc = init_distributed(out, config)
    primary = proc.process_id == 0
    handshake = Handshake(proc.num_processes > 1)
    with _guarded(out):
        # A new sweep's bad input is refused before its folder exists.
        placed = _place_new(config, seeds, devices, sweep, env, handshake) \
            if sweep and not resume else None
        created = primary and not out.exists()  # only process 0 creates / removes the folder
        lock = take_folder(out, primary, handshake)
        started = False  # config.yaml written: the folder holds a run from here on
        try:
            config, seeds = run_config(out, config, seeds, resume, devices, primary)
            d = derived(config)  # the run's length and minibatch layout, computed once
            sweep = run_sweep(out, sweep, resume)  # a resumed sweep: the saved one
            if placed is None:  # else a new sweep's, placed before its folder existed
                members = setting_configs(config, sweep.settings() if sweep else [])
                placed = place_run(config, d, env, seeds, sweep, members)
            # A sweep's trainer has no env mesh: its runs split over its layout's
            # devices, not each run's envs (`devices` changes nothing derived() holds).
            trainer = trainer_for(dataclasses.replace(config, devices=1) if sweep else config,
                                  d, placed.env, placed.mesh, models)
            run = _record(out, config, seeds, placed.plan, trainer, proc, lock, created)
            if not handshake.all_ready():
                raise RunError("another process of this run failed to start (see its "
                               "error); this one stops too")
            _prepare(run, resume, progress)
            if primary:
                _write_config(out, config, seeds, resume, after_training, sweep)
            started = True
            _open_outputs(run, resume)
        except BaseException as e:
            handshake.fail()
            lock.release()
            if created and (not started or out_of_memory_text(e)):
                shutil.rmtree(out, ignore_errors=True)
            raise
    return run


def _place_new(config: TrainConfig, seeds: int, devices: int | None, sweep: Sweep, env: Any,
               handshake: Handshake) -> Placement:
    """`place_run` of a new sweep (with `devices` when given); a failure tells
    the other processes first."""
    try:
        if devices is not None:
            config = dataclasses.replace(config, devices=devices)
        members = setting_configs(config, sweep.settings())
        return place_run(config, derived(config), env, seeds, sweep, members)
    except BaseException:
        handshake.fail()
        raise


def _record(out: Path, config: TrainConfig, seeds: int, plan: SweepPlan | None, trainer: Any,
            proc: Any, lock: Any, created: bool) -> Run:
    """The run's record around its built trainer."""
    settings = plan.settings if plan else []
    return Run(out=out, config=config, seeds=seeds, trainer=trainer, proc=proc, lock=lock,
               t0=time.perf_counter(), settings=settings,
               seed_ids=list(range(config.seed, config.seed + seeds)) * max(1, len(settings)),
               env_metrics=trainer.env_metrics, created=created,
               layout=plan.layout if plan else None)


def _prepare(run: Run, resume: bool, progress: bool | str) -> None:
    """The memory check (a sweep too big: chunks of its runs), the state
    (restored or initial) and the first chunk's program compiled."""
    chunks = check_memory(run)  # a sweep too big for the memory: chunks of its runs
    run.member_mesh = run.layout.mesh if run.layout and not chunks else None
    restore_or_init(run, resume, progress)
    run.compiled = compile_in_memory(run, chunks, _compile, progress)
    run.compile_s = time.perf_counter() - run.t0


def _open_outputs(run: Run, resume: bool) -> None:
    """The checkpoint manager and (process 0) the metric files."""
    with writing(run.out, "checkpoints/"):
        run.mngr = checkpointer(run.out)
    with writing(run.out, f"{METRICS_JSONL} and {METRICS_CSV}"):
        run.writer = MetricWriter(run.out, keep_until=run.done_updates if resume
                                  else None) if run.primary else NoWriter()


@contextlib.contextmanager
def _guarded(out: Path, run: Run | None = None) -> Iterator[None]:
    """Whatever the run could not write (the named places inside say what),
    XLA out of memory (`run`, once started: its folder is removed while it
    holds no checkpoint) and Orbax's expected noise, each as one line."""
    with quiet_orbax(), OutOfMemory() as oom, writing(out, "the run's files"):
        oom.run = run
        yield


def _write_config(out: Path, config: TrainConfig, seeds: int, resume: bool,
                  after_training: Mapping[str, Any] | None, sweep: Sweep | None) -> None:
    """config.yaml of a new run; of a resumed one again when it extends the run
    or gives the settings of the steps after training (the others kept)."""
    if resume:
        saved, seeds = read_saved_config(out)  # devices: the value the run started with
        kept = dataclasses.replace(saved, total_env_steps=config.total_env_steps)
        if kept == saved and not after_training:
            return
        config, after_training = kept, read_after_training(out) | dict(after_training or {})
        sweep = read_saved_sweep(out)
    with writing(out, CONFIG_FILE):
        write_config(out, config, seeds, after_training, sweep)


def _compile(run: Run, n: int) -> Any:
    """The program of `n` updates compiled: over every run at once, or, for a
    sweep in chunks of its runs, over one chunk and run on each in turn. The
    XLA options it got (`compile.compiler_options`: the config's
    `deterministic` and the runs each device holds) go to `run`, for
    summary.json."""
    chunks = run.member_chunks
    mesh, rs = ((run.member_mesh, run.rs) if chunks is None
                else (chunks.mesh, chunks.shapes(run.rs)))
    members = max(jax.tree.leaves(rs)[0].shape[0] // (1 if mesh is None else mesh.size), 1)
    run.compiler_options = compiler_options(run.config.deterministic, members)
    compiled = _chunk_fn(run, n, mesh, members).lower(rs).compile()
    return compiled if chunks is None else chunks.over(compiled)


def _chunk_fn(run: Run, n: int, mesh: Any, members: int) -> Any:
    """The jitted program of `n` updates of every seed (and setting), the state
    donated (the config's `deterministic` and the `members` runs on each
    device, see `compile.jit`); a sweep over several devices runs whole runs
    on each device (`shard_map` over its member `mesh`: no collective between
    them)."""
    step = jax.vmap(lambda rs: run.trainer.run(rs, n))
    if mesh is not None:
        # check_vma off: the env and sampler custom calls carry no varying-axis rule.
        step = jax.shard_map(step, mesh=mesh, in_specs=P(MEMBERS),
                             out_specs=P(MEMBERS), check_vma=False)
    return jit(step, run.config.deterministic, members=members, donate_argnums=0)


def _train(run: Run, progress: bool | str, stop_after_updates: int | None,
           time_limit_s: float | None, ctrl_c: CtrlC) -> None:
    """Chunks until the run is done, stopped (`stop.stop_decision`) or
    non-finite. A first Ctrl-C stops at the next chunk boundary; the chunks
    done are checkpointed and KeyboardInterrupt is raised. Releases the lock."""
    bar = Progress(run.num_updates, run.done_updates, run.trainer.derived.batch_env_steps,
                   progress if run.primary else False, run.env_metrics,
                   agents=int(run.trainer.env.num_agents), device=device_name(run.devices))
    try:
        ctrl_c.defer(_TRAINING, hand_back=True)
        while run.done_updates < run.num_updates:
            decision = stop_decision(run, ctrl_c, stop_after_updates, time_limit_s)
            if decision == INTERRUPTED:
                raise KeyboardInterrupt
            if decision:
                run.stopped_early = True
                break
            if not _train_chunk(run, bar):
                break
    except KeyboardInterrupt:
        failing = True
        save_interrupted(run, bar)
        raise
    except BaseException:
        failing = True
        raise
    else:
        failing = False
    finally:
        try:
            bar.close()
            with writing(run.out, "a checkpoint"):
                run.mngr.wait_until_finished()
                run.mngr.close()
            run.writer.close()
        except Exception:
            if not failing:  # else the error that stopped the run is the one to tell
                raise
        finally:
            run.lock.release()


def _train_chunk(run: Run, bar: Progress) -> bool:
    """One chunk: run it, log its rows, checkpoint when due. False when a loss
    or the parameters became non-finite (run.failure says where)."""
    n = min(run.chunk, run.num_updates - run.done_updates)
    if n != run.chunk:  # a last, shorter chunk compiles once more: not in its rate
        tc = time.perf_counter()
        run.compiled = _compile(run, n)
        run.compile_s += time.perf_counter() - tc
    t = time.perf_counter()
    run.settled = False
    run.rs, metrics = run.compiled(run.rs)
    metrics = distributed.to_host(metrics)  # a sweep's over several processes: gathered
    finite = np.asarray(metrics.pop("finite")) > 0  # [seeds, n]: one check per chunk
    dt = time.perf_counter() - t
    run.run_s += dt
    rate = n * run.trainer.derived.batch_env_steps * run.members / dt
    new = metric_rows(metrics, run.done_updates, run.seed_ids, rate, t - run.t0,
                      t - run.t0 + dt, run.setting_ids)
    if not finite.all():
        stop_non_finite(run, new, finite)
        return False
    with writing(run.out, METRICS_JSONL):
        run.writer.write(new)
    run.rows.extend(new)
    run.done_updates += n
    run.settled = True
    if run.done_updates % run.config.checkpoint_every == 0 \
            or run.done_updates == run.num_updates:
        with writing(run.out, f"a checkpoint (saving update {run.done_updates})"):
            save_checkpoint(run.mngr, run.done_updates, run.rs)
        run.saved_at = run.done_updates
    bar.advance(n, rate, new)
    return True
