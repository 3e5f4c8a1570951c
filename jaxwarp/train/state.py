"""The state a run's program carries from one update to the next
(`RunnerState`), the fixed pieces it is built from (`Pieces`, as
`trainer.build_trainer` composes them) and its start (`init_state`).

Over several devices the state lies on the data-parallel mesh as
`state_shardings` says, the envs split along the env axis and everything
else replicated; the start and every update end pinned to it (`pin_state`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxwarp.core import key_data_of
from jaxwarp.train.config import Derived, TrainConfig
from jaxwarp.train.hyper import Hyper
from jaxwarp.train.learn import Learner, LearnerState
from jaxwarp.train.obs_stats import RunningStats
from jaxwarp.train.rollout import Acting, EnvCarry


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


class Pieces(NamedTuple):
    """A configured run's fixed pieces (no arrays), as `trainer.build_trainer`
    composes them."""

    config: TrainConfig
    derived: Derived
    acting: Acting  # how the envs are played
    learner: Learner  # how the groups learn
    rollout: Callable  # rollout.rollout or a fused.FusedRollout (same arguments)
    init_params: Callable[[str, jax.Array], Any]  # (group, key) -> its parameters
    pin: Callable[[Any, P], Any]  # sharding constraint (identity on one device)
    mesh: Mesh | None
    env_metrics: tuple[str, ...]  # the env's own episode metrics (rollout.env_metric_names)


def init_state(run: Pieces, key: jax.Array, hyper: Hyper | None = None) -> RunnerState:
    """The envs reset and every group's fresh parameters and optimiser state;
    `hyper`: a sweep member's (None: the config's and the env's own)."""
    c, policy, env = run.config, run.acting.policy, run.acting.env
    ids = policy.groups.ids
    obs_dim = int(env.observation_space.shape[-1])
    hyper = Hyper.of(c, ids, env) if hyper is None else hyper
    key = key_data_of(key)
    key, k_env, *k_models = jax.random.split(key, 2 + len(ids))
    words = {} if hyper.env is None else {"params": hyper.env}  # an env with params as data
    obs, env_state = env.reset(k_env, c.num_envs, **words)
    params = {g: run.init_params(g, k) for g, k in zip(ids, k_models)}
    learner = LearnerState(
        params=params,
        opt_state={g: run.learner.optimisers[g](hyper).init(params[g]) for g in ids},
        obs_stats={g: RunningStats.create(obs_dim) for g in ids}
        if c.normalize_obs else {})
    envs = EnvCarry(env_state, obs, policy.initial_carry(c.num_envs),
                    jnp.ones((c.num_envs,), bool))
    nan = jnp.full((), jnp.nan, jnp.float32)
    episodes = EpisodeLog({g: nan for g in ids}, {k: nan for k in run.env_metrics})
    return pin_state(run, RunnerState(learner, envs, episodes, key, jnp.zeros((), jnp.int32),
                                      hyper))


def pin_state(run: Pieces, rs: RunnerState) -> RunnerState:
    """`rs` constrained to `state_shardings` on the run's mesh (as it is on one device)."""
    return rs if run.mesh is None else jax.lax.with_sharding_constraint(
        rs, state_shardings(run.mesh, rs, False))


def state_shardings(mesh: Mesh, rs: Any, seed_axis: bool) -> Any:
    """NamedShardings of a RunnerState-shaped tree on `mesh`: the envs split
    along the env axis (axis 1 with a leading seed axis), the rest replicated."""
    rep = NamedSharding(mesh, P())
    envs = NamedSharding(mesh, P(None, "envs") if seed_axis else P("envs"))
    tree = jax.tree.map(lambda _: rep, rs)
    return tree.replace(envs=jax.tree.map(lambda _: envs, rs.envs))
