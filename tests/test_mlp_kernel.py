"""The fused MLP kernels (jaxwarp.train.mlp_kernel) against XLA's layers.

On the CPU the kernels run in Pallas's interpreter (the same kernel bodies,
executed op by op); on a CUDA GPU they are the Triton kernels the `mlp`
model uses there.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwarp.train import mlp_kernel
from jaxwarp.train.models import MLPActorCritic

CASES = [
    # (obs features, hidden, logits, shared torso, activation, dtype, rows)
    (71, (256, 256), 43, True, "relu", "float32", 130),   # Tag's model; a partial last tile
    (13, (128,), 5, False, "tanh", "float32", 64),
    (30, (128, 256, 128), 7, False, "relu", "float32", 200),
    (71, (256, 256), 43, True, "relu", "bfloat16", 256),
]


def _setup(d, hidden, a, shared, act, dtype, rows, seed=0):
    net = MLPActorCritic((a,), hidden, act, shared, jnp.dtype(dtype))
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(seed), 3)
    obs = jax.random.normal(k1, (rows, d), jnp.float32)
    params = net.init(k2, obs[:4])
    cot = jax.random.normal(k3, (rows, a + 1), jnp.float32)

    def loss(p, o):
        logits, v = net.apply(p, o)
        return jnp.sum(logits * cot[:, :a]) + jnp.sum(v * cot[:, a])
    return net, params, obs, loss


@pytest.fixture
def kernels(monkeypatch):
    """The `mlp` model on the kernels, in Pallas's interpreter on the CPU."""
    if not mlp_kernel.on_cuda():
        monkeypatch.setattr(mlp_kernel, "on_cuda", lambda: True)
        fused = mlp_kernel.fused_mlp
        monkeypatch.setattr(mlp_kernel, "fused_mlp",
                            lambda lay, x, w, blocks: fused(lay, x, w, blocks, True))


def _xla(fn, *args):
    orig = mlp_kernel.layout_for
    mlp_kernel.layout_for = lambda *a, **k: None
    try:
        return fn(*args)
    finally:
        mlp_kernel.layout_for = orig


def _uses_kernel(net, params, obs) -> bool:
    return "pallas_call" in str(jax.make_jaxpr(net.apply)(params, obs))


def _close(a, b, dtype):
    tol = 3e-2 if dtype == "bfloat16" else (1e-2 if mlp_kernel.on_cuda() else 1e-5)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
        assert x.shape == y.shape and x.dtype == y.dtype
        err = np.linalg.norm(x - y) / (np.linalg.norm(y) + 1e-12)
        assert err < tol, (err, tol)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[1]}-{c[4]}-{c[5]}")
def test_forward_and_gradients_match_xla_layers(kernels, case):
    net, params, obs, loss = _setup(*case)
    assert _uses_kernel(net, params, obs)
    out, grads = net.apply(params, obs), jax.grad(loss, (0, 1))(params, obs)
    ref, ref_grads = _xla(lambda: (net.apply(params, obs), jax.grad(loss, (0, 1))(params, obs)))
    assert out[0].dtype == out[1].dtype == jnp.float32
    assert out[0].shape == (case[6], case[2]) and out[1].shape == (case[6],)
    _close(out, ref, case[5])
    _close(grads, ref_grads, case[5])  # parameters and observations
    # gradients stay float32 parameters' dtype
    assert {g.dtype for g in jax.tree.leaves(grads[0])} == {jnp.dtype(jnp.float32)}


def test_leading_axes_and_vmap_over_seeds(kernels):
    """[T, envs, agents, D] observations, and parameters vmapped over seeds,
    give what one seed at a time gives."""
    d, hidden, a = 20, (128,), 6
    net = MLPActorCritic((a,), hidden, "tanh", True)
    obs = jax.random.normal(jax.random.PRNGKey(1), (2, 3, 5, d))
    params = jax.vmap(lambda k: net.init(k, obs))(jax.random.split(jax.random.PRNGKey(2), 3))

    def loss(p):
        logits, v = net.apply(p, obs)
        return jnp.sum(jnp.tanh(logits)) + jnp.sum(v ** 2)

    batched = jax.vmap(lambda p: (net.apply(p, obs), jax.grad(loss)(p)))(params)
    for s in range(3):
        p = jax.tree.map(lambda x: x[s], params)
        one = (net.apply(p, obs), jax.grad(loss)(p))
        ref = _xla(lambda: (net.apply(p, obs), jax.grad(loss)(p)))
        _close(jax.tree.map(lambda x: x[s], batched), one, "float32")
        _close(one, ref, "float32")
    assert batched[0][0].shape == (3, 2, 3, 5, a)


def test_which_models_keep_xla_layers(kernels):
    obs = jnp.zeros((8, 10))
    cases = {
        MLPActorCritic((4,), (64, 64)): False,       # 64-wide: XLA was faster
        MLPActorCritic((4,), (256,), "gelu"): False,
        MLPActorCritic((4,), (256,), row_blocks=False): False,  # envs split over devices
        MLPActorCritic((4,), ()): False,
        MLPActorCritic((4,), (128, 512), "relu", True, jnp.bfloat16): True,
    }
    for net, fused in cases.items():
        assert _uses_kernel(net, net.init(jax.random.PRNGKey(0), obs), obs) is fused, net


def test_why_not_names_the_reason():
    assert mlp_kernel.why_not(71, (256, 256), 44, "relu", jnp.bfloat16) is None
    assert "activation 'gelu'" in mlp_kernel.why_not(71, (256,), 44, "gelu", jnp.float32)
    assert "dtype float16" in mlp_kernel.why_not(71, (256,), 44, "relu", jnp.float16)
    assert "hidden sizes [64, 64]" in mlp_kernel.why_not(71, (64, 64), 44, "relu", jnp.float32)
    assert "hidden sizes [128, 128, 128, 128]" in mlp_kernel.why_not(
        71, (128,) * 4, 44, "relu", jnp.float32)
    assert "300 observation features" in mlp_kernel.why_not(300, (128,), 44, "relu",
                                                            jnp.float32)
    assert "300 logits" in mlp_kernel.why_not(30, (128,), 301, "relu", jnp.float32)


def test_cpu_keeps_xla_layers():
    """Without a CUDA GPU the model is XLA's layers (nothing lowers to Triton)."""
    if mlp_kernel.on_cuda():
        pytest.skip("a CUDA GPU is present")
    net = MLPActorCritic((4,), (256, 256))
    obs = jnp.zeros((8, 10))
    assert mlp_kernel.layout_for(10, (256, 256), 5, 2, "tanh", jnp.float32) is None
    assert not _uses_kernel(net, net.init(jax.random.PRNGKey(0), obs), obs)


def test_weight_grad_row_blocks_equal_one_matmul():
    x = jax.random.normal(jax.random.PRNGKey(0), (16, 1024, 12))
    dy = jax.random.normal(jax.random.PRNGKey(1), (16, 1024, 7))
    assert mlp_kernel.row_blocks(16 * 1024) == 16  # blocks of 1024 rows
    np.testing.assert_allclose(mlp_kernel.weight_grad(x, dy, True),
                               mlp_kernel.weight_grad(x, dy, False), rtol=1e-5, atol=1e-4)
