"""The `mlp` model's layers fused per tile of rows: two Pallas (Triton) kernels.

XLA runs an MLP as one matmul per layer with the activations in HBM between
them: at GPU batch sizes every 256-wide layer is bound by moving those
activations, not by arithmetic (docs/decisions.md, "The learner's bound").
Here each program of a kernel takes a tile of rows and keeps its activations
on chip through every layer:

- `forward`: observations -> every hidden layer of one or two towers -> the
  heads' columns (logits of every head, then the value), written once,
  float32 [N, out_pad]; no activation leaves the chip (the rollout's case).
  Under differentiation it also writes each hidden layer's activation h
  once (the compute dtype): the backward reads them instead of recomputing.
- the backward (`_backward`): back-propagates the heads' output gradient
  through a tile's layers, writing each layer's pre-activation gradient dz
  once (the compute dtype) and each tile's bias-gradient column sums
  (float32). The weight gradients h_{l-1}^T dz_l are then XLA matmuls over
  every row (row blocks accumulated in float32, as `weight_grad`):
  deterministic, no atomics.

Matmuls run on tensor cores (bfloat16 with float32 accumulation; a float32
layout runs tf32 dots, XLA's default precision on the GPU, but the model
keeps XLA's layers for float32: measured slower). Activations live as
column blocks of `Layout.block` columns (Triton tensors cannot be sliced), so
every dot is [rows, block] x [block, block] and widths may be any multiple of
the block. `fused_mlp` is the op (a `jax.custom_vjp`; works under jit, vmap,
scan); `why_not` says which shapes it covers. `fused_head_stats` is the
learner's form: the forward kernel also takes the actions and returns the
categorical heads' log-probability and entropy with the value, so the loss
reads three numbers a row instead of the logits.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from jaxwarp.models import mlp_mosaic

try:  # jax 0.11 deprecates Pallas's Triton backend: a jax without it keeps XLA's layers
    from jax.experimental.pallas import triton as plgpu
    NO_TRITON: str | None = None
except ImportError as e:
    plgpu = None
    NO_TRITON = f"this jax has no Pallas Triton backend ({e})"

# This Pallas kernel's own limits (Python only; the CUDA fused rollout's are
# jaxwarp.train.fused.ROLLOUT_MAX_LAYERS etc., from cuda/jaxwarp_fused.h).
ACTIVATIONS = ("tanh", "relu")
MAX_LAYERS = 3  # hidden layers per tower
# Hidden widths covered: multiples of 128 up to 512. At 64 (MPE's and
# CartPole's 64-64 models at GPU batch sizes) XLA's layers were faster
# (docs/decisions.md, "A fused MLP in Pallas").
WIDTHS = range(128, 513, 128)
MAX_IN = 256  # observation features
MAX_OUT = 256  # logits of every head + the value


def row_blocks(rows: int) -> int:
    """How many row blocks a weight gradient over `rows` rows is summed
    over: the largest divisor of `rows` in [8, 128] that leaves blocks of at
    least 1024 rows, a multiple of 8 (1 when there is none). cuBLAS wants the
    contracted dimension aligned: with blocks of 1,250 rows (Tag's taggers,
    100,000 rows in 80 blocks) XLA padded every block of both operands to
    1,256 rows, a copy of each (docs/decisions.md, "The learner's tail")."""
    for s in range(128, 7, -1):
        if rows % s == 0 and rows // s >= 1024 and (rows // s) % 8 == 0:
            return s
    return 1


def weight_grad(x: jax.Array, dy: jax.Array, blocks: bool) -> jax.Array:
    """x^T dy in float32 over every leading (row) axis: x [..., K], dy [..., N]
    -> f32[K, N].

    As one matmul XLA:GPU splits the (millions of) rows itself and pads them
    to a multiple of its split first (a copy of both operands); here it is a
    batched matmul over row blocks that divide the rows, accumulated in
    float32, then summed. Not with the envs split over devices (`blocks`
    False): the reshape would cross the split axis, and XLA would all-reduce
    every block's partial gradient before the sum.
    """
    lead = tuple(range(x.ndim - 1))
    s = row_blocks(math.prod(x.shape[:-1])) if blocks else 1
    if s > 1:
        xb = x.reshape(s, -1, x.shape[-1])
        dyb = dy.reshape(s, -1, dy.shape[-1])
        return jax.lax.dot_general(xb, dyb, (((1,), (1,)), ((0,), (0,))),
                                   preferred_element_type=jnp.float32).sum(0)
    return jax.lax.dot_general(x, dy, ((lead, lead), ((), ())),
                               preferred_element_type=jnp.float32)


def _pow2(n: int, least: int = 16) -> int:
    return max(least, 1 << (int(n) - 1).bit_length())


@dataclass(frozen=True)
class Layout:
    """The static shape of a fused MLP and its tiling.

    in_dim: observation features D; widths: hidden widths (each tower);
    out_cols: logits of every head + 1 (the value, last); towers: 1 (shared
    torso) or 2 (actor, critic); dtype: the matmuls' dtype name.
    """

    in_dim: int
    widths: tuple[int, ...]
    out_cols: int
    towers: int
    activation: str
    dtype: str
    heads: tuple[int, ...] = ()  # nvec (sum = out_cols - 1): `fused_head_stats` needs it
    rows: int = 128  # the forward's rows per program
    warps: int = 8
    back_rows: int = 64  # the backward's
    back_warps: int = 4

    @property
    def in_pad(self) -> int:
        return _pow2(self.in_dim)

    @property
    def out_pad(self) -> int:
        """The heads' columns padded to a power of 2, with room after the value
        for `fused_head_stats`' per-head entropies and log-probability."""
        return _pow2(self.out_cols + (1 + len(self.heads) if self.heads else 0))

    block = 128  # columns per activation block


def why_not(in_dim: int, widths: Sequence[int], out_cols: int, activation: str,
            dtype: Any) -> str | None:
    """Why `fused_mlp` does not cover this MLP (None: it does)."""
    if activation not in ACTIVATIONS:
        return f"activation {activation!r} (the kernel has {list(ACTIVATIONS)})"
    if jnp.dtype(dtype) != jnp.dtype(jnp.bfloat16):
        # The kernels run float32 too (tf32 dots, tested), but trained slower
        # than XLA's layers: 0.68x with tag_2000_envs's float32 model
        # (docs/decisions.md, "A fused MLP in Pallas").
        return f"dtype {jnp.dtype(dtype).name} (the model uses the kernels in bfloat16)"
    if not 1 <= len(widths) <= MAX_LAYERS or any(w not in WIDTHS for w in widths):
        return (f"hidden sizes {list(widths)} (the kernel has 1..{MAX_LAYERS} layers, each "
                "a multiple of 128 up to 512)")
    if not 1 <= in_dim <= MAX_IN:
        return f"{in_dim} observation features (the kernel has at most {MAX_IN})"
    if out_cols > MAX_OUT:
        return f"{out_cols - 1} logits (the kernel has at most {MAX_OUT - 1})"
    return None


def on_cuda() -> bool:
    """Whether the device a computation lands on by default is a CUDA GPU
    (where Pallas lowers to Triton): `jax.default_device`'s where one is set
    (a device or a platform name), else JAX's first device. A model built
    under ``jax.default_device(cpu)`` in a GPU process keeps XLA's layers."""
    try:
        dev = jax.config.jax_default_device
        if isinstance(dev, str):
            dev = jax.devices(dev)[0]
        dev = dev or jax.devices()[0]
        return dev.platform == "gpu" and "cuda" in dev.client.platform_version.lower()
    except (RuntimeError, AttributeError):
        return False


def cannot_lower() -> str | None:
    """Why no model's kernels lower here: no CUDA GPU, or a jax without
    Pallas's Triton backend (None: they can)."""
    return "no CUDA GPU" if not on_cuda() else NO_TRITON


def why_not_here(in_dim: int, widths: Sequence[int], out_cols: int, activation: str,
                 dtype: Any) -> str | None:
    """`cannot_lower`, else `why_not` (None: the kernels run this MLP here)."""
    return cannot_lower() or why_not(in_dim, widths, out_cols, activation, dtype)


def layout_for(in_dim: int, widths: Sequence[int], out_cols: int, towers: int,
               activation: str, dtype: Any, heads: Sequence[int] = ()) -> Layout | None:
    """The kernels' layout for this MLP where they run it: on a CUDA GPU, for
    the shapes `why_not` covers (None: XLA's layers). heads: the choices per
    action head (sum out_cols - 1), for `fused_head_stats`; left out where
    their statistics' columns would pass MAX_OUT."""
    if why_not_here(in_dim, widths, out_cols, activation, dtype):
        return None
    heads = tuple(int(n) for n in heads)
    if heads and sum(heads) != out_cols - 1:
        raise ValueError(f"heads {list(heads)}: their choices must add up to out_cols - 1 = "
                         f"{out_cols - 1} (the logits; the value is the last column)")
    if out_cols + 1 + len(heads) > MAX_OUT:
        heads = ()
    return Layout(int(in_dim), tuple(int(w) for w in widths), int(out_cols), int(towers),
                  activation, jnp.dtype(dtype).name, heads)


# ---------------------------------------------------------------------------
# Kernel bodies. Refs: the forward's x (the backward's g, then the saved h of
# every tower's layers), then per tower the hidden layers' (W, b), then per
# tower the head's W [width, out_pad], then the heads' one bias, then the
# outputs. Weights come in the compute dtype, biases in float32.
# ---------------------------------------------------------------------------
def _act(z: jax.Array, activation: str) -> jax.Array:
    return jnp.tanh(z) if activation == "tanh" else jnp.maximum(z, 0.0)


def _act_grad(h: jax.Array, activation: str) -> jax.Array:
    """d act / d z from the activation's output h (float32)."""
    return 1.0 - h * h if activation == "tanh" else (h > 0).astype(jnp.float32)


def _dot(a: jax.Array, b: jax.Array, trans_b: bool = False) -> jax.Array:
    dims = (((1,), (1 if trans_b else 0,)), ((), ()))
    return jax.lax.dot_general(a, b, dims, preferred_element_type=jnp.float32)


def _split(refs: Sequence[Any], lay: Layout) -> tuple[list, list, Any, list]:
    """(per tower [(W, b) per layer], per tower head W, head bias, outputs)."""
    n = len(lay.widths)
    towers = [[(refs[2 * (t * n + i)], refs[2 * (t * n + i) + 1]) for i in range(n)]
              for t in range(lay.towers)]
    k = 2 * n * lay.towers
    return towers, list(refs[k:k + lay.towers]), refs[k + lay.towers], list(
        refs[k + lay.towers + 1:])


def _layer(h: list[jax.Array], w_ref: Any, b_ref: Any, width: int, lay: Layout
           ) -> list[jax.Array]:
    """act(h @ W + b) for one tile, as column blocks in the compute dtype."""
    dt, nb = jnp.dtype(lay.dtype), lay.block
    out = []
    for n0 in range(0, width, nb):
        z = b_ref[pl.ds(n0, nb)][None, :]
        k0 = 0
        for blk in h:
            k = blk.shape[1]
            z = z + _dot(blk, w_ref[pl.ds(k0, k), pl.ds(n0, nb)])
            k0 += k
        out.append(_act(z, lay.activation).astype(dt))
    return out


def _row_mask(tile: int, n_rows: int) -> jax.Array:
    """bool[tile, 1]: the tile's rows inside the array (the last tile may pass its end)."""
    rows = pl.program_id(0) * tile + jnp.arange(tile)
    return (rows < n_rows)[:, None]


def _store(ref: Any, val: jax.Array, mask: jax.Array) -> None:
    plgpu.store(ref, val, mask=jnp.broadcast_to(mask, val.shape))


def _x_blocks(in_dim: int) -> list[tuple[int, int]]:
    """(first column, width) of the column blocks the observations are loaded
    in: powers of 2 of at least 16 (a dot's K) and at most `Layout.block`,
    covering in_dim rounded up to 16, so the first layer does not multiply
    in_pad - in_dim zero columns (Tag's 71 features: 64 + 16, not 128)."""
    out, c, left = [], 0, -(-in_dim // 16) * 16
    while left:
        w = min(Layout.block, 1 << (left.bit_length() - 1))
        out.append((c, w))
        c, left = c + w, left - w
    return out


def _load_x(x_ref: Any, lay: Layout, mask: jax.Array) -> list[jax.Array]:
    """The tile's observations as `_x_blocks` column blocks in the compute dtype
    (features past in_dim and rows past the end loaded as 0)."""
    blocks = []
    for c, w in _x_blocks(lay.in_dim):
        cols = c + jnp.arange(w) < lay.in_dim
        x = plgpu.load(x_ref.at[:, pl.ds(c, w)], mask=mask & cols[None, :], other=0)
        blocks.append(x.astype(jnp.dtype(lay.dtype)))
    return blocks


def _head_stats_tile(out: jax.Array, a: jax.Array, lay: Layout) -> jax.Array:
    """The heads' slab of a tile with its categorical statistics: out
    f32[rows, out_pad] (every head's logits, the value at column A =
    out_cols - 1), a i32[rows, >= len(heads)] the actions -> f32[rows, out_pad]
    with each head's log-softmax in its logit columns, the value at A, head h's
    entropy at A + 1 + h and the actions' summed log-probability at A + 1 + K.
    Full-width masked passes: a Triton tensor's columns cannot be sliced."""
    col = jnp.arange(lay.out_pad)[None, :]
    acol = jnp.arange(a.shape[1])[None, :]
    v, k = lay.out_cols - 1, len(lay.heads)
    slab = jnp.where(col == v, out, 0.0)
    lp = jnp.zeros((out.shape[0], 1), jnp.float32)
    c0 = 0
    for h, n in enumerate(lay.heads):
        inside = (col >= c0) & (col < c0 + n)
        m = jnp.max(jnp.where(inside, out, -jnp.inf), axis=1)[:, None]
        e = jnp.where(inside, jnp.exp(out - m), 0.0)
        s = jnp.sum(e, axis=1)[:, None]
        logp = out - m - jnp.log(s)
        ent = -jnp.sum(jnp.where(inside, e / s * logp, 0.0), axis=1)[:, None]
        ah = jnp.sum(jnp.where(acol == h, a, 0), axis=1)[:, None]
        lp = lp + jnp.sum(jnp.where(col == c0 + ah, logp, 0.0), axis=1)[:, None]
        slab = jnp.where(inside, logp, jnp.where(col == v + 1 + h, ent, slab))
        c0 += n
    return jnp.where(col == v + 1 + k, lp, slab)


def _forward_kernel(x_ref: Any, *refs: Any, lay: Layout, n_rows: int, save: bool,
                    stats: bool) -> None:
    n = len(lay.widths)
    a_ref, refs = (refs[0], refs[1:]) if stats else (None, refs)
    towers, heads, bo_ref, outs = _split(refs, lay)
    mask = _row_mask(lay.rows, n_rows)
    x = _load_x(x_ref, lay, mask)
    out = bo_ref[...][None, :]
    for t, (layers, wo_ref) in enumerate(zip(towers, heads)):
        h = x
        for i, ((w_ref, b_ref), width) in enumerate(zip(layers, lay.widths)):
            h = _layer(h, w_ref, b_ref, width, lay)
            if save:  # the backward's residual (and the weight gradients' operand)
                for j, blk in enumerate(h):
                    _store(outs[1 + t * n + i].at[:, pl.ds(j * lay.block, lay.block)], blk, mask)
        k0 = 0
        for blk in h:
            out = out + _dot(blk, wo_ref[pl.ds(k0, blk.shape[1]), :])
            k0 += blk.shape[1]
    if stats:
        acols = jnp.arange(a_ref.shape[1]) < len(lay.heads)
        a = plgpu.load(a_ref, mask=mask & acols[None, :], other=0)
        out = _head_stats_tile(out, a, lay)
    _store(outs[0], out, mask)


def _backward_kernel(g_ref: Any, *refs: Any, lay: Layout, n_rows: int) -> None:
    """dz of every hidden layer from the heads' gradient g and the saved h."""
    n, nb, dt = len(lay.widths), lay.block, jnp.dtype(lay.dtype)
    h_refs = refs[:n * lay.towers]
    towers, heads, _, outs = _split(refs[n * lay.towers:], lay)
    mask = _row_mask(lay.back_rows, n_rows)
    g = plgpu.load(g_ref, mask=jnp.broadcast_to(mask, (lay.back_rows, lay.out_pad)), other=0)
    for t, (layers, wo_ref) in enumerate(zip(towers, heads)):
        dz_refs = outs[2 * n * t:2 * n * t + n]
        sum_refs = outs[2 * n * t + n:2 * n * (t + 1)]
        # the head's output gradient back through its weights
        dh = [_dot(g, wo_ref[pl.ds(j * nb, nb), :], trans_b=True)
              for j in range(lay.widths[-1] // nb)]
        for i in range(n - 1, -1, -1):
            h_ref = h_refs[t * n + i]
            dz = []
            for j, d in enumerate(dh):
                h = plgpu.load(h_ref.at[:, pl.ds(j * nb, nb)],
                               mask=jnp.broadcast_to(mask, (lay.back_rows, nb)), other=0)
                dz.append(d * _act_grad(h.astype(jnp.float32), lay.activation))
            for j, d in enumerate(dz):
                _store(dz_refs[i].at[:, pl.ds(j * nb, nb)], d.astype(dt), mask)
                sum_refs[i][:, pl.ds(j * nb, nb)] = jnp.sum(d, axis=0)[None, :]
            if i == 0:
                break
            w_ref = layers[i][0]
            dzc = [d.astype(dt) for d in dz]
            dh = []
            for k in range(lay.widths[i - 1] // nb):
                acc = None
                for j, d in enumerate(dzc):
                    term = _dot(d, w_ref[pl.ds(k * nb, nb), pl.ds(j * nb, nb)], trans_b=True)
                    acc = term if acc is None else acc + term
                dh.append(acc)


# ---------------------------------------------------------------------------
# The calls.
# ---------------------------------------------------------------------------
def _full(a: jax.Array) -> pl.BlockSpec:
    return pl.BlockSpec(a.shape, lambda i: (0,) * a.ndim)


def _rows(tile: int, width: int) -> pl.BlockSpec:
    return pl.BlockSpec((tile, width), lambda i: (i, 0))


def _params(lay: Layout, weights: Sequence[jax.Array]) -> list[jax.Array]:
    """The packed parameters as the kernels read them: kernels in the compute
    dtype (each tower's first kernel padded to in_pad rows), biases float32."""
    dt, n = jnp.dtype(lay.dtype), len(lay.widths)
    out = []
    for i, w in enumerate(weights):
        if w.ndim == 1:
            out.append(w.astype(jnp.float32))
            continue
        w = w.astype(dt)
        if i < 2 * n * lay.towers and i % (2 * n) == 0:  # a tower's first layer
            w = jnp.pad(w, ((0, lay.in_pad - lay.in_dim), (0, 0)))
        out.append(w)
    return out


def _compiler(warps: int, interpret: bool) -> dict:
    if interpret:
        return {"interpret": True}
    return {"compiler_params": plgpu.CompilerParams(num_warps=warps, num_stages=1)}


def forward(lay: Layout, x: jax.Array, weights: Sequence[jax.Array], save: bool = False,
            interpret: bool = False, actions: jax.Array | None = None) -> list[jax.Array]:
    """[the heads' columns f32[N, out_pad]] of x [N, in_dim] (any float dtype),
    then with `save` every hidden layer's h [N, width] (compute dtype; per
    tower, in layer order). With actions i32[N, len(lay.heads)] the heads'
    columns are `_head_stats_tile`'s slab instead.

    weights: per tower (kernel, bias) of each hidden layer, then per tower the
    head's kernel [width, out_pad], then the heads' bias f32[out_pad] (`pack`).
    """
    n_rows = x.shape[0]
    ws = _params(lay, weights)
    shapes = [jax.ShapeDtypeStruct((n_rows, lay.out_pad), jnp.float32)]
    specs = [_rows(lay.rows, lay.out_pad)]
    if save:
        for _ in range(lay.towers):
            for w in lay.widths:
                shapes.append(jax.ShapeDtypeStruct((n_rows, w), jnp.dtype(lay.dtype)))
                specs.append(_rows(lay.rows, w))
    stats = actions is not None
    extra = [actions.astype(jnp.int32)] if stats else []
    extra_specs = [_rows(lay.rows, _pow2(len(lay.heads), 2))] if stats else []
    return pl.pallas_call(
        functools.partial(_forward_kernel, lay=lay, n_rows=n_rows, save=save, stats=stats),
        out_shape=shapes,
        grid=(pl.cdiv(n_rows, lay.rows),),
        in_specs=[_rows(lay.rows, lay.in_pad)] + extra_specs + [_full(w) for w in ws],
        out_specs=specs,
        name="jaxwarp_mlp_forward",
        **_compiler(lay.warps, interpret),
    )(x, *extra, *ws)


def _backward(lay: Layout, g: jax.Array, hs: Sequence[jax.Array], weights: Sequence[jax.Array],
              interpret: bool = False) -> list[jax.Array]:
    """Per tower: each hidden layer's dz [N, w] (compute dtype), then each
    layer's tile column sums of dz f32[tiles, w]."""
    n_rows = g.shape[0]
    dt = jnp.dtype(lay.dtype)
    ws = _params(lay, weights)
    tiles = pl.cdiv(n_rows, lay.back_rows)
    shapes, specs = [], []
    for _ in range(lay.towers):
        for w in lay.widths:
            shapes.append(jax.ShapeDtypeStruct((n_rows, w), dt))
            specs.append(_rows(lay.back_rows, w))
        for w in lay.widths:
            shapes.append(jax.ShapeDtypeStruct((tiles, w), jnp.float32))
            specs.append(pl.BlockSpec((1, w), lambda i: (i, 0)))
    return pl.pallas_call(
        functools.partial(_backward_kernel, lay=lay, n_rows=n_rows),
        out_shape=shapes,
        grid=(tiles,),
        in_specs=[_rows(lay.back_rows, lay.out_pad)]
        + [_rows(lay.back_rows, h.shape[1]) for h in hs] + [_full(w) for w in ws],
        out_specs=specs,
        name="jaxwarp_mlp_backward",
        **_compiler(lay.back_warps, interpret),
    )(g.astype(dt), *hs, *ws)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 3, 4))
def fused_mlp(lay: Layout, x: jax.Array, weights: tuple[jax.Array, ...], blocks: bool = True,
              interpret: bool = False) -> jax.Array:
    """The MLP's heads' columns f32[..., out_pad] of x [..., in_dim].

    weights: `pack`'s tuple (float32 parameters; their gradients are float32).
    blocks: weight gradients over row blocks (`weight_grad`); interpret: run
    the kernels in Pallas's interpreter (any backend; the tests' CPU path).
    """
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    # Outside differentiation (the rollout) one persistent Mosaic GPU kernel
    # where the model fits it (docs/decisions.md, "The rollout's forward on Mosaic GPU").
    plan = None if interpret else mlp_mosaic.plan_for(lay)
    out = (mlp_mosaic.forward(lay, plan, x2, weights) if plan is not None
           else forward(lay, x2, weights, False, interpret)[0])
    return out.reshape(*lead, lay.out_pad)


def _saved_forward(lay: Layout, x: jax.Array, weights: Sequence[jax.Array], interpret: bool,
                   actions: jax.Array | None = None
                   ) -> tuple[jax.Array, jax.Array, list[jax.Array]]:
    """The forward under differentiation: (the heads' columns f32[N, out_pad],
    the padded input xp, every hidden layer's h)."""
    # Under differentiation the forward also writes every hidden layer's
    # activation: the backward reads them rather than recomputing the layers
    # (and the weight gradients need them in memory either way). The input is
    # cast to the compute dtype (as the kernel casts it) and padded to a
    # multiple of 8 features once, by one fusion that both the kernel and the
    # first layer's weight gradient read: cuBLAS wants that operand aligned, and
    # XLA otherwise made a padded copy of it from the batch (71 Tag features).
    d = x.shape[-1]
    xp = jnp.pad(x.reshape(-1, d).astype(jnp.dtype(lay.dtype)), ((0, 0), (0, -d % 8)))
    out, *hs = forward(lay, xp, weights, True, interpret, actions)
    return out, xp, hs


def _fwd(lay, x, weights, blocks, interpret):
    out, xp, hs = _saved_forward(lay, x, weights, interpret)
    # x stays a residual for its shape and dtype only (dx's); the backward reads xp.
    return out.reshape(*x.shape[:-1], lay.out_pad), (x, xp, weights, hs)


def _bwd(lay, blocks, interpret, res, g):
    x, xp, weights, hs = res
    return _grads(lay, blocks, interpret, x, xp, weights, hs, g.reshape(-1, lay.out_pad))


def _grads(lay: Layout, blocks: bool, interpret: bool, x: jax.Array, xp: jax.Array,
           weights: tuple[jax.Array, ...], hs: Sequence[jax.Array], g2: jax.Array
           ) -> tuple[jax.Array, tuple[jax.Array, ...]]:
    """(dx like x, the weights' gradients) from the heads' columns' gradient
    g2 f32[N, out_pad] and the saved forward (`_saved_forward`)."""
    dt, n = jnp.dtype(lay.dtype), len(lay.widths)
    outs = _backward(lay, g2, hs, weights, interpret)
    grads: list[jax.Array] = []
    head_grads = []
    dx = jnp.zeros((g2.shape[0], x.shape[-1]), jnp.float32)
    for t in range(lay.towers):
        dzs = outs[2 * n * t:2 * n * t + n]
        sums = outs[2 * n * t + n:2 * n * (t + 1)]
        prev = xp
        for i in range(n):
            gw = weight_grad(prev, dzs[i], blocks)
            grads.append(gw[:x.shape[-1]] if i == 0 else gw)  # xp's padding cut off
            grads.append(jnp.sum(sums[i], axis=0))
            prev = hs[t * n + i]
        head_grads.append(weight_grad(prev, g2.astype(dt), blocks))
        dx = dx + _dot(dzs[0], weights[2 * n * t].astype(dt), trans_b=True)
    grads += head_grads
    grads.append(jnp.sum(g2, axis=0, dtype=jnp.float32))
    grads = [gr.astype(w.dtype) for gr, w in zip(grads, weights)]
    return dx.astype(x.dtype).reshape(x.shape), tuple(grads)


fused_mlp.defvjp(_fwd, _bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 4, 5))
def fused_head_stats(lay: Layout, x: jax.Array, weights: tuple[jax.Array, ...],
                     actions: jax.Array, blocks: bool = True, interpret: bool = False
                     ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(log_prob, entropy, value), each f32[...], of x [..., in_dim] and the
    actions i32[..., len(lay.heads)]: the sums over the heads of
    log softmax(logits_h)[actions_h] and of the categorical entropy, and the
    value, with the log-softmax taken in the forward kernel (the learner's
    loss reads nothing else of the heads, so the logits never pass through
    XLA's softmax fusions). Reverse-mode differentiable (weights and x; the
    gradient of the heads' columns is one elementwise pass over the saved
    log-softmax, as `losses.head_stats`'). lay.heads must be set (`layout_for`
    with heads); blocks, interpret: as `fused_mlp`'s.
    """
    lead = x.shape[:-1]
    slab = forward(lay, x.reshape(-1, x.shape[-1]), weights, False, interpret,
                   actions.reshape(-1, actions.shape[-1]))[0]
    return _stats_of(lay, slab, lead)


def _stats_of(lay: Layout, slab: jax.Array, lead: tuple[int, ...]
              ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(log_prob, entropy summed over the heads, value), each f32[*lead], from
    the slab f32[N, out_pad] of `_head_stats_tile` (N = prod(lead))."""
    v, k = lay.out_cols - 1, len(lay.heads)
    ent = jnp.sum(slab[:, v + 1:v + 1 + k], axis=1)
    return slab[:, v + 1 + k].reshape(lead), ent.reshape(lead), slab[:, v].reshape(lead)


def _stats_fwd(lay, x, weights, actions, blocks, interpret):
    a = actions.reshape(-1, actions.shape[-1])
    slab, xp, hs = _saved_forward(lay, x, weights, interpret, a)
    return _stats_of(lay, slab, x.shape[:-1]), (x, xp, weights, hs, slab, a)


def _stats_bwd(lay, blocks, interpret, res, g):
    x, xp, weights, hs, slab, a = res
    g_lp, g_ent, g_v = (c.reshape(-1, 1).astype(jnp.float32) for c in g)
    g2 = _slab_grad(lay, slab, a, g_lp, g_ent, g_v)
    dx, grads = _grads(lay, blocks, interpret, x, xp, weights, hs, g2)
    return dx, grads, None


def _slab_grad(lay: Layout, slab: jax.Array, a: jax.Array, g_lp: jax.Array, g_ent: jax.Array,
               g_v: jax.Array) -> jax.Array:
    """f32[N, out_pad]: the gradient of the heads' columns, from the slab of
    `_head_stats_tile` and the cotangents g_lp, g_ent, g_v f32[N, 1]: per head
    d log pi(a)/dx = onehot(a) - p, d H/dx = -p (log p + H); the value's column
    g_v; zeros in the padding (the heads' padded weights get no gradient)."""
    v = lay.out_cols - 1
    parts, c0 = [], 0
    for h, n in enumerate(lay.heads):
        logp = slab[:, c0:c0 + n]
        p = jnp.exp(logp)
        hit = (jnp.arange(n) == a[:, h:h + 1]).astype(jnp.float32)
        parts.append(g_lp * (hit - p) - g_ent * p * (logp + slab[:, v + 1 + h, None]))
        c0 += n
    pad = jnp.zeros((slab.shape[0], lay.out_pad - lay.out_cols), jnp.float32)
    return jnp.concatenate(parts + [g_v, pad], axis=1)


fused_head_stats.defvjp(_stats_fwd, _stats_bwd)


def pack(lay: Layout, torsos: Sequence[Sequence[tuple[jax.Array, jax.Array]]],
         policy: tuple[jax.Array, jax.Array], value: tuple[jax.Array, jax.Array]
         ) -> tuple[jax.Array, ...]:
    """`fused_mlp`'s weights from the model's float32 parameters (differentiable:
    gradients flow back to them): each torso's layers, then the heads as one
    [width, out_pad] kernel per tower (a shared torso: policy and value side by
    side; two towers: the actor's policy columns, the critic's value column)
    and one bias [out_pad] (logits, then the value, then zeros)."""
    a = policy[0].shape[1]
    pad = lay.out_pad - lay.out_cols

    def cols(k, at):  # k [width, c] placed at column `at` of out_pad
        return jnp.pad(k, ((0, 0), (at, lay.out_pad - at - k.shape[1])))

    flat = [p for torso in torsos for layer in torso for p in layer]
    if lay.towers == 1:
        heads = [cols(jnp.concatenate([policy[0], value[0]], 1), 0)]
    else:
        heads = [cols(policy[0], 0), cols(value[0], a)]
    bias = jnp.pad(jnp.concatenate([policy[1], value[1]]), (0, pad))
    return tuple(flat + heads + [bias])
