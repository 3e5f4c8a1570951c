"""Where a PPO minibatch kernel's time goes (`jaxwarp.train.ppo_mosaic`): the
actor tower's kernel at CartPole's GPU size (ten seeds x 16,384 rows, as
`bench_mosaic_ppo_grad.py`), GPU kernel time (CUPTI) of the whole kernel and of
variants with parts of its block body taken out, and the whole kernel at half
the rows (so the per-block and the fixed cost separate). The variants are
copies of `ppo_mosaic._body` with pieces removed (``whole`` is the product's
body), patched in while the kernel is traced: timings only, their outputs are
not gradients.

    python experiments/tools/ppo_mosaic_parts.py --out $OUT/ppo_mosaic_parts_h200.json

Without a GPU every variant is lowered for CUDA (with a jax-cuda plugin) and
not timed.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

EXPERIMENTS = str(Path(__file__).resolve().parents[1])
if EXPERIMENTS not in sys.path:  # the benches beside this folder
    sys.path.insert(0, EXPERIMENTS)

import bench_mosaic_layer as layer_bench  # noqa: E402
from bench_mosaic_ppo_grad import make_case, packed  # noqa: E402

from jaxwarp.benchmark import write_result  # noqa: E402
from jaxwarp.models import mlp_mosaic  # noqa: E402
from jaxwarp.train import ppo_mosaic as pm  # noqa: E402

# variant -> the parts it takes out of the block body
VARIANTS = {
    "whole": set(),
    "no_stats": {"stats"},             # the loss's terms not written into dy's columns
    "no_loss": {"loss"},               # dy = y: no softmax, ratio, clip or terms
    "no_weight_grads": {"wgrad"},      # the six gradient wgmmas (chain still stored)
    "no_backward": {"loss", "chain", "wgrad"},  # the forward, dy = y stored, one wgmma
    "forward_only": {"loss", "chain", "wgrad", "store"},
    "pipeline_only": {"all"},          # the loads, weights in, partials out
    "no_bias_grads": {"bias"},         # the three selector wgmmas (the bias gradients)
    # db1's selector wgmma only: what a ones column in x (db1 from the dW1 wgmma) would save
    "no_db1_wgmma": {"bias1"},
    # not a removal: h1 and h2 held in float32 through the loss and stored with the
    # chain, as the first kernels did (they spilled registers; before 0e5fd2a the
    # product was this and the stores as computed were the variant `h_early`)
    "h_late": {"h_late"},
}


def body(kind: str, actions: int, act: str, refs: tuple, wg: Any, drop: set) -> Any:
    """`ppo_mosaic._body` with the parts in `drop` taken out (module docstring)."""
    plgpu = mlp_mosaic._plgpu()
    w1_s, b1_s, w2_s, b2_s, wh_s, bh_s, sel_s, chain_s = refs
    f32, bf16 = jnp.float32, jnp.bfloat16

    matmul, dense, iota = pm.matmul, pm.dense, pm.column_iota

    def run(idx, x_smem, aux_smem, carry):
        if "all" in drop:
            return carry
        rows = pl.ds(wg * pm.TM, pm.TM)
        xs, a = x_smem.at[rows], aux_smem.at[rows][...]
        slots = [chain_s.at[wg, i] for i in range(5)]  # h1, h2, dz1, dz2, dy
        early = "h_late" not in drop
        h1 = pm.activation(dense(xs, w1_s, b1_s), act)
        if early:
            slots[0][...] = h1.astype(bf16)
        h2 = pm.activation(dense(h1.astype(bf16), w2_s, b2_s), act)
        if early:
            slots[1][...] = h2.astype(bf16)
        y = dense(h2.astype(bf16), wh_s, bh_s)
        col, acol = iota(y.shape), iota(a.shape)
        if "loss" in drop:
            dy = (y * pm._rows(pm._aux_col(a, acol, 3), y.shape)).astype(bf16)  # y w
        else:
            dy = (pm.actor_dy(y, a, col, acol, actions) if kind == "actor"
                  else pm.critic_dy(y, a, col, acol)).astype(bf16)
        acc_w1, acc_w2, acc_wh, acc_b = carry
        if "chain" in drop:
            if "store" not in drop:
                slots[4][...] = dy
                plgpu.commit_smem()
                plgpu.wgmma(acc_b, sel_s.at[0], slots[4])
                plgpu.wgmma_wait(0)
            else:
                plgpu.wgmma(acc_wh, dy, wh_s)  # keeps the forward's values alive
                plgpu.wgmma_wait(0)
            return carry
        if early:
            h1, h2 = (slots[i][...].astype(f32) for i in (0, 1))
        dz2 = pm.derivative(h2, matmul(dy, wh_s.transpose((1, 0))), act).astype(bf16)
        dz1 = pm.derivative(h1, matmul(dz2, w2_s.transpose((1, 0))), act).astype(bf16)
        values = (h1.astype(bf16), h2.astype(bf16), dz1, dz2, dy)
        for ref, value in list(zip(slots, values))[2 if early else 0:]:
            ref[...] = value
        plgpu.commit_smem()
        if "wgrad" in drop:
            plgpu.wgmma(acc_b, sel_s.at[0], slots[4])  # one, so the stores are read
        else:
            for acc, lhs, rhs in ((acc_w1, xs, slots[2]), (acc_w2, slots[0], slots[3]),
                                  (acc_wh, slots[1], slots[4])):
                plgpu.wgmma(acc, lhs.transpose((1, 0)), rhs)
            for k, grad_s in enumerate(slots[2:] if "bias" not in drop else []):
                if not (k == 0 and "bias1" in drop):
                    plgpu.wgmma(acc_b, sel_s.at[k], grad_s)
        plgpu.wgmma_wait(0)
        return carry
    return run


def stats_free(dy, col, terms):
    return dy


def timed_variant(name: str, rows: int, args: argparse.Namespace, gpu: bool, sms: int
                  ) -> dict[str, Any]:
    drop = VARIANTS[name]
    _, params, batches = make_case(4, 2, rows, args.seeds, args.inner if gpu else 1)
    ops = [packed(params, m) for m in batches]
    grid = pm.grid_for(args.seeds, rows, sms)
    run = functools.partial(pm.tower_grad, kind="actor", actions=2, act="tanh", grid=grid)
    weights = ops[0][1][0]
    program = jax.jit(lambda ws, rs: [run(r[0], r[1], ws) for r in rs])
    operands = (weights, [r for r, _ in ops])
    saved = pm._body, pm._stats_into
    pm._body = functools.partial(body, drop=drop)
    if "stats" in drop:
        pm._stats_into = stats_free
    try:
        if not gpu:
            layer_bench.lower_for_cuda(program, operands)
            return {"status": "lowered for cuda (no GPU: not timed)"}
        compiled = program.lower(*operands).compile()
    finally:
        pm._body, pm._stats_into = saved
    out = layer_bench.timed(compiled, operands, len(batches), args, gpu)
    blocks = -(-grid.blocks // grid.per_member)
    out.update(grid=str(grid), blocks_per_cta=blocks)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--rows", type=int, default=16_384)
    ap.add_argument("--inner", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-cupti", action="store_true")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", default="experiments/results/ppo_mosaic_parts_h200.json")
    args = ap.parse_args()
    gpu, sms, meta = layer_bench.start_run(args, ["actor kernel variants"])
    meta["command"] = "python experiments/tools/ppo_mosaic_parts.py " + " ".join(sys.argv[1:])
    results: dict[str, Any] = {}
    plan = [(v, args.rows) for v in args.variants.split(",")] + [("whole", args.rows // 2)]
    for name, rows in plan:
        t = time.perf_counter()
        try:
            r = timed_variant(name, rows, args, gpu, sms)
        except Exception as e:  # noqa: BLE001  (a variant that fails is a finding)
            r = {"status": f"error: {layer_bench.first_lines(e)}"}
        r["s"] = time.perf_counter() - t
        key = name if rows == args.rows else f"{name}@{rows}"
        results[key] = r
        print(f"  {key:18s} {r.get('us', r.get('status'))}", flush=True)
    write_result(args.out, {"meta": meta, "config": {"seeds": args.seeds, "rows": args.rows,
                                                    "inner": args.inner}, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
