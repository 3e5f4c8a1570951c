"""Where a run starts from: its config (the saved one on resume, `run_config`)
and its state (the newest intact checkpoint on resume, else the initial state
of every seed: `restore_or_init`). Because every update is a pure function of
the restored state, a resumed run reproduces the uninterrupted one.

A resume may extend a run: given the saved config with a larger
``total_env_steps`` (more updates, and ``anneal_lr`` off, whose schedule
depends on the run length: `check_extension`), it goes on from the newest
checkpoint to the new total, and config.yaml keeps the new total. With
anneal_lr off the extended run equals a fresh run of the new length."""

from __future__ import annotations

import dataclasses
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxwarp.errors import CheckpointError, CheckpointWarning, ConfigError
from jaxwarp.run import distributed
from jaxwarp.run.checkpoint import (
    abstract_state,
    read_saved_config,
    read_saved_sweep,
    restore_intact,
)
from jaxwarp.run.metrics import METRICS_JSONL
from jaxwarp.run.state import Run
from jaxwarp.train.config import TrainConfig, derived, setting_config, validate
from jaxwarp.train.hyper import Hyper
from jaxwarp.train.mesh import MEMBERS
from jaxwarp.train.seeds import member_keys
from jaxwarp.train.sweep import Sweep, stacked_hyper


def run_config(out: Path, config: TrainConfig | None, seeds: int, resume: bool,
               devices: int | None, primary: bool) -> tuple[TrainConfig, int]:
    """(config, seeds) of the run: the saved ones on resume (a given config must
    equal the saved one up to ``devices`` and a larger ``total_env_steps``,
    `check_extension`), with `devices` when given."""
    if not resume:
        if primary and holds_run(out):
            raise FileExistsError(f"{out} already holds a run; pass --resume {out} to "
                                  "continue it or choose another --out")
        # config.yaml must work from any folder (eval --run, --resume)
        config = absolute_env_module(config)
    else:
        saved_config, seeds = read_saved_config(out)
        if config is not None:
            if dataclasses.replace(config, devices=saved_config.devices,
                                   total_env_steps=saved_config.total_env_steps) != saved_config:
                raise ConfigError(f"--resume {out}: the given config differs from the saved "
                                  "one; resume takes its config from the run folder (only "
                                  "total_env_steps may grow)")
            check_extension(out, saved_config, config.total_env_steps)
        config = saved_config if config is None else dataclasses.replace(
            saved_config, devices=config.devices, total_env_steps=config.total_env_steps)
    if devices is not None:
        config = dataclasses.replace(config, devices=devices)
        validate(config)
    return config, seeds


def check_extension(out: Path, saved: TrainConfig, total_env_steps: int) -> None:
    """ConfigError unless `total_env_steps` leaves the saved run as it is or
    extends it: more updates, and ``anneal_lr`` off. With anneal_lr the
    learning rate falls linearly to 0 over the run's updates; the updates done
    followed the old run length's schedule, and a longer one would raise the
    learning rate again from the point they reached, a run that no fresh run of
    either length gives."""
    if total_env_steps == saved.total_env_steps:
        return
    old, new = derived(saved), derived(dataclasses.replace(saved,
                                                           total_env_steps=total_env_steps))
    if new.num_updates <= old.num_updates:
        raise ConfigError(
            f"--resume {out}: total_env_steps={total_env_steps} gives {new.num_updates} "
            f"updates of {old.batch_env_steps} env-steps; the run has {old.num_updates} "
            f"(total_env_steps={saved.total_env_steps}); a resume may only extend it, to at "
            f"least total_env_steps={(old.num_updates + 1) * old.batch_env_steps}")
    if saved.anneal_lr:
        raise ConfigError(
            f"--resume {out}: total_env_steps cannot grow on a run with anneal_lr=true: its "
            f"learning rate falls linearly to 0 over its {old.num_updates} updates, and a "
            f"longer schedule would raise it again for the updates added (a run no fresh "
            f"run gives); start a new run with total_env_steps={total_env_steps}, or use "
            f"anneal_lr=false for runs you mean to extend")


def absolute_env_module(config: TrainConfig) -> TrainConfig:
    """The config with a relative ``env_module`` .py path made absolute (a
    module name stays as it is)."""
    m = config.env_module
    if m and m.endswith(".py") and not os.path.isabs(m) and os.path.exists(m):
        return dataclasses.replace(config, env_module=os.path.abspath(m))
    return config


def holds_run(out: Path) -> bool:
    """out already has checkpoints or logged metrics of a run."""
    ck, metrics = out / "checkpoints", out / METRICS_JSONL
    return (ck.is_dir() and any(ck.iterdir())) or (metrics.exists()
                                                    and metrics.stat().st_size > 0)


def restore_or_init(run: Run, resume: bool, progress: bool | str) -> None:
    """run.rs: the newest intact checkpoint on resume (run.done_updates its
    update), else the initial state of every seed. Called by `loop._start`
    (called by `loop.train_run`): the warnings' stack levels point at
    train_run's caller."""
    keys = member_keys(run.config.seed, run.seeds, len(run.settings))
    hyper = None
    if run.settings:  # each member's hyperparameters and env params: its setting's
        configs = [setting_config(run.config, s) for s in run.settings]
        hyper = stacked_hyper(configs, run.trainer.groups, run.seeds, run.trainer.env,
                              run.settings)
    # A sweep's members start from resets with their setting's env params.
    init = jax.jit(jax.vmap(run.trainer.init) if hyper is None else
                   lambda k: jax.vmap(run.trainer.init)(k, jax.tree.map(jnp.asarray, hyper)))
    out, primary = run.out, run.primary
    abstract = abstract_state(run.trainer, init, keys, run.member_mesh) \
        if resume or run.settings else None
    # stacklevel 5: the warnings point at train_run's caller.
    restored = restore_intact(out, abstract, primary, stacklevel=5) if resume else None
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
    run.rs = init(keys) if hyper is None else _init_members(run, keys, hyper, abstract)


def _init_members(run: Run, keys: np.ndarray, hyper: Hyper, abstract: Any) -> Any:
    """A sweep's initial state (keys u32[members, 2], `hyper` its stacked
    hyperparameters, leading axis the members) where the restore would put it
    (`abstract`'s shardings): on its member mesh each device starts its own
    runs (shard_map; over several processes each process its devices'), else
    on one device."""
    mesh = run.member_mesh
    init = jax.vmap(run.trainer.init)
    if mesh is None:
        where = jax.tree.map(lambda a: a.sharding, abstract)
        return jax.device_put(jax.jit(init)(keys, hyper), where)
    # check_vma off: the env's reset custom call carries no varying-axis rule.
    init = jax.shard_map(init, mesh=mesh, in_specs=P(MEMBERS), out_specs=P(MEMBERS),
                         check_vma=False)
    return jax.jit(init)(*distributed.to_global((keys, hyper), NamedSharding(mesh, P(MEMBERS))))


def run_sweep(out: Path, sweep: Sweep | None, resume: bool) -> Sweep | None:
    """The sweep a run trains (None for a plain run): `sweep`, or on resume the
    sweep saved in out (a given one must equal it). Checked by
    `sweep_plan.place_run`."""
    if not resume:
        return sweep
    saved = read_saved_sweep(out)
    if sweep is not None and sweep != saved:
        raise ConfigError(f"--resume {out}: the given sweep differs from the saved one; "
                          "resume takes its sweep from the run folder")
    return saved
