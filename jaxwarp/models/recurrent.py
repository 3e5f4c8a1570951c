"""Recurrent models and their contract (docs/models.md).

A recurrent model defines ``initialize_carry(batch_shape)`` (the carry of a
fresh episode) and is called ``carry, (logits, value) = model.apply(params,
carry, obs, reset)``: one step, where reset bool[...] marks the entries whose
episode begins with obs (their carry is replaced by a fresh one first).
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
