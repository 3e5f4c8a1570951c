"""Authoring contract on the GPU (skipped without one): the generated CUDA
bindings build at run time with nvcc and agree with the reference."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp

pytestmark = pytest.mark.gpu


# CartPole's CUDA kernel against the reference and the XLA:CPU kernel, step by
# step and under vmap: tests/test_classic_control_kernels.py (its gpu cases).


def test_tutorial_env_cuda_matches_cpu_and_reference():
    from pathlib import Path

    from jaxwarp.train.trainer import import_env_module

    import_env_module(str(Path(__file__).resolve().parent.parent / "examples" / "goal_reach"
                          / "goal_reach.py"))
    r = jaxwarp.testing.check_consistency("goal_reach", ("cuda", "cpu"), num_envs=32,
                                          rtol=0, atol=0, num_agents=4, max_steps=40)
    assert r.ok, r
    r = jaxwarp.testing.check_consistency("goal_reach", ("cuda", "jax"), num_envs=32,
                                          rtol=1e-6, atol=1e-6, num_agents=4, max_steps=40)
    assert r.ok, r


# Many agents: more than one block's threads per env (agents looped), and the
# three shared-memory layouts of the generated kernel (state and observations
# staged; state only; neither, at 48 KiB per block).
@pytest.mark.parametrize("num_agents", [1100, 3000, 5000])
def test_generated_kernel_with_many_agents_matches_cpu(num_agents):
    from pathlib import Path

    from jaxwarp.train.trainer import import_env_module

    import_env_module(str(Path(__file__).resolve().parent.parent / "examples" / "goal_reach"
                          / "goal_reach.py"))
    r = jaxwarp.testing.check_consistency("goal_reach", ("cuda", "cpu"), num_envs=3,
                                          rtol=0, atol=0, num_agents=num_agents, max_steps=6)
    assert r.ok, r
    assert r.episodes_finished >= 3, r


# One agent per env: an env without scratch or a team pass then steps with
# the single-thread kernel (solo_step_kernel_body in cuda/jaxwarp_kernels.h),
# multi-agent envs made with one agent too, whose loops over agents index
# the env's state at run time (the kernel's register array then lives in
# local memory). Same code as the XLA:CPU build, so the same bits where the
# env has no expf (goal_reach); MPE within one step's rounding (resync).
@pytest.mark.parametrize("name,params,tol", [
    ("goal_reach", dict(num_agents=1, max_steps=40), dict(rtol=0, atol=0)),
    ("mpe_simple_spread", dict(num_agents=1, num_landmarks=1),
     dict(rtol=1e-5, atol=1e-6, resync=True)),
])
def test_one_agent_per_env_matches_cpu(name, params, tol):
    from pathlib import Path

    from jaxwarp.train.trainer import import_env_module

    import_env_module(str(Path(__file__).resolve().parent.parent / "examples" / "goal_reach"
                          / "goal_reach.py"))
    r = jaxwarp.testing.check_consistency(name, ("cuda", "cpu"), num_envs=300, **tol, **params)
    assert r.ok, r
    assert r.episodes_finished >= 300, r


# An env's bits must not depend on how many envs run beside it (the number
# of blocks, a partial last block). Each env's randomness comes from its own
# index, so the first 300 of 40,000 envs equal 300 envs alone.
@pytest.mark.parametrize("name,params", [
    ("cartpole", {}), ("mpe_simple_tag", {}), ("tag_gridworld", dict(episode_length=15)),
    ("tag_continuous", dict(num_taggers=2, num_runners=6, grid_length=4.0,
                            num_other_agents_observed=3, episode_length=15)),
])
def test_env_bits_do_not_depend_on_batch_size(name, params):
    from jaxwarp.benchmark import protocol_actions

    env = jaxwarp.make(name, backend="cuda", **params)
    nvec = env.action_space.nvec

    def run(num_envs):
        def body(c, t):
            state, obs = c
            # From (step, index) alone: a float sum of obs may round
            # differently at another batch size (XLA's reduction order).
            a = protocol_actions(t, None, nvec, (num_envs, env.num_agents))
            obs, state, reward, done, _ = env.step(jax.random.fold_in(key, t), state, a)
            return (state, obs), (obs, reward, done)

        key = jax.random.PRNGKey(7)
        obs, state = env.reset(key, num_envs)
        (state, _), outs = jax.lax.scan(body, (state, obs), jnp.arange(40, dtype=jnp.int32))
        return jax.tree.leaves(state), outs

    few = jax.jit(lambda: run(300))()
    many = jax.jit(lambda: run(40_000))()
    for a, b in zip(jax.tree.leaves(few[0]), jax.tree.leaves(many[0])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[:300])
    for a, b in zip(few[1], many[1]):  # [steps, envs, ...]
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[:, :300])
    assert float(np.asarray(few[1][2]).sum()) > 0  # episodes ended and reset
