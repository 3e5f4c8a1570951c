"""Authoring contract on the GPU (skipped without one): the generated CUDA
bindings build at run time with nvcc and agree with the reference."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("other", ["jax", "cpu"])
def test_cartpole_cuda_matches_step_by_step(other):
    report = jaxwarp.testing.check_consistency("cartpole", ("cuda", other), num_envs=64,
                                               resync=True, rtol=1e-5, atol=1e-6)
    assert report.ok, report
    assert report.episodes_finished > 64


def test_cartpole_cuda_vmap_equals_loop():
    env = jaxwarp.make("cartpole", backend="cuda")
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    obs_b, st_b = jax.jit(jax.vmap(lambda k: env.reset(k, 8)))(keys)
    act = jnp.ones((3, 8, 1, 1), jnp.int32)
    out_b = jax.jit(jax.vmap(env.step))(keys, st_b, act)
    for i in range(3):
        obs_i, st_i = jax.jit(env.reset, static_argnums=1)(keys[i], 8)
        np.testing.assert_array_equal(obs_b[i], obs_i)
        out_i = jax.jit(env.step)(keys[i], st_i, act[i])
        for a, b in zip(jax.tree.leaves(out_b), jax.tree.leaves(out_i)):
            np.testing.assert_array_equal(a[i], b)


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
