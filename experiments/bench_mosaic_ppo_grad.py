"""A PPO minibatch's loss and gradient as one Pallas Mosaic GPU kernel per tower, against XLA.

Issue 51's target at GPU sizes (time to threshold 1.5x the peers for CartPole
and MPE) is bound by the learner, which is the peers' own XLA program: for
the PureJaxRL-style model (separate actor and critic, 64-64 tanh, float32)
each minibatch step is dozens of small fusions over [rows, 64] activations
(the forward, the log-softmax, the losses' reductions, their gradients, the
backward), ten seeds at a time. ``bench_mosaic_mlp_bwd.py`` showed one
tower's forward and backward fused at D = H = 64 (weights resident, weight
gradients accumulated in registers); the learner-level trial
(``bench_mosaic_learner.py``) left the loss to XLA and gained nothing, because
the loss's own small kernels were most of the time. Here the loss is in the
kernel too: what one minibatch step of the trainer computes before Optax,
``jax.value_and_grad`` of ``losses.policy_loss`` (PPO: clipped surrogate,
entropy bonus, clipped value loss, advantages normalised per minibatch) of the
``mlp`` model, for every seed at once, as two kernel calls (the actor's tower,
then the critic's: their losses share no parameter) and a few XLA fusions
around them (the advantages' normalisation and the operands' packing before;
the sums of the blocks' partial gradients after).

Per CTA (persistent, seeds in contiguous ranges of CTAs, each CTA loading its
seed's weights into shared memory once), per row block of 2 x 64 rows (a
warpgroup each), all in registers and shared memory:

* the tower's forward (x [rows, 64] bf16, the observations zero-padded),
  ``h1 = tanh(x W1 + b1)``, ``h2 = tanh(h1 W2 + b2)``, the head ``y = h2 Wh +
  bh`` (float32 accumulators, bf16 operands);
* the loss's gradient at the head, row by row from the row's inputs (an f32
  [rows, 8] block in the same pipeline: action, behaviour log-probability and
  normalised advantage for the actor; behaviour value and target for the
  critic): actor ``dy = g_lp (onehot(a) - p) - g_ent p (log p + H)`` with
  ``g_lp = -A ratio [not clipped] / N``, ``g_ent = -ent_coef / N``; critic
  ``dy = vf_coef (v - target) w / N`` with w as jax's gradient of the max of
  the two squared errors (ties split evenly, as ``jnp.maximum``'s);
* the chain back (``dz2 = dy Wh^T tanh'``, ``dz1 = dz2 W2^T tanh'``) and the
  weight gradients ``x^T dz1``, ``h1^T dz2``, ``h2^T dy`` as wgmmas into
  float32 accumulators held across the CTA's blocks; the bias gradients as
  column sums (wgmmas against a ones-row selector, as in
  ``bench_mosaic_mlp_bwd.py``);
* the loss's terms per row (surrogate, entropy, k3 KL, clipped or not; value
  loss) ride in dy's spare columns 32-47 (as a bf16 high part and low part,
  about 2^-17 relative), so the heads' bias-gradient column sums carry their
  sums out; the heads' padding weights are zero, so those columns touch no
  gradient of a real parameter.

Sides (each checked against XLA at ``precision=highest``; all return the
trainer's ((loss, metrics), grads) with grads shaped as the model's params):

* ``xla``: what the trainer runs, ``jax.vmap`` over seeds of
  ``jax.value_and_grad`` of ``policy_loss`` of ``MLPActorCritic`` (float32:
  XLA's default TF32 dots on the GPU), compiled with the options a ten-seed
  time-to-return run gets (``compiler_options(False, seeds)``);
* ``xla_bf16``: the same model with bfloat16 matmuls (XLA's layers), the
  kernels' precision on XLA;
* ``emulated``: the kernels' arithmetic in plain jax (`tower_grad_jnp`: the
  same bf16 roundings and row-wise loss gradient), a check of their maths
  that runs anywhere;
* ``mgpu``: ours (bfloat16 operands, float32 accumulation);
* ``mgpu_kernels``: the two tower kernels alone on operands packed outside
  the timed program (timing only: what the XLA fusions around them cost is
  ``mgpu`` less this).

    python experiments/bench_mosaic_ppo_grad.py                   # CartPole and MPE, GPU size
    python experiments/bench_mosaic_ppo_grad.py --cases cartpole

Without a GPU the XLA sides are checked on the CPU and the kernel side is
lowered for CUDA (``jax.export``) where a jax-cuda plugin is installed, else
reported ``skipped: no GPU``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # the benches beside this file (they put the checkout on the path)
    sys.path.insert(0, HERE)

import bench_mosaic_layer as layer_bench
from bench_mosaic_layer import Skip, _plgpu, _transforms
from bench_mosaic_mlp import SMEM_LIMIT, SMEM_SLACK, kb

from jaxwarp.benchmark import write_result
from jaxwarp.models.mlp import MLPActorCritic
from jaxwarp.train import losses
from jaxwarp.train.compile import compiler_options

W = 64  # hidden width, padded observations and padded heads: one [64, 64] tile each
TM = 64  # rows a compute warpgroup takes per block (a wgmma's M)
AUX = 8  # the rows' loss inputs: float32 columns (32-byte rows for TMA)
STAT_COL = 32  # dy's columns from here carry the loss's terms (high parts, then low at +8)
HYPER = {"clip_eps": 0.2, "vf_coef": 0.5, "ent_coef": 0.01}
# case -> observation features, actions, rows per minibatch, seeds (GPU size of
# bench_time_to_return: CartPole 2,048 envs x 32 steps / 4 minibatches; MPE 1,024 envs x
# 32 steps x 3 agents / 4 minibatches; ten seeds, as the time-to-return runs).
CASES = {"cartpole": (4, 2, 16_384, 10), "mpe": (18, 5, 24_576, 10)}
SIDES = ("xla", "xla_bf16", "emulated", "mgpu", "mgpu_kernels")
METRICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac")
ACTOR_STATS = ("policy_loss", "entropy", "approx_kl", "clip_frac")  # the actor's dy columns


def smem_bytes(stages: int) -> int:
    """The kernel's shared memory: three [64, 64] bf16 weights and their biases,
    the pipeline's x and aux blocks, per warpgroup h1, h2, dz1, dz2 and dy
    (bf16), three row selectors, a [64, 64] float32 tile per warpgroup for the
    partials' way out."""
    weights = 3 * kb(2 * W * W) + 3 * kb(4 * W)
    blocks = stages * (kb(2 * 2 * TM * W) + kb(4 * 2 * TM * AUX))
    return weights + blocks + 2 * 5 * kb(2 * TM * W) + 3 * kb(2 * 64 * TM) + 2 * kb(4 * W * W)


def stages_that_fit() -> int:
    for stages in (3, 2, 1):
        if smem_bytes(stages) + SMEM_SLACK <= SMEM_LIMIT:
            return stages
    raise Skip(f"skipped: needs {smem_bytes(1) / 1024:.0f} KB of shared memory")


# --- the loss's gradient at the head, on registers ------------------------------------------


def _rows(r: jax.Array, shape: tuple[int, int]) -> jax.Array:
    """[64] -> [64, n]: the row's value in every column."""
    return lax.broadcast_in_dim(r, shape, (0,))


def _aux_col(a: jax.Array, acol: jax.Array, k: int) -> jax.Array:
    """Column k of the aux block a f32[64, AUX] as a row vector [64]."""
    return jnp.sum(jnp.where(acol == k, a, 0.0), axis=1)


def _stats_into(dy: jax.Array, col: jax.Array, terms: list[jax.Array]) -> jax.Array:
    """dy with the row terms in columns STAT_COL + j (bfloat16's high part of
    term j) and STAT_COL + 8 + j (the rest), so that dy's bf16 column sums
    carry the terms' sums at about 2^-17 relative."""
    for j, t in enumerate(terms):
        hi = t.astype(jnp.bfloat16).astype(jnp.float32)
        dy = jnp.where(col == STAT_COL + j, _rows(hi, dy.shape), dy)
        dy = jnp.where(col == STAT_COL + 8 + j, _rows(t - hi, dy.shape), dy)
    return dy


def actor_dy(y: jax.Array, a: jax.Array, col: jax.Array, acol: jax.Array, actions: int,
             n: int) -> jax.Array:
    """The gradient of the PPO loss (mean over n rows) at the logits y
    f32[64, W] (columns < actions), aux a: action, behaviour log-prob,
    normalised advantage; the surrogate, entropy, k3 KL and clip indicator
    per row ride in the stats columns."""
    clip, ent_coef = HYPER["clip_eps"], HYPER["ent_coef"]
    shape = y.shape
    inside = col < actions
    m = jnp.max(jnp.where(inside, y, -jnp.inf), axis=1)
    e = jnp.where(inside, jnp.exp(y - _rows(m, shape)), 0.0)
    s = jnp.sum(e, axis=1)
    logp = y - _rows(m + jnp.log(s), shape)
    p = e / _rows(s, shape)
    ent = -jnp.sum(jnp.where(inside, p * logp, 0.0), axis=1)
    action = _aux_col(a, acol, 0).astype(jnp.int32)
    taken = col == _rows(action, shape)
    lp = jnp.sum(jnp.where(taken, logp, 0.0), axis=1)
    log_ratio = lp - _aux_col(a, acol, 1)
    adv = _aux_col(a, acol, 2)
    ratio = jnp.exp(log_ratio)
    u, c = ratio * adv, jnp.clip(ratio, 1.0 - clip, 1.0 + clip) * adv
    # jnp.minimum's gradient: u's where u < c; where u == c (ratio inside the clip range,
    # where clip's derivative is 1) half of each, the same; where c < u none.
    g_lp = jnp.where(u <= c, -adv * ratio / n, 0.0)
    g_ent = -ent_coef / n
    dy = jnp.where(inside, _rows(g_lp, shape) * (jnp.where(taken, 1.0, 0.0) - p)
                   - g_ent * p * (logp + _rows(ent, shape)), 0.0)
    terms = [-jnp.minimum(u, c), ent, (ratio - 1.0) - log_ratio,
             jnp.where(jnp.abs(ratio - 1.0) > clip, 1.0, 0.0)]
    return _stats_into(dy, col, terms)


def critic_dy(y: jax.Array, a: jax.Array, col: jax.Array, acol: jax.Array, n: int
              ) -> jax.Array:
    """The gradient of vf_coef x the clipped value loss (mean over n rows) at
    the value, y's column 0; aux a: behaviour value, target. The row's value
    loss rides in the first stats column."""
    clip, vf_coef = HYPER["clip_eps"], HYPER["vf_coef"]
    v = jnp.sum(jnp.where(col == 0, y, 0.0), axis=1)
    old, target = _aux_col(a, acol, 0), _aux_col(a, acol, 1)
    vc = old + jnp.clip(v - old, -clip, clip)
    l1, l2 = jnp.square(v - target), jnp.square(vc - target)
    # jnp.maximum's gradient: l1's where l1 > l2, l2's where l2 > l1 (zero outside the clip
    # range, where vc does not move with v), half of each on a tie (inside the range vc == v).
    within = jnp.abs(v - old) < clip
    w = jnp.where(within | (l1 > l2), 1.0, jnp.where(l1 == l2, 0.5, 0.0))
    dv = vf_coef * (v - target) * w / n
    dy = jnp.where(col == 0, _rows(dv, y.shape), 0.0)
    return _stats_into(dy, col, [0.5 * jnp.maximum(l1, l2)])


# --- the kernel ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Grid:
    seeds: int
    rows: int  # per seed, a multiple of 2 TM
    per_seed: int  # CTAs a seed
    stages: int

    @property
    def blocks(self) -> int:  # row blocks of 2 TM a seed
        return self.rows // (2 * TM)

    @property
    def ctas(self) -> int:
        return self.seeds * self.per_seed


def grid_for(seeds: int, rows: int, sms: int) -> Grid:
    if rows % (2 * TM):
        raise Skip(f"rows {rows} not a multiple of {2 * TM}")
    per = max(1, min(sms // seeds, rows // (2 * TM)))
    return Grid(seeds, rows, per, stages_that_fit())


def tower_grad(x, aux, w1, b1, w2, b2, wh, bh, *, kind: str, actions: int, grid: Grid
               ) -> tuple[jax.Array, ...]:
    """Partial sums (float32, [seeds, 2 per_seed, ...]) of one tower's
    gradients (dw1 [W, W], dw2, dwh, and [64, W] whose rows 0, 1, 2 are db1,
    db2, dbh, dbh's columns from STAT_COL the loss's terms' sums) for x
    bf16[seeds x rows, W], aux f32[seeds x rows, AUX], weights bf16[seeds, W,
    W], biases f32[seeds, W]; kind "actor" or "critic"."""
    pl, plgpu = _plgpu()
    bf16, f32 = jnp.bfloat16, jnp.float32
    tf, f_tf = _transforms(plgpu, W, bf16), _transforms(plgpu, W, f32)
    vec = plgpu.Layout.WGMMA.reduce(0)
    n, per, blocks = grid.rows, grid.per_seed, grid.blocks

    def iota(shape):
        return plgpu.broadcasted_iota(jnp.int32, shape, 1, layout=plgpu.Layout.WGMMA)

    def kernel(x_gmem, aux_gmem, *refs):
        consts_gmem, parts_gmem = refs[:7], refs[7:11]
        w1_s, b1_s, w2_s, b2_s, wh_s, bh_s, sel_s, chain_s, tile_s, loaded = refs[11:]
        cta, wg = lax.axis_index("sm"), lax.axis_index("wg")
        seed, j = lax.div(cta, per), lax.rem(cta, per)

        @pl.when(wg == 0)  # this seed's weights and biases and the selectors, once per CTA
        def _load_weights():
            for src, dst in zip(consts_gmem[:6], (w1_s, b1_s, w2_s, b2_s, wh_s, bh_s)):
                plgpu.copy_gmem_to_smem(src.at[seed], dst, loaded)
            plgpu.copy_gmem_to_smem(consts_gmem[6], sel_s, loaded)

        def matmul(a, b_s):
            def product(acc_ref):
                plgpu.wgmma(acc_ref, a, b_s)
                return acc_ref[...]
            return pl.run_scoped(product, plgpu.ACC((TM, W), f32))

        def dense(a, w_s, b_s):
            b = layer_bench._load_vector(plgpu, b_s, vec)
            return matmul(a, w_s) + lax.broadcast_in_dim(b, (TM, W), (1,))

        def body(idx, x_smem, aux_smem, carry):
            acc_w1, acc_w2, acc_wh, acc_b = carry
            rows = pl.ds(wg * TM, TM)
            xs = x_smem.at[rows]
            a = aux_smem.at[rows][...]
            h1 = jnp.tanh(dense(xs, w1_s, b1_s))
            h1b = h1.astype(bf16)
            h2 = jnp.tanh(dense(h1b, w2_s, b2_s))
            h2b = h2.astype(bf16)
            y = dense(h2b, wh_s, bh_s)
            col, acol = iota(y.shape), iota(a.shape)
            dy = (actor_dy(y, a, col, acol, actions, n) if kind == "actor"
                  else critic_dy(y, a, col, acol, n)).astype(bf16)
            dz2 = (matmul(dy, wh_s.transpose((1, 0))) * (1.0 - h2 * h2)).astype(bf16)
            dz1 = (matmul(dz2, w2_s.transpose((1, 0))) * (1.0 - h1 * h1)).astype(bf16)
            h1_s, h2_s, dz1_s, dz2_s, dy_s = (chain_s.at[wg, i] for i in range(5))
            h1_s[...] = h1b
            h2_s[...] = h2b
            dz1_s[...] = dz1
            dz2_s[...] = dz2
            dy_s[...] = dy
            plgpu.commit_smem()  # the stores above, before the wgmmas read them
            plgpu.wgmma(acc_w1, xs.transpose((1, 0)), dz1_s)
            plgpu.wgmma(acc_w2, h1_s.transpose((1, 0)), dz2_s)
            plgpu.wgmma(acc_wh, h2_s.transpose((1, 0)), dy_s)
            for k, grad_s in enumerate((dz1_s, dz2_s, dy_s)):  # row k: column sums
                plgpu.wgmma(acc_b, sel_s.at[k], grad_s)
            plgpu.wgmma_wait(0)  # chain_s is rewritten by the next block
            return acc_w1, acc_w2, acc_wh, acc_b

        def compute_context(run):
            plgpu.barrier_wait(loaded)

            def scoped(*accs):
                run(accs)
                for acc, part_gmem in zip(accs, parts_gmem):  # in turn through one buffer
                    tile_s[wg] = acc[...]
                    plgpu.commit_smem()
                    plgpu.copy_smem_to_gmem(tile_s.at[wg], part_gmem.at[cta * 2 + wg])
                    plgpu.wait_smem_to_gmem(0, wait_read_only=True)
            pl.run_scoped(scoped, *(plgpu.ACC((W, W), f32) for _ in range(4)))

        def block(i):
            return (seed * blocks + j + i * per, 0)

        pipeline = plgpu.emit_pipeline_warp_specialized(
            body, grid=(lax.div(blocks - 1 - j, per) + 1,), memory_registers=40,
            in_specs=[plgpu.BlockSpec((2 * TM, W), block, transforms=tf),
                      plgpu.BlockSpec((2 * TM, AUX), block,
                                      transforms=_transforms(plgpu, AUX, f32))],
            wg_axis="wg", num_compute_wgs=2, max_concurrent_steps=grid.stages,
            compute_context=compute_context)
        pipeline(x_gmem, aux_gmem)

    p = 2 * grid.ctas
    out_type = [jax.ShapeDtypeStruct((p, W, W), f32) for _ in range(4)]
    sel = jnp.zeros((3, 64, TM), bf16).at[jnp.arange(3), jnp.arange(3), :].set(1)
    scratch = [plgpu.SMEM((W, W), bf16, transforms=tf), plgpu.SMEM((W,), f32),
               plgpu.SMEM((W, W), bf16, transforms=tf), plgpu.SMEM((W,), f32),
               plgpu.SMEM((W, W), bf16, transforms=tf), plgpu.SMEM((W,), f32),
               plgpu.SMEM((3, 64, TM), bf16, transforms=_transforms(plgpu, TM, bf16)),
               plgpu.SMEM((2, 5, TM, W), bf16, transforms=tf),
               plgpu.SMEM((2, W, W), f32, transforms=f_tf),
               plgpu.Barrier(num_arrivals=7)]
    parts = plgpu.kernel(
        kernel, out_type=out_type, scratch_types=scratch, grid=(grid.ctas,), grid_names=("sm",),
        num_threads=3, thread_name="wg",
        compiler_params=plgpu.CompilerParams(
            approx_math=True, lowering_semantics=plgpu.LoweringSemantics.Warpgroup))(
        x, aux, w1, b1, w2, b2, wh, bh, sel)
    return tuple(q.reshape(grid.seeds, 2 * per, W, W) for q in parts)


def tower_grad_jnp(x, aux, w1, b1, w2, b2, wh, bh, *, kind: str, actions: int, grid: Grid
                   ) -> tuple[jax.Array, ...]:
    """`tower_grad`'s arithmetic in plain jax (the same bf16 roundings and
    row-wise loss gradient, one partial a seed): the ``emulated`` side, which
    checks the kernel's maths on any backend."""
    s, bf16, f32 = grid.seeds, jnp.bfloat16, jnp.float32
    x = x.reshape(s, -1, W)
    aux = aux.reshape(s, -1, AUX)

    def mm(a, b):
        return jnp.einsum("srk,skn->srn", a.astype(bf16), b.astype(bf16),
                          preferred_element_type=f32)

    def mt(a, b):  # a^T b over the rows
        return jnp.einsum("srk,srn->skn", a.astype(bf16), b.astype(bf16),
                          preferred_element_type=f32)
    h1 = jnp.tanh(mm(x, w1) + b1[:, None])
    h2 = jnp.tanh(mm(h1, w2) + b2[:, None])
    y = mm(h2, wh) + bh[:, None]
    col = lax.broadcasted_iota(jnp.int32, y.shape, 2)
    acol = lax.broadcasted_iota(jnp.int32, aux.shape, 2)

    def rowwise(y, a, col, acol):
        return (actor_dy(y, a, col, acol, actions, grid.rows) if kind == "actor"
                else critic_dy(y, a, col, acol, grid.rows))
    dy = jax.vmap(rowwise)(y, aux, col, acol).astype(bf16)
    dz2 = (mm(dy, jnp.swapaxes(wh, 1, 2)) * (1.0 - h2 * h2)).astype(bf16)
    dz1 = (mm(dz2, jnp.swapaxes(w2, 1, 2)) * (1.0 - h1 * h1)).astype(bf16)
    db = jnp.zeros((s, 64, W), f32)
    for k, g in enumerate((dz1, dz2, dy)):
        db = db.at[:, k].set(jnp.sum(g.astype(f32), axis=1))
    return tuple(q[:, None] for q in (mt(x, dz1), mt(h1, dz2), mt(h2, dy), db))


# --- the sides -------------------------------------------------------------------------------


def _pad(a: jax.Array, shape: tuple[int, ...], dtype: Any) -> jax.Array:
    return jnp.pad(a, [(0, s - d) for s, d in zip(shape, a.shape)]).astype(dtype)


def _tower_operands(p: dict, first: str, second: str, head: str) -> list[jax.Array]:
    """[seeds, ...] params of one tower -> w1, b1, w2, b2, wh, bh padded to W."""
    out = []
    for name in (first, second, head):
        k, b = p[name]["kernel"], p[name]["bias"]
        out += [_pad(k, (k.shape[0], W, W), jnp.bfloat16), _pad(b, (b.shape[0], W), jnp.float32)]
    return out


def _tower_grads(parts: tuple, p: dict, names: tuple[str, str, str]) -> tuple[dict, jax.Array]:
    """The partials summed (over the CTAs in order), cut to the params' shapes,
    and the sums of the loss's terms (high + low parts) [seeds, 8]."""
    dw1, dw2, dwh, db = (jnp.sum(q, axis=1) for q in parts)
    grads = {}
    for name, dw, row in zip(names, (dw1, dw2, dwh), range(3)):
        k_shape, b_shape = p[name]["kernel"].shape[1:], p[name]["bias"].shape[1:]
        grads[name] = {"kernel": dw[:, :k_shape[0], :k_shape[1]],
                       "bias": db[:, row, :b_shape[0]]}
    sums = db[:, 2, STAT_COL:STAT_COL + 8] + db[:, 2, STAT_COL + 8:STAT_COL + 16]
    return grads, sums


A_NAMES, C_NAMES = ("Dense_0", "Dense_1", "Dense_4"), ("Dense_2", "Dense_3", "Dense_5")


def pack(params: dict, mb: losses.Batch) -> tuple[tuple, tuple]:
    """The kernels' operands: (x bf16[seeds x rows, W], the actor's aux, the
    critic's aux) and (the actor's weights, the critic's), advantages
    normalised per seed's minibatch."""
    p = params["params"]
    s, n = mb.advantage.shape
    adv = mb.advantage
    adv = (adv - adv.mean(1, keepdims=True)) / (adv.std(1, keepdims=True) + 1e-8)
    x = _pad(mb.obs, (s, n, W), jnp.bfloat16).reshape(s * n, W)
    zeros = jnp.zeros_like(adv)
    aux_a = jnp.stack([mb.actions[..., 0].astype(jnp.float32), mb.log_prob, adv] + [zeros] * 5,
                      -1).reshape(s * n, AUX)
    aux_c = jnp.stack([mb.value, mb.target] + [zeros] * 6, -1).reshape(s * n, AUX)
    return (x, aux_a, aux_c), (_tower_operands(p, *A_NAMES), _tower_operands(p, *C_NAMES))


def kernels_only(weights: tuple, rows: tuple, *, actions: int, grid: Grid) -> tuple:
    """The two tower kernels alone on packed operands (`pack`), their partials
    unsummed: the ``mgpu_kernels`` side, timing only."""
    x, aux_a, aux_c = rows
    run = functools.partial(tower_grad, actions=actions, grid=grid)
    return (run(x, aux_a, *weights[0], kind="actor"), run(x, aux_c, *weights[1], kind="critic"))


def mgpu_side(params: dict, mb: losses.Batch, *, actions: int, grid: Grid,
              tower: Any = tower_grad):
    """((loss, metrics), grads) for every seed, as `xla_side`, by the kernels.
    mb: fields [seeds, rows, ...] (obs f32[seeds, rows, D], actions
    i32[seeds, rows, 1])."""
    p = params["params"]
    n = mb.advantage.shape[1]
    (x, aux_a, aux_c), (wa, wc) = pack(params, mb)
    run = functools.partial(tower, actions=actions, grid=grid)
    ga, sa = _tower_grads(run(x, aux_a, *wa, kind="actor"), p, A_NAMES)
    gc, sc = _tower_grads(run(x, aux_c, *wc, kind="critic"), p, C_NAMES)
    terms = {k: sa[:, i] / n for i, k in enumerate(ACTOR_STATS)} | {"value_loss": sc[:, 0] / n}
    loss = (terms["policy_loss"] + HYPER["vf_coef"] * terms["value_loss"]
            - HYPER["ent_coef"] * terms["entropy"])
    return (loss, {k: terms[k] for k in METRICS}), {"params": ga | gc}


def trainer_grad(params: dict, mb: losses.Batch, *, actions: int) -> tuple:
    """`mgpu_side` for one run's minibatch (mb: obs f32[rows, D], actions
    i32[rows, 1], the rest f32[rows]), in the shape of the trainer's grad_fn:
    ((loss, metrics), grads). Under ``jax.vmap`` over runs (seeds) one call
    takes every run (`jax.custom_batching.custom_vmap`): the kernels hold the
    seeds in their grid. Used by ``experiments/patches/ppo_grad_kernel.patch``."""
    rows = mb.advantage.shape[0]
    sms = layer_bench.num_sms()

    def run(seeds, p, b):
        return mgpu_side(p, b, actions=actions, grid=grid_for(seeds, rows, sms))

    @jax.custom_batching.custom_vmap
    def one(p, b):
        return jax.tree.map(lambda a: a[0], run(1, *jax.tree.map(lambda a: a[None], (p, b))))

    @one.def_vmap
    def every(axis_size, in_batched, p, b):
        p, b = jax.tree.map(
            lambda a, batched: a if batched else jnp.broadcast_to(a, (axis_size, *a.shape)),
            (p, b), tuple(in_batched))
        out = run(axis_size, p, b)
        return out, jax.tree.map(lambda _: True, out)

    return one(params, mb)


def _loss(model: MLPActorCritic, p: dict, mb: losses.Batch):
    logits, value = model.apply(p, mb.obs)
    lp, ent = losses.head_stats(logits, mb.actions, model.action_dims)
    return losses.policy_loss(lp, ent, value, mb, algorithm="ppo", normalize_advantages=True,
                              **HYPER)


def xla_side(params: dict, mb: losses.Batch, *, model: MLPActorCritic):
    """The trainer's minibatch step before Optax, every seed: vmap of
    value_and_grad of policy_loss -> ((loss [seeds], metrics), grads)."""
    grad = jax.value_and_grad(functools.partial(_loss, model), has_aux=True)
    return jax.vmap(grad)(params, mb)


# --- the case, the check, the timing ---------------------------------------------------------


def make_case(obs_dim: int, actions: int, rows: int, seeds: int, inner: int, key: int = 0
              ) -> tuple[MLPActorCritic, dict, list[losses.Batch]]:
    """The model, params [seeds, ...] (orthogonal init, then perturbed so the
    heads are not near-uniform) and `inner` distinct minibatches [seeds, rows,
    ...]: behaviour log-probs and values from the current params plus noise,
    so that some ratios and values fall outside the clip range."""
    model = MLPActorCritic(action_dims=(actions,), hidden_sizes=(W, W), activation="tanh")
    keys = jax.random.split(jax.random.PRNGKey(key), seeds + 1)
    params = jax.vmap(lambda k: model.init(k, jnp.zeros((1, obs_dim))))(keys[:seeds])
    params = jax.tree.map(
        lambda a, k: a + 0.1 * jax.random.normal(k, a.shape),
        params, jax.tree.unflatten(jax.tree.structure(params),
                                   list(jax.random.split(keys[-1], len(jax.tree.leaves(params))))))
    batches = []
    for i in range(inner):
        k = jax.random.split(jax.random.PRNGKey(1000 + i), 6)
        obs = jax.random.normal(k[0], (seeds, rows, obs_dim))
        act = jax.random.randint(k[1], (seeds, rows, 1), 0, actions)
        logits, value = jax.vmap(model.apply)(params, obs)
        lp, _ = losses.head_stats(logits, act, (actions,))
        batches.append(losses.Batch(
            obs=obs, actions=act, log_prob=lp + 0.15 * jax.random.normal(k[2], lp.shape),
            value=value + 0.3 * jax.random.normal(k[3], value.shape),
            advantage=jax.random.normal(k[4], value.shape) + 0.3,
            target=value + jax.random.normal(k[5], value.shape)))
    return model, params, batches


def errors(got: Any, want: Any) -> dict[str, float]:
    """Per leaf of ((loss, metrics), grads): the largest |error| over the
    leaf's largest |value| (over every seed)."""
    out = {}
    flat_got = jax.tree_util.tree_flatten_with_path(got)[0]
    for (path, g), w in zip(flat_got, jax.tree.leaves(want)):
        scale = float(jnp.max(jnp.abs(w)))
        err = float(jnp.max(jnp.abs(g.astype(jnp.float32) - w)))
        out[jax.tree_util.keystr(path)] = err / (scale or 1.0)
    return out


def side_fn(side: str, model: MLPActorCritic, actions: int, seeds: int, rows: int, sms: int):
    if side == "xla":
        return functools.partial(xla_side, model=model)
    if side == "xla_bf16":
        return functools.partial(xla_side, model=model.clone(dtype=jnp.bfloat16))
    if side == "emulated":
        return functools.partial(mgpu_side, actions=actions, tower=tower_grad_jnp,
                                 grid=Grid(seeds, rows, 1, 1))
    return functools.partial(mgpu_side, actions=actions, grid=grid_for(seeds, rows, sms))


def run_side(side: str, case: tuple, ref: Any, args: argparse.Namespace, gpu: bool,
             sms: int) -> dict[str, Any]:
    model, params, batches = case
    mb = batches[0]
    seeds, rows, _ = mb.obs.shape
    out: dict[str, Any] = {}
    if side == "mgpu_kernels":
        grid = grid_for(seeds, rows, sms)
        fn = functools.partial(kernels_only, actions=model.action_dims[0], grid=grid)
        packed = [pack(params, m) for m in batches]
        if not gpu:
            _lowered_only(fn, (packed[0][1], packed[0][0]))
        step = jax.jit(fn)
        program = jax.jit(lambda ws, rs: tuple(step(ws, r) for r in rs))
        operands = (packed[0][1], [r for r, _ in packed])
        compiled = program.lower(*operands).compile()
        out["check"] = "timing only"
        out.update(layer_bench.timed(compiled, operands, len(batches), args, gpu))
        return out
    fn = side_fn(side, model, model.action_dims[0], seeds, rows, sms)
    if side == "mgpu":
        out["grid"] = dataclasses.asdict(grid_for(seeds, rows, sms))
        if not gpu:
            _lowered_only(fn, (params, mb))
    options = compiler_options(False, members=seeds) if gpu else None
    step = jax.jit(fn)
    program = jax.jit(lambda p, mbs: tuple(step(p, m) for m in mbs), compiler_options=options)
    t = time.perf_counter()
    compiled = program.lower(params, batches).compile()
    out["compile_s"] = time.perf_counter() - t
    first = compiled(params, batches)[0]
    out["errors"] = errors(first, ref)
    out["max_rel_err"] = max(out["errors"].values())
    out.update(layer_bench.timed(compiled, (params, batches), len(batches), args, gpu))
    return out


def _lowered_only(fn, operands) -> None:
    """`layer_bench.lowered_only` for pytree operands."""
    import importlib
    try:
        importlib.import_module("jax._src.lib.mosaic_gpu")
    except Exception:  # noqa: BLE001
        raise Skip("skipped: no GPU (Mosaic GPU bindings absent; lowering not checked)")
    shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), operands)
    jax.export.export(jax.jit(fn), platforms=["cuda"])(*shapes)
    raise Skip("skipped: no GPU (lowered for cuda: ok)")


def main() -> int:
    ap = layer_bench.run_parser(__doc__, "CartPole only", "minibatches", 300.0)
    ap.add_argument("--cases", default=",".join(CASES), help="of " + ", ".join(CASES))
    ap.add_argument("--sides", default=",".join(SIDES), help="a subset of " + ", ".join(SIDES))
    ap.add_argument("--seeds", type=int, default=None, help="seeds (default: the case's)")
    ap.add_argument("--inner", type=int, default=8, help="minibatches a timed program")
    ap.add_argument("--out", default="experiments/results/bench_mosaic_ppo_grad_h200.json")
    args = ap.parse_args()
    start = time.perf_counter()
    sides = [s for s in args.sides.split(",") if s in SIDES]
    gpu, sms, meta = layer_bench.start_run(args, sides)
    results: list[dict[str, Any]] = []
    failures: list[str] = []
    data = {"meta": meta, "config": {"cases": {}, "sides": sides, "hyper": HYPER,
                                     "inner": args.inner}, "results": results,
            "failures": failures}
    for name in (["cartpole"] if args.quick else args.cases.split(",")):
        obs_dim, actions, rows, seeds = CASES[name]
        rows, seeds = int(args.rows or rows), args.seeds or seeds
        data["config"]["cases"][name] = {"obs_dim": obs_dim, "actions": actions, "rows": rows,
                                         "seeds": seeds}
        case = make_case(obs_dim, actions, rows, seeds, args.inner if gpu else 1)
        with jax.default_matmul_precision("highest"):
            ref = jax.jit(functools.partial(xla_side, model=case[0]))(case[1], case[2][0])
        entry: dict[str, Any] = {"case": name, "sides": {}}
        results.append(entry)
        print(f"{name}: {seeds} seeds x {rows} rows, {actions} actions, obs {obs_dim}",
              flush=True)
        for side in sides:
            t = time.perf_counter()
            try:
                r = run_side(side, case, ref, args, gpu, sms)
            except Skip as e:
                r = {"status": str(e)}
            except Exception as e:  # noqa: BLE001  (a side that fails is a finding)
                r = {"status": f"error: {layer_bench.first_lines(e)}"}
                failures.append(f"{name} {side}: {r['status']}")
                if args.traceback:
                    import traceback
                    traceback.print_exc()
            r["side_s"] = time.perf_counter() - t
            xla_us = entry["sides"].get("xla", {}).get("us")
            if xla_us and "us" in r:
                r["speed_vs_xla"] = xla_us / r["us"]
            entry["sides"][side] = r
            shown = {k: r[k] for k in ("us", "us_from", "speed_vs_xla", "max_rel_err", "status")
                     if k in r}
            print(f"  {side:9s} {shown}", flush=True)
        data["elapsed_s"] = time.perf_counter() - start
        write_result(args.out, data)
    return layer_bench.finish(args.out, data, start)


if __name__ == "__main__":
    sys.exit(main())
