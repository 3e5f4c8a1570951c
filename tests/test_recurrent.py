"""Recurrent policies (model: gru, the carry contract) and the centralised
critic (critic: centralised): the carry through the rollout and its replay
in the update, checkpoints, eval, the model check and bad input."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwarp.run.evaluate import evaluate, load_run
from jaxwarp.run.loop import train_run
from jaxwarp.models import CentralGRUCritic, GRUActorCritic
from jaxwarp.models import recurrent
from jaxwarp.models.recurrent import gru_scan, scan_batch_first
from jaxwarp.train import ConfigError, build_trainer, load_config, losses, make_train

GRU = ["backend=jax", "sampler=jax", "policies.agent.model=gru",
       "policies.agent.hidden_sizes=[16]", "policies.agent.rnn_size=8"]


def gru_config(*more: str):
    return load_config("cartpole_ppo", [*GRU, "num_envs=8", "num_steps=16",
                                        "total_env_steps=512", "num_minibatches=2",
                                        "update_epochs=2", *more])


def test_gru_carry_is_state_per_agent_and_resets_where_episodes_begin():
    t = build_trainer(gru_config())
    rs = jax.jit(t.init)(jax.random.PRNGKey(0))
    carry = rs.envs.carry["agent"]
    assert carry.shape == (8, 1, 8) and carry.dtype == jnp.float32
    assert rs.envs.first.shape == (8,) and bool(rs.envs.first.all())
    net, params = t.models["agent"], rs.learner.params["agent"]
    obs = jax.random.normal(jax.random.PRNGKey(1), (8, 1, 4))
    warm = jnp.full((8, 1, 8), 0.7, jnp.float32)
    reset = jnp.arange(8)[:, None] % 2 == 0
    carry, (logits, value) = net.apply(params, warm, obs, reset)
    fresh, (l0, v0) = net.apply(params, net.initialize_carry((8, 1)), obs, jnp.ones((8, 1), bool))
    # Where reset, the warm carry is ignored; elsewhere it changes the output.
    np.testing.assert_array_equal(carry[0::2], fresh[0::2])
    np.testing.assert_array_equal(logits[0::2], l0[0::2])
    assert not np.allclose(logits[1::2], l0[1::2])
    assert logits.shape == (8, 1, 2) and value.shape == (8, 1)


def test_replay_from_the_stored_carry_reproduces_the_rollout():
    """PPO's minibatches replay each env's sequence from the rollout's initial
    carry (BPTT): the log-probs of the taken actions equal the rollout's."""
    t = build_trainer(gru_config())
    rs = jax.jit(t.init)(jax.random.PRNGKey(0))
    rs, _ = jax.jit(lambda s: t.run(s, 1))(rs)  # a carry that is not all zeros
    _, _, traj = jax.jit(t.rollout)(rs, jax.random.PRNGKey(5))
    assert bool(traj.first[1:].any())  # episodes ended inside the rollout: resets replayed
    logits, value = t.policy.sequence("agent", rs.learner.params["agent"], None, traj.obs,
                                      rs.envs.carry["agent"], traj.first, None)
    lp = losses.log_prob(logits, traj.actions, t.policy.nvec)
    np.testing.assert_allclose(lp, traj.log_prob, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(value, traj.value, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("algorithm", ["ppo", "a2c"])
def test_gru_trains_deterministically_and_over_seeds(algorithm):
    c = gru_config(f"algorithm={algorithm}")
    train = jax.jit(make_train(c))
    rs1, m1 = train(jax.random.PRNGKey(3))
    rs2, m2 = train(jax.random.PRNGKey(3))
    for a, b in zip(jax.tree.leaves(rs1), jax.tree.leaves(rs2)):
        np.testing.assert_array_equal(a, b)
    assert np.isfinite(np.asarray(m1["agent/loss"])).all()
    assert float(m1["finite"].min()) == 1.0
    # Over seeds in one program: seed 3 of the batch is the single run.
    rsv, mv = jax.jit(jax.vmap(make_train(c)))(jnp.stack([jax.random.PRNGKey(2),
                                                          jax.random.PRNGKey(3)]))
    np.testing.assert_allclose(mv["agent/loss"][1], m1["agent/loss"], rtol=1e-5, atol=1e-6)
    assert rsv.envs.carry["agent"].shape == (2, 8, 1, 8)


def test_gru_learns_cartpole():
    c = load_config("cartpole_ppo", [*GRU[:3], "policies.agent.hidden_sizes=[32]",
                                     "policies.agent.rnn_size=32", "total_env_steps=60000"])
    _, m = jax.jit(make_train(c))(jax.random.PRNGKey(0))
    ret = np.asarray(m["agent/episode_return"])
    assert ret[-1] > 2 * ret[0] and ret[-1] > 60, ret[[0, -1]]


def test_gru_checkpoint_resume_and_eval(tmp_path):
    c = gru_config("total_env_steps=1024", "chunk_updates=2", "checkpoint_every=4")
    full = train_run(c, tmp_path / "full", progress=False)
    train_run(c, tmp_path / "part", progress=False, stop_after_updates=6)
    resumed = train_run(None, tmp_path / "part", resume=True, progress=False)
    for a, b in zip(jax.tree.leaves(full.state), jax.tree.leaves(resumed.state)):
        np.testing.assert_array_equal(a, b)
    assert full.summary["recurrent_learner"] == {"agent": "sequence"}
    run = load_run(tmp_path / "full")
    result = evaluate(run, episodes=8, seed=0)
    assert result["episodes"] == 8


def test_centralised_critic_reads_the_global_state():
    c = load_config("mpe_simple_spread_ppo", ["backend=jax", "sampler=jax", "num_envs=8",
                                              "num_steps=8", "total_env_steps=128",
                                              "critic=centralised"])
    t = build_trainer(c)
    rs = jax.jit(t.init)(jax.random.PRNGKey(0))
    (g,) = t.groups
    assert set(rs.learner.params[g]) == {"actor", "critic"}
    n = t.env.num_agents
    kernel = rs.learner.params[g]["critic"]["params"]["Dense_0"]["kernel"]
    assert kernel.shape[0] == n * t.env.observation_space.shape[-1]  # all observations
    _, _, traj = jax.jit(t.rollout)(rs, jax.random.PRNGKey(1))
    assert traj.state.shape == (8, 8, kernel.shape[0])
    v = np.asarray(traj.value)
    np.testing.assert_array_equal(v, np.broadcast_to(v[..., :1], v.shape))  # one per env
    rs, m = jax.jit(lambda s: t.run(s, 2))(rs)
    assert np.isfinite(np.asarray(m[f"{g}/loss"])).all()


def test_centralised_critic_with_gru_is_recurrent_per_env():
    """Under a gru actor the centralised critic is a GRU too (MAPPO-RNN): one
    carry per env beside the actor's per agent, reset where episodes begin,
    replayed in the update like the actor's."""
    c = load_config("mpe_simple_spread_ppo", ["backend=jax", "sampler=jax", "num_envs=8",
                                              "num_steps=32", "total_env_steps=512",
                                              "critic=centralised", "num_minibatches=2",
                                              "policies.agent.model=gru",
                                              "policies.agent.hidden_sizes=[16]",
                                              "policies.agent.rnn_size=8"])
    t = build_trainer(c)
    rs = jax.jit(t.init)(jax.random.PRNGKey(0))
    n = t.env.num_agents
    assert jax.tree.map(lambda x: x.shape, rs.envs.carry["agent"]) == {"actor": (8, n, 8),
                                                                  "critic": (8, 8)}
    assert "GRUCell_0" in rs.learner.params["agent"]["critic"]["params"]
    rs, m = jax.jit(lambda s: t.run(s, 1))(rs)
    assert np.isfinite(np.asarray(m["agent/loss"])).all()
    assert float(jnp.abs(rs.envs.carry["agent"]["critic"]).max()) > 0
    _, _, traj = jax.jit(t.rollout)(rs, jax.random.PRNGKey(5))
    assert bool(traj.first[1:].any())  # MPE's 25-step episodes end inside 32 steps
    logits, value = t.policy.sequence("agent", rs.learner.params["agent"], None, traj.obs,
                                      rs.envs.carry["agent"], traj.first, traj.state)
    np.testing.assert_allclose(value, traj.value, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(losses.log_prob(logits, traj.actions, t.policy.nvec),
                               traj.log_prob, rtol=1e-5, atol=1e-5)
    v = np.asarray(traj.value)
    np.testing.assert_array_equal(v, np.broadcast_to(v[..., :1], v.shape))  # one per env
    # The critic's memory matters: a warm critic carry changes the value.
    state = traj.state[0]
    cold, _, v_cold = t.policy.forward("agent", rs.learner.params["agent"], None, traj.obs[0],
                                       t.policy.group_carry("agent", 8),
                                       jnp.zeros((8, n), bool), state)
    warm = jax.tree.map(lambda x: jnp.full_like(x, 0.5), cold)
    _, _, v_warm = t.policy.forward("agent", rs.learner.params["agent"], None, traj.obs[0], warm,
                                    jnp.zeros((8, n), bool), state)
    assert not np.allclose(v_cold, v_warm)


def test_bad_input_is_one_line_naming_the_key():
    with pytest.raises(ConfigError, match=r"critic=centralised: cartpole declares no global"):
        build_trainer(load_config("cartpole_ppo", ["backend=jax", "critic=centralised"]))
    with pytest.raises(ConfigError, match=r"policies.agent.rnn_size: expected an integer >= 1"):
        load_config("cartpole_ppo", ["policies.agent.rnn_size=0"])
    with pytest.raises(ConfigError, match=r"critic=.*expected independent or centralised"):
        load_config("cartpole_ppo", ["critic=mappo"])


class _NoCarryMethods(nn.Module):
    """A recurrent-style module that lacks initialize_carry."""

    @nn.compact
    def __call__(self, carry, obs, reset):
        return carry, (nn.Dense(2)(obs), obs[..., 0])


class _WrongLogits(nn.Module):
    @nn.compact
    def __call__(self, obs):
        return nn.Dense(5)(obs)[..., None], obs[..., 0]


class _CarryChanges(nn.Module):
    def initialize_carry(self, batch_shape):
        return jnp.zeros((*batch_shape, 3))

    @nn.compact
    def __call__(self, carry, obs, reset):
        return jnp.zeros(carry.shape[:-1] + (4,)), (nn.Dense(2)(obs), obs[..., 0])


class _FixedCarry(_CarryChanges):
    """initialize_carry ignores its batch_shape."""

    def initialize_carry(self, batch_shape):
        return jnp.zeros((8,))


class _NoReset(_CarryChanges):
    """Keeps its carry where an episode begins."""

    @nn.compact
    def __call__(self, carry, obs, reset):
        return carry, (nn.Dense(2)(jnp.concatenate([obs, carry], -1)), obs[..., 0])


class _SequenceWrongValue(GRUActorCritic):
    """A sequence form whose value misses the agents axis."""

    def sequence(self, carry, obs, reset):
        carry, (logits, value) = super().sequence(carry, obs, reset)
        return carry, (logits, value[..., 0])


@pytest.mark.parametrize("module, match", [
    (_SequenceWrongValue((2,), (8,), 4), r"policies.agent.model \(_SequenceWrongValue, "
     r"recurrent\): its sequence form returned logits \[3, 2, 1, 2\] and value \[3, 2\] for "
     r"obs f32\[3, 2, 1, 4\]; expected the step form's shapes with a leading T: logits "
     r"\[3, 2, 1, 2\] and value \[3, 2, 1\]"),
    (_NoCarryMethods(), r"policies.agent.model \(_NoCarryMethods, feed-forward\): failed on "
                        r"obs .*initialize_carry"),
    (_WrongLogits(), r"policies.agent.model \(_WrongLogits, feed-forward\): for obs "
                     r"f32\[2, 1, 4\] it returned logits \[2, 1, 5, 1\] and value \[2, 1\]; "
                     r"expected logits \[2, 1, 2\]"),
    (_CarryChanges(), r"policies.agent.model \(_CarryChanges, recurrent\): the carry it "
                      r"returns differs from initialize_carry's: for a carry of \[2, 1, 3\] "
                      r"it returned \[2, 1, 4\]"),
    (_NoReset(), r"policies.agent.model \(_NoReset, recurrent\): it ignores reset: with "
                 r"reset true, a carry of initialize_carry's values \+ 0.5 gave other logits"),
    (_FixedCarry(), r"policies.agent.model \(_FixedCarry, recurrent\): initialize_carry\(\(2, "
                    r"1\)\) returned a carry of \[8\]; every leaf must lead with the "
                    r"batch_shape it is given, \[2, 1, ...\]"),
])
def test_a_model_that_breaks_the_contract_is_named_before_compiling(module, match):
    c = load_config("cartpole_ppo", ["backend=jax", "sampler=jax"])
    with pytest.raises(ConfigError, match=match):
        build_trainer(c, models={"agent": module})


def test_partially_observed_cartpole_hides_the_velocities():
    import jaxwarp
    from jaxwarp._ffi import gpu_available

    for backend in ("jax", "cpu", *(("cuda",) if gpu_available() else ())):
        env = jaxwarp.make("cartpole", backend=backend, hide_velocities=True)
        # The cpu backend's handlers run on XLA:CPU, also on a machine with a GPU.
        device = jax.devices("cpu")[0] if backend == "cpu" else None
        with jax.default_device(device):
            obs, s = env.reset(jax.random.key(0), 4)
            obs, s, *_ = env.step(jax.random.key(1), s, jnp.ones((4, 1, 1), jnp.int32))
        assert float(jnp.abs(obs[..., 1::2]).max()) == 0.0
        np.testing.assert_array_equal(obs[..., 0], s.x)
        assert float(jnp.abs(s.x_dot).max()) > 0


def _step_by_step(net, params, carry, obs, reset):
    """T steps of a recurrent model's step form by a scan."""
    return jax.lax.scan(lambda c, x: net.apply(params, c, *x), carry, (obs, reset))


@pytest.mark.parametrize("net, width", [(GRUActorCritic((3, 2), (16, 12), 8, "relu"), 10),
                                        (CentralGRUCritic((16,), 8, "tanh"), 6)])
def test_the_sequence_form_is_the_step_form_over_time(net, width):
    """`sequence` (embedding, heads and the gates' input projections over all T x B
    rows, one matmul a step) is the same function as T steps of `__call__`, with
    the same parameters, and so are its gradients."""
    t, b = 7, (4, 3)
    obs = jax.random.normal(jax.random.PRNGKey(0), (t, *b, width))
    reset = jax.random.bernoulli(jax.random.PRNGKey(1), 0.3, (t, *b))
    carry = jax.random.normal(jax.random.PRNGKey(2), (*b, 8))
    params = net.init(jax.random.PRNGKey(3), carry, obs[0], reset[0])

    def seq(p):
        return net.apply(p, carry, obs, reset, method="sequence")

    want, got = _step_by_step(net, params, carry, obs, reset), seq(params)
    assert jax.tree.structure(want) == jax.tree.structure(got)
    for a, b_ in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
        assert a.shape == b_.shape and a.dtype == b_.dtype
        np.testing.assert_allclose(a, b_, rtol=1e-5, atol=1e-6)
    assert not np.allclose(jax.tree.leaves(got)[-1][0], jax.tree.leaves(got)[-1][-1])

    def total(out):
        return sum(x.sum() for x in jax.tree.leaves(out[1]))

    g_want = jax.grad(lambda p: total(_step_by_step(net, p, carry, obs, reset)))(params)
    g_got = jax.grad(lambda p: total(seq(p)))(params)
    for a, b_ in zip(jax.tree.leaves(g_want), jax.tree.leaves(g_got)):
        np.testing.assert_allclose(a, b_, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("weights_batched", [True, False])
@pytest.mark.parametrize("t", [6, 0])
def test_scan_batch_first_is_lax_scan_alone_and_under_vmap(reverse, weights_batched, t):
    """The loop the GRU runs in: the same bits as `lax.scan` alone, vmapped (the
    weights, passed as consts, batched or shared; one scanned input shared by
    all runs) and under two vmaps; also over no steps."""
    runs, b = 3, 4
    k = jax.random.split(jax.random.PRNGKey(0), 3)
    w = {"w": jax.random.normal(k[0], (runs, 5, 5) if weights_batched else (5, 5)), "b": 0.5}
    xs = (jax.random.normal(k[1], (runs, t, b, 5)), jax.random.bernoulli(k[2], 0.3, (t, b)))

    def step(c, x, w):
        h = jnp.where(x[1][:, None], 0.0, jnp.tanh(c @ w["w"] + x[0] + w["b"]))
        return h, (h, x[1].astype(jnp.int32))

    def want(w, xs):
        return jax.lax.scan(lambda c, x: step(c, x, w), jnp.ones((b, 5)), xs, reverse=reverse)

    def got(w, xs):
        return scan_batch_first(step, jnp.ones((b, 5)), xs, (w,), reverse)

    axes = ({"w": 0 if weights_batched else None, "b": None}, (0, None))
    one = ({**w, "w": w["w"][0]} if weights_batched else w, (xs[0][0], xs[1]))
    pairs = [(jax.vmap(want, axes)(w, xs), jax.jit(jax.vmap(got, axes))(w, xs)),
             (want(*one), got(*one))]
    nest = (jnp.stack([xs[0], xs[0][::-1]]), xs[1])
    pairs.append((jax.vmap(jax.vmap(want, axes), (None, (0, None)))(w, nest),
                  jax.vmap(jax.vmap(got, axes), (None, (0, None)))(w, nest)))
    for a, c in pairs:
        assert jax.tree.structure(a) == jax.tree.structure(c)
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(c)):
            assert x.shape == y.shape and x.dtype == y.dtype
            np.testing.assert_array_equal(x, y)


def test_the_gru_vmapped_over_runs_moves_no_axis_behind_time(monkeypatch):
    """Why `scan_batch_first` exists: vmapped over runs (seeds), the GRU's scan
    and its gradient lower with no transpose of the [runs, T, ...] arrays and no
    scatter, where the same scan over `lax.scan` transposes them; the gradients
    equal each run's own."""
    runs, t, b, h = 2, 5, 3, 4
    k = jax.random.split(jax.random.PRNGKey(0), 5)
    args = (jax.random.normal(k[0], (runs, t, b, 3 * h)), jax.random.normal(k[1], (runs, h, 3 * h)),
            jax.random.normal(k[2], (runs, h)), jax.random.normal(k[3], (runs, b, h)),
            jax.random.bernoulli(k[4], 0.3, (runs, t, b)))

    def grads(*a):
        return jax.grad(lambda *a: jnp.sin(gru_scan(*a)[1]).sum(), argnums=(0, 1, 2, 3))(*a)

    vmapped = jax.jit(jax.vmap(grads))
    text = vmapped.lower(*args).as_text()
    assert "transpose" not in text and "scatter" not in text
    for run in range(runs):
        for x, y in zip(jax.tree.leaves(vmapped(*args)),
                        jax.tree.leaves(grads(*jax.tree.map(lambda a: a[run], args)))):
            np.testing.assert_allclose(x[run], y, rtol=1e-6, atol=1e-6)
    monkeypatch.setattr(recurrent, "scan_batch_first", recurrent.scan_with_consts)
    assert "transpose" in jax.jit(jax.vmap(grads)).lower(*args).as_text()


class _StepOnlyGRU(nn.Module):
    """A user's recurrent model with the step form only."""

    @nn.compact
    def __call__(self, carry, obs, reset):
        carry = jnp.where(reset[..., None], 0.0, carry)
        carry, x = nn.GRUCell(8)(carry, obs)
        return carry, (nn.Dense(2)(x), nn.Dense(1)(x)[..., 0])

    def initialize_carry(self, batch_shape):
        return jnp.zeros((*batch_shape, 8), jnp.float32)


def test_the_learner_path_of_each_recurrent_group_is_named():
    """The shipped GRU runs its sequence form in the learner; a model with the
    step form only is replayed step by step, trains, and says so."""
    assert build_trainer(gru_config()).recurrent_learner == {"agent": "sequence"}
    mappo = build_trainer(load_config("mpe_simple_spread_ppo", [
        *GRU, "critic=centralised", "num_envs=8", "num_steps=16"]))
    assert mappo.recurrent_learner == {"agent": "sequence"}
    t = build_trainer(gru_config(), models={"agent": _StepOnlyGRU()})
    assert t.recurrent_learner == {"agent": "step by step"}
    rs, m = jax.jit(lambda k: t.run(t.init(k), 2))(jax.random.PRNGKey(0))
    assert np.isfinite(np.asarray(m["agent/loss"])).all()
    assert build_trainer(load_config("cartpole_ppo", ["backend=jax"])).recurrent_learner == {}
