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


def _head_groups(nvec: Sequence[int]) -> list[tuple[int, int, int]]:
    """(first head, count k, size n) per run of k consecutive heads of equal
    size n: Tag's two 21-way heads are one [..., 2, 21] block (one fusion over
    the batch, not one per 21-wide slice)."""
    out: list[tuple[int, int, int]] = []
    head = 0
    for n in (int(v) for v in nvec):
        if out and out[-1][2] == n:
            out[-1] = (out[-1][0], out[-1][1] + 1, n)
        else:
            out.append((head, 1, n))
        head += 1
    return out


def _one_hot(a: jax.Array, n: int) -> jax.Array:
    """bool[..., k, n]: the actions a int[..., k] as masks over n choices. A select
    against it, not take_along_axis: the same value (one term, the rest exact
    zeros) without a gather."""
    return jnp.arange(n, dtype=a.dtype) == a[..., None]


def _stats_forward(x: jax.Array, a: jax.Array
                   ) -> tuple[tuple[jax.Array, jax.Array], tuple[jax.Array, jax.Array]]:
    """x f32[..., k, n] (k heads of n logits), a i32[..., k] ->
    ((log-prob f32[...], entropy f32[...]) summed over the k heads,
    (log-softmax f32[..., k, n], each head's entropy f32[..., k]))."""
    logp = jax.nn.log_softmax(x, axis=-1)
    lp = jnp.sum(jnp.where(_one_hot(a, x.shape[-1]), logp, 0.0), axis=-1)
    # p log p is 0 where p is: a logit of -inf (a masked choice) adds nothing.
    ent = -jnp.sum(jnp.where(logp > -jnp.inf, jnp.exp(logp) * logp, 0.0), axis=-1)
    return (jnp.sum(lp, axis=-1), jnp.sum(ent, axis=-1)), (logp, ent)


@jax.custom_vjp
def _head_stats(x: jax.Array, a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(sum of log pi(a_h), sum of entropies) over k heads of n: x f32[..., k, n]."""
    return _stats_forward(x, a)[0]


def _head_stats_fwd(x, a):
    out, (logp, ent) = _stats_forward(x, a)
    return out, (logp, a, ent)


def _head_stats_bwd(res, g):
    # One elementwise pass over the saved log-softmax: d log pi(a)/dx = onehot(a)
    # - p and d H/dx = -p (log p + H). jax's own gradient of the forward reduces
    # the log-softmax's cotangent again (one more pass over every [rows, k, n]
    # logit of a minibatch); recomputing the log-softmax from the logits here
    # instead was slower on the GPU (docs/decisions.md, "The learner's tail").
    logp, a, ent = res
    g_lp, g_ent = (v[..., None, None] for v in g)
    p = jnp.exp(logp)
    hit = _one_hot(a, logp.shape[-1])
    d_ent = jnp.where(logp > -jnp.inf, p * (logp + ent[..., None]), 0.0)  # 0 where p is
    dx = g_lp * (hit.astype(logp.dtype) - p) - g_ent * d_ent
    return dx, None


_head_stats.defvjp(_head_stats_fwd, _head_stats_bwd)


def head_stats(logits: jax.Array, actions: jax.Array, nvec: Sequence[int]
               ) -> tuple[jax.Array, jax.Array]:
    """(log_prob f32[...], entropy f32[...]): sums over heads of
    log softmax(logits_h)[actions[..., h]] and of the categorical entropy.

    logits: float[..., sum(nvec)]; actions: int[..., len(nvec)]. Differentiable
    in the logits in reverse mode (`jax.grad`, `jax.vjp`) by a hand-written
    backward (one pass over them); forward mode (`jax.jvp`) is not defined. A
    logit of -inf masks its choice (its probability 0, its gradient 0).
    """
    x = logits.astype(jnp.float32)
    lp, ent = 0.0, 0.0
    col = 0
    for head, k, n in _head_groups(nvec):
        block = x[..., col:col + n * k].reshape(x.shape[:-1] + (k, n))
        g_lp, g_ent = _head_stats(block, actions[..., head:head + k])
        lp, ent, col = lp + g_lp, ent + g_ent, col + n * k
    return lp, ent


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
