"""Trainer tests (CPU): GAE, losses, PPO update, seeds under vmap, configs,
checkpoint/resume, CLI, and a short run that must learn."""

from __future__ import annotations

import json
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxwarp
from jaxwarp.cli import main as cli_main
from jaxwarp.models import MLPActorCritic
from jaxwarp.run.loop import read_metrics, train_run
from jaxwarp.train import (
    ConfigError,
    TrainConfig,
    build_trainer,
    config_from_dict,
    derived,
    load_config,
    losses,
    make_train,
    shipped_configs,
)
from jaxwarp.train.policy import RunningStats

from _checks import assert_seeds_vmap_as_separate_runs, trained_and_random
from _tiny_run import metric_table

TINY_ENV = {"num_taggers": 2, "num_runners": 3, "grid_length": 5.0, "episode_length": 12,
            "num_acceleration_levels": 3, "num_turn_levels": 3,
            "num_other_agents_observed": 2}


def tiny_config(**changes) -> TrainConfig:
    d = {"env_params": TINY_ENV, "backend": "cpu", "num_envs": 8, "num_steps": 8,
         "total_env_steps": 8 * 8 * 4, "num_minibatches": 2, "update_epochs": 2,
         "policies": {"tagger": {"hidden_sizes": [16]}, "runner": {"hidden_sizes": [16]}},
         "chunk_updates": 2, "checkpoint_every": 2}
    d.update(changes)
    return config_from_dict(d)


# ---------------------------------------------------------------------------
# GAE and losses
# ---------------------------------------------------------------------------
def test_gae_hand_computed():
    # T=3, gamma=0.5, lambda=0.5, episode ends after t=1 (done[1]=1).
    r = jnp.array([1.0, 2.0, 3.0])
    v = jnp.array([0.5, 1.0, 1.5])
    done = jnp.array([0.0, 1.0, 0.0])
    last_v = jnp.array(2.0)
    adv, ret = losses.gae(r, v, done, last_v, gamma=0.5, lam=0.5)
    # delta2 = 3 + 0.5*2 - 1.5 = 2.5;                 A2 = 2.5
    # delta1 = 2 + 0 - 1 = 1 (done: no bootstrap);    A1 = 1 (no carry across done)
    # delta0 = 1 + 0.5*1.0 - 0.5 = 1.0;               A0 = 1 + 0.25*1 = 1.25
    np.testing.assert_allclose(adv, [1.25, 1.0, 2.5], rtol=1e-6)
    np.testing.assert_allclose(ret, [1.75, 2.0, 4.0], rtol=1e-6)


def test_gae_matches_python_loop():
    rng = np.random.default_rng(0)
    T, B = 17, 5
    r = rng.normal(size=(T, B)).astype(np.float32)
    v = rng.normal(size=(T, B)).astype(np.float32)
    done = (rng.random((T, B)) < 0.2).astype(np.float32)
    last = rng.normal(size=B).astype(np.float32)
    gamma, lam = 0.97, 0.9
    adv, _ = losses.gae(jnp.asarray(r), jnp.asarray(v), jnp.asarray(done), jnp.asarray(last),
                      gamma, lam)
    expected = np.zeros((T, B), np.float32)
    a, v_next = np.zeros(B), last
    for t in reversed(range(T)):
        nd = 1 - done[t]
        delta = r[t] + gamma * v_next * nd - v[t]
        a = delta + gamma * lam * nd * a
        expected[t], v_next = a, v[t]
    np.testing.assert_allclose(adv, expected, rtol=1e-5, atol=1e-5)


def test_multi_head_log_prob_and_entropy():
    logits = jnp.array([[0.0, 1.0, 2.0, 5.0, -1.0]])  # heads of 3 and 2
    actions = jnp.array([[2, 1]])
    lp = losses.log_prob(logits, actions, (3, 2))
    expected = (2.0 - np.log(np.exp([0, 1, 2]).sum())) + (-1.0 - np.log(np.exp([5, -1]).sum()))
    np.testing.assert_allclose(lp, [expected], rtol=1e-6)
    p1 = np.exp([0, 1, 2]) / np.exp([0, 1, 2]).sum()
    p2 = np.exp([5, -1]) / np.exp([5, -1]).sum()
    h = -(p1 * np.log(p1)).sum() - (p2 * np.log(p2)).sum()
    np.testing.assert_allclose(losses.entropy(logits, (3, 2)), [h], rtol=1e-6)


def _autodiff_head_stats(logits, actions, nvec):
    """log-prob and entropy by jax.nn.log_softmax per head, differentiated by jax."""
    lp, ent, col = 0.0, 0.0, 0
    for h, n in enumerate(nvec):
        ls = jax.nn.log_softmax(logits[..., col:col + n], axis=-1)
        lp = lp + jnp.take_along_axis(ls, actions[..., h:h + 1], axis=-1)[..., 0]
        ent = ent - jnp.sum(jnp.exp(ls) * ls, axis=-1)
        col += n
    return lp, ent


@pytest.mark.parametrize("nvec", [(5,), (2,), (21, 21, 1), (3, 3, 4, 4, 4)])
def test_head_stats_gradient_is_autodiffs(nvec):
    k = jax.random.split(jax.random.PRNGKey(3), 4)
    logits = 3.0 * jax.random.normal(k[0], (7, 3, sum(nvec)))
    actions = jnp.stack([jax.random.randint(kk, (7, 3), 0, n)
                         for kk, n in zip(jax.random.split(k[1], len(nvec)), nvec)], -1)
    w_lp, w_ent = jax.random.normal(k[2], (7, 3)), jax.random.normal(k[3], (7, 3))

    def objective(fn, lg):
        lp, ent = fn(lg, actions, nvec)
        return jnp.sum(w_lp * lp) + jnp.sum(w_ent * ent)

    ours = losses.head_stats(logits, actions, nvec)
    ref = _autodiff_head_stats(logits, actions, nvec)
    for a, b in zip(ours, ref):
        assert a.shape == (7, 3) and a.dtype == jnp.float32
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    g = jax.grad(lambda lg: objective(losses.head_stats, lg))(logits)
    g_ref = jax.grad(lambda lg: objective(_autodiff_head_stats, lg))(logits)
    assert g.shape == logits.shape and g.dtype == jnp.float32
    np.testing.assert_allclose(g, g_ref, rtol=1e-5, atol=1e-6)
    # vmapped (seeds, sweep members): the same as each slice's own
    gv = jax.vmap(jax.grad(lambda lg: objective(losses.head_stats, lg)))(logits[None])[0]
    np.testing.assert_allclose(gv, g, rtol=1e-6, atol=1e-7)


def test_head_stats_with_a_masked_choice():
    # A logit of -inf (a choice masked out) has probability 0: no entropy, no gradient,
    # and the other choices' gradients are those of the unmasked ones.
    nvec = (3, 3)
    logits = jnp.array([[0.0, 1.0, -jnp.inf, 2.0, 0.0, 1.0]])
    actions = jnp.array([[1, 0]])
    lp, ent = losses.head_stats(logits, actions, nvec)
    lp_ref, ent_ref = _autodiff_head_stats(logits[:, [0, 1, 3, 4, 5]], actions, (2, 3))
    np.testing.assert_allclose(lp, lp_ref, rtol=1e-6)
    np.testing.assert_allclose(ent, ent_ref, rtol=1e-6)
    g = jax.grad(lambda lg: jnp.sum(sum(losses.head_stats(lg, actions, nvec))))(logits)
    g_ref = jax.grad(lambda lg: jnp.sum(sum(_autodiff_head_stats(lg, actions, (2, 3)))))(
        logits[:, [0, 1, 3, 4, 5]])
    assert np.all(np.isfinite(g)) and g[0, 2] == 0.0
    np.testing.assert_allclose(g[:, [0, 1, 3, 4, 5]], g_ref, rtol=1e-5, atol=1e-6)


def test_head_stats_gradient_in_bfloat16_logits():
    nvec = (4, 4)
    logits = jax.random.normal(jax.random.PRNGKey(0), (16, 8)).astype(jnp.bfloat16)
    actions = jnp.zeros((16, 2), jnp.int32)
    g = jax.grad(lambda lg: jnp.sum(losses.head_stats(lg, actions, nvec)[0]))(logits)
    g_ref = jax.grad(lambda lg: jnp.sum(_autodiff_head_stats(
        lg.astype(jnp.float32), actions, nvec)[0]))(logits)
    assert g.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.float32(g), np.float32(g_ref), rtol=1e-2, atol=1e-2)


class _DenseMLP(nn.Module):
    """The actor-critic MLP written plainly with nn.Dense (PureJaxRL style):
    the reference that MLPActorCritic's fused matmuls and gradient must match."""

    nvec: tuple
    hidden: tuple
    shared: bool

    @nn.compact
    def __call__(self, obs):
        def torso(x):
            for w in self.hidden:
                x = nn.relu(nn.Dense(w)(x))
            return x
        a = torso(obs)
        v = a if self.shared else torso(obs)
        return nn.Dense(sum(self.nvec))(a), nn.Dense(1)(v)[..., 0]


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("hidden", [(32, 16), (8,), ()])
def test_mlp_matches_plain_dense_layers(shared, hidden):
    # Same parameter tree as nn.Dense layers; same outputs and gradients
    # (fused matmuls, folded bias, row-blocked weight gradient) in float32;
    # in bfloat16 close to the float32 gradient.
    nvec = (4, 3)
    obs = jax.random.normal(jax.random.PRNGKey(0), (16, 8, 64, 6))  # 8192 rows: 8 blocks
    model = MLPActorCritic(nvec, hidden, "relu", shared)
    ref = _DenseMLP(nvec, hidden, shared)
    params = model.init(jax.random.PRNGKey(1), obs[0, 0])
    assert jax.tree.structure(params) == jax.tree.structure(ref.init(jax.random.PRNGKey(1), obs))
    params = jax.tree.map(lambda x: x + 0.05, params)  # nonzero biases, non-tiny heads

    def loss(m):
        def f(p, x=obs):
            logits, value = m.apply(p, x)
            return jnp.sum(jnp.tanh(logits)) + jnp.sum(value ** 2) / obs.shape[0]
        return f

    for a, b in zip(model.apply(params, obs), ref.apply(params, obs)):
        assert a.shape == b.shape and a.dtype == jnp.float32
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    g, g_ref = jax.grad(loss(model))(params), jax.grad(loss(ref))(params)
    flat = jax.grad(loss(MLPActorCritic(nvec, hidden, "relu", shared, row_blocks=False)))(
        params)  # one matmul, no blocks
    for a, b, c in zip(jax.tree.leaves(g), jax.tree.leaves(g_ref), jax.tree.leaves(flat)):
        assert a.dtype == jnp.float32
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4 * float(jnp.abs(b).max()))
        np.testing.assert_allclose(c, b, rtol=2e-4, atol=2e-4 * float(jnp.abs(b).max()))
    g16 = jax.grad(loss(MLPActorCritic(nvec, hidden, "relu", shared, jnp.bfloat16)))(params)
    for a, b in zip(jax.tree.leaves(g16), jax.tree.leaves(g_ref)):
        assert a.dtype == jnp.float32
        assert float(jnp.abs(a - b).max()) <= 0.05 * float(jnp.abs(b).max()) + 1e-6


def test_weight_gradient_row_blocks():
    from jaxwarp.models.mlp_kernel import row_blocks as _row_blocks
    assert _row_blocks(1_000_000) == 125  # 8,000 rows per block
    assert _row_blocks(2_500_000) == 125
    assert _row_blocks(1024 * 96) == 96
    # blocks of a multiple of 8 rows: 50 of 2,000, not 80 of 1,250 (cuBLAS pads those)
    assert _row_blocks(100_000) == 50
    assert _row_blocks(1031) == 1  # a prime: one block
    assert _row_blocks(4096) == 1  # blocks would be smaller than 1024 rows


@pytest.mark.parametrize("algorithm", ["ppo", "a2c"])
def test_update_decreases_loss_on_fixed_batch(algorithm):
    nvec = (4, 3)
    model = MLPActorCritic(nvec, (32,), "tanh")
    k = jax.random.split(jax.random.PRNGKey(0), 4)
    obs = jax.random.normal(k[0], (256, 6))
    params = model.init(k[1], obs)
    logits, value = model.apply(params, obs)
    actions = jnp.stack([jax.random.randint(k[2], (256,), 0, 4),
                         jax.random.randint(k[3], (256,), 0, 3)], -1)
    adv = obs[:, 0] - 0.5 * obs[:, 1]  # a learnable signal
    batch = losses.Batch(obs=obs, actions=actions, log_prob=losses.log_prob(logits, actions, nvec),
                       value=value, advantage=adv, target=obs[:, 2])
    kw = dict(algorithm=algorithm, clip_eps=0.2, vf_coef=0.5, ent_coef=0.0,
              normalize_advantages=True)

    def loss(p):
        lg, v = model.apply(p, batch.obs)
        return losses.policy_loss(*losses.head_stats(lg, batch.actions, nvec), v, batch, **kw)

    before, m0 = loss(params)
    assert float(m0["approx_kl"]) == pytest.approx(0.0, abs=1e-6)  # behaviour == current
    tx = optax.adam(3e-3)
    opt = tx.init(params)
    for _ in range(4):  # one update: 4 minibatch steps on the same batch
        g = jax.grad(lambda p: loss(p)[0])(params)
        upd, opt = tx.update(g, opt, params)
        params = optax.apply_updates(params, upd)
    after, m1 = loss(params)
    assert float(after) < float(before) - 1e-3
    assert float(m1["approx_kl"]) > 0


def test_ppo_clipped_objective_is_flat_outside_the_clip():
    # With ratio far above 1 + eps and positive advantages the clipped
    # surrogate has zero policy gradient.
    nvec = (2,)
    logits = jnp.array([[3.0, -3.0]])
    batch = losses.Batch(obs=jnp.zeros((1, 1)), actions=jnp.array([[0]]),
                       log_prob=jnp.log(jnp.array([0.1])), value=jnp.zeros(1),
                       advantage=jnp.ones(1), target=jnp.zeros(1))

    def pg(lg):
        lp, ent = losses.head_stats(lg, batch.actions, nvec)
        return losses.policy_loss(lp, ent, jnp.zeros(1), batch, algorithm="ppo", clip_eps=0.2,
                                  vf_coef=0.0, ent_coef=0.0, normalize_advantages=False)[0]

    np.testing.assert_allclose(jax.grad(pg)(logits), 0.0, atol=1e-7)
    np.testing.assert_allclose(pg(logits), -1.2, rtol=1e-6)


def test_running_stats_match_numpy():
    rng = np.random.default_rng(1)
    a, b = rng.normal(2.0, 3.0, (100, 4)), rng.normal(-1.0, 0.5, (50, 4))
    s = RunningStats.create(4).update(jnp.asarray(a, jnp.float32))
    s = s.update(jnp.asarray(b, jnp.float32))
    both = np.concatenate([a, b])
    np.testing.assert_allclose(s.mean, both.mean(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(s.var, both.var(0), rtol=1e-3)


# ---------------------------------------------------------------------------
# The jitted trainer
# ---------------------------------------------------------------------------
def test_train_shapes_and_determinism():
    c = tiny_config()
    train = jax.jit(make_train(c))
    rs, m = train(jax.random.PRNGKey(0))
    n = derived(c).num_updates
    assert set(m) >= {"tagger/episode_return", "runner/episode_return", "tagger/loss",
                      "runner/entropy", "tags_per_episode", "env_steps", "episodes"}
    assert all(v.shape == (n,) and v.dtype == jnp.float32 for v in m.values())
    np.testing.assert_array_equal(m["env_steps"], 64 * np.arange(1, n + 1))
    assert int(rs.update) == n
    assert np.isfinite(np.asarray(m["tagger/loss"])).all()
    # 12-step episodes, 32 steps run: some finished, returns are finite.
    assert np.isfinite(m["tagger/episode_return"][-1])
    _, m2 = train(jax.random.PRNGKey(0))
    for k in m:
        np.testing.assert_array_equal(m[k], m2[k], err_msg=k)
    _, m3 = train(jax.random.PRNGKey(1))
    assert not np.array_equal(m["tagger/loss"], m3["tagger/loss"])


@pytest.mark.parametrize("algorithm", ["ppo", "a2c"])
def test_vmap_over_seeds_equals_separate_runs(algorithm):
    c = tiny_config(algorithm=algorithm)
    train = make_train(c)
    keys = jnp.stack([jax.random.PRNGKey(3), jax.random.PRNGKey(4)])
    rs_b, each = assert_seeds_vmap_as_separate_runs(train, keys, rtol=2e-5, atol=1e-6)
    for i, rs_i in enumerate(each):
        for a, b in zip(jax.tree.leaves(rs_b.learner.params), jax.tree.leaves(rs_i.learner.params)):
            np.testing.assert_allclose(a[i], b, rtol=2e-5, atol=1e-6)


def test_untrained_group_keeps_its_parameters():
    c = tiny_config(policies={"runner": {"train": False}})
    trainer = build_trainer(c)
    rs0 = trainer.init(jax.random.PRNGKey(0))
    rs1, m = jax.jit(lambda r: trainer.run(r, 2))(rs0)
    p0, p1 = rs0.learner.params, rs1.learner.params
    for a, b in zip(jax.tree.leaves(p0["runner"]), jax.tree.leaves(p1["runner"])):
        np.testing.assert_array_equal(a, b)
    assert "runner/loss" not in m and "tagger/loss" in m
    moved = [not np.array_equal(a, b) for a, b in
             zip(jax.tree.leaves(p0["tagger"]), jax.tree.leaves(p1["tagger"]))]
    assert any(moved)


class _Prefers(nn.Module):
    """Logits that make head 0 pick `choice` almost surely; value 0."""

    nvec: tuple[int, ...]
    choice: int

    @nn.compact
    def __call__(self, obs):
        bias = self.param("bias", nn.initializers.zeros, (1,))
        logits = jnp.zeros((*obs.shape[:-1], sum(self.nvec))).at[..., self.choice].set(50.0)
        return logits + 0 * bias, jnp.zeros(obs.shape[:-1]) + 0 * bias[0]


def test_user_models_per_group_route_to_their_agents():
    c = tiny_config(sampler="jax")
    nvec = (4, 4)
    trainer = build_trainer(c, models={"tagger": _Prefers(nvec, 1), "runner": _Prefers(nvec, 3)})
    rs = trainer.init(jax.random.PRNGKey(0))
    logits, _ = trainer.models["tagger"].apply(rs.learner.params["tagger"], rs.envs.obs[:, :2])
    assert logits.shape == (8, 2, 8)
    actions, _ = jaxwarp.sample_actions(jax.random.PRNGKey(1), jnp.concatenate(
        [trainer.models[g].apply(rs.learner.params[g], rs.envs.obs[:, ids])[0]
         for g, ids in trainer.groups.items()], axis=1), nvec, backend="jax")
    np.testing.assert_array_equal(actions[:, :2, 0], 1)
    np.testing.assert_array_equal(actions[:, 2:, 0], 3)
    _, m = jax.jit(lambda r: trainer.run(r, 1))(rs)
    assert np.isfinite(m["tagger/loss"]).all()


# ---------------------------------------------------------------------------
# Configs
# ---------------------------------------------------------------------------
def test_shipped_configs_load_and_build():
    names = shipped_configs()
    assert {"tag_warpdrive_default", "tag_2000_envs", "tag_small_cpu", "tag_chase"} <= set(names)
    for name in names:
        c = load_config(name, ["backend=cpu"])
        t = build_trainer(c)
        expected = {"tag_continuous": {"tagger", "runner"},
                    "mpe_simple_tag": {"adversary", "agent"}}.get(c.env, {"agent"})
        assert set(t.groups) == expected
    wd = load_config("tag_warpdrive_default")
    assert (wd.num_envs, wd.algorithm, wd.policy("tagger").hidden_sizes) == (100, "a2c",
                                                                             (256, 256))
    assert load_config("tag_2000_envs").num_envs == 2000


def test_bf16_observations_train_as_f32_observations_rounded():
    # obs_dtype=bfloat16: the env writes bf16 observations, the rollout stores
    # them; a bf16 model rounds f32 observations the same way, so the run is
    # the same run (observation statistics are accumulated in f32).
    bf16 = {"policies": {g: {"hidden_sizes": [16], "dtype": "bfloat16"}
                         for g in ("tagger", "runner")}}
    runs = {}
    for od in ("float32", "bfloat16"):
        for norm in (False, True):
            t = build_trainer(tiny_config(obs_dtype=od, normalize_obs=norm, **bf16))
            rs = jax.jit(t.init)(jax.random.PRNGKey(0))
            assert rs.envs.obs.dtype == jnp.dtype(od)
            rs, m = jax.jit(lambda r, t=t: t.run(r, 2))(rs)
            runs[od, norm] = (m, rs)
    for norm in (False, True):
        (m32, rs32), (m16, rs16) = runs["float32", norm], runs["bfloat16", norm]
        for k in ("tagger/loss", "runner/loss", "tagger/reward"):
            np.testing.assert_allclose(m16[k], m32[k], rtol=1e-6 if not norm else 2e-2, err_msg=k)
        if norm:
            for g in ("tagger", "runner"):
                assert rs16.learner.obs_stats[g].mean.dtype == jnp.float32
                np.testing.assert_allclose(rs16.learner.obs_stats[g].mean,
                                           rs32.learner.obs_stats[g].mean, atol=1e-2)
        else:
            for a, b in zip(jax.tree.leaves(rs16.learner.params),
                            jax.tree.leaves(rs32.learner.params)):
                np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("d, match", [
    ({"num_env": 3}, r"num_env: unknown config key"),
    ({"num_envs": "many"}, r"num_envs: expected an integer"),
    ({"algorithm": "dqn"}, r"algorithm='dqn' is invalid; expected one of \('ppo', 'a2c'\)"),
    ({"num_envs": 10, "num_minibatches": 3}, r"num_minibatches=3 is invalid; expected a divisor"),
    ({"policies": {"tagger": {"lr": "fast"}}}, r"policies.tagger.lr: expected a number"),
    ({"policies": {"tagger": {"widths": [3]}}}, r"policies.tagger.widths: unknown key"),
    ({"policies": {"tagger": {"activation": "swish"}}}, r"activation: 'swish' is unknown"),
    ({"policies": {"tagger": {"hidden_sizes": []}}}, r"hidden_sizes: expected a non-empty"),
    ({"gamma": 1.5}, r"gamma=1.5 is invalid"),
    ({"checkpoint_every": 15, "chunk_updates": 10}, r"checkpoint_every=15 is invalid"),
    ({"obs_dtype": "float16"}, r"obs_dtype='float16' is invalid; expected one of "
                               r"\('float32', 'bfloat16'\)"),
])
def test_config_errors_name_the_key(d, match):
    with pytest.raises(ConfigError, match=match):
        config_from_dict(d)


def test_config_errors_found_at_build_time():
    with pytest.raises(ConfigError, match=r"policies.hunter: tag_continuous has no policy "
                                          r"group 'hunter'; its groups are \['runner', 'tagger'\]"):
        build_trainer(config_from_dict({"policies": {"hunter": {}}, "backend": "cpu"}))
    with pytest.raises(ConfigError, match=r"policies.tagger.model: 'lstm' is unknown"):
        build_trainer(config_from_dict({"policies": {"tagger": {"model": "lstm"}},
                                        "backend": "cpu"}))
    with pytest.raises(ValueError, match=r"num_runners"):
        build_trainer(config_from_dict({"env_params": {"num_runners": 0}, "backend": "cpu"}))


def test_overrides_and_roundtrip(tmp_path):
    c = load_config("tag_small_cpu", ["num_envs=32", "policies.tagger.lr=1e-4",
                                      "env_params.grid_length=12"])
    assert c.num_envs == 32 and c.policy("tagger").lr == 1e-4
    assert dict(c.env_params)["grid_length"] == 12.0
    assert c.policy("tagger").hidden_sizes == (64, 64)  # kept from the file
    assert config_from_dict(c.to_dict()) == c
    with pytest.raises(ConfigError, match=r"expected key=value"):
        load_config(None, ["num_envs"])
    with pytest.raises(ConfigError, match=r"no such file and not a shipped config"):
        load_config(tmp_path / "missing.yaml")


# ---------------------------------------------------------------------------
# Runner: checkpoints, resume, CLI
# ---------------------------------------------------------------------------
def test_checkpoint_kill_resume_reproduces_uninterrupted(tmp_path):
    c = tiny_config(total_env_steps=64 * 8, chunk_updates=2, checkpoint_every=4)
    full = train_run(c, tmp_path / "full", seeds=2, progress=False)
    assert full.summary["finished"] and len(full.metrics) == 8 * 2
    # Killed after 6 updates: the last checkpoint is at 4, rows 5-6 are stale.
    part = train_run(c, tmp_path / "part", seeds=2, progress=False, stop_after_updates=6)
    assert not part.summary["finished"]
    assert max(r["update"] for r in read_metrics(tmp_path / "part")) == 6
    resumed = train_run(None, tmp_path / "part", resume=True, progress=False)
    assert resumed.summary["finished"]
    assert [r["update"] for r in resumed.metrics][:2] == [5, 5]  # restarted from update 4
    a, b = metric_table(read_metrics(tmp_path / "full")), \
        metric_table(read_metrics(tmp_path / "part"))
    assert a.keys() == b.keys()
    for k in a:
        for name in a[k]:
            x, y = a[k][name], b[k][name]
            assert (math.isnan(x) and math.isnan(y)) or x == y, (k, name, x, y)
    for x, y in zip(jax.tree.leaves(full.state.learner.params),
                    jax.tree.leaves(resumed.state.learner.params)):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(FileExistsError, match=r"already holds a run; pass --resume"):
        train_run(c, tmp_path / "full", progress=False)


def test_cli_train_writes_logs_checkpoints_and_plot(tmp_path, capsys):
    out = tmp_path / "run"
    code = cli_main(["train", "--env", "tag_continuous", "--no-progress", "--out", str(out),
                     "--seeds", "2", "backend=cpu", "num_envs=8", "num_steps=8",
                     "total_env_steps=256", "chunk_updates=2", "checkpoint_every=2",
                     "env_params.num_runners=4", "env_params.episode_length=10",
                     "policies.tagger.hidden_sizes=[16]", "policies.runner.hidden_sizes=[16]"])
    assert code == 0
    assert "4/4 updates" in capsys.readouterr().out
    for f in ("config.yaml", "metrics.jsonl", "metrics.csv", "summary.json",
              "learning_curve.png"):
        assert (out / f).stat().st_size > 0, f
    assert any((out / "tensorboard").iterdir())
    assert (out / "checkpoints" / "4").exists()
    rows = read_metrics(out)
    assert sorted({(r["update"], r["seed"]) for r in rows}) == [
        (u, s) for u in range(1, 5) for s in (0, 1)]
    header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"update", "seed", "env_steps", "tagger/episode_return"} <= set(header)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] and summary["seeds"] == 2 and summary["env_steps_per_s"] > 0


def test_cli_errors(tmp_path, capsys):
    assert cli_main(["train", "--out", str(tmp_path / "x"), "num_envz=4"]) == 2
    assert "num_envz: unknown config key" in capsys.readouterr().err
    assert cli_main(["train", "--resume", str(tmp_path / "nothing")]) == 2
    assert "no config.yaml there" in capsys.readouterr().err
    assert cli_main(["train", "--resume", str(tmp_path), "num_envs=4"]) == 2
    assert "--resume DIR takes the run's saved config" in capsys.readouterr().err
    assert cli_main(["configs"]) == 0
    assert "tag_small_cpu" in capsys.readouterr().out


# ---------------------------------------------------------------------------
# It learns
# ---------------------------------------------------------------------------
def test_short_cpu_run_taggers_beat_random_policy():
    """The shipped small config (150 PPO updates, ~30 s on 2 cores): taggers'
    mean return per episode over the last 20 updates must clearly beat
    random taggers (a uniform policy) on the same seed."""
    learned = load_config("tag_small_cpu", ["backend=cpu"])
    m_learned, m_random = trained_and_random(learned, jax.random.PRNGKey(0))
    r_learned = float(np.nanmean(m_learned["tagger/episode_return"][-20:]))
    r_random = float(np.nanmean(m_random["tagger/episode_return"][-20:]))
    tags_learned = float(np.nanmean(m_learned["tags_per_episode"][-20:]))
    print(f"tagger return per episode: learned {r_learned:.2f}, random {r_random:.2f}")
    assert r_random > 0  # random taggers do tag sometimes
    assert r_learned > 1.8 * r_random, (r_learned, r_random)
    np.testing.assert_allclose(tags_learned * 10 / 2, r_learned, rtol=1e-5)


def test_a2c_gradient_chunks_equal_one_full_batch_step():
    """A2C's num_minibatches only splits the gradient computation."""
    states = []
    for chunks in (1, 4):
        c = tiny_config(algorithm="a2c", num_minibatches=chunks)
        assert derived(c).optimizer_steps == 1
        trainer = build_trainer(c)
        rs = trainer.init(jax.random.PRNGKey(0))
        states.append(jax.jit(lambda r: trainer.run(r, 2))(rs)[0])
    for a, b in zip(jax.tree.leaves(states[0].learner.params),
                    jax.tree.leaves(states[1].learner.params)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("shared, dtype", [(True, "float32"), (False, "bfloat16")])
def test_mlp_variants(shared, dtype):
    model = MLPActorCritic((3, 2), (16, 16), "relu", shared, jnp.dtype(dtype))
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 5)))
    logits, value = model.apply(params, jnp.ones((4, 7, 5)))
    assert logits.shape == (4, 7, 5) and value.shape == (4, 7)
    assert logits.dtype == jnp.float32 and value.dtype == jnp.float32
    n_dense = len(params["params"])
    assert n_dense == (4 if shared else 6)  # 2 torso (+2) + policy + value heads
    assert all(v.dtype == jnp.float32 for v in jax.tree.leaves(params))


@pytest.mark.parametrize("shards", [1, 2])
def test_sample_minibatches_partition_every_step_once(shards):
    """minibatch_layout=samples: the minibatches of one epoch hold every (step,
    env) of the batch exactly once, each device's from its own envs."""
    from jaxwarp.train.minibatches import Minibatches

    T, E, M = 3, 8, 4
    layout = Minibatches(M, E // M, shards, E, lambda tree, spec: tree, samples=True)
    x = jnp.arange(T * E).reshape(T, E)  # value = t * E + e
    perm, dealt = layout.shuffle(x, jax.random.PRNGKey(0), False)
    assert perm.shape == (shards, T * E // shards)
    mbs = [np.asarray(layout.steps(dealt, jnp.int32(i), perm)) for i in range(M)]
    assert all(mb.shape == (1, T * E // M) for mb in mbs)
    seen = np.concatenate([mb.ravel() for mb in mbs])
    np.testing.assert_array_equal(np.sort(seen), np.arange(T * E))
    if shards == 2:  # each device's half of a minibatch comes from its own envs
        for mb in mbs:
            halves = mb.reshape(2, -1) % E // (E // 2)
            np.testing.assert_array_equal(halves, np.array([[0], [1]]) * np.ones_like(halves))


def test_global_steps_shuffle_draws_the_one_device_permutation():
    """minibatch_layout=samples over 2 devices with minibatch_shuffle=global:
    the epoch's one permutation of all steps is the one device's, under vmap
    over seeds too; the per-device shuffle draws one per device."""
    from jaxwarp.train.minibatches import Minibatches

    T, E, M = 4, 8, 4
    x = jnp.arange(T * E).reshape(T, E)
    one, two = (Minibatches(M, E // M, d, E, lambda tree, spec: tree, samples=True)
                for d in (1, 2))
    keys = jax.random.split(jax.random.PRNGKey(3), 3)
    p1 = jax.vmap(lambda k: one.shuffle(x, k, False)[0])(keys)
    p2 = jax.vmap(lambda k: two.shuffle(x, k, True)[0])(keys)
    assert p1.shape == (3, 1, T * E) and p2.shape == (3, T * E)
    np.testing.assert_array_equal(np.asarray(p1[:, 0]), np.asarray(p2))
    local = jax.vmap(lambda k: two.shuffle(x, k, False)[0])(keys)
    assert local.shape == (3, 2, T * E // 2)
    np.testing.assert_array_equal(np.sort(np.asarray(local), -1),
                                  np.broadcast_to(np.arange(T * E // 2), local.shape))


def test_steps_permutation_is_jaxs_kind_and_each_member_its_own_draw():
    """`minibatches.permutation`: i32[n], a permutation of range(n); under vmap
    (nested: seeds x sweep runs; more members than one sort takes) each
    member's is the one drawn alone, and different keys draw different ones."""
    from jaxwarp.train.minibatches import MEMBER_BITS, permutation

    for n in (1, 7, 300):
        p = jax.jit(permutation, static_argnums=1)(jax.random.PRNGKey(5), n)
        assert p.shape == (n,) and p.dtype == jnp.int32
        np.testing.assert_array_equal(np.sort(np.asarray(p)), np.arange(n))
    keys = jax.random.split(jax.random.PRNGKey(1), 2 ** MEMBER_BITS + 6).reshape(2, -1, 2)
    batched = np.asarray(jax.jit(jax.vmap(jax.vmap(lambda k: permutation(k, 50))))(keys))
    one = jax.jit(lambda k: permutation(k, 50))
    alone = np.stack([[np.asarray(one(k)) for k in row] for row in keys])
    np.testing.assert_array_equal(batched, alone)
    assert len({tuple(p) for p in batched.reshape(-1, 50)}) == batched.shape[0] * batched.shape[1]


def test_steps_permutation_is_uniform():
    """Every ordering of 4 elements equally often over 4,800 keys (chi-square,
    23 degrees of freedom, below its 0.999 quantile 49.7), and each element
    equally often at each position of 9 (27 keys a cell expected); n = 0 gives
    an empty permutation."""
    from jaxwarp.train.minibatches import permutation

    keys = jax.random.split(jax.random.PRNGKey(7), 4800)
    perms = np.asarray(jax.jit(jax.vmap(lambda k: permutation(k, 4)))(keys))
    _, counts = np.unique(perms, axis=0, return_counts=True)
    assert len(counts) == 24
    assert np.sum((counts - 200.0) ** 2 / 200.0) < 49.7
    perms = np.asarray(jax.jit(jax.vmap(lambda k: permutation(k, 9)))(keys[:243]))
    cells = np.zeros((9, 9))
    np.add.at(cells, (perms, np.arange(9)[None, :].repeat(243, 0)), 1)
    # every row and column of cells sums to 243, so the statistic is about 9/8 chi-square(64):
    # mean 72, 0.999 quantile 118.5 (20,000 simulated uniform draws)
    assert np.sum((cells - 27.0) ** 2 / 27.0) < 118.5
    empty = jax.jit(jax.vmap(lambda k: permutation(k, 0)))(keys[:3])
    assert empty.shape == (3, 0) and empty.dtype == jnp.int32


def test_sample_minibatches_train_and_refuse_recurrent_models():
    c = tiny_config(minibatch_layout="samples", num_minibatches=2)
    _, m = jax.jit(make_train(c))(jax.random.PRNGKey(0))
    assert all(np.isfinite(np.asarray(v)).all() for k, v in m.items() if k.endswith("loss"))
    base = load_config("cartpole_ppo", ["backend=jax", "policies.agent.model=gru",
                                      "minibatch_layout=samples"])
    with pytest.raises(ConfigError, match=r"minibatch_layout=samples: .*recurrent"):
        build_trainer(base)
    with pytest.raises(ConfigError, match=r"minibatch_layout.*auto, envs or samples"):
        load_config("cartpole_ppo", ["minibatch_layout=rows"])
