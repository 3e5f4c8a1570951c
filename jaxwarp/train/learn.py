"""The learner: every trained group's PPO or A2C update from one rollout.

`learn` is the whole phase: per policy group, the group's slice of the
trajectory as a `losses.Batch`, then `ppo_update` (``epochs`` x
``minibatches`` Optax steps on disjoint random minibatches) or `a2c_update`
(one step on the whole batch, its gradient summed over equal chunks of envs),
then the observation statistics. Pure functions of arrays; the fixed pieces
(config, models, optimisers, minibatch cut) are a `Learner`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxwarp.train import losses, ppo_mosaic
from jaxwarp.train.config import Derived, TrainConfig
from jaxwarp.train.hyper import Hyper
from jaxwarp.train.minibatches import Minibatches
from jaxwarp.train.obs_stats import RunningStats
from jaxwarp.train.optim import Optimiser
from jaxwarp.train.policy import Policy
from jaxwarp.train.rollout import Transition

# (params, minibatch, normalize_advantages) -> ((loss, metrics), grads)
GradFn = Callable[[Any, losses.Batch, bool], tuple[tuple[jax.Array, dict], Any]]


@struct.dataclass
class LearnerState:
    """What the updates change, per policy group."""

    params: dict[str, Any]
    opt_state: dict[str, Any]
    obs_stats: dict[str, RunningStats]  # {} unless normalize_obs


class Learner(NamedTuple):
    """The fixed pieces of the learning phase (no arrays)."""

    config: TrainConfig
    derived: Derived
    policy: Policy
    minibatches: Minibatches
    epochs: int  # PPO's passes over the batch
    optimisers: dict[str, Optimiser]  # group -> its optimiser at a run's Hyper (optim.py)


class Collected(NamedTuple):
    """One rollout's data for the learner."""

    traj: Transition  # [T, envs, ...]
    advantage: jax.Array  # f32[T, envs, agents] (GAE)
    target: jax.Array  # f32[T, envs, agents]: value targets
    carry: dict[str, Any]  # recurrent group -> its carry at the rollout's start


class GroupStep(NamedTuple):
    """One group's optimiser step as `ppo_update` / `a2c_update` run it."""

    grad_fn: GradFn
    tx: optax.GradientTransformation
    minibatches: Minibatches
    epochs: int
    normalize_advantages: bool
    global_shuffle: bool  # over several devices: one permutation of all envs


def learn(learner: Learner, state: LearnerState, data: Collected, key: jax.Array,
          hyper: Hyper) -> tuple[LearnerState, dict[str, jax.Array], jax.Array]:
    """Every trained group's update (at `hyper`'s values), then the observation
    statistics. Returns
    (the new state, metrics "group/name" -> f32[], finite: bool[] every loss
    and trained parameter finite)."""
    groups, c = learner.policy.groups, learner.config
    params, opt_state, metrics = dict(state.params), dict(state.opt_state), {}
    finite = jnp.array(True)
    for g, k in zip(groups.ids, jax.random.split(key, len(groups.ids))):
        metrics[f"{g}/reward"] = groups.select(data.traj.reward, g, 2).mean()
        if not c.policy(g).train or not jax.tree.leaves(params[g]):
            continue
        params[g], opt_state[g], m = _update_group(learner, g, state, data, k, hyper)
        metrics.update({f"{g}/{name}": v for name, v in m.items()})
        finite = finite & jnp.isfinite(m["loss"]) & _all_finite(params[g])
    with jax.named_scope("obs_stats"):
        stats = ({g: state.obs_stats[g].update(groups.select(data.traj.obs, g, 2))
                  for g in groups.ids} if c.normalize_obs else {})
    return LearnerState(params, opt_state, stats), metrics, finite


def _update_group(learner: Learner, g: str, state: LearnerState, data: Collected,
                  key: jax.Array, hyper: Hyper) -> tuple[Any, Any, dict[str, jax.Array]]:
    """Group g's PPO or A2C update: (params, opt_state, metrics name -> f32[])."""
    c, policy, traj = learner.config, learner.policy, data.traj
    recurrent = g in policy.recurrent
    batch = losses.Batch(
        traj.obs, *(policy.groups.select(x, g, 2) for x in
                    (traj.actions, traj.log_prob, traj.value, data.advantage, data.target)),
        first=traj.first if recurrent else None, state=traj.state,
        carry=jax.tree.map(lambda x: x[None], data.carry[g]) if recurrent else None)
    step = GroupStep(_grad_fn(c, policy, g, state.obs_stats.get(g), hyper),
                     learner.optimisers[g](hyper),
                     learner.minibatches, learner.epochs, c.normalize_advantages,
                     c.minibatch_shuffle == "global")
    if c.algorithm == "a2c":
        return a2c_update(step, state.params[g], state.opt_state[g], batch)
    return ppo_update(step, state.params[g], state.opt_state[g], batch, key)


def _grad_fn(c: TrainConfig, policy: Policy, g: str, stats: RunningStats | None,
             hyper: Hyper) -> GradFn:
    """(params, minibatch, normalize_advantages) -> ((loss, metrics), grads) of group g."""
    @jax.named_scope("forward")
    def loss_fn(p, mb: losses.Batch, normalize: bool):
        # mb.obs holds every agent: the group's slice is cut here, from the
        # minibatch, so that no copy of the whole batch's group slice is made.
        carry = None if mb.carry is None else jax.tree.map(lambda x: x[0], mb.carry)
        lp, ent, value = policy.head_stats(g, p, stats, policy.groups.select(mb.obs, g, 2),
                                           mb.actions, carry, mb.first, mb.state)
        return losses.policy_loss(
            lp, ent, value, mb, algorithm=c.algorithm, clip_eps=hyper.clip_eps,
            vf_coef=hyper.vf_coef, ent_coef=hyper.ent_coef, normalize_advantages=normalize)

    autodiff = jax.value_and_grad(loss_fn, has_aux=True)
    net = policy.nets[g]
    kernels = ppo_mosaic.grad_fn(net, lambda obs: policy.groups.select(obs, g, 2),
                                 lambda obs: policy._normalized(stats, obs), hyper)

    def grad(p, mb: losses.Batch, normalize: bool):
        # The kernels where they take this group's step (shapes are known here).
        if ppo_mosaic.group_why_not(c.algorithm, policy, g, mb.obs.shape[-1]) is None:
            return kernels(p, mb, normalize)
        return autodiff(p, mb, normalize)
    return grad


def _all_finite(tree: Any) -> jax.Array:
    """bool[]: every element of every leaf of `tree` is finite."""
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.array(True)


def _apply(tx: optax.GradientTransformation, params: Any, opt_state: Any, grads: Any
           ) -> tuple[Any, Any]:
    with jax.named_scope("optimizer"):
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state


def a2c_update(step: GroupStep, params: Any, opt_state: Any, batch: losses.Batch
               ) -> tuple[Any, Any, dict[str, jax.Array]]:
    """One optimiser step on the whole batch; the gradient is the mean over
    `step.minibatches.minibatches` equal chunks of envs, so that memory stays
    bounded. Advantages are normalised over the whole batch, not per chunk.
    Returns (params, opt_state, metrics name -> f32[])."""
    cut = step.minibatches
    if step.normalize_advantages:
        a = batch.advantage
        batch = batch.replace(advantage=(a - a.mean()) / (a.std() + 1e-8))
    if cut.minibatches == 1:
        (loss, metrics), grads = step.grad_fn(params, batch, False)
        metrics = {"loss": loss, **metrics}
    else:
        def accumulate(acc, i):
            (loss, m), g_ = step.grad_fn(params, cut.chunk(batch, i, None), False)
            return jax.tree.map(jnp.add, acc, g_), {"loss": loss, **m}

        zero = jax.tree.map(jnp.zeros_like, params)
        grads, metrics = jax.lax.scan(accumulate, zero, jnp.arange(cut.minibatches))
        grads = jax.tree.map(lambda x: x / cut.minibatches, grads)
        metrics = jax.tree.map(jnp.mean, metrics)
    params, opt_state = _apply(step.tx, params, opt_state, grads)
    return params, opt_state, metrics


def ppo_update(step: GroupStep, params: Any, opt_state: Any, batch: losses.Batch,
               key: jax.Array) -> tuple[Any, Any, dict[str, jax.Array]]:
    """`step.epochs` passes over the batch, each `minibatches` Optax steps on
    disjoint random sets of steps or envs (`Minibatches`; advantages normalised
    per minibatch where asked). Returns (params, opt_state, metrics: means over
    every step)."""
    cut = step.minibatches

    def epoch(carry, k):
        perm, dealt = cut.shuffle(batch, k, step.global_shuffle)

        def sgd_step(carry, i):
            p, o = carry
            if cut.minibatches == 1:
                mb = batch
            elif cut.samples:
                mb = cut.steps(dealt, i, perm)
            else:
                mb = cut.chunk(dealt, i, perm)
            (loss, metrics), grads = step.grad_fn(p, mb, step.normalize_advantages)
            p, o = _apply(step.tx, p, o, grads)
            return (p, o), {"loss": loss, **metrics}

        return jax.lax.scan(sgd_step, carry, jnp.arange(cut.minibatches))

    (params, opt_state), metrics = jax.lax.scan(
        epoch, (params, opt_state), jax.random.split(key, step.epochs))
    return params, opt_state, jax.tree.map(jnp.mean, metrics)
