"""Tag (continuous) on CPU: the XLA:CPU handlers against the pure-JAX reference
over whole episodes, plus the functional API's properties and errors."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify

import jaxwarp
from jaxwarp.core import sincos_fixed
from jaxwarp.envs import tag_continuous as tc
from jaxwarp.envs.tag_continuous import TagContinuousState
from jaxwarp.testing import check_consistency

SMALL = dict(num_taggers=2, num_runners=5, grid_length=5.0, tagging_distance=0.1,
             episode_length=50)


# ---------------------------------------------------------------------------
# cpu vs jax over whole episodes (auto-resets included), bit for bit.
# ---------------------------------------------------------------------------
CONSISTENCY_CASES = {
    "2x5_partial": (dict(SMALL, num_other_agents_observed=4), 6, None),
    "2x5_full": (dict(SMALL, use_full_observation=True), 6, None),
    "2x5_no_exit": (dict(SMALL, num_other_agents_observed=6,
                         runner_exits_game_after_tagged=False), 6, None),
    "2x5_full_no_exit_fixed_start": (dict(SMALL, use_full_observation=True,
                                          runner_exits_game_after_tagged=False,
                                          fixed_start_seed=7, edge_hit_penalty=-1.0,
                                          step_penalty_for_tagger=-0.25,
                                          step_reward_for_runner=0.5), 4, None),
    "warpdrive_default": (dict(config="warpdrive_default"), 2, None),
    "agents_1000": (dict(config="large", episode_length=12), 1, 26),
    # 10,000 agents (the density of `large`): a grid of 50 x 50 cells,
    # observations by (agent, part) pairs; an episode of 3 steps, so a reset
    # is included.
    "agents_10000": (dict(config="large", num_taggers=500, num_runners=9500, grid_length=316.0,
                          episode_length=3), 1, 4),
}


@pytest.mark.parametrize("case", sorted(CONSISTENCY_CASES))
def test_cpu_matches_jax_bitwise(case):
    kw, num_envs, steps = CONSISTENCY_CASES[case]
    report = check_consistency(backends=("cpu", "jax"), num_envs=num_envs, num_steps=steps,
                               rtol=0.0, atol=0.0, **kw)
    assert report.ok, str(report)
    assert report.episodes_finished >= num_envs, str(report)  # every env reset at least once


def test_consistency_checker_reports_first_mismatch():
    report = check_consistency(backends=("cpu", "jax"), num_envs=2, num_steps=3,
                               rtol=0, atol=0, **dict(SMALL, num_other_agents_observed=4))
    assert report.ok
    from jaxwarp import testing

    mm, _ = testing._first_mismatch("obs", np.zeros((2, 3, 4)),
                                    np.array(np.zeros((2, 3, 4))).copy(), 0, 0, 5, 3)
    assert mm is None
    b = np.zeros((2, 3, 4), np.float32)
    b[1, 2, 3] = 1e-3
    mm, diff = testing._first_mismatch("obs", np.zeros((2, 3, 4), np.float32), b, 1e-5,
                                       1e-6, 5, 3)
    assert (mm.step, mm.field, mm.env, mm.agent, mm.index) == (5, "obs", 1, 2, (1, 2, 3))
    assert mm.value_b == pytest.approx(1e-3)
    assert "step 5: obs differs at env 1, agent 2" in str(mm)


# ---------------------------------------------------------------------------
# Hand-computed transitions.
# ---------------------------------------------------------------------------
def _state(x, y, speed=None, direction=None, acc=None, still=None, t=0, left=None,
           num_runners=1):
    x = jnp.asarray([x], jnp.float32)
    n = x.shape[1]
    z = jnp.zeros((1, n), jnp.float32)
    return TagContinuousState(
        x=x, y=jnp.asarray([y], jnp.float32),
        speed=z if speed is None else jnp.asarray([speed], jnp.float32),
        direction=z if direction is None else jnp.asarray([direction], jnp.float32),
        acceleration=z if acc is None else jnp.asarray([acc], jnp.float32),
        still_in_game=jnp.ones((1, n), jnp.int32) if still is None
        else jnp.asarray([still], jnp.int32),
        timestep=jnp.asarray([t], jnp.int32),
        num_runners_left=jnp.asarray([num_runners if left is None else left], jnp.int32),
        episode_return=z)


@pytest.mark.parametrize("backend", ["cpu", "jax"])
def test_tag_by_hand(backend):
    # L=10, tagging distance 0.02*10 = 0.2. Tagger 0 at (1, 1); runner 1 at
    # (1.1, 1): distance 0.1 < 0.2 -> tagged; runner 2 at (5, 5) is far.
    # No-op actions, zero speed: nobody moves.
    env = jaxwarp.make("tag_continuous", backend=backend, num_taggers=1, num_runners=2,
                       grid_length=10.0, num_other_agents_observed=2)
    state = _state([1.0, 1.1, 5.0], [1.0, 1.0, 5.0], t=3, left=2)
    a = jnp.zeros((1, 3, 2), jnp.int32)
    obs, new, reward, done, info = env.step(jax.random.key(0), state, a)
    np.testing.assert_array_equal(reward, [[10.0, -10.0, 0.0]])
    assert not bool(done[0])
    np.testing.assert_array_equal(new.still_in_game, [[1, 0, 1]])
    np.testing.assert_array_equal(new.num_runners_left, [1])
    np.testing.assert_array_equal(new.timestep, [4])
    # The tagged runner still observes this step (observation precedes tagging):
    # its nearest other is the tagger at dx = -0.1 / (sqrt(2) * 10).
    pos_scale = np.float32(1 / (math.sqrt(2) * 10))
    assert obs[0, 1, 0] == pytest.approx((1.0 - np.float32(1.1)) * pos_scale, rel=1e-6)
    assert obs[0, 1, -1] == pytest.approx(4 / 500)
    # Tagger 0 observes runner 1 first (nearest), then runner 2; types 0, 0.
    np.testing.assert_array_equal(obs[0, 0, 10:12], [0.0, 0.0])  # type slots (k=2)
    np.testing.assert_array_equal(obs[0, 0, 12:14], [1.0, 1.0])  # still slots
    # Next step: the tagged runner observes zeros and earns nothing.
    obs2, new2, reward2, done2, _ = env.step(jax.random.key(1), new, a)
    assert np.all(np.asarray(obs2[0, 1]) == 0)
    assert reward2[0, 1] == 0


@pytest.mark.parametrize("backend", ["cpu", "jax"])
def test_last_runner_tagged_ends_and_resets(backend):
    env = jaxwarp.make("tag_continuous", backend=backend, num_taggers=1, num_runners=1,
                       grid_length=10.0, num_other_agents_observed=1)
    state = _state([2.0, 2.05], [2.0, 2.0], t=7, left=1)
    state = state.replace(episode_return=jnp.asarray([[3.0, -1.0]], jnp.float32))
    obs, new, reward, done, info = env.step(jax.random.key(5), state,
                                            jnp.zeros((1, 2, 2), jnp.int32))
    assert bool(done[0])
    np.testing.assert_array_equal(reward, [[10.0, -10.0]])
    # The finished episode's return is kept in info where done ...
    np.testing.assert_array_equal(info["episode_return"], [[13.0, -11.0]])
    # ... and the env restarted: fresh starts from the step key, time 0.
    np.testing.assert_array_equal(new.timestep, [0])
    np.testing.assert_array_equal(new.num_runners_left, [1])
    np.testing.assert_array_equal(new.still_in_game, [[1, 1]])
    ref_obs, ref_state = env.reset(jax.random.key(5), 1)
    np.testing.assert_array_equal(new.x, ref_state.x)
    np.testing.assert_array_equal(obs, ref_obs)


@pytest.mark.parametrize("backend", ["cpu", "jax"])
def test_motion_edge_and_end_reward_by_hand(backend):
    # One tagger far from one runner. Tagger accelerates (level 20 -> +0.1),
    # heading 0: speed 0.5 -> 0.6, x 9.7 + 0.6 = 10.3 > L=10 -> clipped, edge
    # penalty -2. Runner: last step of the episode -> end-of-game reward +1.
    env = jaxwarp.make("tag_continuous", backend=backend, num_taggers=1, num_runners=1,
                       grid_length=10.0, num_other_agents_observed=1, episode_length=5,
                       edge_hit_penalty=-2.0)
    state = _state([9.7, 1.0], [5.0, 1.0], speed=[0.5, 0.0], t=4, left=1)
    a = jnp.asarray([[[20, 0], [0, 0]]], jnp.int32)
    obs, new, reward, done, _ = env.step(jax.random.key(0), state, a)
    np.testing.assert_allclose(reward, [[-2.0, 1.0]])
    assert bool(done[0])  # time limit


@pytest.mark.parametrize("backend", ["cpu", "jax"])
def test_motion_by_hand(backend):
    env = jaxwarp.make("tag_continuous", backend=backend, num_taggers=1, num_runners=1,
                       grid_length=10.0, num_other_agents_observed=1)
    # Heading pi/2 (up), speed 0.5, accelerate +0.1 and turn level 11 (=+0.124 rad
    # of linspace(-2.356, 2.356, 20), index 11 -> 0.124).
    state = _state([5.0, 1.0], [5.0, 1.0], speed=[0.5, 0.0], direction=[np.pi / 2, 0.0])
    a = jnp.asarray([[[20, 11], [0, 0]]], jnp.int32)
    _, new, _, _, _ = env.step(jax.random.key(0), state, a)
    turn = np.linspace(-2.356, 2.356, 20)[10]
    heading = np.float32(np.pi / 2) + np.float32(turn)
    assert new.speed[0, 0] == pytest.approx(0.6, rel=1e-6)
    assert new.acceleration[0, 0] == pytest.approx(0.1, rel=1e-6)
    assert new.direction[0, 0] == pytest.approx(heading, rel=1e-6)
    assert new.x[0, 0] == pytest.approx(5 + 0.6 * np.cos(heading), abs=1e-6)
    assert new.y[0, 0] == pytest.approx(5 + 0.6 * np.sin(heading), abs=1e-6)


def test_sincos_fixed_accuracy():
    a = jnp.linspace(0.0, 2 * np.pi, 100001, dtype=jnp.float32)
    s, c = jax.jit(sincos_fixed)(a)
    a64 = np.asarray(a, np.float64)
    assert np.max(np.abs(np.asarray(s) - np.sin(a64))) < 3e-7
    assert np.max(np.abs(np.asarray(c) - np.cos(a64))) < 3e-7


# ---------------------------------------------------------------------------
# API properties.
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["cpu", "jax"])
def test_reset_shapes_dtypes_and_space(backend):
    env = jaxwarp.make("tag_continuous", backend=backend)
    obs, state = env.reset(jax.random.key(0), 5)
    assert obs.shape == (5, 110, 71) and obs.dtype == jnp.float32
    assert env.observation_space.shape == (71,)
    assert bool(env.observation_space.contains(obs))
    assert state.x.shape == (5, 110) and state.still_in_game.dtype == jnp.int32
    assert state.timestep.shape == (5,)
    np.testing.assert_array_equal(state.num_runners_left, 100)
    assert np.all((np.asarray(state.x) >= 0) & (np.asarray(state.x) <= 20))
    headings = (np.arange(4) * np.pi / 2).astype(np.float32)
    assert np.all(np.isin(np.asarray(state.direction), headings))
    # Each env replica has its own start.
    assert not np.array_equal(state.x[0], state.x[1])
    assert env.action_space.nvec == (21, 21)
    assert env.agent_types.sum() == 10 and env.agent_names[10] == "runner_0"


def test_vmap_with_unbatched_key_matches_loop():
    # vmap over states only: every batch member uses the same step key.
    env = jaxwarp.make("tag_continuous", backend="cpu", **SMALL, num_other_agents_observed=4)
    states = [env.reset(jax.random.key(s), 2)[1] for s in range(3)]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
    a = jnp.ones((3, 2, env.num_agents, 2), jnp.int32)
    key = jax.random.key(9)
    out = jax.vmap(env.step, in_axes=(None, 0, 0))(key, stacked, a)
    for i, s in enumerate(states):
        single = env.step(key, s, a[i])
        np.testing.assert_array_equal(out[0][i], single[0])
        np.testing.assert_array_equal(out[1].x[i], single[1].x)


def test_fixed_start_gives_every_replica_one_start():
    env = jaxwarp.make("tag_continuous", backend="cpu", fixed_start_seed=11)
    _, s1 = env.reset(jax.random.key(0), 3)
    _, s2 = env.reset(jax.random.key(1), 3)
    np.testing.assert_array_equal(s1.x[0], s1.x[2])
    np.testing.assert_array_equal(s1.x, s2.x)


def test_episode_return_accumulates_rewards():
    env = jaxwarp.make("tag_continuous", backend="cpu", **SMALL, num_other_agents_observed=4)
    obs, state = env.reset(jax.random.key(0), 4)
    running = np.zeros((4, 7), np.float32)
    checked = 0
    for t in range(120):
        a = env.action_space.sample(jax.random.key(t + 1000), (4, 7))
        obs, state, reward, done, info = env.step(jax.random.key(t), state, a)
        running += np.asarray(reward)
        for e in np.flatnonzero(np.asarray(done)):
            np.testing.assert_allclose(info["episode_return"][e], running[e], rtol=1e-5)
            running[e] = 0
            checked += 1
    assert checked >= 4


# ---------------------------------------------------------------------------
# Bad input: clear Python errors before any kernel runs.
# ---------------------------------------------------------------------------
def test_unknown_env_backend_config_and_param():
    with pytest.raises(ValueError, match="unknown env 'tag'"):
        jaxwarp.make("tag")
    with pytest.raises(ValueError, match="backend='gpu' is unknown"):
        jaxwarp.make("tag_continuous", backend="gpu")
    with pytest.raises(ValueError, match="unknown config 'huge'"):
        jaxwarp.make("tag_continuous", config="huge")
    with pytest.raises(TypeError, match=r"unknown parameter\(s\) \['num_tagger'\]"):
        jaxwarp.make("tag_continuous", num_tagger=3)


@pytest.mark.skipif(jaxwarp.gpu_available(), reason="a GPU is present")
def test_cuda_backend_without_gpu():
    with pytest.raises(RuntimeError, match="backend='cuda' is not available"):
        jaxwarp.make("tag_continuous", backend="cuda")


@pytest.mark.parametrize("kw, match", [
    (dict(num_taggers=0), "num_taggers=0 is invalid"),
    (dict(num_runners=-1), "num_runners=-1 is invalid"),
    (dict(num_other_agents_observed=110), r"num_other_agents_observed=110 is invalid.*109"),
    (dict(episode_length=0), "episode_length=0"),
    (dict(num_acceleration_levels=65), "num_acceleration_levels=65"),
    (dict(grid_length=-1.0), "grid_length=-1.0"),
    (dict(num_taggers=2.5), "num_taggers=2.5 is invalid; expected an int"),
    (dict(fixed_start_seed=-3), "fixed_start_seed=-3"),
    # Too many agents named both counts (it blamed num_runners=100 for num_taggers=2**31-1).
    (dict(num_taggers=2**31 - 1), (r"^tag_continuous: num_taggers=2147483647 \+ num_runners="
                                   r"100 = 2147483747 agents is invalid; expected num_taggers "
                                   r"\+ num_runners <= 65535$")),
    (dict(num_taggers=10, num_runners=65526), r"num_taggers=10 \+ num_runners=65526 = 65536"),
])
def test_invalid_params(kw, match):
    with pytest.raises(ValueError, match=match):
        jaxwarp.make("tag_continuous", backend="jax", **kw)


@pytest.mark.parametrize("backend", ["cpu", "jax"])
def test_out_of_range_actions_clamped_and_reported_by_checkify(backend):
    kw = dict(SMALL, num_other_agents_observed=4)
    env = jaxwarp.make("tag_continuous", backend=backend, **kw)
    checked = jaxwarp.make("tag_continuous", backend=backend, checks=True, **kw)
    obs, state = env.reset(jax.random.key(0), 2)
    bad = jnp.full((2, 7, 2), 99, jnp.int32).at[0, 0, 1].set(-5)
    clamped = jnp.clip(bad, 0, 20)
    got = env.step(jax.random.key(1), state, bad)
    want = env.step(jax.random.key(1), state, clamped)
    np.testing.assert_array_equal(got[0], want[0])
    err, _ = jax.jit(checkify.checkify(checked.step))(jax.random.key(1), state, bad)
    with pytest.raises(checkify.JaxRuntimeError, match="actions out of range"):
        err.throw()
    err, _ = jax.jit(checkify.checkify(checked.step))(jax.random.key(1), state, clamped)
    assert err.get() is None


# ---------------------------------------------------------------------------
# Tag defines observe_part(): rows (its parts in order, staged) or (agent,
# part) pairs straight to the output; which one the layout picks, and that
# both give the same bits at the same sizes.
# ---------------------------------------------------------------------------
def _layout(**kw):
    from jaxwarp import authoring

    p = tc.TagContinuousParams(**kw)
    lay = authoring.launch_layout(tc.SPEC, p, "cpu")
    return p, {k: int(getattr(lay, k)) for k in ("tpe", "epb", "staged", "obs_staged", "words",
                                                 "smem_bytes")}


def test_observation_path_follows_the_layout():
    # 110 agents: rows staged in shared memory, in passes of as many 71-float
    # rows as fit in 16 KiB: (16384 / 4 - 4) // 71 = 57 rows, two passes.
    p, lay = _layout(**tc.CONFIGS["warpdrive_default"])
    assert (lay["tpe"], lay["epb"], lay["staged"], lay["obs_staged"]) == (110, 1, 1, 1)
    stage_word = (4 * lay["epb"] + lay["words"] * lay["epb"] + 3) // 4 * 4
    rows = (lay["smem_bytes"] // 4 - stage_word - 4) // p.obs_dim
    assert rows == 57
    assert lay["smem_bytes"] <= 110 * 1024
    # 1000 agents: the staged state leaves no room: parts.
    _, lay = _layout(**tc.CONFIGS["large"])
    assert (lay["staged"], lay["obs_staged"]) == (1, 0)
    # 10,000 agents, state in global memory: 57 rows per pass would keep 57
    # of 512 threads busy (fewer than half): parts.
    _, lay = _layout(**dict(tc.CONFIGS["large"], num_taggers=500, num_runners=9500))
    assert (lay["tpe"], lay["staged"], lay["obs_staged"]) == (512, 0, 0)
    # Full observation at 110 agents: 764 floats per row, fewer than a warp's
    # worth of rows fit: parts.
    _, lay = _layout(**dict(tc.CONFIGS["warpdrive_default"], use_full_observation=True))
    assert lay["obs_staged"] == 0
    # 7 agents, 18 envs per block: all 126 rows at once or none. 29 floats
    # (k = 4) fit in 16 KiB, 43 (all 6 others) do not.
    _, lay = _layout(**dict(SMALL, num_other_agents_observed=4))
    assert (lay["epb"], lay["obs_staged"]) == (18, 1)
    _, lay = _layout(**dict(SMALL, use_full_observation=True))
    assert (lay["epb"], lay["obs_staged"]) == (18, 0)


def test_search_kind_follows_the_agent_count(monkeypatch):
    """The scan below GRID_MIN_AGENTS agents, the grid from there (partial
    observations, k <= 16); the environment does not move the threshold
    (JAXWARP_TAG_GRID_MIN_AGENTS was an experiment switch, deleted)."""
    monkeypatch.setenv("JAXWARP_TAG_GRID_MIN_AGENTS", "1")
    assert tc.GRID_MIN_AGENTS == 256
    assert not tc._use_grid(tc.TagContinuousParams())  # 110 agents
    assert tc._use_grid(tc.TagContinuousParams(**tc.CONFIGS["large"]))  # 1000 agents
    assert not tc._use_grid(tc.TagContinuousParams(**tc.CONFIGS["large"],
                                                   use_full_observation=True))
    assert not tc._use_grid(tc.TagContinuousParams(**tc.CONFIGS["large"],
                                                   num_other_agents_observed=17))


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("spacing", [0.5, 0.25])
def test_grid_search_on_a_lattice_keeps_ties_and_cell_edges(spacing, backend, monkeypatch):
    """Agents on a lattice whose lines are cell edges (grid_length 12, 288
    agents: 12 x 12 cells of width 1): every agent has neighbours at exactly
    equal distances and on the edges of the cells the grid search prunes.
    The grid search (CPU, or the CUDA kernel) gives the lists of the scan over
    all agents (CPU, grid turned off) and of the pure-JAX reference, bit for
    bit."""
    n_side = 24 if spacing == 0.5 else 48
    xs, ys = np.meshgrid(np.arange(n_side, dtype=np.float32) * np.float32(spacing),
                         np.arange(n_side, dtype=np.float32) * np.float32(spacing))
    pick = np.random.default_rng(3).permutation(n_side * n_side)[:288]
    x, y = xs.ravel()[pick], ys.ravel()[pick]
    kw = dict(num_taggers=20, num_runners=268, grid_length=12.0, num_other_agents_observed=10,
              tagging_distance=0.001)
    assert tc._use_grid(tc.TagContinuousParams(**kw))
    state = _state(x.tolist(), y.tolist(), t=1, left=268)
    a = jnp.zeros((1, 288, 2), jnp.int32)  # no-op: nobody moves, nobody is tagged

    def obs_of(backend):
        env = jaxwarp.make("tag_continuous", backend=backend, **kw)
        if backend != "cpu":
            return np.asarray(env.step(jax.random.key(0), state, a)[0])
        cpu = jax.devices("cpu")[0]  # the CPU handler, also where a GPU is the default
        with jax.default_device(cpu):
            s, acts = jax.device_put((state, a), cpu)
            return np.asarray(env.step(jax.random.key(0), s, acts)[0])

    grid, ref = obs_of(backend), obs_of("jax")
    monkeypatch.setattr(tc, "GRID_MIN_AGENTS", 100000)  # the scan at this size
    assert not tc._use_grid(tc.TagContinuousParams(**kw))
    scan = obs_of("cpu")
    np.testing.assert_array_equal(grid, ref)
    np.testing.assert_array_equal(grid, scan)
    # Ties are decided by id: many agents have their 4 nearest at one distance.
    d = np.hypot(x[:, None] - x[None], y[:, None] - y[None])
    np.fill_diagonal(d, np.inf)
    assert np.mean(np.sort(d, axis=1)[:, 3] == np.sort(d, axis=1)[:, 4]) > 0.1
