"""The hyperparameters that a sweep varies, as arrays inside the program.

`Hyper` holds a config's continuous hyperparameters that change no shape
(`SWEEPABLE`, and each policy group's learning rate) as ``f32[]`` arrays
carried in the runner state. One compiled program therefore trains any
values of them: ``jax.vmap`` over a stacked `Hyper` trains several settings
at once (``jaxwarp sweep``, docs/sweeps.md), and a plain run carries its
config's values the same way, so that a sweep's setting k runs the same
program as ``jaxwarp train`` with that setting.

The env's params that change no shape ride along the same way: `Hyper.env`
holds the env's Params words (``i32[W]``, `env_words`), which the rollout
passes to every reset and step (``params=``), so a sweep over
``env_params.<name>`` (`ENV_PREFIX`) is one program too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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
    # i32[W]: the env's Params words, what its resets and steps run with
    # (`env_words`); None for an env that takes no params as data.
    env: jax.Array | None = None

    @classmethod
    def of(cls, config: TrainConfig, groups: Iterable[str], env: Any = None,
           env_params: Any = None) -> Hyper:
        """`config`'s values for policy groups `groups`, and `env`'s Params
        words for its params dataclass `env_params` (None: the env's own)."""
        def f32(v: float) -> jax.Array:
            return jnp.asarray(v, jnp.float32)

        return cls(**{k: f32(getattr(config, k)) for k in SWEEPABLE},
                   lr={g: f32(config.policy(g).lr) for g in groups},
                   env=env_words(env, env_params))

    def grad_clip(self) -> jax.Array:
        """The bound for optax.clip_by_global_norm: max_grad_norm, or infinity
        where it is 0 (no gradient is then scaled: the clip is off)."""
        return jnp.where(self.max_grad_norm > 0, self.max_grad_norm, jnp.inf)


def takes_params(env: Any) -> bool:
    """Whether `env` (or the env a `ShardedEnv` wraps) runs its params as
    data: a contract env on the 'cpu' or 'cuda' backend."""
    return hasattr(env, "param_words") and getattr(env, "backend", None) in ("cpu", "cuda")


def env_words(env: Any, params: Any = None) -> jax.Array | None:
    """i32[W]: `env`'s Params words for `params` (None: its own), or None
    where the env takes no params as data (`takes_params`)."""
    if env is None or not takes_params(env):
        return None
    return jnp.asarray(env.param_words(params))


def sweepable_keys(groups: Iterable[str]) -> tuple[str, ...]:
    """The dotted config keys a sweep may vary for these policy groups."""
    return SWEEPABLE + tuple(f"policies.{g}.{k}" for g in groups for k in GROUP_SWEEPABLE)
