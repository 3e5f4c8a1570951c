"""The mlp policy's weight gradients as ONE Pallas Mosaic GPU kernel against XLA's autodiff.

Issue 51's step after the fused forward (``bench_mosaic_mlp.py``): the learner
needs, for the shared-torso ``mlp`` (x [M, D] -> two hidden layers of H ->
A logits and a value), the gradients of every weight and bias given the
loss's gradient with respect to the heads, ``dy [M, NH]`` (the logits'
columns, then the value's, zero up to NH = A + 1 rounded up to 16). The
observations take no gradient, so there is no dx. One persistent kernel
(a CTA per SM, row blocks of ``2 tile_m`` rows dealt round-robin, a memory
warpgroup streaming x and dy by TMA, two compute warpgroups of ``tile_m``
rows each) does, per block and warpgroup, with W1, W2 and the heads resident
in shared memory (loaded once per CTA):

* the forward again (recomputed, not read back): ``z1 = x W1 + b1``,
  ``h1 = act(z1)``, ``z2 = h1 W2 + b2``, ``h2 = act(z2)``, in registers;
* the chain back: ``dh2 = dy Wh^T`` (B read transposed from shared memory),
  ``dz2 = dh2 act'(z2)``, ``dh1 = dz2 W2^T`` (dz2 the *register* A operand),
  ``dz1 = dh1 act'(z1)``;
* h1, h2, dz1 and dz2 (bf16) to shared memory, then the weight gradients
  ``dW1 += x^T dz1``, ``dW2 += h1^T dz2``, ``dWh += h2^T dy`` as wgmmas with
  the A operand read transposed, into float32 accumulators that stay in the
  warpgroup's registers across all its blocks; the bias gradients, the
  column sums of dz1, dz2 and dy, as three more wgmmas into one [64, H]
  accumulator (A: a constant with ones in row k, so row k gains the k-th
  sum). Column sums by ``jnp.sum(axis=0)`` of the registers lowered but gave
  wrong db1 on an H200 (commit 1691341; dW1 matched), hence the wgmmas.

At the end each warpgroup writes its partial gradients once (float32, by
TMA), and XLA sums the ``2 x CTAs`` partials in a fixed order: the same bits
every run. No activation or gradient of a row is ever written to HBM.
Registers bound the shapes: the accumulators are ``(D H + H H + H NH + 64 H)
/ 128`` float32 a thread, 128 at D = H = 64 with the backward's NH = 64 (see
``BWD_HEADS``), 320 at H = 128 (does not fit): D = H = 64 (the shipped
CartPole, MPE and Tag-duel models; smaller observations are zero-padded to 64
columns) is the kernel's shape here.

Sides, each checked against a float32 NumPy reference with the same bf16
roundings (every gradient: largest |error| over its largest |value|, within
bf16 tolerance), then timed as in ``bench_mosaic_layer`` (GPU kernel time
by CUPTI where it works, ``inner`` calls on distinct inputs a program):

* ``xla_step``: the forward and its gradients by XLA as the learner runs
  them (``jax.vjp`` of ``bench_mosaic_mlp.xla_mlp``, applied to dy);
* ``mgpu_step``: ours, the fused forward (``bench_mosaic_mlp.fused_mlp``,
  the heads' slab) and the fused backward, the partials summed by XLA;
* ``mgpu_bwd``: the backward kernel and its sum alone.

    python experiments/bench_mosaic_mlp_bwd.py           # 220K and 32K rows, D = H = 64
    python experiments/bench_mosaic_mlp_bwd.py --quick   # 220K rows

Without a GPU the XLA side is checked on the CPU and the Mosaic GPU sides are
lowered for CUDA (``jax.export``) where a jax-cuda plugin is installed, else
reported ``skipped: no GPU``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # the two benches beside this file (they put the checkout on the path)
    sys.path.insert(0, HERE)

import bench_mosaic_layer as layer_bench
from bench_mosaic_layer import TOL, Skip, _plgpu, _semantics, _transforms
from bench_mosaic_mlp import (
    SMEM_LIMIT,
    SMEM_SLACK,
    bias,
    fused_mlp,
    head_width,
    kb,
    mlp_tiles,
    normal,
    weight,
    xla_mlp,
)

from jaxwarp.benchmark import write_result

ROWS = (220_000, 32_768)
SHAPES = ((64, 64),)  # (D, H): what the registers hold (module docstring)
QUICK_ROWS = (220_000,)
SIDES = ("xla_step", "mgpu_step", "mgpu_bwd")
GRADS = ("w1", "b1", "w2", "b2", "wh", "bh")
MAX_ACC_REGS = 128  # float32 accumulator registers a thread may keep (of 255; the rest: the chain)
# Columns of dy and of the heads in the backward: dWh = h2^T dy is a wgmma whose A (h2) is read
# transposed from shared memory, and Mosaic GPU's layout inference (jax 0.10.2) finds no layout
# for it with a B (dy) narrower than 64 bf16 columns (16 and 32 fail, 64 lowers).
BWD_HEADS = 64


@dataclasses.dataclass(frozen=True)
class BwdTiles:
    """2 compute warpgroups of tile_m rows each; `stages` blocks in flight."""
    tile_m: int
    stages: int
    semantics: str = "warpgroup"

    def label(self) -> str:
        return f"{2 * self.tile_m}r/{self.stages}st/{self.semantics[:2]}"


def bwd_smem_bytes(d: int, h: int, nh: int, tile_m: int, stages: int) -> int:
    """Shared memory of the backward kernel: the weights and biases, the
    pipeline's x and dy blocks, per warpgroup h1, h2, dz1, dz2 (bf16), the
    three row selectors of the bias sums, and one [h, h] float32 tile a
    warpgroup through which the partial gradients leave in turn."""
    weights = kb(2 * d * h) + kb(2 * h * h) + kb(2 * h * nh) + 2 * kb(4 * h) + kb(4 * nh)
    blocks = stages * (kb(2 * tile_m * d * 2) + kb(2 * tile_m * nh * 2))
    chain = 4 * kb(2 * tile_m * h * 2)
    selectors = 3 * kb(2 * 64 * tile_m)
    return weights + blocks + chain + selectors + kb(8 * h * h)


def bwd_tiles(d: int, h: int, nh: int, semantics: str) -> BwdTiles:
    """The kernel's tiles at D x H with nh heads' columns; Skip where the
    accumulators do not fit in registers or the shapes differ (the partials
    leave through one [h, h] tile: D = H = nh)."""
    acc_regs = (d * h + h * h + h * nh + 64 * h) // 128
    if not d == h == nh or acc_regs > MAX_ACC_REGS:
        raise Skip(f"skipped: the gradients' accumulators need {acc_regs} float32 registers a "
                   f"thread (at most {MAX_ACC_REGS}) and D = H = {nh} (D={d}, H={h})")
    for stages in (3, 2, 1):
        if bwd_smem_bytes(d, h, nh, 64, stages) + SMEM_SLACK <= SMEM_LIMIT:
            return BwdTiles(64, stages, semantics)
    raise Skip(f"skipped: needs {bwd_smem_bytes(d, h, nh, 64, 1) / 1024:.0f} KB of shared "
               f"memory at one stage > {SMEM_LIMIT // 1024} KB")


def _derivative(act: str, h, dh):
    """dz from dh and the activation's float32 output h (tanh: 1 - h^2; relu: h > 0)."""
    if act == "tanh":
        return dh * (1.0 - h * h)
    if act == "relu":
        return jnp.where(h > 0.0, dh, 0.0)
    raise ValueError(f"activation {act!r}")


def fused_mlp_bwd(x, dy, w1, b1, w2, b2, wh, bh, *, act: str, tiles: BwdTiles,
                  sms: int | None = None) -> tuple[jax.Array, ...]:
    """(dw1, db1, dw2, db2, dwh, dbh) in float32 of the shared-torso MLP at
    x [M, D] bf16 for the heads' gradient dy [M, NH] bf16 (NH = BWD_HEADS;
    module docstring): w1 [D, H], w2 [H, H] bf16; b1, b2 [H] float32; the
    heads wh [H, n] bf16 and bh [n] float32 with n <= NH columns (zero-padded
    to NH here; dwh and dbh come back with NH)."""
    pl, plgpu = _plgpu()
    m, d = x.shape
    h, nh = w1.shape[1], dy.shape[1]
    wh = jnp.pad(wh, ((0, 0), (0, nh - wh.shape[1])))
    bh = jnp.pad(bh, (0, nh - bh.shape[0]))
    tm = tiles.tile_m
    cta_m = 2 * tm
    if m % cta_m or dy.shape != (m, nh) or w2.shape != (h, h) or wh.shape[0] != h:
        raise Skip(f"tiles {tiles.label()} do not fit m={m} d={d} h={h} nh={nh}")
    blocks = m // cta_m
    ctas = min(sms or layer_bench.num_sms(), blocks)
    bf16, f32 = jnp.bfloat16, jnp.float32
    x_tf, dy_tf = _transforms(plgpu, d, bf16), _transforms(plgpu, nh, bf16)
    h_tf = _transforms(plgpu, h, bf16)
    shapes = {"w1": (d, h), "w2": (h, h), "wh": (h, nh)}  # all [h, h] (bwd_tiles)
    vec = plgpu.Layout.WGMMA.reduce(0)  # the biases, broadcast over the rows

    def kernel(x_gmem, dy_gmem, *refs):
        consts_gmem, parts_gmem = refs[:7], refs[7:11]
        w1_s, b1_s, w2_s, b2_s, wh_s, bh_s, sel_s, chain_s, tile_s, loaded = refs[11:]
        cta, wg = lax.axis_index("sm"), lax.axis_index("wg")

        @pl.when(wg == 0)  # every weight and bias and the row selectors, once per CTA
        def _load_weights():
            for src, dst in zip(consts_gmem, (w1_s, b1_s, w2_s, b2_s, wh_s, bh_s, sel_s)):
                plgpu.copy_gmem_to_smem(src, dst, loaded)

        def matmul(a, b_s, n):
            """a @ b in float32 [tm, n] (a: shared memory or bf16 registers)."""
            def product(acc_ref):
                plgpu.wgmma(acc_ref, a, b_s)
                return acc_ref[...]
            return pl.run_scoped(product, plgpu.ACC((tm, n), f32))

        def bias_rows(b_s, n):
            b = layer_bench._load_vector(plgpu, b_s, vec)
            return lax.broadcast_in_dim(b, (tm, n), (1,))

        def body(idx, x_smem, dy_smem, carry):
            acc_w1, acc_w2, acc_wh, acc_b = carry
            rows = pl.ds(wg * tm, tm)
            xs, dys = x_smem.at[rows], dy_smem.at[rows]
            h1 = layer_bench.activation(matmul(xs, w1_s, h) + bias_rows(b1_s, h), act)  # float32
            h1b = h1.astype(bf16)
            h2 = layer_bench.activation(matmul(h1b, w2_s, h) + bias_rows(b2_s, h), act)
            dz2 = _derivative(act, h2, matmul(dys, wh_s.transpose((1, 0)), h)).astype(bf16)
            dz1 = _derivative(act, h1, matmul(dz2, w2_s.transpose((1, 0)), h)).astype(bf16)
            h1_s, h2_s, dz1_s, dz2_s = (chain_s.at[wg, i] for i in range(4))
            h1_s[...] = h1b
            h2_s[...] = h2.astype(bf16)
            dz1_s[...] = dz1
            dz2_s[...] = dz2
            plgpu.commit_smem()  # the stores above, before the wgmmas read them
            plgpu.wgmma(acc_w1, xs.transpose((1, 0)), dz1_s)
            plgpu.wgmma(acc_w2, h1_s.transpose((1, 0)), dz2_s)
            plgpu.wgmma(acc_wh, h2_s.transpose((1, 0)), dys)
            # The bias gradients, column sums: row k of acc_b gains the sums of the k-th
            # of dz1, dz2, dy (sel_s[k]: ones in row k, zeros elsewhere).
            for k, grad_s in enumerate((dz1_s, dz2_s, dys)):
                plgpu.wgmma(acc_b, sel_s.at[k], grad_s)
            plgpu.wgmma_wait(0)  # chain_s is rewritten by the next block
            return acc_w1, acc_w2, acc_wh, acc_b

        def write(stage, value, part_gmem):
            stage[wg] = value
            plgpu.commit_smem()
            plgpu.copy_smem_to_gmem(stage.at[wg], part_gmem.at[cta * 2 + wg])
            plgpu.wait_smem_to_gmem(0, wait_read_only=True)

        def compute_context(run):
            plgpu.barrier_wait(loaded)

            def scoped(*accs):
                run(accs)
                for acc, part_gmem in zip(accs, parts_gmem):  # in turn through one buffer
                    write(tile_s, acc[...], part_gmem)
            pl.run_scoped(scoped, plgpu.ACC((d, h), f32), plgpu.ACC((h, h), f32),
                          plgpu.ACC((h, nh), f32), plgpu.ACC((64, h), f32))

        pipeline = plgpu.emit_pipeline_warp_specialized(
            body, grid=(lax.div(blocks - 1 - cta, ctas) + 1,), memory_registers=40,
            in_specs=[plgpu.BlockSpec((cta_m, d), lambda i: (cta + i * ctas, 0),
                                      transforms=x_tf),
                      plgpu.BlockSpec((cta_m, nh), lambda i: (cta + i * ctas, 0),
                                      transforms=dy_tf)],
            wg_axis="wg", num_compute_wgs=2, max_concurrent_steps=tiles.stages,
            compute_context=compute_context)
        pipeline(x_gmem, dy_gmem)

    p = 2 * ctas
    out_type = [jax.ShapeDtypeStruct((p, *shapes[k]), f32) for k in ("w1", "w2", "wh")] + [
        jax.ShapeDtypeStruct((p, 64, h), f32)]  # the bias gradients in rows 0, 1, 2
    # sel[k]: a [64, tm] wgmma A operand whose row k is ones (the column sums' selector)
    sel = jnp.zeros((3, 64, tm), bf16).at[jnp.arange(3), jnp.arange(3), :].set(1)
    scratch = [plgpu.SMEM((d, h), bf16, transforms=x_tf), plgpu.SMEM((h,), f32),
               plgpu.SMEM((h, h), bf16, transforms=h_tf), plgpu.SMEM((h,), f32),
               plgpu.SMEM((h, nh), bf16, transforms=dy_tf), plgpu.SMEM((nh,), f32),
               plgpu.SMEM((3, 64, tm), bf16, transforms=_transforms(plgpu, tm, bf16)),
               plgpu.SMEM((2, 4, tm, h), bf16, transforms=h_tf),
               # each warpgroup's partial gradients on their way out, one after the other
               plgpu.SMEM((2, h, h), f32, transforms=_transforms(plgpu, h, f32)),
               plgpu.Barrier(num_arrivals=7)]
    parts = plgpu.kernel(
        kernel, out_type=out_type, scratch_types=scratch, grid=(ctas,), grid_names=("sm",),
        num_threads=3, thread_name="wg",
        compiler_params=plgpu.CompilerParams(
            approx_math=True, lowering_semantics=_semantics(plgpu, tiles.semantics)))(
        x, dy, w1, b1, w2, b2, wh, bh, sel)
    dw1, dw2, dwh, db = (jnp.sum(q, axis=0) for q in parts)  # a fixed order: the same bits
    return dw1, db[0], dw2, db[1], dwh, db[2]


# --- the XLA side, the reference, the case ---------------------------------------------------


@dataclasses.dataclass
class Case:
    rows: int  # a multiple of 256
    d: int
    h: int
    actions: int
    act: str
    xs: list  # inner distinct inputs [rows, d] bf16
    dys: list  # inner distinct heads' gradients [rows, BWD_HEADS] bf16 (zero past A + 1)
    weights: tuple  # w1, b1, w2, b2, wh [h, NH], bh [NH] (the forward's heads: NH = 16)


def make_case(rows: int, d: int, h: int, actions: int, act: str, inner: int) -> Case:
    """Weights as the forward bench's (unit-variance layers), x standard
    normal, dy standard normal in the A + 1 heads' columns."""
    keys = jax.random.split(jax.random.PRNGKey(rows * 5 + d + h), 6 + 2 * inner)
    nh = head_width(actions)
    pad = nh - (actions + 1)
    wh = jnp.pad(weight(keys[4], h, actions + 1), ((0, 0), (0, pad)))
    bh = jnp.pad(bias(keys[5], actions + 1), (0, pad))
    xs = [normal(k, (rows, d)) for k in keys[6:6 + inner]]
    dys = [jnp.pad(normal(k, (rows, actions + 1)), ((0, 0), (0, BWD_HEADS - actions - 1)))
           for k in keys[6 + inner:]]
    weights = (weight(keys[0], d, h), bias(keys[1], h), weight(keys[2], h, h), bias(keys[3], h),
               wh, bh)
    return Case(rows, d, h, actions, act, xs, dys, weights)


def xla_step(x, dy, w1, b1, w2, b2, wh, bh, *, act: str, actions: int):
    """(the heads [M, A + 1] float32, the six gradients) by XLA: the forward as
    `bench_mosaic_mlp.xla_mlp` runs it and its vjp applied to dy, the heads
    unpadded as the model has them (the gradients of wh and bh: A + 1 columns)."""
    a = actions
    ws = (w1, b1, w2, b2, wh[:, :a + 1], bh[:a + 1])
    (logits, value), vjp = jax.vjp(lambda *w: xla_mlp(x, *w, act=act), *ws)
    dy = dy.astype(jnp.float32)
    return jnp.concatenate([logits, value[:, None]], axis=1), vjp((dy[:, :a], dy[:, a]))


def mgpu_step(x, dy, *weights, act: str, fwd_tiles, tiles: BwdTiles, sms: int):
    """(the heads' [M, NH] slab, the six gradients): our forward, then our backward."""
    slab = fused_mlp(x, *weights, act=act, tiles=fwd_tiles, sms=sms)
    return slab, fused_mlp_bwd(x, dy, *weights, act=act, tiles=tiles, sms=sms)


def reference(case: Case) -> tuple[np.ndarray, ...]:
    """The six gradients in float32 by NumPy from the same bf16 inputs, with
    the kernel's bf16 roundings (h1, h2, dz1 and dz2 before the weight
    gradients' matmuls; the bias gradients from float32 dz)."""
    def f32(a):
        return np.asarray(a).astype(np.float32)

    def bf(a):
        return a.astype(ml_dtypes.bfloat16).astype(np.float32)
    a1 = case.actions + 1
    w1, b1, w2, b2, wh, _ = (f32(w) for w in case.weights)  # the heads' bias takes no part
    x, dy, wh = f32(case.xs[0]), f32(case.dys[0])[:, :a1], wh[:, :a1]
    act = {"relu": lambda z: np.maximum(z, 0.0), "tanh": np.tanh}[case.act]
    deriv = {"relu": lambda h: (h > 0).astype(np.float32), "tanh": lambda h: 1.0 - h * h}[case.act]
    h1 = act(x @ w1 + b1)
    h2 = act(bf(h1) @ w2 + b2)
    dz2 = (dy @ wh.T) * deriv(h2)
    dz1 = (bf(dz2) @ w2.T) * deriv(h1)
    return (x.T @ bf(dz1), dz1.sum(0), bf(h1).T @ bf(dz2), dz2.sum(0), bf(h2).T @ dy, dy.sum(0))


def side_fn(side: str, case: Case, sms: int, semantics: str) -> tuple[Callable, str]:
    """(the side as a function of (x, dy, *weights), a label)."""
    if side == "xla_step":
        return functools.partial(xla_step, act=case.act, actions=case.actions), "XLA autodiff"
    nh = case.weights[4].shape[1]
    tiles = bwd_tiles(case.d, case.h, BWD_HEADS, semantics)
    if side == "mgpu_bwd":
        return functools.partial(fused_mlp_bwd, act=case.act, tiles=tiles, sms=sms), (
            tiles.label())
    fwd = mlp_tiles(case.d, case.h, nh, semantics)
    return functools.partial(mgpu_step, act=case.act, fwd_tiles=fwd, tiles=tiles, sms=sms), (
        f"fwd {fwd.label()}, bwd {tiles.label()}")


def cost(side: str, case: Case) -> tuple[float, float]:
    """(FLOPs, bytes that must move) at the model's NH = 16 heads' columns,
    the same for every side: the forward's (not for `mgpu_bwd`) and the
    gradients' matmuls, without the recomputed forward; x and dy read, the
    weights read and their gradients written once."""
    m, d, h, nh = case.rows, case.d, case.h, case.weights[4].shape[1]
    fwd = 2.0 * m * (d * h + h * h + h * nh)
    bwd = 2.0 * m * (d * h + 2 * h * h + 2 * h * nh)
    params = d * h + h * h + h * nh
    moved = 2.0 * m * (d + nh) + 2.0 * params + 4.0 * (params + 2 * h + nh)
    return (bwd if side == "mgpu_bwd" else fwd + bwd), moved


def check_grads(got: tuple, ref: tuple, actions: int) -> tuple[float, dict, str]:
    """(the largest relative error of the six gradients against the reference
    (the heads' first A + 1 columns), each one's, "ok" or which are past bf16
    tolerance or not finite)."""
    errors, bad = {}, []
    for name, g, want in zip(GRADS, got, ref):
        if name in ("wh", "bh"):
            g, want = g[..., :actions + 1], want[..., :actions + 1]
        err, scale, finite = (float(v) for v in layer_bench.differences(g, jnp.asarray(want)))
        errors[name] = err / (scale or 1.0) if finite else float("inf")
        if not errors[name] <= TOL["bf16"]:
            bad.append(f"d{name} {errors[name]:.2e}")
    check = "ok" if not bad else f"failed: past {TOL['bf16']:.1e} of the reference: " + (
        ", ".join(bad))
    return max(errors.values()), errors, check


def run_side(side: str, case: Case, ref: tuple, args: argparse.Namespace, gpu: bool,
             sms: int, semantics: str) -> dict[str, Any]:
    fn, label = side_fn(side, case, sms, semantics)
    out: dict[str, Any] = {"tiles": label}
    operands = (case.xs[0], case.dys[0], *case.weights)
    if side.startswith("mgpu") and not gpu:
        layer_bench.lowered_only(fn, operands, label)
    step = jax.jit(fn)
    # `inner` steps on distinct x and dy, one set of weights, every output kept.
    program = jax.jit(lambda xs, dys, ws: tuple(step(x, dy, *ws) for x, dy in zip(xs, dys)))
    t = time.perf_counter()
    compiled = program.lower(case.xs, case.dys, case.weights).compile()
    out["compile_s"] = time.perf_counter() - t
    first = compiled(case.xs, case.dys, case.weights)[0]
    grads = first if side == "mgpu_bwd" else first[1]
    # Every gradient's error is kept, and a side whose values are off is still timed
    # (main lists it among the failures).
    out["max_rel_err"], out["grad_errors"], out["check"] = check_grads(grads, ref, case.actions)
    out.update(layer_bench.timed(compiled, (case.xs, case.dys, case.weights), len(case.xs),
                                 args, gpu))
    us = out["us"]
    flops, moved = cost(side, case)
    out.update(tflops=flops / us / 1e6,
               peak_fraction=flops / (us * 1e-6) / args.peak if args.peak else None,
               memory_fraction=1e6 * moved / args.bandwidth / us if args.bandwidth else None)
    return out


def measure_side(side: str, case: Case, ref: tuple, args: argparse.Namespace, gpu: bool,
                 sms: int) -> dict[str, Any]:
    """run_side under each lowering semantics in turn until one works (XLA:
    the first only); a Skip ends the tries."""
    t = time.perf_counter()
    r: dict[str, Any] = {}
    tried = args.semantics.split(",")
    for sem in tried[:1] if side == "xla_step" else tried:
        try:
            r = run_side(side, case, ref, args, gpu, sms, sem)
            r["semantics"] = sem
            break
        except Skip as e:
            r = {"status": str(e), "semantics": sem}
            break
        except Exception as e:  # noqa: BLE001  (a side that fails is a finding)
            r = {"status": f"error ({sem}): {layer_bench.first_lines(e)}",
                 "failed_attempts": r.get("failed_attempts", []) + [layer_bench.first_lines(e)]}
            if args.traceback:
                import traceback
                traceback.print_exc()
    r["side_s"] = time.perf_counter() - t
    return r


def main() -> int:
    ap = layer_bench.run_parser(__doc__, "220,000 rows", "steps", 150.0)
    # Lane semantics cannot lower this kernel (jax 0.10.2-0.11.2: 64-byte bias copies, the
    # loop carry's layouts), so warpgroup alone unless asked.
    ap.set_defaults(semantics="warpgroup")
    ap.add_argument("--actions", type=int, default=5, help="policy logits A (heads: A + 1)")
    ap.add_argument("--acts", default="tanh,relu", help="of tanh, relu")
    ap.add_argument("--sides", default=",".join(SIDES), help="a subset of " + ", ".join(SIDES))
    ap.add_argument("--out", default="experiments/results/bench_mosaic_mlp_bwd_h200.json")
    args = ap.parse_args()
    start = time.perf_counter()
    rows_list = tuple(int(r) for r in args.rows.split(",")) if args.rows else (
        QUICK_ROWS if args.quick else ROWS)
    sides = [s for s in args.sides.split(",") if s in SIDES]
    gpu, sms, meta = layer_bench.start_run(args, sides, f", A = {args.actions}")
    results: list[dict[str, Any]] = []
    failures: list[str] = []
    data = {"meta": meta, "config": {
        "rows": list(rows_list), "shapes_d_h": [list(s) for s in SHAPES],
        "actions": args.actions, "head_width": head_width(args.actions), "acts": args.acts,
        "sides": sides, "semantics": args.semantics, "repeats": args.repeats,
        "tolerance": TOL["bf16"], "grads": list(GRADS)}, "results": results,
        "failures": failures}
    for act, rows_asked, rows, (d, h) in layer_bench.shape_grid(args.acts, rows_list, SHAPES):
        head = f"{act} rows {rows_asked} (run as {rows}) D={d} H={h} A={args.actions}"
        entry: dict[str, Any] = {"act": act, "rows_asked": rows_asked, "rows": rows, "d": d,
                                 "h": h, "actions": args.actions, "sides": {}}
        results.append(entry)
        if layer_bench.past_budget(entry, head, start, args.budget_s):
            continue
        nh = head_width(args.actions)
        inner = layer_bench.inner_for(rows, d, nh, args.inner_bytes) if gpu else 1
        case = make_case(rows, d, h, args.actions, act, inner)
        ref = reference(case)
        entry["inner"] = inner
        print(f"{head}, {inner} steps a program:", flush=True)
        for side in sides:
            r = measure_side(side, case, ref, args, gpu, sms)
            xla_us = entry["sides"].get("xla_step", {}).get("us")
            if xla_us and "us" in r and side == "mgpu_step":
                r["speed_vs_xla"] = xla_us / r["us"]
            if "us" not in r and not r["status"].startswith("skipped"):
                failures.append(f"{head} {side}: {r['status']}")
            elif r.get("check", "ok") != "ok":
                failures.append(f"{head} {side}: {r['check']}")
            entry["sides"][side] = r
            shown = xla_us if side == "mgpu_step" else None
            print(layer_bench.describe(side, r, shown), flush=True)
        del case
        data["elapsed_s"] = time.perf_counter() - start
        write_result(args.out, data)  # after every shape: a cut-off run keeps it
    return layer_bench.finish(args.out, data, start)


if __name__ == "__main__":
    sys.exit(main())
