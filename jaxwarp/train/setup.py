"""A run's policy and sampler from its config, checked before anything compiles.

The policy groups' models and centralised critics (each model checked once
against the contract of docs/models.md, on shapes only), their parameter
initialiser and the action sampler (the env and the data-parallel mesh they
run on: `environment`, `mesh`). Every bad choice is a `ConfigError` naming
the config key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from jaxwarp import sharding
from jaxwarp.models import (CentralCritic, CentralGRUCritic, MLPActorCritic, is_recurrent,
                            make_model)
from jaxwarp.sampler import sample_actions
from jaxwarp.train import losses
from jaxwarp.train.config import ConfigError, TrainConfig
from jaxwarp.train.policy import Groups, Policy
from jaxwarp.train.rollout import Sampler


def group_models(c: TrainConfig, env: Any, groups: Groups, models: Mapping[str, nn.Module] | None,
            nvec: tuple[int, ...], mesh: Mesh | None) -> dict[str, nn.Module]:
    """Group -> Flax module: `models`' entry, else the config's ``model``."""
    for name in dict(c.policies):
        if name not in groups.ids:
            raise ConfigError(f"policies.{name}: {c.env} has no policy group {name!r}; "
                              f"its groups are {sorted(groups.ids)}")
    for name in (models or {}):
        if name not in groups.ids:
            raise ConfigError(f"models: {c.env} has no policy group {name!r}; "
                              f"its groups are {sorted(groups.ids)}")
    nets = {g: (models or {}).get(g) or make_model(c.policy(g).model, nvec, c.policy(g), g)
            for g in groups.ids}
    if mesh is not None:  # envs split over devices: no row blocks (see fused_linear)
        nets = {g: m.clone(row_blocks=False) if isinstance(m, MLPActorCritic) else m
                for g, m in nets.items()}
    return nets


def make_policy(c: TrainConfig, env: Any, groups: Groups, nets: dict[str, nn.Module],
            nvec: tuple[int, ...]) -> Policy:
    """The groups' models (and centralised critics) as one `Policy`; a
    ConfigError where the minibatch layout cannot replay a recurrent model."""
    policy = Policy.of(groups, nets, nvec, c.normalize_obs, _critics(c, env, groups, nets))
    if c.minibatch_layout == "samples" and c.algorithm == "ppo" and policy.recurrent:
        raise ConfigError(f"minibatch_layout=samples: group(s) {list(policy.recurrent)} have a "
                          "recurrent model, whose minibatches must be whole env sequences; "
                          "use minibatch_layout=envs")
    return policy


def _critics(c: TrainConfig, env: Any, groups: Groups, nets: Mapping[str, nn.Module]
             ) -> dict[str, nn.Module] | None:
    """Group -> centralised critic (``critic: centralised``) over the env's
    global state: an MLP of the group's hidden sizes, or where the group's
    model is recurrent a GRU critic of its ``hidden_sizes`` and ``rnn_size``
    (MAPPO-RNN); None: each model's own value."""
    if c.critic != "centralised":
        return None
    if not getattr(env, "has_global_state", False):
        raise ConfigError(f"critic=centralised: {c.env} declares no global state for a "
                          f"centralised critic to read (EnvSpec.global_state); use "
                          f"critic=independent")
    def critic(g: str) -> nn.Module:
        p = c.policy(g)
        if is_recurrent(nets[g]):
            return CentralGRUCritic(tuple(p.hidden_sizes), p.rnn_size, p.activation)
        return CentralCritic(tuple(p.hidden_sizes), p.activation)

    return {g: critic(g) for g in groups.ids}


def state_dim(env: Any) -> int:
    """S of the env's global state f32[envs, S] (from shapes only)."""
    def one(key):
        obs, state = env.reset(key, 1)
        return env.global_state(obs, state)

    return int(jax.eval_shape(one, jax.ShapeDtypeStruct((2,), jnp.uint32)).shape[-1])


def param_init(policy: Policy, obs_dim: int, state_dim: int) -> Callable[[str, jax.Array], Any]:
    """(group, key) -> the group's initial parameters, after checking once, from
    shapes alone, that its model keeps the policy contract (docs/models.md)."""
    one = jnp.zeros((1, obs_dim), jnp.float32)
    probe = _Probe(obs_dim, state_dim,
                   losses.RunningStats.create(obs_dim) if policy.normalize_obs else None)

    def init(g: str, key: jax.Array) -> Any:
        net = policy.nets[g]
        if g in policy.recurrent:
            params = net.init(key, net.initialize_carry((1,)), one, jnp.ones((1,), bool))
        else:
            params = net.init(key, one)
        if policy.critics is None:
            return params
        state, k_critic = jnp.zeros((1, state_dim), jnp.float32), jax.random.fold_in(key, 1)
        critic = policy.critics[g]
        if policy.critic_recurrent(g):
            return {"actor": params, "critic": critic.init(
                k_critic, critic.initialize_carry((1,)), state, jnp.ones((1,), bool))}
        return {"actor": params, "critic": critic.init(k_critic, state)}

    for g in policy.groups.ids:
        _check_model(policy, g, init, probe)
        if g in policy.recurrent:
            _check_reset(policy, g, init, probe)
        if g in policy.recurrent and policy.sequence_form(g):
            _check_sequence_form(policy, g, init, probe)
    return init


class _Probe(NamedTuple):
    """What the contract checks feed a model: observations f32[..., obs_dim],
    the env's global state f32[..., state_dim] (centralised critics) and the
    observation statistics (None where the policy does not normalise)."""

    obs_dim: int
    state_dim: int
    stats: losses.RunningStats | None


def _check_model(policy: Policy, g: str, init: Callable, probe: _Probe) -> None:
    """A ConfigError naming group g, the expected and the actual shapes, where
    its model breaks the contract (checked on shapes, before any compile)."""
    net, n = policy.nets[g], len(policy.groups.ids[g])
    obs_dim, state_dim, stats = probe
    kind = "recurrent" if g in policy.recurrent else "feed-forward"
    heads = sum(policy.nvec)

    def run(key):
        params = init(g, key)
        carry = policy.group_carry(g, 2) if g in policy.recurrent else None
        state = jnp.zeros((2, state_dim), jnp.float32) if policy.critics else None
        obs = jnp.zeros((2, n, obs_dim), jnp.float32)
        out = policy.forward(g, params, stats, obs, carry, jnp.ones((2, n), bool), state)
        return carry, out

    where = f"policies.{g}.model ({type(net).__name__}, {kind})"
    if kind == "recurrent":
        _check_initial_carry(net, where, n)
    try:
        carry, (carry_out, logits, value) = jax.eval_shape(
            run, jax.ShapeDtypeStruct((2,), jnp.uint32))
    except Exception as e:  # noqa: BLE001 - any failure of a user's module is reported as one line
        hint = ("a recurrent model defines initialize_carry(batch_shape) and is called "
                "(carry, obs, reset) -> carry, (logits, value)") if kind == "feed-forward" else (
            "a recurrent model is called (carry, obs, reset) -> carry, (logits, value)")
        msg = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise ConfigError(f"{where}: failed on obs f32[2, {n}, {obs_dim}]: {msg} "
                          f"(a feed-forward model is called obs -> (logits, value); {hint}; "
                          f"docs/models.md)") from None
    want = ((2, n, heads), (2, n))
    got = (tuple(getattr(logits, "shape", ())), tuple(getattr(value, "shape", ())))
    if got != want:
        raise ConfigError(f"{where}: for obs f32[2, {n}, {obs_dim}] it returned logits "
                          f"{list(got[0])} and value {list(got[1])}; expected logits "
                          f"{list(want[0])} (sum(nvec)={heads}) and value {list(want[1])}")
    same_carry = jax.tree.structure(carry) == jax.tree.structure(carry_out) and all(
        a.shape == b.shape for a, b in zip(jax.tree.leaves(carry), jax.tree.leaves(carry_out)))
    if not same_carry:  # feed-forward: None in, None out
        raise ConfigError(f"{where}: the carry it returns differs from initialize_carry's: "
                          f"for a carry of {_shapes(carry)} it returned {_shapes(carry_out)}; "
                          f"it must keep its structure and shapes from step to step")


def _shapes(tree: Any) -> str:
    """A carry's leaves' shapes, e.g. "[2, 1, 8]" or "([2, 1, 8], [2, 1, 8])"."""
    leaves = [str(list(x.shape)) for x in jax.tree.leaves(tree)]
    return leaves[0] if len(leaves) == 1 else f"({', '.join(leaves)})"


def _check_initial_carry(net: nn.Module, where: str, n: int) -> None:
    """A ConfigError where ``initialize_carry(batch_shape)`` ignores its
    batch_shape: every leaf must lead with it ([envs, agents_in_group, ...])."""
    try:
        carry = jax.eval_shape(lambda: net.initialize_carry((2, n)))
    except Exception as e:  # noqa: BLE001 - a user's method fails: one line
        msg = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise ConfigError(f"{where}: initialize_carry((2, {n})) failed: {msg}") from None
    if not jax.tree.leaves(carry) or any(
            tuple(x.shape[:2]) != (2, n) for x in jax.tree.leaves(carry)):
        raise ConfigError(f"{where}: initialize_carry((2, {n})) returned a carry of "
                          f"{_shapes(carry) if jax.tree.leaves(carry) else 'no arrays'}; every "
                          f"leaf must lead with the batch_shape it is given, [2, {n}, ...]")


def _check_reset(policy: Policy, g: str, init: Callable, probe: _Probe) -> None:
    """A ConfigError where group g's recurrent model ignores ``reset``: from any
    carry, a step with reset true must act as from initialize_carry's (one tiny
    step run twice on 2 x agents rows; an episode's start would otherwise see
    the previous episode's memory, and train silently)."""
    n = len(policy.groups.ids[g])
    obs_dim, state_dim, stats = probe

    @jax.jit
    def outputs(key, warm):
        params = init(g, key)
        fresh = policy.group_carry(g, 2)
        carry = jax.tree.map(lambda x: x + warm, fresh)
        state = jnp.ones((2, state_dim), jnp.float32) if policy.critics else None
        obs = jnp.ones((2, n, obs_dim), jnp.float32)
        reset = jnp.ones((2, n), bool)
        return policy.forward(g, params, stats, obs, carry, reset, state)[1:]

    key = jnp.zeros((2,), jnp.uint32)
    fresh, warm = outputs(key, 0.0), outputs(key, 0.5)
    if not all(jnp.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(fresh, warm)):
        net = policy.nets[g]
        raise ConfigError(f"policies.{g}.model ({type(net).__name__}, recurrent): it ignores "
                          f"reset: with reset true, a carry of initialize_carry's values + 0.5 "
                          f"gave other logits or values than initialize_carry's own; replace "
                          f"the carry where reset (jnp.where(reset[..., None], fresh, carry)) "
                          f"before using it (docs/models.md)")


def _check_sequence_form(policy: Policy, g: str, init: Callable, probe: _Probe) -> None:
    """A ConfigError naming group g and the shapes where its model's sequence
    form (``sequence``, docs/models.md) disagrees with its step form: for T
    steps it must return the step form's logits and value with a leading T."""
    net, n, t = policy.nets[g], len(policy.groups.ids[g]), 3
    heads = sum(policy.nvec)
    obs_dim, state_dim, stats = probe

    def run(key):
        carry = policy.group_carry(g, 2)
        state = jnp.zeros((t, 2, state_dim), jnp.float32) if policy.critics else None
        return policy.sequence(g, init(g, key), stats, jnp.zeros((t, 2, n, obs_dim)), carry,
                               jnp.ones((t, 2), bool), state)

    where = f"policies.{g}.model ({type(net).__name__}, recurrent)"
    shapes = f"obs f32[{t}, 2, {n}, {obs_dim}]"
    try:
        logits, value = jax.eval_shape(run, jax.ShapeDtypeStruct((2,), jnp.uint32))
    except Exception as e:  # noqa: BLE001 - any failure of a user's module is one line
        msg = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise ConfigError(f"{where}: its sequence form failed on {shapes}: {msg} (it is "
                          "called (carry, obs [T, ...], reset [T, ...]) -> carry, (logits, "
                          "value); docs/models.md)") from None
    want = ((t, 2, n, heads), (t, 2, n))
    got = (tuple(getattr(logits, "shape", ())), tuple(getattr(value, "shape", ())))
    if got != want:
        raise ConfigError(f"{where}: its sequence form returned logits {list(got[0])} and "
                          f"value {list(got[1])} for {shapes}; expected the step form's "
                          f"shapes with a leading T: logits {list(want[0])} and value "
                          f"{list(want[1])}")


def make_sampler(nvec: tuple[int, ...], backend: str, mesh: Mesh | None) -> Sampler:
    """The action sampler. Every sampler draws by global row (the kernel
    samplers take the shard's row offset through their partitioning rule):
    the same actions on any device count, so the fused kernel sampler stays
    on over several devices."""
    if mesh is None:
        return lambda key, logits: sample_actions(key, logits, nvec, backend=backend)
    return lambda key, logits: sharding.sample_actions(key, logits, nvec, mesh, "envs",
                                                       backend=backend)


def import_env_module(name: str) -> None:
    """Imports a user env's module (a .py path or a dotted name) so that it
    registers its env with `jaxwarp.register_spec` (or `jaxwarp.register_env`)."""
    import importlib
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(name)
    if name.endswith(".py"):
        if not path.exists():
            raise ConfigError(f"env_module: {name!r} does not exist")
        mod_name = f"jaxwarp_user_{path.stem}"
        if mod_name in sys.modules:
            return
        spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
    else:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ConfigError(f"env_module: cannot import {name!r}: {e}") from None
