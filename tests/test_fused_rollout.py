"""The fused rollout (jaxwarp.train.fused, cuda/jaxwarp_fused.h) against the
step-by-step one: same actions, rewards, dones and observations for the same
keys and parameters, log-probs and values equal to float rounding, the same
env state after; under vmap over seeds as member by member; and which
policies and envs it takes (the rest keep the step-by-step path)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwarp.registry import contract_envs
from jaxwarp.train import fused, load_config
from jaxwarp.train.config import default_config_for
from jaxwarp.train.trainer import build_trainer

BASE = ["backend=cpu", "sampler=auto"]
GPU = pytest.mark.gpu
CASES = {
    # One agent, one head (the solo step path of the step kernel).
    "cartpole": ("cartpole_ppo", ["num_envs=6", "num_steps=40", "num_minibatches=2"]),
    # Three agents sharing a policy; relu and a shared torso.
    "mpe_relu_shared": ("mpe_simple_spread_ppo",
                        ["num_envs=5", "num_steps=30", "num_minibatches=1", "policies.agent.activation=relu",
                         "policies.agent.shared_torso=true"]),
    # Two policy groups (taggers, runners), observe_part, two-phase steps.
    "tag_duel": ("tag_duel_cpu", ["num_envs=4", "num_steps=25", "num_minibatches=2",
                                  "policies.tagger.hidden_sizes=[32, 16]",
                                  "policies.runner.hidden_sizes=[32, 16]"]),
    # 110 agents, 256-256: the forward pass in several passes of rows (GPU).
    "tag_110_agents": ("tag_warpdrive_default", ["num_envs=4", "num_steps=6",
                                                 "num_minibatches=2"]),
    # Many small envs: several envs per block (GPU).
    "mpe_many_envs": ("mpe_simple_spread_ppo", ["num_envs=600", "num_steps=30"]),
    # Envs enough that a block takes at most kMaxBlockRows = 16 agents (GPU): full
    # tiles of 4 rows (CartPole, 16 a block); 5 MPEs a block, 15 rows, a partial tile.
    "cartpole_capped_blocks": ("cartpole_ppo", ["num_envs=5000", "num_steps=30"]),
    "mpe_capped_blocks": ("mpe_simple_spread_ppo", ["num_envs=2000", "num_steps=30"]),
    # Two groups in capped blocks: 2 Tag duels a block (14 rows, agent by agent); with
    # 3 taggers and 4 runners the second tile holds both groups' rows, the last is partial.
    "tag_duel_capped_blocks": ("tag_duel_cpu", ["num_envs=2000", "num_steps=10",
                                                "env_params.num_taggers=3",
                                                "env_params.num_runners=4"]),
}


def _trainers(name, monkeypatch, backend="cpu"):
    config, extra = CASES[name]
    return _pair(load_config(config, [*BASE, *extra, f"backend={backend}"]), monkeypatch)


def _pair(c, monkeypatch):
    """(trainer with the fused rollout, trainer with the step-by-step one)."""
    with monkeypatch.context() as m:  # fused on the cpu backend too (the trainer's is cuda's)
        m.setattr(fused, "plan", lambda policy, env, sums, *a: fused.build(policy, env, sums))
        t_fused = build_trainer(c)
    with monkeypatch.context() as m:
        m.setattr(fused, "plan", lambda *a, **k: None)
        t_step = build_trainer(c)
    return t_fused, t_step


def _rollout(trainer, seed):
    rs = jax.jit(trainer.init)(jax.random.PRNGKey(seed))
    # Parameters away from the near-uniform initial policy head, so that the
    # draws depend on the logits.
    rs = rs.replace(learner=rs.learner.replace(
        params=jax.tree.map(lambda x: x * 3.0, rs.learner.params)))
    # Float32 matmuls in the step-by-step path too (XLA:GPU's default is
    # tf32, which would change its logits by ~1e-3 and some draws with them).
    with jax.default_matmul_precision("highest"):
        out = jax.jit(trainer.rollout)(rs, jax.random.PRNGKey(seed + 100))
    return rs, out


@pytest.mark.parametrize("name, backend", [
    *[(n, "cpu") for n in sorted(CASES)],
    *[pytest.param(n, "cuda", marks=GPU) for n in sorted(CASES)]])
def test_fused_rollout_equals_the_step_by_step_rollout(name, backend, monkeypatch):
    _assert_same_rollouts(*_trainers(name, monkeypatch, backend), name)


@pytest.mark.parametrize("name", contract_envs())
def test_every_env_rolls_out_fused_as_step_by_step(name, monkeypatch):
    """Each built-in env at its `jaxwarp train --env` settings, on the cpu backend."""
    c = load_config(default_config_for(name), [*BASE, f"env={name}", "num_envs=3",
                                               "num_steps=20", "num_minibatches=1"])
    _assert_same_rollouts(*_pair(c, monkeypatch), name, episodes=False)


def _assert_same_rollouts(t_fused, t_step, name, episodes=True):
    assert fused.why_not(t_fused.policy, t_fused.env, t_fused.sampler, False) is None
    _, (envs_f, ep_f, traj_f) = _rollout(t_fused, 1)
    _, (envs_s, ep_s, traj_s) = _rollout(t_step, 1)
    steps, envs = traj_s.reward.shape[:2]
    assert traj_f.actions.shape == traj_s.actions.shape and traj_f.actions.dtype == jnp.int32
    for field in ("actions", "reward", "done", "first", "obs"):
        np.testing.assert_array_equal(getattr(traj_f, field), getattr(traj_s, field),
                                      err_msg=field)
    for field in ("log_prob", "value"):
        got, want = getattr(traj_f, field), getattr(traj_s, field)
        assert got.dtype == jnp.float32 and got.shape == (steps, envs, want.shape[2])
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, err_msg=field)
    np.testing.assert_array_equal(envs_f.obs, envs_s.obs)
    np.testing.assert_array_equal(envs_f.first, envs_s.first)
    for a, b in zip(jax.tree.leaves(envs_f.env_state), jax.tree.leaves(envs_s.env_state)):
        np.testing.assert_array_equal(a, b)
    assert ep_f.keys() == ep_s.keys()
    for k in ep_s:
        np.testing.assert_allclose(ep_f[k], ep_s[k], rtol=1e-5, atol=1e-5, err_msg=k)
    # Something happened: episodes ended and several actions were drawn.
    assert float(ep_s["episodes"]) > 0 or name.startswith("tag") or not episodes
    assert len(np.unique(np.asarray(traj_s.actions))) > 1


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=GPU)])
def test_vmap_over_seeds_equals_one_seed_at_a_time(backend, monkeypatch):
    t_fused, _ = _trainers("mpe_relu_shared", monkeypatch, backend)
    seeds = jnp.arange(3)

    def one(seed):
        rs = t_fused.init(jax.random.PRNGKey(seed))
        return t_fused.rollout(rs, jax.random.PRNGKey(seed + 7))

    batched = jax.jit(jax.vmap(one))(seeds)
    for i, s in enumerate(seeds.tolist()):
        single = jax.jit(one)(s)
        for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(batched)):
            np.testing.assert_array_equal(a, b[i])


def test_each_member_rolls_out_with_its_own_env_params(monkeypatch):
    """Env params as data: under vmap the fused call reads one row of Params
    words per member, as the step-by-step rollout's env steps do."""
    t_fused, t_step = _trainers("mpe_relu_shared", monkeypatch)
    env = t_fused.env
    words = jnp.stack([env.param_words(dataclasses.replace(env.params, local_ratio=r, damping=d))
                       for r, d in ((0.0, 0.25), (1.0, 0.6))])

    def one(t):
        def run(seed, w):
            rs = t.init(jax.random.PRNGKey(seed))
            rs = rs.replace(hyper=rs.hyper.replace(env=w))
            return t.rollout(rs, jax.random.PRNGKey(seed + 7))
        return run

    seeds = jnp.zeros(2, jnp.int32)  # the same keys: the params alone differ
    envs_f, _, traj_f = jax.jit(jax.vmap(one(t_fused)))(seeds, words)
    envs_s, _, traj_s = jax.jit(jax.vmap(one(t_step)))(seeds, words)
    for field in ("actions", "reward", "done", "obs"):
        np.testing.assert_array_equal(getattr(traj_f, field), getattr(traj_s, field),
                                      err_msg=field)
    for a, b in zip(jax.tree.leaves(envs_f.env_state), jax.tree.leaves(envs_s.env_state)):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(traj_s.reward[0], traj_s.reward[1])


def test_vmap_past_the_work_limit_runs_step_by_step(monkeypatch):
    """Seeds whose folded launch would exceed MAX_FUSED_WORK run the
    step-by-step rollout (the same bits as its own vmap); below it, fused."""
    t_fused, t_step = _trainers("mpe_relu_shared", monkeypatch)
    seeds = jnp.arange(2)
    agents = 2 * 5 * 3  # seeds x envs x agents
    work = agents * fused.param_count(fused.mlp_words(t_fused.policy.nets["agent"],
                                                      t_fused.env.obs_dim, 1))

    def one(t):
        return lambda seed: t.rollout(t.init(jax.random.PRNGKey(seed)),
                                      jax.random.PRNGKey(seed + 7))

    def matmuls(t):  # the step-by-step rollout's forward passes are XLA's dots (init has some)
        return str(jax.make_jaxpr(jax.vmap(one(t)))(seeds)).count("dot_general")

    want = jax.jit(jax.vmap(one(t_step)))(seeds)
    monkeypatch.setattr(fused, "MAX_FUSED_WORK", work - 1)
    step_dots = matmuls(t_step)
    assert matmuls(t_fused) == step_dots
    for a, b in zip(jax.tree.leaves(jax.jit(jax.vmap(one(t_fused)))(seeds)),
                    jax.tree.leaves(want)):
        np.testing.assert_array_equal(a, b)
    monkeypatch.setattr(fused, "MAX_FUSED_WORK", work)
    assert matmuls(t_fused) < step_dots, (matmuls(t_fused), step_dots)


def test_training_with_the_fused_rollout_learns_as_before(monkeypatch):
    config, extra = CASES["cartpole"]
    c = load_config(config, [*BASE, *extra, "total_env_steps=960", "num_minibatches=2",
                             "update_epochs=2"])
    from jaxwarp.train import make_train

    with monkeypatch.context() as m:
        m.setattr(fused, "plan", lambda policy, env, sums, *a: fused.build(policy, env, sums))
        rs_f, m_f = jax.jit(make_train(c))(jax.random.PRNGKey(3))
    monkeypatch.setattr(fused, "plan", lambda *a, **k: None)
    rs_s, m_s = jax.jit(make_train(c))(jax.random.PRNGKey(3))
    for a, b in zip(jax.tree.leaves(rs_f.learner.params), jax.tree.leaves(rs_s.learner.params)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(m_f["agent/loss"], m_s["agent/loss"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("override, reason", [
    ("policies.agent.model=gru", "only the built-in 'mlp'"),
    ("policies.agent.dtype=bfloat16", "only float32"),
    ("policies.agent.activation=gelu", "activation 'gelu'"),
    ("normalize_obs=true", "normalize_obs"),
    ("critic=centralised", "a centralised critic"),
    ("sampler=jax", "sampler 'jax' differs"),
])
def test_what_keeps_the_step_by_step_rollout(override, reason):
    c = load_config("mpe_simple_spread_ppo", [*BASE, "num_envs=2", "num_steps=4", "num_minibatches=1", override])
    t = build_trainer(c)
    why = fused.why_not(t.policy, t.env, t.sampler, False)
    assert why is not None and reason in why
    assert fused.why_not(t.policy, t.env, t.sampler, True) is not None


def test_the_jax_backend_and_several_devices_keep_the_step_by_step_rollout():
    c = load_config("mpe_simple_spread_ppo", ["backend=jax", "num_envs=2", "num_steps=4", "num_minibatches=1"])
    t = build_trainer(c)
    assert "kernel env" in fused.why_not(t.policy, t.env, t.sampler, False)
    c = load_config("mpe_simple_spread_ppo", [*BASE, "num_envs=2", "num_steps=4", "num_minibatches=1"])
    t = build_trainer(c)
    assert "several devices" in fused.why_not(t.policy, t.env, t.sampler, True)


def test_the_trainer_fuses_on_the_cuda_backend_only():
    c = load_config("mpe_simple_spread_ppo", [*BASE, "num_envs=2", "num_steps=4",
                                              "num_minibatches=1"])
    t = build_trainer(c)
    assert fused.why_not(t.policy, t.env, t.sampler, False) is None
    assert fused.plan(t.policy, t.env, None, t.sampler, False) is None  # cpu: step by step
    assert t.rollout_path == "step by step: the cpu backend (XLA:CPU's matmuls are faster there)"


def test_large_models_keep_the_step_by_step_rollout(monkeypatch):
    c = load_config("tag_warpdrive_default", [*BASE, "num_envs=2", "num_steps=4",
                                              "num_minibatches=2"])
    t = build_trainer(c)
    monkeypatch.setattr(t.env, "backend", "cuda")  # the choice, without a GPU
    words = fused.mlp_words(t.policy.nets["tagger"], t.env.obs_dim, 1)
    rs = jax.eval_shape(t.init, jax.random.PRNGKey(0))
    count = sum(x.size for x in jax.tree.leaves(rs.learner.params["tagger"]))
    assert fused.param_count(words) == count > fused.MAX_FUSED_PARAMS
    assert fused.choice(t.policy, t.env, "cuda", False) == (
        f"step by step: {count} parameters per group (fused up to {fused.MAX_FUSED_PARAMS})")
    c = load_config("tag_duel_cpu", [*BASE, "num_envs=2", "num_steps=4", "num_minibatches=2"])
    t = build_trainer(c)
    monkeypatch.setattr(t.env, "backend", "cuda")
    assert fused.choice(t.policy, t.env, "cuda", False) == "fused"
    # Many envs: past MAX_FUSED_WORK agents x parameters a launch.
    n = fused.param_count(fused.mlp_words(t.policy.nets["tagger"], t.env.obs_dim, 1))
    envs = fused.MAX_FUSED_WORK // (n * t.env.num_agents) + 1
    assert fused.choice(t.policy, t.env, "cuda", False, envs - 1) == "fused"
    assert fused.choice(t.policy, t.env, "cuda", False, envs) == (
        f"step by step: {envs * t.env.num_agents} agents x {n} parameters a launch "
        "(fused up to 1e+08)")
    # Seeds vmapped fold their envs into one launch (summary.json's path with --seeds).
    assert fused.seeds_path("fused", t.policy, t.env, "cuda", envs // 2, 1) == "fused"
    assert fused.seeds_path("fused", t.policy, t.env, "cuda", envs // 2, 3).startswith(
        f"step by step: {envs // 2 * 3 * t.env.num_agents} agents x")
    assert fused.seeds_path("step by step: x", t.policy, t.env, "cuda", 2, 3) == "step by step: x"


def test_packed_parameters_follow_the_layers_in_order():
    c = load_config("mpe_simple_spread_ppo", [*BASE, "num_envs=2", "num_steps=4", "num_minibatches=1",
                                              "policies.agent.hidden_sizes=[8, 4]"])
    t = build_trainer(c)
    rs = t.init(jax.random.PRNGKey(0))
    packed = fused.pack(rs.learner.params, ["agent"])
    words = fused.mlp_words(t.policy.nets["agent"], t.env.obs_dim, 1)
    obs_dim, logits = t.env.obs_dim, sum(t.policy.nvec)
    # Two towers of (obs->8, 8->4), the policy head 4->logits, the value head 4->1.
    sizes = 2 * (obs_dim * 8 + 8 + 8 * 4 + 4) + 4 * logits + logits + 4 + 1
    assert packed.shape == (1, sizes) and packed.dtype == jnp.float32
    assert words == (obs_dim, 2, 0, 0, logits, 1, 8, 4)
    layer0 = rs.learner.params["agent"]["params"]["Dense_0"]
    np.testing.assert_array_equal(packed[0, :obs_dim * 8], layer0["kernel"].ravel())
    np.testing.assert_array_equal(packed[0, obs_dim * 8:obs_dim * 8 + 8], layer0["bias"])
    value_bias = rs.learner.params["agent"]["params"]["Dense_5"]["bias"]
    np.testing.assert_array_equal(packed[0, -1:], value_bias)


def test_summary_names_the_rollout_path(tmp_path):
    import json

    from jaxwarp.run.loop import train_run

    c = load_config("cartpole_ppo", [*BASE, "num_envs=4", "num_steps=8", "num_minibatches=1",
                                     "total_env_steps=64", "chunk_updates=2",
                                     "checkpoint_every=2"])
    run = train_run(c, tmp_path / "run", progress=False)
    want = "step by step: the cpu backend (XLA:CPU's matmuls are faster there)"
    assert run.summary["rollout"] == want
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["rollout"] == want
    # and which layers ran the group's mlp (the fused kernels need a CUDA GPU)
    assert summary["model_layers"] == {"agent": "XLA's layers: no CUDA GPU"}
