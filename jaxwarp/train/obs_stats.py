"""Running statistics of a policy group's observations (`RunningStats`).

Where the config asks (``normalize_obs``), `policy.Policy.forward` normalises a
group's observations by them, the learner merges each rollout's observations
into them (`learn.learn`), and a run starts them at mean 0, variance 1
(`state.init_state`); they ride in the learner's state (`learn.LearnerState`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class RunningStats:
    """Running mean/variance of observations f32[..., obs_dim] (parallel
    Welford merge)."""

    mean: jax.Array  # f32[obs_dim]
    var: jax.Array  # f32[obs_dim]
    count: jax.Array  # f32[]

    @classmethod
    def create(cls, obs_dim: int) -> RunningStats:
        """Fresh statistics: mean 0, variance 1 (they normalise nothing yet)."""
        return cls(jnp.zeros(obs_dim, jnp.float32), jnp.ones(obs_dim, jnp.float32),
                   jnp.asarray(1e-4, jnp.float32))

    def update(self, obs: jax.Array) -> RunningStats:
        """Merges a batch obs: f32 or bf16[..., obs_dim]."""
        x = obs.reshape(-1, obs.shape[-1]).astype(jnp.float32)  # bf16 obs: f32 moments
        n = jnp.asarray(x.shape[0], jnp.float32)
        b_mean, b_var = x.mean(0), x.var(0)
        total = self.count + n
        delta = b_mean - self.mean
        mean = self.mean + delta * n / total
        m2 = self.var * self.count + b_var * n + jnp.square(delta) * self.count * n / total
        return RunningStats(mean, m2 / total, total)

    def normalize(self, obs: jax.Array) -> jax.Array:
        """obs f32[..., obs_dim] standardised, clipped to [-10, 10]."""
        return jnp.clip((obs - self.mean) / jnp.sqrt(self.var + 1e-8), -10.0, 10.0)
