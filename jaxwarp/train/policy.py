"""Policy groups and the policy forward pass over all of an env's agents.

An env's agents are split into policy groups (Tag: ``tagger`` and
``runner``); each group has its own Flax model whose parameters its agents
share. `Groups` cuts a group's agents out of an ``[..., agents, ...]`` array
and puts the groups' outputs back in agent order; `Policy` runs every
group's model on its agents' observations (normalised by their running
statistics, `obs_stats.RunningStats`, where the config asks).
`param_init` gives a group's initial parameters, after checking once, from
shapes alone, that its model keeps the contract that `Policy` runs it by
(docs/models.md): a `ConfigError` naming the group and the shapes where it
does not, before anything compiles.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp.errors import ConfigError
from jaxwarp.models.recurrent import has_sequence, is_recurrent
from jaxwarp.train import losses
from jaxwarp.train.obs_stats import RunningStats


def _contiguous(ids: np.ndarray) -> bool:
    return len(ids) > 0 and np.array_equal(ids, np.arange(ids[0], ids[0] + len(ids)))


def _takes_actions(net: nn.Module, obs_dim: int) -> bool:
    """Whether ``net.apply(params, obs, actions)`` gives (log_prob, entropy,
    value) on obs_dim inputs: the model says so (``fuses_head_stats``) and its
    call takes the actions (a subclass may have replaced the call)."""
    fuses = getattr(net, "fuses_head_stats", None)
    return (fuses is not None and "actions" in inspect.signature(net.__call__).parameters
            and fuses(obs_dim))


class Groups(NamedTuple):
    """Policy group name -> agent ids (i64[n]), a partition of 0..agents-1."""

    ids: dict[str, np.ndarray]
    inverse: np.ndarray | None  # agent order -> concatenated-group order; None: identity

    @classmethod
    def of(cls, env: Any) -> Groups:
        """The env's ``policy_groups`` (one group ``agent`` of every agent if it
        declares none)."""
        ids = {g: np.asarray(a) for g, a in dict(getattr(env, "policy_groups", None)
                                                 or {"agent": np.arange(env.num_agents)}).items()}
        order = np.concatenate(list(ids.values()))
        if sorted(order.tolist()) != list(range(env.num_agents)):
            raise ValueError("policy groups must partition the agent ids 0..num_agents-1")
        inverse = None if np.array_equal(order, np.arange(env.num_agents)) else np.argsort(order)
        return cls(ids, inverse)

    def select(self, x: jax.Array, g: str, axis: int) -> jax.Array:
        """Group g's agents of x along `axis` (a slice where its ids are contiguous)."""
        ids = self.ids[g]
        if _contiguous(ids):
            return jax.lax.slice_in_dim(x, int(ids[0]), int(ids[0]) + len(ids), axis=axis)
        return jnp.take(x, jnp.asarray(ids), axis=axis)

    def join(self, parts: Sequence[jax.Array]) -> jax.Array:
        """Per-group arrays [envs, agents_in_group, ...] (in group order) ->
        [envs, agents, ...] in agent order."""
        x = jnp.concatenate(list(parts), axis=1)
        return x if self.inverse is None else x[:, self.inverse]


class Policy(NamedTuple):
    """The groups' models: ``carry, logits, value = policy.step(...)``.

    A group's model is feed-forward (``logits, value = net.apply(p, obs)``) or
    recurrent (``carry, (logits, value) = net.apply(p, carry, obs, reset)``,
    with ``net.initialize_carry(batch_shape)``). With a centralised critic
    (`critics` holds the group's critic module) the group's parameters are
    ``{"actor": ..., "critic": ...}`` and the value is the critic's, read
    from the env's global state f32[..., S] (one per env) instead of the
    actor's own value. A recurrent critic (``carry, value = critic.apply(p,
    carry, state, reset)``, one carry per env) makes the group's carry
    ``{"actor": ..., "critic": ...}`` too.
    """

    groups: Groups
    nets: dict[str, nn.Module]
    nvec: tuple[int, ...]
    normalize_obs: bool
    critics: dict[str, nn.Module] | None  # group -> centralised critic; None: own value
    recurrent: tuple[str, ...]  # the groups whose model carries a state from step to step
    recurrent_critics: tuple[str, ...]  # the groups whose centralised critic carries one

    @classmethod
    def of(cls, groups: Groups, nets: dict[str, nn.Module], nvec: tuple[int, ...],
           normalize_obs: bool, critics: dict[str, nn.Module] | None = None) -> Policy:
        """The policy of these models (and critics), which of them are
        recurrent told once."""
        return cls(groups, nets, nvec, normalize_obs, critics,
                   tuple(g for g in groups.ids if is_recurrent(nets[g])),
                   tuple(g for g in groups.ids if critics is not None
                         and is_recurrent(critics[g])))

    def critic_recurrent(self, g: str) -> bool:
        """Whether group g's centralised critic carries a state (one per env)."""
        return g in self.recurrent_critics

    def sequence_form(self, g: str) -> bool:
        """Whether recurrent group g's learner runs the sequence form (its model
        and its recurrent critic, if any, offer ``sequence``; docs/models.md)."""
        critic_ok = not self.critic_recurrent(g) or has_sequence(self.critics[g])
        return has_sequence(self.nets[g]) and critic_ok

    def group_carry(self, g: str, num_envs: int) -> Any:
        """Recurrent group g's fresh carry: its model's, leaves [num_envs,
        agents_in_group, ...]; with a recurrent critic ``{"actor": that,
        "critic": leaves [num_envs, ...]}``."""
        actor = self.nets[g].initialize_carry((num_envs, len(self.groups.ids[g])))
        if not self.critic_recurrent(g):
            return actor
        return {"actor": actor, "critic": self.critics[g].initialize_carry((num_envs,))}

    def initial_carry(self, num_envs: int) -> dict[str, Any]:
        """Recurrent group -> its fresh carry (`group_carry`)."""
        return {g: self.group_carry(g, num_envs) for g in self.recurrent}

    def _normalized(self, stats: RunningStats | None, obs: jax.Array) -> jax.Array:
        """obs normalised by the group's running statistics where the config asks."""
        return stats.normalize(obs) if self.normalize_obs else obs

    def forward(self, g: str, params: Any, stats: RunningStats | None, obs: jax.Array,
                carry: Any = None, reset: jax.Array | None = None,
                state: jax.Array | None = None, method: str = "__call__"
                ) -> tuple[Any, jax.Array, jax.Array]:
        """Group g's model on its agents' obs f32/bf16[..., agents_in_group, obs_dim]
        (normalised by `stats` where the config asks). carry, reset bool[...,
        agents_in_group]: a recurrent model's state and where its episode
        begins; state f32[..., S]: the env's global state (centralised critic).
        method "sequence": the recurrent models' sequence form, over obs with a
        leading time axis [T, ...] (`sequence`).
        Returns (carry, logits f32[..., sum(nvec)], value f32[...])."""
        obs = self._normalized(stats, obs)
        actor = params["actor"] if self.critics else params
        split = self.critic_recurrent(g)
        carry_a = carry["actor"] if split else carry
        if g in self.recurrent:
            carry_a, (logits, value) = self.nets[g].apply(actor, carry_a, obs, reset,
                                                          method=method)
        else:
            logits, value = self.nets[g].apply(actor, obs)
        if split:  # one carry per env; the env's reset is its agents' (all equal)
            carry_c, v = self.critics[g].apply(params["critic"], carry["critic"], state,
                                               reset[..., 0], method=method)
            carry = {"actor": carry_a, "critic": carry_c}
        else:
            carry = carry_a
            if self.critics:
                v = self.critics[g].apply(params["critic"], state)
        if self.critics:
            value = jnp.broadcast_to(v[..., None], obs.shape[:-1])
        return carry, logits, value

    def sequence(self, g: str, params: Any, stats: RunningStats | None, obs: jax.Array,
                 carry: Any, reset: jax.Array | None, state: jax.Array | None
                 ) -> tuple[jax.Array, jax.Array]:
        """Group g over env sequences: obs [T, envs, agents_in_group, D] from
        the rollout's initial carry (leaves [envs, agents_in_group, ...]), reset
        bool[T, envs], state f32[T, envs, S] or None. A feed-forward model runs
        on every step at once, a recurrent one through its sequence form where
        it has one (`sequence_form`), else replayed step by step (BPTT through
        the scan). Returns (logits f32[T, envs, agents_in_group, sum(nvec)],
        value f32[T, envs, agents_in_group])."""
        if g not in self.recurrent:
            _, logits, value = self.forward(g, params, stats, obs, state=state)
            return logits, value
        if self.sequence_form(g):
            r = jnp.broadcast_to(reset[..., None], obs.shape[:-1])
            _, logits, value = self.forward(g, params, stats, obs, carry, r, state, "sequence")
            return logits, value

        def body(c, x):
            o, r, st = x
            c, logits, value = self.forward(g, params, stats, o, c,
                                            jnp.broadcast_to(r[:, None], o.shape[:-1]), st)
            return c, (logits, value)

        _, (logits, value) = jax.lax.scan(body, carry, (obs, reset, state))
        return logits, value

    def head_stats(self, g: str, params: Any, stats: RunningStats | None, obs: jax.Array,
                   actions: jax.Array, carry: Any, reset: jax.Array | None,
                   state: jax.Array | None) -> tuple[jax.Array, jax.Array, jax.Array]:
        """The learner's view of group g (arguments as `sequence`'s, actions
        i32[T, envs, agents_in_group, heads]): (log_prob, entropy, value), each
        f32[T, envs, agents_in_group] (`losses.head_stats`). A feed-forward
        model that takes the actions itself (``fuses_head_stats``: the `mlp`
        model on the fused kernels) returns them without the logits leaving
        its kernel."""
        net = self.nets[g]
        # Feed-forward models with their own value only: a centralised critic's
        # value comes from another module (and the group's parameters nest).
        if g not in self.recurrent and not self.critics and _takes_actions(net, obs.shape[-1]):
            return net.apply(params, self._normalized(stats, obs), actions)
        logits, value = self.sequence(g, params, stats, obs, carry, reset, state)
        return (*losses.head_stats(logits, actions, self.nvec), value)

    def step(self, params: Mapping[str, Any], stats: Mapping[str, RunningStats],
             obs: jax.Array, carry: Mapping[str, Any], reset: jax.Array,
             state: jax.Array | None = None, trained: Mapping[str, bool] | None = None
             ) -> tuple[dict[str, Any], jax.Array, jax.Array]:
        """Every group on obs f32[envs, agents, D]; carry: recurrent group ->
        its carry, reset bool[envs]: the envs whose episode begins with obs;
        state f32[envs, S]: the global state (centralised critic).
        Returns (carry, logits f32[envs, agents, sum(nvec)], value f32[envs,
        agents]). trained: group -> False plays that group uniformly at random
        (zero logits and values; `jaxwarp eval`); None: every group's model."""
        new_carry, outs = dict(carry), []
        for g in self.groups.ids:
            obs_g = self.groups.select(obs, g, 1)
            if trained is None or trained[g]:
                r = jnp.broadcast_to(reset[:, None], obs_g.shape[:2])
                new_carry[g], logits, value = self.forward(g, params[g], stats.get(g), obs_g,
                                                           carry.get(g), r, state)
                if g not in self.recurrent:
                    del new_carry[g]
                outs.append((logits, value))
            else:
                outs.append((jnp.zeros(obs_g.shape[:2] + (sum(self.nvec),), jnp.float32),
                             jnp.zeros(obs_g.shape[:2], jnp.float32)))
        return (new_carry, self.groups.join([o[0] for o in outs]),
                self.groups.join([o[1] for o in outs]))

    def __call__(self, params: Mapping[str, Any], stats: Mapping[str, RunningStats],
                 obs: jax.Array, trained: Mapping[str, bool] | None = None,
                 state: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
        """(logits, value) of `step` from fresh carries (every recurrent
        model at the first step of its episode)."""
        reset = jnp.ones(obs.shape[:1], bool)
        _, logits, value = self.step(params, stats, obs, self.initial_carry(obs.shape[0]), reset,
                                     state, trained)
        return logits, value


def param_init(policy: Policy, obs_dim: int, state_dim: int) -> Callable[[str, jax.Array], Any]:
    """(group, key) -> the group's initial parameters, after checking once, from
    shapes alone, that its model keeps the policy contract (docs/models.md)."""
    one = jnp.zeros((1, obs_dim), jnp.float32)
    probe = _Probe(obs_dim, state_dim)
    # The checks run the models on raw observations: fresh statistics (mean 0,
    # variance 1) normalise nothing, so the models see the same values either way.
    raw = policy._replace(normalize_obs=False)

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
        _check_model(raw, g, init, probe)
        if g in policy.recurrent:
            _check_reset(raw, g, init, probe)
        if g in policy.recurrent and policy.sequence_form(g):
            _check_sequence_form(raw, g, init, probe)
    return init


class _Probe(NamedTuple):
    """What the contract checks feed a model: observations f32[..., obs_dim]
    and the env's global state f32[..., state_dim] (centralised critics)."""

    obs_dim: int
    state_dim: int


def _check_model(policy: Policy, g: str, init: Callable, probe: _Probe) -> None:
    """A ConfigError naming group g, the expected and the actual shapes, where
    its model breaks the contract (checked on shapes, before any compile)."""
    net, n = policy.nets[g], len(policy.groups.ids[g])
    obs_dim, state_dim = probe
    kind = "recurrent" if g in policy.recurrent else "feed-forward"
    heads = sum(policy.nvec)

    def run(key):
        params = init(g, key)
        carry = policy.group_carry(g, 2) if g in policy.recurrent else None
        state = jnp.zeros((2, state_dim), jnp.float32) if policy.critics else None
        obs = jnp.zeros((2, n, obs_dim), jnp.float32)
        out = policy.forward(g, params, None, obs, carry, jnp.ones((2, n), bool), state)
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
    obs_dim, state_dim = probe

    @jax.jit
    def outputs(key, warm):
        params = init(g, key)
        fresh = policy.group_carry(g, 2)
        carry = jax.tree.map(lambda x: x + warm, fresh)
        state = jnp.ones((2, state_dim), jnp.float32) if policy.critics else None
        obs = jnp.ones((2, n, obs_dim), jnp.float32)
        reset = jnp.ones((2, n), bool)
        return policy.forward(g, params, None, obs, carry, reset, state)[1:]

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
    obs_dim, state_dim = probe

    def run(key):
        carry = policy.group_carry(g, 2)
        state = jnp.zeros((t, 2, state_dim), jnp.float32) if policy.critics else None
        return policy.sequence(g, init(g, key), None, jnp.zeros((t, 2, n, obs_dim)), carry,
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
