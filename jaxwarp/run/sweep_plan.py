"""A sweep checked whole before anything is written or compiled (docs/sweeps.md).

`plan_sweep` lists the settings a sweep trains, each checked as a config (its
values in range) and as the same program as the base config, makes the env
the trainer will be built with (once) and checks every setting's
``env_params.<name>`` values against it (`train.sweep.setting_params`: the
params dataclass's own checks, nothing compiled in may change). `loop._start`
calls it for a new sweep before it creates the run folder, so that bad input
is one line and leaves nothing behind; for a resumed sweep after reading the
saved one (`resume.run_sweep`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from jaxwarp.errors import ConfigError
from jaxwarp.train.config import TrainConfig, derived
from jaxwarp.train.environment import env_on_mesh
from jaxwarp.train.sweep import Sweep, same_program, setting_params


@dataclasses.dataclass(frozen=True)
class SweepPlan:
    """What a sweep trains, checked: its `settings` (swept key -> value; member
    ``k * seeds + s`` trains setting k with seed ``config.seed + s``) and the
    `env` its trainer is built with (made by `plan_sweep`, or the caller's)."""

    settings: list[dict[str, float]]
    env: Any


def plan_sweep(config: TrainConfig, sweep: Sweep, env: Any = None) -> SweepPlan:
    """`sweep`'s settings over `config`, each checked as a config and as the same
    program; the env made (or `env`, the caller's) and each setting's env
    params checked by it. ConfigError naming the key at fault (one line)."""
    if jax.process_count() > 1:
        raise ConfigError("a sweep runs in one process (its runs split over that process's "
                          "devices); it cannot run under jax.distributed")
    same_program(config, sweep.configs(config))
    # The sweep's trainer has no env mesh (its runs, not their envs, split over devices).
    env, _ = env_on_mesh(config, derived(config), env, local=True)
    settings = sweep.settings()
    for s in settings:
        setting_params(env, s)
    return SweepPlan(settings, env)
