"""The spec layer: what an env declares in Python.

An env is a header (C++/CUDA, see `cuda/jaxwarp_env.h`) plus an `EnvSpec`:
its params dataclass, its state (a state dataclass whose fields are declared
with `state_field`: the one place an env declares its state), per-env scratch (`ScratchField`,
`grid_scratch`), spaces and the pure-JAX reference. This module also turns
params into what the kernels see (`kernel_param_values`, `pack_params`),
tags states with the params that made them (`params_id`) and reproduces the
kernels' per-agent random numbers (`agent_uniform`) for references.
Nothing here compiles or generates C++ (`codegen`, `build` do).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

DTYPES = {"f32": ("float", jnp.float32, "F32"), "i32": ("int32_t", jnp.int32, "S32"),
           "u32": ("uint32_t", jnp.uint32, "U32")}



class EnvBuildError(RuntimeError):
    """A user env could not be built: spec/header mismatch, compiler error or
    missing compiler. The message says what and where."""


@dataclasses.dataclass(frozen=True)
class StateField:
    """One state array as the kernels see it: ``dtype`` f32 | i32 | u32,
    ``scope`` "agent" ([envs, agents]) or "env" ([envs]). Read from the state
    dataclass (`fields_of`, `EnvSpec.fields`); declared there with `state_field`."""

    name: str
    dtype: str
    scope: str = "agent"

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z_]\w*", self.name):
            raise ValueError(f"state field name {self.name!r} is not a C++ identifier")
        if self.dtype not in DTYPES:
            raise ValueError(f"state field {self.name!r}: dtype {self.dtype!r} is not one of "
                             f"{sorted(DTYPES)}")
        if self.scope not in ("agent", "env"):
            raise ValueError(f"state field {self.name!r}: scope {self.scope!r} is not "
                             "'agent' or 'env'")


def state_field(dtype: str, scope: str = "agent") -> Any:
    """Declares a field of a state dataclass (flax struct) for the kernels:
    ``x: jax.Array = state_field("f32")``, ``timestep: jax.Array =
    state_field("i32", "env")``. The spec then reads its fields from the class."""
    from flax import struct

    return struct.field(pytree_node=True, metadata={"jaxwarp": (dtype, scope)})


def fields_of(state_type: type) -> tuple[StateField, ...]:
    """The StateFields declared on a state dataclass with `state_field`, in order."""
    out = []
    for f in dataclasses.fields(state_type):
        if "jaxwarp" not in f.metadata:
            raise EnvBuildError(f"{state_type.__name__}.{f.name} is not declared with "
                                "jaxwarp.authoring.state_field(dtype, scope)")
        out.append(StateField(f.name, *f.metadata["jaxwarp"]))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class ScratchField:
    """Per-env scratch array, rebuilt every call and never returned: ``count``
    elements per agent (scope "agent") or per env ("env"); count is an int or
    a function of the params. Shared memory when the env's state and scratch
    fit (the generated launcher decides), global memory otherwise. The env
    header sees it as a State member like a state field."""

    name: str
    dtype: str
    scope: str = "agent"
    count: int | Callable[[Any], int] = 1

    def __post_init__(self) -> None:
        StateField(self.name, self.dtype, self.scope)  # same name/dtype/scope rules

    def words(self, params: Any, num_agents: int) -> int:
        count = int(self.count(params) if callable(self.count) else self.count)
        if count < 0:
            raise ValueError(f"scratch {self.name!r}: count {count} < 0")
        return count * (num_agents if self.scope == "agent" else 1)


def grid_scratch(name: str, num_agents: Callable[[Any], int],
                 used: Callable[[Any], bool] = lambda p: True) -> ScratchField:
    """The scratch array of a `jaxwarp::NeighbourGrid` (cuda/jaxwarp_team.h,
    ``NeighbourGrid::carve(s.<name>, n, grid_side(n), lo, length)``) for
    ``num_agents(params)`` agents; empty where ``used(params)`` is false."""
    def words(p: Any) -> int:
        n = num_agents(p)
        # cells + 1 starts, n ids, n positions (2 words each, 8-byte aligned:
        # one word of slack), n cells, n ranks
        return grid_side(n) ** 2 + 2 + 5 * n if used(p) else 0

    return ScratchField(name, "i32", "env", words)


def grid_side(n: int) -> int:
    """`jaxwarp::grid_side(n)`: cells per side of the neighbour grid (about four
    agents per cell, `kGridAgentsPerCell`), in float32 arithmetic as the C++
    computes it."""
    g = int(np.ceil(np.sqrt(np.float32(0.25) * np.float32(n), dtype=np.float32)))
    return min(64, max(1, g))


@dataclasses.dataclass(frozen=True)
class ParamArray:
    """A 1-D kernel parameter (f32 or i32 values) held in the C++ Params struct
    as ``T name[capacity]``; unused entries are 0."""

    values: np.ndarray
    capacity: int


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """Everything jaxwarp needs to know about an env; the header holds the rest.

    params_type: frozen dataclass (-> the C++ ``Params``: its float/int/bool
        fields, or what ``kernel_params`` returns).
    state_type: the state, a flax struct dataclass whose fields are declared
        with `state_field` (-> the C++ ``State``, in the same order). The one
        place an env declares its state: ``spec.fields`` (its `StateField`
        tuple) is read from it, and the generated layout gives the header the
        same struct.
    scratch: per-env scratch arrays (`ScratchField`), members of ``State`` too.
    reference_reset(params, key_data u32[2], num_envs) -> (obs, state);
    reference_step(params, key_data, state, actions i32[envs, agents, heads])
        -> (obs, state, reward f32[envs, agents], done bool[envs], info) with
        the same auto-reset semantics as the kernels (see jaxwarp_env.h);
        info holds "terminated" and "truncated" (bool[envs]).
    kernel_params(params) -> {name: np.float32 | np.int32 | np.uint32 | bool |
        ParamArray}: what the kernels see, when it is not the dataclass fields
        (derived constants computed once in Python, tables).
    static_params: kernel params compiled in as ``static constexpr`` members
        of Params (``p.name`` reads the same): the compiler drops the branches
        they rule out and sizes register arrays by them; each distinct value
        is its own library (built once, cached).
    time_limit: the kernel param (an int) that holds the episode length in
        steps: the kernels truncate an episode on the step after which its
        ``timestep`` is ``>= p.<time_limit>`` (with autoreset=False, every
        step after it too), as `jaxwarp.core.finish_step` does. The state
        then needs the step counter ``timestep`` (i32, per env). None: the
        kernels impose no time limit (an env whose episode end is one of its
        rules reports it through ``StepResult::truncated``, Tag's).
        What the kernels keep for every env, whatever the header does: the
        state field ``timestep`` (i32, per env), where the state has one: 0
        after a reset, advanced before the first phase of each step; and
        ``episode_return`` (f32, per agent; needs ``timestep``): each
        agent's rewards summed over its episode (see cuda/jaxwarp_env.h).
    global_state(params, obs f32[envs, agents, obs_dim], state) -> f32[envs, S]:
        what a centralised critic reads (``critic: centralised``, MAPPO), one
        vector per env; None: the env has no global state.

    The env's hooks (optional; shared modules read them and never branch on an
    env's name):

    render_view(params) -> (xmin, xmax, ymin, ymax): the square of the world
        a frame shows (`jaxwarp.render`).
    render_draw(params, s, canvas): draws one env at one time, ``s`` its state
        fields (``s["x"]: f32[agents]``, per-env fields scalars), as shapes on
        a `jaxwarp.render.Canvas` (``canvas.disc``, ``canvas.segment``), in jnp
        (it runs under jit and vmap). Both render hooks, or neither.
    render_fps: frames per second of its renders (the adapters' metadata);
        None: ``1 / dt`` (or ``tau``) of its params where it has one, else 30.
    default_config: the shipped training config (``jaxwarp/train/configs/
        <name>.yaml``) that ``jaxwarp train --env NAME`` starts from; None:
        the TrainConfig defaults.
    The metrics an env logs are a method of its env class,
    ``episode_metrics(episode_return)`` (see `ContractEnv`).
    """

    name: str
    header: str | Path
    params_type: type
    num_agents: Callable[[Any], int]
    obs_dim: Callable[[Any], int]
    nvec: Callable[[Any], tuple[int, ...]]
    reference_reset: Callable[..., Any]
    reference_step: Callable[..., Any]
    state_type: type
    obs_bounds: Callable[[Any], tuple[np.ndarray, np.ndarray]] | None = None
    policy_groups: Callable[[Any], dict[str, np.ndarray]] | None = None
    scratch: tuple[ScratchField, ...] = ()
    kernel_params: Callable[[Any], dict[str, Any]] | None = None
    static_params: tuple[str, ...] = ()
    time_limit: str | None = None
    global_state: Callable[[Any, jax.Array, Any], jax.Array] | None = None
    render_view: Callable[[Any], tuple[float, float, float, float]] | None = None
    render_draw: Callable[[Any, dict[str, jax.Array], Any], None] | None = None
    render_fps: int | None = None
    default_config: str | None = None
    fields: tuple[StateField, ...] = dataclasses.field(init=False, default=())

    def __post_init__(self) -> None:
        if not (isinstance(self.state_type, type) and dataclasses.is_dataclass(self.state_type)):
            raise EnvBuildError(f"{self.name}: state_type must be a state dataclass whose "
                                f"fields are declared with state_field; got {self.state_type!r}")
        object.__setattr__(self, "fields", fields_of(self.state_type))
        if (self.render_view is None) != (self.render_draw is None):
            raise EnvBuildError(f"{self.name}: give the spec both render_view and render_draw, "
                                "or neither")
        names = [f.name for f in self.fields] + [f.name for f in self.scratch]
        dup = sorted({x for x in names if names.count(x) > 1})
        if dup:
            raise EnvBuildError(f"{self.name}: field name(s) {dup} declared twice (state and "
                                "scratch fields share one namespace)")
        _check_kept_fields(self)


# State fields that the kernel template keeps for every env that has them
# (cuda/jaxwarp_kernels.h; the header writes neither): name -> (dtype, scope).
KEPT_FIELDS = {"timestep": ("i32", "env"), "episode_return": ("f32", "agent")}


def _check_kept_fields(spec: EnvSpec) -> None:
    """EnvBuildError unless the kept fields the spec declares have their dtype
    and scope, episode_return comes with timestep, and a time_limit has the
    step counter it is checked against."""
    have = {f.name: f for f in spec.fields}
    for name, (dtype, scope) in KEPT_FIELDS.items():
        f = have.get(name)
        if f is not None and (f.dtype, f.scope) != (dtype, scope):
            raise EnvBuildError(
                f"{spec.name}: state field {name!r} is kept by the kernels (cuda/jaxwarp_env.h); "
                f"declare it state_field({dtype!r}, {scope!r}), or rename it; got "
                f"state_field({f.dtype!r}, {f.scope!r})")
    if "episode_return" in have and "timestep" not in have:
        raise EnvBuildError(f"{spec.name}: state field 'episode_return' is restarted on an "
                            "episode's first step: the state needs the step counter too, "
                            "timestep: jax.Array = state_field('i32', 'env')")
    if spec.time_limit is not None:
        if not isinstance(spec.time_limit, str):
            raise EnvBuildError(f"{spec.name}: time_limit must be the name of a kernel param "
                                f"(str) or None; got {spec.time_limit!r}")
        if "timestep" not in have:
            raise EnvBuildError(f"{spec.name}: time_limit={spec.time_limit!r} is checked "
                                "against the step counter: the state needs timestep: "
                                "jax.Array = state_field('i32', 'env')")


@functools.cache
def tagged_state_type(state_type: type) -> type:
    """`state_type` with one more, static field: ``params_id`` (str), the env
    name and a digest of the params that made the state. It is pytree
    metadata (part of the treedef, no array, no cost inside jit), so a state
    keeps it through jit, scan, vmap and checkpoints, and `ContractEnv.step`
    refuses a state made by an env with other params whose shapes happen to
    match (20 + 90 agents where 10 + 100 are expected). A state built by hand
    as ``state_type(...)`` has no params_id and is not checked."""
    from flax import struct

    cls = type(state_type.__name__, (state_type,), {
        "__annotations__": {"params_id": str},
        "params_id": struct.field(pytree_node=False, default=""),
        "__doc__": state_type.__doc__, "__module__": state_type.__module__,
        "__qualname__": state_type.__qualname__})
    return struct.dataclass(cls)


def params_id(name: str, params: Any) -> str:
    """"name:digest" of an env's params (equal params, equal id)."""
    return f"{name}:{hashlib.sha256(repr(params).encode()).hexdigest()[:12]}"


def tag_state(state_type: type, state: Any, pid: str) -> Any:
    """`state` (of `state_type` or its tagged type) as the tagged type with
    params_id `pid`; pid="" gives the plain `state_type` back."""
    arrays = {f.name: getattr(state, f.name) for f in dataclasses.fields(state_type)}
    return tagged_state_type(state_type)(**arrays, params_id=pid) if pid \
        else state_type(**arrays)


def check_params_id(state: Any, pid: str) -> None:
    """Raises ValueError when `state` was made by an env with params other
    than those of id `pid` (a state without params_id passes)."""
    made_by = getattr(state, "params_id", "")
    if made_by and made_by != pid:
        raise ValueError(
            f"state was made by an env with other params (params_id {made_by!r}; this "
            f"env's is {pid!r}): shapes may match while the agents, sizes or rules differ. "
            f"Reset this env, or step with the env that made the state")


def agent_uniform(key_data: jax.Array, num_envs: int, num_agents: int, draw: int,
                  low: float | None = None, high: float | None = None,
                  stream: int = 0) -> jax.Array:
    """f32[envs, agents]: what ``jaxwarp::Agent::uniform(draw)`` (or
    ``uniform(draw, low, high)``) returns in reset() (stream 0) or step()
    (stream 1) for every env and agent."""
    from jax.extend.random import threefry2x32_p

    shape = (num_envs, num_agents)
    env = jnp.broadcast_to(jnp.arange(num_envs, dtype=jnp.uint32)[:, None], shape)
    agent = jnp.broadcast_to(jnp.arange(num_agents, dtype=jnp.uint32)[None, :], shape)
    c1 = (agent << 16) | np.uint32((stream << 15) | (draw & 0x7FFF))
    k0 = jnp.broadcast_to(key_data[0], shape)
    k1 = jnp.broadcast_to(key_data[1], shape)
    bits, _ = threefry2x32_p.bind(k0, k1, env, c1)
    u = (bits >> 8).astype(jnp.float32) * np.float32(2.0**-24)
    if low is None:
        return u
    span = np.float32(high) - np.float32(low)
    return jnp.minimum(u * span, span) + np.float32(low)



# ---------------------------------------------------------------------------
# What the kernels see of the params and the state.
# ---------------------------------------------------------------------------
_RESERVED = {"jw_params", "jw_per_env", "Env", "Params", "State"}


def kernel_param_values(spec: EnvSpec, params: Any) -> dict[str, Any]:
    """name -> np.float32 | np.int32 | np.uint32 | ParamArray: the C++ Params."""
    if spec.kernel_params is not None:
        raw = dict(spec.kernel_params(params))
    else:
        raw = {f.name: getattr(params, f.name) for f in dataclasses.fields(spec.params_type)}
    out: dict[str, Any] = {}
    for name, v in raw.items():
        if name.startswith("jw_") or name in _RESERVED or not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise EnvBuildError(f"{spec.name}: param name {name!r} is reserved by the generated "
                                "code or not a C++ identifier; rename it")
        if isinstance(v, ParamArray):
            arr = np.asarray(v.values)
            if arr.ndim != 1 or arr.dtype not in (np.float32, np.int32) or len(arr) > v.capacity:
                raise EnvBuildError(f"{spec.name}: param {name!r} must be a 1-D float32/int32 "
                                    f"array of at most {v.capacity} values; got {arr.dtype}"
                                    f"{list(arr.shape)}")
            out[name] = ParamArray(arr, int(v.capacity))
        elif isinstance(v, (bool, np.bool_)):
            out[name] = np.int32(bool(v))
        elif isinstance(v, (np.float32, np.int32, np.uint32)):
            out[name] = v
        elif isinstance(v, (int, np.integer)):
            out[name] = np.int32(v)
        elif isinstance(v, (float, np.floating)):
            out[name] = np.float32(v)
        else:
            raise EnvBuildError(f"{spec.name}: param {name!r} has type {type(v).__name__}; "
                                "params passed to the kernels must be float, int or bool "
                                "(or set the spec's kernel_params)")
    return out



def pack_params(values: dict[str, Any], static: tuple[str, ...] = ()) -> np.ndarray:
    """The Params struct as int32 words (every member is 4 bytes: no padding);
    static params are compiled in, not passed."""
    words: list[np.ndarray] = []
    for name, v in values.items():
        if name in static:
            continue
        if isinstance(v, ParamArray):
            buf = np.zeros(v.capacity, v.values.dtype)
            buf[:len(v.values)] = v.values
            words.append(buf.view(np.int32))
        else:
            words.append(np.asarray([v]).view(np.int32))
    return np.concatenate(words) if words else np.zeros(1, np.int32)


def static_param_names(spec: EnvSpec, values: dict[str, Any]) -> tuple[str, ...]:
    unknown = [n for n in spec.static_params if n not in values]
    if unknown:
        raise EnvBuildError(f"{spec.name}: static_params {unknown} are not kernel params "
                            f"({sorted(values)})")
    return tuple(spec.static_params)



def per_env_words(spec: EnvSpec, params: Any) -> np.ndarray:
    """i32[fields]: 4-byte words per env of each state field, then each scratch field."""
    n = int(spec.num_agents(params))
    words = [n if f.scope == "agent" else 1 for f in spec.fields]
    words += [f.words(params, n) for f in spec.scratch]
    return np.asarray(words, np.int32)

