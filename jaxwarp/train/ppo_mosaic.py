"""A PPO minibatch's loss and gradient as one Pallas Mosaic GPU kernel per tower.

For a feed-forward `mlp` group with separate actor and critic towers of two
hidden layers of at most 64 units, bfloat16 matmuls and one action head (the
PureJaxRL-style model of the CartPole and MPE configs, in bfloat16), the
learner's minibatch step before Optax, ``jax.value_and_grad`` of
`losses.policy_loss`, is two kernel calls (the actor's tower, then the
critic's: their losses share no parameter) and a few XLA fusions around them
(the advantages' normalisation and the operands' packing before, the sums of
the blocks' partial gradients after). Every other group, and every group
where `why_not` gives a reason, keeps XLA's autodiff.

A kernel call is persistent: the members (seeds, a sweep's runs) of a
``jax.vmap`` take contiguous ranges of CTAs, each CTA loading its member's
weights into shared memory once; a memory warpgroup streams row blocks of
2 x 64 rows by TMA (the observations, zero-padded to 64 columns, and an f32
[rows, 8] block of each row's loss inputs); each of two compute warpgroups
takes 64 rows through, all in registers and shared memory:

* the tower's forward, ``h1 = act(x W1 + b1)``, ``h2 = act(h1 W2 + b2)``,
  ``y = h2 Wh + bh`` (bf16 operands, float32 accumulators; widths and the
  head zero-padded to 64, which changes no value);
* the loss's gradient at the head, row by row (`actor_dy`, `critic_dy`);
* the chain back and the weight gradients ``x^T dz1``, ``h1^T dz2``,
  ``h2^T dy`` as wgmmas into float32 accumulators held across the CTA's
  blocks; the bias gradients as column sums (wgmmas against a selector whose
  row k is ones);
* the loss's terms per row ride in dy's columns from `STAT_COL` (bf16 high
  and low parts, about 2^-17 relative), where the head's weights are zero
  padding, so the head's bias-gradient sums carry their sums out.

Each warpgroup writes its partial gradients once; XLA sums them in a fixed
order, so the same inputs give the same bits. h1 and h2 go to shared memory
as soon as they exist and the chain's derivatives read their bf16 copies:
float32 copies held through the loss beside the four accumulators spilled
registers and serialised the wgmmas. On an H200 the actor's kernel takes
56 µs for CartPole's GPU size (ten seeds x 16,384 rows), and a CartPole
update of ten seeds runs 8.4 ms against the pure-JAX peer's 13.0
(docs/decisions.md, "A PPO minibatch's loss and gradient as one kernel").
Values: the bfloat16 roundings of XLA's bfloat16 layers in another order,
tanh as the GPU's approximate tanh.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from jaxwarp.models import mlp_mosaic
from jaxwarp.models.mlp import MLPActorCritic
from jaxwarp.train import losses
from jaxwarp.train.seeds import folded_vmap

KERNEL_NAME = "jaxwarp_ppo_tower_grad_mosaic"  # in profiles; jaxwarp.benchmark counts its FLOPs
W = 64  # hidden width, padded observations and heads: one [64, 64] tile each
TM = 64  # rows a compute warpgroup takes per block (a wgmma's M)
AUX = 8  # the rows' loss inputs: float32 columns (32-byte rows for TMA)
STAT_COL = 32  # dy's columns from here carry the loss's terms (high parts; low at +8)
ACTOR_TERMS = ("policy_loss", "entropy", "approx_kl", "clip_frac")
METRICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac")
# The towers' parameters, as `MLPActorCritic` names them with two hidden layers.
ACTOR, CRITIC = ("Dense_0", "Dense_1", "Dense_4"), ("Dense_2", "Dense_3", "Dense_5")


def why_not(algorithm: str, net: Any, obs_dim: int, recurrent: bool, centralised: bool
            ) -> str | None:
    """Why the kernels do not take this group's minibatch step (None: they do)."""
    if algorithm != "ppo":
        return f"algorithm {algorithm}, not ppo"
    if not isinstance(net, MLPActorCritic) or recurrent or centralised:
        return "not a feed-forward mlp with its own critic"
    if net.shared_torso or len(net.hidden_sizes) != 2 or max(net.hidden_sizes) > W:
        return f"not two towers of two hidden layers of at most {W} units"
    if jnp.dtype(net.dtype) != jnp.bfloat16 or net.activation not in ("tanh", "relu"):
        return "not bfloat16 matmuls with tanh or relu"
    if len(net.action_dims) != 1 or net.action_dims[0] > STAT_COL or obs_dim > W:
        return f"not one action head of at most {STAT_COL} choices and {W} features"
    if not net.row_blocks:
        return "the envs are split over devices"
    return mlp_mosaic.why_not_here()


def group_why_not(algorithm: str, policy: Any, g: str, obs_dim: int) -> str | None:
    """`why_not` for group g of a `Policy`."""
    return why_not(algorithm, policy.nets[g], obs_dim, g in policy.recurrent,
                   policy.critics is not None)


# --- the loss's gradient at the head, on registers (or any jax arrays) -----------------------


def _rows(r: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """[64] -> [64, n]: the row's value in every column."""
    return lax.broadcast_in_dim(r, shape, (0,))


def _aux_col(a: jax.Array, acol: jax.Array, k: int) -> jax.Array:
    """Column k of the aux block a f32[64, AUX] as a row vector [64]."""
    return jnp.sum(jnp.where(acol == k, a, 0.0), axis=1)


def _stats_into(dy: jax.Array, col: jax.Array, terms: list[jax.Array]) -> jax.Array:
    """dy with each row term in columns STAT_COL + j (its bfloat16 high part)
    and STAT_COL + 8 + j (the rest): dy's bf16 column sums then carry the
    terms' sums to about 2^-17 relative."""
    for j, t in enumerate(terms):
        hi = t.astype(jnp.bfloat16).astype(jnp.float32)
        dy = jnp.where(col == STAT_COL + j, _rows(hi, dy.shape), dy)
        dy = jnp.where(col == STAT_COL + 8 + j, _rows(t - hi, dy.shape), dy)
    return dy


def actor_dy(y: jax.Array, a: jax.Array, col: jax.Array, acol: jax.Array, actions: int
             ) -> jax.Array:
    """The PPO loss's gradient at the logits y f32[64, W] (columns < actions).
    a's columns: action, behaviour log-prob, advantage, the row's weight (1/n,
    0 for padding), clip_eps, ent_coef. The row's surrogate, entropy, k3 KL
    and clip indicator (0 for padding) ride in the stats columns."""
    shape = y.shape
    inside = col < actions
    m = jnp.max(jnp.where(inside, y, -jnp.inf), axis=1)
    e = jnp.where(inside, jnp.exp(y - _rows(m, shape)), 0.0)
    s = jnp.sum(e, axis=1)
    logp = y - _rows(m + jnp.log(s), shape)
    p = e / _rows(s, shape)
    ent = -jnp.sum(jnp.where(inside, p * logp, 0.0), axis=1)
    taken = col == _rows(_aux_col(a, acol, 0).astype(jnp.int32), shape)
    log_ratio = jnp.sum(jnp.where(taken, logp, 0.0), axis=1) - _aux_col(a, acol, 1)
    adv, w, clip = (_aux_col(a, acol, k) for k in (2, 3, 4))
    ratio = jnp.exp(log_ratio)
    u, c = ratio * adv, jnp.clip(ratio, 1.0 - clip, 1.0 + clip) * adv
    # jnp.minimum's gradient: u's where u < c; where u == c (the ratio inside the clip
    # range, where the clip's derivative is 1) half of each, the same; none where c < u.
    g_lp = jnp.where(u <= c, -adv * ratio * w, 0.0)
    g_ent = _aux_col(a, acol, 5) * w  # d(-ent_coef H / n)/dy = ent_coef p (log p + H) / n
    dy = jnp.where(inside, _rows(g_lp, shape) * (jnp.where(taken, 1.0, 0.0) - p)
                   + _rows(g_ent, shape) * p * (logp + _rows(ent, shape)), 0.0)
    real = jnp.where(w > 0.0, 1.0, 0.0)
    terms = [-jnp.minimum(u, c), ent, (ratio - 1.0) - log_ratio,
             jnp.where(jnp.abs(ratio - 1.0) > clip, 1.0, 0.0)]
    return _stats_into(dy, col, [t * real for t in terms])


def critic_dy(y: jax.Array, a: jax.Array, col: jax.Array, acol: jax.Array) -> jax.Array:
    """The clipped value loss's gradient (times vf_coef) at the value, y's
    column 0. a's columns: behaviour value, target, the row's weight, clip_eps,
    vf_coef. The row's value loss (0 for padding) rides in the stats columns."""
    v = jnp.sum(jnp.where(col == 0, y, 0.0), axis=1)
    old, target, w, clip, vf_coef = (_aux_col(a, acol, k) for k in range(5))
    vc = old + jnp.clip(v - old, -clip, clip)
    l1, l2 = jnp.square(v - target), jnp.square(vc - target)
    # jnp.maximum's gradient: l1's where l1 > l2, l2's where l2 > l1 (zero outside the clip
    # range, where vc does not move with v), half of each on a tie (inside it vc == v).
    within = jnp.abs(v - old) < clip
    share = jnp.where(within | (l1 > l2), 1.0, jnp.where(l1 == l2, 0.5, 0.0))
    dy = jnp.where(col == 0, _rows(vf_coef * (v - target) * share * w, y.shape), 0.0)
    return _stats_into(dy, col, [0.5 * jnp.maximum(l1, l2) * jnp.where(w > 0.0, 1.0, 0.0)])


def activation(z: jax.Array, act: str) -> jax.Array:
    return jnp.tanh(z) if act == "tanh" else jnp.maximum(z, 0.0)


def derivative(h: jax.Array, dh: jax.Array, act: str) -> jax.Array:
    """dz from dh and the activation's float32 output h."""
    return dh * (1.0 - h * h) if act == "tanh" else jnp.where(h > 0.0, dh, 0.0)


# --- the kernel ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grid:
    """members x rows (a multiple of 2 TM) a call; per_member CTAs each."""
    members: int
    rows: int
    per_member: int
    stages: int

    @property
    def blocks(self) -> int:  # row blocks of 2 TM a member
        return self.rows // (2 * TM)

    @property
    def ctas(self) -> int:
        return self.members * self.per_member


def _smem_bytes(stages: int) -> int:
    """Three [64, 64] bf16 weights and their biases, the pipeline's blocks, per
    warpgroup h1, h2, dz1, dz2 and dy, three selectors, a float32 tile a
    warpgroup for the partials' way out (each rounded up to 1 KB)."""
    kb = mlp_mosaic._kb
    blocks = stages * (kb(2 * 2 * TM * W) + kb(4 * 2 * TM * AUX))
    return (3 * kb(2 * W * W) + 3 * kb(4 * W) + blocks + 2 * 5 * kb(2 * TM * W)
            + 3 * kb(2 * 64 * TM) + 2 * kb(4 * W * W))


def grid_for(members: int, rows: int, sms: int) -> Grid:
    stages = next(s for s in (3, 2, 1)
                  if _smem_bytes(s) + mlp_mosaic.SMEM_SLACK <= mlp_mosaic.SMEM_LIMIT)
    per = max(1, min(sms // members, rows // (2 * TM)))
    return Grid(members, rows, per, stages)


def matmul(a: Any, b_s: Any) -> jax.Array:
    """a [TM, K] (registers or shared memory) @ b_s [K, W] (shared memory) on
    the warpgroup's tensor cores, a float32 [TM, W] in registers."""
    plgpu = mlp_mosaic._plgpu()

    def product(acc_ref):
        plgpu.wgmma(acc_ref, a, b_s)
        return acc_ref[...]
    return pl.run_scoped(product, plgpu.ACC((TM, W), jnp.float32))


def dense(a: Any, w_s: Any, b_s: Any) -> jax.Array:
    """matmul(a, w_s) plus the bias b_s f32[W] (shared memory) on every row."""
    plgpu = mlp_mosaic._plgpu()
    b = mlp_mosaic.load_vector(plgpu, b_s, plgpu.Layout.WGMMA.reduce(0))
    return matmul(a, w_s) + lax.broadcast_in_dim(b, (TM, W), (1,))


def column_iota(shape: tuple[int, ...]) -> jax.Array:
    """Each element's column index, in the wgmma accumulators' layout."""
    plgpu = mlp_mosaic._plgpu()
    return plgpu.broadcasted_iota(jnp.int32, shape, 1, layout=plgpu.Layout.WGMMA)


def _body(kind: str, actions: int, act: str, refs: tuple, wg: Any) -> Callable:
    """The pipeline's body for one warpgroup: one row block's forward, loss
    gradient, chain and weight-gradient wgmmas (module docstring)."""
    plgpu = mlp_mosaic._plgpu()
    w1_s, b1_s, w2_s, b2_s, wh_s, bh_s, sel_s, chain_s = refs
    f32, bf16 = jnp.float32, jnp.bfloat16

    def body(idx, x_smem, aux_smem, carry):
        rows = pl.ds(wg * TM, TM)
        xs, a = x_smem.at[rows], aux_smem.at[rows][...]
        slots = [chain_s.at[wg, i] for i in range(5)]  # h1, h2, dz1, dz2, dy
        # h1 and h2 go to shared memory as soon as they exist, and the chain's
        # derivatives read their bf16 copies back (as XLA's bf16 layers, whose
        # activations are bf16): float32 tiles held through the loss spilled
        # registers and serialised the wgmmas (1.56x slower, decisions.md).
        h1 = activation(dense(xs, w1_s, b1_s), act).astype(bf16)
        slots[0][...] = h1
        h2 = activation(dense(h1, w2_s, b2_s), act).astype(bf16)
        slots[1][...] = h2
        y = dense(h2, wh_s, bh_s)
        col, acol = column_iota(y.shape), column_iota(a.shape)
        dy = (actor_dy(y, a, col, acol, actions) if kind == "actor"
              else critic_dy(y, a, col, acol)).astype(bf16)
        h1, h2 = (slots[i][...].astype(f32) for i in (0, 1))
        dz2 = derivative(h2, matmul(dy, wh_s.transpose((1, 0))), act).astype(bf16)
        dz1 = derivative(h1, matmul(dz2, w2_s.transpose((1, 0))), act).astype(bf16)
        for ref, value in zip(slots[2:], (dz1, dz2, dy)):
            ref[...] = value
        plgpu.commit_smem()  # the stores above, before the wgmmas read them
        acc_w1, acc_w2, acc_wh, acc_b = carry
        for acc, lhs, rhs in ((acc_w1, xs, slots[2]), (acc_w2, slots[0], slots[3]),
                              (acc_wh, slots[1], slots[4])):
            plgpu.wgmma(acc, lhs.transpose((1, 0)), rhs)
        for k, grad_s in enumerate(slots[2:]):  # row k of acc_b: the column sums of dz1, dz2, dy
            plgpu.wgmma(acc_b, sel_s.at[k], grad_s)
        plgpu.wgmma_wait(0)  # the chain's slots are rewritten by the next block
        return carry
    return body


def _kernel(kind: str, actions: int, act: str, grid: Grid) -> Callable:
    plgpu = mlp_mosaic._plgpu()
    bf16, f32 = jnp.bfloat16, jnp.float32
    tf = mlp_mosaic.smem_transforms(plgpu, W, bf16)
    per, blocks = grid.per_member, grid.blocks

    def kernel(x_gmem, aux_gmem, *refs):
        consts_gmem, parts_gmem, scratch = refs[:7], refs[7:11], refs[11:]
        tile_s, loaded = scratch[-2:]
        cta, wg = lax.axis_index("sm"), lax.axis_index("wg")
        member, j = lax.div(cta, per), lax.rem(cta, per)

        @pl.when(wg == 0)  # this member's weights and biases and the selectors, once a CTA
        def _load_weights():
            for src, dst in zip(consts_gmem[:6], scratch[:6]):
                plgpu.copy_gmem_to_smem(src.at[member], dst, loaded)
            plgpu.copy_gmem_to_smem(consts_gmem[6], scratch[6], loaded)

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
            return (member * blocks + j + i * per, 0)

        pipeline = plgpu.emit_pipeline_warp_specialized(
            _body(kind, actions, act, scratch[:8], wg), grid=(lax.div(blocks - 1 - j, per) + 1,),
            memory_registers=40, in_specs=[
                plgpu.BlockSpec((2 * TM, W), block, transforms=tf),
                plgpu.BlockSpec((2 * TM, AUX), block,
                                transforms=mlp_mosaic.smem_transforms(plgpu, AUX, f32))],
            wg_axis="wg", num_compute_wgs=2, max_concurrent_steps=grid.stages,
            compute_context=compute_context)
        pipeline(x_gmem, aux_gmem)
    return kernel


def tower_grad(x: jax.Array, aux: jax.Array, weights: list[jax.Array], *, kind: str,
               actions: int, act: str, grid: Grid) -> tuple[jax.Array, ...]:
    """One tower's partial gradients, float32 [members, 2 per_member, W, W]:
    dw1, dw2, dwh and a tile whose rows 0, 1, 2 are db1, db2, dbh (dbh's
    columns from STAT_COL: the loss's terms' sums); x bf16[members x rows, W],
    aux f32[members x rows, AUX], weights (w1, b1, w2, b2, wh, bh) bf16[members,
    W, W] and f32[members, W]; kind "actor" or "critic"."""
    plgpu = mlp_mosaic._plgpu()
    bf16, f32 = jnp.bfloat16, jnp.float32
    tf = mlp_mosaic.smem_transforms(plgpu, W, bf16)
    sel = jnp.zeros((3, 64, TM), bf16).at[jnp.arange(3), jnp.arange(3), :].set(1)
    scratch = [plgpu.SMEM((W, W), bf16, transforms=tf), plgpu.SMEM((W,), f32)] * 3 + [
        plgpu.SMEM((3, 64, TM), bf16, transforms=mlp_mosaic.smem_transforms(plgpu, TM, bf16)),
        plgpu.SMEM((2, 5, TM, W), bf16, transforms=tf),
        plgpu.SMEM((2, W, W), f32, transforms=mlp_mosaic.smem_transforms(plgpu, W, f32)),
        plgpu.Barrier(num_arrivals=7)]
    out = [jax.ShapeDtypeStruct((2 * grid.ctas, W, W), f32)] * 4
    named = "kernel_name" in inspect.signature(plgpu.Mesh).parameters  # jax >= 0.11
    parts = plgpu.kernel(
        _kernel(kind, actions, act, grid), out_type=out, scratch_types=scratch,
        grid=(grid.ctas,), grid_names=("sm",), num_threads=3, thread_name="wg",
        **({"kernel_name": KERNEL_NAME} if named else {}), compiler_params=plgpu.CompilerParams(
            approx_math=True, lowering_semantics=plgpu.LoweringSemantics.Warpgroup))(
        x, aux, *weights, sel)
    return tuple(q.reshape(grid.members, 2 * grid.per_member, W, W) for q in parts)


def _sms() -> int:
    """The first GPU's SMs (132, an H100's or H200's, where there is no GPU)."""
    try:
        return mlp_mosaic._num_sms()
    except RuntimeError:
        return 132


# --- around the kernels ----------------------------------------------------------------------


def _padded(a: jax.Array, shape: tuple[int, ...], dtype: Any) -> jax.Array:
    return jnp.pad(a, [(0, s - d) for s, d in zip(shape, a.shape)]).astype(dtype)


def _tower_weights(p: dict, names: tuple[str, ...], dtype: Any) -> list[jax.Array]:
    """[members, ...] params of one tower -> w1, b1, w2, b2, wh, bh padded to W
    (the weights in dtype, the biases in float32)."""
    out = []
    for name in names:
        k, b = p[name]["kernel"], p[name]["bias"]
        out += [_padded(k, (k.shape[0], W, W), dtype),
                _padded(b, (b.shape[0], W), jnp.float32)]
    return out


def _tower_grads(parts: tuple, p: dict, names: tuple[str, ...]) -> tuple[dict, jax.Array]:
    """The partials summed over the CTAs in order, cut to the params' shapes,
    and the sums of the loss's terms (high + low parts) [members, 8]."""
    dw1, dw2, dwh, db = (jnp.sum(q, axis=1) for q in parts)
    grads = {}
    for name, dw, row in zip(names, (dw1, dw2, dwh), range(3)):
        (k_in, k_out), (b_n,) = p[name]["kernel"].shape[1:], p[name]["bias"].shape[1:]
        grads[name] = {"kernel": dw[:, :k_in, :k_out], "bias": db[:, row, :b_n]}
    return grads, db[:, 2, STAT_COL:STAT_COL + 8] + db[:, 2, STAT_COL + 8:STAT_COL + 16]


def _aux(mb: losses.Batch, hyper: tuple[jax.Array, ...], rows: int, normalize: bool
         ) -> tuple[jax.Array, jax.Array]:
    """The actor's and the critic's aux blocks f32[members, rows, AUX] of a
    minibatch mb [members, n, ...] (rows: n padded; the padding's weight 0)."""
    clip, vf_coef, ent_coef = hyper
    m, n = mb.advantage.shape
    adv = mb.advantage
    if normalize:
        adv = (adv - adv.mean(1, keepdims=True)) / (adv.std(1, keepdims=True) + 1e-8)

    def block(cols):
        full = [jnp.broadcast_to(jnp.asarray(c, jnp.float32).reshape(m, -1), (m, n))
                for c in cols]
        return _padded(jnp.stack(full + [jnp.zeros((m, n))] * (AUX - len(full)), -1),
                       (m, rows, AUX), jnp.float32)
    w = jnp.full((m, n), 1.0 / n)
    return (block([mb.actions[..., 0].astype(jnp.float32), mb.log_prob, adv, w, clip,
                   ent_coef]),
            block([mb.value, mb.target, w, clip, vf_coef]))


def grads(params: dict, mb: losses.Batch, hyper: tuple[jax.Array, ...], *, normalize: bool,
          actions: int, act: str, tower: Callable | None = None, sms: int | None = None,
          dtype: Any = jnp.bfloat16) -> tuple[tuple[jax.Array, dict[str, jax.Array]], dict]:
    """((loss, metrics), grads) of `losses.policy_loss` (PPO) for every member
    at once: params {"params": ...} with leaves [members, ...]; mb: obs
    f32[members, n, D], actions i32[members, n, 1], the rest f32[members, n];
    hyper (clip_eps, vf_coef, ent_coef), each f32[members]. tower: the kernel
    (`tower_grad`), or a stand-in with its signature (tests: in float32, dtype
    the observations' and weights' dtype)."""
    p = params["params"]
    m, n = mb.advantage.shape
    rows = -(-n // (2 * TM)) * 2 * TM
    aux_a, aux_c = _aux(mb, hyper, rows, normalize)
    x = _padded(mb.obs, (m, rows, W), dtype).reshape(m * rows, W)
    run = functools.partial(tower or tower_grad, actions=actions, act=act,
                            grid=grid_for(m, rows, sms or _sms()))
    ga, sa = _tower_grads(run(x, aux_a.reshape(-1, AUX), _tower_weights(p, ACTOR, dtype),
                              kind="actor"), p, ACTOR)
    gc, sc = _tower_grads(run(x, aux_c.reshape(-1, AUX), _tower_weights(p, CRITIC, dtype),
                              kind="critic"), p, CRITIC)
    terms = {k: sa[:, i] / n for i, k in enumerate(ACTOR_TERMS)} | {"value_loss": sc[:, 0] / n}
    _, vf_coef, ent_coef = hyper
    loss = terms["policy_loss"] + vf_coef * terms["value_loss"] - ent_coef * terms["entropy"]
    return (loss, {k: terms[k] for k in METRICS}), {"params": ga | gc}


def grad_fn(net: MLPActorCritic, select: Callable, normalize_obs: Callable, hyper: Any,
            tower: Callable | None = None) -> Callable:
    """The learner's grad_fn for a group `why_not` accepts: (params, minibatch,
    normalize_advantages) -> ((loss, metrics), grads), as ``jax.value_and_grad``
    of the loss gives them. select(obs) cuts the group's observations,
    normalize_obs(obs) applies its running statistics. Under ``jax.vmap``
    (seeds, a sweep's members) one kernel call takes every member
    (`jax.custom_batching.custom_vmap`)."""
    def one_grad(p, mb: losses.Batch, normalize: bool):
        obs = normalize_obs(select(mb.obs))
        flat = losses.Batch(obs.reshape(-1, obs.shape[-1]).astype(jnp.float32),
                            mb.actions.reshape(-1, mb.actions.shape[-1]),
                            *(x.reshape(-1) for x in (mb.log_prob, mb.value, mb.advantage,
                                                      mb.target)))
        hyp = (hyper.clip_eps, hyper.vf_coef, hyper.ent_coef)
        call = folded_vmap(functools.partial(
            grads, normalize=normalize, actions=int(net.action_dims[0]), act=net.activation,
            tower=tower))
        out = call(*jax.tree.map(lambda a: a[None], (p, flat, hyp)))
        return jax.tree.map(lambda a: a[0], out)
    return one_grad
