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
from jaxwarp.spaces import Box, MultiDiscrete

# The API headers: installed with the package (jaxwarp/include), or the
# repository's cuda/ folder in a source checkout / editable install.
_INSTALLED = Path(__file__).resolve().parent / "include"
API_DIR = _INSTALLED if (_INSTALLED / "jaxwarp_env.h").exists() else (
    Path(__file__).resolve().parent.parent / "cuda")
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


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """Everything jaxwarp needs to know about a user env.

    params_type: frozen dataclass of float/int/bool fields (-> ``Params``).
    state_type: pytree dataclass whose fields are exactly `fields`, in order.
    reference_reset(params, key_data u32[2], num_envs) -> (obs, state);
    reference_step(params, key_data, state, actions i32[envs, agents, heads])
        -> (obs, state, reward f32[envs, agents], done bool[envs], info) with
        the same auto-reset semantics as the kernels (see jaxwarp_env.h);
        info holds "terminated" and "truncated" (bool[envs]).
    """

    name: str
    header: str | Path
    params_type: type
    state_type: type
    fields: tuple[StateField, ...]
    num_agents: Callable[[Any], int]
    obs_dim: Callable[[Any], int]
    nvec: Callable[[Any], tuple[int, ...]]
    reference_reset: Callable[..., Any]
    reference_step: Callable[..., Any]
    obs_bounds: Callable[[Any], tuple[np.ndarray, np.ndarray]] | None = None
    policy_groups: Callable[[Any], dict[str, np.ndarray]] | None = None


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
_RESERVED = {"p", "s", "a", "b", "e", "n", "obs_dim", "heads", "keys", "actions", "obs",
             "reward", "done", "term", "trunc", "envs", "members", "per_member", "stream"}
_FIELD_DECL = re.compile(r"^\s*JAXWARP_STATE\s*\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*\)", re.M)


def _param_fields(spec: EnvSpec) -> list[tuple[str, str, Any]]:
    """(name, C++ type, numpy caster) of the params dataclass."""
    out = []
    defaults = spec.params_type()
    for f in dataclasses.fields(spec.params_type):
        if f.name.startswith("jw_") or f.name in _RESERVED:
            raise EnvBuildError(f"{spec.name}: param name {f.name!r} is reserved by the "
                                "generated code; rename it")
        v = getattr(defaults, f.name)
        if isinstance(v, bool):
            out.append((f.name, "int32_t", np.int32))
        elif isinstance(v, (int, np.integer)):
            out.append((f.name, "int32_t", np.int32))
        elif isinstance(v, (float, np.floating)):
            out.append((f.name, "float", np.float32))
        else:
            raise EnvBuildError(f"{spec.name}: param {f.name!r} has type {type(v).__name__}; "
                                "params passed to the kernels must be float, int or bool")
    return out


def check_header(spec: EnvSpec, header_text: str, header_name: str) -> None:
    """The header's JAXWARP_STATE declarations must match the spec's fields."""
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
        if name not in declared:
            raise EnvBuildError(
                f"{spec.name}: spec field {name!r} is not declared in {header_name}; add "
                f"JAXWARP_STATE({dtype}, {name}, {scope})")
    state_names = [f.name for f in dataclasses.fields(spec.state_type)]
    if state_names != [f.name for f in spec.fields]:
        raise EnvBuildError(f"{spec.name}: state_type fields {state_names} differ from the "
                            f"spec's fields {[f.name for f in spec.fields]} (same names, "
                            "same order)")


def generate_source(spec: EnvSpec, header_path: Path, platform: str) -> str:
    """C++ (platform "cpu") or CUDA ("cuda") source of the env's FFI handlers."""
    ns = f"jaxwarp_env_{spec.name}"
    params = _param_fields(spec)
    fields = spec.fields
    cu = platform == "cuda"
    L: list[str] = []
    w = L.append
    w(f"// Generated by jaxwarp.authoring for env '{spec.name}' ({platform}). Do not edit.")
    w("#include <stdint.h>\n#include <string.h>")
    if cu:
        w("#include <cuda_runtime.h>")
    w('#include "xla/ffi/api/ffi.h"\n#include "jaxwarp_env.h"\n')
    w("namespace ffi = xla::ffi;\n")
    w(f"namespace {ns} {{")
    w("struct Params {")
    for name, ctype, _ in params:
        w(f"  {ctype} {name};")
    w("};\nstruct State {")
    for f in fields:
        w(f"  {_DTYPES[f.dtype][0]}* {f.name};")
    w("};")
    w(f'#include "{header_path.name}"')
    w("}  // namespace " + ns + "\n")
    w(f"namespace {{\nusing namespace {ns};")
    # Buffers of all envs: base pointers.
    w("struct Bases {")
    for f in fields:
        w(f"  {_DTYPES[f.dtype][0]}* {f.name};")
    w("};")
    attr = "__host__ __device__ inline" if cu else "inline"
    w(f"{attr} State state_of(const Bases& b, int64_t e, int n) {{")
    w("  State s;")
    for f in fields:
        off = "e * n" if f.scope == "agent" else "e"
        w(f"  s.{f.name} = b.{f.name} + {off};")
    w("  return s;\n}")
    # Per-env bodies of the CPU loop: agents one after another.
    if not cu:
        w(f"""{attr} void reset_env(const Params& p, const Bases& b, int64_t e, uint32_t local,
                      const uint32_t* key, int n, int obs_dim, float* obs) {{
  State s = state_of(b, e, n);
  for (int i = 0; i < n; ++i) {{
    jaxwarp::Agent a{{local, i, n, key[0], key[1], 0u}};
    reset(p, s, a);
  }}
  for (int i = 0; i < n; ++i) {{
    jaxwarp::Agent a{{local, i, n, key[0], key[1], 0u}};
    observe(p, s, a, obs + (e * n + i) * obs_dim);
  }}
}}
{attr} void step_env(const Params& p, const Bases& b, int64_t e, uint32_t local,
                     const uint32_t* key, int n, int obs_dim, int heads, const int32_t* act,
                     float* obs, float* reward, bool* done, bool* term, bool* trunc) {{
  State s = state_of(b, e, n);
  bool any_term = false, any_trunc = false;
  for (int i = 0; i < n; ++i) reward[e * n + i] = 0.0f;
  for (int phase = 0; phase < kStepPhases; ++phase) {{
    for (int i = 0; i < n; ++i) {{
      jaxwarp::Agent a{{local, i, n, key[0], key[1], 1u}};
      jaxwarp::StepResult r;
      step(p, s, a, act + (e * n + i) * heads, phase, r);
      reward[e * n + i] += r.reward;
      any_term = any_term || r.terminated;
      any_trunc = any_trunc || r.truncated;
    }}
  }}
  const bool d = any_term || any_trunc;
  if (d) {{
    for (int i = 0; i < n; ++i) {{
      jaxwarp::Agent a{{local, i, n, key[0], key[1], 0u}};
      reset(p, s, a);
    }}
  }}
  for (int i = 0; i < n; ++i) {{
    jaxwarp::Agent a{{local, i, n, key[0], key[1], 0u}};
    observe(p, s, a, obs + (e * n + i) * obs_dim);
  }}
  done[e] = d;
  term[e] = any_term;
  trunc[e] = any_trunc;
}}""")
    if cu:
        # One thread per agent, several envs per block (WarpDrive's thread per
        # agent, without its block per env): tpe threads serve one env's agents
        # (tpe = min(n, 1024); a thread loops when n > 1024), epb envs share a
        # block, and __syncthreads() is the barrier between phases. Per env,
        # two shared flags collect "any agent terminated/truncated".
        # The kernels have C names (jaxwarp_<env>_{reset,step}_kernel) so that
        # PyCUDA can launch the very same code (jaxwarp.pycuda_bridge).
        n_agent_fields = sum(f.scope == "agent" for f in fields)
        n_env_fields = len(fields) - n_agent_fields
        smem_fields, copy_agent, copy_env, off = [], [], [], "0"
        for f in fields:
            ct = _DTYPES[f.dtype][0]
            smem_fields.append(f"  s.{f.name} = reinterpret_cast<{ct}*>(w + {off});")
            off = f"{off} + {'n' if f.scope == 'agent' else '1'}"
            (copy_agent if f.scope == "agent" else copy_env).append(
                f"dst.{f.name}[{'j' if f.scope == 'agent' else '0'}] = "
                f"src.{f.name}[{'j' if f.scope == 'agent' else '0'}];")
        w("__device__ inline State state_in_smem(int32_t* w, int n) {\n  State s;")
        w("\n".join(smem_fields))
        w("  return s;\n}")
        w("// One env's rows from src to dst, by the env's threads.")
        w("__device__ inline void copy_state(const State& dst, const State& src, int n, int lane,"
          " int tpe) {")
        w("  for (int j = lane; j < n; j += tpe) {" + " ".join(copy_agent) + "}")
        w("  if (lane == 0) {" + " ".join(copy_env) + "}\n}")
        w("""struct Layout {
  int tpe, epb;  // threads per env, envs per block
  int words;     // 4-byte words of one env's state staged in shared memory (0: not staged)
  int obs_staged;  // 1: observations are written to shared memory, then stored coalesced
};
__device__ inline int64_t env_of_thread(const Layout& l, int* lane) {
  const int le = static_cast<int>(threadIdx.x) / l.tpe;
  *lane = static_cast<int>(threadIdx.x) - le * l.tpe;
  return le < l.epb ? static_cast<int64_t>(blockIdx.x) * l.epb + le : -1;
}
}  // namespace
extern "C" __global__ void JW_RESET_KERNEL(Params p, Bases b, int64_t envs, int64_t per_member,
                            const uint32_t* keys, int n, int obs_dim, float* obs, Layout l) {
  int lane;
  const int64_t e = env_of_thread(l, &lane);
  const bool active = e >= 0 && e < envs;
  // Only a vmapped call has several key members; skip the 64-bit division otherwise.
  const int64_t m = !active || per_member == envs ? 0 : e / per_member;
  const uint32_t local = static_cast<uint32_t>(e - m * per_member);
  const uint32_t* key = keys + 2 * m;
  State s = state_of(b, active ? e : 0, n);
  if (active)
    for (int i = lane; i < n; i += l.tpe) {
      jaxwarp::Agent a{local, i, n, key[0], key[1], 0u};
      reset(p, s, a);
    }
  __syncthreads();
  if (active)
    for (int i = lane; i < n; i += l.tpe) {
      jaxwarp::Agent a{local, i, n, key[0], key[1], 0u};
      observe(p, s, a, obs + (e * n + i) * obs_dim);
    }
}
extern "C" __global__ void JW_STEP_KERNEL(Params p, Bases b, int64_t envs, int64_t per_member,
                           const uint32_t* keys, int n, int obs_dim, int heads,
                           const int32_t* act, float* obs, float* reward, bool* done,
                           bool* term, bool* trunc, Layout l) {
  // Shared memory: [2, epb] flags (terminated, truncated), then each env's
  // state rows when staged: the phases then read and write on-chip memory.
  extern __shared__ int32_t jw_smem[];
  int* flags = jw_smem;
  int lane;
  const int64_t e = env_of_thread(l, &lane);
  const bool active = e >= 0 && e < envs;
  const int le = static_cast<int>(threadIdx.x) / l.tpe;
  for (int j = threadIdx.x; j < 2 * l.epb; j += blockDim.x) flags[j] = 0;
  const int64_t m = !active || per_member == envs ? 0 : e / per_member;
  const uint32_t local = static_cast<uint32_t>(e - m * per_member);
  const uint32_t* key = keys + 2 * m;
  const State g = state_of(b, active ? e : 0, n);
  State s = g;
  if (l.words > 0) {
    s = state_in_smem(jw_smem + 2 * l.epb + le * l.words, n);
    if (active) copy_state(s, g, n, lane, l.tpe);
  }
  if (active)
    for (int i = lane; i < n; i += l.tpe) reward[e * n + i] = 0.0f;
  __syncthreads();
  for (int phase = 0; phase < kStepPhases; ++phase) {
    if (active)
      for (int i = lane; i < n; i += l.tpe) {
        jaxwarp::Agent a{local, i, n, key[0], key[1], 1u};
        jaxwarp::StepResult r;
        step(p, s, a, act + (e * n + i) * heads, phase, r);
        reward[e * n + i] += r.reward;
        if (r.terminated) flags[le] = 1;
        if (r.truncated) flags[l.epb + le] = 1;
      }
    __syncthreads();
  }
  const bool any_term = active && flags[le] != 0;
  const bool any_trunc = active && flags[l.epb + le] != 0;
  const bool d = any_term || any_trunc;
  if (d)
    for (int i = lane; i < n; i += l.tpe) {
      jaxwarp::Agent a{local, i, n, key[0], key[1], 0u};
      reset(p, s, a);
    }
  __syncthreads();
  // One thread writes one agent's whole observation row: strided stores, so
  // rows go through shared memory and leave as one contiguous block.
  float* obs_smem = reinterpret_cast<float*>(jw_smem + 2 * l.epb + l.epb * l.words);
  if (active) {
    for (int i = lane; i < n; i += l.tpe) {
      jaxwarp::Agent a{local, i, n, key[0], key[1], 0u};
      observe(p, s, a, l.obs_staged ? obs_smem + (le * n + i) * obs_dim
                                    : obs + (e * n + i) * obs_dim);
    }
    if (l.words > 0) copy_state(g, s, n, lane, l.tpe);
    if (lane == 0) {
      done[e] = d;
      term[e] = any_term;
      trunc[e] = any_trunc;
    }
  }
  if (l.obs_staged) {
    __syncthreads();
    const int64_t first = static_cast<int64_t>(blockIdx.x) * l.epb;
    const int64_t rows = (envs - first < l.epb ? envs - first : l.epb) * n;
    float* dst = obs + first * n * obs_dim;
    for (int64_t j = threadIdx.x; j < rows * obs_dim; j += blockDim.x) dst[j] = obs_smem[j];
  }
}
namespace {
// Threads per env and envs per block for n agents: about 128 threads a block.
// The state, then the observations, are staged in shared memory while the
// block's share fits in 48 KiB.
inline Layout layout_for(int n, int obs_dim) {
  const int tpe = n < 1024 ? n : 1024;
  const int epb = tpe >= 128 ? 1 : 128 / tpe;
  const int64_t budget = 48 * 1024 / 4 - 2 * epb;  // words
  // A single agent shares nothing with other threads: no state staging.
  int64_t words = n == 1 ? 0 : static_cast<int64_t>(NAF) * n + NEF;
  if (words * epb > budget) words = 0;
  const bool obs_staged = words * epb + static_cast<int64_t>(epb) * n * obs_dim <= budget;
  return Layout{tpe, epb, static_cast<int>(words), obs_staged ? 1 : 0};
}
inline size_t jw_smem_bytes(const Layout& l, int n, int obs_dim) {
  return 4 * (static_cast<size_t>(2 + l.words) * l.epb
              + (l.obs_staged ? static_cast<size_t>(l.epb) * n * obs_dim : 0));
}""".replace("NAF", str(n_agent_fields)).replace("NEF", str(n_env_fields))
         .replace("JW_RESET_KERNEL", f"jaxwarp_{spec.name}_reset_kernel")
         .replace("JW_STEP_KERNEL", f"jaxwarp_{spec.name}_step_kernel"))

    # Handlers.
    sig_params = ", ".join(f"{ctype} {name}" for name, ctype, _ in params)
    pinit = ", ".join(name for name, _, _ in params)
    attrs = "".join(f'\n        .Attr<{ctype}>("{name}")' for name, ctype, _ in params)
    ffi_t = {k: v[2] for k, v in _DTYPES.items()}
    state_in = ", ".join(f"ffi::Buffer<ffi::{ffi_t[f.dtype]}> in_{f.name}" for f in fields)
    state_out = ", ".join(f"ffi::ResultBuffer<ffi::{ffi_t[f.dtype]}> out_{f.name}"
                          for f in fields)
    bases = ", ".join(f"out_{f.name}->typed_data()" for f in fields)
    stream_arg = "cudaStream_t stream, " if cu else ""
    stream_bind = "\n        .Ctx<ffi::PlatformStream<cudaStream_t>>()" if cu else ""
    suffix = "Cuda" if cu else "Cpu"
    copy = ("cudaMemcpyAsync(out_{n}->untyped_data(), in_{n}.untyped_data(), "
            "in_{n}.size_bytes(), cudaMemcpyDeviceToDevice, stream);" if cu else
            "memcpy(out_{n}->untyped_data(), in_{n}.untyped_data(), in_{n}.size_bytes());")
    copies = "\n".join(f"  if (in_{f.name}.untyped_data() != out_{f.name}->untyped_data()) "
                       + copy.format(n=f.name) for f in fields)
    zero = ("cudaMemsetAsync(out_{n}->untyped_data(), 0, out_{n}->size_bytes(), stream);" if cu
            else "memset(out_{n}->untyped_data(), 0, out_{n}->size_bytes());")
    zeros = "\n".join("  " + zero.format(n=f.name) for f in fields)
    first_agent_field = next((f for f in fields if f.scope == "agent"), None)
    envs_of = (f"out_{first_agent_field.name}->element_count() / n" if first_agent_field
               else f"out_{fields[0].name}->element_count()")
    envs_in = (f"in_{first_agent_field.name}.element_count() / n" if first_agent_field
               else f"in_{fields[0].name}.element_count()")
    err = ('  if (cudaError_t c = cudaGetLastError(); c != cudaSuccess) '
           'return ffi::Error::Internal(cudaGetErrorString(c));\n' if cu else "")
    kname = f"jaxwarp_{spec.name}"
    grid = ("  const Layout jw_l = layout_for(n, obs_dim);\n  const unsigned jw_blocks = "
            "static_cast<unsigned>((envs + jw_l.epb - 1) / jw_l.epb);\n")
    cpu_loop = ("  for (int64_t e = 0; e < envs; ++e) {\n"
                "    const int64_t m = per_member == envs ? 0 : e / per_member;\n    ")
    step_tail = ("keys.typed_data() + 2 * m, n, obs_dim, heads, actions.typed_data(), "
                 "obs->typed_data(), reward->typed_data(), done->typed_data(), "
                 "term->typed_data(), trunc->typed_data()")
    if cu:
        launch_reset = (grid + f"  {kname}_reset_kernel<<<jw_blocks, jw_l.tpe * jw_l.epb, 0, "
                        "stream>>>(p, b, envs, per_member, keys.typed_data(), n, obs_dim, "
                        "obs->typed_data(), jw_l);\n")
        launch_step = (grid + f"  {kname}_step_kernel<<<jw_blocks, jw_l.tpe * jw_l.epb, "
                       "jw_smem_bytes(jw_l, n, obs_dim), stream>>>(p, b, envs, per_member, "
                       + step_tail.replace(" + 2 * m", "") + ", jw_l);\n")
    else:
        launch_reset = (cpu_loop + "reset_env(p, b, e, static_cast<uint32_t>(e - m * per_member), "
                        "keys.typed_data() + 2 * m, n, obs_dim, obs->typed_data());\n  }\n")
        launch_step = (cpu_loop + "step_env(p, b, e, static_cast<uint32_t>(e - m * per_member), "
                       + step_tail + ");\n  }\n")
    # vmap folds a batch of keys into the env axis: members of per_member envs each.
    layout = f"""  const int64_t members = keys.element_count() / 2;
  if (members < 1 || envs % members != 0)
    return ffi::Error::InvalidArgument("{spec.name}: envs not divisible by key batch");
  const int64_t per_member = envs / members;
"""
    w(f"""static ffi::Error Reset{suffix}({stream_arg}ffi::Buffer<ffi::U32> keys, {state_out},
    ffi::ResultBuffer<ffi::F32> obs, int32_t jw_n, int32_t jw_obs_dim, {sig_params}) {{
  const int n = jw_n, obs_dim = jw_obs_dim;
  const Params p{{{pinit}}};
  const int64_t envs = {envs_of};
{layout}{zeros}
  const Bases b{{{bases}}};
{launch_reset}{err}  return ffi::Error::Success();
}}
static ffi::Error Step{suffix}({stream_arg}ffi::Buffer<ffi::U32> keys, ffi::Buffer<ffi::S32> actions,
    {state_in}, {state_out},
    ffi::ResultBuffer<ffi::F32> obs, ffi::ResultBuffer<ffi::F32> reward,
    ffi::ResultBuffer<ffi::PRED> done, ffi::ResultBuffer<ffi::PRED> term,
    ffi::ResultBuffer<ffi::PRED> trunc, int32_t jw_n, int32_t jw_obs_dim, int32_t jw_heads,
    {sig_params}) {{
  const int n = jw_n, obs_dim = jw_obs_dim, heads = jw_heads;
  const Params p{{{pinit}}};
  const int64_t envs = {envs_in};
{layout}{copies}
  const Bases b{{{bases}}};
{launch_step}{err}  return ffi::Error::Success();
}}
}}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxwarp_{spec.name}_reset_{platform}, Reset{suffix},
    ffi::Ffi::Bind(){stream_bind}
        .Arg<ffi::Buffer<ffi::U32>>()""")
    for f in fields:
        w(f"        .Ret<ffi::Buffer<ffi::{ffi_t[f.dtype]}>>()")
    w(f"""        .Ret<ffi::Buffer<ffi::F32>>()
        .Attr<int32_t>("jw_num_agents").Attr<int32_t>("jw_obs_dim"){attrs},
    {{ffi::Traits::kCmdBufferCompatible}});
XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxwarp_{spec.name}_step_{platform}, Step{suffix},
    ffi::Ffi::Bind(){stream_bind}
        .Arg<ffi::Buffer<ffi::U32>>()
        .Arg<ffi::Buffer<ffi::S32>>()""")
    for f in fields:
        w(f"        .Arg<ffi::Buffer<ffi::{ffi_t[f.dtype]}>>()")
    for f in fields:
        w(f"        .Ret<ffi::Buffer<ffi::{ffi_t[f.dtype]}>>()")
    w(f"""        .Ret<ffi::Buffer<ffi::F32>>().Ret<ffi::Buffer<ffi::F32>>()
        .Ret<ffi::Buffer<ffi::PRED>>().Ret<ffi::Buffer<ffi::PRED>>().Ret<ffi::Buffer<ffi::PRED>>()
        .Attr<int32_t>("jw_num_agents").Attr<int32_t>("jw_obs_dim").Attr<int32_t>("jw_heads"){attrs},
    {{ffi::Traits::kCmdBufferCompatible}});""")
    return "\n".join(L) + "\n"


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


def _compile(spec: EnvSpec, header: Path, platform: str, cubin: bool = False) -> Path:
    """The env's FFI library for `platform` (or, with cubin=True, the device code
    alone as a CUDA module for PyCUDA), from the cache or freshly compiled."""
    import jaxlib

    src = generate_source(spec, header, platform)
    compiler = _find_nvcc() if platform == "cuda" else _find_cxx()
    arch = _gpu_arch() if platform == "cuda" else ""
    api = "".join((API_DIR / f).read_text() for f in ("jaxwarp_env.h", "jaxwarp_common.h"))
    h = hashlib.sha256()
    # Headers next to the env's (it may include them) count too.
    local = "".join(f.name + f.read_text() for f in sorted(header.parent.glob("*.h")))
    extra = shlex.split(os.environ.get("JAXWARP_NVCC_FLAGS", "")) if platform == "cuda" else []
    for part in (src, header.read_text(), local, api, _compiler_id(compiler), jaxlib.__version__,
                 arch, sys.platform, " ".join(extra)):
        h.update(part.encode())
    digest = h.hexdigest()[:16]
    out_dir = cache_dir() / f"{spec.name}-{platform}-{digest}"
    lib = out_dir / (f"{spec.name}.cubin" if cubin else f"lib{spec.name}_{platform}.so")
    if lib.exists():
        return lib
    out_dir.mkdir(parents=True, exist_ok=True)
    gen = out_dir / (f"{spec.name}_ffi.cu" if platform == "cuda" else f"{spec.name}_ffi.cc")
    gen.write_text(src)
    includes = ["-I", str(API_DIR), "-I", str(header.parent), "-I", jax.ffi.include_dir()]
    tmp = lib.with_suffix(f".{os.getpid()}.tmp")
    if cubin:
        cmd = [compiler, "-std=c++17", "-O3", "--fmad=false", "-cubin", f"-arch=sm_{arch}", "-w",
               *extra, *includes, str(gen), "-o", str(tmp)]
    elif platform == "cuda":
        cmd = [compiler, "-std=c++17", "-O3", "--fmad=false", "-shared", "-Xcompiler", "-fPIC,-w",
               "-cudart", "static",
               f"-gencode=arch=compute_{arch},code=[sm_{arch},compute_{arch}]",
               *extra, *includes, str(gen), "-o", str(tmp)]
    else:
        cmd = [compiler, "-std=c++17", "-O2", "-shared", "-fPIC", "-ffp-contract=off", "-w",
               "-fno-fast-math", *includes, str(gen), "-o", str(tmp)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise EnvBuildError(
            f"{spec.name}: compiling {header} for {platform} failed "
            f"({Path(compiler).name}); generated bindings: {gen}\n"
            + _readable_errors(proc.stderr + proc.stdout, header, gen))
    os.replace(tmp, lib)
    return lib


_REGISTERED: dict[str, Any] = {}


def _register(spec: EnvSpec, header: Path, platform: str) -> str:
    """Builds (or loads from the cache) and registers; returns the target prefix."""
    import ctypes

    lib_path = _compile(spec, header, platform)
    prefix = f"jaxwarp_user_{spec.name}_{lib_path.parent.name.rsplit('-', 1)[-1]}"
    if (prefix, platform) not in _REGISTERED:
        lib = ctypes.cdll.LoadLibrary(str(lib_path))
        for kind in ("reset", "step"):
            fn = getattr(lib, f"jaxwarp_{spec.name}_{kind}_{platform}")
            jax.ffi.register_ffi_target(f"{prefix}_{kind}_{platform}", jax.ffi.pycapsule(fn),
                                        platform="CUDA" if platform == "cuda" else "cpu")
        _REGISTERED[(prefix, platform)] = lib
    return prefix


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
    """

    def __init__(self, spec: EnvSpec, params: Any = None, backend: str = "auto",
                 header: str | Path | None = None):
        from jaxwarp.envs.tag_continuous import resolve_backend

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
            self._prefix = _register(spec, self._header, self.backend)
        self._attrs = {name: cast(getattr(self.params, name))
                       for name, _, cast in _param_fields(spec)}

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

    def reset(self, key: jax.Array, num_envs: int):
        """obs f32[num_envs, agents, obs_dim], state with [num_envs, ...] fields."""
        from jaxwarp.envs.tag_continuous import key_data_of

        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) \
                or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int; got {num_envs!r}")
        key_data = key_data_of(key)
        if self.backend == "jax":
            return self.spec.reference_reset(self.params, key_data, int(num_envs))
        n = self.num_agents
        outs = jax.ffi.ffi_call(
            f"{self._prefix}_reset_{self.backend}",
            [jax.ShapeDtypeStruct((num_envs, n) if f.scope == "agent" else (num_envs,),
                                  _DTYPES[f.dtype][1]) for f in self.spec.fields]
            + [jax.ShapeDtypeStruct((num_envs, n, self.obs_dim), jnp.float32)],
            vmap_method="broadcast_all",
        )(key_data, jw_num_agents=np.int32(n), jw_obs_dim=np.int32(self.obs_dim), **self._attrs)
        return outs[-1], self.spec.state_type(*outs[:-1])

    def step(self, key: jax.Array, state: Any, actions: jax.Array):
        """One step of every env with auto-reset; see the class docstring."""
        from jaxwarp.envs.tag_continuous import key_data_of

        key_data = key_data_of(key)
        if not isinstance(state, self.spec.state_type):
            raise TypeError(f"state must be a {self.spec.state_type.__name__}; got "
                            f"{type(state).__name__}")
        fields = [getattr(state, f.name) for f in self.spec.fields]
        # The kernels index every field by env (and agent): shapes must agree
        # exactly, or they would read and write out of bounds.
        first = fields[0]
        num_envs = first.shape[0] if getattr(first, "ndim", 0) >= 1 else None
        for f, v in zip(self.spec.fields, fields):
            want = _DTYPES[f.dtype][1]
            shape = (num_envs, self.num_agents) if f.scope == "agent" else (num_envs,)
            if tuple(v.shape) != shape or v.dtype != want:
                raise ValueError(f"state.{f.name} must be {jnp.dtype(want).name}{list(shape)}; "
                                 f"got {v.dtype}{list(v.shape)}")
        heads = len(self.spec.nvec(self.params))
        expected = (num_envs, self.num_agents, heads)
        if not hasattr(actions, "shape") or tuple(actions.shape) != expected:
            raise ValueError(f"actions must have shape {expected} (envs, agents, heads); got "
                             f"{getattr(actions, 'shape', type(actions).__name__)}")
        if actions.dtype != jnp.int32:
            raise TypeError(f"actions must have dtype int32; got {actions.dtype}")
        if self.backend == "jax":
            return self.spec.reference_step(self.params, key_data, state, actions)
        n, k = self.num_agents, len(fields)
        outs = jax.ffi.ffi_call(
            f"{self._prefix}_step_{self.backend}",
            [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in fields]
            + [jax.ShapeDtypeStruct((num_envs, n, self.obs_dim), jnp.float32),
               jax.ShapeDtypeStruct((num_envs, n), jnp.float32)]
            + [jax.ShapeDtypeStruct((num_envs,), jnp.bool_)] * 3,
            vmap_method="broadcast_all",
            input_output_aliases={2 + i: i for i in range(k)},
        )(key_data, actions, *fields, jw_num_agents=np.int32(n),
          jw_obs_dim=np.int32(self.obs_dim), jw_heads=np.int32(heads), **self._attrs)
        state = self.spec.state_type(*outs[:k])
        obs, reward, done, term, trunc = outs[k:]
        info = {"terminated": term, "truncated": trunc}
        if hasattr(state, "episode_return"):
            info["episode_return"] = state.episode_return
        return obs, state, reward, done, info

    def __repr__(self) -> str:
        return f"ContractEnv({self.name!r}, backend={self.backend!r}, params={self.params})"


def build_env(spec: EnvSpec, params: Any = None, backend: str = "auto",
              header: str | Path | None = None) -> ContractEnv:
    """Builds (or loads from the cache) the env's kernels for `backend` and
    returns the env. Raises EnvBuildError with the field, file and line at
    fault when the header and spec disagree or the code does not compile."""
    return ContractEnv(spec, params=params, backend=backend, header=header)

