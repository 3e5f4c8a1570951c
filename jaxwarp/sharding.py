"""Envs sharded over devices along the env axis.

One mechanism: every FFI call of jaxwarp (env reset and step of every env
built from a spec, and the action sampler) carries a partitioning rule
(`jaxwarp._ffi.env_partitioned_call`: ``custom_partitioning`` with a Shardy
``sharding_rule``). Under a plain ``jax.jit`` whose inputs (or outputs) are
split along the env axis, each device launches the kernel once over its own
``num_envs / D`` envs with the global env offset (``shard index * num_envs /
D``), so local env ``e`` draws the random numbers of global env
``offset + e`` and the sampler's local row ``r`` those of global row
``offset_rows + r``. No collective appears; results are bit for bit those of
one device, for any device count. The pure-JAX ("jax") backend is partitioned
by jit itself, its draws keyed by the global env index too.

``ShardedEnv(env, mesh, axis="envs")`` (or ``shard(env, mesh)``) is the
explicit form of the same thing: ``reset``/``step`` pin their inputs and
outputs to ``NamedSharding(mesh, P(axis))`` (so a replicated or unplaced
input is split, once) and call the env; nothing else.

``sample_actions(key, logits, nvec, mesh, ...)`` is `jaxwarp.sample_actions`
with its logits and outputs pinned likewise: bit for bit the unsharded
sampler on every backend.

``shard_state(tree, mesh, axis)`` places an existing pytree (state, obs,
actions ...) on the mesh, leading axis split over ``axis``.

See docs/sharding.md.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxwarp.core import int32_actions, key_data_of, resolve_backend
from jaxwarp.params_check import check_num_envs

__all__ = [
    "COLLECTIVES",
    "ShardedEnv",
    "collectives_in",
    "env_sharding",
    "sample_actions",
    "shard",
    "shard_state",
]

# HLO ops that move data between devices. The sharded env step has none.
COLLECTIVES = ("all-gather", "all-to-all", "collective-permute", "all-reduce",
               "reduce-scatter", "collective-broadcast", "ragged-all-to-all")


def collectives_in(hlo_text: str) -> list[str]:
    """The cross-device ops named in compiled HLO text (``.compile().as_text()``)."""
    found = set(_COLLECTIVE_RE.findall(hlo_text))
    return [op for op in COLLECTIVES if op in found]


_COLLECTIVE_RE = re.compile(r"\b(" + "|".join(map(re.escape, COLLECTIVES)) + r")(?:-start)?\(")


def _axes(mesh: Any, axis: Any, where: str) -> tuple[str, ...]:
    """The mesh axes that the env axis is split over (one name or a tuple)."""
    if not isinstance(mesh, Mesh):
        raise TypeError(f"{where}: mesh must be a jax.sharding.Mesh (jax.make_mesh((D,), "
                        f"('envs',)) or Mesh(np.array(jax.devices()), ('envs',))); got "
                        f"{type(mesh).__name__}")
    names = (axis,) if isinstance(axis, str) else tuple(axis) if isinstance(
        axis, (tuple, list)) else None
    if not names or not all(isinstance(a, str) for a in names):
        raise TypeError(f"{where}: axis must be a mesh axis name or a tuple of them; got "
                        f"{axis!r}")
    missing = [a for a in names if a not in mesh.axis_names]
    if missing:
        raise ValueError(f"{where}: axis={axis!r}: the mesh has no axis "
                         f"{', '.join(map(repr, missing))}; its axes are {mesh.axis_names} "
                         f"(build it with e.g. jax.make_mesh((D,), ('envs',)))")
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: axis={axis!r} names a mesh axis twice")
    return names


def _spec_axis(names: tuple[str, ...]) -> Any:
    return names[0] if len(names) == 1 else names


def _explicit(mesh: Mesh, names: tuple[str, ...]) -> bool:
    """Whether any of the env axes is Explicit (jax.make_mesh's default since jax 0.7)."""
    types = getattr(mesh, "axis_types", None)
    explicit = getattr(getattr(jax.sharding, "AxisType", None), "Explicit", None)
    if types is None or explicit is None:  # pragma: no cover (old jax: every axis Auto)
        return False
    return any(t == explicit for n, t in zip(mesh.axis_names, types) if n in names)


def _auto_mesh(mesh: Mesh) -> Mesh:
    """The same devices and axis names with every axis Auto: jit partitions
    the pure-JAX code between sharding constraints on this mesh."""
    axis_type = getattr(jax.sharding, "AxisType", None)
    if axis_type is None:  # pragma: no cover
        return mesh
    return Mesh(mesh.devices, mesh.axis_names,
                axis_types=(axis_type.Auto,) * len(mesh.axis_names))


@functools.lru_cache(maxsize=64)
def _placement(mesh: Mesh, names: tuple[str, ...]) -> _Placement:
    return _Placement(mesh, names)


class _Placement:
    """How a call pins its inputs and outputs to ``P(axis)`` on the mesh."""

    def __init__(self, mesh: Mesh, names: tuple[str, ...]):
        self.spec = P(_spec_axis(names))
        self.sharding = NamedSharding(mesh, self.spec)
        self.replicated = NamedSharding(mesh, P())
        self.explicit = _explicit(mesh, names)
        self.auto = NamedSharding(_auto_mesh(mesh), self.spec)

    def constrain(self, tree: Any) -> Any:
        """Pins leading axes to P(axis) for jit's partitioner (on the Auto copy
        of the mesh: with_sharding_constraint takes Auto axes only)."""
        return jax.tree_util.tree_map(
            lambda x: x if np.ndim(x) == 0 else jax.lax.with_sharding_constraint(x, self.auto),
            tree)

    def finish(self, tree: Any) -> Any:
        """Outputs of the jit-partitioned path, typed P(axis) on Explicit meshes."""
        tree = self.constrain(tree)
        if not self.explicit:
            return tree
        return jax.tree_util.tree_map(
            lambda x: jax.sharding.reshard(x, self.sharding if np.ndim(x) else self.replicated),
            tree)


def env_sharding(mesh: Mesh, axis: str | tuple[str, ...] = "envs") -> NamedSharding:
    """NamedSharding of an array whose leading axis is the env axis split over ``axis``."""
    names = _axes(mesh, axis, "env_sharding")
    return NamedSharding(mesh, P(_spec_axis(names)))


def _divisible(n: int, shards: int, what: str, where: str, axis: Any) -> None:
    if n % shards != 0:
        raise ValueError(f"{where}: {what} must be divisible by the size of mesh axis "
                         f"{axis!r} ({shards}); got {n}")


def shard_state(tree: Any, mesh: Mesh, axis: str | tuple[str, ...] = "envs") -> Any:
    """Places every array leaf of ``tree`` on ``mesh``, its leading (env) axis
    split over ``axis`` (``jax.device_put`` with ``NamedSharding(mesh, P(axis))``).

    For an env's state, obs, actions, or a whole ``(obs, state)`` carry made
    elsewhere (a checkpoint, an unsharded reset). Scalars (0-d leaves) are
    replicated. Raises ValueError (naming ``tree``) when a leading axis is not
    divisible by the mesh axis size.
    """
    names = _axes(mesh, axis, "shard_state")
    shards = math.prod(mesh.shape[a] for a in names)
    sharded = NamedSharding(mesh, P(_spec_axis(names)))
    replicated = NamedSharding(mesh, P())

    def put(path, x):
        if not hasattr(x, "shape"):
            return x
        if np.ndim(x) == 0:
            return jax.device_put(x, replicated)
        _divisible(x.shape[0], shards, f"tree{jax.tree_util.keystr(path)}.shape[0]",
                   "shard_state", axis)
        return jax.device_put(x, sharded)

    return jax.tree_util.tree_map_with_path(put, tree)


class ShardedEnv:
    """An env whose ``reset``/``step`` run over envs split along a mesh axis.

    Args:
        env: an env from `jaxwarp.make` (a `ContractEnv`; any backend).
        mesh: a ``jax.sharding.Mesh`` (Auto or Explicit axis types; other
            axes than ``axis`` see the envs replicated).
        axis: the mesh axis (or tuple of axes, major first) that the env axis
            is split over.

    ``obs, state = senv.reset(key, num_envs)`` and
    ``obs, state, reward, done, info = senv.step(key, state, actions)`` have
    the env's API and global shapes; every output leaf is sharded
    ``NamedSharding(mesh, P(axis))`` on its leading axis, and the results are
    bit for bit those of ``env`` for the same key and ``num_envs``, whatever
    the number of devices. ``num_envs`` must be divisible by the axis size.
    Call inside or outside ``jax.jit``; inputs that are not yet sharded are
    resharded (place them once with `shard_state`, or keep the outputs, to
    avoid a copy every step).

    Other attributes (``num_agents``, ``action_space``, ``observation_space``,
    ``params``, ``backend``, ``obs_dim``, ...) are the env's.
    """

    def __init__(self, env: Any, mesh: Mesh, axis: str | tuple[str, ...] = "envs"):
        for attr in ("reset", "step", "check_state", "backend", "action_space", "num_agents"):
            if not hasattr(env, attr):
                raise TypeError(f"ShardedEnv: env must be a jaxwarp env (jaxwarp.make(...)); "
                                f"got {type(env).__name__} without .{attr}")
        if isinstance(env, ShardedEnv):
            raise TypeError("ShardedEnv: env is already sharded")
        self.env = env
        self.mesh = mesh
        self.axis = axis
        self._names = _axes(mesh, axis, "ShardedEnv")
        self.num_shards = math.prod(mesh.shape[a] for a in self._names)
        self._place = _placement(mesh, self._names)
        self.sharding = self._place.sharding
        self._fns: dict[Any, Any] = {}

    def __getattr__(self, name: str) -> Any:
        # Called only for attributes ShardedEnv lacks: the env's.
        if name in ("env", "__setstate__"):
            raise AttributeError(name)
        return getattr(self.env, name)

    def __repr__(self) -> str:
        return f"ShardedEnv({self.env!r}, axis={self.axis!r}, shards={self.num_shards})"

    def reset(self, key: jax.Array, num_envs: int, *, params: Any = None):
        """obs, state with leading axis num_envs (global), sharded over the mesh axis;
        params: as for the env's reset (its params as data; None: its own)."""
        num_envs = check_num_envs(num_envs)
        num_envs = int(num_envs)
        _divisible(num_envs, self.num_shards, "num_envs", "ShardedEnv.reset", self.axis)
        key_data = key_data_of(key)
        if ("reset", num_envs) not in self._fns:
            self._fns["reset", num_envs] = self._build_reset(num_envs)
        return self._fns["reset", num_envs](key_data, params)

    def step(self, key: jax.Array, state: Any, actions: jax.Array, *, params: Any = None):
        """obs, state, reward, done, info of one step of every env (auto-reset),
        all sharded over the mesh axis; params: as for `reset`."""
        num_envs = self.env.check_state(state)
        _divisible(num_envs, self.num_shards, "the env count of state (leading axis)",
                   "ShardedEnv.step", self.axis)
        actions = self._check_actions(actions, num_envs)
        key_data = key_data_of(key)
        if "step" not in self._fns:
            self._fns["step"] = self._build_step()
        return self._fns["step"](key_data, state, actions, params)

    def sample_actions(self, key: jax.Array, logits: jax.Array, *,
                       backend: str | None = None):
        """`sample_actions` with this env's ``action_space.nvec``, mesh and
        axis; backend defaults to the env's."""
        return sample_actions(key, logits, tuple(int(v) for v in self.env.action_space.nvec),
                              self.mesh, self.axis,
                              backend=self.env.backend if backend is None else backend)

    # -- the compiled calls ------------------------------------------------
    # The env's own calls partition themselves (their partitioning rule, or
    # jit for the pure-JAX backend); pinning inputs and outputs to P(axis) is
    # all that is left to do here.
    def _build_reset(self, num_envs: int):
        env, place = self.env, self._place
        return jax.jit(lambda key_data, params: place.finish(
            env.reset(key_data, num_envs, **_params_kw(params))))

    def _build_step(self):
        env, place = self.env, self._place

        def step(key_data, state, actions, params):
            state, actions = place.constrain((state, actions))
            return place.finish(env.step(key_data, state, actions, **_params_kw(params)))
        return jax.jit(step)

    def _check_actions(self, actions: Any, num_envs: int) -> Any:
        # The env checks each device's block again inside the call; this names
        # the global shapes. (Not env.check_actions: with checks=True its value
        # check over the global array would add an all-reduce.) Returns them
        # as int32 (int64 and lists are cast, as env.step does).
        if not hasattr(actions, "shape"):
            actions = int32_actions(actions)
        heads = len(self.env.action_space.nvec)
        expected = (num_envs, self.env.num_agents, heads)
        if not hasattr(actions, "shape") or tuple(actions.shape) != expected:
            raise ValueError(f"actions must have shape {expected} (envs, agents, heads); got "
                             f"{getattr(actions, 'shape', type(actions).__name__)}")
        return int32_actions(actions)


def _params_kw(params: Any) -> dict[str, Any]:
    """``params=`` for the env's call where given (envs without params as
    data never see the keyword)."""
    return {} if params is None else {"params": params}


def shard(env: Any, mesh: Mesh, axis: str | tuple[str, ...] = "envs") -> ShardedEnv:
    """``ShardedEnv(env, mesh, axis)``."""
    return ShardedEnv(env, mesh, axis)


# ---------------------------------------------------------------------------
# The sampler.
# ---------------------------------------------------------------------------
def sample_actions(key: jax.Array, logits: jax.Array, nvec: Sequence[int], mesh: Mesh,
                   axis: str | tuple[str, ...] = "envs", backend: str = "auto"
                   ) -> tuple[jax.Array, jax.Array]:
    """`jaxwarp.sample_actions` on logits whose leading axis is split over ``axis``.

    Outputs (actions i32[..., H], log_prob f32[...]) are sharded like the
    logits' leading axis, and are bit for bit
    ``jaxwarp.sample_actions(key, logits, nvec, backend=backend)`` for any
    device count, on every backend: the kernels ("cpu", "cuda") run one launch
    per device over its own rows, counting their random draws from each row's
    global index (the sampler's partitioning rule and row offset); the "jax"
    reference is partitioned by jit (jax's partitionable threefry counts by
    global element). No collective. Equally, a plain ``jax.jit`` of
    `jaxwarp.sample_actions` over logits split along axis 0 does the same.
    """
    from jaxwarp import sampler

    names = _axes(mesh, axis, "sample_actions")
    shards = math.prod(mesh.shape[a] for a in names)
    nvec = sampler.check_nvec(nvec)
    logits = sampler.check_logits(logits, nvec)
    if logits.ndim < 2:
        raise ValueError(f"sample_actions: logits must have a leading (env) axis before the "
                         f"sum(nvec) axis; got shape {tuple(logits.shape)}")
    _divisible(logits.shape[0], shards, "logits.shape[0]", "sample_actions", axis)
    key_data_of(key)
    backend = resolve_backend(backend)
    place = _placement(mesh, names)
    return _jit_sample(place, nvec, backend)(key, logits)


@functools.lru_cache(maxsize=64)
def _jit_sample(place: _Placement, nvec: tuple[int, ...], backend: str):
    from jaxwarp import sampler

    def f(key, logits):
        return place.finish(sampler.sample_actions(key, place.constrain(logits), nvec,
                                                   backend=backend))
    return jax.jit(f)
