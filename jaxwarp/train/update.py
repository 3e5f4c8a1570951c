"""One update of a run's program (`update_step`): collect a rollout, its
advantages, every group's update, the episodes' log, the state pinned to the
mesh (`state.pin_state`)."""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from jaxwarp.train import losses
from jaxwarp.train.learn import Collected, learn
from jaxwarp.train.rollout import EnvCarry, Transition
from jaxwarp.train.state import EpisodeLog, Pieces, RunnerState, pin_state


# Trajectory fields kept split along the env axis between rollout and update.
_SPLIT = ("obs", "actions", "log_prob", "value", "reward", "first", "state")


def update_step(run: Pieces, rs: RunnerState) -> tuple[RunnerState, dict[str, jax.Array]]:
    """One update: collect a rollout, its advantages, every group's update."""
    c, pin = run.config, run.pin
    key, k_roll, k_upd = jax.random.split(rs.key, 3)
    # COLLECT TRAJECTORIES
    envs, ep, traj = run.rollout(run.acting, rs.learner.params, rs.learner.obs_stats, rs.envs,
                                 k_roll, c.num_steps, rs.hyper.env)
    # CALCULATE ADVANTAGE
    data = advantages(run, rs, envs, traj)
    # UPDATE NETWORK
    learner, metrics, finite = learn(run.learner, rs.learner, data, k_upd, rs.hyper)
    # LOG
    episodes, ended = log_episodes(rs.episodes, ep)
    rs = pin_state(run, RunnerState(learner, envs, episodes, key, rs.update + 1, rs.hyper))
    metrics.update({f"{g}/episode_return": v for g, v in episodes.returns.items()})
    metrics.update(episodes.extra)
    metrics["episodes"] = ended
    metrics["env_steps"] = rs.update.astype(jnp.float32) * run.derived.batch_env_steps
    metrics["finite"] = finite.astype(jnp.float32)
    return rs, pin(metrics, P())


def advantages(run: Pieces, rs: RunnerState, envs: EnvCarry, traj: Transition) -> Collected:
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
