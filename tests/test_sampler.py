"""The categorical action sampler on CPU: the XLA:CPU handler against
jax.random.categorical (exact actions) and the pure-JAX reference, sampling
statistics, vmap/jit/scan behaviour, gradients and errors."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp.sampler import sample_actions

from _checks import EXTREME_LOGITS

NVEC = (1, 2, 5, 21, 100)
BACKENDS = ("cpu", "jax")


@functools.partial(jax.jit, static_argnums=2)
def categorical_per_head(key, logits, nvec):
    """The definition, built directly from jax.random: i32[..., H]."""
    keys = jax.random.split(key, len(nvec))
    off = np.cumsum((0,) + tuple(nvec))
    return jnp.stack([
        jax.random.categorical(keys[h], logits[..., off[h]:off[h + 1]], axis=-1)
        for h in range(len(nvec))
    ], axis=-1)


def log_prob_f64(logits, actions, nvec):
    """sum_h log_softmax(logits_h)[a_h] in float64 numpy."""
    x = np.asarray(logits, np.float64)
    off = np.cumsum((0,) + tuple(nvec))
    total = np.zeros(x.shape[:-1])
    for h in range(len(nvec)):
        xh = x[..., off[h]:off[h + 1]]
        m = xh.max(-1, keepdims=True)
        lsm = xh - m - np.log(np.exp(xh - m).sum(-1, keepdims=True))
        total += np.take_along_axis(lsm, actions[..., h:h + 1], -1)[..., 0]
    return total


@pytest.fixture(scope="module")
def big():
    """100k rows of 5 heads (1, 2, 5, 21 and 100 choices), with both backends' draws."""
    logits = jax.random.normal(jax.random.key(1), (100_000, sum(NVEC))) * 2.0
    key = jax.random.key(7)
    out = {b: sample_actions(key, logits, NVEC, backend=b) for b in BACKENDS}
    return key, logits, out


# ---------------------------------------------------------------------------
# Agreement with jax.random.categorical.
# ---------------------------------------------------------------------------
def test_cpu_actions_equal_jax_categorical_exactly(big):
    _, _, out = big
    np.testing.assert_array_equal(np.asarray(out["cpu"][0]), np.asarray(out["jax"][0]))


def test_both_backends_equal_categorical_per_head():
    # The definition written out with jax.random directly; two leading axes.
    logits = jax.random.normal(jax.random.key(8), (7, 450, sum(NVEC))) * 3.0
    key = jax.random.key(9)
    want = np.asarray(categorical_per_head(key, logits, NVEC))
    for backend in BACKENDS:
        a, _ = sample_actions(key, logits, NVEC, backend=backend)
        np.testing.assert_array_equal(np.asarray(a), want, err_msg=backend)


def test_log_prob_matches_reference(big):
    key, logits, out = big
    a = np.asarray(out["cpu"][0])
    lp_cpu, lp_jax = np.asarray(out["cpu"][1]), np.asarray(out["jax"][1])
    # Different exp/log implementations and summation order: float32 rounding.
    np.testing.assert_allclose(lp_cpu, lp_jax, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(lp_cpu, log_prob_f64(logits, a, NVEC), rtol=2e-6, atol=2e-6)


def test_actions_in_range_and_head_of_one_choice(big):
    _, _, out = big
    a = np.asarray(out["cpu"][0])
    assert a.min() == 0 and np.all(a.max(0) == np.asarray(NVEC) - 1)
    # A single-choice head always picks 0 and adds log 1 = 0.
    k = jax.random.key(3)
    x = jnp.array([[0.3, -1.0, 2.0], [5.0, 0.0, 0.0]], jnp.float32)
    a1, lp1 = sample_actions(k, x, (1, 2), backend="cpu")
    a2, lp2 = sample_actions(k, x[:, 1:], (2,), backend="cpu")
    np.testing.assert_array_equal(np.asarray(a1)[:, 0], 0)
    np.testing.assert_array_equal(np.asarray(lp1), np.asarray(lp2))


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_choices_are_never_drawn(backend):
    x = jnp.zeros((5000, 7), jnp.float32).at[:, 1::2].set(-jnp.inf)  # head 0: 4 of 7 allowed
    a, lp = sample_actions(jax.random.key(0), x, (7,), backend=backend)
    a = np.asarray(a)[:, 0]
    assert np.all(a % 2 == 0) and set(np.unique(a)) == {0, 2, 4, 6}
    np.testing.assert_allclose(np.asarray(lp), np.log(0.25), rtol=1e-6)


def test_extreme_logits_match_reference():
    x = EXTREME_LOGITS
    k = jax.random.key(11)
    a_cpu, lp_cpu = sample_actions(k, x, (4,), backend="cpu")
    a_jax, lp_jax = sample_actions(k, x, (4,), backend="jax")
    np.testing.assert_array_equal(np.asarray(a_cpu), np.asarray(a_jax))
    np.testing.assert_array_equal(np.asarray(a_cpu)[:3, 0], [2, 1, 0])
    np.testing.assert_allclose(np.asarray(lp_cpu), np.asarray(lp_jax), rtol=1e-6)


def test_threefry_partitionable_false_layout():
    # jax's original counter layout (odd sizes exercise its padding).
    nvec = (3, 4)
    logits = jax.random.normal(jax.random.key(2), (1001, 7))
    key = jax.random.key(5)
    with jax.threefry_partitionable(False):
        want = np.asarray(categorical_per_head(key, logits, nvec))
        a_cpu, lp_cpu = sample_actions(key, logits, nvec, backend="cpu")
        a_jax, lp_jax = sample_actions(key, logits, nvec, backend="jax")
    np.testing.assert_array_equal(np.asarray(a_cpu), want)
    np.testing.assert_array_equal(np.asarray(a_jax), want)
    np.testing.assert_allclose(np.asarray(lp_cpu), np.asarray(lp_jax), rtol=2e-6)
    a_new, _ = sample_actions(key, logits, nvec, backend="cpu")
    assert np.mean(np.asarray(a_new) != want) > 0.3  # the two layouts draw differently


# ---------------------------------------------------------------------------
# Statistics: chi-square goodness of fit of the joint (head 0, head 1) draw.
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_chi_square_goodness_of_fit(backend):
    p0 = np.array([0.05, 0.10, 0.15, 0.20, 0.20, 0.30])
    p1 = np.array([0.6, 0.3, 0.1])
    rows = 200_000
    # Unnormalised logits (offsets per head): sampling must not care.
    row = np.concatenate([np.log(p0) + 1.5, np.log(p1) - 2.0]).astype(np.float32)
    logits = jnp.broadcast_to(jnp.asarray(row), (rows, 9))
    a, lp = sample_actions(jax.random.key(2024), logits, (6, 3), backend=backend)
    a = np.asarray(a)
    counts = np.bincount(a[:, 0] * 3 + a[:, 1], minlength=18)
    expected = rows * np.outer(p0, p1).ravel()
    chi2 = np.sum((counts - expected) ** 2 / expected)
    # 17 degrees of freedom; P(chi2 > 40.79) = 1e-3 (scipy.stats.chi2.isf(1e-3, 17)).
    assert chi2 < 40.79, (chi2, counts, expected)
    np.testing.assert_allclose(np.asarray(lp), np.log(p0[a[:, 0]] * p1[a[:, 1]]), rtol=1e-5)


# ---------------------------------------------------------------------------
# API properties.
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("lead", [(), (3,), (2, 4)])
def test_shapes_and_dtypes(backend, lead):
    nvec = (3, 4)
    logits = jax.random.normal(jax.random.key(0), lead + (7,))
    a, lp = sample_actions(jax.random.key(1), logits, nvec, backend=backend)
    assert a.shape == lead + (2,) and a.dtype == jnp.int32
    assert lp.shape == lead and lp.dtype == jnp.float32


@pytest.mark.skipif(jaxwarp.gpu_available(), reason="auto is cuda with a GPU")
def test_exported_and_auto_backend_is_cpu_here():
    assert jaxwarp.sample_actions is sample_actions
    x = jax.random.normal(jax.random.key(0), (50, 8))
    k = jax.random.key(4)
    a_auto, _ = jaxwarp.sample_actions(k, x, (5, 3))
    a_ref, _ = jaxwarp.sample_actions(k, x, (5, 3), backend="cpu")
    np.testing.assert_array_equal(np.asarray(a_auto), np.asarray(a_ref))


def test_empty_batch():
    a, lp = sample_actions(jax.random.key(0), jnp.zeros((0, 5)), (2, 3), backend="cpu")
    assert a.shape == (0, 2) and lp.shape == (0,)


@pytest.mark.parametrize("backend", BACKENDS)
def test_deterministic_and_key_dependent(backend):
    x = jax.random.normal(jax.random.key(0), (2000, 26))
    nvec = (21, 5)
    a1, lp1 = sample_actions(jax.random.key(1), x, nvec, backend=backend)
    a2, lp2 = sample_actions(jax.random.key(1), x, nvec, backend=backend)
    a3, _ = sample_actions(jax.random.key(2), x, nvec, backend=backend)
    np.testing.assert_array_equal(np.asarray(a1), np.asarray(a2))
    np.testing.assert_array_equal(np.asarray(lp1), np.asarray(lp2))
    assert np.mean(np.asarray(a1) != np.asarray(a3)) > 0.5


def test_raw_and_typed_keys_agree():
    x = jax.random.normal(jax.random.key(0), (100, 8))
    a_typed, _ = sample_actions(jax.random.key(9), x, (5, 3), backend="cpu")
    a_raw, _ = sample_actions(jax.random.PRNGKey(9), x, (5, 3), backend="cpu")
    np.testing.assert_array_equal(np.asarray(a_typed), np.asarray(a_raw))


def test_half_precision_logits_are_cast_to_float32():
    x = jax.random.normal(jax.random.key(0), (300, 8)).astype(jnp.bfloat16)
    k = jax.random.key(1)
    a, lp = sample_actions(k, x, (5, 3), backend="cpu")
    a32, lp32 = sample_actions(k, x.astype(jnp.float32), (5, 3), backend="cpu")
    np.testing.assert_array_equal(np.asarray(a), np.asarray(a32))
    np.testing.assert_array_equal(np.asarray(lp), np.asarray(lp32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_vmap_equals_loop(backend):
    nvec = (4, 21)
    keys = jax.random.split(jax.random.key(3), 4)
    x = jax.random.normal(jax.random.key(4), (4, 37, 25))
    f = jax.jit(lambda k, l: sample_actions(k, l, nvec, backend=backend))
    cases = {"keys_and_logits": (jax.vmap(f)(keys, x), [f(keys[v], x[v]) for v in range(4)])}
    if backend == "cpu":  # the kernel's member layout; jax.random's own vmap needs no more
        cases["shared_logits"] = (jax.vmap(f, in_axes=(0, None))(keys, x[0]),
                                  [f(keys[v], x[0]) for v in range(4)])
        cases["shared_key"] = (jax.vmap(f, in_axes=(None, 0))(keys[0], x),
                               [f(keys[0], x[v]) for v in range(4)])
        # Nested vmap folds both batch axes into the members.
        keys2 = jax.random.split(jax.random.key(5), (2, 3))
        x2 = jax.random.normal(jax.random.key(6), (2, 3, 37, 25))
        cases["nested"] = (jax.tree.map(lambda a: a.reshape((6,) + a.shape[2:]),
                                        jax.vmap(jax.vmap(f))(keys2, x2)),
                           [f(keys2[i, j], x2[i, j]) for i in range(2) for j in range(3)])
    for name, ((a, lp), loop) in cases.items():
        for v, (av, lpv) in enumerate(loop):
            np.testing.assert_array_equal(np.asarray(a[v]), np.asarray(av), err_msg=name)
            np.testing.assert_array_equal(np.asarray(lp[v]), np.asarray(lpv), err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_jit_inside_scan_equals_loop(backend):
    nvec = (3, 5)
    x = jax.random.normal(jax.random.key(0), (64, 8))
    step_keys = jax.random.split(jax.random.key(1), 6)

    @jax.jit
    def run(keys, x):
        def body(total, k):
            a, lp = sample_actions(k, x, nvec, backend=backend)
            return total + lp.sum(), a
        return jax.lax.scan(body, jnp.float32(0), keys)

    total, actions = run(step_keys, x)
    single = jax.jit(lambda k: sample_actions(k, x, nvec, backend=backend))
    loop = [single(k) for k in step_keys]
    for t, (a, _) in enumerate(loop):
        np.testing.assert_array_equal(np.asarray(actions[t]), np.asarray(a))
    assert len({np.asarray(a).tobytes() for a, _ in loop}) == len(loop)  # per-step keys differ
    np.testing.assert_allclose(float(total), sum(float(lp.sum()) for _, lp in loop), rtol=1e-5)


def test_log_prob_gradient_matches_reference():
    nvec = (3, 6)
    x = jax.random.normal(jax.random.key(0), (40, 9))
    w = jax.random.normal(jax.random.key(1), (40,))
    k = jax.random.key(2)

    def loss(x, backend):
        _, lp = sample_actions(k, x, nvec, backend=backend)
        return jnp.sum(w * lp)

    grad = jax.jit(jax.grad(loss), static_argnums=1)
    g_cpu, g_jax = grad(x, "cpu"), grad(x, "jax")
    np.testing.assert_allclose(np.asarray(g_cpu), np.asarray(g_jax), rtol=1e-5, atol=1e-6)
    assert np.abs(np.asarray(g_cpu)).max() > 0.1
    # vmap of the gradient (the custom JVP under broadcast_all).
    gv = jax.vmap(lambda x: grad(x, "cpu"))(jnp.stack([x, 2 * x]))
    np.testing.assert_allclose(np.asarray(gv[0]), np.asarray(g_cpu), rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------
# Errors name the argument.
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(nvec=()), ValueError, "nvec must hold 1 to 32 heads"),
    (dict(nvec=(2,) * 33, logits=jnp.zeros((4, 66))), ValueError, "1 to 32 heads"),
    (dict(nvec=(3, 0)), ValueError, "nvec entries must be >= 1"),
    (dict(nvec=(3, 2.0)), TypeError, "nvec must hold ints"),
    (dict(nvec=(3, True)), TypeError, "nvec must hold ints"),
    (dict(nvec=5), TypeError, "nvec must be a sequence"),
    (dict(logits=jnp.zeros((4, 5), jnp.int32)), TypeError, "logits must have a floating"),
    (dict(logits=[[0.0] * 5]), TypeError, "logits must be an array"),
    (dict(logits=jnp.zeros((4, 6))), ValueError,
     r"logits must have shape \[..., sum\(nvec\) = 5\]"),
    (dict(logits=jnp.float32(0)), ValueError, "logits must have shape"),
    (dict(key=jax.random.split(jax.random.key(0), 3)), ValueError, "key must be a single"),
    (dict(key=jnp.zeros((3,), jnp.uint32)), ValueError, "key must be a single"),
    (dict(backend="tpu"), ValueError, "backend='tpu' is unknown"),
])
def test_errors(kwargs, exc, match):
    args = dict(key=jax.random.key(0), logits=jnp.zeros((4, 5)), nvec=(3, 2), backend="cpu")
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        sample_actions(**args)


# ---------------------------------------------------------------------------
# The row offset: a call over a block of rows draws the whole call's numbers.
# ---------------------------------------------------------------------------
def sample_blocks(backend, key, logits, nvec, blocks, members):
    """(whole call, the same rows sampled block by block along the first row
    axis with their row offsets, as each device of a sharded call does)."""
    from jaxwarp import sampler

    partitionable = bool(jax.config.jax_threefry_partitionable)
    hk = jax.random.key_data(jax.random.split(key, len(nvec)))
    if members:  # vmap members: keys u32[members, H, 2], rows on axis 1
        hk = jnp.stack([jax.random.key_data(jax.random.split(k, len(nvec)))
                        for k in jax.random.split(key, logits.shape[0])])
    axis = 1 if members else 0
    envs = logits.shape[axis]
    local = envs // blocks
    call = functools.partial(sampler._sample_call, nvec, backend, partitionable, envs)
    whole = call(None, envs, hk, logits)
    parts = [call(jnp.uint32(s * local), local, hk,
                  jax.lax.slice_in_dim(logits, s * local, (s + 1) * local, axis=axis))
             for s in range(blocks)]
    return whole, tuple(jnp.concatenate(x, axis=axis) for x in zip(*parts))


@pytest.mark.parametrize("partitionable", [True, False])
@pytest.mark.parametrize("shape, members", [((12, 28), False), ((8, 3, 28), False),
                                            ((3, 8, 2, 28), True)])
@pytest.mark.parametrize("blocks", [2, 4])
def test_row_offset_blocks_equal_whole_call(partitionable, shape, members, blocks):
    nvec = (2, 5, 21)
    logits = jax.random.normal(jax.random.key(3), shape)
    with jax.threefry_partitionable(partitionable):
        whole, pieced = sample_blocks("cpu", jax.random.key(9), logits, nvec, blocks, members)
        ref = (jax.vmap(lambda k, x: sample_actions(k, x, nvec, backend="jax"))(
            jax.random.split(jax.random.key(9), shape[0]), logits) if members else
            sample_actions(jax.random.key(9), logits, nvec, backend="jax"))
    np.testing.assert_array_equal(np.asarray(pieced[0]), np.asarray(whole[0]))
    np.testing.assert_array_equal(np.asarray(pieced[1]), np.asarray(whole[1]))
    np.testing.assert_array_equal(np.asarray(whole[0]), np.asarray(ref[0]))


@pytest.mark.parametrize("offsets, draw_rows, match", [
    (np.zeros(2, np.uint32), 0, "row offsets must be u32"),
    (np.zeros((), np.uint32), 3, "draw_rows must be 0 or >="),
])
def test_ffi_rejects_bad_row_offsets(offsets, draw_rows, match):
    # The Python wrapper never makes these; the handler checks a direct call.
    hk = jax.random.key_data(jax.random.split(jax.random.key(0), 1))
    call = jax.ffi.ffi_call("jaxwarp_sample_categorical_cpu",
                            (jax.ShapeDtypeStruct((4, 1), jnp.int32),
                             jax.ShapeDtypeStruct((4,), jnp.float32)))
    with pytest.raises(Exception, match=match):
        jax.block_until_ready(call(hk, jnp.zeros((4, 3)), jnp.asarray(offsets),
                                   nvec=np.asarray([3], np.int32), partitionable=np.int32(1),
                                   draw_rows=np.int64(draw_rows)))
