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


def direct_rollout(env, seed, actions):
    """The direct API with the adapters' key schedule: obs after reset, then per
    step (obs, reward, terminated, truncated, episode_return, final obs: the
    obs of step(autoreset=False) from the same key and state); actions
    i32[T, envs, agents, heads]."""
    key = jax.random.key(seed)
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
def test_importing_jaxwarp_and_adapters_imports_no_optional_framework():
    code = ("import sys, jaxwarp, jaxwarp.adapters\n"
            "bad = [m for m in ('gymnasium', 'pettingzoo', 'torch') if m in sys.modules]\n"
            "assert not bad, bad\n"
            "assert 'JaxwarpVectorEnv' in dir(jaxwarp.adapters)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]


# ---------------------------------------------------------------------------
# Gymnasium
# ---------------------------------------------------------------------------
def test_gym_values_equal_the_direct_api(cartpole_any):
    acts = random_actions(np.random.default_rng(0), cartpole_any, 60, N)
    ref = direct_rollout(cartpole_any, 7, acts)
    envs = JaxwarpVectorEnv(cartpole_any, N)
    obs, infos = envs.reset(seed=7)
    assert infos == {}
    np.testing.assert_array_equal(obs, ref[0][:, 0])
    finished = 0
    assert envs.metadata["final_obs"] is True
    for a, (r_obs, r_rew, r_term, r_trunc, r_ret, r_final) in zip(acts, ref[1:]):
        obs, rew, term, trunc, infos = envs.step(a[:, 0, 0].astype(np.int64))
        assert obs.dtype == np.float32 and obs.shape == (N, 4)
        assert rew.dtype == np.float32 and rew.shape == (N,)
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
    envs = gym.wrappers.vector.RecordEpisodeStatistics(JaxwarpVectorEnv(cartpole, N))
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
    envs = JaxwarpVectorEnv(cartpole, N, final_obs=False)
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
    assert JaxwarpVectorEnv(plain, 2).metadata["final_obs"] is False
    with pytest.raises(ValueError, match=r"final_obs=True: .* cannot step without auto-reset"):
        JaxwarpVectorEnv(plain, 2, final_obs=True)
    with pytest.raises(TypeError, match=r"final_obs must be None, True or False"):
        JaxwarpVectorEnv(cartpole, 2, final_obs="yes")


def test_gym_truncation_at_the_time_limit():
    # MPE episodes are max_steps + 1 steps long and never terminate (jaxwarp/envs/mpe.py).
    env = jaxwarp.make("mpe_simple_spread", backend="cpu", max_steps=4)
    envs = JaxwarpVectorEnv(env, 4)
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
        envs.reset(seed=[1, 2, 3, 4])
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
    steps = spread.params.max_steps + 1  # an MPE episode (jaxwarp/envs/mpe.py)
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
    assert parallel_env("mpe_simple_spread", backend="jax").possible_agents == names


def test_pettingzoo_agent_names():
    pytest.importorskip("pettingzoo", reason="pettingzoo (test extra) is not installed")
    from jaxwarp.adapters.pettingzoo import agent_names

    assert agent_names(types.SimpleNamespace(num_agents=2)) == ("agent_0", "agent_1")
    named = types.SimpleNamespace(num_agents=2, agent_names=("tagger_0", "runner_0"))
    assert agent_names(named) == ("tagger_0", "runner_0")
    with pytest.raises(ValueError, match="distinct"):
        agent_names(types.SimpleNamespace(num_agents=2, agent_names=("a", "a")))


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
