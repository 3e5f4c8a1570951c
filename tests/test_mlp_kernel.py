"""The fused MLP kernels (jaxwarp.models.mlp_kernel) against XLA's layers.

On the CPU the kernels run in Pallas's interpreter (the same kernel bodies,
executed op by op); on a CUDA GPU they are the Triton kernels the `mlp`
model uses there.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwarp.models import MLPActorCritic, mlp_kernel, mlp_mosaic
from jaxwarp.train import losses
from jaxwarp.train.policy import Groups, Policy

CASES = [
    # (obs features, hidden, logits, shared torso, activation, dtype, rows)
    (71, (256, 256), 43, True, "relu", "bfloat16", 130),   # Tag's model; a partial last tile
    (13, (128,), 5, False, "tanh", "bfloat16", 64),
    (30, (128, 256, 128), 7, False, "relu", "bfloat16", 200),
    (32, (128,), 4, True, "relu", "bfloat16", 96),  # features a multiple of 8: no padding
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
        fused, stats = mlp_kernel.fused_mlp, mlp_kernel.fused_head_stats
        monkeypatch.setattr(mlp_kernel, "fused_mlp",
                            lambda lay, x, w, blocks: fused(lay, x, w, blocks, True))
        monkeypatch.setattr(mlp_kernel, "fused_head_stats",
                            lambda lay, x, w, a, blocks: stats(lay, x, w, a, blocks, True))


def _xla(fn, *args):
    orig = mlp_kernel.layout_for
    mlp_kernel.layout_for = lambda *a, **k: None
    try:
        return fn(*args)
    finally:
        mlp_kernel.layout_for = orig


def _uses_kernel(net, params, obs) -> bool:
    """Whether the model runs a Pallas kernel: Triton's (pallas_call) or, on a
    Hopper GPU, the rollout's Mosaic GPU forward (wgmma)."""
    jaxpr = str(jax.make_jaxpr(net.apply)(params, obs))
    return "pallas_call" in jaxpr or "wgmma" in jaxpr


def _close(a, b, dtype):
    """Relative (Euclidean) difference per leaf within bf16 rounding."""
    tol = 3e-2 if dtype == "bfloat16" else 1e-2
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


def _reference(lay, x, ws):
    """The packed MLP in plain jnp (f32[N, out_pad]), for `fused_mlp` itself."""
    n, dt = len(lay.widths), jnp.dtype(lay.dtype)
    out = ws[-1][None]
    for t in range(lay.towers):
        h = x.astype(dt)
        for i in range(n):
            z = jnp.dot(h, ws[2 * n * t + 2 * i].astype(dt),
                        preferred_element_type=jnp.float32) + ws[2 * n * t + 2 * i + 1]
            h = (jnp.tanh(z) if lay.activation == "tanh" else jax.nn.relu(z)).astype(dt)
        out = out + jnp.dot(h, ws[2 * n * lay.towers + t].astype(dt),
                            preferred_element_type=jnp.float32)
    return out


@pytest.mark.parametrize("towers,activation", [(1, "relu"), (2, "tanh")])
def test_fused_mlp_float32_equals_the_layers(towers, activation):
    """In float32 on the interpreter the kernels are the plain layers to
    float rounding: outputs, parameter and input gradients (the padded
    columns of the heads, the padded input rows stay out of them)."""
    if mlp_kernel.on_cuda():
        pytest.skip("the interpreter's exactness; the GPU runs tf32 (the test above)")
    lay = mlp_kernel.Layout(30, (256, 128), 44, towers, activation, "float32")
    ks = iter(jax.random.split(jax.random.PRNGKey(3), 16))
    torsos = [[(jax.random.normal(next(ks), (d, w)) / np.sqrt(d), 0.1 * jax.random.normal(
        next(ks), (w,))) for d, w in ((30, 256), (256, 128))] for _ in range(towers)]
    policy = (jax.random.normal(next(ks), (128, 43)) / 12, jnp.zeros(43))
    value = (jax.random.normal(next(ks), (128, 1)) / 12, jnp.ones(1))
    ws = mlp_kernel.pack(lay, torsos, policy, value)
    x = jax.random.normal(next(ks), (150, 30))
    cot = jax.random.normal(next(ks), (150, lay.out_pad))

    def loss(f, x, ws):
        return jnp.sum(f(x, ws)[:, :44] * cot[:, :44])

    kernel = lambda x, ws: mlp_kernel.fused_mlp(lay, x, ws, True, True)  # noqa: E731
    ref = lambda x, ws: _reference(lay, x, ws)  # noqa: E731
    np.testing.assert_allclose(kernel(x, ws), ref(x, ws), rtol=1e-5, atol=1e-5)
    assert kernel(x, ws).shape == (150, 64)
    for a, b in zip(jax.tree.leaves(jax.grad(loss, (1, 2))(kernel, x, ws)),
                    jax.tree.leaves(jax.grad(loss, (1, 2))(ref, x, ws))):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("towers,activation,heads", [(1, "relu", (21, 22)),
                                                     (2, "tanh", (3, 3, 30, 1, 6))])
def test_fused_head_stats_float32_equals_the_layers_and_head_stats(towers, activation, heads):
    """The heads' log-probability, entropy and value taken in the forward
    kernel are `losses.head_stats` of the plain layers' logits, with the same
    gradients (parameters and input), in float32 on the interpreter."""
    if mlp_kernel.on_cuda():
        pytest.skip("the interpreter's exactness; the GPU runs tf32 (the model test below)")
    lay = mlp_kernel.Layout(30, (256, 128), 44, towers, activation, "float32", heads)
    assert lay.out_pad == 64  # 44 columns + 1 + one entropy per head fit
    ks = iter(jax.random.split(jax.random.PRNGKey(3), 24))
    torsos = [[(jax.random.normal(next(ks), (d, w)) / np.sqrt(d), 0.1 * jax.random.normal(
        next(ks), (w,))) for d, w in ((30, 256), (256, 128))] for _ in range(towers)]
    policy = (jax.random.normal(next(ks), (128, 43)) / 3, 0.1 * jax.random.normal(next(ks), (43,)))
    value = (jax.random.normal(next(ks), (128, 1)) / 12, jnp.ones(1))
    ws = mlp_kernel.pack(lay, torsos, policy, value)
    x = jax.random.normal(next(ks), (150, 30))
    a = jnp.stack([jax.random.randint(next(ks), (150,), 0, n) for n in heads], -1)
    cot = jax.random.normal(next(ks), (3, 150))

    def ref(x, ws):
        out = _reference(lay, x, ws)
        return (*losses.head_stats(out[:, :43], a, heads), out[:, 43])

    def kernel(x, ws):
        return mlp_kernel.fused_head_stats(lay, x, ws, a, True, True)

    def loss(f, x, ws):
        return sum(jnp.sum(c * o) for c, o in zip(cot, f(x, ws)))

    got, want = kernel(x, ws), ref(x, ws)
    assert [(o.shape, o.dtype) for o in got] == [((150,), jnp.float32)] * 3
    for o, r in zip(got, want):
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=2e-5)
    for g, r in zip(jax.tree.leaves(jax.grad(loss, (1, 2))(kernel, x, ws)),
                    jax.tree.leaves(jax.grad(loss, (1, 2))(ref, x, ws))):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", CASES[:2], ids=lambda c: f"{c[1]}-{c[4]}")
def test_the_model_takes_the_actions_on_the_kernels(kernels, case):
    """`MLPActorCritic.apply(params, obs, actions)` (the learner's form on the
    kernels) gives head_stats of XLA's layers' logits, and its gradients, to
    bfloat16 rounding; the value is the plain call's."""
    d, hidden, a, shared, act, dtype, rows = case
    nvec = (a // 2, a - a // 2)
    net = MLPActorCritic(nvec, hidden, act, shared, jnp.dtype(dtype))
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(5), 3)
    obs = jax.random.normal(k1, (rows, d), jnp.float32)
    params = net.init(k2, obs[:4])
    actions = jnp.stack([jax.random.randint(k, (rows,), 0, n)
                         for k, n in zip(jax.random.split(k3, 2), nvec)], -1)
    assert net.fuses_head_stats(d)

    def stats(p, o):
        return net.apply(p, o, actions)

    def via_logits(p, o):
        logits, v = net.apply(p, o)
        return (*losses.head_stats(logits, actions, nvec), v)

    def loss(f, p, o):
        lp, ent, v = f(p, o)
        return jnp.sum(lp * o[:, 0]) + 0.1 * jnp.sum(ent) + jnp.sum(v * o[:, 1])

    got = stats(params, obs)
    ref = _xla(via_logits, params, obs)
    assert [(o.shape, o.dtype) for o in got] == [((rows,), jnp.float32)] * 3
    _close(got, ref, dtype)
    _close(jax.grad(loss, (1, 2))(stats, params, obs),
           _xla(jax.grad(loss, (1, 2)), via_logits, params, obs), dtype)


def test_the_learner_takes_the_heads_statistics_from_the_kernel(kernels):
    """`Policy.head_stats` (what the learner's loss reads) runs a group on the
    kernels through the model's actions form, and gives what the logits' path
    gives on XLA's layers; a group on XLA's layers (float32) keeps the logits' path."""
    nvec = (3, 4)
    groups = Groups({"a": np.arange(2), "b": np.arange(2, 5)}, None)
    nets = {"a": MLPActorCritic(nvec, (128,), "relu", True, jnp.bfloat16),
            "b": MLPActorCritic(nvec, (128,), "relu", True)}  # float32: XLA's layers
    policy = Policy.of(groups, nets, nvec, False)
    ks = jax.random.split(jax.random.PRNGKey(7), 4)
    obs = jax.random.normal(ks[0], (3, 4, 2, 9))  # [T, envs, agents in group a, D]
    actions = jnp.stack([jax.random.randint(k, (3, 4, 2), 0, n)
                         for k, n in zip(ks[1:3], nvec)], -1)
    params = nets["a"].init(ks[3], obs[0, 0])

    def stats(p):
        return policy.head_stats("a", p, None, obs, actions, None, None, None)

    def via_logits(p):
        logits, value = policy.sequence("a", p, None, obs, None, None, None)
        return (*losses.head_stats(logits, actions, nvec), value)

    assert "pallas_call" in str(jax.make_jaxpr(stats)(params))
    got, ref = stats(params), _xla(via_logits, params)
    assert [(o.shape, o.dtype) for o in got] == [((3, 4, 2), jnp.float32)] * 3
    _close(got, ref, "bfloat16")

    def loss(f, p):
        lp, ent, v = f(p)
        # weights of one sign: XLA's layers round the value's cotangent to bf16,
        # so a sum that cancels would compare rounding noise
        return jnp.sum(lp * obs[..., 0]) + jnp.sum(ent) + jnp.sum(v * jnp.abs(obs[..., 1]))

    _close(jax.grad(loss, 1)(stats, params), _xla(jax.grad(loss, 1), via_logits, params),
           "bfloat16")
    pb = nets["b"].init(ks[3], obs[0, 0])
    jaxpr = str(jax.make_jaxpr(
        lambda p: policy.head_stats("b", p, None, obs[:, :, :1].repeat(3, 2),
                                    actions[:, :, :1].repeat(3, 2), None, None, None))(pb))
    assert "pallas_call" not in jaxpr

    class Plain(MLPActorCritic):  # a subclass whose call takes no actions
        def __call__(self, obs):
            return super().__call__(obs)

    plain = Policy.of(groups, {"a": Plain(nvec, (128,), "relu", True, jnp.bfloat16),
                               "b": nets["b"]}, nvec, False)
    got = plain.head_stats("a", params, None, obs, actions, None, None, None)
    _close(got, ref, "bfloat16")  # through the logits (on the kernels' plain forward)


def test_actions_without_the_fused_heads_are_refused(monkeypatch):
    net = MLPActorCritic((4,), (256,), dtype=jnp.bfloat16)
    obs = jnp.zeros((8, 10))
    params = net.init(jax.random.PRNGKey(0), obs)
    if not mlp_kernel.on_cuda():
        assert not net.fuses_head_stats(10)
        with pytest.raises(ValueError, match="fuses_head_stats"):
            net.apply(params, obs, jnp.zeros((8, 1), jnp.int32))
    monkeypatch.setattr(mlp_kernel, "why_not_here", lambda *a, **k: None)
    with pytest.raises(ValueError, match=r"heads \[3, 3\].*add up to out_cols - 1 = 4"):
        mlp_kernel.layout_for(10, (256,), 5, 1, "relu", jnp.bfloat16, (3, 3))
    # no room for the statistics' columns within MAX_OUT: the plain kernels only
    lay = mlp_kernel.layout_for(10, (256,), 255, 1, "relu", jnp.bfloat16, (127, 127))
    assert lay.heads == () and lay.out_pad == 256


def test_leading_axes_and_vmap_over_seeds(kernels, monkeypatch):
    """[T, envs, agents, D] observations, and parameters vmapped over seeds,
    give what one seed at a time gives. In float32 (the kernels run it; XLA:CPU
    has no batched bf16 x bf16 -> f32 dot for the interpreter)."""
    why = mlp_kernel.why_not
    monkeypatch.setattr(mlp_kernel, "why_not",
                        lambda d, w, o, a, dt: why(d, w, o, a, jnp.bfloat16))
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
    assert _uses_kernel(net, jax.tree.map(lambda x: x[0], params), obs)


def test_which_models_keep_xla_layers(kernels):
    obs = jnp.zeros((8, 10))
    cases = {
        MLPActorCritic((4,), (64, 64)): False,       # 64-wide: XLA was faster
        MLPActorCritic((4,), (256,), "gelu", dtype=jnp.bfloat16): False,
        MLPActorCritic((4,), (256,)): False,  # float32: XLA's layers were faster
        MLPActorCritic((4,), (256,), dtype=jnp.bfloat16, row_blocks=False): False,  # devices
        MLPActorCritic((4,), (), dtype=jnp.bfloat16): False,
        MLPActorCritic((4,), (128, 512), "relu", True, jnp.bfloat16): True,
    }
    for net, fused in cases.items():
        assert _uses_kernel(net, net.init(jax.random.PRNGKey(0), obs), obs) is fused, net


def test_the_model_says_which_layers_run_it(kernels):
    bf16 = jnp.bfloat16
    tag = MLPActorCritic((21, 21), (256, 256), "relu", True, bf16)
    assert tag.layers(71) == ("fused kernels, the rollout's forward on Mosaic GPU"
                              if mlp_mosaic.plan_for(tag._kernels(71)[0]) else "fused kernels")
    # separate towers keep the Triton forward in the rollout too
    assert MLPActorCritic((21, 21), (256, 256), "relu", False, bf16).layers(71) == (
        "fused kernels")
    assert MLPActorCritic((4,), (256,)).layers(71) == (
        "XLA's layers: dtype float32 (the model uses the kernels in bfloat16)")
    assert MLPActorCritic((4,), (256,), dtype=bf16, row_blocks=False).layers(71) == (
        "XLA's layers: the envs are split over devices")
    assert MLPActorCritic((4,), (), dtype=bf16).layers(71) == "XLA's layers: no hidden layers"


def test_a_replaced_layout_choice_is_named(monkeypatch):
    """An experiment that replaces mlp_kernel.layout_for (XLA's layers for a
    comparison) gets a reason in the model's summary, not an empty one."""
    monkeypatch.setattr(mlp_kernel, "layout_for", lambda *a, **k: None)
    monkeypatch.setattr(mlp_kernel, "why_not_here", lambda *a, **k: None)
    net = MLPActorCritic((21, 21), (256, 256), "relu", True, jnp.bfloat16)
    assert net.layers(71) == "XLA's layers: mlp_kernel.layout_for declined"


def test_why_not_names_the_reason():
    assert mlp_kernel.why_not(71, (256, 256), 44, "relu", jnp.bfloat16) is None
    bf16 = jnp.bfloat16
    assert "activation 'gelu'" in mlp_kernel.why_not(71, (256,), 44, "gelu", bf16)
    assert "dtype float32" in mlp_kernel.why_not(71, (256,), 44, "relu", jnp.float32)
    assert "hidden sizes [64, 64]" in mlp_kernel.why_not(71, (64, 64), 44, "relu", bf16)
    assert "hidden sizes [128, 128, 128, 128]" in mlp_kernel.why_not(
        71, (128,) * 4, 44, "relu", bf16)
    assert "300 observation features" in mlp_kernel.why_not(300, (128,), 44, "relu", bf16)
    assert "300 logits" in mlp_kernel.why_not(30, (128,), 301, "relu", bf16)


def test_cpu_keeps_xla_layers():
    """Without a CUDA GPU the model is XLA's layers (nothing lowers to Triton)."""
    if mlp_kernel.on_cuda():
        pytest.skip("a CUDA GPU is present")
    net = MLPActorCritic((4,), (256, 256), dtype=jnp.bfloat16)
    obs = jnp.zeros((8, 10))
    assert mlp_kernel.layout_for(10, (256, 256), 5, 2, "tanh", jnp.bfloat16) is None
    assert not _uses_kernel(net, net.init(jax.random.PRNGKey(0), obs), obs)


def test_on_cuda_follows_the_default_device(monkeypatch):
    """A CUDA GPU first among the devices, but jax.default_device(cpu) (a
    device or the platform's name): the kernels would not lower there."""
    class Gpu:
        platform = "gpu"
        client = type("Client", (), {"platform_version": "PJRT C API\ncuda 13000"})()

    real = jax.devices
    monkeypatch.setattr(jax, "devices", lambda backend=None: real(backend) if backend else [Gpu()])
    assert mlp_kernel.on_cuda()
    for cpu in (real("cpu")[0], "cpu"):
        with jax.default_device(cpu):
            assert not mlp_kernel.on_cuda()
            assert mlp_kernel.why_not_here(10, (256,), 5, "tanh", jnp.bfloat16) == "no CUDA GPU"
    assert mlp_kernel.on_cuda()


def test_a_jax_without_the_triton_backend_keeps_xla_layers():
    """jax 0.11 deprecates Pallas's Triton backend: in a process whose jax has
    none (its module made unimportable), jaxwarp imports, and on a CUDA GPU
    (faked) a model the kernels cover keeps XLA's layers and says why."""
    code = textwrap.dedent("""
        import sys
        sys.modules["jax.experimental.pallas.triton"] = None  # no Triton backend
        import jax.numpy as jnp
        from jaxwarp.info import model_kernels
        from jaxwarp.models import MLPActorCritic, mlp_kernel
        mlp_kernel.on_cuda = lambda: True  # as on a CUDA GPU
        print(mlp_kernel.layout_for(71, (256, 256), 43, 1, "relu", jnp.bfloat16, (21, 21)))
        print(MLPActorCritic((21, 21), (256, 256), "relu", True, jnp.bfloat16).layers(71))
        print(model_kernels()[0])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=300).stdout.splitlines()
    assert out[0] == "None"
    assert out[1].startswith("XLA's layers: this jax has no Pallas Triton backend (")
    assert out[2].startswith("fused layers (Pallas, Triton): not here (this jax has no Pallas "
                             "Triton backend (")


def test_weight_grad_row_blocks_equal_one_matmul():
    x = jax.random.normal(jax.random.PRNGKey(0), (16, 1024, 12))
    dy = jax.random.normal(jax.random.PRNGKey(1), (16, 1024, 7))
    assert mlp_kernel.row_blocks(16 * 1024) == 16  # blocks of 1024 rows
    xs, ds = np.asarray(x, np.float64).reshape(-1, 12), np.asarray(dy, np.float64).reshape(-1, 7)
    exact = xs.T @ ds
    scale = np.abs(xs).T @ np.abs(ds)  # the sum of the products' magnitudes
    got = {b: mlp_kernel.weight_grad(x, dy, b) for b in (True, False)}
    for g in got.values():
        assert g.dtype == jnp.float32 and g.shape == (12, 7)
    # The same float32 products summed in another order (the blocks, or
    # XLA:GPU's own split of the rows): within a millionth of the scale.
    diff = np.abs(np.asarray(got[True], np.float64) - np.asarray(got[False], np.float64))
    assert np.all(diff <= 1e-6 * scale)
    # Against float64: float32 on a CPU; on a GPU XLA's float32 dots round
    # their inputs to TF32 (10-bit mantissa).
    tol = 1e-6 if jax.default_backend() == "cpu" else 2.0 ** -10
    assert np.all(np.abs(np.asarray(got[True], np.float64) - exact) <= tol * scale)


def test_training_on_the_kernels_follows_xla_layers(kernels):
    """Three PPO updates of two bf16 Tag groups (2 minibatches x 2 epochs) on
    the kernels end where XLA's layers end, to bf16 rounding."""
    from jaxwarp.train import load_config, make_train

    c = load_config("tag_duel_cpu", [
        "backend=jax", "sampler=jax", "num_envs=8", "num_steps=10", "total_env_steps=240",
        "num_minibatches=2", "update_epochs=2", "minibatch_layout=envs",
        *(f"policies.{g}.{k}" for g in ("tagger", "runner")
          for k in ("hidden_sizes=[128]", "dtype=bfloat16"))])

    def run():
        rs, m = jax.jit(make_train(c))(jax.random.PRNGKey(7))
        return rs.learner.params, np.asarray(m["tagger/loss"])

    params, loss = run()
    ref_params, ref_loss = _xla(run)
    assert loss.shape == (3,) and len(set(loss.tolist())) == 3  # it trained
    np.testing.assert_allclose(loss, ref_loss, rtol=2e-2)
    for g in params:
        total = [float(sum(jnp.abs(x).sum() for x in jax.tree.leaves(p[g])))
                 for p in (params, ref_params)]
        np.testing.assert_allclose(total[0], total[1], rtol=2e-3, err_msg=g)
    # leaf by leaf within 10%: the zero-initialised biases and the 0.01-gain
    # policy head are mostly their 12 Adam steps, where bf16 rounding differs most
    for x, y in zip(jax.tree.leaves(params), jax.tree.leaves(ref_params)):
        assert float(jnp.linalg.norm(x - y) / jnp.linalg.norm(y)) < 0.1
    moved = jax.tree.map(lambda a, b: float(jnp.linalg.norm(a - b)), params, ref_params)
    assert max(jax.tree.leaves(moved)) > 0  # the two paths really differ (rounding)
