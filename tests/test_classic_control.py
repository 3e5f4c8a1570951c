"""Classic control (CartPole, Acrobot, Pendulum, MountainCar): the pure-JAX
references against Gymnasium itself, step by step, plus the functional API's
properties (reset distribution, shapes, determinism, auto-reset, jit, vmap).

Oracle comparison: before each step our state is set from gymnasium's
``env.unwrapped.state`` (rounded to float32) and its TimeLimit's step count;
both envs then take the same action and we compare the next observation,
reward, terminated and truncated. Tolerances (float32 here vs float64 in
gymnasium, one step from the same state; errors measured with gymnasium 1.4.0
over seeds 1..7):

* cartpole, mountain_car: obs rtol 1e-6, atol 1e-6 (largest error seen 2.4e-7,
  two float32 ulps of the values);
* acrobot: obs rtol 2e-6, atol 2e-6 (largest seen 9.5e-7 = 1 ulp of a velocity
  near 10 after four RK4 stages in float32);
* pendulum: obs atol 1e-5, reward atol 1e-4 (largest seen 3.5e-6 and 2.2e-5).
  Pendulum's theta is never wrapped (Gymnasium integrates it without bound; it
  reaches ~80 rad at 8 rad/s over 200 steps), so rounding gymnasium's theta to
  float32 alone moves cos/sin by up to |theta| * 2**-24 ~ 5e-6 and the
  angle cost by 2 pi times that;
* rewards of the other envs are integers and compared exactly.

Flags must agree exactly; the runs mix a goal-seeking policy with random
actions so that every env terminates, and every other episode starts 10 steps
before gymnasium's own time limit (the TimeLimit wrapper's step count set by
hand) so that it truncates at 500 / 200 steps within a 300-step run.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.random import threefry2x32_p

import jaxwarp
from jaxwarp.envs import acrobot, cartpole, mountain_car, pendulum

gym = pytest.importorskip("gymnasium")

KEY = jax.random.key_data(jax.random.key(0))
N = 4  # envs in the API tests (one shape: compiled once per env and params)


# ---------------------------------------------------------------------------
# Per-env adapters: gymnasium state -> our fields, our action -> gymnasium's,
# and a policy that reaches the goal (mixed with random actions in the runs).
# ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Case:
    gym_id: str
    params: type
    reset: object
    step: object
    dynamics: object
    observe: object
    state_cls: type
    fields: tuple[str, ...]
    obs_tol: tuple[float, float]  # (rtol, atol)
    reward_atol: float
    gym_action: object  # (params, a: int) -> gymnasium action
    policy: object  # (gymnasium state) -> a good action


CASES = {
    "cartpole": Case(
        "CartPole-v1", cartpole.CartPoleParams, cartpole.cartpole_reset, cartpole.cartpole_step,
        cartpole._cartpole_dynamics, cartpole.cartpole_observe, cartpole.CartPoleState,
        ("x", "x_dot", "theta", "theta_dot"), (1e-6, 1e-6), 0.0,
        lambda p, a: int(a),
        lambda s: int(s[2] + 0.5 * s[3] > 0)),
    "acrobot": Case(
        "Acrobot-v1", acrobot.AcrobotParams, acrobot.acrobot_reset, acrobot.acrobot_step,
        acrobot._acrobot_dynamics, acrobot.acrobot_observe, acrobot.AcrobotState,
        ("theta1", "theta2", "dtheta1", "dtheta2"), (2e-6, 2e-6), 0.0,
        lambda p, a: int(a),
        lambda s: 0 if s[2] > 0 else 2),
    "pendulum": Case(
        "Pendulum-v1", pendulum.PendulumParams, pendulum.pendulum_reset, pendulum.pendulum_step,
        pendulum._pendulum_dynamics, pendulum.pendulum_observe, pendulum.PendulumState,
        ("theta", "theta_dot"), (0.0, 1e-5), 1e-4,
        lambda p, a: np.array([p.torques[a]], np.float32),
        lambda s: 4 if s[1] > 0 else 0),
    "mountain_car": Case(
        "MountainCar-v0", mountain_car.MountainCarParams, mountain_car.mountain_car_reset,
        mountain_car.mountain_car_step, mountain_car._mountain_car_dynamics,
        mountain_car.mountain_car_observe, mountain_car.MountainCarState,
        ("position", "velocity"), (1e-6, 1e-6), 0.0,
        lambda p, a: int(a),
        lambda s: 2 if s[1] >= 0 else 0),
}


def _our_state(case: Case, gym_state, timestep: int, episode_return) -> object:
    s = np.asarray(gym_state, np.float64).reshape(-1)
    fields = {n: np.full((1, 1), v, np.float32) for n, v in zip(case.fields, s)}
    return case.state_cls(**fields, timestep=np.full((1,), timestep, np.int32),
                          episode_return=episode_return)


@functools.cache
def _oracle_step(name: str):
    """Jitted: (public step, the next obs before the time limit and auto-reset,
    the obs of the state the public step returns)."""
    case = CASES[name]
    p = case.params()

    @jax.jit
    def step(state, a):
        moved, _, _ = case.dynamics(p, state, a[:, :, 0])
        next_obs = case.observe(p, dataclasses.replace(state, **moved))
        out = case.step(p, KEY, state, a)
        return out, next_obs, case.observe(p, out[1])

    return step


def _run_against_gymnasium(name: str, num_steps: int, seed: int, p_policy: float,
                           last_steps: int = 10):
    """Steps gymnasium's env and ours side by side; returns episode-end counts and
    the largest errors. Every other episode starts `last_steps` before the time
    limit (TimeLimit's step count set by hand) and takes random actions, so that
    gymnasium's own limit (500 or 200 steps) is reached within a short run."""
    case = CASES[name]
    p = case.params()
    env = gym.make(case.gym_id)
    assert env.spec.max_episode_steps == p.max_steps
    rng = np.random.default_rng(seed)
    step = _oracle_step(name)
    env.reset(seed=seed)
    episode, near_limit = 0, False
    episode_return = np.zeros((1, 1), np.float32)
    gym_return = 0.0
    counts = {"terminated": 0, "truncated": 0}
    err = {"obs": 0.0, "reward": 0.0}
    for i in range(num_steps):
        gs = np.array(env.unwrapped.state, np.float64)
        state = _our_state(case, gs, env._elapsed_steps, episode_return)
        goal_seeking = not near_limit and rng.random() < p_policy
        a = case.policy(gs) if goal_seeking else int(rng.integers(p.num_actions))
        g_obs, g_rew, g_term, g_trunc, _ = env.step(case.gym_action(p, a))
        gym_return += float(g_rew)
        actions = np.full((1, 1, 1), a, np.int32)
        (obs, new_state, reward, done, info), next_obs, obs_of_new_state = jax.device_get(
            step(state, actions))
        next_obs = next_obs[0, 0]
        where = f"{name} step {i} (episode step {env._elapsed_steps}), action {a}"
        assert bool(info["terminated"][0]) == g_term, where
        assert bool(info["truncated"][0]) == g_trunc, where
        assert bool(done[0]) == (g_term or g_trunc), where
        np.testing.assert_allclose(reward[0, 0], g_rew, rtol=0, atol=case.reward_atol,
                                   err_msg=where)
        rtol, atol = case.obs_tol
        np.testing.assert_allclose(next_obs, g_obs, rtol=rtol, atol=atol, err_msg=where)
        err["obs"] = max(err["obs"], float(np.max(np.abs(next_obs - g_obs))))
        err["reward"] = max(err["reward"], abs(float(reward[0, 0]) - g_rew))
        if g_term or g_trunc:
            counts["terminated"] += g_term
            counts["truncated"] += g_trunc
            # Auto-reset: a fresh start, and the finished episode's return.
            assert int(new_state.timestep[0]) == 0, where
            np.testing.assert_allclose(info["episode_return"][0, 0], gym_return,
                                       rtol=1e-5, err_msg=where)
            np.testing.assert_array_equal(obs, obs_of_new_state)
            env.reset()
            gym_return = 0.0
            episode += 1
            near_limit = episode % 2 == 1
        else:
            np.testing.assert_array_equal(obs[0, 0], next_obs)
            assert int(new_state.timestep[0]) == env._elapsed_steps, where
        episode_return = new_state.episode_return
        if (g_term or g_trunc) and near_limit:
            env._elapsed_steps = p.max_steps - last_steps
            episode_return = np.zeros((1, 1), np.float32)  # the lazy restart skipped
    env.close()
    return counts, err


# env: (steps, probability of the goal-seeking action, must see a termination)
GYM_RUNS = {
    "cartpole": (300, 0.0, True),
    "acrobot": (300, 0.8, True),
    "pendulum": (300, 0.5, False),  # never terminates
    "mountain_car": (300, 0.8, True),
}


@pytest.mark.parametrize("name", sorted(GYM_RUNS))
def test_matches_gymnasium_step_by_step(name):
    num_steps, p_policy, need_term = GYM_RUNS[name]
    counts, _ = _run_against_gymnasium(name, num_steps, seed=1, p_policy=p_policy)
    # The run covered the ways an episode ends.
    assert counts["terminated"] >= need_term, counts
    assert counts["truncated"] >= 1, counts


# ---------------------------------------------------------------------------
# Functional API: reset distribution, shapes, determinism, auto-reset, jit, vmap.
# ---------------------------------------------------------------------------
# name -> (Params, reset, step, obs_dim, nvec) with default params (Pendulum's nvec
# follows `PendulumParams.num_torque_levels`).
CLASSIC_CONTROL = {
    "cartpole": (cartpole.CartPoleParams, cartpole.cartpole_reset, cartpole.cartpole_step,
                 4, (2,)),
    "acrobot": (acrobot.AcrobotParams, acrobot.acrobot_reset, acrobot.acrobot_step, 6, (3,)),
    "pendulum": (pendulum.PendulumParams, pendulum.pendulum_reset, pendulum.pendulum_step,
                 3, (5,)),
    "mountain_car": (mountain_car.MountainCarParams, mountain_car.mountain_car_reset,
                     mountain_car.mountain_car_step, 2, (3,)),
}
NAMES = sorted(CLASSIC_CONTROL)
RESET_RANGES = {
    "cartpole": cartpole.CARTPOLE_RESET,
    "acrobot": acrobot.ACROBOT_RESET,
    "pendulum": pendulum.PENDULUM_RESET,
    "mountain_car": mountain_car.MOUNTAIN_CAR_RESET,
}


@pytest.mark.parametrize("name", NAMES)
def test_reset_distribution_shapes_and_draws(name):
    case = CASES[name]
    params_cls, reset, _, obs_dim, nvec = CLASSIC_CONTROL[name]
    p = params_cls()
    assert p.obs_dim == obs_dim and p.nvec == nvec
    n = 4096
    obs, state = reset(p, KEY, n)
    assert obs.shape == (n, 1, obs_dim) and obs.dtype == jnp.float32
    assert state.timestep.shape == (n,) and state.timestep.dtype == jnp.int32
    assert not np.any(state.timestep)
    assert state.episode_return.shape == (n, 1) and not np.any(state.episode_return)
    for i, (field, (lo, hi)) in enumerate(zip(case.fields, RESET_RANGES[name])):
        v = np.asarray(getattr(state, field))
        assert v.shape == (n, 1) and v.dtype == np.float32
        assert v.min() >= np.float32(lo) and v.max() < np.float32(hi), field
        # Spread over the range (not a constant or a narrow band).
        assert v.max() - v.min() > 0.95 * (hi - lo), field
        assert abs(v.mean() - (lo + hi) / 2) < 0.05 * (hi - lo), field
        # The draw convention, written out with numpy-free arithmetic on the bits.
        k0 = jnp.broadcast_to(KEY[0], (n,))
        k1 = jnp.broadcast_to(KEY[1], (n,))
        bits, _ = threefry2x32_p.bind(
            k0, k1, jnp.arange(n, dtype=jnp.uint32), jnp.full((n,), i, jnp.uint32))
        u = (np.asarray(bits) >> 8).astype(np.float64) * 2.0**-24
        span = np.float32(np.float32(hi) - np.float32(lo))
        expect = (u * np.float64(span)).astype(np.float32) + np.float32(lo)  # two roundings
        np.testing.assert_array_equal(v[:, 0], expect)
    if name == "mountain_car":
        assert not np.any(state.velocity)
    if name in ("cartpole", "mountain_car"):  # the obs is the state
        np.testing.assert_array_equal(
            obs[:, 0], np.concatenate([getattr(state, f) for f in case.fields], axis=1))


@pytest.mark.parametrize("name", NAMES)
def test_determinism_by_key(name):
    params_cls, reset, step, _, nvec = CLASSIC_CONTROL[name]
    p = params_cls()

    def rollout(seed):
        keys = np.asarray(jax.random.key_data(jax.random.split(jax.random.key(seed), 6)))
        obs, state = reset(p, keys[0], N)
        outs = [obs]
        rng = np.random.default_rng(seed)
        for t in range(5):
            a = jnp.asarray(rng.integers(0, nvec[0], (N, 1, 1)), jnp.int32)
            obs, state, reward, done, _ = step(p, keys[t + 1], state, a)
            outs += [obs, reward]
        return [np.asarray(o) for o in outs]

    a, b, c = rollout(3), rollout(3), rollout(4)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])


@pytest.mark.parametrize("name", NAMES)
def test_auto_reset_and_episode_return(name):
    case = CASES[name]
    params_cls, reset, step, _, _ = CLASSIC_CONTROL[name]
    p = params_cls()
    n = N
    obs, state = reset(p, KEY, n)
    step = partial(step, p)
    a = jnp.zeros((n, 1, 1), jnp.int32)
    total = np.zeros((n, 1), np.float32)
    for t in range(3):
        key = jax.random.key_data(jax.random.key(100 + t))
        if t == 2:  # jump to the last step of the episode
            state = state.replace(timestep=jnp.full((n,), p.max_steps - 1, jnp.int32))
        obs, state, reward, done, info = step(key, state, a)
        total += np.asarray(reward)
        np.testing.assert_allclose(info["episode_return"], total, rtol=1e-6)
        np.testing.assert_array_equal(info["episode_return"], state.episode_return)
        if t < 2:
            assert not np.any(done) and not np.any(info["truncated"])
            np.testing.assert_array_equal(state.timestep, t + 1)
    # Every env hit the time limit: truncated, reset to the start that the
    # same key gives, timestep 0, and the finished return kept.
    assert np.all(done) and np.all(info["truncated"])
    np.testing.assert_array_equal(state.timestep, 0)
    fresh_obs, fresh = reset(p, key, n)
    for f in case.fields:
        np.testing.assert_array_equal(getattr(state, f), getattr(fresh, f))
    np.testing.assert_array_equal(obs, fresh_obs)
    # The next step starts a new return.
    obs, state, reward, done, info = step(KEY, state, a)
    np.testing.assert_array_equal(info["episode_return"], reward)
    np.testing.assert_array_equal(state.timestep, 1)


def test_terminated_env_resets_alone():
    """Only the env that terminates restarts; the others carry on."""
    p = cartpole.CartPoleParams()
    _, state = cartpole.cartpole_reset(p, KEY, N)
    state = state.replace(theta=state.theta.at[1, 0].set(0.25),  # beyond 12 degrees
                          timestep=jnp.full((N,), 7, jnp.int32))
    a = jnp.ones((N, 1, 1), jnp.int32)
    obs, new, reward, done, info = cartpole.cartpole_step(p, KEY, state, a)
    np.testing.assert_array_equal(done, [False, True, False, False])
    np.testing.assert_array_equal(info["terminated"], [False, True, False, False])
    np.testing.assert_array_equal(new.timestep, [8, 0, 8, 8])
    np.testing.assert_array_equal(reward, 1.0)
    _, fresh = cartpole.cartpole_reset(p, KEY, N)
    assert new.theta[1, 0] == fresh.theta[1, 0] and new.x[1, 0] == fresh.x[1, 0]


def test_terminated_and_truncated_on_the_same_step():
    """As gymnasium's TimeLimit: truncation does not depend on termination."""
    p = cartpole.CartPoleParams()
    _, state = cartpole.cartpole_reset(p, KEY, N)
    state = state.replace(x=jnp.full((N, 1), 2.45, jnp.float32),
                          timestep=jnp.array([499, 498, 499, 0], jnp.int32))
    _, _, _, done, info = cartpole.cartpole_step(p, KEY, state, jnp.ones((N, 1, 1), jnp.int32))
    np.testing.assert_array_equal(info["terminated"], True)
    np.testing.assert_array_equal(info["truncated"], [True, False, True, False])
    np.testing.assert_array_equal(done, True)


@pytest.mark.parametrize("name", NAMES)
def test_jit_and_vmap(name):
    params_cls, reset, step, obs_dim, nvec = CLASSIC_CONTROL[name]
    p = params_cls()
    keys = jax.vmap(jax.random.key_data)(jax.random.split(jax.random.key(5), 6))
    reset_keys, step_keys = keys[:3], keys[3:]
    a = jnp.asarray(np.random.default_rng(0).integers(0, nvec[0], (3, N, 1, 1)), jnp.int32)

    # Distinct reset and step keys: with one key for both, XLA:CPU merges the
    # reset draws with the step's fresh draws and may round the step 1 ulp
    # differently than the two calls apart (fma contraction).
    @jax.jit
    @jax.vmap
    def reset_and_step(k_reset, k_step, a):
        obs, state = reset(p, k_reset, N)
        return obs, step(p, k_step, state, a)

    obs, outs = reset_and_step(reset_keys, step_keys, a)
    assert obs.shape == (3, N, 1, obs_dim)
    for b in range(3):
        o, s = reset(p, reset_keys[b], N)
        np.testing.assert_array_equal(obs[b], o)
        ref = step(p, step_keys[b], s, a[b])
        for x, y in zip(jax.tree.leaves(outs), jax.tree.leaves(ref)):
            np.testing.assert_array_equal(x[b], y)


def test_pendulum_discrete_torques():
    p = pendulum.PendulumParams()  # 5 levels
    np.testing.assert_array_equal(p.torques, np.float32([-2, -1, 0, 1, 2]))
    np.testing.assert_array_equal(pendulum.PendulumParams(num_torque_levels=3).torques,
                                  np.float32([-2, 0, 2]))
    assert pendulum.PendulumParams(num_torque_levels=3).nvec == (3,)
    _, state = pendulum.pendulum_reset(p, KEY, N)
    state = state.replace(theta=jnp.zeros((N, 1), jnp.float32),
                          theta_dot=jnp.zeros((N, 1), jnp.float32))
    a = np.int32([0, 1, 3, 4])
    _, new, reward, _, _ = pendulum.pendulum_step(p, KEY, state, jnp.asarray(a).reshape(N, 1, 1))
    # From rest at the top: theta_dot' = 3 / (m l^2) * u * dt, cost 0.001 u^2.
    u = p.torques[a]
    np.testing.assert_allclose(new.theta_dot[:, 0], 3 * u * 0.05, rtol=1e-6)
    np.testing.assert_allclose(reward[:, 0], -0.001 * u**2, rtol=1e-6)


def test_acrobot_wrap_matches_while_loop():
    x = np.float32([-40, -10, -3.2, -math.pi, 0, 3.1, math.pi, 3.2, 7, 29.7, 45])
    expect = []
    for v in x:
        while v > np.float32(math.pi):
            v = np.float32(v - np.float32(2 * math.pi))
        while v < np.float32(-math.pi):
            v = np.float32(v + np.float32(2 * math.pi))
        expect.append(v)
    np.testing.assert_array_equal(acrobot._wrap_pi(jnp.asarray(x)), np.float32(expect))


def test_errors():
    p = cartpole.CartPoleParams()
    _, state = cartpole.cartpole_reset(p, KEY, N)
    with pytest.raises(ValueError, match="actions must have shape"):
        cartpole.cartpole_step(p, KEY, state, jnp.zeros((N, 1), jnp.int32))
    with pytest.raises(TypeError, match="int32"):
        cartpole.cartpole_step(p, KEY, state, jnp.zeros((N, 1, 1), jnp.float32))
    with pytest.raises(ValueError, match="num_envs"):
        cartpole.cartpole_reset(p, KEY, 0)
    with pytest.raises(ValueError, match="key_data"):
        cartpole.cartpole_reset(p, jnp.zeros((2,), jnp.int32), 2)
    with pytest.raises(ValueError, match="max_steps"):
        cartpole.CartPoleParams(max_steps=0)
    with pytest.raises(ValueError, match="num_torque_levels"):
        pendulum.PendulumParams(num_torque_levels=1)
    # The torques are a table in the kernel's params: 2**31 - 1 levels was an 8 GB table.
    with pytest.raises(ValueError, match=r"num_torque_levels=1025 is invalid; expected an int in \[2, 1024\]"):
        pendulum.PendulumParams(num_torque_levels=1025)
    assert pendulum.PendulumParams(num_torque_levels=1024).torques.shape == (1024,)
    with pytest.raises(ValueError, match="min_position"):
        mountain_car.MountainCarParams(min_position=1.0)
    # Accepted before: a goal the car can never reach (it stays within
    # max_position), and a push that pulls the wrong way.
    with pytest.raises(ValueError, match=r"^mountain_car: goal_position=5.0 is invalid; expected "
                                         r"a float in \(min_position, max_position\] = "
                                         r"\(-1.2, 0.6\]$"):
        jaxwarp.make("mountain_car", backend="jax", goal_position=5.0)
    with pytest.raises(ValueError, match=r"goal_position=-1.2 is invalid"):
        mountain_car.MountainCarParams(goal_position=-1.2)
    assert mountain_car.MountainCarParams(goal_position=0.6).goal_position == 0.6
    for force in (-0.001, 0.0):
        with pytest.raises(ValueError, match=rf"^mountain_car: force={force} is invalid; "
                                             r"expected a finite float > 0$"):
            jaxwarp.make("mountain_car", backend="jax", force=force)
    # Out-of-range actions are clamped.
    lo = cartpole.cartpole_step(p, KEY, state, jnp.full((N, 1, 1), -3, jnp.int32))
    hi = cartpole.cartpole_step(p, KEY, state, jnp.full((N, 1, 1), 9, jnp.int32))
    np.testing.assert_array_equal(lo[0], cartpole.cartpole_step(p, KEY, state,
                                                          jnp.zeros((N, 1, 1), jnp.int32))[0])
    np.testing.assert_array_equal(hi[0], cartpole.cartpole_step(p, KEY, state,
                                                          jnp.ones((N, 1, 1), jnp.int32))[0])
