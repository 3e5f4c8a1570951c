"""How training programs are compiled (`jaxwarp.train.compile`): the trainer's
XLA options, and ``deterministic`` (issue 37) from the config to the compile
call. The GPU side (two runs identical, resume bit for bit) is
tests/test_train_gpu.py."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwarp.run import loop
from jaxwarp.train import (
    COMPILER_OPTIONS,
    ConfigError,
    TrainConfig,
    compiler_options,
    config_from_dict,
    jit,
    load_config,
)
from jaxwarp.train import compile as compile_mod

DET = "xla_gpu_deterministic_ops"


def _options_of(lowered) -> dict:
    """The XLA options a jitted function's compilation gets (jax keeps them on
    the lowering and passes them to XLA as DebugOptions overrides)."""
    return dict(lowered._lowering._compiler_options_kvs)


def test_deterministic_by_default():
    assert TrainConfig().deterministic is True
    assert compiler_options() == {**COMPILER_OPTIONS, DET: True}
    assert compiler_options(False) == COMPILER_OPTIONS
    assert DET not in COMPILER_OPTIONS  # the faster path is a real choice


def test_several_runs_on_a_device_keep_tritons_gemms_unless_deterministic():
    """Vmapped runs batch every matmul over their parameters: XLA's Triton
    GEMMs there, cuBLAS for one run and with deterministic ops."""
    assert compiler_options(False, members=10) == {}
    assert compiler_options(False, members=1) == COMPILER_OPTIONS
    assert compiler_options(True, members=10) == {**COMPILER_OPTIONS, DET: True}
    opts = _options_of(jit(lambda x: x + 1, False, members=4).lower(jnp.ones(2)))
    assert "xla_gpu_enable_triton_gemm" not in opts and DET not in opts


@pytest.mark.parametrize("members", [0, -1, 2.0, True, "2"])
def test_bad_member_counts_are_refused_with_the_argument(members):
    with pytest.raises(TypeError, match="members must be an int >= 1"):
        compiler_options(False, members)


@pytest.mark.parametrize("deterministic", [True, False])
def test_the_option_reaches_the_compilation(deterministic):
    lowered = jit(lambda x: (x * 2).sum(), deterministic).lower(jnp.ones(8))
    opts = _options_of(lowered)
    assert opts.get(DET, False) is deterministic
    assert opts["xla_gpu_enable_triton_gemm"] is False
    # XLA parses the overrides by name (an unknown one fails the compile), and
    # XLA:CPU accepts the GPU options and ignores them.
    assert float(lowered.compile()(jnp.ones(8))) == 16.0


def test_xla_reads_the_options_by_name():
    with pytest.raises(Exception, match="no_such_xla_option"):
        jax.jit(lambda x: x + 1, compiler_options={"no_such_xla_option": True}).lower(
            jnp.ones(2)).compile()


@pytest.mark.parametrize("value", [1, "maybe", None, [True]])
def test_bad_values_are_refused_with_the_key(value):
    with pytest.raises(ConfigError, match="deterministic"):
        config_from_dict({"deterministic": value})
    with pytest.raises(TypeError, match="deterministic"):
        compiler_options(value)


def test_false_is_accepted_from_yaml_overrides_and_round_trips(tmp_path):
    c = load_config("tag_small_cpu", ["deterministic=false"])
    assert c.deterministic is False
    assert c.to_dict()["deterministic"] is False
    assert config_from_dict(c.to_dict()) == c
    f = tmp_path / "c.yaml"
    f.write_text("env: cartpole\ndeterministic: false\n")
    assert load_config(str(f), []).deterministic is False


@pytest.mark.parametrize("deterministic", [True, False])
def test_the_runner_compiles_with_the_configs_choice(tmp_path, monkeypatch, deterministic):
    """`jaxwarp train` (train_run) compiles every chunk with the config's choice
    and its number of runs."""
    seen = []

    def spy(fun, det=True, **kw):
        seen.append((det, kw["members"]))
        return compile_mod.jit(fun, det, **kw)

    monkeypatch.setattr(loop, "jit", spy)
    c = config_from_dict({
        "env": "cartpole", "backend": "cpu", "num_envs": 4, "num_steps": 8,
        "total_env_steps": 4 * 8 * 3, "num_minibatches": 2, "update_epochs": 1,
        "chunk_updates": 2, "checkpoint_every": 2, "deterministic": deterministic,
        "policies": {"agent": {"hidden_sizes": [8]}}})
    result = loop.train_run(c, tmp_path / "run", seeds=2, progress=False)
    assert result.summary["finished"]
    # the chunk of 2 updates, then the last one of 1; both over the 2 seeds
    assert seen == [(deterministic, 2), (deterministic, 2)]
    # summary.json says which options the program got
    assert result.summary["compiler_options"] == compiler_options(deterministic, 2)
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk["compiler_options"] == compiler_options(deterministic, 2)
    assert np.isfinite([r["agent/loss"] for r in result.metrics]).all()
