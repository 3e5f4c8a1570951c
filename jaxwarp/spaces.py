"""Observation and action spaces (gymnax-style, functional sampling).

Both check their arguments when built (a bad nvec or bounds is a ValueError
or TypeError here, not out-of-range samples later) and check the trailing
shape of what `contains` is given (shapes that merely broadcast, e.g.
``[..., 1]`` against two action heads, are a ValueError, not a silent True).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np


def _trailing(x: jax.Array, shape: tuple[int, ...], what: str) -> None:
    got = tuple(jnp.shape(x))
    if got[len(got) - len(shape):] != shape or len(got) < len(shape):
        raise ValueError(f"{what}.contains: expected an array of shape [..., "
                         f"{', '.join(map(str, shape))}]; got shape {got}")


@dataclasses.dataclass(frozen=True)
class Box:
    """Continuous space: `low <= x <= high` elementwise, per agent.

    Attributes:
        low: f32[shape] lower bounds (-inf allowed).
        high: f32[shape] upper bounds (inf allowed), ``low <= high``.
    """

    low: np.ndarray
    high: np.ndarray
    dtype: np.dtype = np.dtype(np.float32)

    def __post_init__(self) -> None:
        low, high = np.asarray(self.low), np.asarray(self.high)
        if low.shape != high.shape:
            raise ValueError(f"Box: low and high must have the same shape; got {low.shape} "
                             f"and {high.shape}")
        if not (low <= high).all():  # NaN bounds fail too
            raise ValueError(f"Box: expected low <= high (no NaN) everywhere; got low={low}, "
                             f"high={high}")

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.low.shape)

    def contains(self, x: jax.Array) -> jax.Array:
        """bool: every element of `x[..., *shape]` lies inside the bounds (NaN does not).

        Raises ValueError if x's trailing shape is not the space's shape."""
        x = x if hasattr(x, "dtype") else np.asarray(x)
        _trailing(x, self.shape, "Box")
        return jnp.all((x >= self.low) & (x <= self.high))


@dataclasses.dataclass(frozen=True)
class MultiDiscrete:
    """One categorical choice per action dimension: `0 <= a[d] < nvec[d]`.

    Attributes:
        nvec: number of choices per dimension: a tuple of 1 or more ints in
            [1, 2**31) (a list or 1-D integer array is accepted and stored as
            a tuple of Python ints, so the space stays hashable).
    """

    nvec: tuple[int, ...]
    dtype: np.dtype = np.dtype(np.int32)

    def __post_init__(self) -> None:
        nvec = self.nvec
        if isinstance(nvec, np.ndarray | jax.Array):
            if nvec.ndim != 1:
                raise ValueError(f"MultiDiscrete: nvec must be 1-D; got shape {nvec.shape}")
            nvec = np.asarray(nvec).tolist()
        if isinstance(nvec, str | bytes) or not isinstance(nvec, tuple | list | range):
            raise TypeError(f"MultiDiscrete: nvec must be a sequence of ints; got "
                            f"{type(nvec).__name__} {nvec!r}")
        for n in nvec:
            if isinstance(n, bool | np.bool_) or not isinstance(n, int | np.integer):
                raise TypeError(f"MultiDiscrete: nvec must hold ints; got {n!r} "
                                f"({type(n).__name__}) in {nvec!r}")
        if not nvec or not all(1 <= n < 2**31 for n in nvec):
            raise ValueError(f"MultiDiscrete: nvec must hold one or more ints in [1, 2**31) "
                             f"(choices per dimension); got {list(nvec)}")
        object.__setattr__(self, "nvec", tuple(int(n) for n in nvec))

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
        """bool: every action of `a[..., num_dims]` is an integer in range
        (an array of floats or bools is not in the space).

        Raises ValueError if a's last axis is not num_dims long."""
        a = a if hasattr(a, "dtype") else np.asarray(a)
        _trailing(a, self.shape, "MultiDiscrete")
        if not jnp.issubdtype(a.dtype, jnp.integer):
            return jnp.asarray(False)
        nvec = jnp.asarray(self.nvec, jnp.int32)
        return jnp.all((a >= 0) & (a < nvec))
