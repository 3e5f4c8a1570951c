"""Where a run trains, checked whole before anything is written or compiled
(docs/sweeps.md, docs/sharding.md).

`place_run` places a run on the devices: a plain run's envs over the
data-parallel mesh (`mesh.env_mesh`: ``devices`` checked against the envs
and minibatches), a sweep's runs over its layout (`mesh.sweep_layout`: how
many devices of each process train its runs, and the member mesh over them,
whole or in chunks of its runs); then makes the env the trainer is built with
(once, `environment.env_on_mesh`) and, for a sweep, checks every setting
(its config, `config.setting_config`, as the same program as the base config,
and its ``env_params.<name>`` values against the env:
`train.sweep.setting_params`, the params dataclass's own checks, nothing
compiled in may change). `loop._start` calls it for a new sweep before it
creates the run folder, so that bad input is one line and leaves nothing
behind; otherwise after resolving the run's config (`resume.run_config`,
`resume.run_sweep`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from jax.sharding import Mesh

from jaxwarp.train.config import Derived, TrainConfig
from jaxwarp.train.environment import env_on_mesh
from jaxwarp.train.mesh import SweepLayout, env_mesh, sweep_layout
from jaxwarp.train.sweep import Sweep, same_program, setting_params


@dataclasses.dataclass(frozen=True)
class SweepPlan:
    """What a sweep trains, checked: its `settings` (swept key -> value; member
    ``k * seeds + s`` trains setting k with seed ``config.seed + s``) and its
    `layout` on the devices."""

    settings: list[dict[str, float]]
    layout: SweepLayout


@dataclasses.dataclass(frozen=True)
class Placement:
    """A run placed: its checked `env` on `mesh` (the envs' data mesh; None
    for one device, and for a sweep, whose runs split over `plan.layout`
    instead) and a sweep's `plan` (None for a plain run)."""

    env: Any
    mesh: Mesh | None
    plan: SweepPlan | None


def place_run(config: TrainConfig, d: Derived, env: Any, seeds: int, sweep: Sweep | None,
              members: Sequence[TrainConfig]) -> Placement:
    """`config` (`d` its derived quantities) placed on its devices with its env
    made (or `env`, the caller's) and checked; for `sweep`, with `seeds` seeds
    of each setting, its settings' configs `members` checked as the same
    program and each setting's env params by the env. ConfigError naming the
    key or the numbers at fault (one line)."""
    settings = sweep.settings() if sweep is not None else []
    layout = sweep_layout(config.devices, len(settings) * seeds) if sweep is not None else None
    mesh = env_mesh(config, d) if sweep is None else None
    env = env_on_mesh(config, env, mesh)
    if sweep is None:
        return Placement(env, mesh, None)
    same_program(config, members)
    for s in settings:
        setting_params(env, s)
    return Placement(env, None, SweepPlan(settings, layout))
