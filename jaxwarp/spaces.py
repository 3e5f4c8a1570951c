"""Observation and action spaces (gymnax-style, functional sampling)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class Box:
    """Continuous space: `low <= x <= high` elementwise, per agent.

    Attributes:
        low: f32[shape] lower bounds.
        high: f32[shape] upper bounds.
    """

    low: np.ndarray
    high: np.ndarray
    dtype: np.dtype = np.dtype(np.float32)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.low.shape)

    def contains(self, x: jax.Array) -> jax.Array:
        """bool: every element of `x[..., *shape]` lies inside the bounds."""
        return jnp.all((x >= self.low) & (x <= self.high))


@dataclasses.dataclass(frozen=True)
class MultiDiscrete:
    """One categorical choice per action dimension: `0 <= a[d] < nvec[d]`.

    Attributes:
        nvec: i32[num_dims] number of choices per dimension.
    """

    nvec: tuple[int, ...]
    dtype: np.dtype = np.dtype(np.int32)

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.nvec),)

    def sample(self, key: jax.Array, batch_shape: tuple[int, ...] = ()) -> jax.Array:
        """Uniform actions: i32[*batch_shape, num_dims]."""
        keys = jax.random.split(key, len(self.nvec))
        cols = [
            jax.random.randint(k, batch_shape, 0, n, dtype=jnp.int32)
            for k, n in zip(keys, self.nvec)
        ]
        return jnp.stack(cols, axis=-1)

    def contains(self, a: jax.Array) -> jax.Array:
        """bool: every action of `a[..., num_dims]` is in range."""
        nvec = jnp.asarray(self.nvec, jnp.int32)
        return jnp.all((a >= 0) & (a < nvec))
