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
    run once over all T x B rows; the scan holds one matmul a step (the three
    recurrent projections concatenated). Returns (carry, outputs [T, ..., H])."""
    x = x.astype(jnp.float32)
    for i in range(len(hidden_sizes)):
        x = act(_dense(p[f"Dense_{i}"], x))
    cell = p["GRUCell_0"]  # flax.linen.GRUCell: gates ir/iz/in (+ bias), hr/hz, hn (+ bias)
    w_in = jnp.concatenate([cell[k]["kernel"] for k in ("ir", "iz", "in")], axis=-1)
    b_in = jnp.concatenate([cell[k]["bias"] for k in ("ir", "iz", "in")])
    w_rec = jnp.concatenate([cell[k]["kernel"] for k in ("hr", "hz", "hn")], axis=-1)
    xs = _dense({"kernel": w_in, "bias": b_in}, x)

    def step(h, inp):
        x_t, r_t = inp
        h = jnp.where(r_t[..., None], jnp.zeros_like(h), h)
        hs = _dense({"kernel": w_rec}, h)
        xr, xz, xn = jnp.split(x_t, 3, axis=-1)
        hr, hz, hn = jnp.split(hs, 3, axis=-1)
        r, z = nn.sigmoid(xr + hr), nn.sigmoid(xz + hz)
        n = jnp.tanh(xn + r * (hn + cell["hn"]["bias"]))
        h = (1.0 - z) * n + z * h
        return h, h

    return jax.lax.scan(step, carry, (xs, reset))


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


class GRUActorCritic(nn.Module):
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

    def initialize_carry(self, batch_shape: Sequence[int]) -> jax.Array:
        return jnp.zeros((*batch_shape, self.rnn_size), jnp.float32)

    @nn.compact
    def __call__(self, carry: jax.Array, obs: jax.Array, reset: jax.Array
                 ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        act = ACTIVATIONS[self.activation]
        carry, x = _gru_torso(carry, obs, reset, self.hidden_sizes, self.rnn_size, act)
        pi = act(nn.Dense(self.rnn_size, kernel_init=orthogonal(np.sqrt(2)))(x))
        logits = nn.Dense(int(sum(self.action_dims)), kernel_init=orthogonal(0.01))(pi)
        v = act(nn.Dense(self.rnn_size, kernel_init=orthogonal(np.sqrt(2)))(x))
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


class CentralGRUCritic(nn.Module):
    """A recurrent centralised critic (JaxMARL's MAPPO-RNN critic): an MLP
    embedding of the env's global state (``hidden_sizes``), a GRU cell
    (``rnn_size``), one hidden layer of ``rnn_size`` units and the value. It
    keeps the recurrent contract with one carry per env:
    ``carry, value = critic.apply(params, carry, state, reset)``, carry
    f32[..., rnn_size], state f32[..., S], reset bool[...] -> value f32[...]."""

    hidden_sizes: Sequence[int] = (128,)
    rnn_size: int = 128
    activation: str = "relu"

    def initialize_carry(self, batch_shape: Sequence[int]) -> jax.Array:
        return jnp.zeros((*batch_shape, self.rnn_size), jnp.float32)

    @nn.compact
    def __call__(self, carry: jax.Array, state: jax.Array, reset: jax.Array
                 ) -> tuple[jax.Array, jax.Array]:
        act = ACTIVATIONS[self.activation]
        carry, x = _gru_torso(carry, state, reset, self.hidden_sizes, self.rnn_size, act)
        v = act(nn.Dense(self.rnn_size, kernel_init=orthogonal(np.sqrt(2)))(x))
        return carry, jnp.squeeze(nn.Dense(1, kernel_init=orthogonal(1.0))(v), -1)

    def sequence(self, carry: jax.Array, state: jax.Array, reset: jax.Array
                 ) -> tuple[jax.Array, jax.Array]:
        """The sequence form: state f32[T, ..., S], reset bool[T, ...] -> value [T, ...]."""
        p, act, n = self.variables["params"], ACTIVATIONS[self.activation], len(self.hidden_sizes)
        carry, x = _gru_sequence(p, carry, state, reset, self.hidden_sizes, act)
        value = _dense(p[f"Dense_{n + 1}"], act(_dense(p[f"Dense_{n}"], x)))
        return carry, jnp.squeeze(value, -1)
