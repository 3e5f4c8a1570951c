"""Policy groups and the policy forward pass over all of an env's agents.

An env's agents are split into policy groups (Tag: ``tagger`` and
``runner``); each group has its own Flax model whose parameters its agents
share. `Groups` cuts a group's agents out of an ``[..., agents, ...]`` array
and puts the groups' outputs back in agent order; `Policy` runs every
group's model on its agents' observations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp.train import core


def _contiguous(ids: np.ndarray) -> bool:
    return len(ids) > 0 and np.array_equal(ids, np.arange(ids[0], ids[0] + len(ids)))


class Groups(NamedTuple):
    """Policy group name -> agent ids (i64[n]), a partition of 0..agents-1."""

    ids: dict[str, np.ndarray]
    inverse: np.ndarray | None  # agent order -> concatenated-group order; None: identity

    @classmethod
    def of(cls, env: Any) -> Groups:
        """The env's ``policy_groups`` (one group ``agent`` of every agent if it
        declares none)."""
        ids = {g: np.asarray(a) for g, a in dict(getattr(env, "policy_groups", None)
                                                 or {"agent": np.arange(env.num_agents)}).items()}
        order = np.concatenate(list(ids.values()))
        if sorted(order.tolist()) != list(range(env.num_agents)):
            raise ValueError("policy groups must partition the agent ids 0..num_agents-1")
        inverse = None if np.array_equal(order, np.arange(env.num_agents)) else np.argsort(order)
        return cls(ids, inverse)

    def select(self, x: jax.Array, g: str, axis: int) -> jax.Array:
        """Group g's agents of x along `axis` (a slice where its ids are contiguous)."""
        ids = self.ids[g]
        if _contiguous(ids):
            return jax.lax.slice_in_dim(x, int(ids[0]), int(ids[0]) + len(ids), axis=axis)
        return jnp.take(x, jnp.asarray(ids), axis=axis)

    def join(self, parts: Sequence[jax.Array]) -> jax.Array:
        """Per-group arrays [envs, agents_in_group, ...] (in group order) ->
        [envs, agents, ...] in agent order."""
        x = jnp.concatenate(list(parts), axis=1)
        return x if self.inverse is None else x[:, self.inverse]


class Policy(NamedTuple):
    """The groups' models: ``logits, value = policy(params, stats, obs)``."""

    groups: Groups
    nets: dict[str, nn.Module]
    nvec: tuple[int, ...]
    normalize_obs: bool

    def forward(self, g: str, params: Any, stats: core.RunningStats | None,
                obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Group g's model on its agents' obs f32/bf16[..., obs_dim] (normalised
        by `stats` where the config asks): (logits f32[..., sum(nvec)],
        value f32[...])."""
        if self.normalize_obs:
            obs = stats.normalize(obs)
        return self.nets[g].apply(params, obs)

    def __call__(self, params: Mapping[str, Any], stats: Mapping[str, core.RunningStats],
                 obs: jax.Array, trained: Mapping[str, bool] | None = None
                 ) -> tuple[jax.Array, jax.Array]:
        """obs f32[envs, agents, D] -> (logits f32[envs, agents, sum(nvec)],
        value f32[envs, agents]). trained: group -> False plays that group
        uniformly at random (zero logits and values; `jaxwarp eval`); None:
        every group's own model, as in training."""
        def out(g: str) -> tuple[jax.Array, jax.Array]:
            obs_g = self.groups.select(obs, g, 1)
            if trained is None or trained[g]:
                return self.forward(g, params[g], stats.get(g), obs_g)
            return (jnp.zeros(obs_g.shape[:2] + (sum(self.nvec),), jnp.float32),
                    jnp.zeros(obs_g.shape[:2], jnp.float32))

        outs = [out(g) for g in self.groups.ids]
        return self.groups.join([o[0] for o in outs]), self.groups.join([o[1] for o in outs])
