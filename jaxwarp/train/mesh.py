"""The devices a run's envs are split over: the data-parallel mesh.

`data_mesh(devices)`: the 1-D mesh (axis ``"envs"``) over the first
``devices`` local devices of every process (None: all of them), or None for
one device in one process (no mesh: the unsharded program of a single-device
run), `check_divisible` that the envs and minibatches split evenly over it,
and `pinner` its sharding constraints. See docs/sharding.md ("Training on
several devices"). `member_mesh`: the mesh a sweep splits its runs over
instead, over the same devices of every process (docs/sweeps.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

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


def pinner(mesh: Mesh | None) -> Callable[[Any, P], Any]:
    """(tree, spec) -> the tree with sharding constraint `spec` on every leaf
    (identity on one device). Under vmap over seeds jax adds the seed axis to
    the spec itself."""
    def pin(tree: Any, spec: P) -> Any:
        if mesh is None:
            return tree
        target = NamedSharding(mesh, spec)
        return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, target), tree)

    return pin


MEMBERS = "members"


def member_mesh(devices: int) -> Mesh | None:
    """A sweep's mesh (axis ``"members"``) over the first `devices` local devices
    of every process (`process_devices`): its runs (settings x seeds) split
    along it, each device training whole runs, no collective between them.
    None for one device in one process. How many devices a sweep takes is
    decided once, before its trainer is built (`jaxwarp.run.sweep_plan`)."""
    if devices == 1 and jax.process_count() == 1:
        return None
    return _mesh(process_devices(devices), MEMBERS)
