"""The cpu backend's thread split: a big batch (envs handed to XLA's CPU
thread pool) gives the bits of the same envs stepped in small batches (below
`kMinParallelWork` in ffi/jaxwarp_ffi.h: one thread), resets included."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jaxwarp

# (env, big batch, small batch, params): big x agents^2 >= 4096 > small x agents^2.
CASES = [("cartpole", 8192, 1024, {}),
         ("tag_continuous", 64, 8, {"num_taggers": 3, "num_runners": 9})]


@pytest.mark.parametrize("name, big, small, params", CASES)
def test_big_batch_equals_small_batches(name, big, small, params):
    env = jaxwarp.make(name, backend="cpu", **params)
    assert big * env.num_agents ** 2 >= 4096 > small * env.num_agents ** 2
    step = jax.jit(env.step)
    step_at = jax.jit(lambda k, s, a, o: env.step(k, s, a, env_offset=o))
    reset_at = jax.jit(lambda k, o: env.reset(k, small, env_offset=o))
    key = jax.random.key(3)
    offsets = range(0, big, small)
    obs, state = env.reset(key, big)
    parts = [reset_at(key, o) for o in offsets]
    np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), obs)
    ended = False
    for t in range(30):  # cartpole ends episodes within 30 random steps: resets too
        k = jax.random.fold_in(key, t)
        a = env.action_space.sample(jax.random.fold_in(k, 1), (big, env.num_agents))
        obs, state, reward, done, _ = step(k, state, a)
        outs = [step_at(k, s, a[o:o + small], o) for o, (_, s) in zip(offsets, parts)]
        parts = [(x[0], x[1]) for x in outs]
        for i, whole in ((0, obs), (2, reward), (3, done)):
            np.testing.assert_array_equal(np.concatenate([x[i] for x in outs]), whole)
        for whole, *pieces in zip(jax.tree.leaves(state),
                                  *[jax.tree.leaves(x[1]) for x in outs]):
            np.testing.assert_array_equal(np.concatenate(pieces), whole)
        ended |= bool(np.asarray(done).any())
    assert ended or name != "cartpole"
