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
that run the updates in chunks (the CLI: progress, logs, checkpoints). It
makes each piece once, a module's pieces in one go (`_compose`): the env on
its mesh (`environment`, `mesh`), the policy and its sampler (`setup`), what
an episode logs (`rollout`), the models' checked initial parameters
(`policy`), the rollout path (`fused`), the groups' optimisers (`optim`);
the program over them is the runner state and its start (`state`) and one
update (`update`).

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
import numpy as np
from jax.sharding import Mesh

from jaxwarp.models import MLPActorCritic
from jaxwarp.train import fused, ppo_mosaic
from jaxwarp.train.compile import COMPILER_OPTIONS, jit  # noqa: F401  (public re-export)
from jaxwarp.train.config import Derived, TrainConfig, derived
from jaxwarp.train.environment import env_on_mesh, import_env_module  # noqa: F401
from jaxwarp.train.hyper import Hyper
from jaxwarp.train.learn import Learner
from jaxwarp.train.mesh import env_mesh
from jaxwarp.train.minibatches import Minibatches, pinner
from jaxwarp.train.optim import optimisers
from jaxwarp.train.policy import Groups, Policy, param_init
from jaxwarp.train.rollout import (Acting, EnvCarry, Transition, env_metric_names,
                                   episode_sums)
from jaxwarp.train.setup import (group_models, make_policy, make_sampler, sample_minibatches,
                                 state_dim)
from jaxwarp.train.state import (EpisodeLog, Pieces, RunnerState,  # noqa: F401  (re-exports)
                                 init_state, state_shardings)
from jaxwarp.train.update import update_step


class Trainer(NamedTuple):
    """The pure functions of one configured run (see `build_trainer`)."""

    config: TrainConfig
    derived: Derived
    env: Any
    groups: dict[str, np.ndarray]  # group -> agent ids
    models: dict[str, nn.Module]
    init: Callable[..., RunnerState]  # key (u32[2] or typed)[, a sweep member's Hyper] -> state
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
        return state_shardings(self.mesh, state, seed_axis)


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
    d = derived(config)
    mesh = None if local else env_mesh(config, d)
    return trainer_for(config, d, env_on_mesh(config, env, mesh), mesh, models)


def trainer_for(config: TrainConfig, d: Derived, env: Any, mesh: Mesh | None,
                models: Mapping[str, nn.Module] | None = None) -> Trainer:
    """`build_trainer` for a caller that placed the run already: `d` is
    ``derived(config)``, `env` the checked env on `mesh` (`env_on_mesh`; the
    run shell's, from the config it resolved), so that each is made once."""
    run, about = _compose(config, d, env, mesh, models)
    policy, env = run.acting.policy, run.acting.env

    def rollout(rs: RunnerState, key: jax.Array) -> tuple[EnvCarry, dict, Transition]:
        return run.rollout(run.acting, rs.learner.params, rs.learner.obs_stats, rs.envs, key,
                           config.num_steps, rs.hyper.env)

    def train_chunk(rs: RunnerState, num_updates: int):
        """`num_updates` updates by lax.scan; metrics: name -> f32[num_updates].

        metrics["finite"] is 1.0 where the update's losses and the trained
        groups' parameters after it are all finite, 0.0 where NaN/inf
        appeared (the host checks it once per chunk: no sync per update).
        """
        return jax.lax.scan(lambda rs, _: update_step(run, rs), rs, None, length=num_updates)

    def init(key: jax.Array, hyper: Hyper | None = None) -> RunnerState:
        """The runner state at update 0 (key: u32[2] or typed; `hyper`: a sweep
        member's, None: the config's and the env's own)."""
        return init_state(run, key, hyper)

    return Trainer(config=config, derived=d, env=env, groups=policy.groups.ids,
                   models=policy.nets, init=init, run=train_chunk, rollout=rollout,
                   policy=policy, mesh=run.mesh, **about)


def _compose(c: TrainConfig, d: Derived, env: Any, mesh: Mesh | None,
             models: Mapping[str, nn.Module] | None) -> tuple[Pieces, dict[str, Any]]:
    """The run's pieces (`Pieces`), each made once and each module's in one go
    (`env` placed on `mesh` by the caller): the policy and its sampler, what an episode logs, the
    models' initial parameters (their contract checked), the rollout path and
    the learner with the groups' optimisers; and what the `Trainer` tells of
    them (sampler backend, rollout path, models' layers, recurrent learner
    paths, episode metrics)."""
    pin = pinner(mesh)
    nvec = tuple(int(n) for n in env.action_space.nvec)
    obs_dim = int(env.observation_space.shape[-1])
    groups = Groups.of(env)
    policy = make_policy(c, env, groups, group_models(c, env, groups, models, nvec, mesh), nvec)
    centralised = policy.critics is not None
    global_dim = state_dim(env) if centralised else 0
    samples = sample_minibatches(c, policy)
    sampler, sample = make_sampler(c, env, nvec, mesh)
    env_metrics = env_metric_names(env, c.num_envs)
    sums = episode_sums(policy, getattr(env, "episode_metrics", None))
    init_params = param_init(policy, obs_dim, global_dim)
    learners = {g: "sequence" if policy.sequence_form(g) else "step by step"
                for g in policy.recurrent}
    # One custom call per rollout where it is faster (jaxwarp.train.fused.choice).
    roll, path = fused.rollout_for(policy, env, sums, sampler, mesh is not None, c.num_envs)
    cut = Minibatches(d.minibatches, d.minibatch_envs, 1 if mesh is None else mesh.size,
                      c.num_envs, pin, samples=samples)
    learner = Learner(c, d, policy, cut, d.epochs, optimisers(c, d, groups.ids))
    run = Pieces(c, d, Acting(policy, sample, env, sums, centralised), learner, roll,
                 init_params, pin, mesh, env_metrics)
    layers = {g: m.layers(obs_dim) + _learner_kernels(c, policy, g, obs_dim)
              for g, m in policy.nets.items()
              if isinstance(m, MLPActorCritic)}  # which layers run each `mlp` model
    return run, dict(sampler=sampler, rollout_path=path, model_layers=layers,
                     recurrent_learner=learners, env_metrics=env_metrics)


def _learner_kernels(c: TrainConfig, policy: Any, g: str, obs_dim: int) -> str:
    """What `model_layers` adds where the PPO step runs on `ppo_mosaic`'s kernels."""
    if c.policy(g).train and ppo_mosaic.group_why_not(c.algorithm, policy, g, obs_dim) is None:
        return "; the PPO minibatch's loss and gradient on Mosaic GPU"
    return ""


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

