"""Recurrent models and their contract (docs/models.md).

A recurrent model defines ``initialize_carry(batch_shape)`` (the carry of a
fresh episode) and is called ``carry, (logits, value) = model.apply(params,
carry, obs, reset)``: one step, where reset bool[...] marks the entries whose
episode begins with obs (their carry is replaced by a fresh one first).

A model may also offer the *sequence form*, a method ``sequence(carry, obs,
reset)`` over a whole rollout: obs [T, ..., obs_dim], reset bool[T, ...] ->
``carry, (logits [T, ..., sum(nvec)], value [T, ...])``, the same function as
T steps of the step form, called as ``model.apply(params, carry, obs, reset,
method="sequence")``. The learner uses it where it exists (only the
recurrent cell is scanned; embeddings and heads are one matmul over all T x B
rows); a model without it is replayed step by step, which is slower.
Shipped: `GRUActorCritic` (JaxMARL's IPPO-RNN layout) and `CentralGRUCritic`
(MAPPO-RNN's critic).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp.models.layers import ACTIVATIONS, orthogonal


def is_recurrent(net: nn.Module) -> bool:
    """Whether `net` follows the recurrent model contract (it has
    ``initialize_carry``; docs/models.md)."""
    return callable(getattr(net, "initialize_carry", None))


def has_sequence(net: nn.Module) -> bool:
    """Whether recurrent `net` offers the sequence form (``sequence``)."""
    return callable(getattr(net, "sequence", None))


def _dense(p: dict, x: jax.Array) -> jax.Array:
    """`nn.Dense` (kernel and optional bias of `p`) on x [..., in]."""
    y = jax.lax.dot_general(x, p["kernel"], (((x.ndim - 1,), (0,)), ((), ())))
    return y + p["bias"] if "bias" in p else y


def _gru_sequence(p: dict, carry: jax.Array, x: jax.Array, reset: jax.Array,
                  hidden_sizes: Sequence[int], act: Callable[[jax.Array], jax.Array]
                  ) -> tuple[jax.Array, jax.Array]:
    """`_gru_torso` over a whole sequence from its parameters `p` (Dense_0..,
    GRUCell_0): x [T, ..., D], reset bool[T, ...], carry [..., H]. The
    embedding and the cell's input projections (its three gates as one matmul)
    run once over all T x B rows; the scan holds one matmul a step forward and
    one back (`gru_scan`). Returns (carry, outputs [T, ..., H])."""
    x = x.astype(jnp.float32)
    for i in range(len(hidden_sizes)):
        x = act(_dense(p[f"Dense_{i}"], x))
    cell = p["GRUCell_0"]  # flax.linen.GRUCell: gates ir/iz/in (+ bias), hr/hz, hn (+ bias)
    w_in = jnp.concatenate([cell[k]["kernel"] for k in ("ir", "iz", "in")], axis=-1)
    b_in = jnp.concatenate([cell[k]["bias"] for k in ("ir", "iz", "in")])
    w_rec = jnp.concatenate([cell[k]["kernel"] for k in ("hr", "hz", "hn")], axis=-1)
    xs = _dense({"kernel": w_in, "bias": b_in}, x)
    return gru_scan(xs, w_rec, cell["hn"]["bias"], carry, reset)


@jax.custom_vjp
def gru_scan(xs: jax.Array, w_rec: jax.Array, b_hn: jax.Array, h0: jax.Array,
             reset: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`flax.linen.GRUCell` scanned over xs f32[T, ..., 3H] (the gates' input
    projections, biases added, in the order r, z, n) from h0 f32[..., H], the
    carry zeroed first where reset bool[T, ...]; w_rec f32[H, 3H] the recurrent
    kernels (hr, hz, hn) side by side, b_hn f32[H]. Returns (h_T, h_1..T).

    Its gradient is written by hand: the backward scan holds one matmul a step
    (the carry's gradient) and the recurrent kernels' gradient is one matmul
    over all T x B rows after it, where autodiff of the scan would accumulate
    it step by step. Each step stacks two outputs (h; the gates r, z, n and
    hn + b side by side), and zeroes the next step's carry (or, back, its
    gradient) in its own elementwise pass: fewer, wider kernels a step. Both
    loops are `scan_batch_first`: vmapped over runs they index time in place
    (docs/decisions.md, "Recurrent models")."""
    return _gru_scan_fwd(xs, w_rec, b_hn, h0, reset)[0]


def _gru_step(x_t, h_in, reset_next, w_rec, b_hn):
    """One GRUCell step from a carry already reset: (the next step's carry,
    reset where reset_next; h; gates f32[..., 4H] = r, z, n, hn + b)."""
    xr, xz, xn = jnp.split(x_t, 3, axis=-1)
    hr, hz, hn = jnp.split(_dense({"kernel": w_rec}, h_in), 3, axis=-1)
    r, z, hnb = nn.sigmoid(xr + hr), nn.sigmoid(xz + hz), hn + b_hn
    n = jnp.tanh(xn + r * hnb)
    h = (1.0 - z) * n + z * h_in
    return _zero_where(reset_next, h), h, jnp.concatenate([r, z, n, hnb], axis=-1)


def _zero_where(reset: jax.Array, x: jax.Array) -> jax.Array:
    return jnp.where(reset[..., None], jnp.zeros_like(x), x)


def _next_resets(reset: jax.Array) -> jax.Array:
    """Step t's entry is reset[t + 1] (False for the last step)."""
    return jnp.concatenate([reset[1:], jnp.zeros_like(reset[:1])], axis=0)


def _gru_scan_fwd(xs, w_rec, b_hn, h0, reset):
    def step(h_in, inp, w_rec, b_hn):
        h_in, h, gates = _gru_step(inp[0], h_in, inp[1], w_rec, b_hn)
        return h_in, (h, gates)

    h_t, (ys, gates) = scan_batch_first(step, _zero_where(reset[0], h0),
                                        (xs, _next_resets(reset)), (w_rec, b_hn))
    return (h_t, ys), (ys, gates, h0, w_rec, reset)


def _gru_scan_bwd(res, cts):
    ys, gates, h0, w_rec, reset = res
    d_ht, d_ys = cts
    size = h0.shape[-1]
    # each step's carry after its reset, rebuilt from the outputs in one pass
    h_in = _zero_where(reset, jnp.concatenate([h0[None], ys[:-1]], axis=0))

    def step(c, inp, w_rec):
        # c: the gradient of the next step's carry before its reset, as its two
        # terms (through z, through the matmul), summed in this step's pass
        d_y, h_in_t, g_t, reset_next = inp
        r_t, z_t, n_t, hnb_t = jnp.split(g_t, 4, axis=-1)
        dh = _zero_where(reset_next, c[0] + c[1]) + d_y
        dn = dh * (1.0 - z_t) * (1.0 - n_t * n_t)  # through tanh
        dz = dh * (h_in_t - n_t) * z_t * (1.0 - z_t)  # through the sigmoid
        dr = dn * hnb_t * r_t * (1.0 - r_t)
        d_rec = jnp.concatenate([dr, dz, dn * r_t], axis=-1)  # of h_in @ w_rec
        d_mm = jax.lax.dot_general(d_rec, w_rec, (((d_rec.ndim - 1,), (1,)), ((), ())))
        return (dh * z_t, d_mm), jnp.concatenate([dr, dz, dn], axis=-1)

    (a, b), dxs = scan_batch_first(step, (d_ht, jnp.zeros_like(d_ht)),
                                   (d_ys, h_in, gates, _next_resets(reset)), (w_rec,), True)
    d_hn = dxs[..., 2 * size:] * gates[..., :size]  # dn * r: the gradient of hn + b
    d_rec = jnp.concatenate([dxs[..., :2 * size], d_hn], axis=-1)
    # one matmul over all T x B rows, contracting the rows (no transpose)
    d_w = jax.lax.dot_general(h_in.reshape(-1, size), d_rec.reshape(-1, 3 * size),
                              (((0,), (0,)), ((), ())))
    return dxs, d_w, d_hn.reshape(-1, size).sum(0), _zero_where(reset[0], a + b), None


gru_scan.defvjp(_gru_scan_fwd, _gru_scan_bwd)


def scan_batch_first(f: Callable, init, xs, consts: tuple = (), reverse: bool = False):
    """`jax.lax.scan(lambda c, x: f(c, x, *consts), init, xs, reverse=reverse)`
    whose rule under `jax.vmap` keeps the vmapped axis in front: init a pytree of
    carries, xs a pytree of arrays [T, ...], consts a tuple of pytrees; returns
    (carry, ys [T, ...]) as `lax.scan` does. f must close over no traced value
    (pass those as consts: a `custom_vmap` function may not close over a batched
    one). Forward only: it is not reverse-differentiable (`custom_vmap` has no
    transpose), so it runs inside a `custom_vjp`'s forward and backward.

    Under `vmap` (the trainer's seeds, a sweep's members) `lax.scan` moves the
    vmapped axis of every scanned input and output behind time: a transpose of
    each [runs, T, ...] array before the loop and after it. The rule here runs
    the step vmapped in a loop that reads step t as ``xs[:, t]`` and writes
    ``ys[:, t]`` in place: no transposes (one H200, IPPO-RNN at 1,024 x 32 with
    ten seeds, command buffers off: 1.08x an update on the wall clock, 1.05x in
    device time; docs/decisions.md, "Recurrent models")."""
    @jax.custom_batching.custom_vmap
    def run(consts, init, xs):
        return scan_with_consts(f, init, xs, consts, reverse)

    @run.def_vmap
    def rule(axis_size, in_batched, consts, init, xs):
        out = _loop_batch_first(f, axis_size, in_batched, consts, init, xs, reverse)
        return out, jax.tree.map(lambda _: True, out)

    return run(tuple(consts), init, xs)


def scan_with_consts(f: Callable, init, xs, consts: tuple = (), reverse: bool = False,
                     unroll: int = 1):
    """`jax.lax.scan(lambda c, x: f(c, x, *consts), init, xs, ...)`: `scan_batch_first`
    alone, with its signature (and differentiable, where it is not)."""
    return jax.lax.scan(lambda c, x: f(c, x, *consts), init, xs, reverse=reverse, unroll=unroll)


def _loop_batch_first(step, size, in_batched, consts, init, xs, reverse):
    """`scan_batch_first`'s vmap rule. Batched leaves are [size, ...] (xs':
    [size, T, ...]); the carry is broadcast to [size, ...] where it is not
    batched, unbatched xs and consts are read as they are. Returns (carry, ys
    [size, T, ...])."""
    c_b, i_b, x_b = in_batched

    def axes(flags):
        return jax.tree.map(lambda b: 0 if b else None, flags)

    init = jax.tree.map(lambda x, b: x if b else jnp.broadcast_to(x, (size, *jnp.shape(x))),
                        init, i_b)
    one = jax.vmap(lambda c, x, k: step(c, x, *k), in_axes=(0, axes(x_b), axes(c_b)))
    t_len = jax.tree.leaves(xs)[0].shape[1 if jax.tree.leaves(x_b)[0] else 0]

    def at(t):  # step t of each scanned input: time is axis 1 where batched
        return jax.tree.map(lambda x, b: jax.lax.dynamic_index_in_dim(
            x, t, 1 if b else 0, keepdims=False), xs, x_b)

    x_t = jax.tree.map(lambda x, b: jax.ShapeDtypeStruct(
        x.shape[:1] + x.shape[2:] if b else x.shape[1:], x.dtype), xs, x_b)
    ys = jax.tree.map(lambda y: jnp.zeros((size, t_len, *y.shape[1:]), y.dtype),
                      jax.eval_shape(one, init, x_t, consts)[1])

    def body(i, c):
        t = t_len - 1 - i if reverse else i
        carry, y = one(c[0], at(t), consts)
        return carry, jax.tree.map(
            lambda buf, v: jax.lax.dynamic_update_index_in_dim(buf, v, t, 1), c[1], y)

    if t_len == 0:  # no step to trace (dynamic_index_in_dim needs a step there)
        return init, ys
    return jax.lax.fori_loop(0, t_len, body, (init, ys))


def _gru_torso(carry: jax.Array, x: jax.Array, reset: jax.Array, hidden_sizes: Sequence[int],
               rnn_size: int, act: Callable[[jax.Array], jax.Array]
               ) -> tuple[jax.Array, jax.Array]:
    """Inside a recurrent module's compact call: the carry reset where `reset`,
    an MLP embedding of x (`hidden_sizes`) and a GRU cell of `rnn_size` units.
    Returns (carry, GRU output). The layers are created in the calling module
    (named Dense_0.., GRUCell_0 there, as if written inline)."""
    carry = jnp.where(reset[..., None], jnp.zeros_like(carry), carry)
    x = x.astype(jnp.float32)
    for w in hidden_sizes:
        x = act(nn.Dense(w, kernel_init=orthogonal(np.sqrt(2)))(x))
    # Flax's default recurrent initialiser (orthogonal) through `orthogonal`: the
    # same values, one QR per matrix under vmap over seeds (see `orthogonal`).
    return nn.GRUCell(rnn_size, recurrent_kernel_init=orthogonal(1.0))(carry, x)


class _ZeroCarry:
    """The shipped GRUs' fresh carry: zeros f32[*batch_shape, rnn_size]."""

    rnn_size: int

    def initialize_carry(self, batch_shape: Sequence[int]) -> jax.Array:
        return jnp.zeros((*batch_shape, self.rnn_size), jnp.float32)


class GRUActorCritic(_ZeroCarry, nn.Module):
    """A recurrent actor-critic (JaxMARL's IPPO-RNN layout): an MLP embedding
    of the observation (``hidden_sizes``), a GRU cell (Flax's `nn.GRUCell`,
    ``rnn_size`` units), then a policy head and a value head, each one hidden
    layer of ``rnn_size`` units.

    The recurrent model contract (docs/models.md): ``initialize_carry(batch_shape)``
    gives the carry of a fresh episode (here f32[*batch_shape, rnn_size] zeros),
    and ``carry, (logits, value) = model.apply(params, carry, obs, reset)``
    advances one step, where obs is f32[..., obs_dim] and reset bool[...] marks
    the entries whose episode begins with this obs (their carry is replaced by
    a fresh one first).
    """

    action_dims: Sequence[int]
    hidden_sizes: Sequence[int] = (128,)
    rnn_size: int = 128
    activation: str = "relu"

    @nn.compact
    def __call__(self, carry: jax.Array, obs: jax.Array, reset: jax.Array
                 ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        act = ACTIVATIONS[self.activation]
        carry, x = _gru_torso(carry, obs, reset, self.hidden_sizes, self.rnn_size, act)
        # The heads' hidden layers start at gain 2, as in JaxMARL's IPPO-RNN and
        # MAPPO-RNN (its published baselines), not the torso's sqrt(2).
        pi = act(nn.Dense(self.rnn_size, kernel_init=orthogonal(2.0))(x))
        logits = nn.Dense(int(sum(self.action_dims)), kernel_init=orthogonal(0.01))(pi)
        v = act(nn.Dense(self.rnn_size, kernel_init=orthogonal(2.0))(x))
        value = nn.Dense(1, kernel_init=orthogonal(1.0))(v)
        return carry, (logits, jnp.squeeze(value, -1))

    def sequence(self, carry: jax.Array, obs: jax.Array, reset: jax.Array
                 ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        """The sequence form: obs f32[T, ..., obs_dim], reset bool[T, ...]."""
        p, act, n = self.variables["params"], ACTIVATIONS[self.activation], len(self.hidden_sizes)
        carry, x = _gru_sequence(p, carry, obs, reset, self.hidden_sizes, act)
        logits = _dense(p[f"Dense_{n + 1}"], act(_dense(p[f"Dense_{n}"], x)))
        value = _dense(p[f"Dense_{n + 3}"], act(_dense(p[f"Dense_{n + 2}"], x)))
        return carry, (logits, jnp.squeeze(value, -1))


class CentralGRUCritic(_ZeroCarry, nn.Module):
    """A recurrent centralised critic (JaxMARL's MAPPO-RNN critic): an MLP
    embedding of the env's global state (``hidden_sizes``), a GRU cell
    (``rnn_size``), one hidden layer of ``rnn_size`` units and the value. It
    keeps the recurrent contract with one carry per env:
    ``carry, value = critic.apply(params, carry, state, reset)``, carry
    f32[..., rnn_size], state f32[..., S], reset bool[...] -> value f32[...]."""

    hidden_sizes: Sequence[int] = (128,)
    rnn_size: int = 128
    activation: str = "relu"

    @nn.compact
    def __call__(self, carry: jax.Array, state: jax.Array, reset: jax.Array
                 ) -> tuple[jax.Array, jax.Array]:
        act = ACTIVATIONS[self.activation]
        carry, x = _gru_torso(carry, state, reset, self.hidden_sizes, self.rnn_size, act)
        v = act(nn.Dense(self.rnn_size, kernel_init=orthogonal(2.0))(x))  # JaxMARL's gain
        return carry, jnp.squeeze(nn.Dense(1, kernel_init=orthogonal(1.0))(v), -1)

    def sequence(self, carry: jax.Array, state: jax.Array, reset: jax.Array
                 ) -> tuple[jax.Array, jax.Array]:
        """The sequence form: state f32[T, ..., S], reset bool[T, ...] -> value [T, ...]."""
        p, act, n = self.variables["params"], ACTIVATIONS[self.activation], len(self.hidden_sizes)
        carry, x = _gru_sequence(p, carry, state, reset, self.hidden_sizes, act)
        value = _dense(p[f"Dense_{n + 1}"], act(_dense(p[f"Dense_{n}"], x)))
        return carry, jnp.squeeze(value, -1)
