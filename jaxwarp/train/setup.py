"""A run's policy and sampler from its config, checked before anything compiles.

Every policy group's model (the caller's, else the config's ``model``) and
the centralised critics as one `Policy` (whose models `policy.param_init`
checks against the contract of docs/models.md), the width of the env's
global state the critics read, the minibatch layout the learner replays the
models in, and the action sampler. The env and the data-parallel mesh they
run on come from `environment` and `mesh`. Every bad choice is a
`ConfigError` naming the config key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from jaxwarp import sharding
from jaxwarp.core import resolve_backend
from jaxwarp.models import (CentralCritic, CentralGRUCritic, MLPActorCritic, is_recurrent,
                            make_model)
from jaxwarp.sampler import sample_on
from jaxwarp.train.config import ConfigError, TrainConfig
from jaxwarp.train.policy import Groups, Policy
from jaxwarp.train.rollout import Sampler


def group_models(c: TrainConfig, env: Any, groups: Groups, models: Mapping[str, nn.Module] | None,
            nvec: tuple[int, ...], mesh: Mesh | None) -> dict[str, nn.Module]:
    """Group -> Flax module: `models`' entry, else the config's ``model``."""
    for name in dict(c.policies):
        if name not in groups.ids:
            raise ConfigError(f"policies.{name}: {c.env} has no policy group {name!r}; "
                              f"its groups are {sorted(groups.ids)}")
    for name in (models or {}):
        if name not in groups.ids:
            raise ConfigError(f"models: {c.env} has no policy group {name!r}; "
                              f"its groups are {sorted(groups.ids)}")
    nets = {g: (models or {}).get(g) or make_model(c.policy(g).model, nvec, c.policy(g), g)
            for g in groups.ids}
    if mesh is not None:  # envs split over devices: no row blocks (see fused_linear)
        nets = {g: m.clone(row_blocks=False) if isinstance(m, MLPActorCritic) else m
                for g, m in nets.items()}
    return nets


def make_policy(c: TrainConfig, env: Any, groups: Groups, nets: dict[str, nn.Module],
            nvec: tuple[int, ...]) -> Policy:
    """The groups' models (and centralised critics) as one `Policy`; a
    ConfigError where the minibatch layout cannot replay a recurrent model."""
    policy = Policy.of(groups, nets, nvec, c.normalize_obs, _critics(c, env, groups, nets))
    if c.minibatch_layout == "samples" and c.algorithm == "ppo" and policy.recurrent:
        raise ConfigError(f"minibatch_layout=samples: group(s) {list(policy.recurrent)} have a "
                          "recurrent model, whose minibatches must be whole env sequences; "
                          "use minibatch_layout=envs")
    return policy


def _critics(c: TrainConfig, env: Any, groups: Groups, nets: Mapping[str, nn.Module]
             ) -> dict[str, nn.Module] | None:
    """Group -> centralised critic (``critic: centralised``) over the env's
    global state: an MLP of the group's hidden sizes, or where the group's
    model is recurrent a GRU critic of its ``hidden_sizes`` and ``rnn_size``
    (MAPPO-RNN); None: each model's own value."""
    if c.critic != "centralised":
        return None
    if not getattr(env, "has_global_state", False):
        raise ConfigError(f"critic=centralised: {c.env} declares no global state for a "
                          f"centralised critic to read (EnvSpec.global_state); use "
                          f"critic=independent")
    def critic(g: str) -> nn.Module:
        p = c.policy(g)
        if is_recurrent(nets[g]):
            return CentralGRUCritic(tuple(p.hidden_sizes), p.rnn_size, p.activation)
        return CentralCritic(tuple(p.hidden_sizes), p.activation)

    return {g: critic(g) for g in groups.ids}


def state_dim(env: Any) -> int:
    """S of the env's global state f32[envs, S] (from shapes only)."""
    def one(key):
        obs, state = env.reset(key, 1)
        return env.global_state(obs, state)

    return int(jax.eval_shape(one, jax.ShapeDtypeStruct((2,), jnp.uint32)).shape[-1])


def sample_minibatches(c: TrainConfig, policy: Policy) -> bool:
    """Whether PPO's minibatches are single steps (``minibatch_layout``; ``auto``:
    where no group is recurrent) rather than whole env sequences."""
    if c.minibatch_layout == "auto":
        return c.algorithm == "ppo" and not policy.recurrent
    return c.minibatch_layout == "samples"


def make_sampler(c: TrainConfig, env: Any, nvec: tuple[int, ...], mesh: Mesh | None
                 ) -> tuple[str, Sampler]:
    """The action sampler's backend ("jax" | "cpu" | "cuda": the config's
    ``sampler``, for ``auto`` the env's own backend), resolved once, and the
    sampler that draws on it. Every sampler draws by global row (the kernel
    samplers take the shard's row offset through their partitioning rule):
    the same actions on any device count, so the fused kernel sampler stays
    on over several devices."""
    backend = resolve_backend(env.backend if c.sampler == "auto" else c.sampler)
    if mesh is None:
        return backend, lambda key, logits: sample_on(key, logits, nvec, backend)
    return backend, lambda key, logits: sharding.sample_actions(key, logits, nvec, mesh, "envs",
                                                                backend=backend)
