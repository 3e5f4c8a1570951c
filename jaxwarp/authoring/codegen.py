"""The code generation layer: an env's spec -> the C++ text of its layout.

`generate_source` writes the env-specific part of an env's FFI library (its
Params and State structs and the traits struct `Env`); the kernels, CPU loop
and handlers are the framework's templates. `check_header` compares the
optional JAXWARP_STATE lines of a header with the spec. `generated_source`
is what ``jaxwarp build ENV --emit DIR`` writes.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import numpy as np

from jaxwarp.authoring.spec import (
    _DTYPES,
    EnvBuildError,
    EnvSpec,
    ParamArray,
    _static_params,
    kernel_param_values,
)

# The API headers: installed with the package (jaxwarp/include), or the
# repository's cuda/ folder in a source checkout / editable install.
_INSTALLED = Path(__file__).resolve().parent.parent / "include"
API_DIR = _INSTALLED if (_INSTALLED / "jaxwarp_env.h").exists() else (
    Path(__file__).resolve().parent.parent.parent / "cuda")
# The framework's headers: every built env depends on them (cache key).
API_HEADERS = ("jaxwarp_env.h", "jaxwarp_common.h", "jaxwarp_team.h", "jaxwarp_kernels.h",
               "jaxwarp_ffi.h")
_FIELD_DECL = re.compile(r"^\s*JAXWARP_STATE\s*\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*\)", re.M)
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
        from jaxwarp.authoring.env import ContractEnv
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

