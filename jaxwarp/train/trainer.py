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
from jaxwarp.params_check import check_params
from jaxwarp.registry import make as make_env
from jaxwarp.sampler import sample_actions
from jaxwarp.train import core
from jaxwarp.train.config import ConfigError, Derived, TrainConfig, derived
from jaxwarp.train.distributed import data_mesh
from jaxwarp.train.compile import COMPILER_OPTIONS, jit  # noqa: F401  (public re-export)
from jaxwarp.train.models import MLPActorCritic, make_model


@struct.dataclass
class RunnerState:
    """Everything carried from one update to the next (a pytree of arrays).

    params / opt_state / obs_stats: per policy group; env_state, obs:
    the envs' state and current observation f32[envs, agents, obs_dim];
    key: u32[2] raw key data; update: i32[] updates done so far;
    last_return: per group f32[], mean return of the latest finished
    episodes (NaN until one finishes); last_extra: env-specific episode
    metrics of the same episodes.
    """

    params: dict[str, Any]
    opt_state: dict[str, Any]
    obs_stats: dict[str, core.RunningStats]
    env_state: Any
    obs: jax.Array
    key: jax.Array
    update: jax.Array
    last_return: dict[str, jax.Array]
    last_extra: dict[str, jax.Array]


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
    return tree.replace(env_state=jax.tree.map(lambda _: envs, rs.env_state),
                        obs=jax.tree.map(lambda _: envs, rs.obs))


def _contiguous(ids: np.ndarray) -> bool:
    return len(ids) > 0 and np.array_equal(ids, np.arange(ids[0], ids[0] + len(ids)))


def build_trainer(config: TrainConfig, env: Any = None,
                  models: Mapping[str, nn.Module] | None = None) -> Trainer:
    """Builds the env, the policy groups' models and optimisers of `config`.

    env: an env object to use instead of ``jaxwarp.make(config.env, ...)``.
    models: group name -> Flax module (``logits, value = m.apply(p, obs)``)
    overriding the model named in the config.
    """
    c, d = config, derived(config)
    if c.env_module:
        import_env_module(c.env_module)
    if env is None:
        env = _make_env(c)
    _check_env_params(env, c.env)
    mesh = data_mesh(c.devices)
    shards = 1 if mesh is None else mesh.size
    if mesh is not None:
        _check_divisible(c, d, shards)
        if not isinstance(env, sharding.ShardedEnv):
            env = sharding.ShardedEnv(env, mesh, "envs")
    nvec = tuple(int(n) for n in env.action_space.nvec)
    groups: dict[str, np.ndarray] = dict(getattr(env, "policy_groups", None)
                                         or {"agent": np.arange(env.num_agents)})
    for name in dict(c.policies):
        if name not in groups:
            raise ConfigError(f"policies.{name}: {c.env} has no policy group {name!r}; "
                              f"its groups are {sorted(groups)}")
    for name in (models or {}):
        if name not in groups:
            raise ConfigError(f"models: {c.env} has no policy group {name!r}; "
                              f"its groups are {sorted(groups)}")
    nets = {g: (models or {}).get(g) or make_model(c.policy(g).model, nvec, c.policy(g), g)
            for g in groups}
    if mesh is not None:  # envs split over devices: no row blocks (see fused_linear)
        nets = {g: m.clone(row_blocks=False) if isinstance(m, MLPActorCritic) else m
                for g, m in nets.items()}
    order = np.concatenate(list(groups.values()))
    if sorted(order.tolist()) != list(range(env.num_agents)):
        raise ValueError("policy groups must partition the agent ids 0..num_agents-1")
    inverse = None if np.array_equal(order, np.arange(env.num_agents)) else np.argsort(order)
    sampler = c.sampler if c.sampler != "auto" else (
        "jax" if env.backend == "jax" else env.backend)
    # Every sampler draws by global row (the kernel samplers take the shard's
    # row offset through their partitioning rule): the same actions on any
    # device count, so the fused kernel sampler stays on over several devices.
    if mesh is None:
        def sample(key, logits):
            return sample_actions(key, logits, nvec, backend=sampler)
    else:
        def sample(key, logits):
            return sharding.sample_actions(key, logits, nvec, mesh, "envs", backend=sampler)

    def pin(tree: Any, spec: P) -> Any:
        """Sharding constraint `spec` on every leaf (no-op on one device). Under
        vmap over seeds jax adds the seed axis to the spec itself."""
        if mesh is None:
            return tree
        target = NamedSharding(mesh, spec)
        return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, target), tree)

    def pin_state(rs: RunnerState) -> RunnerState:
        if mesh is None:
            return rs
        return jax.lax.with_sharding_constraint(rs, _state_shardings(mesh, rs, False))
    obs_dim = int(env.observation_space.shape[-1])
    episode_metrics = getattr(env, "episode_metrics", None)

    def optimiser(g: str) -> optax.GradientTransformation:
        lr = c.policy(g).lr
        steps = d.num_updates * d.optimizer_steps
        schedule = optax.linear_schedule(lr, 0.0, steps) if c.anneal_lr else lr
        adam = optax.adam(schedule, eps=1e-5)
        return optax.chain(optax.clip_by_global_norm(c.max_grad_norm), adam) \
            if c.max_grad_norm > 0 else adam

    txs = {g: optimiser(g) for g in groups}
    trainable = {g: c.policy(g).train for g in groups}

    def select(x: jax.Array, g: str, axis: int) -> jax.Array:
        ids = groups[g]
        if _contiguous(ids):
            return jax.lax.slice_in_dim(x, int(ids[0]), int(ids[0]) + len(ids), axis=axis)
        return jnp.take(x, jnp.asarray(ids), axis=axis)

    def forward(g: str, params, stats, obs_g: jax.Array):
        if c.normalize_obs:
            obs_g = stats[g].normalize(obs_g)
        return nets[g].apply(params[g], obs_g)

    def policy(params, stats, obs: jax.Array, trained: Mapping[str, bool] | None = None
               ) -> tuple[jax.Array, jax.Array]:
        """obs f32[envs, agents, D] -> (logits f32[envs, agents, sum(nvec)],
        value f32[envs, agents]). trained: group -> False plays that group
        uniformly at random (zero logits and values; `jaxwarp eval`); None:
        every group's own model, as in training."""
        def out(g: str):
            obs_g = select(obs, g, 1)
            if trained is None or trained[g]:
                return forward(g, params, stats, obs_g)
            return (jnp.zeros(obs_g.shape[:2] + (sum(nvec),), jnp.float32),
                    jnp.zeros(obs_g.shape[:2], jnp.float32))

        outs = [out(g) for g in groups]
        logits = jnp.concatenate([o[0] for o in outs], axis=1)
        value = jnp.concatenate([o[1] for o in outs], axis=1)
        if inverse is not None:
            logits, value = logits[:, inverse], value[:, inverse]
        return logits, value

    # ------------------------------------------------------------------ init
    def init(key: jax.Array) -> RunnerState:
        key = key_data_of(key)
        key, k_env, *k_models = jax.random.split(key, 2 + len(groups))
        obs, env_state = env.reset(k_env, c.num_envs)
        dummy = jnp.zeros((1, obs_dim), jnp.float32)
        params = {g: nets[g].init(k, dummy) for g, k in zip(groups, k_models)}
        return pin_state(RunnerState(
            params=params,
            opt_state={g: txs[g].init(params[g]) for g in groups},
            obs_stats={g: core.RunningStats.create(obs_dim) for g in groups}
            if c.normalize_obs else {},
            env_state=env_state, obs=obs, key=key,
            update=jnp.zeros((), jnp.int32),
            last_return={g: jnp.full((), jnp.nan, jnp.float32) for g in groups},
            last_extra={k: jnp.full((), jnp.nan, jnp.float32)
                        for k in _extra_names(env, episode_metrics, c.num_envs)}))

    # ---------------------------------------------------------------- update
    def env_step(carry, key):
        params, stats, env_state, obs = carry
        k_act, k_env = jax.random.split(key)
        logits, value = policy(params, stats, obs)
        actions, logp = sample(k_act, logits)
        next_obs, env_state, reward, done, info = env.step(k_env, env_state, actions)
        # Episode statistics leave the scan as per-step sums (no host traffic).
        ret = info["episode_return"]
        w = done.astype(jnp.float32)
        ep = {g: jnp.sum(w * select(ret, g, 1).mean(axis=1)) for g in groups}
        if episode_metrics is not None:
            ep.update({k: jnp.sum(w * v) for k, v in episode_metrics(ret).items()})
        step = (obs, actions, logp, value, reward, done, ep, jnp.sum(w))
        return (params, stats, env_state, next_obs), step

    def update_group(g: str, params, opt_state, stats, batch: core.Batch, key):
        @jax.named_scope("forward")
        def loss_fn(p, mb: core.Batch, normalize: bool):
            # mb.obs holds every agent: the group's slice is cut here, from the
            # minibatch, so that no copy of the whole batch's group slice is made.
            logits, value = forward(g, {g: p}, stats, select(mb.obs, g, 2))
            return core.policy_loss(
                logits, value, mb, nvec, algorithm=c.algorithm, clip_eps=c.clip_eps,
                vf_coef=c.vf_coef, ent_coef=c.ent_coef, normalize_advantages=normalize)

        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

        size = d.minibatch_envs

        def spread(x: jax.Array, i: jax.Array) -> jax.Array:
            """Several devices: minibatch i of [T, envs, ...] laid out device-major
            (see `chunk`) is local env block [i*size/D, (i+1)*size/D) of every
            device: a reshape of the sharded env axis and a slice, no copy
            between devices."""
            blocks = x.reshape(x.shape[0], shards, d.minibatches, size // shards, *x.shape[2:])
            mb = jax.lax.dynamic_index_in_dim(blocks, i, axis=2, keepdims=False)
            return pin(mb.reshape(x.shape[0], size, *x.shape[2:]), P(None, "envs"))

        def local_take(x: jax.Array, perms: jax.Array, i: jax.Array) -> jax.Array:
            """Several devices, per-device shuffle: minibatch i of [T, envs, ...]
            is local envs perms[k, i*size/D:(i+1)*size/D] of every device k
            (perms: i32[D, envs/D], one permutation of its own envs per
            device): a gather within each device's block, no exchange."""
            local = size // shards
            idx = jax.lax.dynamic_slice_in_dim(perms, i * local, local, axis=1)
            blocks = x.reshape(x.shape[0], shards, x.shape[1] // shards, *x.shape[2:])
            mb = jax.vmap(lambda xd, ix: jnp.take(xd, ix, axis=1), in_axes=(1, 0),
                          out_axes=1)(blocks, idx)
            return pin(mb.reshape(x.shape[0], size, *x.shape[2:]), P(None, "envs"))

        @jax.named_scope("minibatch")
        def chunk(src: core.Batch, i: jax.Array, perm: jax.Array | None) -> core.Batch:
            """Minibatch i of `src`: envs perm[i*size:(i+1)*size] (or that slice)
            of every [T, envs, ...] field, cut inside the scan body so that the
            minibatches are never materialised all at once.

            Several devices: chunk i is each device's own env block i
            (`spread`) or, with per-device permutations perm i32[D, envs/D],
            each device's envs from its own permutation (`local_take`). A2C's
            gradient chunks then hold other envs than on one device (the same
            mean gradient over the chunks); PPO with the global shuffle passes
            the batch `deal` already reordered by perm (perm unused here)."""
            if shards > 1:
                if perm is not None and perm.ndim == 2:
                    return jax.tree.map(lambda x: local_take(x, perm, i), src)
                return jax.tree.map(lambda x: spread(x, i), src)
            if perm is None:
                return jax.tree.map(
                    lambda x: jax.lax.dynamic_slice_in_dim(x, i * size, size, axis=1), src)
            idx = jax.lax.dynamic_slice_in_dim(perm, i * size, size)
            return jax.tree.map(lambda x: jnp.take(x, idx, axis=1), src)

        if c.algorithm == "a2c":
            # One optimiser step on the whole batch; gradients are summed over
            # equal chunks of envs so that memory stays bounded.
            if c.normalize_advantages:
                a = batch.advantage
                batch = batch.replace(advantage=(a - a.mean()) / (a.std() + 1e-8))
            if d.minibatches == 1:
                (loss, metrics), grads = grad_fn(params, batch, False)
                metrics = {"loss": loss, **metrics}
            else:
                def accumulate(acc, i):
                    (loss, m), g_ = grad_fn(params, chunk(batch, i, None), False)
                    return jax.tree.map(jnp.add, acc, g_), {"loss": loss, **m}

                zero = jax.tree.map(jnp.zeros_like, params)
                grads, metrics = jax.lax.scan(accumulate, zero, jnp.arange(d.minibatches))
                grads = jax.tree.map(lambda x: x / d.minibatches, grads)
                metrics = jax.tree.map(jnp.mean, metrics)
            with jax.named_scope("optimizer"):
                updates, opt_state = txs[g].update(grads, opt_state, params)
                return optax.apply_updates(params, updates), opt_state, metrics

        @jax.named_scope("minibatch")
        def deal(perm: jax.Array) -> core.Batch:
            """Several devices: `batch` reordered once per epoch so that envs
            perm[i*size + k*size/D + j] (device k's share of minibatch i) sit at
            env index k*n/D + i*size/D + j, i.e. on device k (one exchange of
            the batch between devices per epoch instead of one per minibatch)."""
            order = perm.reshape(d.minibatches, shards, size // shards)
            order = order.transpose(1, 0, 2).reshape(-1)
            return jax.tree.map(lambda x: pin(jnp.take(x, order, axis=1), P(None, "envs")),
                                batch)

        def epoch(carry, k):
            # Minibatches are disjoint random sets of envs (rows of T x agents):
            # one permutation of all envs, or over several devices (the default,
            # minibatch_shuffle="device") one of each device's own envs, so that
            # the batch never moves between devices (docs/sharding.md).
            perm, dealt = None, batch
            if d.minibatches > 1 and (shards == 1 or c.minibatch_shuffle == "global"):
                perm = jax.random.permutation(k, c.num_envs)
                dealt = deal(perm) if shards > 1 else batch
            elif d.minibatches > 1:
                perm = jax.vmap(lambda kd: jax.random.permutation(kd, c.num_envs // shards))(
                    jax.random.split(k, shards))

            def sgd_step(carry, i):
                p, o = carry
                mb = chunk(dealt, i, perm) if d.minibatches > 1 else batch
                (loss, metrics), grads = grad_fn(p, mb, c.normalize_advantages)
                with jax.named_scope("optimizer"):
                    updates, o = txs[g].update(grads, o, p)
                    p = optax.apply_updates(p, updates)
                return (p, o), {"loss": loss, **metrics}

            return jax.lax.scan(sgd_step, carry, jnp.arange(d.minibatches))

        (params, opt_state), metrics = jax.lax.scan(
            epoch, (params, opt_state), jax.random.split(key, d.epochs))
        return params, opt_state, jax.tree.map(jnp.mean, metrics)

    @jax.named_scope("rollout")
    def rollout(rs: RunnerState, key: jax.Array):
        """num_steps env steps with the current policies: (env_state, obs, trajectory)."""
        (_, _, env_state, obs), traj = jax.lax.scan(
            env_step, (rs.params, rs.obs_stats, rs.env_state, rs.obs),
            jax.random.split(key, c.num_steps))
        return env_state, obs, traj

    def update(rs: RunnerState, _) -> tuple[RunnerState, dict[str, jax.Array]]:
        key, k_roll, k_upd = jax.random.split(rs.key, 3)
        env_state, obs, traj = rollout(rs, k_roll)
        t_obs, t_act, t_logp, t_value, t_reward, t_done, t_ep, t_count = traj
        with jax.named_scope("rollout"):
            _, last_value = policy(rs.params, rs.obs_stats, obs)
        with jax.named_scope("gae"):
            adv, target = core.gae(t_reward, t_value, t_done[:, :, None], last_value,
                                   c.gamma, c.gae_lambda)
        # [T, envs, ...] stays split along envs (no-op on one device).
        t_obs, t_act, t_logp, t_value, t_reward, adv, target = pin(
            (t_obs, t_act, t_logp, t_value, t_reward, adv, target), P(None, "envs"))

        params, opt_state, metrics = dict(rs.params), dict(rs.opt_state), {}
        finite = jnp.array(True)
        for g, k in zip(groups, jax.random.split(k_upd, len(groups))):
            metrics[f"{g}/reward"] = select(t_reward, g, 2).mean()
            if not trainable[g] or not jax.tree.leaves(params[g]):
                continue
            batch = core.Batch(t_obs, *(select(x, g, 2) for x in
                                        (t_act, t_logp, t_value, adv, target)))
            params[g], opt_state[g], m = update_group(
                g, params[g], opt_state[g], rs.obs_stats, batch, k)
            metrics.update({f"{g}/{name}": v for name, v in m.items()})
            finite = finite & jnp.isfinite(m["loss"]) & _all_finite(params[g])
        with jax.named_scope("obs_stats"):
            stats = ({g: rs.obs_stats[g].update(select(t_obs, g, 2)) for g in groups}
                     if c.normalize_obs else {})

        episodes = t_count.sum()
        seen = episodes > 0
        last_return = {g: jnp.where(seen, t_ep[g].sum() / jnp.maximum(episodes, 1),
                                    rs.last_return[g]) for g in groups}
        last_extra = {k: jnp.where(seen, t_ep[k].sum() / jnp.maximum(episodes, 1),
                                   rs.last_extra[k]) for k in rs.last_extra}
        rs = pin_state(RunnerState(params=params, opt_state=opt_state, obs_stats=stats,
                                   env_state=env_state, obs=obs, key=key,
                                   update=rs.update + 1, last_return=last_return,
                                   last_extra=last_extra))
        metrics.update({f"{g}/episode_return": last_return[g] for g in groups})
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

    return Trainer(config=c, derived=d, env=env, groups=groups, models=nets,
                   init=init, run=run, rollout=rollout, policy=policy, mesh=mesh,
                   sampler=sampler)


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


def _extra_names(env, episode_metrics, num_envs: int) -> list[str]:
    if episode_metrics is None:
        return []
    ret = jax.ShapeDtypeStruct((num_envs, env.num_agents), jnp.float32)
    return sorted(jax.eval_shape(episode_metrics, ret))


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

