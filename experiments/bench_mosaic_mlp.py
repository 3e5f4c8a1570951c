"""The shipped ``mlp`` policy's forward as ONE Pallas Mosaic GPU kernel against XLA's dot chain.

Issue 51's next step after ``bench_mosaic_layer.py`` (one dense layer): the
learner's whole forward, ``x [M, D] -> 2 hidden layers of width H -> a policy
head (A logits) and a value head (1)`` on a shared torso (WarpDrive's model,
``MLPActorCritic(shared_torso=True)``), with every weight resident in shared
memory and the hidden activations never written to HBM. bfloat16 in, float32
accumulation; each hidden layer is ``act(h @ W + b)`` in float32 and rounded to
bfloat16 for the next matmul (the casts of ``dtype=bfloat16``); the heads'
output is float32 (the model returns float32 logits and value; bf16 logits
would lose what the softmax of a near-uniform policy needs).

Sides (each in its own try/except; one that fails leaves the others):

* ``xla``: ``xla_layer`` of ``bench_mosaic_layer`` three times (hidden, hidden,
  heads as one [H, A+1] matmul with a float32 output), then the logits and the
  value sliced out, as the model does;
* ``mgpu_mlp``: ours. A persistent grid (one CTA per SM, row blocks of
  ``2 tile_m`` rows dealt round-robin over the CTAs) of three warpgroups: the
  last one only issues TMA loads of the x blocks (``stages`` in flight, so the
  next blocks load while this one computes), the two compute warpgroups take
  ``tile_m`` rows each. Before the pipeline warpgroup 0 TMAs every weight and
  bias once into shared memory (W1 [D, H], W2 [H, H], the heads [H, NH] with
  NH = A + 1 rounded up to 16, the biases in float32); the compute warpgroups
  wait on that barrier once. Per block, per compute warpgroup: layer 1 is a
  wgmma of the x block (shared memory) by W1 into a float32 accumulator in
  registers; bias and activation in registers, cast to bf16: h1 stays in
  registers and is the *register* A operand of layer 2's wgmma (W2 from shared
  memory); the same for h2 into the heads' wgmma ([tile_m, NH] float32); the
  heads' bias is added and the tile goes through shared memory to one TMA store
  of a [M, NH] float32 slab that overlaps the next block. The logits and the
  value are then ``slab[:, :A]`` and ``slab[:, A]`` (an XLA slice fusion,
  counted in this side's time);
* ``mgpu_mlp_slab``: the same kernel, returning the padded slab (the kernel
  alone; the difference to ``mgpu_mlp`` is what the slices cost);
* ``mgpu_split``, ``mgpu_1wg``, ``mgpu_1wg_out16``: the same kernel under one
  forced plan (`SIDE_PLANS`): two compute warpgroups with the heads stored 16
  columns at a time from a [tile_m, 16] staging, one compute warpgroup (a CTA's
  row block is tile_m rows) with whole stores, one with 16-column stores.
  ``mgpu_mlp`` takes the first of `PLANS` that fits (two warpgroups with whole
  stores, then 16-column stores, then one warpgroup), with the most stages;
* ``pallas``: the shipped forward (`jaxwarp.models.mlp_kernel.forward`, Pallas's
  Triton lowering, what the rollout ran before the Mosaic GPU kernel), its
  weights packed as the model packs them, on the same bf16 x (GPU only).

Shared memory per CTA (bytes; 227 KB is an H200's limit): weights
``2 (D H + H H + H NH)`` + biases ``4 (2 H + NH)`` + x blocks ``stages x wgs
tile_m x D x 2`` + the output staging ``wgs tile_m out_cols 4`` (wgs = 2
compute warpgroups and out_cols = NH in the first plan). tile_m = 128 rows a
warpgroup at H = 64, 64 at H >= 128 (a [64, 256] float32 accumulator is 128
registers a thread, h in bf16 64 more); the most stages (3 to 1) that fit.
With NH = 16: H = 64 fits (D = 64: 133 KB at 3 stages; D = 128: 174 KB at 2),
H = 128 fits (110 / 176 KB), H = 256 fits at D = 64 (215 KB, 2 stages) but not
at D = 128 (W1 and W2 alone are 200 KB; one stage of 128 x 128 x bf16 is 32 KB
more): that shape is reported ``skipped`` with the numbers (what it would need:
W2 streamed through the pipeline in K slices, or one compute warpgroup).

Every side's first output is checked against a float32 NumPy reference with the
same bf16 roundings between layers (logits and value each: largest |error| over
their largest |value|, within bf16 tolerance), then timed as in
``bench_mosaic_layer``: a jitted program of ``inner`` MLPs on distinct inputs,
compile apart, the median of ``--repeats`` calls by wall clock and, where CUPTI
works, the summed GPU time of its kernels. Reported: µs per MLP, TFLOP/s, the
fraction of the bf16 peak and of the bytes-moved roofline (x read, the weights
read once, logits and value written as float32, over the HBM bandwidth), speed
against XLA. Rows rounded up to a multiple of 256 (220,000 -> 220,160).

    python experiments/bench_mosaic_mlp.py           # 220K and 32K rows, H 64/128/256, D 64/128
    python experiments/bench_mosaic_mlp.py --quick   # 220K rows, (D, H) = (64, 128), (64, 256)
    python experiments/bench_mosaic_mlp.py --quick --out /tmp/x.json   # no GPU: checks only
    python experiments/bench_mosaic_mlp.py --shapes 80x256 --actions 42 --acts relu \
        --rows 200000,20000,1000000 --sides xla,pallas,mgpu_mlp,mgpu_1wg,mgpu_1wg_out16
        # Tag's model: the three fits of its 192 KB of weights against the Triton forward

Without a GPU the XLA side is checked on the CPU and the Mosaic GPU sides are
reported ``skipped: no GPU``; where Mosaic GPU's bindings are installed (a
jax-cuda plugin) they are lowered for CUDA (``jax.export``) first. Under the
warpgroup semantics (tried first) that runs Mosaic GPU's layout inference and
its shared-memory check; the lane semantics (the fallback) refuses NH = 16 (a
64-byte bias copy is not a multiple of the warpgroup's 128 threads).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # bench_mosaic_layer beside this file (it puts the checkout on the path)
    sys.path.insert(0, HERE)

from bench_mosaic_layer import (
    ROW_ALIGN,
    TOL,
    Skip,
    _load_vector,
    _plgpu,
    _semantics,
    _transforms,
    activation,
    describe,
    differences,
    finish,
    first_lines,
    inner_for,
    lowered_only,
    num_sms,
    past_budget,
    run_parser,
    shape_grid,
    start_run,
    timed,
    xla_layer,
)

from jaxwarp.benchmark import write_result

ROWS = (220_000, 32_768)  # the decisive size first: a cut-off run keeps it
SHAPES = ((64, 64), (64, 128), (64, 256), (128, 64), (128, 128), (128, 256))  # (D, H)
QUICK_ROWS, QUICK_SHAPES = (220_000,), ((64, 128), (64, 256))
SIDES = ("xla", "pallas", "mgpu_mlp", "mgpu_mlp_slab", "mgpu_split", "mgpu_1wg",
         "mgpu_1wg_out16")
# The plans each of our sides may take (`PLANS`, below, for the first two).
SIDE_PLANS = {"mgpu_split": ((2, 16),), "mgpu_1wg": ((1, None),), "mgpu_1wg_out16": ((1, 16),)}
SMEM_LIMIT = 227 * 1024  # bytes of shared memory a CTA may have on an H100/H200
SMEM_SLACK = 2048  # barriers and what Mosaic GPU keeps for itself


def head_width(actions: int) -> int:
    """Columns of the heads' matmul: A logits + 1 value, rounded up to 16
    (a wgmma B tile of bf16 needs rows of >= 32 bytes: the 32-byte swizzle)."""
    return -(-(actions + 1) // 16) * 16


# --- the kernel ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MlpTiles:
    """`wgs` compute warpgroups of tile_m rows each (a CTA's row block is
    wgs x tile_m); `stages` x blocks in flight; the heads' output staged and
    stored `out_cols` columns at a time (None: all of them at once)."""
    tile_m: int
    stages: int
    semantics: str = "warpgroup"
    wgs: int = 2
    out_cols: int | None = None

    def label(self) -> str:
        split = f"/out{self.out_cols}" if self.out_cols else ""
        return f"{self.wgs}x{self.tile_m}r/{self.stages}st{split}/{self.semantics[:2]}"


def kb(b: int) -> int:
    """`b` bytes rounded up to 1 KB, a swizzled shared-memory tile's alignment."""
    return -(-b // 1024) * 1024


def smem_bytes(d: int, h: int, nh: int, tile_m: int, stages: int, wgs: int = 2,
               out_cols: int | None = None) -> int:
    """Shared memory of the kernel (each buffer rounded up to 1 KB, `kb`)."""
    weights = kb(2 * d * h) + kb(2 * h * h) + kb(2 * h * nh)
    biases = kb(4 * h) * 2 + kb(4 * nh)
    return (weights + biases + stages * kb(wgs * tile_m * d * 2)
            + kb(wgs * tile_m * (out_cols or nh) * 4))


# How a shape too large for the first plan is fitted, in order of preference:
# (compute warpgroups, output columns a store). Two warpgroups overlap one's
# epilogue with the other's wgmma; storing the heads 16 columns at a time
# shrinks the output's staging; one warpgroup halves the x blocks and the staging.
PLANS = ((2, None), (2, 16), (1, None), (1, 16))


def mlp_tiles(d: int, h: int, nh: int, semantics: str, tile_m: int | None = None,
              plans: tuple = PLANS) -> MlpTiles:
    """The first plan (then the most stages, 3 to 1) whose shared memory fits."""
    tm = tile_m or (128 if h <= 64 else 64)
    for wgs, oc in plans:
        for stages in (3, 2, 1):
            if smem_bytes(d, h, nh, tm, stages, wgs, oc) + SMEM_SLACK <= SMEM_LIMIT:
                return MlpTiles(tm, stages, semantics, wgs, oc)
    wgs, oc = plans[-1]
    need = smem_bytes(d, h, nh, tm, 1, wgs, oc) + SMEM_SLACK
    raise Skip(f"skipped: needs {need / 1024:.0f} KB of shared memory at one stage "
               f"(weights {2 * (d * h + h * h + h * nh) / 1024:.0f} KB resident) > "
               f"{SMEM_LIMIT // 1024} KB")


def fused_mlp(x, w1, b1, w2, b2, wh, bh, *, act: str, tiles: MlpTiles, sms: int | None = None):
    """The heads' [M, NH] float32 slab of the shared-torso MLP in one kernel
    (see the module docstring): x [M, D] bf16; w1 [D, H], w2 [H, H], wh [H, NH]
    bf16; b1, b2 [H], bh [NH] float32. (Pallas's Mosaic GPU interpreter on the
    CPU, jax 0.10.2's private InterpretGPUParams, did not finish a 768-row call
    in 12 minutes: the values are checked on a GPU only.)"""
    pl, plgpu = _plgpu()
    m, d = x.shape
    h, nh = w1.shape[1], wh.shape[1]
    tm, wgs = tiles.tile_m, tiles.wgs
    oc = tiles.out_cols or nh
    cta_m = wgs * tm
    if (m % cta_m or d % 16 or h % 64 or nh % oc or oc % 16 or w2.shape != (h, h)
            or wh.shape[0] != h):
        raise Skip(f"tiles {tiles.label()} do not fit m={m} d={d} h={h} nh={nh}")
    blocks = m // cta_m
    ctas = min(sms or num_sms(), blocks)
    x_tf = _transforms(plgpu, d, x.dtype)
    # W1 is the rhs of a wgmma whose lhs (x) is in shared memory: same swizzle as x's.
    tf = {"w1": x_tf, "w2": _transforms(plgpu, h, w2.dtype),
          "wh": _transforms(plgpu, nh, wh.dtype)}
    out_tf = _transforms(plgpu, oc, jnp.float32)
    bf16 = jnp.bfloat16

    def kernel(x_gmem, *refs):
        gmem, (w1_s, b1_s, w2_s, b2_s, wh_s, bh_s, out_s, loaded) = refs[:7], refs[7:]
        *params_gmem, out_gmem = gmem
        cta, wg = lax.axis_index("sm"), lax.axis_index("wg")

        @pl.when(wg == 0)  # every weight and bias, once per CTA, one barrier for all six
        def _load_weights():
            for src, dst in zip(params_gmem, (w1_s, b1_s, w2_s, b2_s, wh_s, bh_s)):
                plgpu.copy_gmem_to_smem(src, dst, loaded)

        def dense(a, w_s, b_s, n):
            """a @ w + b in float32 [tm, n]: a is a ref (shared memory) or bf16
            registers in the WGMMA layout."""
            def product(acc_ref):
                plgpu.wgmma(acc_ref, a, w_s)
                return acc_ref[...]
            z = pl.run_scoped(product, plgpu.ACC((tm, n), jnp.float32))
            bias = _load_vector(plgpu, b_s, plgpu.Layout.WGMMA.reduce(0))
            return z + lax.broadcast_in_dim(bias, (tm, n), (1,))

        def body(idx, x_smem, carry):
            rows = x_smem.at[pl.ds(wg * tm, tm)]
            h1 = activation(dense(rows, w1_s, b1_s, h), act).astype(bf16)  # registers only
            h2 = activation(dense(h1, w2_s, b2_s, h), act).astype(bf16)
            y = dense(h2, wh_s, bh_s, nh)
            row = (cta + idx[0] * ctas) * cta_m + wg * tm
            for j in range(nh // oc):  # one store of oc columns at a time
                plgpu.wait_smem_to_gmem(0, wait_read_only=True)  # the staging's last store
                out_s[wg] = y if oc == nh else y[:, j * oc:(j + 1) * oc]
                plgpu.commit_smem()
                dst = out_gmem.at[pl.ds(row, tm)] if oc == nh else out_gmem.at[
                    pl.ds(row, tm), pl.ds(j * oc, oc)]
                plgpu.copy_smem_to_gmem(out_s.at[wg], dst)
            return carry

        def compute_context(run):
            plgpu.barrier_wait(loaded)  # the weights are in shared memory
            run(())

        pipeline = plgpu.emit_pipeline_warp_specialized(
            body, grid=(lax.div(blocks - 1 - cta, ctas) + 1,), memory_registers=40,
            in_specs=[plgpu.BlockSpec((cta_m, d), lambda i: (cta + i * ctas, 0),
                                      transforms=x_tf)],
            wg_axis="wg", num_compute_wgs=wgs, max_concurrent_steps=tiles.stages,
            compute_context=compute_context)
        pipeline(x_gmem)
        plgpu.wait_smem_to_gmem(0, wait_read_only=True)

    scratch = [plgpu.SMEM((d, h), bf16, transforms=tf["w1"]), plgpu.SMEM((h,), jnp.float32),
               plgpu.SMEM((h, h), bf16, transforms=tf["w2"]), plgpu.SMEM((h,), jnp.float32),
               plgpu.SMEM((h, nh), bf16, transforms=tf["wh"]), plgpu.SMEM((nh,), jnp.float32),
               plgpu.SMEM((wgs, tm, oc), jnp.float32, transforms=out_tf),
               plgpu.Barrier(num_arrivals=6)]
    call = plgpu.kernel(
        kernel, out_type=jax.ShapeDtypeStruct((m, nh), jnp.float32), scratch_types=scratch,
        grid=(ctas,), grid_names=("sm",), num_threads=wgs + 1, thread_name="wg",
        compiler_params=plgpu.CompilerParams(
            approx_math=True, lowering_semantics=_semantics(plgpu, tiles.semantics)))
    return call(x, w1, b1, w2, b2, wh, bh)


# --- the XLA side, the reference, the case ---------------------------------------------------


def xla_mlp(x, w1, b1, w2, b2, wh, bh, *, act: str):
    """The same MLP as XLA ops: bf16 matmuls with float32 accumulation, bias and
    activation in float32, hidden layers rounded to bf16, heads in float32."""
    h1 = xla_layer(x, w1, b1, act)
    y = xla_layer(xla_layer(h1, w2, b2, act), wh, bh, "none", jnp.float32)
    a = wh.shape[1] - 1
    return y[:, :a], y[:, a]


def reference(case: Case, x) -> tuple[jax.Array, jax.Array]:
    """(logits, value) in float32 by NumPy from the same bf16 inputs, rounding
    each hidden layer to bf16 as the sides do; put on the device."""
    def f32(a):
        return np.asarray(a).astype(np.float32)
    act = {"relu": lambda z: np.maximum(z, 0.0), "tanh": np.tanh}[case.act]
    h = f32(x)
    for w, b in ((case.w1, case.b1), (case.w2, case.b2)):
        h = act(h @ f32(w) + f32(b)).astype(ml_dtypes.bfloat16).astype(np.float32)
    y = h @ f32(case.wh) + f32(case.bh)
    return (jax.device_put(np.ascontiguousarray(y[:, :case.actions])),
            jax.device_put(np.ascontiguousarray(y[:, case.actions])))


@dataclasses.dataclass
class Case:
    rows: int  # as run (rounded up to ROW_ALIGN)
    d: int
    h: int
    actions: int
    act: str
    xs: list  # inner distinct inputs [rows, d] bf16
    w1: jax.Array
    b1: jax.Array
    w2: jax.Array
    b2: jax.Array
    wh: jax.Array  # [h, actions + 1]: the policy head's columns, then the value's
    bh: jax.Array

    def padded_heads(self) -> tuple[jax.Array, jax.Array]:
        """The heads with zero columns up to head_width (packed once, as the
        model's parameters would be)."""
        pad = head_width(self.actions) - (self.actions + 1)
        return jnp.pad(self.wh, ((0, 0), (0, pad))), jnp.pad(self.bh, (0, pad))


def weight(key: jax.Array, fan_in: int, n: int) -> jax.Array:
    """bf16 [fan_in, n] with unit-variance outputs, as the layer bench's weights."""
    return (jax.random.normal(key, (fan_in, n), jnp.float32) / np.sqrt(fan_in)).astype(
        jnp.bfloat16)


def bias(key: jax.Array, n: int) -> jax.Array:
    return 0.1 * jax.random.normal(key, (n,), jnp.float32)


normal = jax.jit(lambda key, shape: jax.random.normal(key, shape, jnp.float32)
                 .astype(jnp.bfloat16), static_argnums=1)


def make_case(rows: int, d: int, h: int, actions: int, act: str, inner: int) -> Case:
    keys = jax.random.split(jax.random.PRNGKey(rows * 7 + d * 3 + h), 6 + inner)
    return Case(rows, d, h, actions, act, [normal(k, (rows, d)) for k in keys[6:]],
                weight(keys[0], d, h), bias(keys[1], h), weight(keys[2], h, h), bias(keys[3], h),
                weight(keys[4], h, actions + 1), bias(keys[5], actions + 1))


def side_fn(side: str, case: Case, sms: int, semantics: str,
            tile_m: int | None) -> tuple[Callable, tuple, str]:
    """(the side as a function of one x, its weights as operands, a label)."""
    weights = (case.w1, case.b1, case.w2, case.b2, case.wh, case.bh)
    a = case.actions
    if side == "xla":
        return functools.partial(xla_mlp, act=case.act), weights, "XLA dot chain"
    if side == "pallas":
        return shipped_pallas(case)
    wh, bh = case.padded_heads()
    tiles = mlp_tiles(case.d, case.h, wh.shape[1], semantics, tile_m,
                      SIDE_PLANS.get(side, PLANS))
    kernel = functools.partial(fused_mlp, act=case.act, tiles=tiles, sms=sms)

    def heads(x, *w):  # logits and value out of the slab, as the model returns them
        y = kernel(x, *w)
        return y[:, :a], y[:, a]
    return (kernel if side == "mgpu_mlp_slab" else heads), weights[:4] + (wh, bh), tiles.label()


def shipped_pallas(case: Case) -> tuple[Callable, tuple, str]:
    """The shipped forward kernel (`jaxwarp.models.mlp_kernel.forward`, Pallas's
    Triton lowering: what the rollout runs), its weights packed as the model
    packs them, on the same bf16 x; logits and value sliced out of its slab."""
    from jaxwarp.models import mlp_kernel as mk

    if jax.default_backend() != "gpu":
        raise Skip("skipped: no GPU (Triton)")
    a = case.actions
    lay = mk.Layout(case.d, (case.h, case.h), a + 1, 1, case.act, "bfloat16")
    packed = mk.pack(lay, [[(case.w1, case.b1), (case.w2, case.b2)]],
                     (case.wh[:, :a], case.bh[:a]), (case.wh[:, a:], case.bh[a:]))

    def fn(x, *w):
        y = mk.forward(lay, x, w)[0]
        return y[:, :a], y[:, a]
    return fn, packed, f"Triton {lay.rows}r/{lay.warps}w, out {lay.out_pad}"


def cost(case: Case) -> tuple[float, float]:
    """(FLOPs, bytes that must move) of one forward: x and the weights read
    once, logits and value written once in float32."""
    m, d, h, n = case.rows, case.d, case.h, case.actions + 1
    params = d * h + h * h + h * n
    return 2.0 * m * params, 2.0 * m * d + 2.0 * params + 4.0 * (2 * h + n) + 4.0 * m * n


def run_side(side: str, case: Case, ref: tuple, args: argparse.Namespace, gpu: bool,
             sms: int, semantics: str) -> dict[str, Any]:
    fn, weights, label = side_fn(side, case, sms, semantics, args.tile_m)
    out: dict[str, Any] = {"tiles": label}
    if side.startswith("mgpu") and not gpu:
        lowered_only(fn, (case.xs[0], *weights), label)
    mlp = jax.jit(fn)
    # `inner` MLPs on distinct inputs, one set of weights, every output kept.
    program = jax.jit(lambda xs, ws: tuple(mlp(x, *ws) for x in xs))
    t = time.perf_counter()
    compiled = program.lower(case.xs, weights).compile()
    out["compile_s"] = time.perf_counter() - t
    first = compiled(case.xs, weights)[0]
    got = (first[:, :case.actions], first[:, case.actions]) if side == "mgpu_mlp_slab" else first
    worst = 0.0
    for name, g, want in zip(("logits", "value"), got, ref):
        err, scale, finite = (float(v) for v in differences(g, want))
        rel = err / (scale or 1.0)
        out[name] = {"max_abs_err": err, "max_rel_err": rel, "ref_max_abs": scale}
        if not finite or rel > TOL["bf16"]:
            raise AssertionError(f"{name} differ from the float32 reference: max abs err "
                                 f"{err:.3e}, relative to max |ref| {rel:.3e} > {TOL['bf16']:.1e}")
        worst = max(worst, rel)
    out.update(check="ok", max_rel_err=worst)
    out.update(timed(compiled, (case.xs, weights), len(case.xs), args, gpu))
    us = out["us"]
    flops, moved = cost(case)
    out.update(tflops=flops / us / 1e6,
               peak_fraction=flops / (us * 1e-6) / args.peak if args.peak else None)
    if args.bandwidth:
        out["memory_roofline_us"] = 1e6 * moved / args.bandwidth
        out["memory_fraction"] = out["memory_roofline_us"] / us  # the bytes-moved roofline
    else:
        out["memory_fraction"] = None
    return out


def main() -> int:
    ap = run_parser(__doc__, "220,000 rows, (D, H) = (64, 128) and (64, 256)", "MLPs", 200.0)
    ap.add_argument("--shapes", default=None, help="D x H pairs, e.g. 64x64,128x256")
    ap.add_argument("--actions", type=int, default=5, help="policy logits A (heads: A + 1)")
    ap.add_argument("--acts", default="tanh", help="of tanh (the mlp's default), relu")
    ap.add_argument("--sides", default=",".join(SIDES), help="a subset of " + ", ".join(SIDES))
    ap.add_argument("--tile-m", type=int, default=None,
                    help="rows per compute warpgroup, 64 or 128 (default: 128 at H = 64, else 64)")
    ap.add_argument("--out", default="experiments/results/bench_mosaic_mlp_h200.json")
    args = ap.parse_args()
    start = time.perf_counter()

    rows_list = tuple(int(r) for r in args.rows.split(",")) if args.rows else (
        QUICK_ROWS if args.quick else ROWS)
    shapes = tuple(tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")) if (
        args.shapes) else (QUICK_SHAPES if args.quick else SHAPES)
    sides = [s for s in args.sides.split(",") if s in SIDES]
    semantics = args.semantics.split(",")
    gpu, sms, meta = start_run(args, sides, f", A = {args.actions}")
    results: list[dict[str, Any]] = []
    failures: list[str] = []
    data = {"meta": meta, "config": {
        "rows": list(rows_list), "shapes_d_h": [list(s) for s in shapes],
        "actions": args.actions, "head_width": head_width(args.actions), "acts": args.acts,
        "sides": sides, "semantics": semantics, "tile_m": args.tile_m, "repeats": args.repeats,
        "row_align": ROW_ALIGN, "tolerance": TOL["bf16"], "output": "float32 logits and value",
        "smem_limit": SMEM_LIMIT}, "results": results, "failures": failures}
    for act, rows_asked, rows, (d, h) in shape_grid(args.acts, rows_list, shapes):
        head = f"{act} rows {rows_asked} (run as {rows}) D={d} H={h} A={args.actions}"
        entry: dict[str, Any] = {"act": act, "rows_asked": rows_asked, "rows": rows,
                                 "d": d, "h": h, "actions": args.actions, "sides": {}}
        results.append(entry)
        if past_budget(entry, head, start, args.budget_s):
            continue
        try:
            inner = inner_for(rows, d, head_width(args.actions), args.inner_bytes) if (
                gpu) else 1
            case = make_case(rows, d, h, args.actions, act, inner)
            ref = jax.block_until_ready(reference(case, case.xs[0]))
        except Exception as e:  # noqa: BLE001  (e.g. out of memory: the next shape)
            entry["status"] = "error: " + first_lines(e)
            failures.append(f"{head}: {entry['status']}")
            print(f"{head}: {entry['status']}", flush=True)
            continue
        entry["inner"] = inner
        print(f"{head}, {inner} MLPs a program:", flush=True)
        for side in sides:
            r = measure_side(side, case, ref, args, gpu, sms,
                             semantics if side != "xla" else semantics[:1])
            xla_us = entry["sides"].get("xla", {}).get("us")
            if xla_us and "us" in r and side != "xla":
                r["speed_vs_xla"] = xla_us / r["us"]
            if "us" not in r and not r["status"].startswith("skipped"):
                failures.append(f"{head} {side}: {r['status']}")
            entry["sides"][side] = r
            print(describe(side, r, xla_us), flush=True)
        del case
        data["elapsed_s"] = time.perf_counter() - start
        write_result(args.out, data)  # after every shape: a cut-off run keeps it
    return finish(args.out, data, start)


def measure_side(side: str, case: Case, ref: tuple, args: argparse.Namespace, gpu: bool,
                 sms: int, semantics: list[str]) -> dict[str, Any]:
    """run_side under each lowering semantics in turn until one works; a Skip
    ends the tries, an error is kept and the next semantics tried."""
    attempts: list[dict[str, str]] = []
    t = time.perf_counter()
    r: dict[str, Any] = {}
    for sem in semantics:
        try:
            r = run_side(side, case, ref, args, gpu, sms, sem)
            if side != "xla":
                r["semantics"] = sem
            break
        except Skip as e:
            r = {"status": str(e)}
            if "lowered for cuda: ok" in str(e):
                r["semantics"] = sem
            break
        except Exception as e:  # noqa: BLE001  (a side that fails is a finding)
            attempts.append({"semantics": sem, "error": first_lines(e),
                             "detail": traceback.format_exc()[-3000:]})
            if args.traceback:
                traceback.print_exc()
            r = {"status": f"error ({sem}): {first_lines(e)}"}
            if sem != semantics[-1]:
                print(f"  {side:12s} {r['status']}", flush=True)
    if attempts:
        r["failed_attempts"] = attempts
    r["side_s"] = time.perf_counter() - t
    return r


if __name__ == "__main__":
    sys.exit(main())
