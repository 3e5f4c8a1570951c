"""Variants of `jaxwarp.models.recurrent.gru_scan` under measurement (the same
function and signature: xs f32[T, ..., 3H], w_rec f32[H, 3H], b_hn f32[H],
h0 f32[..., H], reset bool[T, ...] -> (h_T, h_1..T)), patched in by
`tools/peer_profile.py`'s markers ``@lean_scan``, ``@indexed_scan``,
``@folded_scan``, ``@unrollK`` (K = 2, 4, 8, 32) and ``@seed_major``.

* `lean`: the forward scan stacks two outputs a step (h and the gates r, z, n,
  hn + b as one [.., 4H] row) where the shipped one stacks six (h, the carry
  after its reset, r, z, n, hn + b); the backward rebuilds the reset carries from
  h0 and the outputs in one pass, stacks one output a step (the gates' input
  gradient) and forms the recurrent kernels' gradient after the scan. The same
  arithmetic, fewer and wider writes.
* `indexed`: `lean` as `fori_loop`s that read and write the time axis by
  `dynamic_slice` / `dynamic_update_slice` on carried buffers. Under `vmap` (seeds)
  `lax.scan` moves the batch axis of every scanned input and output behind time
  (a transpose of each [seeds, T, B, ...] array); an indexed loop slices the
  batched arrays where they lie.
* `folded`: `lean` with each step's reset of the carry (a select) done in the
  step before's elementwise pass, forward and back: one kernel a step fewer in
  each direction. Measured best and shipped as `gru_scan` (its code is there);
  ``@folded_scan`` is the shipped function with its loops plain `lax.scan`s.
* `unrolled(k)`: the shipped scan with both loops `lax.scan`s unrolled k steps
  (issue item: "try unroll on the cell's scan"). XLA sees k steps in one loop
  body and may fuse one step's elementwise tail with the next step's matmul
  epilogue; the price is a k-times larger body to compile.
* ``@seed_major``: `folded` with its loops `recurrent.scan_batch_first`, a scan
  whose vmap rule keeps the vmapped (seeds) axis in front: a `fori_loop` over
  time that reads step t as ``xs[:, t]`` and writes ``ys[:, t]`` in place, the
  step itself vmapped. Under `vmap`, `lax.scan` instead moves the seed axis of
  every scanned input and output behind time (transposes of each
  [seeds, T, B, ...] array, ~1.5 of each 12.6 ms minibatch pass at 1,024 x 32 x
  10 seeds); `indexed` avoided them but vmap turned its writes into scatters.
  Measured best and shipped: the marker names the shipped `gru_scan`.
"""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp
from flax import linen as nn

from jaxwarp.models import recurrent

_SHIPPED_LOOP = recurrent.scan_batch_first


def _cell(x_t, h, reset_t, w_rec, b_hn):
    """One GRUCell step: (h_new, h_in, gates [.., 4H] = r, z, n, hn + b)."""
    h_in = jnp.where(reset_t[..., None], jnp.zeros_like(h), h)
    xr, xz, xn = jnp.split(x_t, 3, axis=-1)
    rec = jax.lax.dot_general(h_in, w_rec, (((h_in.ndim - 1,), (0,)), ((), ())))
    hr, hz, hn = jnp.split(rec, 3, axis=-1)
    r, z, hnb = nn.sigmoid(xr + hr), nn.sigmoid(xz + hz), hn + b_hn
    n = jnp.tanh(xn + r * hnb)
    return (1.0 - z) * n + z * h_in, jnp.concatenate([r, z, n, hnb], axis=-1)


def _cell_bwd(dh, d_y, h_in_t, g_t, reset_t, w_rec):
    """The step's backward: (dh_prev, gradient of the gates' inputs [.., 3H])."""
    r_t, z_t, n_t, hnb_t = jnp.split(g_t, 4, axis=-1)
    dh = dh + d_y
    dn = dh * (1.0 - z_t) * (1.0 - n_t * n_t)
    dz = dh * (h_in_t - n_t) * z_t * (1.0 - z_t)
    dr = dn * hnb_t * r_t * (1.0 - r_t)
    d_rec = jnp.concatenate([dr, dz, dn * r_t], axis=-1)
    dh_in = dh * z_t + jax.lax.dot_general(d_rec, w_rec, (((d_rec.ndim - 1,), (1,)), ((), ())))
    return jnp.where(reset_t[..., None], jnp.zeros_like(dh_in), dh_in), jnp.concatenate(
        [dr, dz, dn], axis=-1)


def _reset_carries(ys, h0, reset):
    """The carry each step started from, after its reset: f32[T, ..., H]."""
    prev = jnp.concatenate([h0[None], ys[:-1]], axis=0)
    return jnp.where(reset[..., None], jnp.zeros_like(prev), prev)


def _weight_grads(h_in, gates, dxs):
    size = h_in.shape[-1]
    d_hn = dxs[..., 2 * size:] * gates[..., :size]  # dn * r
    d_rec = jnp.concatenate([dxs[..., :2 * size], d_hn], axis=-1)
    d_w = h_in.reshape(-1, size).T @ d_rec.reshape(-1, 3 * size)
    return d_w, d_hn.reshape(-1, size).sum(0)


@jax.custom_vjp
def lean(xs, w_rec, b_hn, h0, reset):
    return _lean_fwd(xs, w_rec, b_hn, h0, reset)[0]


def _lean_fwd(xs, w_rec, b_hn, h0, reset):
    def step(h, inp):
        h, g = _cell(inp[0], h, inp[1], w_rec, b_hn)
        return h, (h, g)

    h_t, (ys, gates) = jax.lax.scan(step, h0, (xs, reset))
    return (h_t, ys), (ys, gates, h0, w_rec, reset)


def _lean_bwd(res, cts):
    ys, gates, h0, w_rec, reset = res
    d_ht, d_ys = cts
    h_in = _reset_carries(ys, h0, reset)

    def step(dh, inp):
        return _cell_bwd(dh, *inp, w_rec)

    dh0, dxs = jax.lax.scan(step, d_ht, (d_ys, h_in, gates, reset), reverse=True)
    d_w, d_b = _weight_grads(h_in, gates, dxs)
    return dxs, d_w, d_b, dh0, None


lean.defvjp(_lean_fwd, _lean_bwd)


def _at(x, t):
    return jax.lax.dynamic_index_in_dim(x, t, 0, keepdims=False)


def _put(buf, x, t):
    return jax.lax.dynamic_update_index_in_dim(buf, x, t, 0)


@jax.custom_vjp
def indexed(xs, w_rec, b_hn, h0, reset):
    return _indexed_fwd(xs, w_rec, b_hn, h0, reset)[0]


def _indexed_fwd(xs, w_rec, b_hn, h0, reset):
    t_len, size = xs.shape[0], h0.shape[-1]
    ys = jnp.zeros((t_len, *h0.shape), jnp.float32)
    gates = jnp.zeros((t_len, *h0.shape[:-1], 4 * size), jnp.float32)

    def body(t, c):
        h, ys, gates = c
        h, g = _cell(_at(xs, t), h, _at(reset, t), w_rec, b_hn)
        return h, _put(ys, h, t), _put(gates, g, t)

    h_t, ys, gates = jax.lax.fori_loop(0, t_len, body, (h0, ys, gates))
    return (h_t, ys), (ys, gates, h0, w_rec, reset)


def _indexed_bwd(res, cts):
    ys, gates, h0, w_rec, reset = res
    d_ht, d_ys = cts
    t_len = ys.shape[0]
    h_in = _reset_carries(ys, h0, reset)
    dxs = jnp.zeros((*gates.shape[:-1], 3 * h0.shape[-1]), jnp.float32)

    def body(i, c):
        dh, dxs = c
        t = t_len - 1 - i
        dh, dx = _cell_bwd(dh, _at(d_ys, t), _at(h_in, t), _at(gates, t), _at(reset, t), w_rec)
        return dh, _put(dxs, dx, t)

    dh0, dxs = jax.lax.fori_loop(0, t_len, body, (d_ht, dxs))
    d_w, d_b = _weight_grads(h_in, gates, dxs)
    return dxs, d_w, d_b, dh0, None


indexed.defvjp(_indexed_fwd, _indexed_bwd)


def _with_scan(scan_fn, name: str):
    """The shipped `gru_scan` (its forward and backward as written there) with
    its loops (`recurrent.scan_batch_first`) replaced by scan_fn."""
    @contextlib.contextmanager
    def patched():
        recurrent.scan_batch_first = scan_fn
        try:
            yield
        finally:
            recurrent.scan_batch_first = _SHIPPED_LOOP

    def fwd(*args):
        with patched():
            return recurrent._gru_scan_fwd(*args)

    def bwd(res, cts):
        with patched():
            return recurrent._gru_scan_bwd(res, cts)

    @jax.custom_vjp
    def scan(xs, w_rec, b_hn, h0, reset):
        return fwd(xs, w_rec, b_hn, h0, reset)[0]

    scan.defvjp(fwd, bwd)
    scan.__name__ = name
    return scan


def unrolled(k: int):
    """The shipped `gru_scan` with its loops `lax.scan`s unrolled k steps."""
    return _with_scan(functools.partial(recurrent.scan_with_consts, unroll=k), f"unrolled{k}")


# the scan as shipped before its loops kept vmap's axis in front
folded = _with_scan(recurrent.scan_with_consts, "folded")


VARIANTS = {"@lean_scan": lean, "@indexed_scan": indexed, "@folded_scan": folded,
            **{f"@unroll{k}": unrolled(k) for k in (2, 4, 8, 32)},
            "@seed_major": recurrent.gru_scan}
