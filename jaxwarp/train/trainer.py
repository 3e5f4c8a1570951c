"""PPO and A2C for multi-agent envs as one jitted program (PureJaxRL layout).

``train = make_train(config)`` gives a pure function ``train(key)`` that
resets the envs, then runs ``lax.scan`` over updates; each update is a
``lax.scan`` over ``num_steps`` env steps (policy forward per policy group
→ sampler custom call → env step custom call), GAE by a reverse scan, and
``update_epochs`` x ``num_minibatches`` Optax steps per policy group.
``jax.jit(train)`` runs a whole training run without returning to the
host; ``jax.vmap(train)`` over keys trains several seeds in one program.

Policy groups map agent ids to a policy (Tag: ``tagger`` and ``runner``);
each group has its own Flax model, parameters (shared by its agents) and
optimiser. `build_trainer` exposes the same pieces (init, run) for callers
that run the updates in chunks (the CLI: progress, logs, checkpoints).

Several devices (``config.devices``; docs/sharding.md): the envs are split
over a 1-D mesh (axis ``"envs"``) by `jaxwarp.sharding.ShardedEnv`; env
state, observations and trajectories are sharded along the env axis,
parameters, optimiser states and observation statistics replicated. The
program stays one ``jax.jit``: losses are means over the global batch, so
XLA's partitioner inserts the all-reduce of the gradients (data-parallel
SGD on the same global batch as one device, up to float summation order).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxwarp import sharding
from jaxwarp.core import key_data_of, resolve_backend
from jaxwarp.models import CentralCritic, CentralGRUCritic, MLPActorCritic, is_recurrent, make_model
from jaxwarp.params_check import check_params
from jaxwarp.registry import make as make_env
from jaxwarp.sampler import sample_actions
from jaxwarp.train import fused, losses
from jaxwarp.train.compile import COMPILER_OPTIONS, jit  # noqa: F401  (public re-export)
from jaxwarp.train.config import ConfigError, Derived, TrainConfig, derived
from jaxwarp.train.learn import Layout, a2c_update, ppo_update
from jaxwarp.train.mesh import data_mesh
from jaxwarp.train.policy import Groups, Policy
from jaxwarp.train.rollout import Sampler, Transition, env_metric_names, episode_sums


@struct.dataclass
class RunnerState:
    """Everything carried from one update to the next (a pytree of arrays).

    params / opt_state / obs_stats: per policy group; env_state, obs:
    the envs' state and current observation f32[envs, agents, obs_dim];
    carry / first: the recurrent groups' carries and the envs whose current
    observation begins an episode (where those carries reset);
    key: u32[2] raw key data; update: i32[] updates done so far;
    last_return: per group f32[], mean return of the latest finished
    episodes (NaN until one finishes); last_extra: env-specific episode
    metrics of the same episodes.
    """

    params: dict[str, Any]
    opt_state: dict[str, Any]
    obs_stats: dict[str, losses.RunningStats]
    env_state: Any
    obs: jax.Array
    key: jax.Array
    update: jax.Array
    last_return: dict[str, jax.Array]
    last_extra: dict[str, jax.Array]
    carry: dict[str, Any]  # recurrent group -> its carry, leaves [envs, agents_in_group, ...]
    first: jax.Array  # bool[envs]: obs is the first of its episode


class Trainer(NamedTuple):
    """The pure functions of one configured run (see `build_trainer`)."""

    config: TrainConfig
    derived: Derived
    env: Any
    groups: dict[str, np.ndarray]  # group -> agent ids
    models: dict[str, nn.Module]
    init: Callable[[jax.Array], RunnerState]  # key (u32[2] or typed) -> state
    run: Callable[[RunnerState, int], tuple[RunnerState, dict[str, jax.Array]]]
    rollout: Callable[[RunnerState, jax.Array], tuple[Any, jax.Array, tuple]]  # for profiling
    # (params, obs_stats, obs, trained=None) -> (logits, value); see build_trainer
    policy: Callable[..., tuple[jax.Array, jax.Array]]
    mesh: Mesh | None = None  # the data-parallel mesh (axis "envs"); None: one device
    sampler: str = "auto"  # the action sampler's backend as run ("jax" | "cpu" | "cuda")
    rollout_path: str = "step by step"  # "fused" or "step by step: <why>" (train/fused.py)
    # group -> which layers run its `mlp` model (MLPActorCritic.layers; other models absent)
    model_layers: Mapping[str, str] | None = None

    def state_shardings(self, state: Any, seed_axis: bool = False) -> Any:
        """NamedShardings of a RunnerState-shaped tree (arrays or
        ShapeDtypeStructs) on `mesh`: env_state and obs split along the env
        axis (axis 1 with a leading seed axis), everything else replicated.
        None without a mesh."""
        if self.mesh is None:
            return None
        return _state_shardings(self.mesh, state, seed_axis)


def _state_shardings(mesh: Mesh, rs: Any, seed_axis: bool) -> Any:
    rep = NamedSharding(mesh, P())
    envs = NamedSharding(mesh, P(None, "envs") if seed_axis else P("envs"))
    tree = jax.tree.map(lambda _: rep, rs)
    return tree.replace(**{k: jax.tree.map(lambda _: envs, getattr(rs, k))
                           for k in ("env_state", "obs", "carry", "first")})


def build_trainer(config: TrainConfig, env: Any = None,
                  models: Mapping[str, nn.Module] | None = None, local: bool = False
                  ) -> Trainer:
    """Builds the env, the policy groups' models and optimisers of `config`,
    and composes rollout -> GAE -> per-group PPO/A2C update into `Trainer.run`.

    env: an env object to use instead of ``jaxwarp.make(config.env, ...)``.
    models: group name -> Flax module (``logits, value = m.apply(p, obs)``)
    overriding the model named in the config.
    local: this process's default device alone, whatever ``devices`` and the
    process count (evaluation after a run over several processes).
    """
    c, d = config, derived(config)
    env, mesh = _env_on_mesh(c, d, env, local)
    nvec = tuple(int(n) for n in env.action_space.nvec)
    groups = Groups.of(env)
    policy = _policy(c, env, groups, _models(c, env, groups, models, nvec, mesh), nvec)
    centralised = policy.critics is not None
    obs_dim = int(env.observation_space.shape[-1])
    init_params = _param_init(policy, obs_dim, _state_dim(env) if centralised else 0)
    sampler = c.sampler if c.sampler != "auto" else (
        "jax" if env.backend == "jax" else env.backend)
    sample = _sampler(nvec, sampler, mesh)
    pin = _pinner(mesh)
    sums = episode_sums(policy, getattr(env, "episode_metrics", None))
    # One custom call per rollout where it is faster (jaxwarp.train.fused.choice).
    roll_fn, path = fused.rollout_for(policy, env, sums, sampler, mesh is not None, c.num_envs)
    txs = {g: optimiser(c, d, g) for g in groups.ids}
    layout = Layout(d.minibatches, d.minibatch_envs, 1 if mesh is None else mesh.size,
                    c.num_envs, pin, samples=_sample_minibatches(c, policy))

    def pin_state(rs: RunnerState) -> RunnerState:
        return rs if mesh is None else jax.lax.with_sharding_constraint(
            rs, _state_shardings(mesh, rs, False))

    def init(key: jax.Array) -> RunnerState:
        key = key_data_of(key)
        key, k_env, *k_models = jax.random.split(key, 2 + len(groups.ids))
        obs, env_state = env.reset(k_env, c.num_envs)
        params = {g: init_params(g, k) for g, k in zip(groups.ids, k_models)}
        return pin_state(RunnerState(
            params=params,
            opt_state={g: txs[g].init(params[g]) for g in groups.ids},
            obs_stats={g: losses.RunningStats.create(obs_dim) for g in groups.ids}
            if c.normalize_obs else {},
            env_state=env_state, obs=obs, key=key,
            update=jnp.zeros((), jnp.int32),
            last_return={g: jnp.full((), jnp.nan, jnp.float32) for g in groups.ids},
            last_extra={k: jnp.full((), jnp.nan, jnp.float32)
                        for k in env_metric_names(env, c.num_envs)},
            carry=policy.initial_carry(c.num_envs), first=jnp.ones((c.num_envs,), bool)))

    def roll(rs: RunnerState, key: jax.Array) -> tuple[Any, jax.Array, Any, jax.Array,
                                                      dict, Transition]:
        """num_steps env steps with the current policies: (env_state, obs,
        carry, first, episode sums, trajectory); see `rollout`."""
        return roll_fn(policy, sample, env, sums, centralised, rs.params, rs.obs_stats,
                       rs.env_state, rs.obs, rs.carry, rs.first, key, c.num_steps)

    def update(rs: RunnerState, _) -> tuple[RunnerState, dict[str, jax.Array]]:
        key, k_roll, k_upd = jax.random.split(rs.key, 3)
        env_state, obs, carry, first, ep, traj = roll(rs, k_roll)
        with jax.named_scope("rollout"):
            state = env.global_state(obs, env_state) if centralised else None
            _, _, last_value = policy.step(rs.params, rs.obs_stats, obs, carry, first, state)
        with jax.named_scope("gae"):
            adv, target = losses.gae(traj.reward, traj.value, traj.done[:, :, None], last_value,
                                   c.gamma, c.gae_lambda)
        # [T, envs, ...] stays split along envs (no-op on one device).
        traj = traj.replace(**pin({k: getattr(traj, k) for k in _SPLIT}, P(None, "envs")))
        adv, target = pin((adv, target), P(None, "envs"))
        params, opt_state, metrics, finite = _learn(c, d, policy, txs, layout, rs, traj, adv,
                                                    target, k_upd)
        with jax.named_scope("obs_stats"):
            stats = ({g: rs.obs_stats[g].update(groups.select(traj.obs, g, 2))
                      for g in groups.ids} if c.normalize_obs else {})
        last_return, last_extra, episodes = _episode_means(rs, ep)
        rs = pin_state(RunnerState(params=params, opt_state=opt_state, obs_stats=stats,
                                   env_state=env_state, obs=obs, key=key,
                                   update=rs.update + 1, last_return=last_return,
                                   last_extra=last_extra, carry=carry, first=first))
        metrics.update({f"{g}/episode_return": last_return[g] for g in groups.ids})
        metrics.update(last_extra)
        metrics["episodes"] = episodes
        metrics["env_steps"] = rs.update.astype(jnp.float32) * d.batch_env_steps
        metrics["finite"] = finite.astype(jnp.float32)
        return rs, pin(metrics, P())

    def run(rs: RunnerState, num_updates: int):
        """`num_updates` updates by lax.scan; metrics: name -> f32[num_updates].

        metrics["finite"] is 1.0 where the update's losses and the trained
        groups' parameters after it are all finite, 0.0 where NaN/inf
        appeared (the host checks it once per chunk: no sync per update).
        """
        return jax.lax.scan(update, rs, None, length=num_updates)

    return Trainer(config=c, derived=d, env=env, groups=groups.ids, models=policy.nets,
                   init=init, run=run, rollout=roll, policy=policy, mesh=mesh,
                   sampler=sampler, rollout_path=path, model_layers=_layers(policy, obs_dim))


def _layers(policy: Policy, obs_dim: int) -> dict[str, str]:
    """Group -> which layers run its `mlp` model (MLPActorCritic.layers)."""
    return {g: m.layers(obs_dim) for g, m in policy.nets.items() if isinstance(m, MLPActorCritic)}


# Trajectory fields kept split along the env axis between rollout and update.
_SPLIT = ("obs", "actions", "log_prob", "value", "reward", "first", "state")


def _env_on_mesh(c: TrainConfig, d: Derived, env: Any, local: bool = False
                 ) -> tuple[Any, Mesh | None]:
    """The config's env (or `env`), checked, and wrapped in a `ShardedEnv` over
    the data-parallel mesh when the config spreads the envs over devices
    (never where `local`)."""
    if c.env_module:
        import_env_module(c.env_module)
    if env is None:
        env = _make_env(c)
    _check_env_params(env, c.env)
    mesh = None if local else data_mesh(c.devices)
    if mesh is not None:
        _check_divisible(c, d, mesh.size)
        if not isinstance(env, sharding.ShardedEnv):
            env = sharding.ShardedEnv(env, mesh, "envs")
    return env, mesh


def _models(c: TrainConfig, env: Any, groups: Groups, models: Mapping[str, nn.Module] | None,
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


def _policy(c: TrainConfig, env: Any, groups: Groups, nets: dict[str, nn.Module],
            nvec: tuple[int, ...]) -> Policy:
    """The groups' models (and centralised critics) as one `Policy`; a
    ConfigError where the minibatch layout cannot replay a recurrent model."""
    policy = Policy(groups, nets, nvec, c.normalize_obs, _critics(c, env, groups, nets))
    if c.minibatch_layout == "samples" and c.algorithm == "ppo" and policy.recurrent:
        raise ConfigError(f"minibatch_layout=samples: group(s) {list(policy.recurrent)} have a "
                          "recurrent model, whose minibatches must be whole env sequences; "
                          "use minibatch_layout=envs")
    return policy


def _sample_minibatches(c: TrainConfig, policy: Policy) -> bool:
    """Whether PPO's minibatches are single steps (``minibatch_layout``; ``auto``:
    where no group is recurrent) rather than whole env sequences."""
    if c.minibatch_layout == "auto":
        return c.algorithm == "ppo" and not policy.recurrent
    return c.minibatch_layout == "samples"


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


def _state_dim(env: Any) -> int:
    """S of the env's global state f32[envs, S] (from shapes only)."""
    def one(key):
        obs, state = env.reset(key, 1)
        return env.global_state(obs, state)

    return int(jax.eval_shape(one, jax.ShapeDtypeStruct((2,), jnp.uint32)).shape[-1])


def _param_init(policy: Policy, obs_dim: int, state_dim: int) -> Callable[[str, jax.Array], Any]:
    """(group, key) -> the group's initial parameters, after checking once, from
    shapes alone, that its model keeps the policy contract (docs/models.md)."""
    one = jnp.zeros((1, obs_dim), jnp.float32)

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
        _check_model(policy, g, init, obs_dim, state_dim)
    return init


def _check_model(policy: Policy, g: str, init: Callable, obs_dim: int, state_dim: int
                 ) -> None:
    """A ConfigError naming group g, the expected and the actual shapes, where
    its model breaks the contract (checked on shapes, before any compile)."""
    net, n = policy.nets[g], len(policy.groups.ids[g])
    kind = "recurrent" if g in policy.recurrent else "feed-forward"
    heads = sum(policy.nvec)

    def run(key):
        params = init(g, key)
        carry = policy.group_carry(g, 2) if g in policy.recurrent else None
        state = jnp.zeros((2, state_dim), jnp.float32) if policy.critics else None
        obs = jnp.zeros((2, n, obs_dim), jnp.float32)
        stats = losses.RunningStats.create(obs_dim) if policy.normalize_obs else None
        out = policy.forward(g, params, stats, obs, carry, jnp.ones((2, n), bool), state)
        return carry, out

    where = f"policies.{g}.model ({type(net).__name__}, {kind})"
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
        raise ConfigError(f"{where}: the carry it returns differs from initialize_carry's "
                          f"(structure or shapes); it must keep its type from step to step")


def _sampler(nvec: tuple[int, ...], backend: str, mesh: Mesh | None) -> Sampler:
    """The action sampler. Every sampler draws by global row (the kernel
    samplers take the shard's row offset through their partitioning rule):
    the same actions on any device count, so the fused kernel sampler stays
    on over several devices."""
    if mesh is None:
        return lambda key, logits: sample_actions(key, logits, nvec, backend=backend)
    return lambda key, logits: sharding.sample_actions(key, logits, nvec, mesh, "envs",
                                                       backend=backend)


def _pinner(mesh: Mesh | None) -> Callable[[Any, P], Any]:
    """(tree, spec) -> the tree with sharding constraint `spec` on every leaf
    (identity on one device). Under vmap over seeds jax adds the seed axis to
    the spec itself."""
    def pin(tree: Any, spec: P) -> Any:
        if mesh is None:
            return tree
        target = NamedSharding(mesh, spec)
        return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, target), tree)

    return pin


def optimiser(c: TrainConfig, d: Derived, group: str) -> optax.GradientTransformation:
    """Adam (eps 1e-5) at the group's learning rate, linearly annealed to 0
    over the run where ``anneal_lr``, after global-norm clipping where
    ``max_grad_norm > 0``."""
    lr = c.policy(group).lr
    steps = d.num_updates * d.optimizer_steps
    schedule = optax.linear_schedule(lr, 0.0, steps) if c.anneal_lr else lr
    adam = optax.adam(schedule, eps=1e-5)
    tx = optax.chain(optax.clip_by_global_norm(c.max_grad_norm), adam) \
        if c.max_grad_norm > 0 else adam
    if c.critic != "centralised":
        return tx
    # MAPPO: actor and critic are two networks with an optimiser each (their own
    # Adam moments and gradient-norm clip), so the critic's larger gradients do
    # not shrink the actor's step through one shared clip.
    return optax.multi_transform(
        {"actor": tx, "critic": tx},
        lambda params: {k: jax.tree.map(lambda _: k, v) for k, v in params.items()})


def _grad_fn(c: TrainConfig, policy: Policy, g: str, stats: losses.RunningStats | None
             ) -> Callable:
    """(params, minibatch, normalize_advantages) -> ((loss, metrics), grads) of group g."""
    @jax.named_scope("forward")
    def loss_fn(p, mb: losses.Batch, normalize: bool):
        # mb.obs holds every agent: the group's slice is cut here, from the
        # minibatch, so that no copy of the whole batch's group slice is made.
        carry = None if mb.carry is None else jax.tree.map(lambda x: x[0], mb.carry)
        logits, value = policy.sequence(g, p, stats, policy.groups.select(mb.obs, g, 2),
                                        carry, mb.first, mb.state)
        return losses.policy_loss(
            logits, value, mb, policy.nvec, algorithm=c.algorithm, clip_eps=c.clip_eps,
            vf_coef=c.vf_coef, ent_coef=c.ent_coef, normalize_advantages=normalize)

    return jax.value_and_grad(loss_fn, has_aux=True)


def _learn(c: TrainConfig, d: Derived, policy: Policy, txs: Mapping[str, Any],
           layout: Layout, rs: RunnerState, traj: Transition, adv: jax.Array,
           target: jax.Array, key: jax.Array) -> tuple[dict, dict, dict, jax.Array]:
    """Every trained group's update from the trajectory and its GAE
    advantages / targets f32[T, envs, agents]. Returns (params, opt_state,
    metrics "group/name" -> f32[], finite: bool[] all losses and parameters
    finite)."""
    groups = policy.groups
    params, opt_state, metrics = dict(rs.params), dict(rs.opt_state), {}
    finite = jnp.array(True)
    for g, k in zip(groups.ids, jax.random.split(key, len(groups.ids))):
        metrics[f"{g}/reward"] = groups.select(traj.reward, g, 2).mean()
        if not c.policy(g).train or not jax.tree.leaves(params[g]):
            continue
        recurrent = g in policy.recurrent
        batch = losses.Batch(
            traj.obs, *(groups.select(x, g, 2) for x in
                        (traj.actions, traj.log_prob, traj.value, adv, target)),
            first=traj.first if recurrent else None, state=traj.state,
            carry=jax.tree.map(lambda x: x[None], rs.carry[g]) if recurrent else None)
        grad_fn = _grad_fn(c, policy, g, rs.obs_stats.get(g))
        if c.algorithm == "a2c":
            params[g], opt_state[g], m = a2c_update(
                grad_fn, txs[g], params[g], opt_state[g], batch, layout, c.normalize_advantages)
        else:
            params[g], opt_state[g], m = ppo_update(
                grad_fn, txs[g], params[g], opt_state[g], batch, k, layout, d.epochs,
                c.normalize_advantages, c.minibatch_shuffle == "global")
        metrics.update({f"{g}/{name}": v for name, v in m.items()})
        finite = finite & jnp.isfinite(m["loss"]) & _all_finite(params[g])
    return params, opt_state, metrics, finite


def _episode_means(rs: RunnerState, ep: Mapping[str, jax.Array]
                   ) -> tuple[dict[str, jax.Array], dict[str, jax.Array], jax.Array]:
    """(last_return per group, last_extra per env metric, episodes f32[]): the
    means over the episodes that ended in this rollout (`rollout`'s sums), or
    the previous values where none ended."""
    episodes = ep["episodes"]
    seen = episodes > 0

    def mean(k: str, old: jax.Array) -> jax.Array:
        return jnp.where(seen, ep[k] / jnp.maximum(episodes, 1), old)

    return ({g: mean(g, v) for g, v in rs.last_return.items()},
            {k: mean(k, v) for k, v in rs.last_extra.items()}, episodes)



def _check_divisible(c: TrainConfig, d: Derived, shards: int) -> None:
    """The env axis and the minibatches split evenly over `shards` devices."""
    dev = "every local device" if c.devices is None else f"devices={c.devices}"
    if c.num_envs % shards:
        raise ConfigError(
            f"num_envs={c.num_envs} is not divisible by the {shards} devices that the envs "
            f"are split over ({dev} x {jax.process_count()} process(es)); choose num_envs "
            f"as a multiple of {shards} or set devices (devices=1: one device)")
    if d.minibatches > 1 and d.minibatch_envs % shards:
        what = "minibatch" if c.algorithm == "ppo" else "gradient chunk"
        raise ConfigError(
            f"num_minibatches={c.num_minibatches}: each {what} of num_envs/num_minibatches="
            f"{d.minibatch_envs} envs must split evenly over the {shards} devices ({dev}); "
            f"choose num_envs as a multiple of num_minibatches x {shards}")


def _make_env(c: TrainConfig) -> Any:
    """``jaxwarp.make`` for the config's env; a bad name, env_config, env
    parameter or an unavailable backend is a ConfigError naming it."""
    for key in ("backend", "sampler"):
        choice = getattr(c, key)
        if choice in ("cuda", "cpu"):
            try:
                resolve_backend(choice)
            except RuntimeError as e:
                raise ConfigError(f"{key}={choice}: {e}") from None
    try:
        env = make_env(c.env, backend=c.backend, config=c.env_config, obs_dtype=c.obs_dtype,
                       **dict(c.env_params))
    except (TypeError, ValueError) as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(str(e)) from None  # make's messages name the env and the field
    return env


def _check_env_params(env: Any, name: str) -> None:
    """Types and finiteness of the env's params dataclass (a string or NaN/inf
    where a float belongs gives NaN observations, not an error)."""
    params = getattr(env, "params", None)
    if params is None or not dataclasses.is_dataclass(params) or isinstance(params, type):
        return
    try:
        check_params(params, name)
    except ValueError as e:
        raise ConfigError(f"env_params: {e}") from None


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


def _all_finite(tree: Any) -> jax.Array:
    """bool[]: every element of every leaf of `tree` is finite."""
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.array(True)


def make_train(config: TrainConfig, env: Any = None,
               models: Mapping[str, nn.Module] | None = None
               ) -> Callable[[jax.Array], tuple[RunnerState, dict[str, jax.Array]]]:
    """``train(key) -> (final RunnerState, metrics name -> f32[num_updates])``.

    key: ``jax.random.PRNGKey(seed)`` (u32[2]) or ``jax.random.key(seed)``; a pure function
    of its key: ``jax.jit(train)`` runs the whole run (`jit` adds the trainer's
    compiler options), ``jax.vmap(train)`` over keys runs several seeds.
    """
    trainer = build_trainer(config, env=env, models=models)

    def train(key: jax.Array):
        return trainer.run(trainer.init(key), trainer.derived.num_updates)

    return train

