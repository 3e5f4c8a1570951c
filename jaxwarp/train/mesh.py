"""The devices a run's envs are split over: the data-parallel mesh.

`data_mesh(devices)`: the 1-D mesh (axis ``"envs"``) over the first
``devices`` local devices of every process (None: all of them), or None for
one device in one process (no mesh: the unsharded program of a single-device
run), `check_divisible` that the envs and minibatches split evenly over it,
(`env_mesh`: both for a config; `minibatches.pinner` its sharding constraints). See
docs/sharding.md ("Training on several devices"). `sweep_layout`: how many
devices of every process a sweep splits its runs over instead, and its
`member_mesh` over them (docs/sweeps.md).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from jaxwarp.errors import ConfigError
from jaxwarp.train.config import Derived, TrainConfig

AXIS = "envs"


def resolve_devices(devices: int | None) -> int:
    """Devices per process that a run uses: `devices`, or every local device
    for None. ConfigError naming ``devices`` when the process has fewer."""
    available = jax.local_device_count()
    if devices is None:
        return available
    if devices > available:
        raise ConfigError(
            f"devices={devices}: this process has only {available} local device(s) "
            f"({', '.join(str(d) for d in jax.local_devices())}); use devices={available} or "
            "fewer, or null for all of them")
    return devices


def data_mesh(devices: int | None) -> Mesh | None:
    """The run's 1-D mesh over the first `devices` local devices of every process
    (axis ``"envs"``, Auto axis type, process-major order), or None when that is
    one device in one process (the unsharded single-device program)."""
    n = resolve_devices(devices)
    if n == 1 and jax.process_count() == 1:
        return None
    return _mesh(process_devices(n), AXIS)


def process_devices(n: int) -> list[Any]:
    """The first `n` local devices of every process, by id, process-major: the
    devices a mesh of ``devices=n`` spans (the same list on every process)."""
    chosen = []
    for p in range(jax.process_count()):
        local = sorted((d for d in jax.devices() if d.process_index == p), key=lambda d: d.id)
        chosen.extend(local[:n])
    return chosen


def _mesh(devices: list[Any], axis: str) -> Mesh:
    """A 1-D mesh over `devices` along `axis` (Auto axis type where jax has them)."""
    axis_type = getattr(jax.sharding, "AxisType", None)
    kwargs = {"axis_types": (axis_type.Auto,)} if axis_type is not None else {}
    return Mesh(np.array(devices), (axis,), **kwargs)


def check_divisible(c: TrainConfig, d: Derived, shards: int) -> None:
    """The env axis and the minibatches split evenly over `shards` devices."""
    dev = "every local device" if c.devices is None else f"devices={c.devices}"
    if c.num_envs % shards:
        raise ConfigError(
            f"num_envs={c.num_envs} is not divisible by the {shards} devices that the envs "
            f"are split over ({dev} x {jax.process_count()} process(es)); choose num_envs "
            f"as a multiple of {shards} or set devices (devices=1: one device)")
    if d.minibatches > 1 and d.minibatch_envs % shards:
        what = "minibatch" if c.algorithm == "ppo" else "gradient chunk"
        raise ConfigError(
            f"num_minibatches={c.num_minibatches}: each {what} of num_envs/num_minibatches="
            f"{d.minibatch_envs} envs must split evenly over the {shards} devices ({dev}); "
            f"choose num_envs as a multiple of num_minibatches x {shards}")


def env_mesh(c: TrainConfig, d: Derived) -> Mesh | None:
    """The run's data mesh (`data_mesh` of ``c.devices``), its envs and
    minibatches checked to split evenly over it (`check_divisible`)."""
    mesh = data_mesh(c.devices)
    if mesh is not None:
        check_divisible(c, d, mesh.size)
    return mesh


MEMBERS = "members"


def member_mesh(devices: int) -> Mesh | None:
    """A sweep's mesh (axis ``"members"``) over the first `devices` local devices
    of every process (`process_devices`): its runs (settings x seeds) split
    along it, each device training whole runs, no collective between them.
    None for one device in one process. How many devices a sweep takes is
    decided once, before its trainer is built (`sweep_layout`)."""
    if devices == 1 and jax.process_count() == 1:
        return None
    return _mesh(process_devices(devices), MEMBERS)


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
