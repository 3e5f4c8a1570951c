"""The `mlp` model's rollout forward as one persistent Pallas Mosaic GPU kernel.

`mlp_kernel.fused_mlp` outside differentiation (the rollout's and the
evaluation's forward) runs this kernel on a Hopper GPU where the model's
weights fit in shared memory (`plan_for`); the Triton kernels of `mlp_kernel`
run everything else (the learner's forward and backward, wider models,
separate towers). A grid of one CTA per SM: each CTA loads every weight and
bias once into shared memory; its last warpgroup streams blocks of
observation rows in by TMA (`Plan.stages` blocks in flight, so the next
loads while this one computes); each compute warpgroup takes 64 rows of a
block through every layer with wgmma, the float32 accumulator in registers,
bias and activation in registers, the bfloat16 activation kept in registers
as the next layer's A operand; the heads' columns go out through shared
memory by TMA, `Plan.out_cols` columns at a time. No activation leaves the
chip. At Tag's model (71 features, 256-256, 43 columns) the rollout's forward
took 5.1 + 1.3 ms an A2C update (the kernel, the cast and pad) against the
Triton forward's 8.9 on an H200 (docs/decisions.md, "The rollout's forward on
Mosaic GPU").

Values: the bfloat16 roundings of the Triton kernel and XLA's layers
(bfloat16 matmul operands, float32 accumulation, bias and activation) in
another summation order, tanh as the GPU's approximate tanh (relative error
about 2^-11, under the bfloat16 rounding that follows): equal within bfloat16
tolerance, and the same bits every run (no atomics; a row's output depends
only on its own row).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import itertools
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

# `lay` arguments below are `jaxwarp.models.mlp_kernel.Layout`s (mlp_kernel
# imports this module, so it is not imported back, not even for typing).
Layout = Any

KERNEL_NAME = "jaxwarp_mlp_forward_mosaic"  # in profiles; jaxwarp.benchmark counts its FLOPs by it
SMEM_LIMIT = 227 * 1024  # bytes of shared memory a CTA may have on an H100/H200
SMEM_SLACK = 2048  # barriers and what Mosaic GPU keeps for itself
TILE_M = 64  # rows a compute warpgroup takes: a [64, 256] f32 accumulator is 128 registers
MAX_WIDTH = 256  # widest layer whose accumulator a warpgroup keeps in registers
# How a model is fitted, in order of preference: (compute warpgroups, row
# blocks in flight). Two warpgroups overlap one's epilogue with the other's
# wgmma, but one warpgroup with two blocks in flight beat two with one at Tag's
# shape (the next block's load hidden matters more); at each, the heads are
# stored whole where they fit, else 16 columns at a time (a smaller staging).
PLANS = ((2, 3), (2, 2), (1, 3), (1, 2), (2, 1), (1, 1))


@dataclass(frozen=True)
class Plan:
    """How the kernel runs a layout: the observations padded to in_pad
    columns, the heads computed over nh columns (the rest of out_pad stored
    as zeros), `wgs` compute warpgroups of TILE_M rows, `stages` row blocks in
    flight, out_cols columns a store."""

    in_pad: int
    nh: int
    wgs: int
    stages: int
    out_cols: int

    @property
    def block_rows(self) -> int:
        return self.wgs * TILE_M


def _round16(n: int) -> int:
    """n rounded up to a multiple of 16 (a bf16 wgmma's K, a TMA row of 32 bytes)."""
    return -(-n // 16) * 16


def _kb(b: int) -> int:
    """`b` bytes rounded up to 1 KB (a swizzled shared-memory tile's alignment)."""
    return -(-b // 1024) * 1024


def smem_bytes(dims: tuple[int, ...], nh: int, wgs: int, stages: int, out_cols: int) -> int:
    """Shared memory of the kernel: dims = (in_pad, widths...), heads over nh
    columns, each buffer rounded up to 1 KB."""
    weights = sum(_kb(2 * k * n) for k, n in itertools.pairwise(dims)) + _kb(2 * dims[-1] * nh)
    biases = sum(_kb(4 * n) for n in dims[1:]) + _kb(4 * nh)
    return (weights + biases + stages * _kb(wgs * TILE_M * dims[0] * 2)
            + _kb(wgs * TILE_M * out_cols * 4))


@functools.cache
def _plgpu() -> Any:
    """Pallas's Mosaic GPU module where this jax has the parts the kernel
    uses, else None (enough to trace the kernel; lowering it needs `bindings`)."""
    try:
        plgpu = importlib.import_module("jax.experimental.pallas.mosaic_gpu")
    except ImportError:
        return None
    return plgpu if all(hasattr(plgpu, n) for n in _USED) else None


# Every part of Pallas's Mosaic GPU module the kernel uses: a jax that renamed
# one keeps the Triton forward rather than failing inside a traced rollout.
_USED = ("kernel", "Mesh", "CompilerParams", "LoweringSemantics", "emit_pipeline_warp_specialized",
         "BlockSpec", "SMEM", "ACC", "Barrier", "TilingTransform", "SwizzleTransform",
         "find_swizzle", "Layout", "wgmma", "load", "copy_gmem_to_smem", "copy_smem_to_gmem",
         "wait_smem_to_gmem", "commit_smem", "barrier_wait")


@functools.cache
def bindings() -> bool:
    """Whether Mosaic GPU can lower here: its module and its compiled bindings
    (installed with a jax-cuda plugin)."""
    try:
        importlib.import_module("jax._src.lib.mosaic_gpu")
    except Exception:  # noqa: BLE001  (no plugin: ImportError, or a broken install)
        return False
    return _plgpu() is not None


def _hopper() -> bool:
    """Whether jax's first GPU is a Hopper (wgmma: compute capability 9.x)."""
    try:
        dev = jax.local_devices(backend="gpu")[0]
        return str(getattr(dev, "compute_capability", "")).startswith("9")
    except RuntimeError:
        return False


def why_not_here() -> str | None:
    """Why this process cannot run the kernel (None: it can), for `jaxwarp info`."""
    if _plgpu() is None:
        return "this jax has no Pallas Mosaic GPU"
    if not bindings():
        return "Mosaic GPU's bindings are not installed; they come with jax's CUDA plugin"
    if not _hopper():
        return "no Hopper GPU; its wgmma needs compute capability 9.x"
    return None


def plan_for(lay: Layout) -> Plan | None:
    """How the kernel runs `lay` (an `mlp_kernel.Layout`), or None where it
    does not: not a Hopper GPU with Mosaic GPU, separate towers, float32,
    layers wider than MAX_WIDTH, or weights that do not fit in shared memory."""
    if lay.towers != 1 or lay.dtype != "bfloat16" or any(w > MAX_WIDTH for w in lay.widths):
        return None
    if why_not_here() is not None:
        return None
    return fit(lay.in_dim, lay.widths, lay.out_cols, lay.out_pad)


def fit(in_dim: int, widths: tuple[int, ...], out_cols: int, out_pad: int) -> Plan | None:
    """The first of PLANS whose shared memory fits (None where none does)."""
    dims, nh = (_round16(in_dim),) + tuple(widths), _round16(out_cols)
    for wgs, stages in PLANS:
        # A whole store needs nh == out_pad: the zero columns past nh are
        # stored from a 16-column tile of their own.
        for oc in ((out_pad, 16) if nh == out_pad else (16,)):
            if smem_bytes(dims, nh, wgs, stages, oc) + SMEM_SLACK <= SMEM_LIMIT:
                return Plan(dims[0], nh, wgs, stages, oc)
    return None


def smem_transforms(plgpu: Any, minor: int, dtype: Any) -> tuple:
    """Tiling and swizzle of a shared-memory tile whose minor dimension holds
    `minor` elements: the largest swizzle that divides its rows (wgmma needs
    the tiling (8, swizzle / itemsize))."""
    itemsize = jnp.dtype(dtype).itemsize
    swizzle = plgpu.find_swizzle(minor * itemsize * 8)
    return (plgpu.TilingTransform((8, swizzle // itemsize)), plgpu.SwizzleTransform(swizzle))


def load_vector(plgpu: Any, ref: Any, layout: Any) -> jax.Array:
    """A whole bias from shared memory into `layout` (jax 0.10 takes the
    index positionally and requires it; jax 0.11 deprecates it)."""
    idx = inspect.signature(plgpu.load).parameters.get("idx")
    if idx is not None and idx.default is inspect.Parameter.empty:
        return plgpu.load(ref, (), layout=layout)
    return plgpu.load(ref, layout=layout)


def _num_sms() -> int:
    """The first GPU's SMs: the persistent grid's CTAs (132 where it does not say)."""
    dev = jax.local_devices(backend="gpu")[0]
    return int(getattr(dev, "core_count", 0) or 132)


def _params(lay: Layout, plan: Plan, weights: tuple[jax.Array, ...]) -> list[jax.Array]:
    """`mlp_kernel.pack`'s weights as the kernel reads them: each layer's
    kernel (bf16; the first padded to in_pad rows) and bias (f32), the heads'
    kernel and bias cut to nh columns."""
    n = len(lay.widths)
    out = []
    for i, w in enumerate(weights[:2 * n]):
        if w.ndim == 1:
            out.append(w.astype(jnp.float32))
        else:
            pad = plan.in_pad - w.shape[0] if i == 0 else 0
            out.append(jnp.pad(w.astype(jnp.bfloat16), ((0, pad), (0, 0))))
    wh, bh = weights[2 * n], weights[2 * n + 1]
    return out + [wh[:, :plan.nh].astype(jnp.bfloat16), bh[:plan.nh].astype(jnp.float32)]


def forward(lay: Layout, plan: Plan, x: jax.Array, weights: tuple[jax.Array, ...]) -> jax.Array:
    """The heads' columns f32[N, out_pad] of x [N, in_dim] (any float dtype):
    every head's logits, then the value, then zeros; `mlp_kernel.forward`'s
    slab. weights: `mlp_kernel.pack`'s (one tower)."""
    n, d = x.shape
    m = -(-n // plan.block_rows) * plan.block_rows
    # One fusion casts, pads the features to in_pad and the rows to whole
    # blocks: TMA needs rows of a multiple of 16 bytes (71 float32 features are not).
    xp = jnp.pad(x.astype(jnp.bfloat16), ((0, m - n), (0, plan.in_pad - d)))
    ws = _params(lay, plan, weights)
    return _call(lay, plan, m, _num_sms())(xp, *ws)[:n]


def store_plan(nh: int, oc: int, out_pad: int) -> list[tuple[int, str]]:
    """The heads' stores of a tile: (first column, what) per store of oc
    columns covering out_pad, what being "all" (the nh computed columns in
    one store), "slice" (oc of them) or "zeros" (columns past nh)."""
    return [(c, "zeros" if c >= nh else "all" if oc == nh else "slice")
            for c in range(0, out_pad, oc)]


@functools.cache
def _call(lay: Layout, plan: Plan, m: int, sms: int) -> Any:
    """The kernel for m rows (a multiple of plan.block_rows) on `sms` SMs:
    a function of (x bf16[m, in_pad], each layer's kernel and bias, the heads'
    kernel [width, nh] and bias [nh]) -> f32[m, out_pad]."""
    plgpu = _plgpu()
    bf16, f32 = jnp.bfloat16, jnp.float32
    blocks = m // plan.block_rows
    ctas = min(sms, blocks)
    x_tf = smem_transforms(plgpu, plan.in_pad, bf16)
    scratch = scratch_types(lay, plan)
    # The kernel's name in profiles, where this jax's Mesh takes one.
    named = "kernel_name" in inspect.signature(plgpu.Mesh).parameters
    return plgpu.kernel(
        _kernel(lay, plan, blocks, ctas, x_tf), out_type=jax.ShapeDtypeStruct(
            (m, lay.out_pad), f32), scratch_types=scratch,
        grid=(ctas,), grid_names=("sm",), num_threads=plan.wgs + 1, thread_name="wg",
        **({"kernel_name": KERNEL_NAME} if named else {}),
        compiler_params=plgpu.CompilerParams(
            approx_math=True, lowering_semantics=plgpu.LoweringSemantics.Warpgroup))


def scratch_types(lay: Layout, plan: Plan) -> list[Any]:
    """The kernel's shared memory: each layer's kernel (bf16) and bias (f32),
    the heads' kernel [width, nh] and bias, the heads' output staging
    [wgs, TILE_M, out_cols] f32, and the barrier the weights' copies arrive on."""
    plgpu = _plgpu()
    bf16, f32 = jnp.bfloat16, jnp.float32
    x_tf = smem_transforms(plgpu, plan.in_pad, bf16)
    # The first layer's kernel takes the x tile's swizzle; the others their columns'.
    w_tf = [x_tf] + [smem_transforms(plgpu, w, bf16) for w in lay.widths[1:]] + [
        smem_transforms(plgpu, plan.nh, bf16)]
    dims = (plan.in_pad,) + tuple(lay.widths)
    scratch = []
    for i, (kin, n) in enumerate(itertools.pairwise(dims)):
        scratch += [plgpu.SMEM((kin, n), bf16, transforms=w_tf[i]), plgpu.SMEM((n,), f32)]
    return scratch + [plgpu.SMEM((lay.widths[-1], plan.nh), bf16, transforms=w_tf[-1]),
                      plgpu.SMEM((plan.nh,), f32),
                      plgpu.SMEM((plan.wgs, TILE_M, plan.out_cols), f32,
                                 transforms=smem_transforms(plgpu, plan.out_cols, f32)),
                      plgpu.Barrier(num_arrivals=2 * len(lay.widths) + 2)]


def _dense(a: Any, w_s: Any, b_s: Any, n: int) -> jax.Array:
    """a @ w + b, float32 [TILE_M, n], in a compute warpgroup: a in shared
    memory or bf16 registers (the WGMMA layout), w and b in shared memory."""
    plgpu = _plgpu()

    def product(acc_ref: Any) -> jax.Array:
        plgpu.wgmma(acc_ref, a, w_s)
        return acc_ref[...]
    z = pl.run_scoped(product, plgpu.ACC((TILE_M, n), jnp.float32))
    bias = load_vector(plgpu, b_s, plgpu.Layout.WGMMA.reduce(0))
    return z + lax.broadcast_in_dim(bias, (TILE_M, n), (1,))


def _kernel(lay: Layout, plan: Plan, blocks: int, ctas: int, x_tf: tuple) -> Any:
    """The kernel body: refs (x, params, out in global memory; params, the
    output staging and the weights' barrier in shared memory)."""
    plgpu = _plgpu()
    tm, oc, nh, out_pad, k = TILE_M, plan.out_cols, plan.nh, lay.out_pad, 2 * len(lay.widths) + 2
    act = (lambda z: jnp.maximum(z, 0.0)) if lay.activation == "relu" else jnp.tanh

    def kernel(x_gmem: Any, *refs: Any) -> None:
        params_gmem, out_gmem, params_s = refs[:k], refs[k], refs[k + 1:2 * k + 1]
        out_s, loaded = refs[2 * k + 1], refs[2 * k + 2]
        cta, wg = lax.axis_index("sm"), lax.axis_index("wg")

        @pl.when(wg == 0)  # every weight and bias, once per CTA, one barrier for all
        def _load_weights() -> None:
            for src, dst in zip(params_gmem, params_s):
                plgpu.copy_gmem_to_smem(src, dst, loaded)

        def body(idx: Any, x_smem: Any, carry: Any) -> Any:
            h = x_smem.at[pl.ds(wg * tm, tm)]
            for i, w in enumerate(lay.widths):  # registers only from the first layer on
                h = act(_dense(h, params_s[2 * i], params_s[2 * i + 1], w)).astype(jnp.bfloat16)
            y = _dense(h, params_s[k - 2], params_s[k - 1], nh)
            row = (cta + idx[0] * ctas) * plan.block_rows + wg * tm
            for c, part in store_plan(nh, oc, out_pad):
                tile = (y if part == "all" else y[:, c:c + oc] if part == "slice"
                        else jnp.zeros((tm, oc), jnp.float32))
                plgpu.wait_smem_to_gmem(0, wait_read_only=True)  # the staging's last store
                out_s[wg] = tile
                plgpu.commit_smem()
                dst = out_gmem.at[pl.ds(row, tm)] if oc == out_pad else out_gmem.at[
                    pl.ds(row, tm), pl.ds(c, oc)]
                plgpu.copy_smem_to_gmem(out_s.at[wg], dst)
            return carry

        def compute_context(run: Any) -> None:
            plgpu.barrier_wait(loaded)  # the weights are in shared memory
            run(())

        pipeline = plgpu.emit_pipeline_warp_specialized(
            body, grid=(lax.div(blocks - 1 - cta, ctas) + 1,), memory_registers=40,
            in_specs=[plgpu.BlockSpec((plan.block_rows, plan.in_pad),
                                      lambda i: (cta + i * ctas, 0), transforms=x_tf)],
            wg_axis="wg", num_compute_wgs=plan.wgs, max_concurrent_steps=plan.stages,
            compute_context=compute_context)
        pipeline(x_gmem)
        plgpu.wait_smem_to_gmem(0, wait_read_only=True)
    return kernel
