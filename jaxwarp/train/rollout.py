"""The rollout: ``num_steps`` steps of the envs under the current policies.

Each step is the policy forward pass of every group (`Policy`), the action
draw (the sampler custom call or its reference) and the env step custom
call (dynamics, reward, done, auto-reset, next observation). Episode
statistics are summed per env in the scan's carry and over the envs once after
it: no step talks to the host, and over several devices no step all-reduces.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxwarp.train import losses
from jaxwarp.train.policy import Policy

# (key, logits f32[envs, agents, sum(nvec)]) -> (actions i32[envs, agents, heads],
# log-probs f32[envs, agents])
Sampler = Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array]]
# (episode_return f32[envs, agents], done f32[envs]) -> name -> f32[envs], each env's
# statistics of the episode that ended in this step (0 where none ended)
EpisodeSums = Callable[[jax.Array, jax.Array], dict[str, jax.Array]]


@struct.dataclass
class Transition:
    """One env step of every env and agent; `rollout` stacks them to [T, ...]."""

    obs: jax.Array  # f32 or bf16[envs, agents, obs_dim]: the observation acted on
    actions: jax.Array  # i32[envs, agents, heads]
    log_prob: jax.Array  # f32[envs, agents]
    value: jax.Array  # f32[envs, agents]
    reward: jax.Array  # f32[envs, agents]
    done: jax.Array  # bool[envs]: the episode ended with this step
    first: jax.Array  # bool[envs]: obs is the first of its episode (recurrent models reset)
    state: jax.Array | None  # f32[envs, S]: the env's global state (centralised critic)


def episode_sums(policy: Policy, episode_metrics: Callable | None) -> EpisodeSums:
    """Per env, where its episode ended (w = 1): each group's mean return
    (keyed by group name) and the env's own episode metrics
    (``env.episode_metrics(episode_return) -> name -> f32[envs]``)."""
    groups = policy.groups

    def sums(ret: jax.Array, w: jax.Array) -> dict[str, jax.Array]:
        ep = {g: w * groups.select(ret, g, 1).mean(axis=1) for g in groups.ids}
        if episode_metrics is not None:
            ep.update({k: w * v for k, v in episode_metrics(ret).items()})
        return ep

    return sums


def env_metric_names(env: Any, num_envs: int = 1) -> tuple[str, ...]:
    """The names of the per-episode metrics `env` logs, sorted: the keys of
    ``env.episode_metrics(episode_return f32[envs, agents])`` (a dict of
    f32[envs]), the hook an env defines to log more than its groups'
    returns (the trainer logs them under these names); () without the hook.
    Nothing runs: the hook is traced for shapes (`jax.eval_shape`)."""
    hook = getattr(env, "episode_metrics", None)
    if hook is None:
        return ()
    ret = jax.ShapeDtypeStruct((num_envs, env.num_agents), jnp.float32)
    return tuple(sorted(jax.eval_shape(hook, ret)))


def act_and_step(policy: Policy, sample: Sampler, env: Any, sums: EpisodeSums,
                 centralised: bool, params: Mapping[str, Any],
                 stats: Mapping[str, losses.RunningStats], env_state: Any, obs: jax.Array,
                 carry: Mapping[str, Any], first: jax.Array, ep: Mapping[str, jax.Array],
                 key: jax.Array
                 ) -> tuple[Any, jax.Array, dict[str, Any], jax.Array, dict, Transition]:
    """One step: act on obs f32[envs, agents, D] (recurrent groups from their
    carry, reset where `first` bool[envs]), step the envs, add the ended
    episodes' statistics to ep (name -> f32[envs]; "episodes": how many ended).
    Returns (env_state, next obs, carry, next first = done, ep, the step's
    `Transition`)."""
    k_act, k_env = jax.random.split(key)
    state = env.global_state(obs, env_state) if centralised else None
    carry, logits, value = policy.step(params, stats, obs, carry, first, state)
    actions, logp = sample(k_act, logits)
    next_obs, env_state, reward, done, info = env.step(k_env, env_state, actions)
    w = done.astype(jnp.float32)
    new = {**sums(info["episode_return"], w), "episodes": w}
    ep = {k: ep[k] + v for k, v in new.items()}
    step = Transition(obs, actions, logp, value, reward, done, first, state)
    return env_state, next_obs, carry, done, ep, step


@jax.named_scope("rollout")
def rollout(policy: Policy, sample: Sampler, env: Any, sums: EpisodeSums, centralised: bool,
            params: Mapping[str, Any], stats: Mapping[str, losses.RunningStats],
            env_state: Any, obs: jax.Array, carry: Mapping[str, Any], first: jax.Array,
            key: jax.Array, num_steps: int
            ) -> tuple[Any, jax.Array, dict[str, Any], jax.Array, dict[str, jax.Array],
                       Transition]:
    """`num_steps` steps from (env_state, obs, carry, first) by ``lax.scan``.
    Returns (env_state, obs, carry, first after the last step, episode sums
    name -> f32[] over the episodes that ended ("episodes": their number),
    Transition of [T, ...] arrays)."""
    num_envs = obs.shape[0]
    names = [*sums(jnp.zeros((num_envs, obs.shape[1])), jnp.zeros(num_envs)), "episodes"]
    ep0 = {k: jnp.zeros((num_envs,), jnp.float32) for k in names}

    def body(c, k):
        params_, stats_, *loop = c
        *loop, step = act_and_step(policy, sample, env, sums, centralised, params_, stats_,
                                   *loop, k)
        return (params_, stats_, *loop), step

    (_, _, env_state, obs, carry, first, ep), traj = jax.lax.scan(
        body, (params, stats, env_state, obs, dict(carry), first, ep0),
        jax.random.split(key, num_steps))
    return env_state, obs, carry, first, {k: v.sum() for k, v in ep.items()}, traj
