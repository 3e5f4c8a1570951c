"""A sweep checked whole and laid out before anything is written or compiled
(docs/sweeps.md).

`plan_sweep` lists the settings a sweep trains, each checked as a config (its
values in range) and as the same program as the base config, makes the env
the trainer will be built with (once), checks every setting's
``env_params.<name>`` values against it (`train.sweep.setting_params`: the
params dataclass's own checks, nothing compiled in may change), and decides
the sweep's layout once, before its trainer is built (`SweepLayout`: how many
devices of each process train its runs, and the member mesh over them, whole
or in chunks of its runs). `loop._start` calls it for a new sweep before it
creates the run folder, so that bad input is one line and leaves nothing
behind; for a resumed sweep after reading the saved one (`resume.run_sweep`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
from jax.sharding import Mesh

from jaxwarp.errors import ConfigError
from jaxwarp.train.config import TrainConfig
from jaxwarp.train.environment import checked_env
from jaxwarp.train.mesh import member_mesh, resolve_devices
from jaxwarp.train.sweep import Sweep, same_program, setting_params


@dataclasses.dataclass(frozen=True)
class SweepLayout:
    """A sweep's `members` runs (settings x seeds) split evenly over `devices`
    devices of each of `processes` processes (``jax.distributed``), each
    device training whole runs with no collective between them: member m on
    device ``m // (members / size)`` of `mesh` (process-major), None for one
    device in one process. A sweep in chunks of its runs splits each chunk
    over the same mesh."""

    members: int
    devices: int  # per process
    processes: int
    mesh: Mesh | None

    @property
    def size(self) -> int:
        """Devices of every process together."""
        return self.devices * self.processes


def sweep_layout(devices: int | None, members: int) -> SweepLayout:
    """The layout of `members` runs: `devices` local devices of every process
    (None: the most that split the runs evenly over every process's devices).
    ConfigError in one line naming the numbers when they do not divide."""
    procs, available = jax.process_count(), resolve_devices(devices)
    fits = [k for k in range(1, available + 1) if members % (k * procs) == 0]
    n = devices if devices is not None else max(fits, default=0)
    if devices is not None and members % (n * procs):
        across = f"{n} x {procs} processes = {n * procs}" if procs > 1 else f"{n}"
        raise ConfigError(f"devices={devices}: a sweep splits its {members} runs (settings x "
                          f"seeds) evenly over {across} devices; expected "
                          + (f"a divisor of {members}" if procs == 1 else
                             f"devices x {procs} to divide {members}"))
    if n == 0:
        raise ConfigError(f"a sweep over {procs} processes splits its {members} runs (settings "
                          f"x seeds) evenly over every process's devices; {members} is not a "
                          f"multiple of {procs}: sweep a multiple of {procs} runs")
    return SweepLayout(members, n, procs, member_mesh(n))


@dataclasses.dataclass(frozen=True)
class SweepPlan:
    """What a sweep trains, checked: its `settings` (swept key -> value; member
    ``k * seeds + s`` trains setting k with seed ``config.seed + s``), the
    `env` its trainer is built with (made by `plan_sweep`, or the caller's)
    and its `layout` on the devices."""

    settings: list[dict[str, float]]
    env: Any
    layout: SweepLayout


def plan_sweep(config: TrainConfig, sweep: Sweep, seeds: int, env: Any = None) -> SweepPlan:
    """`sweep`'s settings over `config` with `seeds` seeds each, each checked as
    a config and as the same program; the env made (or `env`, the caller's)
    and each setting's env params checked by it; the layout of its runs over
    ``config.devices`` devices of every process (`sweep_layout`). ConfigError
    naming the key or the numbers at fault (one line)."""
    settings = sweep.settings()
    layout = sweep_layout(config.devices, len(settings) * seeds)
    same_program(config, sweep.configs(config))
    # The sweep's trainer has no env mesh (its runs, not their envs, split over devices).
    env = checked_env(config, env)
    for s in settings:
        setting_params(env, s)
    return SweepPlan(settings, env, layout)
