"""Trainer on the GPU (skipped without one): the whole run is one program
with the env and sampler kernels inside, deterministic, vmap == loop."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwarp.train import build_trainer, config_from_dict, jit, load_config, make_train

import test_recurrent
from _checks import assert_seeds_vmap_as_separate_runs

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
    # The rollout: one fused call (act and step, every step; jaxwarp.train.fused).
    assert len(re.findall(r'custom_call_target="jaxwarp_user_tag_continuous_\w+_rollout_cuda"',
                          text)) == 1
    assert "_step_cuda" not in text and "jaxwarp_sample_categorical_cuda" not in text


def test_step_by_step_rollout_runs_the_env_and_sampler_kernels_once(monkeypatch):
    from jaxwarp.train import fused

    monkeypatch.setattr(fused, "plan", lambda *a, **k: None)
    trainer = build_trainer(cfg())
    rs = jax.jit(trainer.init)(jax.random.PRNGKey(0))
    text = jax.jit(lambda r: trainer.run(r, 3)).lower(rs).compile().as_text()
    assert len(re.findall(r'custom_call_target="jaxwarp_user_tag_continuous_\w+_step_cuda"',
                          text)) == 1
    assert text.count('custom_call_target="jaxwarp_sample_categorical_cuda"') == 1


@pytest.mark.parametrize("config", ["mpe_simple_spread_ppo", "mpe_simple_tag_ppo",
                                    "cartpole_ppo"])
def test_the_env_steps_once_per_rollout_step(monkeypatch, config):
    """The step-by-step rollout of the shipped configs (bf16 models: the fused
    rollout takes float32 alone) at a GPU size: XLA:GPU's dynamic-slice fusion
    cloned MPE simple_spread's step call to write the stacked rewards in place,
    so the env stepped twice per step and its state was copied first, until the
    step's outputs went through an optimization barrier (measured: 2 step calls
    and 11 copies in the rollout's loop). Compiled only, not run."""
    from jaxwarp.train import fused, load_config

    monkeypatch.setattr(fused, "plan", lambda *a, **k: None)
    d = load_config(config, ["num_envs=1024", "num_steps=32", "backend=cuda"]).to_dict()
    for group in d["policies"].values():
        group["dtype"] = "bfloat16"
    trainer = build_trainer(config_from_dict(d))
    rs = jax.eval_shape(trainer.init, jax.random.PRNGKey(0))
    text = jax.jit(lambda r: trainer.run(r, 1)).lower(rs).compile().as_text()
    assert len(re.findall(r'custom_call_target="\w+_step_cuda"', text)) == 1
    assert text.count('custom_call_target="jaxwarp_sample_categorical_cuda"') == 1


def test_sampler_runs_once_per_step_at_scale(monkeypatch):
    """WarpDrive's training config at 2000 envs: XLA:GPU's dynamic-slice
    fusion cloned the sampler call (to write the stacked log_prob in place),
    so every step sampled twice, until the sampler's outputs went through an
    optimization barrier (measured: 2 calls in the compiled update without
    it, 100 kernel launches for 50 steps). Compiled only, not run."""
    from jaxwarp.train import fused, load_config

    monkeypatch.setattr(fused, "plan", lambda *a, **k: None)  # the step-by-step rollout
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
    assert_seeds_vmap_as_separate_runs(train, keys, rtol=1e-4, atol=1e-5)


def test_cuda_and_jax_backends_start_from_the_same_numbers():
    # Same key: the cuda env/sampler reproduce the reference's draws, so the
    # first update's rollout statistics agree (later updates drift apart
    # through float rounding in the networks).
    # (Float32 matmuls: the jax backend's policy would otherwise run in tf32,
    # the fused rollout's in float32.)
    ms = {}
    for backend in ("cuda", "jax"):
        trainer = build_trainer(cfg(backend=backend))
        rs = jax.jit(trainer.init)(jax.random.PRNGKey(2))
        with jax.default_matmul_precision("highest"):
            _, ms[backend] = jax.jit(lambda r: trainer.run(r, 1))(rs)
    for k in ("tagger/reward", "runner/reward"):
        np.testing.assert_allclose(ms["cuda"][k], ms["jax"][k], rtol=1e-4, atol=1e-6, err_msg=k)


# ---------------------------------------------------------------------------
# Reproducibility and a quiet exit on the GPU (issue 37).
# ---------------------------------------------------------------------------
# tag_duel_cpu (PPO, both groups, 64 envs) on the GPU: the case, where
# two runs differed from update 1 without XLA's deterministic ops. 10 updates.
DUEL = ["--config", "tag_duel_cpu", "backend=cuda", "total_env_steps=32000",
        "chunk_updates=5", "checkpoint_every=5"]
TIMING = ("env_steps_per_s", "wall_s")
# What a GPU run's stderr must not hold: XLA's error lines, CUDA errors, tracebacks.
NOISE = re.compile(r"^[EF]\d{4} |cuda_device_allocator|cuda_status|CUDA_ERROR|Traceback")


def _cli_train(out, *extra):
    import os
    import subprocess
    import sys

    # This pytest process holds the GPU (jax preallocates 75% of it): a second
    # process that preallocates too gets XLA's failed attempts on stderr (the
    # cuda_device_allocator.cc / cuda_status.cc lines of issue 37, measured by
    # experiments/tools/exit_check.py), so the run allocates as it goes.
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    proc = subprocess.run([sys.executable, "-m", "jaxwarp", "train", *DUEL, "--no-progress",
                           "--out", str(out), *extra], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def _metrics(out):
    from jaxwarp.run.loop import read_metrics

    return {(r["update"], r["seed"]): {k: v for k, v in r.items() if k not in TIMING}
            for r in read_metrics(out)}


def _same_params(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_same_command_twice_gives_the_same_bits_and_a_quiet_exit(tmp_path):
    from jaxwarp.run.evaluate import load_run

    procs = [_cli_train(tmp_path / f"run{i}") for i in range(2)]
    a, b = _metrics(tmp_path / "run0"), _metrics(tmp_path / "run1")
    assert len(a) == 10 and a.keys() == b.keys()
    for k in a:
        assert a[k] == b[k], (k, {n: (a[k][n], b[k][n]) for n in a[k] if a[k][n] != b[k][n]})
    _same_params(load_run(tmp_path / "run0").params, load_run(tmp_path / "run1").params)
    for p in procs:  # the run's own messages only: no allocator/CUDA lines at exit
        noise = [ln for ln in p.stderr.splitlines() if NOISE.search(ln)]
        assert noise == [], "\n".join(noise[:20])


# Both groups' models as bf16 128-128 MLPs: on the GPU they run on the fused
# Pallas kernels (jaxwarp/models/mlp_kernel.py), whose weight gradients are
# XLA matmuls over row blocks and whose bias sums are per-tile partials summed
# in a fixed order (no atomics). The taggers' shared torso also puts their
# rollout's forward on the Mosaic GPU kernel (jaxwarp/models/mlp_mosaic.py) on
# a Hopper GPU; the runners' two towers keep the Triton forward.
ON_KERNELS = [f"policies.{g}.{k}" for g in ("tagger", "runner")
              for k in ("hidden_sizes=[128, 128]", "dtype=bfloat16")] + [
    "policies.tagger.shared_torso=true"]


def test_same_command_twice_on_the_fused_kernels_gives_the_same_bits(tmp_path):
    import json

    from jaxwarp.run.evaluate import load_run

    for i in range(2):
        _cli_train(tmp_path / f"run{i}", *ON_KERNELS)
    summary = json.loads((tmp_path / "run0" / "summary.json").read_text())
    from jaxwarp.models import mlp_mosaic

    mosaic = ", the rollout's forward on Mosaic GPU" if mlp_mosaic.why_not_here() is None else ""
    assert summary["model_layers"] == {"tagger": "fused kernels" + mosaic,
                                       "runner": "fused kernels"}
    a, b = _metrics(tmp_path / "run0"), _metrics(tmp_path / "run1")
    assert len(a) == 10 and a.keys() == b.keys()
    for k in a:
        assert a[k] == b[k], (k, {n: (a[k][n], b[k][n]) for n in a[k] if a[k][n] != b[k][n]})
    _same_params(load_run(tmp_path / "run0").params, load_run(tmp_path / "run1").params)


def test_resumed_run_equals_the_uninterrupted_run_bit_for_bit(tmp_path):
    from jaxwarp.run.evaluate import load_run
    from jaxwarp.run.loop import train_run
    from jaxwarp.train import load_config

    c = load_config("tag_duel_cpu", DUEL[2:] + ["chunk_updates=2", "checkpoint_every=4"])
    full = train_run(c, tmp_path / "full", progress=False)
    part = train_run(c, tmp_path / "part", progress=False, stop_after_updates=6)
    assert not part.summary["finished"]  # checkpoint at 4; updates 5-6 are redone
    resumed = train_run(None, tmp_path / "part", resume=True, progress=False)
    assert resumed.summary["finished"] and full.summary["finished"]
    a, b = _metrics(tmp_path / "full"), _metrics(tmp_path / "part")
    assert a.keys() == b.keys()
    for k in a:
        assert a[k] == b[k], (k, {n: (a[k][n], b[k][n]) for n in a[k] if a[k][n] != b[k][n]})
    _same_params(full.state.learner.params, resumed.state.learner.params)
    _same_params(load_run(tmp_path / "full").params, load_run(tmp_path / "part").params)


@pytest.mark.parametrize("net, width", [
    (test_recurrent.GRUActorCritic((3, 2), (16, 12), 8, "relu"), 10),
    (test_recurrent.CentralGRUCritic((16,), 8, "tanh"), 6)])
def test_the_gru_sequence_form_is_its_step_form_on_the_gpu(net, width):
    """The learner's sequence form (`gru_scan`'s hand-written backward) against
    the rollout's step form, values and gradients, at full float32 precision
    (XLA:GPU's default float32 dot rounds its inputs to TF32 in both, but the
    two forms group the gates' matmuls differently)."""
    with jax.default_matmul_precision("highest"):
        test_recurrent.test_the_sequence_form_is_the_step_form_over_time(net, width)


@pytest.mark.parametrize("critic", ["independent", "centralised"])
def test_gru_training_on_the_gpu_gives_the_same_bits_twice(critic):
    """IPPO-RNN and MAPPO-RNN (a GRU critic over the global state) on MPE with
    the env and sampler kernels, compiled as `jaxwarp train` compiles them."""
    c = load_config("mpe_simple_spread_ppo", [
        "backend=cuda", "policies.agent.model=gru", "policies.agent.hidden_sizes=[32]",
        "policies.agent.rnn_size=16", "num_envs=64", "num_steps=16", "update_epochs=2",
        "num_minibatches=2", f"total_env_steps={64 * 16 * 3}", f"critic={critic}"])
    train = jit(make_train(c), c.deterministic)
    _, m1 = train(jax.random.PRNGKey(0))
    _, m2 = train(jax.random.PRNGKey(0))
    for k in m1:
        np.testing.assert_array_equal(m1[k], m2[k], err_msg=k)
    assert np.isfinite(np.asarray(m1["agent/loss"])).all()
    assert np.asarray(m1["agent/loss"]).shape == (3,)
