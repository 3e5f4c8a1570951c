"""The losses and what they read: the minibatch (`Batch`), GAE, multi-head
categorical log-probabilities and entropy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct


def gae(rewards: jax.Array, values: jax.Array, dones: jax.Array, last_value: jax.Array,
        gamma: float, lam: float) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimation by a reverse scan over time.

    rewards, values: f32[T, ...]; dones: bool/f32[T, ...] broadcastable to
    them (done[t]: the episode ended with transition t, so V(s_{t+1}) of the
    next episode's first state is not bootstrapped); last_value: f32[...],
    the value of the state after the last transition.
    Returns (advantages, returns = advantages + values), both f32[T, ...].
    """
    not_done = 1.0 - jnp.broadcast_to(dones, rewards.shape).astype(jnp.float32)

    def back(carry, x):
        adv_next, v_next = carry
        r, v, nd = x
        delta = r + gamma * v_next * nd - v
        adv = delta + gamma * lam * nd * adv_next
        return (adv, v), adv

    _, adv = jax.lax.scan(back, (jnp.zeros_like(last_value), last_value),
                          (rewards, values, not_done), reverse=True)
    return adv, adv + values


def _head_log_probs(logits: jax.Array, nvec: Sequence[int]) -> list[tuple[int, jax.Array]]:
    """(first head, log_softmax f32[..., k, n]) per run of k consecutive heads
    of equal size n: Tag's two 21-way heads are one [..., 2, 21] array (one
    fusion over the batch, not one per 21-wide slice)."""
    groups: list[tuple[int, int]] = []  # (size, count)
    for n in (int(v) for v in nvec):
        if groups and groups[-1][0] == n:
            groups[-1] = (n, groups[-1][1] + 1)
        else:
            groups.append((n, 1))
    out, col, head = [], 0, 0
    for n, k in groups:
        block = logits[..., col:col + n * k].reshape(logits.shape[:-1] + (k, n))
        out.append((head, jax.nn.log_softmax(block, axis=-1)))
        col, head = col + n * k, head + k
    return out


def log_prob(logits: jax.Array, actions: jax.Array, nvec: Sequence[int]) -> jax.Array:
    """f32[...]: sum over heads of log softmax(logits_h)[actions[..., h]].

    logits: f32[..., sum(nvec)]; actions: i32[..., len(nvec)].
    """
    return head_stats(logits, actions, nvec)[0]


def entropy(logits: jax.Array, nvec: Sequence[int]) -> jax.Array:
    """f32[...]: sum over heads of the categorical entropy."""
    actions = jnp.zeros(logits.shape[:-1] + (len(nvec),), jnp.int32)
    return head_stats(logits, actions, nvec)[1]


@struct.dataclass
class Batch:
    """One policy group's training data, [T, envs, agents_in_group, ...]
    (obs: [T, envs, agents, obs_dim] of every agent; the trainer cuts the
    group's slice from each minibatch)."""

    obs: jax.Array  # f32 or bf16[..., obs_dim]
    actions: jax.Array  # i32[..., heads]
    log_prob: jax.Array  # f32[...]: behaviour policy's log-probability
    value: jax.Array  # f32[...]: behaviour critic's value
    advantage: jax.Array  # f32[...]
    target: jax.Array  # f32[...]: value target (GAE return)
    # Recurrent models: bool[T, envs], the steps whose obs begins an episode (the
    # carry resets there), and the carry at the rollout's start, leaves
    # [1, envs, agents_in_group, ...] (a time axis of 1, so minibatches cut it
    # along axis 1 like every other field). None for feed-forward models.
    first: jax.Array | None = None
    carry: Any = None
    state: jax.Array | None = None  # f32[T, envs, S]: global state (centralised critic)



def head_stats(logits: jax.Array, actions: jax.Array, nvec: Sequence[int]
               ) -> tuple[jax.Array, jax.Array]:
    """(log_prob, entropy) by `log_prob` and `entropy`, differentiated by jax."""
    return log_prob(logits, actions, nvec), entropy(logits, nvec)

def policy_loss(lp: jax.Array, ent: jax.Array, value: jax.Array, batch: Batch, *,
                algorithm: str, clip_eps: float, vf_coef: float, ent_coef: float,
                normalize_advantages: bool) -> tuple[jax.Array, dict[str, jax.Array]]:
    """PPO (clipped surrogate, clipped value loss) or A2C loss of one batch,
    from the current policy's log-probability of the batch's actions lp, its
    entropy ent and value, each f32[...] like batch.advantage (`head_stats`
    of the logits, or a model's own: `Policy.head_stats`).

    Returns (total loss, metrics: policy_loss, value_loss, entropy,
    approx_kl, clip_frac).
    """
    adv = batch.advantage
    if normalize_advantages:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    ent = ent.mean()
    log_ratio = lp - batch.log_prob
    ratio = jnp.exp(log_ratio)
    if algorithm == "ppo":
        pg = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip_eps, 1 + clip_eps) * adv).mean()
        v_clipped = batch.value + jnp.clip(value - batch.value, -clip_eps, clip_eps)
        v_loss = 0.5 * jnp.maximum(jnp.square(value - batch.target),
                                   jnp.square(v_clipped - batch.target)).mean()
    else:  # a2c: on-policy, so the behaviour log-prob only feeds the diagnostics
        pg = -(lp * adv).mean()
        v_loss = 0.5 * jnp.square(value - batch.target).mean()
    total = pg + vf_coef * v_loss - ent_coef * ent
    metrics = {
        "policy_loss": pg, "value_loss": v_loss, "entropy": ent,
        # k3 estimator of KL(behaviour || current) (Schulman): non-negative, low variance.
        "approx_kl": jax.lax.stop_gradient(((ratio - 1) - log_ratio).mean()),
        "clip_frac": jax.lax.stop_gradient(
            (jnp.abs(ratio - 1) > clip_eps).astype(jnp.float32).mean()),
    }
    return total, metrics
