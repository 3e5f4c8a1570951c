"""The PPO minibatch's loss and gradient on Mosaic GPU (`jaxwarp.train.ppo_mosaic`).

On the CPU every part but the kernel call runs: the row-wise loss gradient,
the packing, the sums and the vmap folding, with a plain-jax stand-in for
the kernel (`tower_jnp`: the kernel's arithmetic, each wgmma an einsum) in
float32, where it must equal jax's autodiff of `losses.policy_loss` to float
rounding. Where a jax-cuda plugin is installed the kernel is lowered for
CUDA; on a Hopper GPU (`-m gpu`) its values are checked against XLA's
bfloat16 layers.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxwarp.models import mlp_mosaic
from jaxwarp.models.mlp import MLPActorCritic
from jaxwarp.train import losses
from jaxwarp.train import ppo_mosaic as pm
from jaxwarp.train.seeds import folded_vmap

HYPER = {"clip_eps": 0.2, "vf_coef": 0.5, "ent_coef": 0.01}


@pytest.fixture(autouse=True)
def _float32_dots():
    """Float32 dots, not a GPU's default TF32: the references are float32."""
    with jax.default_matmul_precision("highest"):
        yield


def tower_jnp(x, aux, weights, *, kind, actions, act, grid, dtype=jnp.float32):
    """`ppo_mosaic.tower_grad`'s arithmetic in plain jax, one partial a member
    (matmul operands in `dtype`, float32 accumulation)."""
    s = grid.members
    w1, b1, w2, b2, wh, bh = weights
    x, aux = x.reshape(s, -1, pm.W), aux.reshape(s, -1, pm.AUX)

    def mm(a, b, spec="srk,skn->srn"):
        return jnp.einsum(spec, a.astype(dtype), b.astype(dtype),
                          preferred_element_type=jnp.float32)
    h1 = pm.activation(mm(x, w1) + b1[:, None], act)
    h2 = pm.activation(mm(h1, w2) + b2[:, None], act)
    y = mm(h2, wh) + bh[:, None]
    col = lax.broadcasted_iota(jnp.int32, y.shape[1:], 1)
    acol = lax.broadcasted_iota(jnp.int32, aux.shape[1:], 1)
    if kind == "actor":
        dy = jax.vmap(lambda y, a: pm.actor_dy(y, a, col, acol, actions))(y, aux)
    else:
        dy = jax.vmap(lambda y, a: pm.critic_dy(y, a, col, acol))(y, aux)
    dy = dy.astype(dtype)
    h1, h2 = (h.astype(dtype).astype(jnp.float32) for h in (h1, h2))  # the kernel's copies
    dz2 = pm.derivative(h2, mm(dy, jnp.swapaxes(wh, 1, 2)), act).astype(dtype)
    dz1 = pm.derivative(h1, mm(dz2, jnp.swapaxes(w2, 1, 2)), act).astype(dtype)
    db = jnp.zeros((s, 64, pm.W))
    for k, g in enumerate((dz1, dz2, dy)):
        db = db.at[:, k].set(jnp.sum(g.astype(jnp.float32), axis=1))
    wg = [mm(a, b, "srk,srn->skn") for a, b in ((x, dz1), (h1, dz2), (h2, dy))]
    return tuple(q[:, None] for q in (*wg, db))


def make_case(obs_dim=4, actions=2, rows=300, members=3, act="tanh", widths=(64, 48), seed=0):
    """A model, params [members, ...] (perturbed so the heads are not uniform)
    and a minibatch [members, rows, ...] whose ratios and values fall on both
    sides of the clip range."""
    model = MLPActorCritic(action_dims=(actions,), hidden_sizes=widths, activation=act,
                           dtype=jnp.bfloat16)
    keys = jax.random.split(jax.random.PRNGKey(seed), members + 7)
    params = jax.vmap(lambda k: model.init(k, jnp.zeros((1, obs_dim))))(keys[:members])
    leaves, tree = jax.tree.flatten(params)
    noise = jax.random.split(keys[members], len(leaves))
    params = jax.tree.unflatten(
        tree, [a + 0.1 * jax.random.normal(k, a.shape) for a, k in zip(leaves, noise)])
    k = keys[members + 1:]
    obs = jax.random.normal(k[0], (members, rows, obs_dim))
    acts = jax.random.randint(k[1], (members, rows, 1), 0, actions)
    logits, value = jax.vmap(model.clone(dtype=jnp.float32).apply)(params, obs)
    lp, _ = losses.head_stats(logits, acts, (actions,))
    mb = losses.Batch(obs=obs, actions=acts,
                      log_prob=lp + 0.15 * jax.random.normal(k[2], lp.shape),
                      value=value + 0.3 * jax.random.normal(k[3], value.shape),
                      advantage=jax.random.normal(k[4], value.shape) + 0.3,
                      target=value + jax.random.normal(k[5], value.shape))
    return model, params, mb


def autodiff(model, params, mb, normalize=True, dtype=jnp.float32):
    """What the learner computes without the kernels, for every member."""
    net = model.clone(dtype=dtype)

    def loss(p, b):
        logits, value = net.apply(p, b.obs)
        lp, ent = losses.head_stats(logits, b.actions, net.action_dims)
        return losses.policy_loss(lp, ent, value, b, algorithm="ppo",
                                  normalize_advantages=normalize, **HYPER)
    return jax.vmap(jax.value_and_grad(loss, has_aux=True))(params, mb)


def hyper_of(members):
    return tuple(jnp.full((members,), HYPER[k], jnp.float32)
                 for k in ("clip_eps", "vf_coef", "ent_coef"))


def rel_errors(got, want):
    return jax.tree.map(lambda g, w: float(jnp.max(jnp.abs(g - w)) / jnp.max(jnp.abs(w))),
                        got, want)


@pytest.mark.parametrize("act", ["tanh", "relu"])
@pytest.mark.parametrize("normalize", [True, False])
def test_the_kernels_maths_equal_autodiff_of_the_loss_in_float32(act, normalize):
    # 300 rows: padded to 384, the padding's weight 0; widths 64 and 48 (48 padded to 64).
    model, params, mb = make_case(act=act)
    got = pm.grads(params, mb, hyper_of(3), normalize=normalize, actions=2, act=act,
                   tower=tower_jnp, sms=132, dtype=jnp.float32)
    want = autodiff(model, params, mb, normalize)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for leaf_g, leaf_w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert leaf_g.shape == leaf_w.shape and leaf_g.dtype == leaf_w.dtype
    errors = rel_errors(got, want)
    assert max(jax.tree.leaves(errors)) < 2e-5, errors


def test_every_clip_branch_is_exercised_by_the_case():
    # The test above covers the clipped surrogate's and value loss's branches.
    model, params, mb = make_case()
    logits, value = jax.vmap(model.clone(dtype=jnp.float32).apply)(params, mb.obs)
    lp, _ = losses.head_stats(logits, mb.actions, (2,))
    ratio = np.asarray(jnp.exp(lp - mb.log_prob))
    assert (ratio < 0.8).any() and (ratio > 1.2).any() and (abs(ratio - 1) < 0.2).any()
    moved = np.abs(np.asarray(value - mb.value))
    assert (moved > 0.2).any() and (moved < 0.2).any()


def counted_grad_fn(model, calls: list):
    """`ppo_mosaic.grad_fn` of the model on the stand-in kernel, each call's
    members appended to calls (no group cut, no observation statistics)."""
    def counting(*args, **kw):
        calls.append(kw["grid"].members)
        return tower_jnp(*args, **kw)
    h = dataclasses.make_dataclass("H", list(HYPER))(*(jnp.float32(v) for v in HYPER.values()))
    return pm.grad_fn(model, lambda obs: obs, lambda obs: obs, h, tower=counting)


def test_vmap_folds_members_into_one_call_and_equals_each_alone():
    model, params, mb = make_case(members=3, rows=256)
    calls = []
    fn = counted_grad_fn(model, calls)
    # obs [rows, agents=1, D] as the learner's minibatches hold them
    batch = jax.tree.map(lambda a: a[:, :, None], mb)
    batch = batch.replace(obs=mb.obs[:, :, None, :], actions=mb.actions[:, :, None, :])
    every = jax.vmap(functools.partial(fn, normalize=True))(params, batch)
    # (custom_vmap traces the function unbatched first: one member each, not run)
    assert calls[-2:] == [3, 3]  # the actor's and the critic's kernel, each for all three
    for i in range(3):
        member = functools.partial(lambda k, a: a[k], i)
        alone = fn(jax.tree.map(member, params), jax.tree.map(member, batch), True)
        for a, b in zip(jax.tree.leaves(alone), jax.tree.leaves(every)):
            np.testing.assert_allclose(a, b[i], rtol=1e-5, atol=1e-8)


def test_nested_vmaps_fold_into_one_call():
    model, params, mb = make_case(members=4, rows=128)
    calls = []
    fn = counted_grad_fn(model, calls)
    nest = jax.tree.map(lambda a: a.reshape(2, 2, *a.shape[1:]), (params, mb))
    out = jax.vmap(jax.vmap(functools.partial(fn, normalize=True)))(*nest)
    assert calls[-2:] == [4, 4]
    flat = jax.vmap(functools.partial(fn, normalize=True))(params, mb)
    for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(flat)):
        np.testing.assert_allclose(a.reshape(b.shape), b, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("change, reason", [
    ({"algorithm": "a2c"}, "not ppo"),
    ({"net": {"shared_torso": True}}, "two towers"),
    ({"net": {"hidden_sizes": (128, 64)}}, "at most 64"),
    ({"net": {"hidden_sizes": (64,)}}, "two hidden layers"),
    ({"net": {"dtype": jnp.float32}}, "bfloat16"),
    ({"net": {"action_dims": (3, 3)}}, "one action head"),
    ({"obs_dim": 65}, "64 features"),
    ({"recurrent": True}, "feed-forward"),
    ({"centralised": True}, "feed-forward"),
    ({"net": {"row_blocks": False}}, "split over devices"),
])
def test_why_not_names_what_keeps_a_group_on_autodiff(change, reason):
    net = MLPActorCritic(action_dims=(5,), hidden_sizes=(64, 64), dtype=jnp.bfloat16)
    net = net.clone(**change.get("net", {}))
    args = {"algorithm": "ppo", "obs_dim": 18, "recurrent": False, "centralised": False}
    args.update({k: v for k, v in change.items() if k != "net"})
    why = pm.why_not(args["algorithm"], net, args["obs_dim"], args["recurrent"],
                     args["centralised"])
    assert why is not None and reason in why, why


def test_why_not_on_this_machine_is_mosaic_gpus_reason():
    net = MLPActorCritic(action_dims=(5,), hidden_sizes=(64, 64), dtype=jnp.bfloat16)
    assert pm.why_not("ppo", net, 18, False, False) == mlp_mosaic.why_not_here()


def _lowers() -> bool:
    try:
        importlib.import_module("jax._src.lib.mosaic_gpu")
    except Exception:  # noqa: BLE001
        return False
    return mlp_mosaic._plgpu() is not None


@pytest.mark.skipif(not _lowers(), reason="needs Mosaic GPU's bindings (a jax-cuda plugin)")
@pytest.mark.parametrize("act", ["tanh", "relu"])
def test_the_kernels_lower_for_cuda(act):
    _, params, mb = make_case(act=act, members=2, rows=256)
    fn = functools.partial(pm.grads, normalize=True, actions=2, act=act, sms=132)
    shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                          (params, mb, hyper_of(2)))
    jax.export.export(jax.jit(fn), platforms=["cuda"])(*shapes)


@pytest.mark.gpu
@pytest.mark.skipif(mlp_mosaic.why_not_here() is not None, reason="needs a Hopper GPU")
@pytest.mark.parametrize("obs_dim, actions, rows, act", [
    (4, 2, 16_384, "tanh"), (18, 5, 1_000, "relu"), (64, 32, 2_000, "tanh")])
def test_the_kernels_equal_xlas_bf16_layers_on_the_gpu(obs_dim, actions, rows, act):
    model, params, mb = make_case(obs_dim, actions, rows, 4, act)
    run = jax.jit(functools.partial(pm.grads, normalize=True, actions=actions, act=act))
    got = run(params, mb, hyper_of(4))
    exact = autodiff(model, params, mb)
    ref_bf16 = rel_errors(jax.jit(functools.partial(autodiff, model, dtype=jnp.bfloat16))(
        params, mb), exact)
    emulated = rel_errors(pm.grads(params, mb, hyper_of(4), normalize=True, actions=actions,
                                   act=act, tower=functools.partial(tower_jnp,
                                                                    dtype=jnp.bfloat16)), exact)
    ours = rel_errors(got, exact)
    # Within bf16's error: no leaf further from float32 than 2x the worse of XLA's bf16
    # layers and the kernel's arithmetic emulated in bf16 (plus 1e-3 for leaves near 0).
    for path, e in jax.tree_util.tree_flatten_with_path(ours)[0]:
        bound = 2 * max(_at(ref_bf16, path), _at(emulated, path)) + 1e-3
        assert e <= bound, (jax.tree_util.keystr(path), e, bound)
    again = run(params, mb, hyper_of(4))
    assert all(bool(jnp.array_equal(a, b)) for a, b in zip(jax.tree.leaves(got),
                                                          jax.tree.leaves(again)))


def _at(tree, path):
    for p in path:
        tree = tree[getattr(p, "key", getattr(p, "idx", None))]
    return tree


def _train(monkeypatch, kernels: bool, seeds: int = 1, calls: list | None = None):
    """MPE in bf16 through `make_train` (two updates), the learner's step on the
    kernels' path (their stand-in, `tower_jnp`; calls gets each call's members)
    or on autodiff."""
    from jaxwarp.train import build_trainer, load_config
    if kernels:
        def counting(*args, **kw):
            calls.append(kw["grid"].members)
            return tower_jnp(*args, **kw)
        monkeypatch.setattr(mlp_mosaic, "why_not_here", lambda: None)
        monkeypatch.setattr(pm, "tower_grad", counting)
    c = load_config("mpe_simple_spread_ppo", [
        "backend=cpu", "num_envs=16", "num_steps=8", "total_env_steps=256", "devices=1",
        "policies.agent.dtype=bfloat16"])
    trainer = build_trainer(c)

    def train(key):
        return trainer.run(trainer.init(key), trainer.derived.num_updates)
    keys = jnp.stack([jax.random.PRNGKey(i) for i in range(seeds)])
    with jax.default_device(jax.devices("cpu")[0]):  # the cpu backend's env, on a GPU machine too
        state, metrics = jax.jit(jax.vmap(train))(keys)
    return trainer, state, metrics


def test_the_learner_takes_the_kernels_path_and_learns_as_autodiff(monkeypatch):
    # Two seeds vmapped: the step folds them into one (stand-in) kernel call.
    calls = []
    trainer, state, metrics = _train(monkeypatch, True, seeds=2, calls=calls)
    assert calls[-2:] == [2, 2]
    assert trainer.model_layers["agent"].endswith(
        "; the PPO minibatch's loss and gradient on Mosaic GPU")
    monkeypatch.undo()
    plain, state0, metrics0 = _train(monkeypatch, False, seeds=2)
    assert "Mosaic GPU" not in plain.model_layers["agent"].split(";")[-1]
    for k in ("agent/loss", "agent/value_loss", "agent/entropy", "agent/approx_kl"):
        np.testing.assert_allclose(metrics[k], metrics0[k], rtol=2e-2, atol=1e-4, err_msg=k)
    for a, b in zip(jax.tree.leaves(state.learner.params), jax.tree.leaves(state0.learner.params)):
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-2)


@pytest.mark.parametrize("vmapped", [False, True])
def test_the_kernels_matmul_flops_are_counted(vmapped):
    """jaxwarp.benchmark.matmul_flops (bench_train's MFU) counts both towers'
    kernels: every row (padded to whole blocks) of every member through eight
    [64, 64] products (three forward, two back, three weight gradients)."""
    from jaxwarp.benchmark import matmul_flops

    if mlp_mosaic._plgpu() is None:
        pytest.skip("this jax has no Pallas Mosaic GPU")
    _, params, mb = make_case(members=3, rows=300)
    fn = folded_vmap(functools.partial(pm.grads, normalize=True, actions=2, act="tanh",
                                       sms=132))
    args = (params, mb, hyper_of(3))
    if vmapped:  # a vmap (seeds) folded into the call: 2 x 3 members
        fn, args = jax.vmap(fn), jax.tree.map(lambda a: jnp.stack([a, a]), args)
    flops = matmul_flops(fn, *args)
    members, rows = (6 if vmapped else 3), 384  # 300 rows in blocks of 128
    assert flops == {"bfloat16": 2 * members * rows * 8 * 2.0 * pm.W * pm.W}
