"""Write an env as a C++/CUDA header, get a jitted JAX env.

An env is two things:

* a header (``my_env.h``) with ``reset``, ``step`` and ``observe`` for one
  agent, written against `cuda/jaxwarp_env.h` (see that file for the
  contract), compiled by g++ for XLA:CPU and by nvcc for CUDA;
* an `EnvSpec`: its params dataclass, its state fields, spaces and the
  pure-JAX reference (the oracle of the consistency tests and the
  benchmarks' baseline).

`build_env(spec, backend)` generates the FFI handlers from the spec (no
hand-written binding code, no positional argument lists: every param is a
named attribute, every state field a typed buffer), compiles them with the
same flags as jaxwarp's built-ins, caches the library in the user cache
directory keyed by the sources, compiler, jaxlib version and GPU
architecture, registers the FFI targets and returns a `ContractEnv`.
Nothing is ever written into the installed package.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp import _ffi
from jaxwarp.core import key_data_of, resolve_backend
from jaxwarp.spaces import Box, MultiDiscrete

# The API headers: installed with the package (jaxwarp/include), or the
# repository's cuda/ folder in a source checkout / editable install.
_INSTALLED = Path(__file__).resolve().parent.parent / "include"
API_DIR = _INSTALLED if (_INSTALLED / "jaxwarp_env.h").exists() else (
    Path(__file__).resolve().parent.parent.parent / "cuda")
# The framework's headers: every built env depends on them (cache key).
API_HEADERS = ("jaxwarp_env.h", "jaxwarp_common.h", "jaxwarp_team.h", "jaxwarp_kernels.h",
               "jaxwarp_ffi.h")
_DTYPES = {"f32": ("float", jnp.float32, "F32"), "i32": ("int32_t", jnp.int32, "S32"),
           "u32": ("uint32_t", jnp.uint32, "U32")}


class EnvBuildError(RuntimeError):
    """A user env could not be built: spec/header mismatch, compiler error or
    missing compiler. The message says what and where."""


@dataclasses.dataclass(frozen=True)
class StateField:
    """One state array: ``dtype`` f32 | i32 | u32, ``scope`` "agent"
    ([envs, agents]) or "env" ([envs])."""

    name: str
    dtype: str
    scope: str = "agent"

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z_]\w*", self.name):
            raise ValueError(f"state field name {self.name!r} is not a C++ identifier")
        if self.dtype not in _DTYPES:
            raise ValueError(f"state field {self.name!r}: dtype {self.dtype!r} is not one of "
                             f"{sorted(_DTYPES)}")
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
    fields: the state arrays (-> ``State``), declared once: here (state_type
        is then generated from them), or None with a state_type whose fields
        are declared with `state_field` (a documented dataclass).
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
    """

    name: str
    header: str | Path
    params_type: type
    num_agents: Callable[[Any], int]
    obs_dim: Callable[[Any], int]
    nvec: Callable[[Any], tuple[int, ...]]
    reference_reset: Callable[..., Any]
    reference_step: Callable[..., Any]
    fields: tuple[StateField, ...] | None = None
    state_type: type | None = None
    obs_bounds: Callable[[Any], tuple[np.ndarray, np.ndarray]] | None = None
    policy_groups: Callable[[Any], dict[str, np.ndarray]] | None = None
    scratch: tuple[ScratchField, ...] = ()
    kernel_params: Callable[[Any], dict[str, Any]] | None = None
    static_params: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.fields is None:  # declared on the state dataclass (state_field)
            if self.state_type is None:
                raise EnvBuildError(f"{self.name}: give the spec its fields or a state_type "
                                    "declared with state_field")
            object.__setattr__(self, "fields", fields_of(self.state_type))
        if self.state_type is None:
            object.__setattr__(self, "state_type", make_state_type(self.name, self.fields))
        names = [f.name for f in self.fields] + [f.name for f in self.scratch]
        dup = sorted({x for x in names if names.count(x) > 1})
        if dup:
            raise EnvBuildError(f"{self.name}: field name(s) {dup} declared twice (state and "
                                "scratch fields share one namespace)")


def make_state_type(name: str, fields: tuple[StateField, ...]) -> type:
    """A flax pytree dataclass with one array per state field, in order."""
    from flax import struct

    cls_name = "".join(w.capitalize() for w in name.split("_")) + "State"
    doc = "\n".join(f"{f.name}: {f.dtype}[envs{', agents' if f.scope == 'agent' else ''}]"
                    for f in fields)
    # A plain class: struct.dataclass makes it a frozen dataclass (a class
    # that is already a dataclass would keep its non-frozen __init__).
    cls = type(cls_name, (), {"__annotations__": {f.name: jax.Array for f in fields},
                              "__doc__": f"State of {name}.\n\n{doc}",
                              "__module__": __name__})
    return struct.dataclass(cls)


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
# Spec checks and code generation.
# ---------------------------------------------------------------------------
_RESERVED = {"jw_params", "jw_per_env", "Env", "Params", "State"}
_FIELD_DECL = re.compile(r"^\s*JAXWARP_STATE\s*\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*\)", re.M)
_C_TYPES = {np.dtype(np.float32): ("float", "f"), np.dtype(np.int32): ("int32_t", "i"),
            np.dtype(np.uint32): ("uint32_t", "I")}


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


def _param_decls(values: dict[str, Any], static: tuple[str, ...] = ()) -> list[str]:
    """C++ member declarations of Params, in order; `static` ones as constants."""
    decls = []
    for name in static:
        v = values[name]
        if isinstance(v, ParamArray):
            raise EnvBuildError(f"static param {name!r} must be a scalar")
        ctype = _C_TYPES[np.asarray(v).dtype][0]
        if ctype == "float":
            lit = repr(float(v)) + "f"
        else:
            lit = f"{int(v)}" + ("u" if ctype == "uint32_t" else "")
        decls.append(f"static constexpr {ctype} {name} = {lit};")
    for name, v in values.items():
        if name in static:
            continue
        if isinstance(v, ParamArray):
            decls.append(f"{_C_TYPES[v.values.dtype][0]} {name}[{v.capacity}];")
        else:
            decls.append(f"{_C_TYPES[np.asarray(v).dtype][0]} {name};")
    if len(decls) == len(static):
        decls.append("int32_t jw_unused;  // the struct passed to kernels is never empty")
    return decls


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


def _static_params(spec: EnvSpec, values: dict[str, Any]) -> tuple[str, ...]:
    unknown = [n for n in spec.static_params if n not in values]
    if unknown:
        raise EnvBuildError(f"{spec.name}: static_params {unknown} are not kernel params "
                            f"({sorted(values)})")
    return tuple(spec.static_params)


def check_header(spec: EnvSpec, header_text: str, header_name: str) -> None:
    """The spec declares the state; a header may restate it with JAXWARP_STATE
    lines (optional), which must then list every field with its dtype and scope."""
    declared = {m.group(2): (m.group(1), m.group(3)) for m in _FIELD_DECL.finditer(header_text)}
    spec_fields = {f.name: (f.dtype, f.scope) for f in spec.fields}
    for name, (dtype, scope) in declared.items():
        if name not in spec_fields:
            raise EnvBuildError(
                f"{spec.name}: {header_name} declares state field {name!r} "
                f"(JAXWARP_STATE({dtype}, {name}, {scope})) but the spec has no field {name!r}; "
                f"spec fields: {sorted(spec_fields)}")
        if spec_fields[name] != (dtype, scope):
            sd, ss = spec_fields[name]
            raise EnvBuildError(
                f"{spec.name}: state field {name!r} is {dtype}/{scope} in {header_name} but "
                f"{sd}/{ss} in the spec")
    for name, (dtype, scope) in spec_fields.items():
        if declared and name not in declared:
            raise EnvBuildError(
                f"{spec.name}: spec field {name!r} is not declared in {header_name}; add "
                f"JAXWARP_STATE({dtype}, {name}, {scope})")
    state_names = [f.name for f in dataclasses.fields(spec.state_type)]
    if state_names != [f.name for f in spec.fields]:
        raise EnvBuildError(f"{spec.name}: state_type fields {state_names} differ from the "
                            f"spec's fields {[f.name for f in spec.fields]} (same names, "
                            "same order)")


def generate_source(spec: EnvSpec, header_path: Path, platform: str, params: Any = None) -> str:
    """The env-specific part of its FFI library: the Params and State structs,
    the traits struct `Env` and one JAXWARP_DEFINE_ENV, which instantiates the
    kernels, CPU loop and handlers of cuda/jaxwarp_ffi.h for ``platform``
    ("cpu" or "cuda": the same text; nvcc or g++ picks the platform)."""
    ns = f"jaxwarp_env_{spec.name}"
    # The header is included by its name and found through `-I <its folder>`:
    # the generated text then names no absolute path, so it is the same on
    # every machine (reviewable, and kept as golden files in tests/golden).
    # The framework's folder comes first on the include path, so a header
    # named like one of its files would never be read.
    if (API_DIR / header_path.name).exists() and (
            (API_DIR / header_path.name).resolve() != header_path.resolve()):
        raise EnvBuildError(f"{spec.name}: header {header_path} has the name of jaxwarp's own "
                            f"{API_DIR / header_path.name}; rename it")
    values = kernel_param_values(spec, params if params is not None else spec.params_type())
    decls = _param_decls(values, _static_params(spec, values))
    fields = [*spec.fields, *spec.scratch]
    ctype = {k: v[0] for k, v in _DTYPES.items()}
    members = "\n".join(f"  {ctype[f.dtype]}* {f.name};" for f in fields)
    binds = ",\n      ".join(f"reinterpret_cast<{ctype[f.dtype]}*>(f[{i}])"
                              for i, f in enumerate(fields))
    params = "\n".join(f"  {d}" for d in decls)
    ptrs = "\n".join(f"    f[{i}] = reinterpret_cast<int32_t*>(s.{f.name});"
                      for i, f in enumerate(fields))
    return f"""// Generated by jaxwarp.authoring for env '{spec.name}'. Do not edit: the
// kernels, CPU loop and handlers are cuda/jaxwarp_kernels.h and jaxwarp_ffi.h.
#include <stdint.h>
#include "xla/ffi/api/ffi.h"
#include "jaxwarp_env.h"

namespace {ns} {{
struct Params {{
{params}
}};
struct State {{  // one env's rows: state fields, then scratch
{members}
}};
using namespace ::jaxwarp::defaults;  // what the header may leave out
#include "{header_path.name}"
struct Env {{
  using Params = {ns}::Params;
  using State = {ns}::State;
  static constexpr int kFields = {len(fields)};
  static constexpr int kStateFields = {len(spec.fields)};
  static constexpr int kStepPhases = {ns}::kStepPhases;
  static constexpr unsigned kTeamPassPhases = {ns}::kTeamPassPhases;
  JW_HD static State bind(int32_t* const* f) {{
    return State{{{binds}}};
  }}
  JW_HD static void pointers(const State& s, int32_t** f) {{
{ptrs}
  }}
}};
}}  // namespace {ns}

#include "jaxwarp_ffi.h"
JAXWARP_DEFINE_ENV({spec.name}, {ns}::Env)
"""


def generated_source(env: EnvSpec | str, backend: str = "cpu", params: Any = None,
                     header: str | Path | None = None) -> str:
    """The C++ source of an env's FFI library, exactly as `build_env` and
    ``jaxwarp build`` compile it for `backend` (``jaxwarp build ENV --emit DIR``
    writes it out for review).

    Args:
        env: an `EnvSpec`, or the name of a registered env built through the
            authoring contract (then its params default to those
            ``jaxwarp.make(name)`` uses).
        backend: "cpu" (g++) or "cuda" (nvcc).
        params: the env's params (static params are compiled in); default: the
            registered env's, or the spec's params type's defaults.
        header: the env's header; default: the spec's.
    Returns:
        The source text (str).
    """
    if backend not in ("cpu", "cuda"):
        raise ValueError(f"backend must be 'cpu' or 'cuda'; got {backend!r}")
    if isinstance(env, str):
        from jaxwarp.registry import _REGISTRY, make

        cls = _REGISTRY.get(env, (None,))[0]
        if not (isinstance(cls, type) and issubclass(cls, ContractEnv)):
            contract = [n for n, (c, _, _) in _REGISTRY.items()
                        if isinstance(c, type) and issubclass(c, ContractEnv)]
            raise ValueError(f"env {env!r} is not an env built through the authoring "
                             f"contract; those are {contract}")
        made = make(env, backend="jax")
        spec, params = made.spec, (made.params if params is None else params)
    elif isinstance(env, EnvSpec):
        spec = env
    else:
        raise TypeError(f"env must be an EnvSpec or an env name; got {type(env).__name__}")
    return generate_source(spec, Path(header or spec.header), backend, params)


# ---------------------------------------------------------------------------
# Building and caching.
# ---------------------------------------------------------------------------
def cache_dir() -> Path:
    """Where built user envs live: $JAXWARP_CACHE_DIR, else the user cache
    directory ($XDG_CACHE_HOME or ~/.cache)/jaxwarp."""
    if os.environ.get("JAXWARP_CACHE_DIR"):
        return Path(os.environ["JAXWARP_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "jaxwarp"


def _flags(compiler: str) -> tuple[str, ...]:
    """Flags of `compiler` ("cxx" or "nvcc") from cuda/compile_flags.txt, the
    one place they are defined (CMakeLists.txt reads it too)."""
    for line in (API_DIR / "compile_flags.txt").read_text().splitlines():
        if line.startswith(compiler + " "):
            return tuple(line.split()[1:])
    raise EnvBuildError(f"{API_DIR / 'compile_flags.txt'} has no {compiler!r} line")


CXX_FLAGS = _flags("cxx")


def _sanitize_flags() -> list[str]:
    """Extra g++/clang flags of the CPU build from JAXWARP_SANITIZE (e.g.
    ``address,undefined``): the env libraries are built with those
    sanitizers (part of the cache key), any finding aborts. Loading an
    ASan-built library into Python needs the ASan runtime preloaded
    (``LD_PRELOAD=$(g++ -print-file-name=libasan.so)``); tests/test_sanitizers.py
    runs every env that way."""
    kinds = os.environ.get("JAXWARP_SANITIZE", "").strip()
    if not kinds:
        return []
    if not re.fullmatch(r"[a-z]+(,[a-z]+)*", kinds):
        raise EnvBuildError(f"JAXWARP_SANITIZE must be a comma-separated list of sanitizers, "
                            f"e.g. address,undefined; got {kinds!r}")
    return [f"-fsanitize={kinds}", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g"]
NVCC_FLAGS = _flags("nvcc")


def _find_cxx() -> str:
    for cand in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if cand and shutil.which(cand):
            return shutil.which(cand)  # type: ignore[return-value]
    raise EnvBuildError("no C++ compiler found to build the env for XLA:CPU: install g++ "
                        "(e.g. `apt install g++`) or set CXX to a C++17 compiler")


def _find_nvcc() -> str:
    cands = [os.environ.get("NVCC")]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            cands.append(os.path.join(home, "bin", "nvcc"))
    cands.append(shutil.which("nvcc"))
    for c in cands:
        if c and os.path.exists(c):
            return c
    raise EnvBuildError("nvcc not found to build the env for CUDA: install the CUDA toolkit, "
                        "put nvcc on PATH or set CUDA_HOME (or NVCC); or use backend='cpu' "
                        "or backend='jax'")


@functools.cache
def _compiler_id(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return path


def _gpu_arch() -> str:
    """Compute capability to build for ("90"): $JAXWARP_CUDA_ARCH, else the first GPU's."""
    if os.environ.get("JAXWARP_CUDA_ARCH"):
        return os.environ["JAXWARP_CUDA_ARCH"]
    try:
        cc = jax.devices("gpu")[0].compute_capability
    except (RuntimeError, AttributeError) as e:
        raise EnvBuildError("no CUDA GPU to build for: set JAXWARP_CUDA_ARCH (e.g. 90) to "
                            f"compile without one ({e})") from None
    return str(cc).replace(".", "")


def _readable_errors(text: str, header: Path, generated: Path) -> str:
    """Compiler output with the user's header first; generated-file lines last."""
    lines = text.splitlines()
    mine = [ln for ln in lines if str(header) in ln or header.name in ln]
    rest = [ln for ln in lines if ln not in mine]
    return "\n".join(mine + (["", "(more compiler output:)"] if mine and rest else [])
                     + rest[:60])


def _compile(spec: EnvSpec, header: Path, platform: str, cubin: bool = False,
             params: Any = None) -> Path:
    """The env's FFI library for `platform` (or, with cubin=True, the device code
    alone as a CUDA module for PyCUDA), from the cache or freshly compiled."""
    import jaxlib

    src = generated_source(spec, platform, params, header)
    compiler = _find_nvcc() if platform == "cuda" else _find_cxx()
    arch = _gpu_arch() if platform == "cuda" else ""
    h = hashlib.sha256()
    # Every file the build reads: the framework's headers and, followed
    # recursively, every header the env's header includes (subfolders too).
    sources = _included_files(header, [API_DIR, header.parent])
    sources |= {API_DIR / f for f in API_HEADERS} | {API_DIR / "compile_flags.txt"}
    files = "".join(str(f) + f.read_text() for f in sorted(sources))
    extra = shlex.split(os.environ.get("JAXWARP_NVCC_FLAGS", "")) if platform == "cuda" else []
    if platform == "cpu":
        extra = _sanitize_flags() + shlex.split(os.environ.get("JAXWARP_CXX_FLAGS", ""))
    for part in (src, files, _compiler_id(compiler), jaxlib.__version__,
                 arch, sys.platform, " ".join(extra), " ".join(CXX_FLAGS + NVCC_FLAGS)):
        h.update(part.encode())
    digest = h.hexdigest()[:16]
    out_dir = cache_dir() / f"{spec.name}-{platform}-{digest}"
    lib = out_dir / (f"{spec.name}.cubin" if cubin else f"lib{spec.name}_{platform}.so")
    if _intact(lib):
        return lib
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        gen = out_dir / (f"{spec.name}_ffi.cu" if platform == "cuda" else f"{spec.name}_ffi.cc")
        gen.write_text(src)
    except OSError as e:
        raise EnvBuildError(f"{spec.name}: cannot write the build cache {out_dir} ({e}); set "
                            "JAXWARP_CACHE_DIR to a writable folder") from None
    includes = ["-I", str(API_DIR), "-I", str(header.parent), "-I", jax.ffi.include_dir()]
    tmp = lib.with_suffix(f".{os.getpid()}.tmp")
    if cubin:
        cmd = [compiler, *NVCC_FLAGS, "-cubin", f"-arch=sm_{arch}", "-w",
               *extra, *includes, str(gen), "-o", str(tmp)]
    elif platform == "cuda":
        cmd = [compiler, *NVCC_FLAGS, "-shared", "-Xcompiler", "-fPIC,-w", "-cudart", "static",
               f"-gencode=arch=compute_{arch},code=[sm_{arch},compute_{arch}]",
               *extra, *includes, str(gen), "-o", str(tmp)]
    else:
        cmd = [compiler, *CXX_FLAGS, *extra, "-shared", "-fPIC", "-w", *includes, str(gen), "-o",
               str(tmp)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise EnvBuildError(
            f"{spec.name}: compiling {header} for {platform} failed "
            f"({Path(compiler).name}); generated bindings: {gen}\n"
            + _readable_errors(proc.stderr + proc.stdout, header, gen))
    _seal(tmp, lib)
    return lib


_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def _included_files(header: Path, search: list[Path]) -> set[Path]:
    """`header` and every file it includes with #include "...", recursively:
    each name is looked up next to the including file, then in `search`."""
    seen: set[Path] = set()
    todo = [header.resolve()]
    while todo:
        f = todo.pop()
        if f in seen or not f.is_file():
            continue
        seen.add(f)
        for name in _INCLUDE.findall(f.read_text(errors="replace")):
            for d in [f.parent, *search]:
                cand = (d / name).resolve()
                if cand.is_file():
                    todo.append(cand)
                    break
    return seen


def _seal(tmp: Path, lib: Path) -> None:
    """Moves a fresh build into place with its checksum beside it (written
    first: a library without a matching checksum is never used)."""
    digest = hashlib.sha256(tmp.read_bytes()).hexdigest()
    side = lib.with_name(lib.name + ".sha256")
    side_tmp = side.with_name(side.name + f".{os.getpid()}.tmp")
    side_tmp.write_text(digest)
    os.replace(side_tmp, side)
    os.replace(tmp, lib)


def _intact(lib: Path) -> bool:
    """Whether a cached library exists and matches its checksum (a truncated
    or half-copied file would crash the process when loaded)."""
    side = lib.with_name(lib.name + ".sha256")
    try:
        return lib.is_file() and side.read_text().strip() == hashlib.sha256(
            lib.read_bytes()).hexdigest()
    except OSError:
        return False


_REGISTERED: dict[str, Any] = {}


def _register(spec: EnvSpec, header: Path, platform: str, params: Any = None) -> str:
    """Builds (or loads from the cache) and registers; returns the target prefix."""
    import ctypes

    lib_path = _compile(spec, header, platform, params=params)
    prefix = f"jaxwarp_user_{spec.name}_{lib_path.parent.name.rsplit('-', 1)[-1]}"
    if (prefix, platform) not in _REGISTERED:
        lib = ctypes.cdll.LoadLibrary(str(lib_path))
        for kind in ("reset", "step"):
            fn = getattr(lib, f"jaxwarp_{spec.name}_{kind}_{platform}")
            jax.ffi.register_ffi_target(f"{prefix}_{kind}_{platform}", jax.ffi.pycapsule(fn),
                                        platform="CUDA" if platform == "cuda" else "cpu")
        _REGISTERED[(prefix, platform)] = lib
    return prefix


class _Layout(__import__("ctypes").Structure):
    """jaxwarp::Layout (cuda/jaxwarp_kernels.h)."""

    _fields_ = [(name, __import__("ctypes").c_int32) for name in
                ("tpe", "epb", "staged", "obs_staged", "words", "scratch_words", "smem_bytes")]


def launch_layout(spec: EnvSpec, params: Any, platform: str, header: Path | None = None
                  ) -> _Layout:
    """The launch layout the built library computes for these params
    (`jaxwarp_<env>_layout`, exported by the library: one implementation)."""
    import ctypes

    prefix = _register(spec, Path(header or spec.header).resolve(), platform, params)
    lib = _REGISTERED[(prefix, platform)]
    per_env = per_env_words(spec, params)
    out = _Layout()
    fn = getattr(lib, f"jaxwarp_{spec.name}_layout")
    fn(ctypes.c_int32(int(spec.num_agents(params))), ctypes.c_int32(int(spec.obs_dim(params))),
       per_env.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), ctypes.byref(out))
    return out


def per_env_words(spec: EnvSpec, params: Any) -> np.ndarray:
    """i32[fields]: 4-byte words per env of each state field, then each scratch field."""
    n = int(spec.num_agents(params))
    words = [n if f.scope == "agent" else 1 for f in spec.fields]
    words += [f.words(params, n) for f in spec.scratch]
    return np.asarray(words, np.int32)


# ---------------------------------------------------------------------------
# The env object.
# ---------------------------------------------------------------------------
class ContractEnv:
    """A batched env built from an `EnvSpec` (same API as TagContinuous).

    ``obs, state = env.reset(key, num_envs)``;
    ``obs, state, reward, done, info = env.step(key, state, actions)`` with
    ``actions: i32[envs, agents, heads]``, ``obs: f32[envs, agents, obs_dim]``,
    ``reward: f32[envs, agents]``, ``done: bool[envs]``, info
    {"terminated", "truncated": bool[envs], "episode_return" when the state
    has such a field}.

    obs_dtype: "float32" (default) or "bfloat16": observations written in
    bfloat16 (half the bytes of the largest output, for bf16 policies), equal
    to the float32 ones rounded to nearest even, on every backend.
    """

    def __init__(self, spec: EnvSpec, params: Any = None, backend: str = "auto",
                 header: str | Path | None = None, checks: bool = False,
                 obs_dtype: Any = "float32"):
        self.obs_dtype = _obs_dtype(obs_dtype)
        self.spec = spec
        self.name = spec.name
        self.params = params if params is not None else spec.params_type()
        if backend not in ("auto", "cuda", "cpu", "jax"):
            raise ValueError(f"backend={backend!r} is unknown; expected one of "
                             "('auto', 'cuda', 'cpu', 'jax')")
        self.backend = "jax" if backend == "jax" else (
            ("cuda" if _ffi.gpu_available() else "cpu") if backend == "auto"
            else resolve_backend(backend) if backend == "cuda" else "cpu")
        self._header = Path(header or spec.header).resolve()
        self._prefix = None
        if self.backend != "jax":
            if not self._header.exists():
                raise EnvBuildError(f"{spec.name}: header {self._header} does not exist")
            check_header(spec, self._header.read_text(), self._header.name)
            self._prefix = _register(spec, self._header, self.backend, self.params)
        self.checks = bool(checks)
        self._params_id = params_id(spec.name, self.params)
        self._attrs = {}
        self._scratch_words = 0
        self._staged = True
        if self.backend != "jax":
            per_env = per_env_words(spec, self.params)
            values = kernel_param_values(spec, self.params)
            self._attrs = dict(jw_params=pack_params(values, _static_params(spec, values)),
                               jw_per_env=per_env, jw_num_agents=np.int32(self.num_agents),
                               jw_obs_dim=np.int32(self.obs_dim))
            layout = launch_layout(spec, self.params, self.backend, self._header)
            self._scratch_words = int(layout.scratch_words)
            self._staged = bool(layout.staged) if self.backend == "cuda" else False

    @property
    def num_agents(self) -> int:
        return int(self.spec.num_agents(self.params))

    @property
    def obs_dim(self) -> int:
        return int(self.spec.obs_dim(self.params))

    @property
    def action_space(self) -> MultiDiscrete:
        return MultiDiscrete(tuple(self.spec.nvec(self.params)))

    @property
    def observation_space(self) -> Box:
        if self.spec.obs_bounds is not None:
            low, high = self.spec.obs_bounds(self.params)
        else:
            low = np.full(self.obs_dim, -np.inf, np.float32)
            high = np.full(self.obs_dim, np.inf, np.float32)
        return Box(low=np.asarray(low, np.float32), high=np.asarray(high, np.float32))

    @property
    def policy_groups(self) -> dict[str, np.ndarray]:
        if self.spec.policy_groups is not None:
            return self.spec.policy_groups(self.params)
        return {"agent": np.arange(self.num_agents)}

    def _keys(self, key: jax.Array, env_offset: Any) -> jax.Array:
        """u32[3]: key words and the global index of this call's first env.

        env_offset: a Python/NumPy int in [0, 2**32), or an integer array of
        shape () (traced values cannot be range-checked: they wrap to u32)."""
        if isinstance(env_offset, (int, np.integer)) and not isinstance(env_offset,
                                                                         (bool, np.bool_)):
            if not 0 <= int(env_offset) < 2**32:
                raise ValueError(f"env_offset must lie in [0, 2**32) (the global index of the "
                                 f"first env); got {env_offset}")
            off = jnp.uint32(int(env_offset))
        elif isinstance(env_offset, (jax.Array, np.ndarray)):
            off = env_offset
            if off.ndim != 0 or not jnp.issubdtype(off.dtype, jnp.integer):
                raise ValueError(f"env_offset must be an integer scalar; got {off.dtype}"
                                 f"{list(off.shape)}")
        else:
            raise TypeError(f"env_offset must be an int or an integer array of shape (); got "
                            f"{type(env_offset).__name__}")
        return jnp.concatenate([key_data_of(key), off.astype(jnp.uint32)[None]])

    def _scratch(self, num_envs: int) -> jax.ShapeDtypeStruct:
        """The scratch buffer: on the CPU one env's words per worker thread
        (XLA's pool runs envs in parallel, each worker on its own slot); on
        the GPU every env's, unless the layout keeps scratch in shared memory."""
        words = self._scratch_words
        if self.backend == "cuda" and not self._staged:
            words *= num_envs
        elif self.backend == "cpu":
            words *= min(num_envs, os.cpu_count() or 1)
        return jax.ShapeDtypeStruct((max(words, 1),), jnp.int32)

    def reset(self, key: jax.Array, num_envs: int, *, env_offset: Any = 0):
        """obs f32[num_envs, agents, obs_dim], state with [num_envs, ...] fields.

        env_offset: global index of the first env (sharded calls): env e draws
        the random numbers of env env_offset + e.
        """
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) \
                or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int; got {num_envs!r}")
        num_envs = int(num_envs)
        keys = self._keys(key, env_offset)
        if self.backend == "jax":
            _require_zero_offset(env_offset)
            obs, state = self.spec.reference_reset(self.params, keys[:2], num_envs)
            return obs.astype(self.obs_dtype), self._tag(state)
        # One launch per device over its own envs under jit with env-sharded
        # outputs (jaxwarp._ffi.env_partitioned_call: the partitioning rule).
        outs = _ffi.env_partitioned_call(self._reset_call, (keys,), (False,), num_envs,
                                         f"{self._prefix}_reset")
        k = len(self.spec.fields)
        return outs[k], self._tag(self.spec.state_type(*outs[:k]))

    def _reset_call(self, offset: Any, num_envs: int, keys: jax.Array) -> tuple:
        """The reset FFI call of num_envs envs: keys u32[..., 3] (leading vmap
        axes); offset: None or u32[], added to the keys' env offset word.
        Returns the state fields and obs (the scratch output is dropped)."""
        if offset is not None:
            keys = keys.at[..., 2].add(offset)
        n, batch = self.num_agents, tuple(keys.shape[:-1])
        scratch = self._scratch(num_envs)
        outs = jax.ffi.ffi_call(
            f"{self._prefix}_reset_{self.backend}",
            [jax.ShapeDtypeStruct(batch + ((num_envs, n) if f.scope == "agent" else
                                           (num_envs,)), _DTYPES[f.dtype][1])
             for f in self.spec.fields]
            + [jax.ShapeDtypeStruct(batch + scratch.shape, scratch.dtype),
               jax.ShapeDtypeStruct(batch + (num_envs, n, self.obs_dim), self.obs_dtype)],
            vmap_method="broadcast_all",
        )(keys, **self._attrs)
        k = len(self.spec.fields)
        return tuple(outs[:k]) + (outs[k + 1],)

    def _tag(self, state: Any) -> Any:
        """The state as `tagged_state_type`, carrying this env's params_id."""
        return tag_state(self.spec.state_type, state, self._params_id)

    def check_state(self, state: Any) -> int:
        """Raises unless `state` is this env's state with consistent shapes and
        dtypes (the kernels index every field by env and agent: a wrong shape
        would read and write out of bounds). Returns num_envs."""
        if not isinstance(state, self.spec.state_type):
            raise TypeError(f"state must be a {self.spec.state_type.__name__}; got "
                            f"{type(state).__name__}")
        check_params_id(state, self._params_id)
        fields = [getattr(state, f.name) for f in self.spec.fields]
        # The env count most fields agree on: the error then names the odd one.
        leading = [v.shape[0] for v in fields if getattr(v, "ndim", 0) >= 1]
        num_envs = max(set(leading), key=leading.count) if leading else None
        for f, v in zip(self.spec.fields, fields):
            want = _DTYPES[f.dtype][1]
            shape = (num_envs, self.num_agents) if f.scope == "agent" else (num_envs,)
            if tuple(v.shape) != shape or v.dtype != want:
                raise ValueError(f"state.{f.name} must be {jnp.dtype(want).name}{list(shape)}; "
                                 f"got {v.dtype}{list(v.shape)}")
        return num_envs

    def check_actions(self, actions: Any, num_envs: int) -> jax.Array:
        """Returns actions as i32[num_envs, agents, heads], or raises. A
        single-head action may come as i32[envs, agents] (and, for a
        single-agent env, i32[envs]), as gymnax/JaxMARL users pass it. Other
        integer dtypes (NumPy's default int64) and Python lists are cast to
        int32 (`jaxwarp.core.int32_actions`; floats raise TypeError). With
        checks=True, values outside the action space are reported (checkify)."""
        from jaxwarp.core import int32_actions

        if not hasattr(actions, "shape"):  # a Python list: an array first
            actions = int32_actions(actions)
        heads = len(self.spec.nvec(self.params))
        expected = (num_envs, self.num_agents, heads)
        shape = tuple(getattr(actions, "shape", ()))
        if heads == 1 and shape == (num_envs, self.num_agents):
            actions = actions[..., None]
        elif heads == 1 and self.num_agents == 1 and shape == (num_envs,):
            actions = actions[:, None, None]
        elif not hasattr(actions, "shape") or shape != expected:
            also = (f" or {(num_envs, self.num_agents)}" if heads == 1 else "")
            raise ValueError(f"actions must have shape {expected} (envs, agents, heads){also}; "
                             f"got {getattr(actions, 'shape', type(actions).__name__)}")
        actions = int32_actions(actions)
        if self.checks:
            from jax.experimental import checkify

            nvec = tuple(int(v) for v in self.spec.nvec(self.params))
            checkify.check(self.action_space.contains(actions),
                           f"{self.name}: actions out of range: action[..., h] must lie in "
                           f"[0, nvec[h]) with nvec={nvec}")
        return actions

    def _check_finite(self, state: Any) -> None:
        """checks=True: NaN or inf in a float state field is reported through
        checkify (the backends would propagate it differently)."""
        from jax.experimental import checkify

        for f in self.spec.fields:
            if f.dtype == "f32":
                checkify.check(jnp.isfinite(getattr(state, f.name)).all(),
                               f"{self.name}: state.{f.name} holds NaN or inf")

    def step(self, key: jax.Array, state: Any, actions: jax.Array, *, env_offset: Any = 0,
             autoreset: bool = True, in_place: bool = True):
        """One step of every env with auto-reset; see the class docstring.

        autoreset=False leaves the envs that finish as they ended: obs are
        their final observations and the state must not be stepped again
        before those envs are reset (`step` with autoreset=True from the same
        key and state gives the reset ones; jaxwarp.adapters use the pair for
        Gymnasium's final observation).

        in_place=False: the kernels write the new state to buffers of their
        own and leave the input state's untouched (the default updates it in
        place where XLA can, donating it); for callers that step twice from
        one state, which otherwise make XLA copy it first.
        """
        for name, flag in (("autoreset", autoreset), ("in_place", in_place)):
            if not isinstance(flag, (bool, np.bool_)):
                raise TypeError(f"{name} must be a Python bool; got {type(flag).__name__}")
        num_envs = self.check_state(state)
        actions = self.check_actions(actions, num_envs)
        if self.checks:
            self._check_finite(state)
        keys = self._keys(key, env_offset)
        if self.backend == "jax":
            _require_zero_offset(env_offset)
            # The reference builds and returns the plain state type.
            plain = tag_state(self.spec.state_type, state, "")
            if autoreset:
                out = self.spec.reference_step(self.params, keys[:2], plain, actions)
            else:
                if not reference_takes_autoreset(self.spec):
                    raise ValueError(
                        f"{self.name}: step(autoreset=False) on the 'jax' backend needs the "
                        "spec's reference_step to take autoreset= (see jaxwarp.core."
                        "reset_mask); the 'cpu' and 'cuda' backends support it for every env")
                out = self.spec.reference_step(self.params, keys[:2], plain, actions,
                                               autoreset=False)
            obs, state, reward, done = out[:4]
            obs = obs.astype(self.obs_dtype)
            info = dict(out[4]) if len(out) > 4 else {}
        else:
            fields = [getattr(state, f.name) for f in self.spec.fields]
            k = len(fields)
            # One launch per device over its own envs under jit with
            # env-sharded inputs (jaxwarp._ffi.env_partitioned_call).
            outs = _ffi.env_partitioned_call(
                functools.partial(self._step_call, bool(autoreset), bool(in_place)),
                (keys, actions, *fields), (False,) + (True,) * (k + 1), num_envs,
                f"{self._prefix}_step")
            state = self.spec.state_type(*outs[:k])
            obs, reward, done, term, trunc = outs[k:]
            info = {"terminated": term, "truncated": trunc}
        state = self._tag(state)
        if hasattr(state, "episode_return"):
            info["episode_return"] = state.episode_return
        return obs, state, reward, done, info

    def _step_call(self, autoreset: bool, in_place: bool, offset: Any, num_envs: int,
                   keys: jax.Array, actions: jax.Array, *fields: jax.Array) -> tuple:
        """The step FFI call of num_envs envs (leading vmap axes on every
        arg); offset: None or u32[], added to the keys' env offset word.
        Returns state fields, obs, reward, done, terminated, truncated (the
        scratch output is dropped)."""
        if offset is not None:
            keys = keys.at[..., 2].add(offset)
        n, k, batch = self.num_agents, len(fields), tuple(keys.shape[:-1])
        heads = len(self.spec.nvec(self.params))
        scratch = self._scratch(num_envs)
        outs = jax.ffi.ffi_call(
            f"{self._prefix}_step_{self.backend}",
            [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in fields]
            + [jax.ShapeDtypeStruct(batch + scratch.shape, scratch.dtype),
               jax.ShapeDtypeStruct(batch + (num_envs, n, self.obs_dim), self.obs_dtype),
               jax.ShapeDtypeStruct(batch + (num_envs, n), jnp.float32)]
            + [jax.ShapeDtypeStruct(batch + (num_envs,), jnp.bool_)] * 3,
            vmap_method="broadcast_all",
            # in_place=False: outputs of their own (the handler copies the state).
            input_output_aliases={2 + i: i for i in range(k)} if in_place else {},
        )(keys, actions, *fields, jw_heads=np.int32(heads),
          jw_autoreset=np.int32(bool(autoreset)), **self._attrs)
        return tuple(outs[:k]) + tuple(outs[k + 1:])

    def __repr__(self) -> str:
        return f"ContractEnv({self.name!r}, backend={self.backend!r}, params={self.params})"


def reference_takes_autoreset(spec: EnvSpec) -> bool:
    """Whether the spec's pure-JAX reference_step takes ``autoreset=`` (what
    step(autoreset=False) needs on the 'jax' backend)."""
    return "autoreset" in inspect.signature(spec.reference_step).parameters


def _obs_dtype(obs_dtype: Any) -> np.dtype:
    try:
        dt = jnp.dtype(obs_dtype)
    except TypeError:
        dt = None
    if dt not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16)):
        raise ValueError(f"obs_dtype must be 'float32' or 'bfloat16'; got {obs_dtype!r}")
    return dt


def env_class(spec: EnvSpec) -> type[ContractEnv]:
    """The env class of a spec: ``Cls(params=None, backend="auto", checks=False,
    obs_dtype="float32")``. Envs are declared by their spec; write a subclass
    only to add behaviour."""
    def __init__(self, params: Any = None, backend: str = "auto", checks: bool = False,
                 obs_dtype: Any = "float32"):
        ContractEnv.__init__(self, spec, params=params, backend=backend, checks=checks,
                             obs_dtype=obs_dtype)

    name = "".join(w.capitalize() for w in spec.name.split("_"))
    return type(name, (ContractEnv,), {
        "__init__": __init__, "SPEC": spec, "__module__": __name__,
        "__doc__": f"Batched {spec.name} built from its spec; see `ContractEnv`."})


def _require_zero_offset(env_offset: Any) -> None:
    if not (isinstance(env_offset, (int, np.integer)) and env_offset == 0):
        raise ValueError("env_offset applies to the kernel backends; the 'jax' backend is "
                         "sharded by jit itself (leave env_offset=0)")


def build_env(spec: EnvSpec, params: Any = None, backend: str = "auto",
              header: str | Path | None = None, checks: bool = False,
              obs_dtype: Any = "float32") -> ContractEnv:
    """Builds (or loads from the cache) the env's kernels for `backend` and
    returns the env. Raises EnvBuildError with the field, file and line at
    fault when the header and spec disagree or the code does not compile."""
    return ContractEnv(spec, params=params, backend=backend, header=header, checks=checks,
                       obs_dtype=obs_dtype)

