"""MPE simple_spread and simple_tag: the kernels (XLA:CPU; CUDA in the `gpu` cases,
skipped without a GPU) against the pure-JAX reference and each other, and both
against JaxMARL's SimpleSpreadMPE step by step from the same state and actions
(skipped where jaxmarl is not installed)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp.envs.mpe_simple_spread import MPESimpleSpread, MPESimpleSpreadParams
from jaxwarp.envs.mpe_simple_tag import MPESimpleTag, MPESimpleTagParams


# The kernel's expf/log1pf (contact force) and summation order differ from
# XLA's (and CUDA's from glibc's) by an ulp or so; resync keeps those from
# compounding.
TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("params", [{}, {"num_agents": 5, "num_landmarks": 4,
                                         "local_ratio": 0.3, "max_steps": 10},
                                    {"num_agents": 6, "num_landmarks": 6}])
def test_spread_kernel_matches_reference(params, kernel_pair):
    r = jaxwarp.testing.check_consistency("mpe_simple_spread", kernel_pair, num_envs=16,
                                          resync=True, **TOL, **params)
    assert r.ok, r
    assert r.episodes_finished == 32  # every env twice in 2 (max_steps + 1) + 1 steps


def test_spread_shapes_spaces_and_episode_length():
    env = MPESimpleSpread(backend="cpu")
    assert env.num_agents == 3 and env.obs_dim == 18
    assert env.action_space.nvec == (5,)
    assert set(env.policy_groups) == {"agent"}
    obs, s = jax.jit(env.reset, static_argnums=1)(jax.random.PRNGKey(0), 4)
    assert obs.shape == (4, 3, 18) and obs.dtype == jnp.float32
    assert s.timestep.shape == (4,) and s.timestep.dtype == jnp.int32
    assert float(jnp.abs(s.x).max()) <= 1.0 and float(jnp.abs(s.lm_y).max()) <= 1.0
    np.testing.assert_array_equal(obs[..., 14:], 0.0)  # communication: silent agents
    step = jax.jit(env.step)
    act = jnp.zeros((4, 3, 1), jnp.int32)
    for t in range(26):
        obs, s, rew, done, info = step(jax.random.PRNGKey(t + 1), s, act)
        assert rew.shape == (4, 3) and rew.dtype == jnp.float32 and done.dtype == jnp.bool_
        # JaxMARL: done = step >= max_steps before the step, so 26 steps per episode.
        assert bool(done.all()) == (t == 25), t
        assert not bool(info["terminated"].any())
    assert int(s.timestep.max()) == 0


def test_spread_params_validation():
    with pytest.raises(ValueError, match="num_landmarks"):
        MPESimpleSpreadParams(num_agents=2, num_landmarks=3)
    with pytest.raises(ValueError, match="local_ratio"):
        MPESimpleSpreadParams(local_ratio=1.5)


def _to_jaxmarl(s, num_landmarks):
    from jaxmarl.environments.mpe.simple import State

    e, n = s.x.shape
    pos = jnp.concatenate([jnp.stack([s.x, s.y], -1),
                           jnp.stack([s.lm_x, s.lm_y], -1)[:, :num_landmarks]], axis=1)
    vel = jnp.concatenate([jnp.stack([s.vx, s.vy], -1),
                           jnp.zeros((e, num_landmarks, 2), jnp.float32)], axis=1)
    return State(p_pos=pos, p_vel=vel, c=jnp.zeros((e, n, 2), jnp.float32),
                 done=jnp.zeros((e,), bool), step=s.timestep)


@pytest.mark.parametrize("case", ["spread", "spread_4_2", "tag", "tag_2_2_3"])
def test_matches_jaxmarl_step_by_step(case):
    try:  # jaxmarl 0.2.0, installed with --no-deps (see README); any import failure skips
        from jaxmarl.environments.mpe.simple_spread import SimpleSpreadMPE
        from jaxmarl.environments.mpe.simple_tag import SimpleTagMPE
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"jaxmarl is not importable: {e!r}")

    if case.startswith("spread"):
        n, nl = (3, 3) if case == "spread" else (4, 2)
        ref = SimpleSpreadMPE(num_agents=n, num_landmarks=nl)
        p = MPESimpleSpreadParams(num_agents=n, num_landmarks=nl)
        cls = MPESimpleSpread
    else:
        ng, na, nl = (1, 3, 2) if case == "tag" else (2, 2, 3)
        n = ng + na
        ref = SimpleTagMPE(num_good_agents=ng, num_adversaries=na, num_obs=nl)
        p = MPESimpleTagParams(num_good_agents=ng, num_adversaries=na, num_obs=nl)
        cls = MPESimpleTag
    envs = [cls(p, backend=b) for b in ("jax", "cpu")]
    num_envs = 64
    _, s = envs[0].reset(jax.random.PRNGKey(0), num_envs)
    # Half the envs start crowded, so that the soft contacts and the collision
    # penalty are exercised.
    crowd = (jnp.arange(num_envs) % 2 == 0)[:, None]
    s = s.replace(x=jnp.where(crowd, s.x * 0.2, s.x), y=jnp.where(crowd, s.y * 0.2, s.y))
    ref_step = jax.jit(jax.vmap(ref.step_env))
    steps = [jax.jit(e.step) for e in envs]
    # simple_tag with more than one good agent: jaxwarp follows mpe2's rewards and
    # observations where JaxMARL differs (test_tag_matches_mpe2_step_by_step); the
    # physics and episode ends still agree.
    same_rewards_obs = case != "tag_2_2_3"
    collisions = dones = 0
    for t in range(30):
        k_act, k_step = jax.random.split(jax.random.PRNGKey(100 + t))
        act = jax.random.randint(k_act, (num_envs, n, 1), 0, 5, jnp.int32)
        acts = {a: act[:, i, 0] for i, a in enumerate(ref.agents)}
        r_obs, r_state, r_rew, r_done, _ = ref_step(jax.random.split(k_step, num_envs),
                                                    _to_jaxmarl(s, nl), acts)
        width = max(r_obs[a].shape[-1] for a in ref.agents)  # tag: good agents pad with 0
        r_obs = np.stack([np.pad(r_obs[a], ((0, 0), (0, width - r_obs[a].shape[-1])))
                          for a in ref.agents], 1)
        r_rew = np.stack([r_rew[a] for a in ref.agents], 1)
        r_done = np.asarray(r_done["__all__"])
        outs = [st(k_step, s, act) for st in steps]
        for obs, s_new, rew, done, _ in outs:
            np.testing.assert_array_equal(np.asarray(done), r_done)
            live = ~r_done
            if same_rewards_obs:
                np.testing.assert_allclose(rew, r_rew, **TOL)
                np.testing.assert_allclose(np.asarray(obs)[live], r_obs[live], **TOL)
            np.testing.assert_allclose(np.asarray(s_new.x)[live],
                                       np.asarray(r_state.p_pos)[live, :n, 0], **TOL)
            np.testing.assert_allclose(np.asarray(s_new.vy)[live],
                                       np.asarray(r_state.p_vel)[live, :n, 1], **TOL)
        pos = np.asarray(r_state.p_pos)[:, :n]
        d = np.linalg.norm(pos[:, :, None] - pos[:, None], axis=-1)
        collisions += int(((d < 0.12) & ~np.eye(n, dtype=bool)).sum())
        s = outs[0][1]
        dones += int(r_done.sum())
    assert dones == num_envs  # 30 steps cross the end of the first episode
    assert collisions > 20  # pairs closer than any two agents' radii


def test_tag_kernel_matches_reference(kernel_pair):
    r = jaxwarp.testing.check_consistency("mpe_simple_tag", kernel_pair, num_envs=16,
                                          resync=True, **TOL)
    assert r.ok, r
    assert r.episodes_finished == 32


def test_tag_groups():
    env = MPESimpleTag(backend="cpu")
    assert env.num_agents == 4 and env.obs_dim == 16
    np.testing.assert_array_equal(env.policy_groups["adversary"], [0, 1, 2])
    np.testing.assert_array_equal(env.policy_groups["agent"], [3])
    with pytest.raises(ValueError, match="num_obs"):
        MPESimpleTagParams(num_good_agents=1, num_adversaries=1, num_obs=3)


# --- simple_tag against mpe2 (the original MPE, PettingZoo's successor) ----------------
def _tag_env(backend, ng, na, nl, **kw):
    return MPESimpleTag(MPESimpleTagParams(num_good_agents=ng, num_adversaries=na,
                                           num_obs=nl, **kw), backend=backend)


@pytest.mark.parametrize("backend", ["jax", "cpu"])
def test_tag_two_good_agents_issue_example(backend):
    # Adversaries at (0, 0), (.5, .5), (.5, -.5); good agent 0 at (.05, 0) touches
    # adversary 0 (distance .05 < .05 + .075), good agent 1 at (-.5, .5) touches no one.
    # mpe2: adversaries +10 for the one contact, agent_0 -10, agent_1 0 (JaxMARL gives
    # both good agents the last one's contacts: 0 and 0).
    env = _tag_env(backend, 2, 3, 2)
    _, s = env.reset(jax.random.PRNGKey(0), 1)
    s = s.replace(x=jnp.array([[0, .5, .5, .05, -.5]], jnp.float32),
                  y=jnp.array([[0, .5, -.5, 0, .5]], jnp.float32),
                  lm_x=jnp.array([[.9, -.9, 0, 0, 0]], jnp.float32),
                  lm_y=jnp.array([[-.9, -.9, 0, 0, 0]], jnp.float32))
    vx = jnp.array([[.1, .2, .3, .4, .5]], jnp.float32)
    s = s.replace(vx=vx, vy=-vx)
    obs, s2, rew, _, _ = env.step(jax.random.PRNGKey(1), s, jnp.zeros((1, 5, 1), jnp.int32))
    # Velocities move the agents by at most .05 in x: the same contacts.
    np.testing.assert_array_equal(np.asarray(rew), [[10, 10, 10, -10, 0]])
    assert env.obs_dim == 20 and env.agent_obs_dims == (20, 20, 20, 18, 18)
    assert env.agent_names == ("adversary_0", "adversary_1", "adversary_2", "agent_0",
                               "agent_1")
    o = np.asarray(obs)[0]
    v = np.stack([np.asarray(s2.vx)[0], np.asarray(s2.vy)[0]], -1)  # [agents, 2]
    tail = 4 + 2 * 2 + 2 * 4  # vel, pos, 2 obstacles, 4 other agents
    for i in range(3):  # adversaries: both good agents' velocities
        np.testing.assert_array_equal(o[i, tail:], v[3:].reshape(-1))
    np.testing.assert_array_equal(o[3, tail:], [*v[4], 0, 0])  # agent_0 sees agent_1
    np.testing.assert_array_equal(o[4, tail:], [*v[3], 0, 0])  # and agent_1 agent_0


def _mpe2_load(world, s, e, nl):
    """Copies jaxwarp env e's state into an mpe2 World (float64)."""
    for i, a in enumerate(world.agents):
        a.state.p_pos = np.array([s.x[e, i], s.y[e, i]], np.float64)
        a.state.p_vel = np.array([s.vx[e, i], s.vy[e, i]], np.float64)
    for lm, (lx, ly) in zip(world.landmarks, zip(s.lm_x[e, :nl], s.lm_y[e, :nl])):
        lm.state.p_pos = np.array([lx, ly], np.float64)


@pytest.mark.parametrize("sizes", [(1, 3, 2), (2, 3, 2), (3, 2, 1)])
@pytest.mark.parametrize("backend", ["jax", "cpu"])
def test_tag_matches_mpe2_step_by_step(sizes, backend):
    simple_tag_v3 = pytest.importorskip("mpe2.simple_tag_v3")
    ng, na, nl = sizes
    n = ng + na
    ref = simple_tag_v3.parallel_env(num_good=ng, num_adversaries=na, num_obstacles=nl,
                                     max_cycles=10_000)
    ref.reset(seed=0)
    world = ref.unwrapped.world
    assert tuple(ref.possible_agents) == _tag_env("jax", ng, na, nl).agent_names
    env = _tag_env(backend, ng, na, nl, max_steps=1000)
    assert env.agent_obs_dims == tuple(ref.observation_space(a).shape[0]
                                       for a in ref.possible_agents)
    num_envs = 8
    _, s = env.reset(jax.random.PRNGKey(0), num_envs)
    # Half the envs start crowded: contacts, rewards and soft collisions.
    crowd = (jnp.arange(num_envs) % 2 == 0)[:, None]
    s = s.replace(x=jnp.where(crowd, s.x * 0.15, s.x), y=jnp.where(crowd, s.y * 0.15, s.y))
    step = jax.jit(env.step)
    contacts = 0
    for t in range(12):
        act = np.asarray(jax.random.randint(jax.random.PRNGKey(100 + t), (num_envs, n, 1), 0,
                                            5, jnp.int32))
        s_np = jax.tree.map(np.asarray, s)
        obs, s, rew, done, _ = step(jax.random.PRNGKey(t), s, jnp.asarray(act))
        assert not bool(done.any())
        obs, rew = np.asarray(obs), np.asarray(rew)
        for e in range(num_envs):
            _mpe2_load(world, s_np, e, nl)
            r_obs, r_rew, *_ = ref.step({a: int(act[e, i, 0])
                                         for i, a in enumerate(ref.possible_agents)})
            for i, a in enumerate(ref.possible_agents):
                d = r_obs[a].shape[0]
                np.testing.assert_allclose(obs[e, i, :d], r_obs[a], rtol=1e-5, atol=1e-5)
                np.testing.assert_array_equal(obs[e, i, d:], 0.0)
                np.testing.assert_allclose(rew[e, i], r_rew[a], rtol=1e-5, atol=1e-5)
            contacts += int(rew[e, :na].max() > 0)
    assert contacts > 5  # the crowded envs see adversary/good contacts


# ---------------------------------------------------------------------------
# Episode length: JaxMARL's max_steps + 1 steps (default) or mpe2's max_steps.
# ---------------------------------------------------------------------------
def _done_steps(env, num_envs, num_steps):
    """The 1-based steps at which env 0 .. num_envs-1 report done, per env."""
    step = jax.jit(env.step)
    cpu = jax.devices("cpu")[0]  # the cpu backend's targets exist on XLA:CPU only
    with jax.default_device(cpu):
        _, s = jax.jit(env.reset, static_argnums=1)(jax.random.PRNGKey(0), num_envs)
        out = []
        for t in range(num_steps):
            k = jax.random.PRNGKey(t + 1)
            a = env.action_space.sample(k, (num_envs, env.num_agents))
            _, s, _, done, info = step(k, s, a)
            assert not bool(info["terminated"].any())
            out.append(np.asarray(done))
    done = np.stack(out)
    return [list(np.flatnonzero(done[:, e]) + 1) for e in range(num_envs)]


@pytest.mark.parametrize("backend", ["cpu", "jax"])
@pytest.mark.parametrize("name", ["mpe_simple_spread", "mpe_simple_tag"])
@pytest.mark.parametrize("truncation, max_steps, length", [
    ("jaxmarl", 25, 26), ("mpe2", 25, 25), ("jaxmarl", 6, 7), ("mpe2", 6, 6), ("mpe2", 1, 1)])
def test_episode_length_conventions(name, backend, truncation, max_steps, length):
    env = jaxwarp.make(name, backend=backend, max_steps=max_steps, truncation=truncation)
    assert env.params.max_episode_steps == length
    assert jaxwarp.core.episode_length(env) == length
    # Every env is truncated on steps length, 2 length, ... and on no other.
    num_steps = 2 * length + 1
    want = [t for t in range(1, num_steps + 1) if t % length == 0]
    assert _done_steps(env, 3, num_steps) == [want] * 3


def test_default_episode_is_jaxmarl_s_26_steps():
    for p in (MPESimpleSpreadParams(), MPESimpleTagParams()):
        assert p.truncation == "jaxmarl" and p.max_steps == 25 and p.max_episode_steps == 26


@pytest.mark.parametrize("name", ["mpe_simple_spread", "mpe_simple_tag"])
def test_mpe2_truncation_matches_mpe2_max_cycles(name):
    """truncation="mpe2", max_steps=T: done on the step where mpe2's
    parallel_env(max_cycles=T) truncates every agent."""
    mod = pytest.importorskip(f"mpe2.{name[4:]}_v3")
    for cycles in (3, 25):
        ref = mod.parallel_env(max_cycles=cycles)
        ref.reset(seed=0)
        steps = 0
        while ref.agents:
            _, _, term, trunc, _ = ref.step({a: 0 for a in ref.agents})
            steps += 1
            assert not any(term.values())
            if all(trunc.values()):
                break
        env = jaxwarp.make(name, backend="jax", max_steps=cycles, truncation="mpe2")
        assert steps == cycles == jaxwarp.core.episode_length(env)
        assert _done_steps(env, 2, steps) == [[steps]] * 2


@pytest.mark.parametrize("cls", [MPESimpleSpreadParams, MPESimpleTagParams])
def test_truncation_validation(cls):
    expected = r"truncation='gym'; expected one of \('jaxmarl', 'mpe2'\)"
    with pytest.raises(ValueError, match=expected):
        cls(truncation="gym")
    # max_steps=0 reads as episodes of no steps: refused under either convention
    # (JaxMARL's counting accepted it, as one-step episodes).
    for truncation in ("mpe2", "jaxmarl"):
        with pytest.raises(ValueError, match=r"max_steps=0; expected an int >= 1"):
            cls(max_steps=0, truncation=truncation)
    assert cls(max_steps=1).max_episode_steps == 2  # JaxMARL: max_steps + 1 steps
    name = "mpe_simple_spread" if cls is MPESimpleSpreadParams else "mpe_simple_tag"
    with pytest.raises(ValueError, match=rf"^{name}: max_steps=0; expected an int >= 1$"):
        jaxwarp.make(name, backend="jax", max_steps=0)


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_tag_several_good_agents_kernel_matches_reference(backend):
    # The header's per-agent reward row and good-agent velocity block, over whole
    # episodes with resets (GPU: CUDA against the pure-JAX reference).
    r = jaxwarp.testing.check_consistency("mpe_simple_tag", (backend, "jax"), num_envs=16,
                                          resync=True, **TOL, num_good_agents=3,
                                          num_adversaries=2, num_obs=3)
    assert r.ok, r
    assert r.episodes_finished == 32
