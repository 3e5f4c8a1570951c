"""Env params as data: the kernels read each vmap member's Params words from
an operand (ffi/jaxwarp_ffi.h), so `reset` and `step` take ``params=`` (a
params dataclass or its words, `ContractEnv.param_words`), under jit and
vmap, with the bits of an env built with those params; params that change
what is compiled in are refused in one line."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp

ENVS = 5


def _episode(env, key, steps=6, **kw):
    """obs, rewards and dones of a reset and `steps` random steps of `env`."""
    k_reset, k_act, k_step = jax.random.split(key, 3)
    obs, state = env.reset(k_reset, ENVS, **kw)
    out = [obs]
    nvec = np.asarray(env.action_space.nvec)
    for t in range(steps):
        a = jax.random.randint(jax.random.fold_in(k_act, t), (ENVS, env.num_agents, len(nvec)),
                               0, nvec)
        obs, state, reward, done, _ = env.step(jax.random.fold_in(k_step, t), state, a, **kw)
        out += [obs, reward, done]
    return out


@pytest.mark.parametrize("name, change", [
    ("mpe_simple_spread", dict(local_ratio=0.2, damping=0.5)),
    ("mpe_simple_tag", dict(adversary_max_speed=0.7)),
    ("cartpole", dict(gravity=11.0)),
    ("tag_continuous", dict(tag_reward_for_tagger=3.0, edge_hit_penalty=-0.5)),
])
def test_params_as_data_give_the_bits_of_an_env_built_with_them(name, change, kernel_backend):
    base = jaxwarp.make(name, backend=kernel_backend)
    fields = {f.name for f in dataclasses.fields(base.params)}
    change = {k: v for k, v in change.items() if k in fields}
    assert change, name
    other = dataclasses.replace(base.params, **change)
    built = jaxwarp.make(name, backend=kernel_backend, **change)
    key = jax.random.PRNGKey(3)
    want = _episode(built, key)
    words = base.param_words(other)
    assert words.dtype == np.int32 and words.shape == base.param_words().shape
    np.testing.assert_array_equal(words, built.param_words())
    for given in (other, words, jnp.asarray(words)):
        for a, b in zip(_episode(base, key, params=given), want):
            np.testing.assert_array_equal(a, b)
    # Under jit, the words traced: the same bits.
    got = jax.jit(lambda w: _episode(base, key, params=w))(jnp.asarray(words))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name, field, values", [
    ("mpe_simple_spread", "local_ratio", (0.0, 0.5, 1.0)),
    ("tag_continuous", "step_reward_for_runner", (0.0, 0.5, 1.0)),  # Params read in place
])
def test_vmap_over_params_steps_each_member_with_its_own(name, field, values, kernel_backend):
    env = jaxwarp.make(name, backend=kernel_backend)
    words = jnp.stack([env.param_words(dataclasses.replace(env.params, **{field: v}))
                       for v in values])
    key = jax.random.PRNGKey(0)
    batched = jax.jit(jax.vmap(lambda w: _episode(env, key, params=w)))(words)
    for i, v in enumerate(values):
        one = _episode(jaxwarp.make(name, backend=kernel_backend, **{field: v}), key)
        for a, b in zip(batched, one):
            np.testing.assert_array_equal(a[i], b)
    # The settings' rewards differ.
    rewards = np.stack(batched[2::3])  # [steps, members, envs, agents]
    assert not np.array_equal(rewards[:, 0], rewards[:, 2])


@pytest.mark.parametrize("change, what", [
    (dict(num_agents=4, num_landmarks=4), "agent count"),
    (dict(num_landmarks=2), "observation width"),
])
def test_params_that_change_the_program_are_refused_in_one_line(change, what):
    env = jaxwarp.make("mpe_simple_spread", backend="cpu")
    with pytest.raises(ValueError, match=what) as e:
        env.param_words(dataclasses.replace(env.params, **change))
    assert "\n" not in str(e.value) and list(change)[-1] in str(e.value)


def test_static_params_are_refused():
    env = jaxwarp.make("tag_continuous", backend="cpu")
    with pytest.raises(ValueError, match="num_other_agents_observed change the env's .*, "
                       "compiled into its program"):
        env.param_words(dataclasses.replace(env.params, num_other_agents_observed=5))


def test_bad_words_and_the_jax_backend_are_refused():
    env = jaxwarp.make("cartpole", backend="cpu")
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match=r"params must be a .* or its words int32"):
        env.reset(key, 2, params=jnp.zeros(3, jnp.float32))
    ref = jaxwarp.make("cartpole", backend="jax")
    with pytest.raises(ValueError, match="'jax' backend takes params as a"):
        ref.reset(key, 2, params=env.param_words())
    with pytest.raises(ValueError, match="need the 'cpu' or 'cuda' backend"):
        ref.param_words(dataclasses.replace(ref.params, gravity=10.0))
    # The reference takes the dataclass: the same as an env built with it.
    other = dataclasses.replace(ref.params, gravity=11.0)
    a = ref.reset(key, 2, params=other)[0]
    b = jaxwarp.make("cartpole", backend="jax", gravity=11.0).reset(key, 2)[0]
    np.testing.assert_array_equal(a, b)


def test_env_params_that_the_envs_metrics_read_are_refused_by_a_sweep():
    """Tag's tags_per_episode divides the taggers' return by the env's own tag
    reward, in Python: a setting with another one would log wrong counts."""
    from jaxwarp.errors import ConfigError
    from jaxwarp.train.sweep import setting_params

    env = jaxwarp.make("tag_continuous", backend="cpu")
    assert setting_params(env, {"env_params.tag_penalty_for_runner": -2.0}) \
        .tag_penalty_for_runner == -2.0
    with pytest.raises(ConfigError, match=r"env_params.tag_reward_for_tagger: "
                       r"tag_reward_for_tagger=5: the env's episode metrics "
                       r"\(tags_per_episode\)") as e:
        setting_params(env, {"env_params.tag_reward_for_tagger": 5.0})
    assert "\n" not in str(e.value)
