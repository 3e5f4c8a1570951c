"""The PyTorch adapter on the GPU (skipped without one): CUDA tensors that are
the jitted step's own output buffers (no copy), and values equal to the
jax-level env API (`jaxwarp.make(name, backend="cuda")` reset/step) driven
with the adapters' key schedule and the same actions.

Both sides run the same CUDA kernels on the same inputs, so values are
compared exactly. torch is imported inside the tests: without it (or with a
CPU-only build) they skip.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jaxwarp
from test_adapters import direct_rollout  # the same key schedule as the adapters

pytestmark = pytest.mark.gpu

N = 64
STEPS = 40


def _torch():
    torch = pytest.importorskip("torch", reason="pip install torch (a CUDA build) to run "
                                                "the torch adapter's GPU tests")
    if not torch.cuda.is_available():
        pytest.skip(f"torch {torch.__version__} sees no CUDA device (CPU-only build?)")
    return torch


def _random_actions(env, steps, num_envs, seed):
    """i32[steps, envs, agents, heads], each head uniform in its range."""
    rng = np.random.default_rng(seed)
    nvec = np.asarray(env.action_space.nvec)
    return rng.integers(0, nvec, (steps, num_envs, env.num_agents, len(nvec))).astype(np.int32)


def _spy_steps(envs):
    """Records the StepOut (the jitted step's own output arrays) of every step."""
    batch = envs._batch
    outs = []
    step = batch.step

    def spy(actions):
        out = step(actions)
        outs.append(out)
        return out

    batch.step = spy
    return outs


@pytest.mark.parametrize("name", ["cartpole", "mpe_simple_spread"])
def test_torch_cuda_tensors_are_the_step_buffers(name):
    torch = _torch()
    from jaxwarp.adapters.torch import TorchVectorEnv

    envs = TorchVectorEnv.make(name, N, backend="cuda")
    assert envs.device.type == "cuda"
    gpu = jax.devices("gpu")[0]
    outs = _spy_steps(envs)
    obs, _ = envs.reset(seed=0)
    assert obs.is_cuda and obs.device == envs.device
    assert obs.data_ptr() == envs._batch._obs.unsafe_buffer_pointer()
    acts = _random_actions(envs.env, 3, N, 1)
    for a in acts:
        t = torch.from_numpy(a.reshape(N, *envs.action_shape)).to(envs.device)
        obs, rew, term, trunc, info = envs.step(t)
        out = outs[-1]
        pairs = [(obs, out.obs), (rew, out.reward), (term, out.terminated),
                 (trunc, out.truncated), (info["episode_return"], out.final_return)]
        for tensor, array in pairs:
            assert tensor.is_cuda and tensor.device == envs.device
            assert array.devices() == {gpu}
            assert tensor.data_ptr() == array.unsafe_buffer_pointer()


def test_torch_cuda_actions_enter_without_a_copy():
    torch = _torch()
    from jaxwarp.adapters.torch import from_torch, to_torch

    a = torch.arange(256, dtype=torch.int32, device="cuda")
    j = from_torch(a)
    assert j.dtype == np.int32 and j.devices() == {jax.devices("gpu")[0]}
    assert j.unsafe_buffer_pointer() == a.data_ptr()
    x = jax.device_put(np.arange(12, dtype=np.float32).reshape(3, 4), jax.devices("gpu")[0])
    t = to_torch(x)
    assert t.is_cuda and t.data_ptr() == x.unsafe_buffer_pointer()
    np.testing.assert_array_equal(t.cpu().numpy(), np.asarray(x))


@pytest.mark.parametrize("name", ["cartpole", "mpe_simple_spread"])
def test_torch_cuda_equals_the_direct_api(name):
    torch = _torch()
    from jaxwarp.adapters.torch import TorchVectorEnv

    # cartpole with max_steps=20: truncations within the run, terminations too.
    params = {"max_steps": 20} if name == "cartpole" else {}
    envs = TorchVectorEnv.make(name, N, backend="cuda", final_obs=True, **params)
    direct = jaxwarp.make(name, backend="cuda", **params)
    squeezed = envs._batch.squeezed  # single-agent: the adapter drops the agent axis
    acts = _random_actions(direct, STEPS, N, 3)
    ref = direct_rollout(direct, 9, acts)

    def host(t):
        return t.cpu().numpy()

    def user(x):  # the adapter's layout: agent axis dropped for single-agent envs
        return x[:, 0] if squeezed and x.ndim >= 2 else x

    obs, _ = envs.reset(seed=9)
    assert obs.is_cuda and obs.dtype == torch.float32
    np.testing.assert_array_equal(host(obs), user(ref[0]))
    finished = 0
    for i, (a, (r_obs, r_rew, r_term, r_trunc, r_ret, r_final)) in enumerate(
            zip(acts, ref[1:])):
        t = torch.from_numpy(a.reshape(N, *envs.action_shape)).to(envs.device)
        t = t.long() if i % 2 else t  # int64 (torch's default) and int32 both work
        obs, rew, term, trunc, info = envs.step(t)
        assert (obs.dtype, rew.dtype, term.dtype, trunc.dtype) == (
            torch.float32, torch.float32, torch.bool, torch.bool)
        np.testing.assert_array_equal(host(obs), user(r_obs))
        np.testing.assert_array_equal(host(rew), user(r_rew))
        np.testing.assert_array_equal(host(term), r_term)
        np.testing.assert_array_equal(host(trunc), r_trunc)
        done = r_term | r_trunc
        d = done.reshape(done.shape + (1,) * (r_ret.ndim - 1))
        np.testing.assert_array_equal(host(info["episode_return"]),
                                      user(np.where(d, r_ret, 0)))
        np.testing.assert_array_equal(host(info["final_obs"]), user(r_final))
        finished += int(done.sum())
    if name == "cartpole":
        assert finished > 0  # the comparison covered auto-resets
