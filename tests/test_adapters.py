"""Host-side adapters (jaxwarp/adapters): Gymnasium vector env, PettingZoo
ParallelEnv, PyTorch through DLPack.

Every value is checked against the direct jaxwarp API driven with the
adapters' key schedule (`jaxwarp.adapters._batched`): key = key(seed);
split once for reset, once per step.
"""

from __future__ import annotations

import subprocess
import sys
import types
import warnings

import jax
import numpy as np
import pytest

import jaxwarp

gym = pytest.importorskip("gymnasium", reason="gymnasium (test extra) is not installed")

from jaxwarp.adapters.gymnasium import JaxwarpVectorEnv, make_vec, single_spaces

BACKENDS = ("cpu", "jax")
N = 16


@pytest.fixture(autouse=True)
def _on_the_cpu_device():
    """These tests drive the cpu and jax backends (tests/test_adapters_gpu.py
    covers cuda); on a machine with a GPU their arrays stay on the CPU device
    too, where the cpu backend's calls run."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield


def seed_words(seed):
    """The adapters' key for an int seed, built by hand: threefry key data
    u32[seed >> 32, seed mod 2**32] (jax.random.key(seed) with x64 on; with x64
    off, as in these tests, jax.random.key(seed) for seed < 2**32)."""
    return jax.random.wrap_key_data(np.array([seed >> 32, seed & 0xFFFFFFFF], np.uint32))


def direct_rollout(env, seed, actions):
    """The direct API with the adapters' key schedule: obs after reset, then per
    step (obs, reward, terminated, truncated, episode_return, final obs: the
    obs of step(autoreset=False) from the same key and state); actions
    i32[T, envs, agents, heads]; seed: an int (jax.random.key(seed)) or a key."""
    key = seed if isinstance(seed, jax.Array) else jax.random.key(seed)
    key, k = jax.random.split(key)
    obs, state = env.reset(k, actions.shape[1])
    out = [np.asarray(obs)]
    for a in actions:
        key, k = jax.random.split(key)
        final = np.asarray(env.step(k, state, jax.numpy.asarray(a), autoreset=False)[0])
        obs, state, rew, _, info = env.step(k, state, jax.numpy.asarray(a))
        out.append((np.asarray(obs), np.asarray(rew), np.asarray(info["terminated"]),
                    np.asarray(info["truncated"]), np.asarray(info["episode_return"]), final))
    return out


@pytest.fixture(scope="module", params=BACKENDS)
def cartpole_any(request):
    # max_steps=20: truncations within the test's 60 steps, terminations too.
    return jaxwarp.make("cartpole", backend=request.param, max_steps=20)


@pytest.fixture(scope="module")
def cartpole():
    return jaxwarp.make("cartpole", backend="cpu", max_steps=20)


@pytest.fixture(scope="module")
def spread():
    return jaxwarp.make("mpe_simple_spread", backend="cpu")


def random_actions(rng, env, steps, num_envs):
    nvec = np.asarray(env.action_space.nvec)
    return rng.integers(0, nvec, size=(steps, num_envs, env.num_agents, len(nvec))
                        ).astype(np.int32)


# ---------------------------------------------------------------------------
# Import hygiene
# ---------------------------------------------------------------------------
def fresh_python(code: str) -> str:
    """Runs `code` in a fresh interpreter (nothing imported yet), which must
    succeed; its stdout."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_importing_jaxwarp_and_adapters_imports_no_optional_framework():
    fresh_python("import sys, jaxwarp, jaxwarp.adapters\n"
                 "bad = [m for m in ('gymnasium', 'pettingzoo', 'torch') if m in sys.modules]\n"
                 "assert not bad, bad\n"
                 "assert 'JaxwarpVectorEnv' in dir(jaxwarp.adapters)\n")


# ---------------------------------------------------------------------------
# Gymnasium
# ---------------------------------------------------------------------------
def test_gym_values_equal_the_direct_api(cartpole_any):
    acts = random_actions(np.random.default_rng(0), cartpole_any, 60, N)
    ref = direct_rollout(cartpole_any, 7, acts)
    envs = JaxwarpVectorEnv(cartpole_any, N, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    obs, infos = envs.reset(seed=7)
    assert infos == {}
    np.testing.assert_array_equal(obs, ref[0][:, 0])
    finished = 0
    assert envs.metadata["final_obs"] is True
    for a, (r_obs, r_rew, r_term, r_trunc, r_ret, r_final) in zip(acts, ref[1:]):
        obs, rew, term, trunc, infos = envs.step(a[:, 0, 0].astype(np.int64))
        assert obs.dtype == np.float32 and obs.shape == (N, 4)
        assert rew.dtype == np.float64 and rew.shape == (N,)  # as SyncVectorEnv's
        assert term.dtype == np.bool_ and trunc.dtype == np.bool_
        np.testing.assert_array_equal(obs, r_obs[:, 0])
        np.testing.assert_array_equal(rew, r_rew[:, 0])
        np.testing.assert_array_equal(term, r_term)
        np.testing.assert_array_equal(trunc, r_trunc)
        done = r_term | r_trunc
        if done.any():
            finished += done.sum()
            final = infos["final_info"]
            np.testing.assert_array_equal(infos["_final_info"], done)
            np.testing.assert_array_equal(final["_episode_return"], done)
            np.testing.assert_array_equal(final["episode_return"][done], r_ret[done, 0])
            np.testing.assert_array_equal(final["episode_return"][~done], 0)
            np.testing.assert_array_equal(final["terminated"], r_term)
            np.testing.assert_array_equal(final["truncated"], r_trunc)
            np.testing.assert_array_equal(infos["_final_obs"], done)
            assert infos["final_obs"].dtype == object
            assert all(infos["final_obs"][e] is None for e in np.flatnonzero(~done))
            np.testing.assert_array_equal(np.stack(infos["final_obs"][done]),
                                          r_final[done, 0])
        else:
            assert infos == {}
    assert finished >= N  # every env ended at least one episode (max_steps=20)
    envs.close()


def test_gym_same_step_autoreset(cartpole):
    """A done env's returned obs is the next episode's first obs, its return is
    reported once, and Gymnasium's own episode statistics agree."""
    envs = gym.wrappers.vector.RecordEpisodeStatistics(
        JaxwarpVectorEnv(cartpole, N, autoreset_mode="same_step"))
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
    assert envs.metadata["final_obs"] is True
    envs.reset(seed=1)
    steps = np.zeros(N, int)
    seen_trunc = seen_term = False
    for _ in range(45):
        obs, _, term, trunc, infos = envs.step(np.ones(N, np.int64))
        steps += 1
        done = term | trunc
        if done.any():
            # First obs of a new episode: CartPole starts uniform in [-0.05, 0.05].
            assert np.all(np.abs(obs[done]) <= 0.05)
            # The final obs of a terminated env: the pole past 12 degrees or
            # the cart past 2.4 (Gymnasium's termination rule).
            final = np.stack(infos["final_obs"][term])
            assert np.all((np.abs(final[:, 2]) > 0.2094) | (np.abs(final[:, 0]) > 2.4))
            np.testing.assert_array_equal(infos["final_info"]["episode_return"][done],
                                          steps[done])
            np.testing.assert_array_equal(infos["episode"]["r"][done], steps[done])
            np.testing.assert_array_equal(infos["episode"]["l"][done], steps[done])
            np.testing.assert_array_equal(trunc[done], steps[done] == 20)
            seen_trunc |= bool(trunc.any())
            seen_term |= bool(term.any())
            steps[done] = 0
    assert seen_term  # pushing right always tips the pole before 20 steps
    assert np.all(steps < 20)


def test_gym_final_obs_off_and_unsupported(cartpole):
    """final_obs=False: no final observations (one env step per step); an env
    whose step cannot run without auto-reset: off by default, refused when
    asked for."""
    envs = JaxwarpVectorEnv(cartpole, N, final_obs=False, autoreset_mode="same_step")
    assert envs.metadata["final_obs"] is False
    envs.reset(seed=1)
    for _ in range(25):
        _, _, term, trunc, infos = envs.step(np.ones(N, np.int64))
        assert "final_obs" not in infos

    class NoAutoresetArg:
        def __init__(self, env):
            self._env = env

        def __getattr__(self, name):
            return getattr(self._env, name)

        def step(self, key, state, actions):
            return self._env.step(key, state, actions)

    plain = NoAutoresetArg(cartpole)
    assert JaxwarpVectorEnv(plain, 2, autoreset_mode="same_step").metadata["final_obs"] is False
    with pytest.raises(ValueError, match=r"final_obs=True: .* cannot step without auto-reset"):
        JaxwarpVectorEnv(plain, 2, final_obs=True, autoreset_mode="same_step")
    with pytest.raises(TypeError, match=r"final_obs must be None, True or False"):
        JaxwarpVectorEnv(cartpole, 2, final_obs="yes")
    # The other modes step without auto-reset: refused for such an env, and
    # final_obs (same-step only) is refused with them.
    for mode in ("next_step", "disabled"):
        with pytest.raises(ValueError, match=r"cannot step without auto-reset"):
            JaxwarpVectorEnv(plain, 2, autoreset_mode=mode)
        with pytest.raises(ValueError, match=r"final_obs=True applies to .*SAME_STEP"):
            JaxwarpVectorEnv(cartpole, 2, final_obs=True, autoreset_mode=mode)
        assert JaxwarpVectorEnv(cartpole, 2, autoreset_mode=mode).metadata["final_obs"] is False
    with pytest.raises(ValueError, match="autoreset_mode must be"):
        JaxwarpVectorEnv(cartpole, 2, autoreset_mode="sometimes")


def test_gym_truncation_at_the_time_limit():
    # MPE episodes are max_steps + 1 steps long and never terminate (jaxwarp/envs/_mpe.py).
    env = jaxwarp.make("mpe_simple_spread", backend="cpu", max_steps=4)
    envs = JaxwarpVectorEnv(env, 4, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    envs.reset(seed=0)
    ret = np.zeros((4, 3), np.float32)
    for t in range(1, 11):
        _, rew, term, trunc, infos = envs.step(np.zeros((4, 3, 1), np.int64))
        ret += rew
        assert not term.any()
        assert trunc.all() == (t % 5 == 0) and trunc.any() == (t % 5 == 0)
        if t % 5 == 0:
            np.testing.assert_allclose(infos["final_info"]["episode_return"], ret, rtol=1e-6)
            ret[:] = 0


def test_gym_spaces_single_agent(cartpole):
    envs = JaxwarpVectorEnv(cartpole, N)
    assert envs.single_action_space == gym.spaces.Discrete(2)
    assert envs.action_space == gym.spaces.MultiDiscrete(np.full(N, 2))
    box = envs.single_observation_space
    assert box.shape == (4,) and box.dtype == np.float32
    np.testing.assert_array_equal(box.low, cartpole.observation_space.low)
    np.testing.assert_array_equal(box.high, cartpole.observation_space.high)
    assert envs.observation_space.shape == (N, 4)
    obs, _ = envs.reset(seed=0)
    envs.action_space.seed(0)
    for _ in range(30):
        assert obs in envs.observation_space
        obs, *_ = envs.step(envs.action_space.sample())


def test_gym_spaces_multi_agent(spread):
    envs = JaxwarpVectorEnv(spread, 4)
    assert envs.single_action_space == gym.spaces.MultiDiscrete(np.full((3, 1), 5))
    assert envs.single_observation_space.shape == (3, 18)
    assert envs.single_observation_space.dtype == np.float32
    acts = random_actions(np.random.default_rng(1), spread, 5, 4)
    ref = direct_rollout(spread, 3, acts)
    obs, _ = envs.reset(seed=3)
    np.testing.assert_array_equal(obs, ref[0])
    for a, (r_obs, r_rew, *_) in zip(acts, ref[1:]):
        obs, rew, *_ = envs.step(a)
        assert obs.shape == (4, 3, 18) and rew.shape == (4, 3)  # one reward per agent
        np.testing.assert_array_equal(obs, r_obs)
        np.testing.assert_array_equal(rew, r_rew)
        assert obs in envs.observation_space


def test_single_spaces_multi_head():
    fake = types.SimpleNamespace(
        num_agents=1, observation_space=jaxwarp.spaces.Box(np.zeros(3), np.ones(3)),
        action_space=jaxwarp.spaces.MultiDiscrete((3, 4)))
    obs_space, act_space = single_spaces(fake)
    assert act_space == gym.spaces.MultiDiscrete([3, 4])
    assert obs_space == gym.spaces.Box(0, 1, (3,), np.float32)
    fake.num_agents = 2
    obs_space, act_space = single_spaces(fake)
    assert act_space == gym.spaces.MultiDiscrete([[3, 4], [3, 4]])
    assert obs_space.shape == (2, 3)


def test_gym_seeding_is_deterministic(cartpole):
    envs = JaxwarpVectorEnv(cartpole, N)
    acts = np.random.default_rng(2).integers(0, 2, (25, N))

    def run(seed):
        obs, _ = envs.reset(seed=seed)
        out = [obs]
        for a in acts:
            out.append(envs.step(a)[0])
        return np.stack(out)

    a, b, c = run(5), run(5), run(6)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a[0], c[0])
    # Without a seed the key continues: a new start, not a replay.
    first, _ = envs.reset(seed=5)
    again, _ = envs.reset()
    assert not np.array_equal(first, again)


def test_gym_reset_mask_resets_only_the_masked_envs(cartpole):
    envs = JaxwarpVectorEnv(cartpole, N)
    envs.reset(seed=0)
    for _ in range(3):
        before, *_ = envs.step(np.ones(N, np.int64))
    mask = np.zeros(N, bool)
    mask[::3] = True
    after, _ = envs.reset(options={"reset_mask": mask})
    np.testing.assert_array_equal(after[~mask], before[~mask])
    assert not np.array_equal(after[mask], before[mask])
    assert np.all(np.abs(after[mask]) <= 0.05)
    with pytest.raises(ValueError, match="reset_mask"):
        envs.reset(options={"reset_mask": np.zeros(N, bool)})


def test_gym_errors(cartpole):
    envs = JaxwarpVectorEnv(cartpole, 4)
    with pytest.raises(RuntimeError, match="reset"):
        envs.step(np.zeros(4, np.int64))
    envs.reset(seed=0)
    with pytest.raises(ValueError, match="shape"):
        envs.step(np.zeros((4, 1), np.int64))
    with pytest.raises(ValueError, match="out of range"):
        envs.step(np.full(4, 2))
    with pytest.raises(TypeError, match="integers"):
        envs.step(np.zeros(4, np.float32))
    with pytest.raises(TypeError, match="seed"):
        envs.reset(seed="1")
    with pytest.raises(TypeError, match="seed"):
        envs.reset(seed=[1, 2.5, 3, 4])
    with pytest.raises(ValueError, match="one per env"):
        envs.reset(seed=[1, 2])
    # Gymnasium: >= 0; the key holds 64 bits of seed.
    for bad in (-1, 2**64, [0, 1, -2, 3], [0, 2**64, 1, 2]):
        with pytest.raises(ValueError, match=r"seed must be an int in \[0, 2\*\*64\)"):
            envs.reset(seed=bad)
    assert envs.render() is None  # no render_mode, as Gymnasium does
    with pytest.raises(ValueError, match="render_mode"):
        JaxwarpVectorEnv(cartpole, 4, render_mode="human")


def test_gym_render_rgb_array_draws_every_env(cartpole):
    from jaxwarp.render import render_frames

    envs = JaxwarpVectorEnv(cartpole, 3, render_mode="rgb_array", render_size=48)
    assert "rgb_array" in envs.metadata["render_modes"]
    with pytest.raises(RuntimeError, match="reset"):
        envs.render()
    envs.reset(seed=0)
    envs.step(np.ones(3, np.int64))
    frames = envs.render()
    assert len(frames) == 3
    assert all(f.shape == (48, 48, 3) and f.dtype == np.uint8 for f in frames)
    state = envs._batch.state  # the same frame as jaxwarp.render draws from the state
    for e in range(3):
        one = render_frames(cartpole, jax.tree.map(lambda x: x[None], state), e, size=48)[0]
        np.testing.assert_array_equal(frames[e], np.asarray(one))
    assert not all(np.array_equal(frames[0], f) for f in frames[1:])  # different starts


def test_pettingzoo_render_rgb_array():
    pytest.importorskip("pettingzoo", reason="pettingzoo (test extra) is not installed")
    from jaxwarp.adapters.pettingzoo import parallel_env

    env = parallel_env("mpe_simple_spread", backend="jax", render_mode="rgb_array")
    assert env.render_mode == "rgb_array"
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (128, 128, 3) and frame.dtype == np.uint8
    assert (frame != 255).any()  # something is drawn on the white background
    assert parallel_env("mpe_simple_spread", backend="jax").render() is None


def test_gym_copy_false_returns_read_only_views(cartpole):
    envs = JaxwarpVectorEnv(cartpole, 4, copy=False)
    obs, _ = envs.reset(seed=0)
    assert not obs.flags.writeable
    obs2, *_ = envs.step(np.zeros(4, np.int64))
    assert not np.shares_memory(obs, obs2)
    assert JaxwarpVectorEnv(cartpole, 4).reset(seed=0)[0].flags.writeable


def test_make_vec_and_checks():
    envs = make_vec("cartpole", 4, backend="cpu", checks=False, max_steps=7)
    assert envs.env.params.max_steps == 7
    checked = make_vec("cartpole", 4, backend="cpu", checks=True)
    checked.reset(seed=0)
    obs, *_ = checked.step(np.ones(4, np.int64))
    assert obs.shape == (4, 4)


def test_adapters_take_an_env_name_or_raise_type_error():
    from jaxwarp.adapters.pettingzoo import JaxwarpParallelEnv

    envs = JaxwarpVectorEnv("cartpole", 8)
    assert envs.env.name == "cartpole" and envs.num_envs == 8
    assert envs.reset(seed=0)[0].shape == (8, 4)
    par = JaxwarpParallelEnv("mpe_simple_spread")
    assert par.possible_agents == ["agent_0", "agent_1", "agent_2"]
    for bad in (3, None, object()):
        with pytest.raises(TypeError, match=r"JaxwarpVectorEnv: env must be a jaxwarp env"):
            JaxwarpVectorEnv(bad, 8)
        with pytest.raises(TypeError, match=r"JaxwarpParallelEnv: env must be a jaxwarp env"):
            JaxwarpParallelEnv(bad)
    with pytest.raises(ValueError, match="unknown env"):
        JaxwarpVectorEnv("no_such_env", 8)


def test_lazy_names_without_their_framework_are_missing_attributes():
    # torch made unimportable (None in sys.modules), whether or not it is installed.
    code = ("import sys, inspect\n"
            "sys.modules['torch'] = None\n"
            "import jaxwarp.adapters as a\n"
            "assert not hasattr(a, 'TorchVectorEnv')\n"
            "assert hasattr(a, 'JaxwarpVectorEnv')\n"
            "names = [n for n, _ in inspect.getmembers(a)]\n"
            "assert 'JaxwarpVectorEnv' in names and 'TorchVectorEnv' not in names, names\n"
            "try:\n"
            "    a.TorchVectorEnv\n"
            "except AttributeError as e:\n"
            "    assert isinstance(e.__cause__, ImportError), repr(e.__cause__)\n"
            "    assert \"optional package 'torch'\" in str(e), str(e)\n"
            "    print(e)\n")
    assert "has no attribute 'TorchVectorEnv'" in fresh_python(code)


def test_gym_next_step_autoreset_is_the_default(cartpole):
    """NEXT_STEP: the step that ends an episode returns its final obs; the next
    step ignores that env's action and returns a fresh start, reward 0, no flags;
    the other envs step as the direct API does."""
    envs = JaxwarpVectorEnv(cartpole, N)
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    acts = random_actions(np.random.default_rng(3), cartpole, 60, N)
    ref = direct_rollout(cartpole, 5, acts)
    obs, _ = envs.reset(seed=5)
    np.testing.assert_array_equal(obs, ref[0][:, 0])
    pending = np.zeros(N, bool)
    ever_done = np.zeros(N, bool)
    steps = np.zeros(N, int)
    ret = np.zeros(N)
    seen = 0
    for t, a in enumerate(acts):
        obs, rew, term, trunc, infos = envs.step(a[:, 0, 0])
        assert rew.dtype == np.float64
        # Until an env's first episode ends, its values are the direct API's
        # (the same key schedule; the final obs on the ending step).
        live = ~ever_done
        np.testing.assert_array_equal(obs[live], ref[t + 1][5][live, 0])
        np.testing.assert_array_equal(rew[live], ref[t + 1][1][live, 0])
        # The restarting envs: a fresh start, reward 0, not done.
        assert np.all(np.abs(obs[pending]) <= 0.05)
        np.testing.assert_array_equal(rew[pending], 0.0)
        assert not (term | trunc)[pending].any()
        steps[~pending] += 1
        ret[~pending] += rew[~pending]
        done = term | trunc
        if done.any():
            seen += int(term.sum())
            np.testing.assert_array_equal(infos["_episode_return"], done)
            np.testing.assert_array_equal(infos["episode_return"][done], ret[done])
            # Final observations of terminated envs: past Gymnasium's thresholds.
            assert np.all((np.abs(obs[term, 2]) > 0.2094) | (np.abs(obs[term, 0]) > 2.4))
            np.testing.assert_array_equal(trunc[done], steps[done] == 20)
        steps[done] = 0
        ret[done] = 0
        ever_done |= done
        pending = done
    assert seen > N  # every env finished several episodes


def test_gym_disabled_autoreset_waits_for_a_masked_reset(cartpole):
    envs = JaxwarpVectorEnv(cartpole, N, autoreset_mode=gym.vector.AutoresetMode.DISABLED)
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.DISABLED
    envs.reset(seed=2)
    done = np.zeros(N, bool)
    for _ in range(30):
        obs, _, term, trunc, _ = envs.step(np.ones(N, np.int64))
        done = term | trunc
        if done.any():
            break
    assert done.any()
    # Still ended on the next step (no reset inside step) ...
    _, _, term2, trunc2, _ = envs.step(np.ones(N, np.int64))
    assert (term2 | trunc2)[done].all()
    # ... until the caller resets those envs, Gymnasium's way.
    before = envs.step(np.ones(N, np.int64))[0]
    after, _ = envs.reset(options={"reset_mask": done})
    assert np.all(np.abs(after[done]) <= 0.05)
    np.testing.assert_array_equal(after[~done], before[~done])


def test_gym_vector_wrappers_work_on_the_adapter():
    """Gymnasium's vector wrappers, which need NEXT_STEP or DISABLED autoreset."""
    from gymnasium.wrappers import vector as wv

    def pair(name, **params):  # the same env twice: raw and wrapped, same seed
        return [make_vec(name, 4, backend="cpu", **params) for _ in range(2)]

    raw, envs = pair("cartpole", max_steps=20)
    norm = wv.NormalizeObservation(envs)
    raw.reset(seed=0)
    norm.reset(seed=0)
    for _ in range(30):
        a = np.ones(4, np.int64)
        r_obs, *_ = raw.step(a)
        obs, *_ = norm.step(a)
        rms = norm.obs_rms  # updated with this step's obs, then applied
        np.testing.assert_allclose(obs, (r_obs - rms.mean) / np.sqrt(rms.var + norm.epsilon),
                                   rtol=1e-5, atol=1e-6)
    assert rms.count > 30 * 4

    raw, envs = pair("mpe_simple_spread")
    flat = wv.FlattenObservation(envs)
    assert flat.single_observation_space.shape == (54,)
    r_obs, _ = raw.reset(seed=1)
    obs, _ = flat.reset(seed=1)
    np.testing.assert_array_equal(obs, r_obs.reshape(4, 54))

    raw, envs = pair("cartpole")
    f64 = wv.DtypeObservation(envs, np.float64)
    r_obs, _ = raw.reset(seed=2)
    obs, _ = f64.reset(seed=2)
    assert obs.dtype == np.float64
    np.testing.assert_array_equal(obs, r_obs.astype(np.float64))

    raw, envs = pair("cartpole", max_steps=10)
    nrew = wv.NormalizeReward(envs, gamma=0.9)
    raw.reset(seed=3)
    nrew.reset(seed=3)
    for _ in range(25):
        a = np.zeros(4, np.int64)
        _, r_rew, *_ = raw.step(a)
        _, rew, *_ = nrew.step(a)
        var = nrew.return_rms.var
        np.testing.assert_allclose(rew, r_rew / np.sqrt(var + nrew.epsilon), rtol=1e-6)
    assert rew.dtype == np.float64

    stats = wv.RecordEpisodeStatistics(make_vec("cartpole", 4, backend="cpu", max_steps=10))
    stats.reset(seed=4)
    ended = 0
    for _ in range(40):
        _, _, term, trunc, infos = stats.step(np.zeros(4, np.int64))
        done = term | trunc
        if done.any():
            ended += int(done.sum())
            # CartPole pays 1 per step: return == length.
            np.testing.assert_array_equal(infos["episode"]["r"][done], infos["episode"]["l"][done])
            np.testing.assert_array_equal(infos["episode"]["r"][done],
                                          infos["episode_return"][done])
    assert ended >= 4 and len(stats.return_queue) == ended


def test_gym_metadata_spec_and_render_fps():
    envs = make_vec("mpe_simple_tag", 2, backend="cpu", render_mode="rgb_array",
                    num_good_agents=2)
    assert envs.metadata["render_fps"] == 10  # mpe2's
    assert make_vec("cartpole", 2, backend="cpu").metadata["render_fps"] == 50  # Gymnasium's
    # HumanRendering needs render_fps (constructed only: no window here).
    assert wrap_human(envs).metadata["render_fps"] == 10
    assert envs.spec.id == "jaxwarp/mpe_simple_tag" and "jaxwarp/mpe_simple_tag" in repr(envs)
    again = gym.make_vec(envs.spec, num_envs=3)
    assert isinstance(again, JaxwarpVectorEnv) and again.num_envs == 3
    assert again.env.params == envs.env.params and again.render_mode == "rgb_array"
    same = gym.make_vec(make_vec("cartpole", 2, backend="cpu",
                                 autoreset_mode="same_step").spec, num_envs=2)
    assert same.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP


def wrap_human(envs):
    return gym.wrappers.vector.HumanRendering(envs)


def test_gym_get_attr_call_set_attr(cartpole):
    envs = JaxwarpVectorEnv(cartpole, 3)
    assert envs.get_attr("params") == (cartpole.params,) * 3
    assert envs.call("num_agents") == (1, 1, 1)
    assert envs.call("policy_groups") == (cartpole.policy_groups,) * 3
    with pytest.raises(AttributeError):
        envs.get_attr("no_such_attribute")
    envs.set_attr("note", "run 7")
    assert envs.get_attr("note") == ("run 7",) * 3
    envs.set_attr("note", ["run 8"] * 3)
    assert envs.get_attr("note") == ("run 8",) * 3
    with pytest.raises(ValueError, match="equal"):
        envs.set_attr("note", ["a", "b", "c"])
    with pytest.raises(ValueError, match="num_envs=3"):
        envs.set_attr("note", ["a", "a"])
    with pytest.raises(AttributeError, match="would not take effect"):
        envs.set_attr("params", cartpole.params)
    drawn = JaxwarpVectorEnv(cartpole, 3, render_mode="rgb_array")
    drawn.reset(seed=0)
    frames = drawn.call("render")
    assert len(frames) == 3 and frames[0].shape == (128, 128, 3)


def test_gym_reset_with_a_list_of_seeds(cartpole):
    envs = JaxwarpVectorEnv(cartpole, 4)
    single = {s: envs.reset(seed=s)[0] for s in (3, 8, 9)}
    obs, _ = envs.reset(seed=[8, 3, 9, 3])
    for e, s in enumerate([8, 3, 9, 3]):  # env e starts as reset(seed=s) starts it
        np.testing.assert_array_equal(obs[e], single[s][e])
    # One seed for all: the same as the int, steps included (the key continues
    # from seeds[0]'s).
    a = np.ones(4, np.int64)
    envs.reset(seed=5)
    want = envs.step(a)[0]
    envs.reset(seed=[5] * 4)
    np.testing.assert_array_equal(envs.step(a)[0], want)
    obs, _ = envs.reset(seed=np.array([5, None, 5, 5], dtype=object))
    assert obs.shape == (4, 4)
    with pytest.raises(ValueError, match="reset_mask"):
        envs.reset(seed=[1, 2, 3, 4], options={"reset_mask": np.ones(4, bool)})


def test_gym_seeds_keep_all_64_bits(cartpole):
    """A seed's 64 bits all count: values equal the direct API from the key
    data [seed >> 32, seed mod 2**32], steps included; seeds 2**32 apart
    differ (jax.random.key with x64 off kept only the low 32 bits:
    reset(seed=2**32) was reset(seed=0)); seeds below 2**32 keep their streams
    (key data [0, seed] is jax.random.key(seed))."""
    for s in (0, 7, 2**32 - 1):
        np.testing.assert_array_equal(jax.random.key_data(seed_words(s)),
                                      jax.random.key_data(jax.random.key(s)))
    acts = random_actions(np.random.default_rng(5), cartpole, 30, 4)
    envs = JaxwarpVectorEnv(cartpole, 4, autoreset_mode="same_step")
    seed = 2**32 + 7
    ref = direct_rollout(cartpole, seed_words(seed), acts)
    obs, _ = envs.reset(seed=seed)
    np.testing.assert_array_equal(obs, ref[0][:, 0])
    for a, (r_obs, r_rew, *_) in zip(acts, ref[1:]):
        obs, rew, *_ = envs.step(a[:, 0, 0])
        np.testing.assert_array_equal(obs, r_obs[:, 0])
        np.testing.assert_array_equal(rew, r_rew[:, 0])
    seeds = (0, 2**32, 2**33, 2**32 + 7, 7, 2**63, 2**64 - 1, np.uint64(2**64 - 2))
    starts = {int(s): envs.reset(seed=s)[0] for s in seeds}
    assert len({v.tobytes() for v in starts.values()}) == len(seeds)
    for s in seeds:  # reproducible
        np.testing.assert_array_equal(envs.reset(seed=s)[0], starts[int(s)])
    # Per-env seeds past 32 bits (and past int64) too.
    lst = [2**64 - 1, 2**32, 0, 2**32]
    obs, _ = envs.reset(seed=lst)
    for e, s in enumerate(lst):
        np.testing.assert_array_equal(obs[e], starts[s][e])


def test_gym_and_pettingzoo_hand_out_f32_over_a_bf16_env():
    """obs_dtype="bfloat16": the NumPy adapters' observations are float32 (the
    spaces' dtype), the bf16 values exactly: the direct API's bf16 obs cast to
    float32 (bf16 -> f32 is exact)."""
    env = jaxwarp.make("cartpole", backend="cpu", obs_dtype="bfloat16", max_steps=20)
    acts = random_actions(np.random.default_rng(6), env, 25, 4)
    ref = direct_rollout(env, 3, acts)
    assert ref[0].dtype == jax.numpy.bfloat16
    envs = JaxwarpVectorEnv(env, 4, autoreset_mode="same_step")
    assert envs.single_observation_space.dtype == np.float32
    obs, _ = envs.reset(seed=3)
    assert obs.dtype == np.float32
    np.testing.assert_array_equal(obs, ref[0][:, 0].astype(np.float32))
    ended = 0
    for a, (r_obs, _, r_term, r_trunc, _, r_final) in zip(acts, ref[1:]):
        obs, _, _, _, infos = envs.step(a[:, 0, 0])
        assert obs.dtype == np.float32 and obs in envs.observation_space
        np.testing.assert_array_equal(obs, r_obs[:, 0].astype(np.float32))
        for e in np.flatnonzero(r_term | r_trunc):
            ended += 1
            assert infos["final_obs"][e].dtype == np.float32
            np.testing.assert_array_equal(infos["final_obs"][e],
                                          r_final[e, 0].astype(np.float32))
    assert ended > 0
    # The shared core: the env's dtype unless asked (the torch adapter keeps
    # bf16), the cast inside the jitted call, a clear error for a non-float.
    from jaxwarp.adapters._batched import BatchedEnv

    kept = BatchedEnv(env, 2)
    assert kept.obs_dtype == jax.numpy.bfloat16
    assert kept.reset(seed=0).dtype == jax.numpy.bfloat16
    cast = BatchedEnv(env, 2, obs_dtype=np.float32)
    assert cast.obs_dtype == np.float32 and cast.reset(seed=0).dtype == np.float32
    np.testing.assert_array_equal(cast.reset(seed=0), kept.reset(seed=0).astype(np.float32))
    for bad in (np.int32, "nope"):
        with pytest.raises(TypeError, match="obs_dtype must be None or a floating dtype"):
            BatchedEnv(env, 2, obs_dtype=bad)
    pytest.importorskip("pettingzoo", reason="pettingzoo (test extra) is not installed")
    from jaxwarp.adapters.pettingzoo import JaxwarpParallelEnv

    spread16 = jaxwarp.make("mpe_simple_spread", backend="cpu", obs_dtype="bfloat16")
    acts = random_actions(np.random.default_rng(7), spread16, 3, 1)
    ref = direct_rollout(spread16, 2, acts)
    pz = JaxwarpParallelEnv(spread16)
    obs, _ = pz.reset(seed=2)
    for t, a in enumerate(acts):
        rows = (ref[0] if t == 0 else ref[t][0])[0].astype(np.float32)
        for i, n in enumerate(pz.possible_agents):
            assert obs[n].dtype == pz.observation_space(n).dtype == np.float32
            np.testing.assert_array_equal(obs[n], rows[i])
        assert pz.state().dtype == np.float32
        obs, *_ = pz.step({n: int(a[0, i, 0]) for i, n in enumerate(pz.possible_agents)})


# ---------------------------------------------------------------------------
# PettingZoo
# ---------------------------------------------------------------------------
def test_pettingzoo_parallel_api_test(spread):
    pz = pytest.importorskip("pettingzoo", reason="pettingzoo (test extra) is not installed")
    del pz
    from pettingzoo.test import parallel_api_test

    from jaxwarp.adapters.pettingzoo import JaxwarpParallelEnv

    env = JaxwarpParallelEnv(spread)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the api test reports problems as warnings
        parallel_api_test(env, num_cycles=100)


def test_pettingzoo_values_and_episode_end(spread):
    pytest.importorskip("pettingzoo", reason="pettingzoo (test extra) is not installed")
    from jaxwarp.adapters.pettingzoo import JaxwarpParallelEnv, parallel_env

    env = JaxwarpParallelEnv(spread)
    names = ["agent_0", "agent_1", "agent_2"]
    assert env.possible_agents == names
    assert env.action_space("agent_1") == gym.spaces.Discrete(5)
    assert env.action_space("agent_1") is not env.action_space("agent_2")
    assert env.observation_space("agent_0").shape == (18,)
    steps = spread.params.max_steps + 1  # an MPE episode (jaxwarp/envs/_mpe.py)
    acts = random_actions(np.random.default_rng(4), spread, steps, 1)
    ref = direct_rollout(spread, 11, acts)
    obs, infos = env.reset(seed=11)
    assert env.agents == names and set(infos) == set(names)
    for i, n in enumerate(names):
        np.testing.assert_array_equal(obs[n], ref[0][0, i])
    for t, (a, (r_obs, r_rew, r_term, r_trunc, r_ret, r_final)) in enumerate(
            zip(acts, ref[1:])):
        assert env.agents == names
        obs, rew, term, trunc, infos = env.step({n: int(a[0, i, 0])
                                                 for i, n in enumerate(names)})
        for i, n in enumerate(names):
            # The step that ends the episode returns its final observations
            # (r_final equals r_obs on the other steps).
            np.testing.assert_array_equal(obs[n], r_final[0, i])
            if t < steps - 1:
                np.testing.assert_array_equal(obs[n], r_obs[0, i])
            assert rew[n] == r_rew[0, i] and isinstance(rew[n], float)
            assert term[n] == r_term[0] and trunc[n] == r_trunc[0]
        assert (t == steps - 1) == (r_trunc[0] or r_term[0])
    # The last step hit the time limit: every agent is done, the returns reported.
    assert all(trunc.values()) and env.agents == []
    for i, n in enumerate(names):
        assert infos[n]["episode_return"] == r_ret[0, i]
    with pytest.raises(RuntimeError, match="reset"):
        env.step({n: 0 for n in names})
    env.reset()
    with pytest.raises(KeyError, match="agent_2"):
        env.step({"agent_0": 0, "agent_1": 0})
    with pytest.raises(ValueError, match="action for agent 'agent_2' must be an int"):
        env.step({"agent_0": 0, "agent_1": 0, "agent_2": [0, 0]})
    assert parallel_env("mpe_simple_spread", backend="jax").possible_agents == names


def test_pettingzoo_agent_names():
    pytest.importorskip("pettingzoo", reason="pettingzoo (test extra) is not installed")
    from jaxwarp.adapters.pettingzoo import agent_names

    assert agent_names(types.SimpleNamespace(num_agents=2)) == ("agent_0", "agent_1")
    named = types.SimpleNamespace(num_agents=2, agent_names=("tagger_0", "runner_0"))
    assert agent_names(named) == ("tagger_0", "runner_0")
    with pytest.raises(ValueError, match="distinct"):
        agent_names(types.SimpleNamespace(num_agents=2, agent_names=("a", "a")))


@pytest.mark.parametrize("name", ["mpe_simple_spread", "mpe_simple_tag"])
def test_pettingzoo_api_and_seed_tests(name):
    pytest.importorskip("pettingzoo", reason="pettingzoo (test extra) is not installed")
    from pettingzoo.test import parallel_api_test, parallel_seed_test

    from jaxwarp.adapters.pettingzoo import parallel_env

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the api test reports problems as warnings
        parallel_api_test(parallel_env(name, backend="cpu"), num_cycles=60)
    parallel_seed_test(lambda: parallel_env(name, backend="cpu"), num_cycles=60)


def test_pettingzoo_simple_tag_as_mpe2():
    """Agent names, per-agent observation spaces (no padding), state() and
    render_fps as mpe2's simple_tag_v3 (values hand-written; compared with
    mpe2 itself where it is installed)."""
    pytest.importorskip("pettingzoo", reason="pettingzoo (test extra) is not installed")
    from jaxwarp.adapters.pettingzoo import parallel_env

    env = parallel_env("mpe_simple_tag", backend="cpu", num_good_agents=2)
    names = ["adversary_0", "adversary_1", "adversary_2", "agent_0", "agent_1"]
    assert env.possible_agents == names
    dims = [20, 20, 20, 18, 18]  # adversaries 4 + 2*2 + 2*4 + 2*2; good agents 2 fewer
    assert [env.observation_space(a).shape for a in names] == [(d,) for d in dims]
    assert env.state_space.shape == (sum(dims),)
    assert env.metadata["render_fps"] == 10
    with pytest.raises(RuntimeError, match="reset"):
        env.state()
    obs, _ = env.reset(seed=0)
    state = env.state()
    assert state.dtype == np.float32 and state.shape == (96,)
    np.testing.assert_array_equal(state, np.concatenate([obs[a] for a in names]))
    obs, *_ = env.step({a: 1 for a in names})
    np.testing.assert_array_equal(env.state(), np.concatenate([obs[a] for a in names]))
    assert all(obs[a] in env.observation_space(a) for a in names)

    mpe2_tag = pytest.importorskip("mpe2.simple_tag_v3")
    for ng in (1, 2):
        ours = parallel_env("mpe_simple_tag", backend="cpu", num_good_agents=ng)
        ref = mpe2_tag.parallel_env(num_good=ng)
        assert ours.possible_agents == ref.possible_agents
        for a in ref.possible_agents:
            assert ours.observation_space(a).shape == ref.observation_space(a).shape
            assert ours.action_space(a) == ref.action_space(a)
        assert ours.state_space.shape == ref.state_space.shape
        assert ours.metadata["render_fps"] == ref.metadata["render_fps"]
        # The same world in both: the same state() (mpe2: observations concatenated).
        ours.reset(seed=1)
        ref.reset(seed=1)
        s = jax.tree.map(np.asarray, ours._batch.state)
        world = ref.unwrapped.world
        for i, ag in enumerate(world.agents):
            ag.state.p_pos = np.array([s.x[0, i], s.y[0, i]], np.float64)
            ag.state.p_vel = np.array([s.vx[0, i], s.vy[0, i]], np.float64)
        for l, lm in enumerate(world.landmarks):
            lm.state.p_pos = np.array([s.lm_x[0, l], s.lm_y[0, l]], np.float64)
        np.testing.assert_allclose(ours.state(), ref.state(), rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------
# PyTorch
# ---------------------------------------------------------------------------
def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - depends on the machine
        pytest.skip(f"torch is not importable ({e}); pip install torch to run the torch "
                    "adapter tests")
    return torch


def test_torch_values_and_dtypes_equal_the_direct_api(cartpole_any):
    torch = _torch()
    from jaxwarp.adapters.torch import TorchVectorEnv

    envs = TorchVectorEnv(cartpole_any, N, final_obs=True)
    assert envs.device == torch.device("cpu")
    acts = random_actions(np.random.default_rng(3), cartpole_any, 40, N)
    ref = direct_rollout(cartpole_any, 9, acts)
    obs, _ = envs.reset(seed=9)
    assert obs.dtype == torch.float32 and obs.shape == (N, 4)
    np.testing.assert_array_equal(obs.numpy(), ref[0][:, 0])
    for i, (a, (r_obs, r_rew, r_term, r_trunc, r_ret, r_final)) in enumerate(
            zip(acts, ref[1:])):
        t = torch.from_numpy(a[:, 0, 0].copy())
        t = t.long() if i % 2 else t  # int64 (torch's default) and int32 both work
        obs, rew, term, trunc, info = envs.step(t)
        assert (obs.dtype, rew.dtype, term.dtype, trunc.dtype) == (
            torch.float32, torch.float32, torch.bool, torch.bool)
        assert rew.shape == term.shape == trunc.shape == (N,)
        np.testing.assert_array_equal(obs.numpy(), r_obs[:, 0])
        np.testing.assert_array_equal(rew.numpy(), r_rew[:, 0])
        np.testing.assert_array_equal(term.numpy(), r_term)
        np.testing.assert_array_equal(trunc.numpy(), r_trunc)
        done = r_term | r_trunc
        np.testing.assert_array_equal(info["episode_return"].numpy(),
                                      np.where(done, r_ret[:, 0], 0))
        np.testing.assert_array_equal(info["final_obs"].numpy(), r_final[:, 0])


def test_torch_keeps_bf16_observations_and_64_bit_seeds():
    """torch has bfloat16: over an env made with obs_dtype="bfloat16" the
    torch adapter hands out torch.bfloat16 (obs_dtype says so), the direct
    API's values; seeds keep all 64 bits, as in the Gymnasium adapter."""
    torch = _torch()
    from jaxwarp.adapters.torch import TorchVectorEnv

    env = jaxwarp.make("cartpole", backend="cpu", obs_dtype="bfloat16", max_steps=20)
    acts = random_actions(np.random.default_rng(8), env, 5, 4)
    ref = direct_rollout(env, seed_words(2**32 + 1), acts)
    envs = TorchVectorEnv(env, 4)
    assert envs.obs_dtype == torch.bfloat16
    obs, _ = envs.reset(seed=2**32 + 1)
    assert obs.dtype == torch.bfloat16
    np.testing.assert_array_equal(obs.float().numpy(), ref[0][:, 0].astype(np.float32))
    for a, (r_obs, *_) in zip(acts, ref[1:]):
        obs, *_ = envs.step(torch.from_numpy(a[:, 0, 0].copy()))
        assert obs.dtype == torch.bfloat16
        np.testing.assert_array_equal(obs.float().numpy(), r_obs[:, 0].astype(np.float32))
    assert TorchVectorEnv.make("cartpole", 2, backend="cpu").obs_dtype == torch.float32
    first = envs.reset(seed=1)[0].float().numpy()
    assert not np.array_equal(first, envs.reset(seed=2**32 + 1)[0].float().numpy())


def test_torch_dlpack_shares_buffers():
    torch = _torch()
    from jaxwarp.adapters.torch import from_torch, to_torch

    x = jax.device_put(np.arange(12, dtype=np.float32).reshape(3, 4), jax.devices("cpu")[0])
    t = to_torch(x)
    assert t.data_ptr() == x.unsafe_buffer_pointer()
    np.testing.assert_array_equal(t.numpy(), np.asarray(x))
    a = torch.arange(16, dtype=torch.int32)
    j = from_torch(a)
    assert j.dtype == np.int32 and j.unsafe_buffer_pointer() == a.data_ptr()


def test_torch_multi_agent_layout_and_errors(spread):
    torch = _torch()
    from jaxwarp.adapters.torch import TorchVectorEnv

    envs = TorchVectorEnv(spread, 2)
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (2, 3, 18) and envs.action_shape == (3, 1)
    _, rew, *_, info = envs.step(torch.zeros((2, 3, 1), dtype=torch.int64))
    assert rew.shape == (2, 3) and info["episode_return"].shape == (2, 3)
    with pytest.raises(ValueError, match="shape"):
        envs.step(torch.zeros((2, 3), dtype=torch.int64))
    with pytest.raises(TypeError, match="integer"):
        envs.step(torch.zeros((2, 3, 1)))
    with pytest.raises(TypeError, match="torch.Tensor"):
        envs.step(np.zeros((2, 3, 1), np.int32))


def test_torch_out_of_range_actions_reported_with_checks():
    torch = _torch()
    from jaxwarp.adapters.torch import TorchVectorEnv

    envs = TorchVectorEnv.make("cartpole", 4, backend="cpu", checks=True)
    envs.reset(seed=0)
    obs, *_ = envs.step(torch.ones(4, dtype=torch.int64))
    assert obs.shape == (4, 4)
    with pytest.raises(Exception, match="out of range"):
        envs.step(torch.full((4,), 2, dtype=torch.int64))
