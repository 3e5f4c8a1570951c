"""The benchmark protocol of experiments/ (DESIGN.md, "Benchmark protocol").

Every comparison between a kernel and pure JAX makes each step's actions a
function of the previous step's observations. XLA deletes pure-JAX work whose
results nobody reads: in a scan whose observations are carried but never
read (unrolled, it keeps only the last unrolled step's), the pure-JAX env's
observation code is dropped, while a custom call always runs whole, so the
comparison would flatter pure JAX. With actions that read every element of
the observations, the next step (whose results the loop returns) depends on
all of them, and nothing can be dropped.

The actions are a cheap integer hash, far less work than any env step:
``protocol_actions(t, obs, nvec)`` hashes (step, index) and each agent's
observation row (its sum); ``protocol_actions(t, None, nvec, shape)`` hashes
(step, index) alone, for figures of a kernel alone (label them so).
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np


def _mix(h: jax.Array) -> jax.Array:
    h = (h ^ (h >> 15)) * np.uint32(2246822519)
    return h ^ (h >> 13)


def observation_signature(obs: jax.Array) -> jax.Array:
    """u32[envs, agents]: the bits of each agent's observation row sum (every
    element of ``obs``, f32[envs, agents, obs_dim] or f32[envs, obs_dim] for
    one agent, is read)."""
    rows = obs.astype(jnp.float32).sum(axis=-1)  # bf16 obs: summed in f32
    if rows.ndim == 1:
        rows = rows[:, None]
    return jax.lax.bitcast_convert_type(rows, jnp.uint32)


def protocol_actions(t: jax.Array, obs: jax.Array | None, nvec: Sequence[int],
                     shape: tuple[int, int] | None = None) -> jax.Array:
    """i32[envs, agents, heads] with head h in [0, nvec[h]).

    t: i32[] step index; obs: the previous step's observations (None: actions
    from the step index alone, the kernel-alone mode); shape: (envs, agents),
    needed only without obs.
    """
    nvec = np.asarray(nvec, np.uint32).reshape(-1)
    if obs is not None:
        sig = observation_signature(obs)
        shape = sig.shape
    elif shape is None:
        raise ValueError("protocol_actions: shape (envs, agents) is needed when obs is None")
    envs, agents = shape
    heads = nvec.shape[0]
    idx = jnp.arange(envs * agents * heads, dtype=jnp.uint32).reshape(envs, agents, heads)
    h = idx * np.uint32(2654435761) + jnp.asarray(t).astype(jnp.uint32) * np.uint32(40503)
    if obs is not None:
        h = h ^ (sig[..., None] * np.uint32(362437))
    h = _mix(h)
    return (h % jnp.asarray(nvec)).astype(jnp.int32)
