"""jaxwarp.benchmark: the actions of the benchmark protocol (experiments/) and the
matmul FLOP counter behind the MFU figures."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp.benchmark import observation_signature, protocol_actions


def test_actions_shape_dtype_range_and_determinism():
    obs = jax.random.normal(jax.random.key(0), (6, 5, 13))
    a = protocol_actions(jnp.int32(3), obs, [21, 4])
    assert a.shape == (6, 5, 2) and a.dtype == jnp.int32
    assert int(a[..., 0].min()) >= 0 and int(a[..., 0].max()) < 21
    assert int(a[..., 1].min()) >= 0 and int(a[..., 1].max()) < 4
    np.testing.assert_array_equal(a, protocol_actions(jnp.int32(3), obs, [21, 4]))
    assert not np.array_equal(a, protocol_actions(jnp.int32(4), obs, [21, 4]))  # step matters


def test_actions_read_every_observation_row():
    """Changing one element of an agent's row changes that row's signature,
    so (over the heads) the actions; other agents' actions stay."""
    obs = jax.random.normal(jax.random.key(1), (4, 3, 9))
    base = protocol_actions(jnp.int32(0), obs, [1000, 1000])
    for e, i, col in [(0, 0, 0), (3, 2, 8), (1, 1, 4)]:
        moved = protocol_actions(jnp.int32(0), obs.at[e, i, col].add(1.0), [1000, 1000])
        changed = np.any(np.asarray(base != moved), axis=-1)
        expected = np.zeros((4, 3), bool)
        expected[e, i] = True
        np.testing.assert_array_equal(changed, expected)


def test_single_agent_observations_and_kernel_alone_mode():
    obs = jnp.arange(8 * 4, dtype=jnp.float32).reshape(8, 4)  # one agent: [envs, obs_dim]
    assert observation_signature(obs).shape == (8, 1)
    assert protocol_actions(jnp.int32(0), obs, [2]).shape == (8, 1, 1)
    hashed = protocol_actions(jnp.int32(0), None, [2], (8, 1))
    assert hashed.shape == (8, 1, 1)
    with pytest.raises(ValueError, match="shape"):
        protocol_actions(jnp.int32(0), None, [2])


def test_protocol_rollout_steps_a_registered_env():
    """The benchmark loop as experiments/ writes it: actions from the previous
    observations, stepped in a scan, on the cpu backend."""
    env = jaxwarp.make("mpe_simple_spread", backend="cpu")
    obs, state = env.reset(jax.random.key(0), 4)
    nvec = env.action_space.nvec

    def body(c, xs):
        s, o = c
        k, t = xs
        o, s, r, d, _ = env.step(k, s, protocol_actions(t, o, nvec))
        return (s, o), r.sum()

    (_, obs2), rewards = jax.jit(lambda c: jax.lax.scan(
        body, c, (jax.random.split(jax.random.key(1), 5), jnp.arange(5, dtype=jnp.int32))))(
            (state, obs))
    assert obs2.shape == obs.shape and rewards.shape == (5,)
    assert np.all(np.isfinite(np.asarray(rewards)))


@pytest.mark.parametrize("protocol", [False, True])
def test_protocol_keeps_every_unrolled_observation(protocol):
    """Why the protocol exists: in a scan unrolled 4x whose observations are
    carried but never read, XLA keeps the pure-JAX env's observation work
    (Tag's k-nearest TopK) for the last unrolled step only; with actions read
    from the observations, all 4 stay in the compiled loop."""
    env = jaxwarp.make("tag_continuous", backend="jax", num_taggers=2, num_runners=6,
                       num_other_agents_observed=3)
    obs, state = env.reset(jax.random.key(0), 4)
    nvec = env.action_space.nvec

    def run(state, obs, key):
        def body(c, t):
            s, o, k = c
            k, ks = jax.random.split(k)
            a = protocol_actions(t, o if protocol else None, nvec, (4, env.num_agents))
            o, s, r, _, _ = env.step(ks, s, a)
            return (s, o, k), r.sum()

        (s, o, _), rs = jax.lax.scan(body, (state, obs, key), jnp.arange(8, dtype=jnp.int32),
                                     unroll=4)
        return s, o, rs

    hlo = jax.jit(run).lower(state, obs, jax.random.key(1)).compile().as_text()
    if protocol:
        assert hlo.count("TopK") == 4
    else:
        assert hlo.count("TopK") < 4


def test_matmul_flops_count_forward_backward_scans_and_dtypes():
    from jaxwarp.benchmark import matmul_flops, model_flops_utilization

    a, w = jnp.ones((8, 16)), jnp.ones((16, 4))
    assert matmul_flops(lambda a, w: a @ w, a, w) == {"float32": 2 * 8 * 16 * 4}

    def scanned(a, b):  # a scan body counts `length` times
        return jax.lax.scan(lambda c, _: (c @ b, None), a, None, length=5)[0]
    assert matmul_flops(scanned, a, jnp.ones((16, 16))) == {"float32": 5 * 2 * 8 * 16 * 16}
    # Gradient with respect to w only: forward and the weight gradient; the
    # input's gradient is never formed.
    g = jax.grad(lambda w, a: jnp.sum(jnp.tanh(a @ w)))
    assert matmul_flops(g, w, a) == {"float32": 2 * (2 * 8 * 16 * 4)}
    # A product nothing reads is dropped, as XLA drops it; dtypes are kept apart.
    both = matmul_flops(lambda a, w: ((a @ w) * 0 + 1, a.astype(jnp.bfloat16) @ w.astype(
        jnp.bfloat16))[1] + jnp.sum(a @ w), a, w)
    assert both == {"float32": 2 * 8 * 16 * 4, "bfloat16": 2 * 8 * 16 * 4}
    # cond: the costlier branch.
    c = matmul_flops(lambda p, a, w: jax.lax.cond(p, lambda: (a @ w).sum(), lambda: a.sum()),
                     True, a, w)
    assert c == {"float32": 2 * 8 * 16 * 4}
    # while: trip count unknown, the body once (not the condition's).
    wl = matmul_flops(lambda a, w: jax.lax.while_loop(
        lambda x: jnp.sum(x @ jnp.ones((4, 2))) < 0, lambda x: x @ jnp.ones((4, 4)), a @ w), a, w)
    assert wl == {"float32": 2 * 8 * 16 * 4 + 2 * 8 * 4 * 4}
    # A Pallas kernel: its body's products once per grid point (the fused MLP's
    # forward over 4 tiles of 128 rows: the model's matmuls, nothing padded here).
    from jaxwarp.models import mlp_kernel

    lay = mlp_kernel.Layout(128, (256,), 64, 1, "relu", "float32")
    ws = (jnp.zeros((128, 256)), jnp.zeros(256), jnp.zeros((256, 64)), jnp.zeros(64))
    fwd = matmul_flops(lambda x: mlp_kernel.fused_mlp(lay, x, ws, True, True),
                       jnp.zeros((512, 128)))
    assert fwd == {"float32": 2 * 512 * (128 * 256 + 256 * 64)}

    kind = "NVIDIA H100 80GB HBM3"
    assert model_flops_utilization({"bfloat16": 989.4e12}, 2.0, kind) == pytest.approx(0.5)
    assert model_flops_utilization({"float32": 494.7e12, "bfloat16": 989.4e12}, 4.0,
                                   kind) == pytest.approx(0.5)
    assert model_flops_utilization({"bfloat16": 1e12}, 1.0, "some CPU") is None
    assert model_flops_utilization({"int8": 1e12}, 1.0, kind) is None
