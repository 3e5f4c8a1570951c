"""The seeds of a run: ``--seeds S`` trains seeds ``seed .. seed + S - 1`` in one
program (vmap), each from ``jax.random.PRNGKey(seed + i)``.

`seed_keys` builds those keys in one vectorised call (a Python loop of
``PRNGKey`` calls took ~6 ms a seed: 58 s for 10,000 seeds, before anything
compiled), and `check_seeds` refuses a seed count outside ``[1, MAX_SEEDS]``
or one that runs past `SEED_LIMIT`, in one line naming ``seeds``.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp.train.config import MAX_SEEDS, SEED_LIMIT


def check_seeds(seed: int, seeds: int) -> None:
    """ValueError naming ``seeds`` unless it is in ``[1, MAX_SEEDS]`` with
    ``seed + seeds <= SEED_LIMIT`` (every seed a valid seed); TypeError unless
    it is an int."""
    if isinstance(seeds, (bool, np.bool_)) or not isinstance(seeds, (int, np.integer)):
        raise TypeError(f"seeds must be an int in [1, {MAX_SEEDS}]; got {type(seeds).__name__}")
    if not 1 <= seeds <= MAX_SEEDS:
        raise ValueError(f"seeds must be in [1, {MAX_SEEDS}] (seeds trained together in one "
                         f"program); got {seeds}")
    if seed + seeds > SEED_LIMIT:
        raise ValueError(f"seeds={seeds} with seed={seed} runs past the last seed 2**31 - 1; "
                         f"expected seed + seeds <= 2**31")


def seed_keys(seed: int, seeds: int) -> jax.Array:
    """``jnp.stack([jax.random.PRNGKey(seed + i) for i in range(seeds)])`` bit
    for bit (u32[seeds, 2] with the default PRNG), built in one vectorised
    call; `check_seeds` first."""
    check_seeds(seed, seeds)
    ids = np.arange(seed, seed + seeds, dtype=np.int64).astype(np.int32)  # < 2**31: exact
    return jax.vmap(jax.random.PRNGKey)(jnp.asarray(ids))


def member_keys(seed: int, seeds: int, settings: int = 0) -> np.ndarray:
    """The keys of a run's members as host data (the same on every process):
    `seed_keys` for a plain run (``settings`` 0), repeated once per setting
    for a sweep (member ``k * seeds + s``: setting k, seed ``seed + s``)."""
    return np.tile(np.asarray(seed_keys(seed, seeds)), (max(1, settings), 1))


def folded_vmap(run: Callable) -> Callable:
    """run (on arguments with a leading members axis) as a function that
    ``jax.vmap`` batches by folding the vmapped axis into the members axis
    (nested vmaps fold in turn): one call of run for every member, of every
    seed and sweep run, where a vmap of run would batch each of its ops."""
    @jax.custom_batching.custom_vmap
    def call(*args):
        return run(*args)

    @call.def_vmap
    def folded(axis_size, in_batched, *args):
        args = jax.tree.map(
            lambda a, batched: a if batched else jnp.broadcast_to(a, (axis_size, *a.shape)),
            args, tuple(in_batched))
        out = call(*jax.tree.map(lambda a: a.reshape(a.shape[0] * a.shape[1], *a.shape[2:]),
                                 args))
        return (jax.tree.map(lambda a: a.reshape(axis_size, a.shape[0] // axis_size,
                                                 *a.shape[1:]), out),
                jax.tree.map(lambda _: True, out))
    return call
