"""Several GPUs of one host (skipped with fewer than two): the CPU tests of
tests/test_partitioning.py, test_sharding.py and test_train_devices.py on real
devices, with the ``cuda`` kernels and NCCL, over 2 GPUs and, where the host
has them, 4.

* every env, plain ``jax.jit`` of a 20-step rollout (random actions, auto-resets)
  from state split over the GPUs, and the same through `ShardedEnv`: bit for bit
  the one-GPU rollout, outputs split, one step launch per GPU, no collective;
* the kernel sampler over split logits: bit for bit one GPU;
* a short PPO run over the GPUs (``devices=D``): the gradients all-reduced, the
  curve that of one GPU up to float summation order, and the same bits on a
  second run.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from _small import SMALL_TAG

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not jaxwarp.gpu_available() or len(jax.devices("gpu")) < 2,
                                 reason="needs two CUDA GPUs")]

NUM_ENVS = 8
# Device counts to test: 2, and 4 where the host has four GPUs.
COUNTS = [d for d in (2, 4) if jaxwarp.gpu_available() and d <= len(jax.devices("gpu"))]
STEPS = 20
SMALL = {"tag_continuous": dict(SMALL_TAG, episode_length=10)}


def _mesh(d):
    from jax.sharding import Mesh

    return Mesh(np.array(jax.devices("gpu")[:d]), ("envs",))


def _rollout(env):
    nvec = jnp.asarray(np.asarray(env.action_space.nvec), jnp.int32)
    shape = (NUM_ENVS, env.num_agents, nvec.shape[0])

    def run(key, state):
        def body(state, t):
            k_act, k_step = jax.random.split(jax.random.fold_in(key, t))
            actions = jax.random.randint(k_act, shape, 0, nvec, jnp.int32)
            obs, state, reward, done, info = env.step(k_step, state, actions)
            return state, (obs, reward, done, info)
        return jax.lax.scan(body, state, jnp.arange(STEPS))
    return run


def _differ(a, b):
    la, lb = jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b)
    assert len(la) == len(lb)
    return [jax.tree_util.keystr(p) for (p, x), y in zip(la, lb)
            if not np.array_equal(np.asarray(x), np.asarray(y))]


@pytest.mark.parametrize("d", COUNTS)
@pytest.mark.parametrize("name", jaxwarp.registered_envs())
def test_every_env_on_several_gpus_is_bitwise_one_gpu(name, d):
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxwarp import sharding

    env = jaxwarp.make(name, backend="cuda", **SMALL.get(name, {}))
    key = jax.random.key(3)
    one = jax.devices("gpu")[0]
    with jax.default_device(one):
        _, state = env.reset(key, NUM_ENVS)
        want = jax.jit(_rollout(env))(key, state)
    mesh = _mesh(d)
    split = NamedSharding(mesh, P("envs"))
    s_state = jax.device_put(state, split)
    compiled = jax.jit(_rollout(env)).lower(key, s_state).compile()
    got = compiled(key, s_state)
    assert _differ(want, got) == []
    assert jax.tree.leaves(got[0])[0].sharding.is_equivalent_to(split, 2)
    assert len(jax.tree.leaves(got[0])[0].addressable_shards) == d
    hlo = compiled.as_text()
    assert sharding.collectives_in(hlo) == []
    assert hlo.count(f'custom_call_target="{env._prefix}_step_cuda"') == 1  # per GPU
    # The same through ShardedEnv (reset on the mesh too).
    senv = sharding.ShardedEnv(env, mesh)
    _, s2 = senv.reset(key, NUM_ENVS)
    assert _differ(state, s2) == []
    assert _differ(want, jax.jit(_rollout(senv))(key, s2)) == []


@pytest.mark.parametrize("d", COUNTS)
def test_kernel_sampler_on_several_gpus_is_bitwise_one_gpu(d):
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxwarp import sharding

    nvec = (5, 3, 70)
    logits = jax.random.normal(jax.random.key(7), (NUM_ENVS * 4, 6, sum(nvec)))
    key = jax.random.key(11)
    with jax.default_device(jax.devices("gpu")[0]):
        want = jaxwarp.sample_actions(key, jax.device_put(logits, jax.devices("gpu")[0]),
                                      nvec, backend="cuda")
    x = jax.device_put(logits, NamedSharding(_mesh(d), P("envs")))
    compiled = jax.jit(lambda k, x: jaxwarp.sample_actions(k, x, nvec, backend="cuda")
                       ).lower(key, x).compile()
    assert _differ(want, compiled(key, x)) == []
    assert sharding.collectives_in(compiled.as_text()) == []


@pytest.mark.parametrize("d", COUNTS)
def test_short_training_on_several_gpus_follows_one_gpu(d):
    from jaxwarp.train import build_trainer, jit, load_config, make_train

    over = ["backend=cuda", "num_envs=16", "num_steps=16", "total_env_steps=1024",
            "num_minibatches=2", "update_epochs=2", "policies.agent.hidden_sizes=[16]",
            "minibatch_shuffle=global"]
    ms = {}
    for n in (1, d):
        config = load_config("cartpole_ppo", [*over, f"devices={n}"])
        _, ms[n] = jax.jit(make_train(config))(jax.random.PRNGKey(0))
        assert np.isfinite(np.asarray(ms[n]["agent/loss"])).all()
    for k in ms[1]:
        np.testing.assert_allclose(ms[d][k], ms[1][k], rtol=1e-3, atol=1e-4, err_msg=k)
    # Reproducible (compiled as the CLI compiles, with XLA's deterministic ops):
    # two compiles and runs give the same bits.
    config = load_config("cartpole_ppo", [*over, f"devices={d}"])
    runs = [jit(make_train(config), config.deterministic)(jax.random.PRNGKey(0))[1]
            for _ in range(2)]
    assert _differ(runs[0], runs[1]) == []
    # The update all-reduces the gradients; nothing gathers the trajectory
    # with the default per-device minibatches.
    config = load_config("cartpole_ppo", [*over[:-1], f"devices={d}"])
    trainer = build_trainer(config)
    rs = jax.jit(trainer.init)(jax.random.PRNGKey(0))
    text = jax.jit(lambda r: trainer.run(r, 1)).lower(rs).compile().as_text()
    assert "all-reduce" in text and "all-gather" not in text
