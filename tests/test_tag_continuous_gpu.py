"""GPU tests: the CUDA kernels against the pure-JAX reference and the XLA:CPU
handlers, over whole episodes with resets. Skipped without a GPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp.testing import check_consistency

from _checks import assert_vmap_equals_loop, random_rollout

pytestmark = pytest.mark.gpu

SMALL = dict(num_taggers=2, num_runners=5, grid_length=5.0, tagging_distance=0.1,
             episode_length=60)

CASES = {
    "small_partial": dict(SMALL, num_other_agents_observed=4),
    "small_full": dict(SMALL, use_full_observation=True),
    "small_no_exit": dict(SMALL, num_other_agents_observed=6,
                          runner_exits_game_after_tagged=False),
    "warpdrive_default": dict(config="warpdrive_default", episode_length=100),
    "k20_selection_fallback": dict(config="warpdrive_default", num_other_agents_observed=20,
                                   episode_length=40),
    "agents_1000": dict(config="large", episode_length=20),
    # Full observations of 600 agents: more parts per row (600) than threads
    # per env (512), the kernel's other (agent, part) loop.
    "full_600": dict(num_taggers=20, num_runners=580, grid_length=30.0,
                     use_full_observation=True, episode_length=6),
    # State in global memory (too large for shared memory), grid of 50 x 50 cells.
    "agents_10000": dict(config="large", num_taggers=500, num_runners=9500, grid_length=316.0,
                         episode_length=4),
    # >= 256 agents: the kernel's k-nearest search goes through its cell grid.
    "grid_300_dense_k4": dict(num_taggers=30, num_runners=270, grid_length=12.0,
                              tagging_distance=0.05, num_other_agents_observed=4,
                              episode_length=30),
    "grid_1000_k16_no_exit": dict(config="large", num_other_agents_observed=16,
                                  runner_exits_game_after_tagged=False, episode_length=10),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_matches_cpu_bitwise(case):
    kw = dict(CASES[case])
    num_envs = 2 if "1000" in case else 8
    report = check_consistency(backends=("cuda", "cpu"), num_envs=num_envs, rtol=0, atol=0,
                               **kw)
    assert report.ok, str(report)
    assert report.episodes_finished >= num_envs, str(report)


@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_matches_jax(case):
    kw = dict(CASES[case])
    num_envs = 2 if "1000" in case else 8
    report = check_consistency(backends=("cuda", "jax"), num_envs=num_envs, rtol=1e-5,
                               atol=1e-6, **kw)
    assert report.ok, str(report)
    assert report.episodes_finished >= num_envs, str(report)


def test_cuda_vmap_over_seeds_equals_loop():
    env = jaxwarp.make("tag_continuous", backend="cuda", **SMALL, num_other_agents_observed=4)
    assert_vmap_equals_loop(lambda k: random_rollout(env, k, 4, 70),
                            jax.random.split(jax.random.key(3), 3))


def test_cuda_scan_body_has_no_state_copy():
    env = jaxwarp.make("tag_continuous", backend="cuda")
    obs, state = env.reset(jax.random.key(0), 16)

    def run(state, obs, key):
        def body(carry, k):
            state, obs = carry
            a = jnp.zeros((16, env.num_agents, 2), jnp.int32)
            obs, state, *_ = env.step(k, state, a)
            return (state, obs), None

        (state, obs), _ = jax.lax.scan(body, (state, obs), jax.random.split(key, 8))
        return state, obs

    hlo = jax.jit(run, donate_argnums=(0, 1)).lower(state, obs, jax.random.key(1)).compile()
    text = hlo.as_text()
    body = [c for c in text.split("\n\n") if "custom-call" in c and "tag_continuous" in c]
    assert body, "step custom call not found in the compiled HLO"
    for comp in body:
        copies = [ln for ln in comp.splitlines() if " copy(" in ln and "f32[16,110]" in ln]
        assert not copies, copies


@pytest.mark.parametrize("kw", [dict(config="large", episode_length=5),
                                dict(SMALL, use_full_observation=True, num_runners=590,
                                     grid_length=30.0, episode_length=5)])
def test_cuda_bfloat16_parts_are_float32_rounded(kw):
    """Where rows are not staged (1000 agents; full observations of 600),
    observations leave as (agent, part) pairs: in bf16 they equal the f32
    ones rounded to nearest even, bit for bit, through a reset."""
    from jaxwarp import authoring
    from jaxwarp.envs import tag_continuous as tc

    e32 = jaxwarp.make("tag_continuous", backend="cuda", **kw)
    e16 = jaxwarp.make("tag_continuous", backend="cuda", obs_dtype="bfloat16", **kw)
    assert authoring.launch_layout(tc.SPEC, e32.params, "cuda").obs_staged == 0
    o32, s32 = jax.jit(e32.reset, static_argnums=1)(jax.random.key(5), 3)
    o16, s16 = jax.jit(e16.reset, static_argnums=1)(jax.random.key(5), 3)
    assert o16.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(o16), np.asarray(o32.astype(jnp.bfloat16)))
    step32, step16 = jax.jit(e32.step), jax.jit(e16.step)
    ended = np.zeros(3, bool)
    for t in range(7):  # the episode ends at step 5: a reset inside
        k = jax.random.key(100 + t)
        a = e32.action_space.sample(jax.random.fold_in(k, 1), (3, e32.num_agents))
        o32, s32, r32, d32, _ = step32(k, s32, a)
        o16, s16, r16, d16, _ = step16(k, s16, a)
        np.testing.assert_array_equal(np.asarray(o16), np.asarray(o32.astype(jnp.bfloat16)))
        np.testing.assert_array_equal(np.asarray(r16), np.asarray(r32))
        np.testing.assert_array_equal(np.asarray(d16), np.asarray(d32))
        ended |= np.asarray(d32)
    assert ended.all()
