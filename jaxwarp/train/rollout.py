"""The rollout: ``num_steps`` steps of the envs under the current policies.

Each step is the policy forward pass of every group (`Policy`), the action
draw (the sampler custom call or its reference) and the env step custom
call (dynamics, reward, done, auto-reset, next observation). Episode
statistics are summed per env in the scan's carry and over the envs once after
it: no step talks to the host, and over several devices no step all-reduces.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from jaxwarp.train.policy import Policy, RunningStats

# (key, logits f32[envs, agents, sum(nvec)]) -> (actions i32[envs, agents, heads],
# log-probs f32[envs, agents])
Sampler = Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array]]
# (episode_return f32[envs, agents], done f32[envs]) -> name -> f32[envs], each env's
# statistics of the episode that ended in this step (0 where none ended)
EpisodeSums = Callable[[jax.Array, jax.Array], dict[str, jax.Array]]


class Acting(NamedTuple):
    """How the envs are played: the fixed pieces of a rollout (no arrays)."""

    policy: Policy  # every group's model
    sample: Sampler  # the action draw
    env: Any  # the env (a `ShardedEnv` over several devices)
    sums: EpisodeSums  # what is logged of an ended episode
    centralised: bool  # the groups' critics read the env's global state


@struct.dataclass
class EnvCarry:
    """Where the envs stand between steps; every leaf has a leading [envs] axis
    (split along envs over several devices)."""

    env_state: Any  # the env's state pytree
    obs: jax.Array  # f32 or bf16[envs, agents, obs_dim]: the observation to act on
    carry: dict[str, Any]  # recurrent group -> its carry, leaves [envs, agents_in_group, ...]
    first: jax.Array  # bool[envs]: obs is the first of its episode (recurrent models reset)


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


def act_and_step(acting: Acting, params: Mapping[str, Any],
                 stats: Mapping[str, RunningStats], envs: EnvCarry,
                 ep: Mapping[str, jax.Array], key: jax.Array,
                 env_params: jax.Array | None = None
                 ) -> tuple[EnvCarry, dict[str, jax.Array], Transition]:
    """One step: act on envs.obs f32[envs, agents, D] (recurrent groups from
    their carry, reset where envs.first bool[envs]), step the envs (with the
    env's Params words env_params i32[W], `Hyper.env`; None: its own), add
    the ended episodes' statistics to ep (name -> f32[envs]; "episodes": how
    many ended). Returns (the envs after the step, ep, the step's `Transition`)."""
    k_act, k_env = jax.random.split(key)
    env, obs = acting.env, envs.obs
    state = env.global_state(obs, envs.env_state) if acting.centralised else None
    carry, logits, value = acting.policy.step(params, stats, obs, envs.carry, envs.first, state)
    actions, logp = acting.sample(k_act, logits)
    words = {} if env_params is None else {"params": env_params}  # an env with params as data
    next_obs, env_state, reward, done, info = env.step(k_env, envs.env_state, actions, **words)
    w = done.astype(jnp.float32)
    new = {**acting.sums(info["episode_return"], w), "episodes": w}
    ep = {k: ep[k] + v for k, v in new.items()}
    step = Transition(obs, actions, logp, value, reward, done, envs.first, state)
    return EnvCarry(env_state, next_obs, carry, done), ep, step


@jax.named_scope("rollout")
def rollout(acting: Acting, params: Mapping[str, Any], stats: Mapping[str, RunningStats],
            envs: EnvCarry, key: jax.Array, num_steps: int, env_params: jax.Array | None = None
            ) -> tuple[EnvCarry, dict[str, jax.Array], Transition]:
    """`num_steps` steps from `envs` by ``lax.scan`` (the env's Params words
    env_params i32[W], `Hyper.env`; None: its own). Returns (the envs after
    the last step, episode sums name -> f32[] over the episodes that ended
    ("episodes": their number), Transition of [T, ...] arrays)."""
    num_envs, num_agents = envs.obs.shape[:2]
    names = [*acting.sums(jnp.zeros((num_envs, num_agents)), jnp.zeros(num_envs)), "episodes"]
    ep0 = {k: jnp.zeros((num_envs,), jnp.float32) for k in names}

    def body(c, k):
        params_, stats_, envs_, ep = c
        envs_, ep, step = act_and_step(acting, params_, stats_, envs_, ep, k, env_params)
        return (params_, stats_, envs_, ep), step

    (_, _, envs, ep), traj = jax.lax.scan(
        body, (params, stats, envs.replace(carry=dict(envs.carry)), ep0),
        jax.random.split(key, num_steps))
    return envs, {k: v.sum() for k, v in ep.items()}, traj
