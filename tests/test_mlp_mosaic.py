"""The rollout's forward on Mosaic GPU (jaxwarp.models.mlp_mosaic).

On the CPU: which models the kernel takes and how it fits them in shared
memory, that `fused_mlp` keeps the Triton kernels there, and (where a
jax-cuda plugin is installed) that the kernel lowers for CUDA. On a Hopper
GPU: its output against the Triton forward and plain layers, with rows that
do not fill a block, vmap over parameters against a loop, the same bits twice.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwarp.models import mlp_kernel, mlp_mosaic

# (obs features, hidden, logits, activation, rows): shared-torso bf16 models.
CASES = [
    (71, (256, 256), 42, "relu", 200_003),  # Tag's runners at one rollout step, uneven rows
    (64, (256, 256), 5, "tanh", 130),
    (13, (128,), 5, "tanh", 64),
    (30, (128, 256, 128), 7, "relu", 1000),
    (71, (256, 256), 14, "relu", 1000),  # the heads in 16 columns, out_pad 32: a zero store
]
ON_HOPPER = mlp_mosaic.why_not_here() is None


def hopper(test):
    """A GPU test (`-m gpu`, experiments/tools/gpu_tests.sh) that needs a Hopper GPU."""
    return pytest.mark.gpu(pytest.mark.skipif(
        not ON_HOPPER, reason="needs a Hopper GPU with Mosaic GPU")(test))


def _layout(d, hidden, a, act, towers=1, dtype="bfloat16"):
    return mlp_kernel.Layout(d, tuple(hidden), a + 1, towers, act, dtype, (a,))


def test_tags_model_fits_one_warpgroup_two_blocks_in_flight():
    lay = _layout(71, (256, 256), 42, "relu")
    plan = mlp_mosaic.fit(lay.in_dim, lay.widths, lay.out_cols, lay.out_pad)
    # W1 80 x 256, W2 256 x 256, heads 256 x 48 in bf16: 192 KB of the 227.
    assert plan == mlp_mosaic.Plan(in_pad=80, nh=48, wgs=1, stages=2, out_cols=16)
    dims = (80, 256, 256)
    assert mlp_mosaic.smem_bytes(dims, 48, 1, 2, 16) == 1024 * (40 + 128 + 24 + 3 + 20 + 4)
    # the plans before it in PLANS pass the limit: (2, 3), (2, 2), (1, 3)
    for wgs, stages in mlp_mosaic.PLANS[:3]:
        assert mlp_mosaic.smem_bytes(dims, 48, wgs, stages, 16) + mlp_mosaic.SMEM_SLACK > (
            mlp_mosaic.SMEM_LIMIT)


@pytest.mark.parametrize("d,hidden,a,act,rows", CASES)
def test_every_plan_fits_and_stores_whole_rows(d, hidden, a, act, rows):
    lay = _layout(d, hidden, a, act)
    plan = mlp_mosaic.fit(lay.in_dim, lay.widths, lay.out_cols, lay.out_pad)
    assert plan is not None and plan.in_pad % 16 == 0 and plan.in_pad - d < 16
    assert plan.nh >= lay.out_cols and plan.nh % 16 == 0 and plan.nh <= lay.out_pad
    assert lay.out_pad % plan.out_cols == 0 and (plan.out_cols == 16 or plan.nh == lay.out_pad)
    need = mlp_mosaic.smem_bytes((plan.in_pad,) + tuple(hidden), plan.nh, plan.wgs,
                                 plan.stages, plan.out_cols)
    assert need + mlp_mosaic.SMEM_SLACK <= mlp_mosaic.SMEM_LIMIT


def test_models_the_kernel_does_not_take(monkeypatch):
    monkeypatch.setattr(mlp_mosaic, "bindings", lambda: True)
    monkeypatch.setattr(mlp_mosaic, "_hopper", lambda: True)
    assert mlp_mosaic.plan_for(_layout(71, (256, 256), 42, "relu")) is not None
    assert mlp_mosaic.plan_for(_layout(71, (256, 256), 42, "relu", towers=2)) is None
    assert mlp_mosaic.plan_for(_layout(71, (256, 256), 42, "relu", dtype="float32")) is None
    assert mlp_mosaic.plan_for(_layout(71, (512,), 42, "relu")) is None  # accumulator too wide
    # weights past shared memory: 256 features and three 256-wide layers are 408 KB
    assert mlp_mosaic.plan_for(_layout(256, (256, 256, 256), 42, "relu")) is None
    monkeypatch.setattr(mlp_mosaic, "_hopper", lambda: False)
    assert mlp_mosaic.plan_for(_layout(71, (256, 256), 42, "relu")) is None


def test_store_plan_covers_out_pad_with_zeros_past_the_heads():
    assert mlp_mosaic.store_plan(48, 16, 64) == [(0, "slice"), (16, "slice"), (32, "slice"),
                                                 (48, "zeros")]
    assert mlp_mosaic.store_plan(16, 16, 32) == [(0, "all"), (16, "zeros")]
    assert mlp_mosaic.store_plan(64, 64, 64) == [(0, "all")]
    assert mlp_mosaic.store_plan(16, 16, 16) == [(0, "all")]


def _tiny():
    lay = _layout(13, (128,), 5, "tanh")
    ks = jax.random.split(jax.random.PRNGKey(0), 4)
    torso = [[(jax.random.normal(ks[0], (13, 128)) / 4, jnp.zeros(128))]]
    ws = mlp_kernel.pack(lay, torso, (jax.random.normal(ks[1], (128, 5)) / 12, jnp.zeros(5)),
                         (jax.random.normal(ks[2], (128, 1)) / 12, jnp.zeros(1)))
    return lay, ws, jax.random.normal(ks[3], (2, 35, 13))


def test_fused_mlp_runs_the_mosaic_forward_where_there_is_a_plan(monkeypatch):
    """fused_mlp outside differentiation: the Mosaic forward on the rows
    flattened where plan_for gives a plan, the Triton forward where it gives
    none; the interpreter (interpret=True) never asks."""
    lay, ws, x = _tiny()
    plan = mlp_mosaic.fit(lay.in_dim, lay.widths, lay.out_cols, lay.out_pad)
    calls, asked = [], []
    monkeypatch.setattr(mlp_mosaic, "plan_for", lambda la: asked.append(la) or plan)
    monkeypatch.setattr(mlp_mosaic, "forward", lambda *a: calls.append(a) or jnp.full(
        (a[2].shape[0], lay.out_pad), 7.0))
    out = mlp_kernel.fused_mlp(lay, x, ws)
    assert out.shape == (2, 35, lay.out_pad) and bool(jnp.all(out == 7.0))
    (got_lay, got_plan, x2, got_ws), = calls
    assert got_lay == lay and got_plan == plan and x2.shape == (70, 13) and got_ws == ws
    asked.clear()
    triton = mlp_kernel.fused_mlp(lay, x, ws, True, True)  # the interpreter
    assert not asked and len(calls) == 1
    np.testing.assert_array_equal(
        triton, mlp_kernel.forward(lay, x.reshape(70, 13), ws, False, True)[0].reshape(
            2, 35, lay.out_pad))


def _operands(lay, plan, rows, seed=0):
    ks = iter(jax.random.split(jax.random.PRNGKey(seed), 16))
    dims = (lay.in_dim,) + lay.widths
    torso = [[(jax.random.normal(next(ks), (k, n)) / np.sqrt(k),
               0.1 * jax.random.normal(next(ks), (n,))) for k, n in itertools.pairwise(dims)]]
    a = lay.out_cols - 1
    w = lay.widths[-1]
    ws = mlp_kernel.pack(lay, torso, (jax.random.normal(next(ks), (w, a)) / np.sqrt(w),
                                      0.1 * jax.random.normal(next(ks), (a,))),
                         (jax.random.normal(next(ks), (w, 1)) / np.sqrt(w), jnp.ones(1)))
    return jax.random.normal(next(ks), (rows, lay.in_dim)), ws


@pytest.mark.parametrize("d,hidden,a,act,rows", CASES)
def test_the_kernel_lowers_for_cuda(d, hidden, a, act, rows):
    """Mosaic GPU's lowering (layout inference, the shared-memory check) of
    each case's kernel, without a GPU where a jax-cuda plugin is installed."""
    if not mlp_mosaic.bindings():
        pytest.skip("Mosaic GPU's bindings (a jax-cuda plugin) are not installed")
    lay = _layout(d, hidden, a, act)
    plan = mlp_mosaic.fit(lay.in_dim, lay.widths, lay.out_cols, lay.out_pad)
    m = 3 * plan.block_rows
    dims = (plan.in_pad,) + tuple(hidden)
    shapes = [jax.ShapeDtypeStruct((m, plan.in_pad), jnp.bfloat16)]
    for k, n in itertools.pairwise(dims):
        shapes += [jax.ShapeDtypeStruct((k, n), jnp.bfloat16),
                   jax.ShapeDtypeStruct((n,), jnp.float32)]
    shapes += [jax.ShapeDtypeStruct((hidden[-1], plan.nh), jnp.bfloat16),
               jax.ShapeDtypeStruct((plan.nh,), jnp.float32)]
    exp = jax.export.export(jax.jit(mlp_mosaic._call(lay, plan, m, 132)),
                            platforms=["cuda"])(*shapes)
    assert exp.out_avals[0].shape == (m, lay.out_pad)


@hopper
@pytest.mark.parametrize("d,hidden,a,act,rows", CASES)
def test_mosaic_forward_matches_triton_and_the_layers(d, hidden, a, act, rows):
    lay = _layout(d, hidden, a, act)
    plan = mlp_mosaic.plan_for(lay)
    assert plan is not None
    x, ws = _operands(lay, plan, rows)
    got = jax.jit(lambda x, ws: mlp_mosaic.forward(lay, plan, x, ws))(x, ws)
    triton = jax.jit(lambda x, ws: mlp_kernel.forward(lay, x, ws)[0])(x, ws)
    assert got.shape == (rows, lay.out_pad) and got.dtype == jnp.float32
    got, triton = np.asarray(got), np.asarray(triton)
    assert np.all(got[:, lay.out_cols:] == 0)  # the padding columns are zeros
    scale = np.abs(triton[:, :lay.out_cols]).max()
    # the same bf16 roundings in another order: within a few bf16 ulps of the largest
    assert np.abs(got - triton).max() <= 1.6e-2 * scale
    # the plain layers in float32 on the host, rounding to bf16 where the model does
    assert np.abs(got[:, :lay.out_cols] - _layers(lay, x, ws)).max() <= 1.6e-2 * scale
    # the model's path: fused_mlp outside differentiation is this kernel
    np.testing.assert_array_equal(
        np.asarray(jax.jit(lambda x, ws: mlp_kernel.fused_mlp(lay, x, ws))(x, ws)), got)


def _layers(lay, x, ws):
    """The packed shared-torso MLP's out_cols columns, f32[N, out_cols], by
    NumPy: operands rounded to bf16, products and sums in float32."""
    def bf16(a):
        return np.asarray(jnp.asarray(a).astype(jnp.bfloat16).astype(jnp.float32))
    act = {"relu": lambda z: np.maximum(z, 0.0), "tanh": np.tanh}[lay.activation]
    h = bf16(x)
    for i in range(len(lay.widths)):
        h = bf16(act(h @ bf16(ws[2 * i]) + np.asarray(ws[2 * i + 1])))
    k = 2 * len(lay.widths)
    return (h @ bf16(ws[k]) + np.asarray(ws[k + 1]))[:, :lay.out_cols]


@hopper
def test_mosaic_forward_vmap_equals_loop_and_same_bits():
    lay = _layout(71, (256, 256), 42, "relu")
    plan = mlp_mosaic.plan_for(lay)
    pairs = [_operands(lay, plan, 5_000, seed) for seed in range(3)]
    xs = jnp.stack([p[0] for p in pairs])
    ws = jax.tree.map(lambda *a: jnp.stack(a), *[p[1] for p in pairs])
    fn = jax.jit(lambda x, w: mlp_mosaic.forward(lay, plan, x, w))
    batched = np.asarray(jax.jit(jax.vmap(fn))(xs, ws))
    for i, (x, w) in enumerate(pairs):
        np.testing.assert_array_equal(batched[i], np.asarray(fn(x, w)))
    np.testing.assert_array_equal(np.asarray(jax.jit(jax.vmap(fn))(xs, ws)), batched)


@pytest.mark.parametrize("batch", [(), (3,)])
def test_the_kernels_matmul_flops_are_counted(monkeypatch, batch):
    """jaxwarp.benchmark.matmul_flops (bench_train's MFU) counts the kernel:
    every row (padded to whole blocks) through every weight (the features
    padded to in_pad, the heads to nh), vmapped members each."""
    from jaxwarp.benchmark import matmul_flops

    if mlp_mosaic._plgpu() is None:
        pytest.skip("this jax has no Pallas Mosaic GPU")
    monkeypatch.setattr(mlp_mosaic, "_num_sms", lambda: 132)
    lay = _layout(71, (256, 256), 42, "relu")
    plan = mlp_mosaic.fit(lay.in_dim, lay.widths, lay.out_cols, lay.out_pad)
    x = jax.ShapeDtypeStruct(batch + (1000, 71), jnp.float32)
    shapes = [(71, 256), (256,), (256, 256), (256,), (256, lay.out_pad), (lay.out_pad,)]
    ws = [jax.ShapeDtypeStruct(batch + s, jnp.float32) for s in shapes]
    fn = lambda x, *w: mlp_mosaic.forward(lay, plan, x, w)
    for _ in batch:
        fn = jax.vmap(fn)
    flops = matmul_flops(fn, x, *ws)
    rows = int(np.prod(batch, dtype=int)) * 1024  # 1000 rows in blocks of 64
    assert flops == {"bfloat16": 2.0 * rows * (80 * 256 + 256 * 256 + 256 * 48)}
