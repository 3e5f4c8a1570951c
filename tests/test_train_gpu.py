"""Trainer on the GPU (skipped without one): the whole run is one program
with the env and sampler kernels inside, deterministic, vmap == loop."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwarp.train import build_trainer, config_from_dict, make_train

pytestmark = pytest.mark.gpu

ENV = {"num_taggers": 3, "num_runners": 20, "episode_length": 30}


def cfg(**changes):
    d = {"env_params": ENV, "backend": "cuda", "num_envs": 16, "num_steps": 16,
         "total_env_steps": 16 * 16 * 4, "num_minibatches": 2, "update_epochs": 2,
         "policies": {"tagger": {"hidden_sizes": [32]}, "runner": {"hidden_sizes": [32]}}}
    d.update(changes)
    return config_from_dict(d)


def test_kernels_run_inside_one_compiled_program():
    trainer = build_trainer(cfg())
    rs = jax.jit(trainer.init)(jax.random.PRNGKey(0))
    text = jax.jit(lambda r: trainer.run(r, 3)).lower(rs).compile().as_text()
    assert len(re.findall(r'custom_call_target="jaxwarp_user_tag_continuous_\w+_step_cuda"',
                          text)) == 1
    assert text.count('custom_call_target="jaxwarp_sample_categorical_cuda"') == 1


def test_sampler_runs_once_per_step_at_scale():
    """WarpDrive's training config at 2000 envs: XLA:GPU's dynamic-slice
    fusion cloned the sampler call (to write the stacked log_prob in place),
    so every step sampled twice, until the sampler's outputs went through an
    optimization barrier (measured: 2 calls in the compiled update without
    it, 100 kernel launches for 50 steps). Compiled only, not run."""
    from jaxwarp.train import load_config

    trainer = build_trainer(load_config("tag_warpdrive_default", [
        "num_envs=2000", "num_steps=50", "num_minibatches=10", "backend=cuda"]))
    rs = jax.eval_shape(trainer.init, jax.random.PRNGKey(0))
    text = jax.jit(lambda r: trainer.run(r, 1)).lower(rs).compile().as_text()
    assert text.count('custom_call_target="jaxwarp_sample_categorical_cuda"') == 1


@pytest.mark.parametrize("algorithm", ["ppo", "a2c"])
def test_cuda_training_is_deterministic_and_finite(algorithm):
    train = jax.jit(make_train(cfg(algorithm=algorithm)))
    _, m1 = train(jax.random.PRNGKey(0))
    _, m2 = train(jax.random.PRNGKey(0))
    for k in m1:
        np.testing.assert_array_equal(m1[k], m2[k], err_msg=k)
    assert np.isfinite(np.asarray(m1["tagger/loss"])).all()
    assert np.isfinite(np.asarray(m1["tagger/episode_return"][-1]))


def test_cuda_vmap_over_seeds_equals_separate_runs():
    train = make_train(cfg())
    keys = jnp.stack([jax.random.PRNGKey(5), jax.random.PRNGKey(6)])
    _, m_b = jax.jit(jax.vmap(train))(keys)
    for i in range(2):
        _, m_i = jax.jit(train)(keys[i])
        for k in m_i:
            np.testing.assert_allclose(m_b[k][i], m_i[k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_cuda_and_jax_backends_start_from_the_same_numbers():
    # Same key: the cuda env/sampler reproduce the reference's draws, so the
    # first update's rollout statistics agree (later updates drift apart
    # through float rounding in the networks).
    ms = {}
    for backend in ("cuda", "jax"):
        trainer = build_trainer(cfg(backend=backend))
        rs = jax.jit(trainer.init)(jax.random.PRNGKey(2))
        _, ms[backend] = jax.jit(lambda r: trainer.run(r, 1))(rs)
    for k in ("tagger/reward", "runner/reward"):
        np.testing.assert_allclose(ms["cuda"][k], ms["jax"][k], rtol=1e-4, atol=1e-6, err_msg=k)
