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

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxwarp.core import key_data_of
from jaxwarp.models import MLPActorCritic
from jaxwarp.train import fused, losses
from jaxwarp.train.compile import COMPILER_OPTIONS, jit  # noqa: F401  (public re-export)
from jaxwarp.train.config import Derived, TrainConfig, derived
from jaxwarp.train.hyper import Hyper
from jaxwarp.train.learn import Collected, Learner, LearnerState, learn, optimiser
from jaxwarp.train.minibatches import Minibatches
from jaxwarp.train.policy import Groups, Policy, RunningStats, param_init
from jaxwarp.train.rollout import (Acting, EnvCarry, Transition, env_metric_names,
                                   episode_sums)
from jaxwarp.train.environment import env_on_mesh, import_env_module  # noqa: F401
from jaxwarp.train.mesh import pinner
from jaxwarp.train.setup import (group_models, make_policy, make_sampler, sample_minibatches,
                                 state_dim)


@struct.dataclass
class EpisodeLog:
    """The latest finished episodes' means (NaN until one finishes)."""

    returns: dict[str, jax.Array]  # group -> f32[] mean return
    extra: dict[str, jax.Array]  # the env's episode metric -> f32[] (env_metric_names)


@struct.dataclass
class RunnerState:
    """Everything carried from one update to the next (a pytree of arrays)."""

    learner: LearnerState  # per group: parameters, optimiser state, observation statistics
    envs: EnvCarry  # env state, current observation, recurrent carries, episode starts
    episodes: EpisodeLog
    key: jax.Array  # u32[2] raw key data
    update: jax.Array  # i32[]: updates done so far
    hyper: Hyper  # the hyperparameters a sweep varies (the config's values in a plain run)


class Trainer(NamedTuple):
    """The pure functions of one configured run (see `build_trainer`)."""

    config: TrainConfig
    derived: Derived
    env: Any
    groups: dict[str, np.ndarray]  # group -> agent ids
    models: dict[str, nn.Module]
    init: Callable[[jax.Array], RunnerState]  # key (u32[2] or typed) -> state
    run: Callable[[RunnerState, int], tuple[RunnerState, dict[str, jax.Array]]]
    # (state, key) -> (envs, episode sums, trajectory): one rollout (profiling)
    rollout: Callable[[RunnerState, jax.Array], tuple[EnvCarry, dict, Transition]]
    # (params, obs_stats, obs, trained=None) -> (logits, value); see Policy.__call__
    policy: Policy
    mesh: Mesh | None = None  # the data-parallel mesh (axis "envs"); None: one device
    sampler: str = "auto"  # the action sampler's backend as run ("jax" | "cpu" | "cuda")
    rollout_path: str = "step by step"  # "fused" or "step by step: <why>" (train/fused.py)
    # group -> which layers run its `mlp` model (MLPActorCritic.layers; other models absent)
    model_layers: Mapping[str, str] | None = None
    # recurrent group -> how the learner runs its model over a rollout: "sequence"
    # (the model's sequence form) or "step by step" (replayed by a scan; docs/models.md)
    recurrent_learner: Mapping[str, str] | None = None
    # the env's own episode metrics, logged under these names (rollout.env_metric_names)
    env_metrics: tuple[str, ...] = ()

    def state_shardings(self, state: Any, seed_axis: bool = False) -> Any:
        """NamedShardings of a RunnerState-shaped tree (arrays or
        ShapeDtypeStructs) on `mesh`: the envs split along the env axis (axis
        1 with a leading seed axis), everything else replicated. None without
        a mesh."""
        if self.mesh is None:
            return None
        return _state_shardings(self.mesh, state, seed_axis)


def _state_shardings(mesh: Mesh, rs: Any, seed_axis: bool) -> Any:
    rep = NamedSharding(mesh, P())
    envs = NamedSharding(mesh, P(None, "envs") if seed_axis else P("envs"))
    tree = jax.tree.map(lambda _: rep, rs)
    return tree.replace(envs=jax.tree.map(lambda _: envs, rs.envs))


class _Run(NamedTuple):
    """A configured run's fixed pieces, as `build_trainer` composes them."""

    config: TrainConfig
    derived: Derived
    acting: Acting  # how the envs are played
    learner: Learner  # how the groups learn
    rollout: Callable  # rollout.rollout or a fused.FusedRollout (same arguments)
    init_params: Callable[[str, jax.Array], Any]  # (group, key) -> its parameters
    pin: Callable[[Any, P], Any]  # sharding constraint (identity on one device)
    mesh: Mesh | None
    env_metrics: tuple[str, ...]  # the env's own episode metrics (rollout.env_metric_names)


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
    return trainer_for(config, derived(config), env, models, local)


def trainer_for(config: TrainConfig, d: Derived, env: Any = None,
                models: Mapping[str, nn.Module] | None = None, local: bool = False
                ) -> Trainer:
    """`build_trainer` for a caller that holds the config's derived quantities
    already (`d`: ``derived(config)``; the run shell's, from the config it
    resolved), so that they are computed once."""
    run, about = _compose(config, d, env, models, local)
    policy, env = run.acting.policy, run.acting.env

    def rollout(rs: RunnerState, key: jax.Array) -> tuple[EnvCarry, dict, Transition]:
        return run.rollout(run.acting, rs.learner.params, rs.learner.obs_stats, rs.envs, key,
                           config.num_steps)

    def train_chunk(rs: RunnerState, num_updates: int):
        """`num_updates` updates by lax.scan; metrics: name -> f32[num_updates].

        metrics["finite"] is 1.0 where the update's losses and the trained
        groups' parameters after it are all finite, 0.0 where NaN/inf
        appeared (the host checks it once per chunk: no sync per update).
        """
        return jax.lax.scan(lambda rs, _: update_step(run, rs), rs, None, length=num_updates)

    return Trainer(config=config, derived=d, env=env, groups=policy.groups.ids,
                   models=policy.nets, init=lambda key: init_state(run, key), run=train_chunk,
                   rollout=rollout, policy=policy, mesh=run.mesh, **about)


def update_step(run: _Run, rs: RunnerState) -> tuple[RunnerState, dict[str, jax.Array]]:
    """One update: collect a rollout, its advantages, every group's update."""
    c, pin = run.config, run.pin
    key, k_roll, k_upd = jax.random.split(rs.key, 3)
    # COLLECT TRAJECTORIES
    envs, ep, traj = run.rollout(run.acting, rs.learner.params, rs.learner.obs_stats, rs.envs,
                                 k_roll, c.num_steps)
    # CALCULATE ADVANTAGE
    data = advantages(run, rs, envs, traj)
    # UPDATE NETWORK
    learner, metrics, finite = learn(run.learner, rs.learner, data, k_upd, rs.hyper)
    # LOG
    episodes, ended = log_episodes(rs.episodes, ep)
    rs = _pin_state(run, RunnerState(learner, envs, episodes, key, rs.update + 1, rs.hyper))
    metrics.update({f"{g}/episode_return": v for g, v in episodes.returns.items()})
    metrics.update(episodes.extra)
    metrics["episodes"] = ended
    metrics["env_steps"] = rs.update.astype(jnp.float32) * run.derived.batch_env_steps
    metrics["finite"] = finite.astype(jnp.float32)
    return rs, pin(metrics, P())


def advantages(run: _Run, rs: RunnerState, envs: EnvCarry, traj: Transition) -> Collected:
    """GAE over the rollout, bootstrapped from the value of the envs' current
    observation; the trajectory stays split along envs (no-op on one device)."""
    policy = run.acting.policy
    with jax.named_scope("rollout"):
        state = (run.acting.env.global_state(envs.obs, envs.env_state)
                 if run.acting.centralised else None)
        _, _, last_value = policy.step(rs.learner.params, rs.learner.obs_stats, envs.obs,
                                       envs.carry, envs.first, state)
    with jax.named_scope("gae"):
        adv, target = losses.gae(traj.reward, traj.value, traj.done[:, :, None], last_value,
                                 rs.hyper.gamma, rs.hyper.gae_lambda)
    traj = traj.replace(**run.pin({k: getattr(traj, k) for k in _SPLIT}, P(None, "envs")))
    adv, target = run.pin((adv, target), P(None, "envs"))
    return Collected(traj, adv, target, rs.envs.carry)


def log_episodes(log: EpisodeLog, ep: Mapping[str, jax.Array]) -> tuple[EpisodeLog, jax.Array]:
    """(the means over the episodes that ended in this rollout (`rollout`'s
    sums), or the previous values where none ended; episodes f32[] ended)."""
    episodes = ep["episodes"]
    seen = episodes > 0

    def mean(k: str, old: jax.Array) -> jax.Array:
        return jnp.where(seen, ep[k] / jnp.maximum(episodes, 1), old)

    return EpisodeLog({g: mean(g, v) for g, v in log.returns.items()},
                      {k: mean(k, v) for k, v in log.extra.items()}), episodes


def init_state(run: _Run, key: jax.Array) -> RunnerState:
    """The envs reset and every group's fresh parameters and optimiser state."""
    c, policy, env = run.config, run.acting.policy, run.acting.env
    ids = policy.groups.ids
    obs_dim = int(env.observation_space.shape[-1])
    key = key_data_of(key)
    key, k_env, *k_models = jax.random.split(key, 2 + len(ids))
    obs, env_state = env.reset(k_env, c.num_envs)
    params = {g: run.init_params(g, k) for g, k in zip(ids, k_models)}
    hyper = Hyper.of(c, ids)
    learner = LearnerState(
        params=params,
        opt_state={g: optimiser(c, run.derived, g, hyper).init(params[g]) for g in ids},
        obs_stats={g: RunningStats.create(obs_dim) for g in ids}
        if c.normalize_obs else {})
    envs = EnvCarry(env_state, obs, policy.initial_carry(c.num_envs),
                    jnp.ones((c.num_envs,), bool))
    nan = jnp.full((), jnp.nan, jnp.float32)
    episodes = EpisodeLog({g: nan for g in ids}, {k: nan for k in run.env_metrics})
    return _pin_state(run, RunnerState(learner, envs, episodes, key, jnp.zeros((), jnp.int32),
                                       hyper))


def _pin_state(run: _Run, rs: RunnerState) -> RunnerState:
    return rs if run.mesh is None else jax.lax.with_sharding_constraint(
        rs, _state_shardings(run.mesh, rs, False))


def _compose(c: TrainConfig, d: Derived, env: Any, models: Mapping[str, nn.Module] | None,
             local: bool) -> tuple[_Run, dict[str, Any]]:
    """The run's pieces (`_Run`), each made once and each module's in one go:
    the env on its mesh, the policy and its sampler, what an episode logs, the
    models' initial parameters (their contract checked), the rollout path and
    the learner; and what the `Trainer` tells of them (sampler backend,
    rollout path, models' layers, recurrent learner paths, episode metrics)."""
    env, mesh = env_on_mesh(c, d, env, local)
    pin = pinner(mesh)
    nvec = tuple(int(n) for n in env.action_space.nvec)
    obs_dim = int(env.observation_space.shape[-1])
    groups = Groups.of(env)
    policy = make_policy(c, env, groups, group_models(c, env, groups, models, nvec, mesh), nvec)
    centralised = policy.critics is not None
    global_dim = state_dim(env) if centralised else 0
    samples = sample_minibatches(c, policy)
    sampler = c.sampler if c.sampler != "auto" else (
        "jax" if env.backend == "jax" else env.backend)
    sample = make_sampler(nvec, sampler, mesh)
    env_metrics = env_metric_names(env, c.num_envs)
    sums = episode_sums(policy, getattr(env, "episode_metrics", None))
    init_params = param_init(policy, obs_dim, global_dim)
    learners = {g: "sequence" if policy.sequence_form(g) else "step by step"
                for g in policy.recurrent}
    # One custom call per rollout where it is faster (jaxwarp.train.fused.choice).
    roll, path = fused.rollout_for(policy, env, sums, sampler, mesh is not None, c.num_envs)
    cut = Minibatches(d.minibatches, d.minibatch_envs, 1 if mesh is None else mesh.size,
                      c.num_envs, pin, samples=samples)
    run = _Run(c, d, Acting(policy, sample, env, sums, centralised),
               Learner(c, d, policy, cut, d.epochs), roll, init_params, pin, mesh, env_metrics)
    layers = {g: m.layers(obs_dim) for g, m in policy.nets.items()
              if isinstance(m, MLPActorCritic)}  # which layers run each `mlp` model
    return run, dict(sampler=sampler, rollout_path=path, model_layers=layers,
                     recurrent_learner=learners, env_metrics=env_metrics)


# Trajectory fields kept split along the env axis between rollout and update.
_SPLIT = ("obs", "actions", "log_prob", "value", "reward", "first", "state")


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

