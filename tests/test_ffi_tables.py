"""What C++ declares once and Python passes or reads: each env handler's
argument table in ffi/jaxwarp_ffi.h (JAXWARP_ARGS_<handler>, read through
jaxwarp._ffi.handler_table) against the custom calls that
jaxwarp.authoring.ContractEnv lowers (attribute names and types, the leading
buffers' dtypes), and the constants Python takes from the headers
(jaxwarp._ffi.header_constants)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp import _ffi
from jaxwarp.models import mlp_kernel
from jaxwarp.train import fused

HANDLERS = ("reset", "step", "rollout")
# A table's FFI type -> the MLIR type of what Python passes.
ATTR_TYPES = {"int32_t": "i32", "xla::ffi::Span<const int32_t>": "tensor<i32>"}
BUFFER_TYPES = {"xla::ffi::Buffer<xla::ffi::U32>": "ui32", "xla::ffi::Buffer<xla::ffi::S32>": "i32",
                "xla::ffi::Buffer<xla::ffi::F32>": "f32"}


def _custom_call(fn, *args) -> tuple[dict[str, str], list[str]]:
    """The one jaxwarp env custom call in fn's StableHLO: (attribute name ->
    MLIR type, "tensor<i32>" for any i32 array; operands' element types)."""
    text = jax.jit(fn).lower(*args).as_text()
    calls = [ln for ln in text.splitlines()
             if re.search(r"custom_call @jaxwarp_\w+_(reset|step|rollout)_cpu", ln)]
    assert len(calls) == 1, calls
    line = calls[0]
    config = re.search(r"mhlo\.backend_config = \{(.*?)\}, operand_layouts", line).group(1)
    attrs = {m.group(1): re.sub(r"tensor<[\dx]*xi32>", "tensor<i32>", m.group(2))
             for m in re.finditer(r"(\w+) = (?:dense<[^>]*>|-?\d+) : (tensor<[^>]*>|\w+)",
                                  config)}
    operands = re.search(r"\} : \((.*?)\) ->", line).group(1)
    dtypes = re.findall(r"tensor<(?:[\dx]*x)?(\w+)>", operands)
    return attrs, dtypes


@pytest.fixture(scope="module")
def lowered():
    """handler -> the custom call ContractEnv makes for it (MPE: 3 agents, 1 head)."""
    env = jaxwarp.make("mpe_simple_spread", backend="cpu")
    key = jax.random.PRNGKey(0)
    envs, n, steps = 4, env.num_agents, 3
    obs, state = jax.eval_shape(lambda k: env.reset(k, envs), key)
    actions = jax.ShapeDtypeStruct((envs, n, 1), jnp.int32)
    nvec = (5,)
    u32, f32, s32 = jnp.uint32, jnp.float32, jnp.int32
    sds = jax.ShapeDtypeStruct
    rollout_args = (sds((steps, 1, 3), u32), sds((steps, 1, 1, 2), u32), sds((1, 1, 99), f32),
                    sds((n,), s32), obs, state)
    mlp = (env.obs_dim, 1, 0, 0, sum(nvec), 1, 8)  # in_dim, layers, shared, act, logits, groups
    return {
        "reset": _custom_call(lambda k: env.reset(k, envs), key),
        "step": _custom_call(lambda k, s, a: env.step(k, s, a), key, state, actions),
        "rollout": _custom_call(
            lambda *a: env.rollout_call(*a, mlp=mlp, nvec=nvec, partitionable=False),
            *rollout_args),
    }


def test_tables_parse():
    for h in HANDLERS:
        table = _ffi.handler_table(h)
        kinds = [a.kind for a in table]
        # Buffers, then the remaining buffers/results, then attributes.
        assert kinds == sorted(kinds, key=["ARG", "ARGS", "RETS", "ATTR"].index), (h, kinds)
        assert kinds.count("RETS") == 1
        for a in table:
            assert (a.kind == "ATTR") == a.key.startswith("jw_"), a
            assert a.type in (ATTR_TYPES if a.kind == "ATTR" else
                              BUFFER_TYPES if a.kind == "ARG" else
                              {"xla::ffi::RemainingArgs", "xla::ffi::RemainingRets"}), a
        names = [a.name for a in table]
        assert len(set(names)) == len(names), h
    # Every handler takes the env's attributes (JAXWARP_ENV_ATTRS) and, as its
    # second buffer, the Params words (data, not an attribute).
    env_keys = {"jw_per_env", "jw_num_agents", "jw_obs_dim"}
    assert all(env_keys <= {a.key for a in _ffi.handler_table(h)} for h in HANDLERS)
    for h in HANDLERS:
        second = _ffi.handler_table(h)[1]
        assert (second.kind, second.name, second.type) == (
            "ARG", "params", "xla::ffi::Buffer<xla::ffi::S32>"), h


@pytest.mark.parametrize("handler", HANDLERS)
def test_python_passes_the_tables_attributes(handler, lowered):
    attrs, _ = lowered[handler]
    want = {a.key: ATTR_TYPES[a.type] for a in _ffi.handler_table(handler) if a.kind == "ATTR"}
    assert attrs == want


@pytest.mark.parametrize("handler", HANDLERS)
def test_python_passes_the_tables_buffers(handler, lowered):
    _, dtypes = lowered[handler]
    want = [BUFFER_TYPES[a.type] for a in _ffi.handler_table(handler) if a.kind == "ARG"]
    assert dtypes[:len(want)] == want
    # The state fields follow where the table takes the remaining buffers.
    has_rest = any(a.kind == "ARGS" for a in _ffi.handler_table(handler))
    assert (len(dtypes) > len(want)) == has_rest


def test_fused_rollout_constants_come_from_the_header():
    c = _ffi.header_constants("jaxwarp_fused.h")
    assert fused.ROLLOUT_MAX_LAYERS == c["kMaxLayers"] == 4
    assert fused.ROLLOUT_MAX_WIDTH == c["kMaxWidth"] == 1024
    assert fused.ROLLOUT_ACTIVATIONS == {"tanh": c["kActTanh"], "relu": c["kActRelu"]}
    # The Pallas MLP kernel's limits are its own (jaxwarp.models.mlp_kernel),
    # not the CUDA fused rollout's.
    assert mlp_kernel.MAX_LAYERS == 3
    assert set(mlp_kernel.ACTIVATIONS) == set(fused.ROLLOUT_ACTIVATIONS)


def test_sampler_heads_match_the_header():
    from jaxwarp import sampler

    assert sampler.MAX_HEADS == _ffi.header_constants("sampler.h")["kMaxHeads"]


def test_mlp_words_use_the_headers_codes():
    net = jaxwarp.models.MLPActorCritic(action_dims=(3,), hidden_sizes=(8,), activation="relu")
    words = fused.mlp_words(net, obs_dim=4, num_groups=1)
    assert words[3] == _ffi.header_constants("jaxwarp_fused.h")["kActRelu"]
    assert np.asarray(words).dtype.kind == "i"
