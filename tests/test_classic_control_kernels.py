"""Acrobot, Pendulum and MountainCar as built-in kernels through the authoring
contract (cuda/envs/{acrobot,pendulum,mountain_car}.h), against their pure-JAX
references (jaxwarp/envs/<name>.py) on XLA:CPU, and on the GPU in the `gpu`
cases (skipped without one: the CUDA kernels against the reference and the
XLA:CPU kernels); CartPole's kernel step by step and under vmap likewise, and
its constants folded in Python (its spec's kernel_params)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp.envs import acrobot, mountain_car, pendulum
from jaxwarp.envs.acrobot import Acrobot
from jaxwarp.envs.mountain_car import MountainCar
from jaxwarp.envs.pendulum import Pendulum

ENVS = {
    "acrobot": (Acrobot, acrobot.AcrobotParams, acrobot.AcrobotState, 6, 3),
    "pendulum": (Pendulum, pendulum.PendulumParams, pendulum.PendulumState, 3, 5),
    "mountain_car": (MountainCar, mountain_car.MountainCarParams, mountain_car.MountainCarState,
                     2, 3),
}


# The kernels compared step by step and under vmap: CartPole's too.
KERNELS = ("cartpole", *ENVS)


def _pair(name, **params):
    cls, params_cls, *_ = ENVS[name]
    p = params_cls(**params)
    return cls(p, backend="cpu"), cls(p, backend="jax")


def _assert_outputs_close(out_a, out_b, rtol=1e-5, atol=1e-6):
    for a, b in zip(jax.tree.leaves(out_a), jax.tree.leaves(out_b)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype
        if np.issubdtype(a.dtype, np.floating):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", KERNELS)
def test_kernel_matches_reference_step_by_step(name, kernel_pair):
    report = jaxwarp.testing.check_consistency(name, kernel_pair, num_envs=16,
                                               resync=True, rtol=1e-5, atol=1e-6)
    assert report.ok, report
    assert report.episodes_finished >= 16  # every env ended and restarted at least once


@pytest.mark.parametrize("name", KERNELS)
def test_kernel_vmap_equals_loop(name, kernel_backend):
    env, ref = jaxwarp.make(name, backend=kernel_backend), jaxwarp.make(name, backend="jax")
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    obs_b, st_b = jax.jit(jax.vmap(lambda k: env.reset(k, 8)))(keys)
    act = jnp.ones((3, 8, 1, 1), jnp.int32)
    out_b = jax.jit(jax.vmap(env.step))(keys, st_b, act)
    for i in range(3):
        obs_i, st_i = jax.jit(env.reset, static_argnums=1)(keys[i], 8)
        obs_r, _ = jax.jit(ref.reset, static_argnums=1)(keys[i], 8)
        np.testing.assert_array_equal(obs_b[i], obs_i)
        # The state draws are bitwise; observations through cos/sin may differ
        # in the last bit on the GPU (XLA:GPU contracts the reference's
        # polynomial its own way).
        np.testing.assert_allclose(obs_i, obs_r, rtol=1e-6, atol=1e-7)
        out_i = jax.jit(env.step)(keys[i], st_i, act[i])
        for a, b in zip(jax.tree.leaves(out_b), jax.tree.leaves(out_i)):
            np.testing.assert_array_equal(a[i], b)


@pytest.mark.parametrize("name", list(ENVS))
def test_reset_is_bitwise_and_shapes(name):
    _, _, state_cls, obs_dim, num_actions = ENVS[name]
    cpu, ref = _pair(name)
    assert cpu.num_agents == 1 and cpu.obs_dim == obs_dim
    assert tuple(cpu.action_space.nvec) == (num_actions,)
    key = jax.random.PRNGKey(3)
    (o1, s1), (o2, s2) = (jax.jit(e.reset, static_argnums=1)(key, 5) for e in (cpu, ref))
    np.testing.assert_array_equal(o1, o2)
    for a, b in zip(jax.tree.leaves(s1), jax.tree.leaves(s2)):
        np.testing.assert_array_equal(a, b)
    assert isinstance(s1, state_cls)
    assert o1.shape == (5, 1, obs_dim) and o1.dtype == jnp.float32
    assert s1.timestep.shape == (5,) and s1.timestep.dtype == jnp.int32
    assert s1.episode_return.shape == (5, 1) and s1.episode_return.dtype == jnp.float32
    space = cpu.observation_space
    assert (o1 >= space.low).all() and (o1 <= space.high).all()
    obs, s, r, d, info = jax.jit(cpu.step)(key, s1, jnp.ones((5, 1, 1), jnp.int32))
    assert obs.shape == (5, 1, obs_dim) and obs.dtype == jnp.float32
    assert r.shape == (5, 1) and r.dtype == jnp.float32
    assert d.shape == (5,) and d.dtype == jnp.bool_
    assert set(info) == {"terminated", "truncated", "episode_return"}
    np.testing.assert_array_equal(s.timestep, 1)


@pytest.mark.parametrize("name", list(ENVS))
def test_episode_truncates_at_max_steps(name):
    """A policy that does not reach the goal within 6 steps: done exactly at
    step 6, truncated, the episode's return in info, timestep back to 0."""
    cpu, ref = _pair(name, max_steps=6)
    key = jax.random.PRNGKey(1)
    steps = [jax.jit(e.step) for e in (cpu, ref)]
    states = [jax.jit(e.reset, static_argnums=1)(key, 4)[1] for e in (cpu, ref)]
    total = np.zeros((4, 1), np.float32)
    for t in range(6):
        k = jax.random.PRNGKey(100 + t)
        a = jnp.full((4, 1, 1), 1, jnp.int32)  # acrobot: no torque, car: no push
        outs = [st(k, s, a) for st, s in zip(steps, states)]
        _assert_outputs_close(outs[0], outs[1])
        obs, s, r, d, info = outs[0]
        total = total + np.asarray(r)
        states = [o[1] for o in outs]
        assert not info["terminated"].any()
        if t < 5:
            assert not d.any()
            np.testing.assert_array_equal(s.timestep, t + 1)
    assert d.all() and info["truncated"].all()
    np.testing.assert_allclose(info["episode_return"], total, rtol=1e-6)
    np.testing.assert_array_equal(s.timestep, 0)
    # The next step starts a new episode: its return restarts.
    _, s, r, _, info = jax.jit(cpu.step)(key, s, jnp.ones((4, 1, 1), jnp.int32))
    np.testing.assert_array_equal(info["episode_return"], r)


def _terminal_start(name):
    """A state one step from the goal, and the action that reaches it."""
    n = 3
    f = lambda v: jnp.full((n, 1), v, jnp.float32)  # noqa: E731
    common = dict(timestep=jnp.array([0, 3, 7], jnp.int32),
                  episode_return=jnp.array([[5.0], [-3.0], [-7.0]], jnp.float32))
    if name == "acrobot":  # both links pointing up: -cos t1 - cos(t1 + t2) = 2 > 1
        return acrobot.AcrobotState(theta1=f(3.0), theta2=f(0.0), dtheta1=f(0.0),
                               dtheta2=f(0.0), **common), 1
    if name == "mountain_car":  # just below the flag, moving right
        return mountain_car.MountainCarState(position=f(0.49), velocity=f(0.05), **common), 2
    return None, None


@pytest.mark.parametrize("name", ["acrobot", "mountain_car"])
def test_episode_terminates(name):
    cpu, ref = _pair(name)
    state, action = _terminal_start(name)
    a = jnp.full((3, 1, 1), action, jnp.int32)
    key = jax.random.PRNGKey(7)
    outs = [jax.jit(e.step)(key, state, a) for e in (cpu, ref)]
    _assert_outputs_close(outs[0], outs[1])
    obs, s, r, d, info = outs[0]
    assert d.all() and info["terminated"].all() and not info["truncated"].any()
    expected_reward = 0.0 if name == "acrobot" else -1.0  # acrobot pays 0 at the goal
    np.testing.assert_array_equal(r, expected_reward)
    # Return of the finished episode (restarted where timestep was 0), then a fresh start.
    np.testing.assert_array_equal(info["episode_return"][:, 0],
                                  [expected_reward, -3.0 + expected_reward,
                                   -7.0 + expected_reward])
    np.testing.assert_array_equal(s.timestep, 0)
    fresh_obs, _ = jax.jit(cpu.reset, static_argnums=1)(key, 3)
    np.testing.assert_array_equal(obs, fresh_obs)


def test_pendulum_never_terminates_and_torques_follow_linspace():
    cpu, ref = _pair("pendulum", num_torque_levels=4, max_torque=1.5)
    key = jax.random.PRNGKey(2)
    _, s = jax.jit(cpu.reset, static_argnums=1)(key, 4)
    # From theta = 0, theta_dot = 0 the first step's cost is 0.001 u^2 exactly
    # as the reference computes it, u = linspace(-1.5, 1.5, 4)[a].
    s = s.replace(theta=jnp.zeros((4, 1)), theta_dot=jnp.zeros((4, 1)))
    a = jnp.arange(4, dtype=jnp.int32).reshape(4, 1, 1)
    outs = [jax.jit(e.step)(key, s, a) for e in (cpu, ref)]
    _assert_outputs_close(outs[0], outs[1], rtol=0, atol=0)
    u = np.linspace(-1.5, 1.5, 4).astype(np.float32)
    np.testing.assert_array_equal(outs[0][2][:, 0], -(np.float32(0.001) * (u * u)))
    assert not outs[0][4]["terminated"].any()
    # Out-of-range actions are clamped like the reference's.
    a = jnp.array([-3, 0, 3, 9], jnp.int32).reshape(4, 1, 1)
    outs = [jax.jit(e.step)(key, s, a) for e in (cpu, ref)]
    _assert_outputs_close(outs[0], outs[1], rtol=0, atol=0)


def test_checks_report_out_of_range_actions():
    """checks=True means the same for every env: actions outside the action
    space are reported through checkify (the kernels clamp them)."""
    from jax.experimental import checkify

    for cls, *_ in ENVS.values():
        env = cls(backend="jax", checks=True)
        _, s = env.reset(jax.random.PRNGKey(0), 2)
        n = int(env.action_space.nvec[0])
        step = checkify.checkify(env.step)
        err, _ = jax.jit(step)(jax.random.PRNGKey(1), s, jnp.zeros((2, 1, 1), jnp.int32))
        assert err.get() is None
        err, _ = jax.jit(step)(jax.random.PRNGKey(1), s, jnp.full((2, 1, 1), n, jnp.int32))
        assert "actions out of range" in err.get()


def test_cartpole_constants_are_folded_as_the_reference_folds_them():
    """CartPole's kernel takes the constants of its dynamics from the spec's
    kernel_params, folded in float64 from the Python params and rounded to
    float32 once, as the reference (`_cartpole_dynamics`) folds them; with
    params that float32 does not hold exactly, the kernel still tracks the
    reference step by step."""
    from jaxwarp import authoring
    from jaxwarp.envs import cartpole

    params = dict(masspole=0.37, masscart=1.3, length=0.71, force_mag=7.3)
    vals = authoring.kernel_param_values(cartpole.SPEC, cartpole.CartPoleParams(**params))
    total = 0.37 + 1.3
    expected = {"inv_total_mass": 1.0 / total, "polemass_length": 0.37 * 0.71,
                "four_thirds_length": 0.71 * 4.0 / 3.0,
                "length_masspole": 0.71 * 0.37 / total,
                "polemass_length_over_mass": 0.37 * 0.71 / total, "force_mag": 7.3}
    for name, value in expected.items():
        assert vals[name].dtype == np.float32 and vals[name] == np.float32(value), name
    report = jaxwarp.testing.check_consistency("cartpole", ("cpu", "jax"), num_envs=16,
                                               resync=True, rtol=1e-5, atol=1e-6, **params)
    assert report.ok, report
    assert report.episodes_finished >= 16
