"""The hyperparameters that a sweep varies, as arrays inside the program.

`Hyper` holds a config's continuous hyperparameters that change no shape
(`SWEEPABLE`, and each policy group's learning rate) as ``f32[]`` arrays
carried in the runner state. One compiled program therefore trains any
values of them: ``jax.vmap`` over a stacked `Hyper` trains several settings
at once (``jaxwarp sweep``, docs/sweeps.md), and a plain run carries its
config's values the same way, so that a sweep's setting k runs the same
program as ``jaxwarp train`` with that setting.
"""

from __future__ import annotations

from collections.abc import Iterable

import jax
import jax.numpy as jnp
from flax import struct

from jaxwarp.train.config import TrainConfig

# TrainConfig's top-level fields a sweep may vary (besides policies.<group>.lr).
SWEEPABLE = ("gamma", "gae_lambda", "clip_eps", "ent_coef", "vf_coef", "max_grad_norm")
# PolicyConfig's fields a sweep may vary, per group (policies.<group>.<field>).
GROUP_SWEEPABLE = ("lr",)


@struct.dataclass
class Hyper:
    """The run's sweepable hyperparameters, each f32[] (a leading axis when
    stacked for a sweep)."""

    gamma: jax.Array  # discount
    gae_lambda: jax.Array  # GAE lambda
    clip_eps: jax.Array  # PPO's ratio (and value) clip
    ent_coef: jax.Array  # entropy bonus weight
    vf_coef: jax.Array  # value loss weight
    max_grad_norm: jax.Array  # global gradient-norm clip; 0 disables it
    lr: dict[str, jax.Array]  # group -> Adam's learning rate (before annealing)

    @classmethod
    def of(cls, config: TrainConfig, groups: Iterable[str]) -> Hyper:
        """`config`'s values for policy groups `groups`."""
        def f32(v: float) -> jax.Array:
            return jnp.asarray(v, jnp.float32)

        return cls(**{k: f32(getattr(config, k)) for k in SWEEPABLE},
                   lr={g: f32(config.policy(g).lr) for g in groups})

    def grad_clip(self) -> jax.Array:
        """The bound for optax.clip_by_global_norm: max_grad_norm, or infinity
        where it is 0 (no gradient is then scaled: the clip is off)."""
        return jnp.where(self.max_grad_norm > 0, self.max_grad_norm, jnp.inf)


def sweepable_keys(groups: Iterable[str]) -> tuple[str, ...]:
    """The dotted config keys a sweep may vary for these policy groups."""
    return SWEEPABLE + tuple(f"policies.{g}.{k}" for g in groups for k in GROUP_SWEEPABLE)
