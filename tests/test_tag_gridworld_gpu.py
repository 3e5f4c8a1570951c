"""tag_gridworld on the GPU: the CUDA kernels against the XLA:CPU kernels and
the pure-JAX reference, bit for bit over whole episodes with resets (integer
dynamics, one float sum per reward, observations as products with f32
reciprocals). Skipped without a GPU."""

import jax
import numpy as np
import pytest

from jaxwarp.envs.tag_gridworld import TagGridworld, TagGridworldParams
from jaxwarp.testing import check_consistency

pytestmark = pytest.mark.gpu


CASES = {
    "warpdrive_default": dict(config="warpdrive_default"),
    "warpdrive_constructor": dict(config="warpdrive_constructor"),
    "small_partial_random_start": dict(num_taggers=3, grid_length=3, episode_length=25,
                                       use_full_observation=False, random_start=True),
    "many_taggers_partial": dict(num_taggers=40, grid_length=12, episode_length=30,
                                 use_full_observation=False, random_start=True),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("other", ["cpu", "jax"])
def test_cuda_matches_bitwise(case, other):
    kw = dict(CASES[case])
    config = kw.pop("config", None)
    if config is not None:
        from jaxwarp.envs.tag_gridworld import CONFIGS
        kw = {**CONFIGS[config], **kw}
    report = check_consistency("tag_gridworld", ("cuda", other), num_envs=16, rtol=0,
                               atol=0, **kw)
    assert report.ok, str(report)
    assert report.episodes_finished >= 16, str(report)


def test_cuda_vmap_over_seeds_equals_loop():
    p = TagGridworldParams(num_taggers=2, grid_length=4, episode_length=6, random_start=True)
    env = TagGridworld(p, backend="cuda")
    keys = jax.random.split(jax.random.PRNGKey(3), 3)

    def rollout(key):
        k0, k1 = jax.random.split(key)
        obs, state = env.reset(k0, 4)

        def body(state, k):
            ka, ks = jax.random.split(k)
            actions = env.action_space.sample(ka, (4, p.num_agents))
            obs, state, reward, done, _ = env.step(ks, state, actions)
            return state, (obs, reward, done)

        return jax.lax.scan(body, state, jax.random.split(k1, 10))

    batched = jax.jit(jax.vmap(rollout))(keys)
    for i, k in enumerate(keys):
        one = jax.jit(rollout)(k)
        for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(batched)):
            np.testing.assert_array_equal(a, b[i])


def test_auto_runs_the_kernel_on_a_gpu():
    assert TagGridworld(backend="auto").backend == "cuda"
