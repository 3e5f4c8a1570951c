"""The code generation layer: an env's spec -> the C++ text of its layout.

`generate_source` writes the one env-specific file of an env's FFI library,
its layout header (the Params and State structs and the traits struct
`Env`, derived from the spec). Every env's library is the checked-in
translation unit ffi/env_ffi.cc compiled with that header as
"env_layout.h"; the kernels, CPU loop and handlers are the framework's
templates (cuda/jaxwarp_kernels.h, ffi/jaxwarp_ffi.h).
`generated_source` is what ``jaxwarp build ENV --emit DIR`` writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from jaxwarp._ffi import API_DIR, FFI_DIR
from jaxwarp.authoring.spec import (DTYPES, EnvBuildError, EnvSpec, ParamArray,
                                    kernel_param_values, static_param_names)

# The framework's headers in API_DIR: every built env depends on them (cache key).
API_HEADERS = ("jaxwarp_env.h", "jaxwarp_common.h", "jaxwarp_team.h", "jaxwarp_kernels.h",
               "jaxwarp_fused.h", "sampler.h")
# In FFI_DIR: the translation unit every env's library compiles (FFI_SOURCE)
# and the handler templates it instantiates; in the cache key too.
FFI_SOURCE = "env_ffi.cc"
FFI_SOURCES = (FFI_SOURCE, "jaxwarp_ffi.h")
# The name under which FFI_SOURCE includes the generated layout.
LAYOUT_NAME = "env_layout.h"
_C_TYPES = {np.dtype(np.float32): ("float", "f"), np.dtype(np.int32): ("int32_t", "i"),
            np.dtype(np.uint32): ("uint32_t", "I")}


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


def _kept(spec: EnvSpec, values: dict[str, Any]) -> str:
    """The Env traits members through which the kernel template keeps the
    step counter, the episode returns and the time limit (or, where the spec
    has none, says so)."""
    names = {f.name for f in spec.fields}
    limit = spec.time_limit
    if limit is not None:
        v = values.get(limit)
        if v is None:
            raise EnvBuildError(f"{spec.name}: time_limit={limit!r} is not a kernel param "
                                f"({sorted(values)}); name the int param that holds the "
                                "episode length in steps, or set time_limit=None")
        if isinstance(v, ParamArray) or np.asarray(v).dtype != np.int32:
            raise EnvBuildError(f"{spec.name}: time_limit={limit!r} must name an int kernel "
                                f"param (int32); got {type(v).__name__}")
    steps, returns = "timestep" in names, "episode_return" in names
    flag = {True: "true", False: "false"}
    lines = [
        "  // Kept by the kernel template (cuda/jaxwarp_kernels.h), not by the header:",
        f"  static constexpr bool kCountsSteps = {flag[steps]};",
        f"  static constexpr bool kEpisodeReturns = {flag[returns]};",
        f"  static constexpr bool kTimeLimit = {flag[limit is not None]};",
        "  JW_HD static int32_t* timestep(const State& s) { return s.timestep; }" if steps
        else "  JW_HD static int32_t* timestep(const State&) { return nullptr; }",
        "  JW_HD static float* episode_return(const State& s) { return s.episode_return; }"
        if returns else "  JW_HD static float* episode_return(const State&) { return nullptr; }",
        f"  JW_HD static int32_t time_limit(const Params& p) {{ return p.{limit}; }}"
        if limit is not None else "  JW_HD static int32_t time_limit(const Params&) { return 0; }",
    ]
    return "\n".join(lines)


def _check_header_name(spec: EnvSpec, header_path: Path) -> None:
    """Raise EnvBuildError if the env header's file name would be shadowed on the include path."""
    # The header is included by its name and found through `-I <its folder>`:
    # the generated text then names no absolute path, so it is the same on
    # every machine (reviewable, and checked in for the built-ins under ffi/layouts).
    # The framework's folders come first on the include path (and the layout
    # itself is "env_layout.h"), so a header named like one of their files
    # would never be read.
    for d in (API_DIR, FFI_DIR):
        if (d / header_path.name).exists() and (
                (d / header_path.name).resolve() != header_path.resolve()):
            raise EnvBuildError(f"{spec.name}: header {header_path} has the name of jaxwarp's "
                                f"own {d / header_path.name}; rename it")
    if header_path.name == LAYOUT_NAME:
        raise EnvBuildError(f"{spec.name}: header {header_path} has the name of the generated "
                            f"layout ({LAYOUT_NAME}); rename it")


def _field_lines(fields: list) -> tuple[str, str, str]:
    """C++ text of the fields: (State members, bind() initializers, pointers() stores)."""
    ctype = {k: v[0] for k, v in DTYPES.items()}
    members = "\n".join(f"  {ctype[f.dtype]}* {f.name};" for f in fields)
    binds = ",\n      ".join(f"reinterpret_cast<{ctype[f.dtype]}*>(f[{i}])"
                              for i, f in enumerate(fields))
    ptrs = "\n".join(f"    f[{i}] = reinterpret_cast<int32_t*>(s.{f.name});"
                      for i, f in enumerate(fields))
    return members, binds, ptrs


def generate_source(spec: EnvSpec, header_path: Path, platform: str, params: Any = None) -> str:
    """The env's layout header, the env-specific part of its FFI library: the
    Params and State structs, the traits struct `Env` (inside namespace
    ``jaxwarp_env_<name>``, around the env's header) and the macros
    JAXWARP_ENV_NAME and JAXWARP_ENV, through which ffi/env_ffi.cc (which
    includes this text as "env_layout.h") instantiates the kernels, CPU loop
    and handlers of ffi/jaxwarp_ffi.h for ``platform`` ("cpu" or "cuda": the
    same text; nvcc or g++ picks the platform)."""
    ns = f"jaxwarp_env_{spec.name}"
    _check_header_name(spec, header_path)
    values = kernel_param_values(spec, params if params is not None else spec.params_type())
    decls = _param_decls(values, static_param_names(spec, values))
    kept = _kept(spec, values)
    fields = [*spec.fields, *spec.scratch]
    members, binds, ptrs = _field_lines(fields)
    params = "\n".join(f"  {d}" for d in decls)
    return f"""// Generated by jaxwarp.authoring for env '{spec.name}' from its spec. Do not
// edit. The env's FFI library is ffi/env_ffi.cc compiled with this file as
// "env_layout.h"; the kernels, CPU loop and handlers are the templates of
// cuda/jaxwarp_kernels.h and ffi/jaxwarp_ffi.h.
#pragma once
#include <stdint.h>
#include "jaxwarp_env.h"

#define JAXWARP_ENV_NAME {spec.name}
#define JAXWARP_ENV {ns}::Env

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
{kept}
  JW_HD static State bind(int32_t* const* f) {{
    return State{{{binds}}};
  }}
  JW_HD static void pointers(const State& s, int32_t** f) {{
{ptrs}
  }}
}};
}}  // namespace {ns}
"""


def generated_source(env: Any, backend: str = "cpu", params: Any = None,
                     header: str | Path | None = None) -> str:
    """The generated part of an env's FFI library, its layout header, exactly
    as `build_env` and ``jaxwarp build`` compile it for `backend` (through
    ffi/env_ffi.cc, as "env_layout.h"; ``jaxwarp build ENV --emit DIR`` writes
    it out for review as ``<env>_layout.h``).

    Args:
        env: an `EnvSpec`, or an env built through the authoring contract
            (``jaxwarp.make(name, backend="jax")``: its spec and params).
        backend: "cpu" (g++) or "cuda" (nvcc).
        params: the env's params (static params are compiled in); default: the
            env's, or the spec's params type's defaults.
        header: the env's header; default: the spec's.
    Returns:
        The header text (str).
    """
    if backend not in ("cpu", "cuda"):
        raise ValueError(f"backend must be 'cpu' or 'cuda'; got {backend!r}")
    if isinstance(getattr(env, "spec", None), EnvSpec):  # an env object
        spec, params = env.spec, (env.params if params is None else params)
    elif isinstance(env, EnvSpec):
        spec = env
    else:
        raise TypeError(f"env must be an EnvSpec or an env built from one; got "
                        f"{type(env).__name__}")
    return generate_source(spec, Path(header or spec.header), backend, params)
