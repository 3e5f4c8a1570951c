"""The learner's forward (`mlp_kernel.fused_head_stats`'s) as ONE Mosaic GPU kernel, against Triton.

Issue 51's step after the rollout's forward (`jaxwarp/models/mlp_mosaic.py`):
the A2C/PPO learner runs the `mlp` forward under differentiation, where it
must also write every hidden layer's activation h (the Triton backward and
the weight gradients read them) and, with the actions, each head's
log-softmax, entropy and the actions' log-probability
(`mlp_kernel._head_stats_tile`'s slab). The rollout kernel keeps every weight
resident in shared memory (Tag's 192 KB of 227), which leaves no room to
stage a [64, 256] activation for a TMA store; this kernel stores each h from
registers straight to global memory instead (no staging), takes the actions
as a float32 [rows, 16] block through the same pipeline as x, and computes
the heads' statistics in registers with row reductions over column masks
(a register array's columns cannot be sliced at a head's 21-column edges).

Sides, at Tag's shape (71 features, shared 256-256 ReLU, heads (21, 21)):

* ``triton``: the shipped `mlp_kernel.forward(lay, xp, ws, save=True,
  actions=a)` (the slab, h1, h2);
* ``mosaic``: this kernel (the same three outputs), checked against triton's
  within bfloat16 tolerance (slab columns to out_cols + 1 + heads, and h);
* ``--variants``: the kernel without a part, to time it (``no_h``,
  ``no_stats``, ``layers_only``), or storing h another way (``h_overlap``:
  while the next layer's wgmma runs; ``h_tma``/``h_tma2``: through shared
  memory by TMA, which leaves room for one block in flight only; ``wg2_*``:
  two compute warpgroups; ``fast_*``: the statistics with one exp over the
  heads' columns). `VARIANTS` lists them; each that computes every output is
  checked against triton's.

GPU kernel time per call by CUPTI (`bench_mosaic_layer.timed`), µs and the
speed against Triton. Without a GPU the kernel is lowered for CUDA where a
jax-cuda plugin is installed (layout inference, the shared-memory check), and
nothing is timed.

    python experiments/bench_mosaic_learner_fwd.py                 # 1,000,000 and 100,000 rows
    python experiments/bench_mosaic_learner_fwd.py --rows 200000
    python experiments/bench_mosaic_learner_fwd.py --variants mosaic,no_h,h_tma2_overlap
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # bench_mosaic_layer beside this file (it puts the checkout on the path)
    sys.path.insert(0, HERE)

from bench_mosaic_layer import Skip, lowered_only, num_sms, timed

from jaxwarp.benchmark import run_meta, write_result
from jaxwarp.models import mlp_kernel
from jaxwarp.models import mlp_mosaic as mm

TAG = {"in_dim": 71, "widths": (256, 256), "heads": (21, 21), "activation": "relu"}
ACT_COLS = 8  # the actions' block: K float32 columns padded to 32 bytes (a WGMMA tile's width)


def layout(in_dim: int, widths: tuple[int, ...], heads: tuple[int, ...], activation: str
           ) -> mlp_kernel.Layout:
    return mlp_kernel.Layout(in_dim, widths, sum(heads) + 1, 1, activation, "bfloat16", heads)


def plan_for(lay: mlp_kernel.Layout) -> mm.Plan:
    """One compute warpgroup, two blocks in flight, 16-column stores: the
    rollout kernel's plan at Tag's shape, with the actions' block counted in
    the x blocks' shared memory. nh covers the statistics' columns."""
    nh = mm._round16(lay.out_cols + 1 + len(lay.heads))
    plan = mm.Plan(mm._round16(lay.in_dim), nh, 1, 2, 16)
    dims = (plan.in_pad,) + lay.widths
    need = mm.smem_bytes(dims, nh, 1, 2, 16) + 2 * mm._kb(mm.TILE_M * ACT_COLS * 4)
    if need + mm.SMEM_SLACK > mm.SMEM_LIMIT:
        raise Skip(f"skipped: needs {need / 1024:.0f} KB of shared memory")
    return plan


def _stats(y: jax.Array, a: jax.Array, lay: mlp_kernel.Layout, nh: int, iota: Any
           ) -> jax.Array:
    """`mlp_kernel._head_stats_tile` on registers: y f32[rows, nh] (the
    logits, the value at column A), a f32[rows, ACT_COLS] (the actions) -> the
    slab's nh columns (each head's log-softmax, the value, the entropies, the
    log-prob). iota(shape): int32 column indices in the registers' layout."""
    shape = y.shape
    col, acol = iota(shape), iota(a.shape)
    v, k = lay.out_cols - 1, len(lay.heads)

    def rows(r: jax.Array) -> jax.Array:  # [64] -> [64, nh], the row's value in every column
        return lax.broadcast_in_dim(r, shape, (0,))
    slab = jnp.where(col == v, y, 0.0)
    lp = jnp.zeros(shape[:1], jnp.float32)
    c0 = 0
    for h, n in enumerate(lay.heads):
        inside = (col >= c0) & (col < c0 + n)
        m = jnp.max(jnp.where(inside, y, -jnp.inf), axis=1)
        e = jnp.where(inside, jnp.exp(y - rows(m)), 0.0)
        s = jnp.sum(e, axis=1)
        logp = y - rows(m + jnp.log(s))
        ent = -jnp.sum(jnp.where(inside, e / rows(s) * logp, 0.0), axis=1)
        ah = jnp.sum(jnp.where(acol == h, a, 0.0), axis=1).astype(jnp.int32)
        lp = lp + jnp.sum(jnp.where(col == rows(ah) + c0, logp, 0.0), axis=1)
        slab = jnp.where(inside, logp, jnp.where(col == v + 1 + h, rows(ent), slab))
        c0 += n
    return jnp.where(col == v + 1 + k, rows(lp), slab)


def _stats_fast(y: jax.Array, a: jax.Array, lay: mlp_kernel.Layout, nh: int, iota: Any
                ) -> jax.Array:
    """`_stats` with one exp, one division and one log-prob reduction over the
    nh columns (the heads' row maxima and sums broadcast back to their
    columns), not one of each per head: K row maxima, K sums, K entropies,
    one log-prob sum."""
    shape = y.shape
    col, acol = iota(shape), iota(a.shape)
    v, k = lay.out_cols - 1, len(lay.heads)

    def rows(r: jax.Array) -> jax.Array:
        return lax.broadcast_in_dim(r, shape, (0,))
    edges = list(itertools.accumulate(lay.heads, initial=0))
    inside = [(col >= c0) & (col < c1) for c0, c1 in itertools.pairwise(edges)]
    maxima = [jnp.max(jnp.where(m, y, -jnp.inf), axis=1) for m in inside]
    shift = y  # outside the heads exp(0): nothing overflows there
    for m, mx in zip(inside, maxima):
        shift = jnp.where(m, rows(mx), shift)
    e = jnp.exp(y - shift)
    sums = [jnp.sum(jnp.where(m, e, 0.0), axis=1) for m in inside]
    lse, total = shift, jnp.ones(shape, jnp.float32)
    for m, mx, sm in zip(inside, maxima, sums):
        lse = jnp.where(m, rows(mx + jnp.log(sm)), lse)
        total = jnp.where(m, rows(sm), total)
    logp = y - lse
    plogp = e / total * logp
    ents = [-jnp.sum(jnp.where(m, plogp, 0.0), axis=1) for m in inside]
    taken = col < 0
    for h, c0 in enumerate(edges[:-1]):
        ah = jnp.sum(jnp.where(acol == h, a, 0.0), axis=1).astype(jnp.int32)
        taken = taken | (col == rows(ah) + c0)
    lp = jnp.sum(jnp.where(taken, logp, 0.0), axis=1)
    slab = jnp.where(col < edges[-1], logp, jnp.where(col == v, y, 0.0))
    for h, ent in enumerate(ents):
        slab = jnp.where(col == v + 1 + h, rows(ent), slab)
    return jnp.where(col == v + 1 + k, rows(lp), slab)


H_COLS = 64  # "tma": columns of h a shared-memory staging tile holds (128-byte rows)


def _dense(a: Any, w_s: Any, b_s: Any, n: int, during: Any = None) -> jax.Array:
    """`mm._dense`, calling during() after the wgmma is issued and before its
    accumulator is read (work that overlaps the tensor cores')."""
    plgpu = mm._plgpu()

    def product(acc_ref: Any) -> jax.Array:
        plgpu.wgmma(acc_ref, a, w_s)
        if during is not None:
            during()
        return acc_ref[...]
    z = pl.run_scoped(product, plgpu.ACC((mm.TILE_M, n), jnp.float32))
    bias = mm.load_vector(plgpu, b_s, plgpu.Layout.WGMMA.reduce(0))
    return z + lax.broadcast_in_dim(bias, (mm.TILE_M, n), (1,))


def _kernel(lay: mlp_kernel.Layout, plan: mm.Plan, blocks: int, ctas: int, x_tf: tuple,
            a_tf: tuple, parts: frozenset = frozenset({"h", "stats"})) -> Any:
    """parts: what the kernel does besides the layers ("h": store each h,
    "stats": the heads' statistics); the variants leave one out to time it."""
    plgpu = mm._plgpu()
    tm, oc, nh, out_pad = mm.TILE_M, plan.out_cols, plan.nh, lay.out_pad
    n_layers = len(lay.widths)
    k = 2 * n_layers + 2
    act = (lambda z: jnp.maximum(z, 0.0)) if lay.activation == "relu" else jnp.tanh

    def kernel(x_gmem: Any, a_gmem: Any, *refs: Any) -> None:
        params_gmem, out_gmem = refs[:k], refs[k]
        h_gmem = refs[k + 1:k + 1 + n_layers]
        params_s = refs[k + 1 + n_layers:2 * k + 1 + n_layers]
        rest = list(refs[2 * k + 1 + n_layers:])
        out_s = None if "direct" in parts else rest.pop(0)
        loaded = rest.pop(0)
        h_s = rest.pop(0) if parts & {"tma", "tma2"} else None
        cta, wg = lax.axis_index("sm"), lax.axis_index("wg")

        @pl.when(wg == 0)
        def _load_weights() -> None:
            for src, dst in zip(params_gmem, params_s):
                plgpu.copy_gmem_to_smem(src, dst, loaded)

        def store_h(i: int, h: jax.Array, row: Any) -> None:
            """h_i to global memory: from registers (no staging); with "tma"
            through one [64, H_COLS] shared-memory tile, H_COLS columns a copy;
            with "tma2" through two [64, H_COLS // 2] tiles in turn, a copy in
            flight while the next tile is written."""
            if "tma" in parts:
                for c in range(0, lay.widths[i], H_COLS):
                    plgpu.wait_smem_to_gmem(0, wait_read_only=True)
                    h_s[...] = h[:, c:c + H_COLS]
                    plgpu.commit_smem()
                    plgpu.copy_smem_to_gmem(h_s, h_gmem[i].at[pl.ds(row, tm), pl.ds(c, H_COLS)])
            elif "tma2" in parts:
                half = H_COLS // 2
                for j, c in enumerate(range(0, lay.widths[i], half)):
                    plgpu.wait_smem_to_gmem(1, wait_read_only=True)
                    h_s[j % 2] = h[:, c:c + half]
                    plgpu.commit_smem()
                    plgpu.copy_smem_to_gmem(h_s.at[j % 2],
                                            h_gmem[i].at[pl.ds(row, tm), pl.ds(c, half)])
            else:
                h_gmem[i][pl.ds(row, tm), :] = h

        def body(idx: Any, x_smem: Any, a_smem: Any, carry: Any) -> Any:
            row = (cta + idx[0] * ctas) * plan.block_rows + wg * tm
            h = x_smem.at[pl.ds(wg * tm, tm)]
            for i, w in enumerate(lay.widths):
                # "overlap": h_(i-1) stored while layer i's wgmma (reading it) runs
                during = (functools.partial(store_h, i - 1, h, row)
                          if "h" in parts and "overlap" in parts and i else None)
                h = act(_dense(h, params_s[2 * i], params_s[2 * i + 1], w, during)).astype(
                    jnp.bfloat16)
                if "h" in parts and "overlap" not in parts:
                    store_h(i, h, row)
            during = (functools.partial(store_h, n_layers - 1, h, row)
                      if "h" in parts and "overlap" in parts else None)
            y = _dense(h, params_s[k - 2], params_s[k - 1], nh, during)
            a = a_smem.at[pl.ds(wg * tm, tm)][...]
            if "stats" in parts:
                stats = _stats_fast if "fast" in parts else _stats
                y = stats(y, a, lay, nh, lambda shape: plgpu.broadcasted_iota(
                    jnp.int32, shape, 1, layout=plgpu.Layout.WGMMA))
            else:  # keep the actions' load live
                y = y + lax.broadcast_in_dim(jnp.sum(a, axis=1), y.shape, (0,))
            if "direct" in parts:  # the slab from registers too
                out_gmem[pl.ds(row, tm), pl.ds(0, nh)] = y
                if out_pad > nh:
                    out_gmem[pl.ds(row, tm), pl.ds(nh, out_pad - nh)] = jnp.zeros(
                        (tm, out_pad - nh), jnp.float32)
                return carry
            for c, part in mm.store_plan(nh, oc, out_pad):
                tile = (y if part == "all" else y[:, c:c + oc] if part == "slice"
                        else jnp.zeros((tm, oc), jnp.float32))
                plgpu.wait_smem_to_gmem(0, wait_read_only=True)
                out_s[wg] = tile
                plgpu.commit_smem()
                plgpu.copy_smem_to_gmem(out_s.at[wg], out_gmem.at[pl.ds(row, tm), pl.ds(c, oc)])
            return carry

        def compute_context(run: Any) -> None:
            plgpu.barrier_wait(loaded)
            run(())

        pipeline = plgpu.emit_pipeline_warp_specialized(
            body, grid=(lax.div(blocks - 1 - cta, ctas) + 1,), memory_registers=40,
            in_specs=[plgpu.BlockSpec((plan.block_rows, plan.in_pad),
                                      lambda i: (cta + i * ctas, 0), transforms=x_tf),
                      plgpu.BlockSpec((plan.block_rows, ACT_COLS),
                                      lambda i: (cta + i * ctas, 0), transforms=a_tf)],
            wg_axis="wg", num_compute_wgs=plan.wgs, max_concurrent_steps=plan.stages,
            compute_context=compute_context)
        pipeline(x_gmem, a_gmem)
        plgpu.wait_smem_to_gmem(0, wait_read_only=True)
    return kernel


@functools.cache
def _call(lay: mlp_kernel.Layout, plan: mm.Plan, m: int, sms: int,
          parts: frozenset = frozenset({"h", "stats"})) -> Any:
    plgpu = mm._plgpu()
    bf16, f32 = jnp.bfloat16, jnp.float32
    blocks = m // plan.block_rows
    ctas = min(sms, blocks)
    x_tf = mm.smem_transforms(plgpu, plan.in_pad, bf16)
    a_tf = mm.smem_transforms(plgpu, ACT_COLS, f32)
    scratch = mm.scratch_types(lay, plan)  # the rollout kernel's shared memory
    if "direct" in parts:  # no staging of the slab
        del scratch[-2]
    if "tma2" in parts:  # two half-width tiles (one compute warpgroup)
        assert plan.wgs == 1, plan
        scratch.append(plgpu.SMEM((2, mm.TILE_M, H_COLS // 2), bf16,
                                  transforms=mm.smem_transforms(plgpu, H_COLS // 2, bf16)))
    if "tma" in parts:  # h's staging tile (one compute warpgroup)
        assert plan.wgs == 1, plan
        scratch.append(plgpu.SMEM((mm.TILE_M, H_COLS), bf16,
                                  transforms=mm.smem_transforms(plgpu, H_COLS, bf16)))
    outs = (jax.ShapeDtypeStruct((m, lay.out_pad), f32),
            *(jax.ShapeDtypeStruct((m, w), bf16) for w in lay.widths))
    return plgpu.kernel(
        _kernel(lay, plan, blocks, ctas, x_tf, a_tf, parts), out_type=outs, scratch_types=scratch,
        grid=(ctas,), grid_names=("sm",), num_threads=plan.wgs + 1, thread_name="wg",
        compiler_params=plgpu.CompilerParams(
            approx_math=True, lowering_semantics=plgpu.LoweringSemantics.Warpgroup))


# The variants: the kernel whole, and without one of its parts (to time that part).
VARIANTS = {"mosaic": frozenset({"h", "stats"}), "no_h": frozenset({"stats"}),
            "no_stats": frozenset({"h"}), "layers_only": frozenset(),
            "fast_stats": frozenset({"h", "stats", "fast"}),
            "fast_no_h": frozenset({"stats", "fast"}),
            "h_overlap": frozenset({"h", "stats", "overlap"}),
            "h_tma": frozenset({"h", "stats", "tma"}),
            "h_tma_overlap": frozenset({"h", "stats", "tma", "overlap"}),
            "h_tma2": frozenset({"h", "stats", "tma2"}),
            "h_tma2_overlap": frozenset({"h", "stats", "tma2", "overlap"}),
            "h_s1": frozenset({"h", "stats", "s1"}), "no_h_s1": frozenset({"stats", "s1"}),
            "direct": frozenset({"h", "stats", "direct"}),
            "wg2_direct": frozenset({"h", "stats", "wg2", "direct"}),
            "wg2_direct_no_h": frozenset({"stats", "wg2", "direct"}),
            "wg2_direct_overlap": frozenset({"h", "stats", "wg2", "direct", "overlap"})}


def mosaic(lay: mlp_kernel.Layout, plan: mm.Plan, xp: jax.Array, acts: jax.Array,
           ws: tuple[jax.Array, ...], sms: int, variant: str = "mosaic"
           ) -> tuple[jax.Array, ...]:
    """(slab f32[m, out_pad], h per layer bf16[m, w]) of xp bf16[m, in_pad]
    (m a multiple of plan.block_rows) and the actions f32[m, ACT_COLS]."""
    parts = VARIANTS[variant]
    if parts & {"tma", "tma2", "s1"}:  # room for h's staging: one block in flight
        plan = dataclasses.replace(plan, stages=1)
    if "wg2" in parts:  # two compute warpgroups (one's stores beside the other's wgmma)
        plan = dataclasses.replace(plan, wgs=2, stages=1)
    return _call(lay, plan, xp.shape[0], sms, parts)(xp, acts, *mm._params(lay, plan, ws))


def triton(lay: mlp_kernel.Layout, xp: jax.Array, actions: jax.Array,
           ws: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
    return tuple(mlp_kernel.forward(lay, xp, ws, True, False, actions))


def operands(lay: mlp_kernel.Layout, plan: mm.Plan, rows: int, seed: int = 0
             ) -> tuple[jax.Array, ...]:
    """(xp bf16[rows, in_pad], actions i32[rows, K], the same as f32[rows,
    ACT_COLS], pack's weights) with unit-variance layers and logits of a few units."""
    ks = iter(jax.random.split(jax.random.PRNGKey(seed), 16))
    dims = (lay.in_dim,) + lay.widths
    torso = [[(jax.random.normal(next(ks), (k, n)) * np.sqrt(2.0 / k),
               0.1 * jax.random.normal(next(ks), (n,))) for k, n in itertools.pairwise(dims)]]
    w, a = lay.widths[-1], lay.out_cols - 1
    ws = mlp_kernel.pack(lay, torso, (jax.random.normal(next(ks), (w, a)) / np.sqrt(w),
                                      jnp.zeros(a)),
                         (jax.random.normal(next(ks), (w, 1)) / np.sqrt(w), jnp.zeros(1)))
    x = jax.random.normal(next(ks), (rows, lay.in_dim)).astype(jnp.bfloat16)
    xp = jnp.pad(x, ((0, 0), (0, plan.in_pad - lay.in_dim)))
    acts = jnp.stack([jax.random.randint(next(ks), (rows,), 0, n) for n in lay.heads], 1)
    acts_f = jnp.pad(acts.astype(jnp.float32), ((0, 0), (0, ACT_COLS - len(lay.heads))))
    return xp, acts, acts_f, ws


def stats_error(lay: mlp_kernel.Layout, plan: mm.Plan, rows: int = 512, stats: Any = _stats
                ) -> float:
    """`_stats` in plain jnp (the CPU) against the Triton kernel's own
    statistics (`mlp_kernel._head_stats_tile`) on random logits and actions:
    the largest |difference| over the largest |value| in the slab's columns."""
    ky, ka = jax.random.split(jax.random.PRNGKey(1))
    y = 3.0 * jax.random.normal(ky, (rows, plan.nh))
    acts = jnp.stack([jax.random.randint(jax.random.fold_in(ka, h), (rows,), 0, n)
                      for h, n in enumerate(lay.heads)], 1)
    a = jnp.pad(acts.astype(jnp.float32), ((0, 0), (0, ACT_COLS - len(lay.heads))))
    got = stats(y, a, lay, plan.nh, lambda shape: lax.broadcasted_iota(jnp.int32, shape, 1))
    want = mlp_kernel._head_stats_tile(jnp.pad(y, ((0, 0), (0, lay.out_pad - plan.nh))),
                                       acts, lay)[:, :plan.nh]
    cols = lay.out_cols + 1 + len(lay.heads)
    return float(jnp.abs(got - want)[:, :cols].max() / jnp.abs(want[:, :cols]).max())


def check(got: tuple, want: tuple, lay: mlp_kernel.Layout) -> dict[str, float]:
    """Largest |difference| over the largest |value| of each output (the
    slab's meaningful columns, each h)."""
    cols = lay.out_cols + 1 + len(lay.heads)
    out = {}
    for name, g, w in zip(["slab"] + [f"h{i + 1}" for i in range(len(lay.widths))], got, want):
        g, w = np.asarray(g, np.float32), np.asarray(w, np.float32)
        if name == "slab":
            g, w = g[:, :cols], w[:, :cols]
        out[name] = float(np.abs(g - w).max() / (np.abs(w).max() or 1.0))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="1000000,100000")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--variants", default="mosaic",
                    help=f"comma-separated, of {', '.join(VARIANTS)} (the kernel without a part)")
    ap.add_argument("--no-cupti", action="store_true")
    ap.add_argument("--out", default="experiments/results/bench_mosaic_learner_fwd_h200.json")
    args = ap.parse_args()
    gpu = jax.default_backend() == "gpu"
    lay = layout(**TAG)
    plan = plan_for(lay)
    sms = num_sms()
    data: dict[str, Any] = {"meta": run_meta(gpu=gpu, sms=sms), "config": {**TAG,
                            "plan": str(plan)}, "results": []}
    for rows in (int(r) for r in args.rows.split(",")):
        m = -(-rows // (2 * mm.TILE_M)) * 2 * mm.TILE_M  # whole blocks of every variant
        xp, acts, acts_f, ws = operands(lay, plan, m)
        fn = jax.jit(lambda x, a, *w: mosaic(lay, plan, x, a, w, sms))
        tri = jax.jit(lambda x, a, *w: triton(lay, x, a, w))
        ops_m, ops_t = (xp, acts_f, *ws), (xp, acts, *ws)
        if not gpu:
            for f in (_stats, _stats_fast):
                print(f"{f.__name__}'s maths against mlp_kernel._head_stats_tile: "
                      f"{stats_error(lay, plan, stats=f):.1e} (largest relative difference)",
                      flush=True)
            for v in args.variants.split(","):
                try:
                    lowered_only(jax.jit(lambda x, a, *w, v=v: mosaic(lay, plan, x, a, w, sms, v)),
                                 ops_m, f"{m} rows, {v}")
                except Skip as e:
                    print(f"{m} rows: {v} {e}", flush=True)
                    data["results"].append({"rows": m, v: str(e)})
            continue
        entry: dict[str, Any] = {"rows": m}
        sides = [("triton", tri, ops_t)] + [
            (v, fn if v == "mosaic" else jax.jit(
                lambda x, a, *w, v=v: mosaic(lay, plan, x, a, w, sms, v)), ops_m)
            for v in args.variants.split(",")]
        want = tri(*ops_t)
        # against Triton: each variant that computes every output
        entry["errors"] = {n: check(f(*ops), want, lay) for n, f, ops in sides[1:]
                           if {"h", "stats"} <= VARIANTS[n]}
        for name, f, ops in sides:
            t = time.perf_counter()
            compiled = jax.jit(f).lower(*ops).compile()
            entry[name] = {"compile_s": time.perf_counter() - t,
                           **timed(compiled, ops, 1, args, gpu)}
        if "mosaic" in entry:
            entry["speed_vs_triton"] = entry["triton"]["us"] / entry["mosaic"]["us"]
        print(f"{m} rows: " + ", ".join(f"{n} {entry[n]['us']:.1f} us" for n, _, _ in sides)
              + f"; errors {entry['errors']}", flush=True)
        data["results"].append(entry)
        write_result(args.out, data)
    if not gpu:
        print("no GPU: lowering only; nothing written", flush=True)
        return 0
    write_result(args.out, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
