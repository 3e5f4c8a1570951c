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

from jaxwarp.models.recurrent import has_sequence, is_recurrent
from jaxwarp.train import losses


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
    """The groups' models: ``carry, logits, value = policy.step(...)``.

    A group's model is feed-forward (``logits, value = net.apply(p, obs)``) or
    recurrent (``carry, (logits, value) = net.apply(p, carry, obs, reset)``,
    with ``net.initialize_carry(batch_shape)``). With a centralised critic
    (`critics` holds the group's critic module) the group's parameters are
    ``{"actor": ..., "critic": ...}`` and the value is the critic's, read
    from the env's global state f32[..., S] (one per env) instead of the
    actor's own value. A recurrent critic (``carry, value = critic.apply(p,
    carry, state, reset)``, one carry per env) makes the group's carry
    ``{"actor": ..., "critic": ...}`` too.
    """

    groups: Groups
    nets: dict[str, nn.Module]
    nvec: tuple[int, ...]
    normalize_obs: bool
    critics: dict[str, nn.Module] | None  # group -> centralised critic; None: own value
    recurrent: tuple[str, ...]  # the groups whose model carries a state from step to step
    recurrent_critics: tuple[str, ...]  # the groups whose centralised critic carries one

    @classmethod
    def of(cls, groups: Groups, nets: dict[str, nn.Module], nvec: tuple[int, ...],
           normalize_obs: bool, critics: dict[str, nn.Module] | None = None) -> Policy:
        """The policy of these models (and critics), which of them are
        recurrent told once."""
        return cls(groups, nets, nvec, normalize_obs, critics,
                   tuple(g for g in groups.ids if is_recurrent(nets[g])),
                   tuple(g for g in groups.ids if critics is not None
                         and is_recurrent(critics[g])))

    def critic_recurrent(self, g: str) -> bool:
        """Whether group g's centralised critic carries a state (one per env)."""
        return g in self.recurrent_critics

    def sequence_form(self, g: str) -> bool:
        """Whether recurrent group g's learner runs the sequence form (its model
        and its recurrent critic, if any, offer ``sequence``; docs/models.md)."""
        critic_ok = not self.critic_recurrent(g) or has_sequence(self.critics[g])
        return has_sequence(self.nets[g]) and critic_ok

    def group_carry(self, g: str, num_envs: int) -> Any:
        """Recurrent group g's fresh carry: its model's, leaves [num_envs,
        agents_in_group, ...]; with a recurrent critic ``{"actor": that,
        "critic": leaves [num_envs, ...]}``."""
        actor = self.nets[g].initialize_carry((num_envs, len(self.groups.ids[g])))
        if not self.critic_recurrent(g):
            return actor
        return {"actor": actor, "critic": self.critics[g].initialize_carry((num_envs,))}

    def initial_carry(self, num_envs: int) -> dict[str, Any]:
        """Recurrent group -> its fresh carry (`group_carry`)."""
        return {g: self.group_carry(g, num_envs) for g in self.recurrent}

    def forward(self, g: str, params: Any, stats: losses.RunningStats | None, obs: jax.Array,
                carry: Any = None, reset: jax.Array | None = None,
                state: jax.Array | None = None, method: str = "__call__"
                ) -> tuple[Any, jax.Array, jax.Array]:
        """Group g's model on its agents' obs f32/bf16[..., agents_in_group, obs_dim]
        (normalised by `stats` where the config asks). carry, reset bool[...,
        agents_in_group]: a recurrent model's state and where its episode
        begins; state f32[..., S]: the env's global state (centralised critic).
        method "sequence": the recurrent models' sequence form, over obs with a
        leading time axis [T, ...] (`sequence`).
        Returns (carry, logits f32[..., sum(nvec)], value f32[...])."""
        if self.normalize_obs:
            obs = stats.normalize(obs)
        actor = params["actor"] if self.critics else params
        split = self.critic_recurrent(g)
        carry_a = carry["actor"] if split else carry
        if g in self.recurrent:
            carry_a, (logits, value) = self.nets[g].apply(actor, carry_a, obs, reset,
                                                          method=method)
        else:
            logits, value = self.nets[g].apply(actor, obs)
        if split:  # one carry per env; the env's reset is its agents' (all equal)
            carry_c, v = self.critics[g].apply(params["critic"], carry["critic"], state,
                                               reset[..., 0], method=method)
            carry = {"actor": carry_a, "critic": carry_c}
        else:
            carry = carry_a
            if self.critics:
                v = self.critics[g].apply(params["critic"], state)
        if self.critics:
            value = jnp.broadcast_to(v[..., None], obs.shape[:-1])
        return carry, logits, value

    def sequence(self, g: str, params: Any, stats: losses.RunningStats | None, obs: jax.Array,
                 carry: Any, reset: jax.Array | None, state: jax.Array | None
                 ) -> tuple[jax.Array, jax.Array]:
        """Group g over env sequences: obs [T, envs, agents_in_group, D] from
        the rollout's initial carry (leaves [envs, agents_in_group, ...]), reset
        bool[T, envs], state f32[T, envs, S] or None. A feed-forward model runs
        on every step at once, a recurrent one through its sequence form where
        it has one (`sequence_form`), else replayed step by step (BPTT through
        the scan). Returns (logits f32[T, envs, agents_in_group, sum(nvec)],
        value f32[T, envs, agents_in_group])."""
        if g not in self.recurrent:
            _, logits, value = self.forward(g, params, stats, obs, state=state)
            return logits, value
        if self.sequence_form(g):
            r = jnp.broadcast_to(reset[..., None], obs.shape[:-1])
            _, logits, value = self.forward(g, params, stats, obs, carry, r, state, "sequence")
            return logits, value

        def body(c, x):
            o, r, st = x
            c, logits, value = self.forward(g, params, stats, o, c,
                                            jnp.broadcast_to(r[:, None], o.shape[:-1]), st)
            return c, (logits, value)

        _, (logits, value) = jax.lax.scan(body, carry, (obs, reset, state))
        return logits, value

    def step(self, params: Mapping[str, Any], stats: Mapping[str, losses.RunningStats],
             obs: jax.Array, carry: Mapping[str, Any], reset: jax.Array,
             state: jax.Array | None = None, trained: Mapping[str, bool] | None = None
             ) -> tuple[dict[str, Any], jax.Array, jax.Array]:
        """Every group on obs f32[envs, agents, D]; carry: recurrent group ->
        its carry, reset bool[envs]: the envs whose episode begins with obs;
        state f32[envs, S]: the global state (centralised critic).
        Returns (carry, logits f32[envs, agents, sum(nvec)], value f32[envs,
        agents]). trained: group -> False plays that group uniformly at random
        (zero logits and values; `jaxwarp eval`); None: every group's model."""
        new_carry, outs = dict(carry), []
        for g in self.groups.ids:
            obs_g = self.groups.select(obs, g, 1)
            if trained is None or trained[g]:
                r = jnp.broadcast_to(reset[:, None], obs_g.shape[:2])
                new_carry[g], logits, value = self.forward(g, params[g], stats.get(g), obs_g,
                                                           carry.get(g), r, state)
                if g not in self.recurrent:
                    del new_carry[g]
                outs.append((logits, value))
            else:
                outs.append((jnp.zeros(obs_g.shape[:2] + (sum(self.nvec),), jnp.float32),
                             jnp.zeros(obs_g.shape[:2], jnp.float32)))
        return (new_carry, self.groups.join([o[0] for o in outs]),
                self.groups.join([o[1] for o in outs]))

    def __call__(self, params: Mapping[str, Any], stats: Mapping[str, losses.RunningStats],
                 obs: jax.Array, trained: Mapping[str, bool] | None = None,
                 state: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
        """(logits, value) of `step` from fresh carries (every recurrent
        model at the first step of its episode)."""
        reset = jnp.ones(obs.shape[:1], bool)
        _, logits, value = self.step(params, stats, obs, self.initial_carry(obs.shape[0]), reset,
                                     state, trained)
        return logits, value
