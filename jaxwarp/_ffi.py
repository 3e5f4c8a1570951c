"""Loads jaxwarp's compiled FFI libraries and registers their targets, once.

`_jaxwarp_cpu.so` (the sampler's XLA:CPU handler) is always built;
`_jaxwarp_cuda.so` exists when the package was built with nvcc. They are plain
shared libraries, loaded with ctypes and registered with `jax.ffi` like every
env library (`jaxwarp.authoring.build.register_targets`); both load on any host
(the CUDA runtime is linked statically), so importing jaxwarp never needs a GPU.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

# The API headers and the FFI sources: installed with the package
# (jaxwarp/include holds both), or the repository's cuda/ and ffi/ folders in
# a source checkout / editable install.
_INSTALLED = Path(__file__).resolve().parent / "include"
_REPO = Path(__file__).resolve().parent.parent
API_DIR = _INSTALLED if (_INSTALLED / "jaxwarp_env.h").exists() else _REPO / "cuda"
FFI_DIR = _INSTALLED if (_INSTALLED / "env_ffi.cc").exists() else _REPO / "ffi"


def _load(name: str, symbol: str, target: str, platform: str) -> ctypes.CDLL | None:
    """Loads jaxwarp/<name>.so and registers its handler `symbol` as `target`;
    None where the package was built without it."""
    try:
        spec = importlib.util.find_spec(f"jaxwarp.{name}")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin:
        return None
    lib = ctypes.CDLL(spec.origin)
    if not hasattr(lib, symbol):  # e.g. an extension module left by an older build
        raise ImportError(f"{spec.origin} lacks {symbol}: a file of another jaxwarp build; "
                          "reinstall jaxwarp (pip install --force-reinstall, or pip install "
                          "-e . again in a checkout)")
    # Platform strings are case-sensitive in jax.ffi: "cpu" and "CUDA".
    jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(lib, symbol)),
                                platform=platform)
    return lib


_cpu_lib = _load("_jaxwarp_cpu", "JaxwarpSampleCategoricalCpu",
                 "jaxwarp_sample_categorical_cpu", "cpu")
_cuda_lib = _load("_jaxwarp_cuda", "JaxwarpSampleCategoricalCuda",
                  "jaxwarp_sample_categorical_cuda", "CUDA")


def has_cpu_library() -> bool:
    """Whether the XLA:CPU handlers were built and loaded."""
    return _cpu_lib is not None


def has_cuda_library() -> bool:
    """Whether the CUDA handlers were built and loaded."""
    return _cuda_lib is not None


@functools.cache
def gpu_available() -> bool:
    """Whether JAX sees a CUDA GPU and jaxwarp's CUDA library is loaded."""
    if _cuda_lib is None:
        return False
    try:
        return any(d.platform == "gpu" for d in jax.devices("gpu"))
    except RuntimeError:
        return False


# ---------------------------------------------------------------------------
# What the C++ side declares once and Python reads: the handlers' argument
# tables (ffi/jaxwarp_ffi.h) and the constants of the headers (cuda/*.h), read
# from the headers the env libraries are compiled from (jaxwarp/include in an
# installed package, cuda/ and ffi/ in a checkout: jaxwarp.authoring.codegen).
# ---------------------------------------------------------------------------
class FfiArg(NamedTuple):
    """One line X(kind, type, name, key) of a handler's table: kind "ARG" (a
    buffer), "ARGS" (the remaining buffers), "RETS" (the results) or "ATTR"
    (an attribute); type the FFI type (C++), name the C++ parameter, key the
    attribute's name ("" for buffers)."""

    kind: str
    type: str
    name: str
    key: str


_TABLE_LINE = re.compile(r'X\((ARGS?|RETS|ATTR),\s*(.+?),\s*(\w+),\s*"(\w*)"\)')
_TABLE_INCLUDE = re.compile(r"(JAXWARP_\w+)\(X\)")


def _header_text(name: str) -> str:
    """The text of header `name` of cuda/ (API_DIR) or ffi/ (FFI_DIR)."""
    path = FFI_DIR / name if (FFI_DIR / name).exists() else API_DIR / name
    return path.read_text()


@functools.cache
def _tables() -> dict[str, tuple[FfiArg, ...]]:
    """Every table of ffi/jaxwarp_ffi.h (a macro ``#define JAXWARP_..(X)``),
    by macro name, the tables it includes expanded."""
    bodies: dict[str, list[str]] = {}
    body: list[str] | None = None
    for line in _header_text("jaxwarp_ffi.h").splitlines():
        if body is None and (m := re.match(r"#define (JAXWARP_\w+)\(X\)\s*\\$", line)):
            body = bodies[m.group(1)] = []
        elif body is not None:
            entry = re.sub(r"/\*.*?\*/", "", line).strip().rstrip("\\").strip()
            if entry:
                body.append(entry)
            if not line.rstrip().endswith("\\"):
                body = None

    def expand(name: str) -> tuple[FfiArg, ...]:
        out: list[FfiArg] = []
        for entry in bodies[name]:
            if m := _TABLE_LINE.fullmatch(entry):
                out.append(FfiArg(*m.groups()))
            elif (inc := _TABLE_INCLUDE.fullmatch(entry)) and inc.group(1) in bodies:
                out.extend(expand(inc.group(1)))
            else:
                raise ValueError(f"ffi/jaxwarp_ffi.h, {name}: cannot read {entry!r}")
        return tuple(out)

    return {name: expand(name) for name in bodies}


def handler_table(handler: str) -> tuple[FfiArg, ...]:
    """The arguments of env handler `handler` ("reset", "step" or "rollout")
    in binding order: its table JAXWARP_ARGS_<handler> in ffi/jaxwarp_ffi.h."""
    return _tables()[f"JAXWARP_ARGS_{handler}"]


@functools.cache
def header_constants(header: str) -> dict[str, int]:
    """The integer constants (``constexpr int kName = <int>;``) of `header`
    (a file of cuda/, e.g. "jaxwarp_fused.h"), by name."""
    found = re.findall(r"^\s*constexpr\s+int\s+(k\w+)\s*=\s*(-?\d+)\s*;",
                       _header_text(header), re.MULTILINE)
    return {name: int(value) for name, value in found}


# ---------------------------------------------------------------------------
# Partitioning rule of the env-indexed FFI calls (env reset/step, sampler).
# ---------------------------------------------------------------------------
def env_partitioned_call(fn: Callable[..., Sequence[jax.Array]], args: Sequence[jax.Array],
                         env_args: Sequence[bool], num_envs: int, name: str,
                         batch_dims: int = 0) -> tuple[jax.Array, ...]:
    """Runs ``fn(None, num_envs, *args)`` as one op that ``jax.jit`` partitions
    along the env axis without moving data between devices.

    ``fn(env_offset, local_envs, *args) -> tuple of arrays`` makes the FFI
    call of ``local_envs`` envs: ``env_offset`` is None (unpartitioned) or a
    u32 scalar, the global index of this call's first env, which fn adds to
    the offset it passes to the kernel (so random streams stay keyed by the
    global env index). Every output has the env axis at ``batch_dims`` (after
    the leading vmap axes); ``env_args[i]`` says whether ``args[i]`` has it
    too (state, actions, logits) or not (keys). fn must accept any number of
    leading batch (vmap) axes on every arg, the same on all args, as an
    ``ffi_call(..., vmap_method="broadcast_all")`` does.

    The rule (a ``custom_partitioning`` with a Shardy ``sharding_rule``):

    * env axis split over mesh axes (``P(..., "envs", ...)``), ``num_envs``
      divisible by their size: each device runs fn over its own
      ``num_envs / D`` envs with env_offset = its shard index times that, and
      the outputs keep the split. No collective; results bit for bit those of
      one device.
    * env axis replicated (no sharding on it, e.g. a reset whose outputs
      nothing constrains): every device runs all envs (replicated outputs,
      identical on every device), no collective.
    * the other axes (agents, features, key words) are replicated first
      (``need_replication``): an input sharded on one of them is all-gathered
      before the call, the only case that moves data; num_envs not divisible
      by the shards likewise gives a replicated call.
    * leading vmap axes pass through: their split is kept (each vmap member
      carries its own key and offset word).

    On one device, inside ``shard_map`` (all axes manual) and in eager calls
    it is fn itself. Under ``jax.set_mesh`` with Explicit axes the op runs
    on Auto axes (``auto_axes``) and its outputs are typed with the env
    axis's split of the env-indexed inputs (a reset's: replicated). Under
    ``jax.vmap`` the batched call is this op again with one more batch axis
    (unbatched args are broadcast, as broadcast_all does).
    """
    args = tuple(args)
    env_args = tuple(bool(b) for b in env_args)
    call = _batched_call(fn, env_args, int(num_envs), name, int(batch_dims))
    explicit = _explicit_axes()
    if not explicit:
        return call(*args)
    # Explicit mesh axes in context (jax.set_mesh): an ffi_call would reshard
    # its inputs to replicated (an all-gather). Run the op on Auto axes and
    # type its outputs like the env-indexed inputs' env axis.
    nb = int(batch_dims)
    spec = next((tuple(jax.typeof(a).sharding.spec) for a, e in zip(args, env_args) if e), ())
    spec = spec + (None,) * (nb + 1 - len(spec))
    batch, env = spec[:nb], spec[nb]
    shapes = jax.eval_shape(call, *args)
    out = tuple(P(*batch, env, *(None,) * (s.ndim - nb - 1)) for s in shapes)
    return jax.sharding.auto_axes(call, axes=explicit, out_sharding=out)(*args)


def _explicit_axes() -> tuple[str, ...]:
    """The Explicit axes of the abstract mesh in context (none outside jax.set_mesh)."""
    axis_type = getattr(jax.sharding, "AxisType", None)
    mesh = jax.sharding.get_abstract_mesh()
    if axis_type is None or mesh.empty:
        return ()
    return tuple(n for n, t in zip(mesh.axis_names, mesh.axis_types) if t == axis_type.Explicit)


def _batched_call(fn, env_args, num_envs, name, nb):
    from jax.custom_batching import custom_vmap

    @custom_vmap
    def call(*args):
        return tuple(_partitioned(fn, env_args, num_envs, name, nb)(*args))

    @call.def_vmap
    def rule(axis_size, in_batched, *args):
        # Batched args arrive with the vmap axis first; broadcast the others.
        args = [a if b else jnp.broadcast_to(a, (axis_size,) + a.shape)
                for a, b in zip(args, in_batched)]
        outs = _batched_call(fn, env_args, num_envs, name, nb + 1)(*args)
        return outs, tuple(True for _ in outs)

    return call


def _env_spec(shapes, nb):
    """(mesh, batch entries, env entry) read off the first sharded env-indexed shape."""
    from jax.sharding import NamedSharding
    for s in shapes:
        sh = getattr(s, "sharding", None)
        if isinstance(sh, NamedSharding) and s.ndim > nb:
            spec = tuple(sh.spec) + (None,) * (s.ndim - len(sh.spec))
            return sh.mesh, spec[:nb], spec[nb]
    return None, (None,) * nb, None


def _env_axes(mesh, found_mesh, env, num_envs):
    """(mesh axis names, env entry, shard count) of the env split; none if it doesn't divide."""
    names = () if env is None else ((env,) if isinstance(env, str) else tuple(env))
    shards = 1
    for a in names:
        shards *= mesh.shape[a]
    if found_mesh is None or num_envs % shards != 0:
        names, env, shards = (), None, 1
    return names, env, shards


def _env_sharding_rule(nb, env_args, operand_types, result_types):
    """Shardy rule string ("b0 e i0_0, ... -> ...") and its replication factors."""
    batch = [f"b{i}" for i in range(nb)]
    other: list[str] = []

    def dims(tag, rank, has_env):
        rest = [f"{tag}_{j}" for j in range(rank - nb - (1 if has_env else 0))]
        other.extend(rest)
        return " ".join(batch + (["e"] if has_env else []) + rest)

    # operand_types, result_types: MLIR ranked tensor types.
    ins = [dims(f"i{i}", len(t.shape), e) for i, (t, e) in
           enumerate(zip(operand_types, env_args))]
    outs = [dims(f"o{i}", len(t.shape), True) for i, t in enumerate(result_types)]
    rule = ", ".join(ins) + " -> " + ", ".join(outs)
    return rule, {"need_replication_factors": tuple(other)}


def _partitioned(fn, env_args, num_envs, name, nb):
    from jax.experimental.custom_partitioning import custom_partitioning
    from jax.sharding import NamedSharding

    def whole(*args):
        return tuple(fn(None, num_envs, *args))

    op = custom_partitioning(whole)

    def env_shape_args(arg_shapes, result_shape):
        # Results first: they carry the sharding the user asked for (a reset
        # has no env-indexed operand).
        outs = [s for s in jax.tree.leaves(result_shape)]
        ins = [s for s, e in zip(arg_shapes, env_args) if e]
        return outs + ins

    def partition(mesh, arg_shapes, result_shape):
        found_mesh, batch, env = _env_spec(env_shape_args(arg_shapes, result_shape), nb)
        names, env, shards = _env_axes(mesh, found_mesh, env, num_envs)

        def spec_of(ndim, has_env):
            rest = ndim - nb - (1 if has_env else 0)
            return NamedSharding(mesh, P(*batch, *((env,) if has_env else ()), *(None,) * rest))

        arg_sh = tuple(spec_of(s.ndim, e) for s, e in zip(arg_shapes, env_args))
        out_sh = jax.tree.map(lambda s: spec_of(s.ndim, True), result_shape)
        local = num_envs // shards

        def lower(*args):
            if not names:
                return tuple(fn(None, num_envs, *args))
            index = jax.lax.axis_index(names if len(names) > 1 else names[0])
            offset = index.astype(jnp.uint32) * np.uint32(local)
            return tuple(fn(offset, local, *args))

        return mesh, lower, out_sh, arg_sh

    def infer(mesh, arg_shapes, result_shape):
        # GSPMD (jax_use_shardy_partitioner=False): outputs follow the
        # env-indexed operands.
        _, batch, env = _env_spec([s for s, e in zip(arg_shapes, env_args) if e], nb)
        return jax.tree.map(
            lambda s: NamedSharding(mesh, P(*batch, env, *(None,) * (s.ndim - nb - 1))),
            result_shape)

    def sharding_rule(mesh, operand_types, result_types):
        return _env_sharding_rule(nb, env_args, operand_types, result_types)

    op.def_partition(partition, infer_sharding_from_operands=infer,
                     propagate_user_sharding=None, sharding_rule=sharding_rule)
    op.__name__ = name
    return op
