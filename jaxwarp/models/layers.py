"""What every shipped model shares: activations by name and the orthogonal
initialiser (PPO's usual one) made safe under `jax.vmap` over seeds."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu, "elu": nn.elu,
}


def orthogonal(scale: float) -> Callable[..., jax.Array]:
    """Flax's orthogonal initializer (the same values), whose QR runs one
    matrix at a time under `jax.vmap` (a `lax.map` over the batch).

    Batched over seeds, the QR would be one batched LAPACK call that splits
    its batch over XLA:CPU's intra-op thread pool and waits for it; two such
    calls running at once (two layers or groups initialised concurrently) on
    a pool of two threads wait for each other forever (seen on a 2-core CPU:
    ``jax.jit(jax.vmap(make_train(config)))`` hanging in ``lapack_sgeqrf``).
    """
    base = nn.initializers.orthogonal(scale)

    def init(key: jax.Array, shape: Sequence[int], dtype: Any = jnp.float32) -> jax.Array:
        @jax.custom_batching.custom_vmap
        def one(k):
            return base(k, shape, dtype)

        @one.def_vmap
        def _batched(axis_size, in_batched, k):
            return jax.lax.map(one, k), True

        return one(key)

    return init
