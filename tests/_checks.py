"""Checks and inputs that several test files share: a random rollout and the
vmap-equals-loop check over it, the trainer's vmap over seeds against separate
runs, a config trained against the same config's uniform policies, and the
sampler's extreme logits. A module rather than conftest fixtures: the CPU and
GPU test files of one subject import the same function."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

# The sampler's extreme logits, f32[5, 4]: NaN wins (the first NaN, as
# jnp.argmax), +inf wins, all -inf picks 0; so the first three rows' actions
# are 2, 1, 0.
EXTREME_LOGITS = np.array([[0.0, 1.0, np.nan, np.nan],
                           [0.0, np.inf, 1.0, np.inf],
                           [-np.inf] * 4,
                           [1e30, -1e30, 0.0, 1e30],
                           [-3.0, -3.0, -3.0, -3.0]], np.float32)


def random_rollout(env: Any, key: jax.Array, num_envs: int, steps: int) -> tuple:
    """`steps` steps of `num_envs` envs from a reset, actions drawn uniformly
    from the action space: (last obs, last state, rewards, dones), the last two
    stacked over the steps."""
    k0, k1 = jax.random.split(key)
    obs, state = env.reset(k0, num_envs)

    def body(carry, k):
        state, _ = carry
        ka, ks = jax.random.split(k)
        actions = env.action_space.sample(ka, (num_envs, env.num_agents))
        obs, state, reward, done, _ = env.step(ks, state, actions)
        return (state, obs), (reward, done)

    (state, obs), (rewards, dones) = jax.lax.scan(body, (state, obs),
                                                  jax.random.split(k1, steps))
    return obs, state, rewards, dones


def assert_vmap_equals_loop(fn: Callable, keys: jax.Array) -> Any:
    """``jax.vmap(fn)`` over `keys` gives, bit for bit, ``fn`` of each key
    alone (both jitted); returns the batched outputs."""
    batched = jax.jit(jax.vmap(fn))(keys)
    for i, k in enumerate(keys):
        one = jax.jit(fn)(k)
        for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(batched)):
            np.testing.assert_array_equal(a, b[i])
    return batched


def assert_seeds_vmap_as_separate_runs(train: Callable, keys: jax.Array, rtol: float,
                                       atol: float) -> tuple[Any, list[Any]]:
    """A trainer's ``train`` vmapped over `keys` logs each key's separate run:
    every metric within `rtol` / `atol`. Returns the runner states (vmapped,
    [each run's])."""
    rs_b, m_b = jax.jit(jax.vmap(train))(keys)
    states = []
    for i in range(len(keys)):
        rs_i, m_i = jax.jit(train)(keys[i])
        for k in m_i:
            np.testing.assert_allclose(m_b[k][i], m_i[k], rtol=rtol, atol=atol, err_msg=k)
        states.append(rs_i)
    return rs_b, states


def trained_and_random(config: Any, key: jax.Array) -> tuple[dict, dict]:
    """The metrics of `config` trained from `key`, and of the same run with
    every group's policy uniformly random and untrained."""
    from jaxwarp.train import make_train  # here: the env and sampler tests need no trainer

    random_ = dataclasses.replace(config, policies=tuple(
        (g, dataclasses.replace(p, model="uniform", train=False)) for g, p in config.policies))
    _, m_learned = jax.jit(make_train(config))(key)
    _, m_random = jax.jit(make_train(random_))(key)
    return m_learned, m_random
