"""GPU tests of the categorical sampler: the CUDA kernel against
jax.random.categorical (the "jax" backend on the GPU) and the XLA:CPU
handler, statistics, vmap and every launch configuration. Skipped without a
GPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwarp.sampler import sample_actions

from _checks import EXTREME_LOGITS

pytestmark = pytest.mark.gpu

NVEC = (1, 2, 5, 21, 100)

# case -> (nvec, rows). max(nvec) <= 64: row tiles in shared memory, one
# thread per (row, head), exp-sum associated as G = 1-16 lanes would (about
# n/4 elements per lane); else whole warps on global memory. Odd row counts
# leave partial tiles.
LAUNCH_CASES = {
    "lanes1_tiled": ((2, 3), 30_001),
    "lanes2_tiled": ((6,), 20_000),
    "lanes4_tiled": ((9, 1, 4), 20_000),
    "lanes8_tiled_tag": ((21, 21), 20_011),
    "lanes16_tiled": ((40, 7), 10_000),
    "lanes32_global": ((300,), 5_000),
    "lanes32_global_mixed": ((2, 65, 3), 7_777),
    "heads32": ((3,) * 32, 3_001),
}


def sample_on(backend, key, logits, nvec):
    if backend == "cpu":
        cpu = jax.devices("cpu")[0]
        with jax.default_device(cpu):
            key = jax.random.wrap_key_data(jax.device_put(np.asarray(jax.random.key_data(key)),
                                                          cpu))
            a, lp = sample_actions(key, jax.device_put(np.asarray(logits), cpu), nvec,
                                   backend="cpu")
    else:
        a, lp = sample_actions(key, logits, nvec, backend=backend)
    return np.asarray(a), np.asarray(lp)


@pytest.fixture(scope="module")
def big():
    logits = jax.random.normal(jax.random.key(1), (100_000, sum(NVEC))) * 2.0
    key = jax.random.key(7)
    return key, logits, {b: sample_on(b, key, logits, NVEC) for b in ("cuda", "cpu", "jax")}


def test_cuda_actions_equal_jax_and_cpu(big):
    _, _, out = big
    np.testing.assert_array_equal(out["cuda"][0], out["jax"][0])
    np.testing.assert_array_equal(out["cuda"][0], out["cpu"][0])


def test_cuda_log_prob_close(big):
    _, _, out = big
    np.testing.assert_allclose(out["cuda"][1], out["jax"][1], rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(out["cuda"][1], out["cpu"][1], rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("case", sorted(LAUNCH_CASES))
def test_cuda_launch_configurations_match_cpu(case):
    nvec, rows = LAUNCH_CASES[case]
    logits = jax.random.normal(jax.random.key(3), (rows, sum(nvec))) * 2.0
    key = jax.random.key(4)
    a_cuda, lp_cuda = sample_on("cuda", key, logits, nvec)
    a_cpu, lp_cpu = sample_on("cpu", key, logits, nvec)
    np.testing.assert_array_equal(a_cuda, a_cpu)
    np.testing.assert_allclose(lp_cuda, lp_cpu, rtol=2e-6, atol=1e-6)


def test_cuda_extreme_logits_match_cpu():
    x = EXTREME_LOGITS
    # Also through the whole-warp path (a head of 100 choices).
    wide = np.full((5, 100), -np.inf, np.float32)
    wide[:, :4] = x
    key = jax.random.key(11)
    for logits, nvec in ((x, (4,)), (wide, (100,))):
        a_cuda, lp_cuda = sample_on("cuda", key, jnp.asarray(logits), nvec)
        a_cpu, lp_cpu = sample_on("cpu", key, logits, nvec)
        np.testing.assert_array_equal(a_cuda, a_cpu)
        np.testing.assert_array_equal(a_cuda[:3, 0], [2, 1, 0])
        np.testing.assert_allclose(lp_cuda, lp_cpu, rtol=1e-6)


def test_cuda_threefry_partitionable_false():
    nvec = (3, 4, 70)
    logits = jax.random.normal(jax.random.key(2), (1001, sum(nvec)))
    key = jax.random.key(5)
    with jax.threefry_partitionable(False):
        a_cuda, _ = sample_on("cuda", key, logits, nvec)
        a_jax, _ = sample_on("jax", key, logits, nvec)
    np.testing.assert_array_equal(a_cuda, a_jax)


def test_cuda_chi_square_goodness_of_fit():
    p0 = np.array([0.05, 0.10, 0.15, 0.20, 0.20, 0.30])
    p1 = np.array([0.6, 0.3, 0.1])
    rows = 200_000
    row = np.concatenate([np.log(p0) + 1.5, np.log(p1) - 2.0]).astype(np.float32)
    logits = jnp.broadcast_to(jnp.asarray(row), (rows, 9))
    a, lp = sample_on("cuda", jax.random.key(2024), logits, (6, 3))
    counts = np.bincount(a[:, 0] * 3 + a[:, 1], minlength=18)
    expected = rows * np.outer(p0, p1).ravel()
    chi2 = np.sum((counts - expected) ** 2 / expected)
    # 17 degrees of freedom; P(chi2 > 40.79) = 1e-3.
    assert chi2 < 40.79, (chi2, counts, expected)
    np.testing.assert_allclose(lp, np.log(p0[a[:, 0]] * p1[a[:, 1]]), rtol=1e-5)


@pytest.mark.parametrize("nvec", [(21, 21), (300,)])
def test_cuda_vmap_equals_loop(nvec):
    # Members of 777 rows straddle the kernel's row tiles.
    keys = jax.random.split(jax.random.key(3), 3)
    x = jax.random.normal(jax.random.key(4), (3, 777, sum(nvec)))
    f = jax.jit(lambda k, l: sample_actions(k, l, nvec, backend="cuda"))
    a, lp = jax.vmap(f)(keys, x)
    a_shared, _ = jax.vmap(f, in_axes=(0, None))(keys, x[0])
    for v in range(3):
        av, lpv = f(keys[v], x[v])
        np.testing.assert_array_equal(np.asarray(a[v]), np.asarray(av))
        np.testing.assert_array_equal(np.asarray(lp[v]), np.asarray(lpv))
        np.testing.assert_array_equal(np.asarray(a_shared[v]), np.asarray(f(keys[v], x[0])[0]))


def test_cuda_in_scan_and_gradient():
    nvec = (21, 21)
    x = jax.random.normal(jax.random.key(0), (2000, 42))

    @jax.jit
    def run(keys, x):
        def body(total, k):
            a, lp = sample_actions(k, x, nvec, backend="cuda")
            return total + lp.sum(), a
        return jax.lax.scan(body, jnp.float32(0), keys)

    keys = jax.random.split(jax.random.key(1), 5)
    _, actions = run(keys, x)
    single = jax.jit(lambda k: sample_actions(k, x, nvec, backend="cuda")[0])
    for t in range(5):
        np.testing.assert_array_equal(np.asarray(actions[t]), np.asarray(single(keys[t])))

    def loss(x, backend):
        return jnp.sum(sample_actions(jax.random.key(2), x, nvec, backend=backend)[1])

    grad = jax.jit(jax.grad(loss), static_argnums=1)
    np.testing.assert_allclose(np.asarray(grad(x, "cuda")), np.asarray(grad(x, "jax")),
                               rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------
# The row offset (issue 29): a call over a block of rows, as each device of
# a sharded call makes, draws the whole call's numbers. One GPU suffices:
# the blocks are separate launches on it.
# ---------------------------------------------------------------------------
def sample_blocks(backend, key, logits, nvec, blocks):
    """(whole call, the same rows sampled block by block with row offsets)."""
    import functools

    from jaxwarp import sampler

    partitionable = bool(jax.config.jax_threefry_partitionable)
    hk = jax.random.key_data(jax.random.split(key, len(nvec)))
    envs = logits.shape[0]
    local = envs // blocks
    call = jax.jit(functools.partial(sampler._sample_call, nvec, backend, partitionable, envs),
                   static_argnums=1)
    whole = call(None, envs, hk, logits)
    parts = [call(jnp.uint32(s * local), local, hk, logits[s * local:(s + 1) * local])
             for s in range(blocks)]
    return whole, tuple(jnp.concatenate(x) for x in zip(*parts))


@pytest.mark.parametrize("partitionable", [True, False])
@pytest.mark.parametrize("case", ["lanes8_tiled_tag", "lanes32_global_mixed", "heads32"])
def test_cuda_row_offset_blocks_equal_whole_call(case, partitionable):
    nvec, rows = LAUNCH_CASES[case]
    rows -= rows % 4  # four equal blocks, each straddling row tiles
    logits = jax.random.normal(jax.random.key(6), (rows, sum(nvec))) * 2.0
    key = jax.random.key(8)
    with jax.threefry_partitionable(partitionable):
        whole, pieced = sample_blocks("cuda", key, logits, nvec, 4)
        a_cpu, _ = sample_on("cpu", key, logits, nvec)
    np.testing.assert_array_equal(np.asarray(pieced[0]), np.asarray(whole[0]))
    np.testing.assert_array_equal(np.asarray(pieced[1]), np.asarray(whole[1]))
    np.testing.assert_array_equal(np.asarray(whole[0]), a_cpu)


@pytest.mark.skipif(len(jax.devices()) < 2, reason="needs two GPUs")
def test_cuda_sampler_sharded_over_gpus_bitwise():
    # Plain jit over logits split along rows: one launch per GPU, no
    # collective, the one-GPU draws.
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxwarp import sharding

    nvec = (21, 21)
    devices = jax.devices()
    logits = jax.random.normal(jax.random.key(1), (len(devices) * 1000, 5, sum(nvec)))
    key = jax.random.key(2)
    f = jax.jit(lambda k, x: sample_actions(k, x, nvec, backend="cuda"))
    want = f(key, logits)
    x = jax.device_put(logits, NamedSharding(Mesh(np.array(devices), ("envs",)), P("envs")))
    compiled = f.lower(key, x).compile()
    got = compiled(key, x)
    assert sharding.collectives_in(compiled.as_text()) == []
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
    np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))
