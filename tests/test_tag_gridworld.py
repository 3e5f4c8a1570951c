"""tag_gridworld (WarpDrive's tag on a grid, through the authoring contract):
the XLA:CPU kernels (and the CUDA kernels, `gpu` cases, skipped without a
GPU) against the pure-JAX reference and each other bit for bit over whole
episodes with resets (integer dynamics, one float sum per reward,
observations as products with f32 reciprocals), hand-checked transitions,
vmap, and a short PPO run that must learn."""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify

import jaxwarp
from jaxwarp.envs.tag_gridworld import TagGridworld, TagGridworldParams, TagGridworldState
from jaxwarp.train import config_from_dict

from _checks import assert_vmap_equals_loop, random_rollout, trained_and_random


F32 = np.float32
BACKENDS = ("cpu", "jax")
STAY, RIGHT, LEFT, UP, DOWN = range(5)  # x+1 / x-1 / y+1 / y-1


def small(**kw) -> TagGridworldParams:
    return TagGridworldParams(**{"num_taggers": 2, "grid_length": 4, "episode_length": 10,
                                 **kw})


def make_state(p: TagGridworldParams, xs, ys, timestep=0) -> TagGridworldState:
    """One env with agents on cells (xs[i], ys[i])."""
    n = p.num_agents
    return TagGridworldState(
        x=jnp.asarray([xs], jnp.int32), y=jnp.asarray([ys], jnp.int32),
        wall_hit=jnp.zeros((1, n), jnp.int32), timestep=jnp.asarray([timestep], jnp.int32),
        tagged=jnp.zeros((1,), jnp.int32), episode_return=jnp.zeros((1, n), jnp.float32))


def step_once(backend: str, p: TagGridworldParams, state, moves):
    env = TagGridworld(p, backend=backend)
    actions = jnp.asarray(moves, jnp.int32).reshape(1, p.num_agents, 1)
    return jax.jit(env.step)(jax.random.PRNGKey(7), state, actions)


# ---------------------------------------------------------------------------
# Kernels == reference
# ---------------------------------------------------------------------------
CASES = {
    "warpdrive_default": dict(config="warpdrive_default", episode_length=30),
    "warpdrive_constructor": dict(config="warpdrive_constructor", episode_length=30),
    "small_partial_random_start": dict(num_taggers=3, grid_length=3, episode_length=25,
                                       use_full_observation=False, random_start=True),
    "small_full_random_start": dict(num_taggers=2, grid_length=5, episode_length=25,
                                    random_start=True),
    "many_taggers_partial": dict(num_taggers=40, grid_length=12, episode_length=30,
                                 use_full_observation=False, random_start=True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_kernel_matches_reference_bitwise(case, kernel_pair):
    report = jaxwarp.testing.check_consistency("tag_gridworld", kernel_pair, num_envs=8,
                                               rtol=0, atol=0, **CASES[case])
    assert report.ok, str(report)
    assert report.episodes_finished >= 8, str(report)


# ---------------------------------------------------------------------------
# Shapes, spaces, starts
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("full", [True, False])
def test_shapes_dtypes_and_spaces(backend, full):
    p = small(use_full_observation=full)
    env = TagGridworld(p, backend=backend)
    n = 3
    assert env.num_agents == n and env.obs_dim == (4 * n + 1 if full else 6)
    assert tuple(env.action_space.nvec) == (5,)
    groups = env.policy_groups
    np.testing.assert_array_equal(groups["tagger"], [0, 1])
    np.testing.assert_array_equal(groups["runner"], [2])
    obs, state = jax.jit(env.reset, static_argnums=1)(jax.random.PRNGKey(0), 6)
    assert obs.shape == (6, n, env.obs_dim) and obs.dtype == jnp.float32
    for f in ("x", "y", "wall_hit"):
        assert getattr(state, f).shape == (6, n) and getattr(state, f).dtype == jnp.int32
    assert state.timestep.shape == state.tagged.shape == (6,)
    assert state.episode_return.dtype == jnp.float32
    actions = env.action_space.sample(jax.random.PRNGKey(1), (6, n))
    obs, state, reward, done, info = jax.jit(env.step)(jax.random.PRNGKey(2), state, actions)
    assert obs.shape == (6, n, env.obs_dim) and reward.shape == (6, n)
    assert reward.dtype == jnp.float32 and done.dtype == jnp.bool_
    assert info["terminated"].shape == info["truncated"].shape == (6,)
    assert bool(env.observation_space.contains(obs))


@pytest.mark.parametrize("backend", BACKENDS)
def test_fixed_start_and_full_observation_layout(backend):
    p = small(grid_length=5, episode_length=4)
    obs, state = TagGridworld(p, backend=backend).reset(jax.random.PRNGKey(3), 2)
    # WarpDrive: taggers on (int(0.5 L), int(0.5 L)) = (2, 2), the runner on (0, 0).
    np.testing.assert_array_equal(state.x, [[2, 2, 0]] * 2)
    np.testing.assert_array_equal(state.y, [[2, 2, 0]] * 2)
    # Agent 1's row: x/L of all, y/L of all, types (runner 1), one-hot of self, t/T.
    inv = F32(1) / F32(5)
    expected = np.array([2 * inv, 2 * inv, 0, 2 * inv, 2 * inv, 0, 0, 0, 1, 0, 1, 0, 0], F32)
    np.testing.assert_array_equal(obs[0, 1], expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_start_draws_cells_over_the_grid(backend):
    p = small(random_start=True, grid_length=3)
    _, s1 = TagGridworld(p, backend=backend).reset(jax.random.PRNGKey(0), 256)
    _, s2 = TagGridworld(p, backend=backend).reset(jax.random.PRNGKey(1), 256)
    cells = np.asarray(s1.x)
    assert set(np.unique(cells)) == {0, 1, 2, 3}  # every column of the 4 x 4 grid is used
    assert not np.array_equal(s1.x, s2.x)  # keyed


# ---------------------------------------------------------------------------
# Hand-checked transitions
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_moves_and_wall_clipping(backend):
    p = small()  # L = 4, penalty 5, step cost 0.01, wall 0.1
    # tagger 0 on (4, 1) moves x+1: clipped; tagger 1 on (2, 2) moves y-1;
    # the runner on (0, 3) moves x-1: clipped.
    state = make_state(p, [4, 2, 0], [1, 2, 3])
    obs, s, reward, done, info = step_once(backend, p, state, [RIGHT, DOWN, LEFT])
    np.testing.assert_array_equal(s.x, [[4, 2, 0]])
    np.testing.assert_array_equal(s.y, [[1, 1, 3]])
    np.testing.assert_array_equal(s.wall_hit, [[1, 0, 1]])
    # Reward = wall term + tag term, in that order (WarpDrive's):
    # taggers -0.01 each (+ -0.1 at the wall), the runner +0.01 (+ -0.1 at the wall).
    np.testing.assert_array_equal(
        reward, [[F32(-0.1) + F32(-0.01), F32(0) + F32(-0.01), F32(-0.1) + F32(0.01)]])
    assert not bool(done[0]) and int(s.timestep[0]) == 1 and int(s.tagged[0]) == 0
    np.testing.assert_array_equal(s.episode_return, reward)
    # The last entry of a row is t/T = 1 * (1/10).
    assert float(obs[0, 0, -1]) == F32(1) * (F32(1) / F32(10))


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_of_range_actions_are_clamped(backend):
    p = small()
    state = make_state(p, [2, 2, 2], [2, 3, 1])
    _, a, ra, *_ = step_once(backend, p, state, [-3, 9, 4])
    _, b, rb, *_ = step_once(backend, p, state, [STAY, DOWN, DOWN])
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.y, b.y)
    np.testing.assert_array_equal(ra, rb)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tag_ends_the_episode_with_the_rewards(backend):
    p = small()
    # Tagger 0 on (1, 0) steps onto the runner on (0, 0), which stays; tagger 1
    # is far away but shares the reward.
    state = make_state(p, [1, 4, 0], [0, 4, 0], timestep=5)
    state = state.replace(episode_return=jnp.asarray([[1.0, 2.0, 3.0]], jnp.float32))
    obs, s, reward, done, info = step_once(backend, p, state, [LEFT, STAY, STAY])
    np.testing.assert_array_equal(reward, [[10.0, 10.0, -5.0]])
    assert bool(done[0]) and bool(info["terminated"][0]) and not bool(info["truncated"][0])
    assert int(s.tagged[0]) == 1  # kept through the reset: the episode ended with a tag
    np.testing.assert_array_equal(s.episode_return, [[11.0, 12.0, -2.0]])
    # Auto-reset: back at the start, time 0, observation of the new episode.
    np.testing.assert_array_equal(s.x, [[2, 2, 0]])
    np.testing.assert_array_equal(s.y, [[2, 2, 0]])
    assert int(s.timestep[0]) == 0 and float(obs[0, 0, -1]) == 0.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_swapping_cells_is_not_a_tag(backend):
    # Tags are checked after the moves only: a tagger and the runner that
    # cross each other's path do not meet.
    p = small()
    state = make_state(p, [1, 4, 0], [0, 4, 0])
    _, s, reward, done, _ = step_once(backend, p, state, [LEFT, STAY, RIGHT])
    np.testing.assert_array_equal(s.x, [[0, 4, 1]])
    assert not bool(done[0]) and int(s.tagged[0]) == 0
    np.testing.assert_array_equal(reward, [[F32(0) + F32(-0.01)] * 2 + [F32(0) + F32(0.01)]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_truncation_at_episode_length(backend):
    p = small(episode_length=3)
    env = TagGridworld(p, backend=backend)
    obs, state = env.reset(jax.random.PRNGKey(0), 2)
    stay = jnp.zeros((2, 3, 1), jnp.int32)
    step = jax.jit(env.step)
    for t in range(1, 4):
        obs, state, reward, done, info = step(jax.random.PRNGKey(t), state, stay)
        assert bool(jnp.all(done)) == (t == 3)
        assert not bool(jnp.any(info["terminated"]))
        assert bool(jnp.all(info["truncated"])) == (t == 3)
    np.testing.assert_allclose(state.episode_return, [[-0.03, -0.03, 0.03]] * 2, rtol=1e-6)
    assert int(state.timestep[0]) == 0 and float(obs[0, 2, -1]) == 0.0


def test_checks_report_out_of_range_actions():
    env = TagGridworld(small(), backend="cpu", checks=True)
    _, state = env.reset(jax.random.PRNGKey(0), 1)
    bad = jnp.asarray([[[0], [5], [1]]], jnp.int32)
    err, _ = checkify.checkify(env.step)(jax.random.PRNGKey(1), state, bad)
    with pytest.raises(checkify.JaxRuntimeError, match="out of range"):
        err.throw()


@pytest.mark.parametrize("kw, match", [
    (dict(num_taggers=0), "num_taggers"), (dict(grid_length=0), "grid_length"),
    (dict(grid_length=2.5), "grid_length"), (dict(episode_length=0), "episode_length"),
    (dict(wall_hit_penalty=float("nan")), "wall_hit_penalty"),
    (dict(random_start=1), "random_start")])
def test_params_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        TagGridworldParams(**kw)


def test_make_with_named_configs():
    env = jaxwarp.make("tag_gridworld", backend="jax", config="warpdrive_constructor")
    assert (env.params.num_taggers, env.params.grid_length) == (10, 10)
    assert env.params.tag_penalty_for_runner == 2.0
    d = jaxwarp.make("tag_gridworld", backend="jax").params
    assert (d.num_taggers, d.grid_length, d.episode_length, d.tag_penalty_for_runner) == (
        4, 100, 100, 5.0)


# ---------------------------------------------------------------------------
# vmap
# ---------------------------------------------------------------------------
def test_kernel_vmap_over_seeds_equals_loop(kernel_backend):
    p = small(random_start=True, episode_length=6)
    env = TagGridworld(p, backend=kernel_backend)
    batched = assert_vmap_equals_loop(lambda k: random_rollout(env, k, 4, 10),
                                      jax.random.split(jax.random.PRNGKey(3), 3))
    assert int(batched[3].sum()) >= 3  # episodes ended inside the rollout


@pytest.mark.gpu
def test_auto_runs_the_kernel_on_a_gpu():
    assert TagGridworld(backend="auto").backend == "cuda"


# ---------------------------------------------------------------------------
# It learns
# ---------------------------------------------------------------------------
def test_short_ppo_run_taggers_beat_random_taggers():
    """40 PPO updates (~7 s on 2 cores): 2 taggers on a 7 x 7 grid against a
    uniformly random runner. Random taggers tag within 30 steps now and then
    (tagger return about 4); trained ones nearly always, and sooner (about 9.7)."""
    learned = config_from_dict({
        "env": "tag_gridworld", "env_config": None,
        "env_params": {"num_taggers": 2, "grid_length": 6, "episode_length": 30},
        "backend": "cpu", "num_envs": 32, "num_steps": 32, "total_env_steps": 32 * 32 * 40,
        "gamma": 0.95, "ent_coef": 0.01,
        "policies": {"tagger": {"hidden_sizes": [64, 64], "lr": 0.003},
                     "runner": {"model": "uniform", "train": False}},
        "chunk_updates": 10, "checkpoint_every": 10})
    m_learned, m_random = trained_and_random(learned, jax.random.PRNGKey(0))
    r_learned = float(np.nanmean(m_learned["tagger/episode_return"][-10:]))
    r_random = float(np.nanmean(m_random["tagger/episode_return"][-10:]))
    print(f"tagger return per episode: learned {r_learned:.2f}, random {r_random:.2f}")
    assert r_random > 1.0  # random taggers do tag sometimes
    assert r_learned > 8.5 and r_learned > 1.8 * r_random, (r_learned, r_random)
