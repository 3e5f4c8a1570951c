"""The learner: minibatch layouts, and the PPO and A2C updates of one group.

Both updates are pure functions of (parameters, optimiser state, a
`losses.Batch` of [T, envs, agents_in_group, ...] arrays): PPO runs
``epochs`` x ``minibatches`` Optax steps on disjoint random minibatches,
A2C one step on the whole batch with its gradient summed over equal chunks
of envs. A PPO minibatch is a set of single (step, env) samples
(`Layout.samples`, feed-forward models) or of whole env sequences (all T
steps of its envs), so that a recurrent model can replay each env from its
first step; A2C's chunks are always env sequences.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.sharding import PartitionSpec as P

from jaxwarp.train import losses

# (params, minibatch, normalize_advantages) -> ((loss, metrics), grads)
GradFn = Callable[[Any, losses.Batch, bool], tuple[tuple[jax.Array, dict], Any]]
# (tree, PartitionSpec) -> tree with that sharding constraint (identity on one device)
Pin = Callable[[Any, P], Any]


class Layout(NamedTuple):
    """How a batch of [T, envs, ...] arrays is cut into minibatches of envs.

    On one device minibatch i is envs perm[i*size:(i+1)*size] (or that slice
    without a permutation). Over `shards` devices (the env axis split over
    them) each minibatch takes size/shards envs of every device, so no
    minibatch moves between devices; see `chunk`.
    """

    minibatches: int
    size: int  # envs per minibatch
    shards: int  # devices the env axis is split over
    num_envs: int
    pin: Pin
    samples: bool = False  # PPO minibatches of single steps, not env sequences (`steps`)

    def _spread(self, x: jax.Array, i: jax.Array) -> jax.Array:
        """Minibatch i of [T, envs, ...] laid out device-major (see `deal`) is
        local block i of every device's equal blocks along axis 1 (envs, or
        steps as `deal_steps` lays them out): a reshape of the sharded axis and a
        slice, no copy between devices."""
        blocks = x.reshape(x.shape[0], self.shards, self.minibatches, -1, *x.shape[2:])
        mb = jax.lax.dynamic_index_in_dim(blocks, i, axis=2, keepdims=False)
        return self.pin(mb.reshape(x.shape[0], -1, *x.shape[2:]), P(None, "envs"))

    def _local_take(self, x: jax.Array, perms: jax.Array, i: jax.Array) -> jax.Array:
        """Minibatch i of [T, envs, ...] is local envs perms[k, i*size/D:(i+1)*size/D]
        of every device k (perms: i32[D, envs/D], one permutation of its own
        envs per device): a gather within each device's block, no exchange."""
        local = self.size // self.shards
        idx = jax.lax.dynamic_slice_in_dim(perms, i * local, local, axis=1)
        blocks = x.reshape(x.shape[0], self.shards, x.shape[1] // self.shards, *x.shape[2:])
        mb = jax.vmap(lambda xd, ix: jnp.take(xd, ix, axis=1), in_axes=(1, 0),
                      out_axes=1)(blocks, idx)
        return self.pin(mb.reshape(x.shape[0], self.size, *x.shape[2:]), P(None, "envs"))

    @jax.named_scope("minibatch")
    def chunk(self, src: Any, i: jax.Array, perm: jax.Array | None) -> Any:
        """Minibatch i of `src` (a tree of [T, envs, ...]): envs
        perm[i*size:(i+1)*size] (or that slice), cut inside the scan body so
        that the minibatches are never materialised all at once.

        Several devices: chunk i is each device's own env block i (`_spread`)
        or, with per-device permutations perm i32[D, envs/D], each device's
        envs from its own permutation (`_local_take`). A2C's gradient chunks
        then hold other envs than on one device (the same mean gradient over
        the chunks); PPO with the global shuffle passes the batch `deal`
        already reordered by perm (perm unused here)."""
        if self.shards > 1:
            if perm is not None and perm.ndim == 2:
                return jax.tree.map(lambda x: self._local_take(x, perm, i), src)
            return jax.tree.map(lambda x: self._spread(x, i), src)
        if perm is None:
            return jax.tree.map(
                lambda x: jax.lax.dynamic_slice_in_dim(x, i * self.size, self.size, axis=1), src)
        idx = jax.lax.dynamic_slice_in_dim(perm, i * self.size, self.size)
        return jax.tree.map(lambda x: jnp.take(x, idx, axis=1), src)

    @jax.named_scope("minibatch")
    def deal(self, batch: Any, perm: jax.Array) -> Any:
        """Several devices: `batch` reordered once per epoch so that envs
        perm[i*size + k*size/D + j] (device k's share of minibatch i) sit at
        env index k*n/D + i*size/D + j, i.e. on device k (one exchange of the
        batch between devices per epoch instead of one per minibatch)."""
        order = perm.reshape(self.minibatches, self.shards, -1).transpose(1, 0, 2).reshape(-1)
        return jax.tree.map(lambda x: self.pin(jnp.take(x, order, axis=1), P(None, "envs")),
                            batch)

    @jax.named_scope("minibatch")
    def deal_steps(self, batch: Any, perm: jax.Array) -> Any:
        """Several devices, one permutation `perm` of all T*envs steps (flattened
        (step, env)): the batch as [1, T*envs, ...], reordered once per epoch so
        that device k holds its share perm[i*R + k*R/D : i*R + (k+1)*R/D] of every
        minibatch i (R = T*size), in minibatch order (`deal` of the flattened steps)."""
        return self.deal(jax.tree.map(
            lambda x: x.reshape(1, x.shape[0] * x.shape[1], *x.shape[2:]), batch), perm)

    @jax.named_scope("minibatch")
    def steps(self, src: Any, i: jax.Array, perms: jax.Array) -> Any:
        """Minibatch i of single steps: rows perms[k, i*r:(i+1)*r] of device k's
        steps, flattened (step, env) in [T, envs/D] order (perms: i32[D, T*envs/D],
        r = T*size/D), laid out as [1, T*size, ...] so that the loss reads it
        like a batch of one step of T*size envs. perms i32[T*envs] (one global
        permutation): src is `deal_steps`' [1, T*envs, ...] and minibatch i is each
        device's block i, no exchange."""
        if perms.ndim == 1:
            return jax.tree.map(lambda x: self._spread(x, i), src)

        def take(x: jax.Array) -> jax.Array:
            t, local = x.shape[0], x.shape[1] // self.shards
            rows = t * self.size // self.shards
            idx = jax.lax.dynamic_slice_in_dim(perms, i * rows, rows, axis=1)
            blocks = x.reshape(t, self.shards, local, *x.shape[2:])
            flat = jnp.moveaxis(blocks, 1, 0).reshape(self.shards, t * local, *x.shape[2:])
            mb = jax.vmap(lambda xd, ix: jnp.take(xd, ix, axis=0))(flat, idx)
            return self.pin(mb.reshape(1, self.shards * rows, *x.shape[2:]), P(None, "envs"))

        return jax.tree.map(take, src)

    def shuffle(self, batch: Any, key: jax.Array, global_shuffle: bool
                ) -> tuple[jax.Array | None, Any]:
        """One epoch's (perm, batch as `chunk` reads it). Minibatches are
        disjoint random sets of envs: one permutation of all envs or, over
        several devices unless `global_shuffle`, one of each device's own
        envs, so that the batch never moves between devices (docs/sharding.md)."""
        if self.minibatches == 1:
            return None, batch
        if self.samples:
            t = jax.tree.leaves(batch)[0].shape[0]
            if self.shards > 1 and global_shuffle:  # one permutation of all T x envs steps,
                # drawn as one device draws it (the one-device minibatches)
                perm = jax.random.permutation(jax.random.split(key, 1)[0], t * self.num_envs)
                return perm, self.deal_steps(batch, perm)
            # one permutation of each device's T x envs/D steps
            steps = t * (self.num_envs // self.shards)
            return jax.vmap(lambda kd: jax.random.permutation(kd, steps))(
                jax.random.split(key, self.shards)), batch
        if self.shards == 1 or global_shuffle:
            perm = jax.random.permutation(key, self.num_envs)
            return perm, (self.deal(batch, perm) if self.shards > 1 else batch)
        perm = jax.vmap(lambda kd: jax.random.permutation(kd, self.num_envs // self.shards))(
            jax.random.split(key, self.shards))
        return perm, batch


def _apply(tx: optax.GradientTransformation, params: Any, opt_state: Any, grads: Any
           ) -> tuple[Any, Any]:
    with jax.named_scope("optimizer"):
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state


def a2c_update(grad_fn: GradFn, tx: optax.GradientTransformation, params: Any,
               opt_state: Any, batch: losses.Batch, layout: Layout,
               normalize_advantages: bool) -> tuple[Any, Any, dict[str, jax.Array]]:
    """One optimiser step on the whole batch; the gradient is the mean over
    `layout.minibatches` equal chunks of envs, so that memory stays bounded.
    Advantages are normalised over the whole batch, not per chunk.
    Returns (params, opt_state, metrics name -> f32[])."""
    if normalize_advantages:
        a = batch.advantage
        batch = batch.replace(advantage=(a - a.mean()) / (a.std() + 1e-8))
    if layout.minibatches == 1:
        (loss, metrics), grads = grad_fn(params, batch, False)
        metrics = {"loss": loss, **metrics}
    else:
        def accumulate(acc, i):
            (loss, m), g_ = grad_fn(params, layout.chunk(batch, i, None), False)
            return jax.tree.map(jnp.add, acc, g_), {"loss": loss, **m}

        zero = jax.tree.map(jnp.zeros_like, params)
        grads, metrics = jax.lax.scan(accumulate, zero, jnp.arange(layout.minibatches))
        grads = jax.tree.map(lambda x: x / layout.minibatches, grads)
        metrics = jax.tree.map(jnp.mean, metrics)
    params, opt_state = _apply(tx, params, opt_state, grads)
    return params, opt_state, metrics


def ppo_update(grad_fn: GradFn, tx: optax.GradientTransformation, params: Any,
               opt_state: Any, batch: losses.Batch, key: jax.Array, layout: Layout,
               epochs: int, normalize_advantages: bool, global_shuffle: bool
               ) -> tuple[Any, Any, dict[str, jax.Array]]:
    """`epochs` passes over the batch, each `layout.minibatches` Optax steps on
    disjoint random sets of steps or envs (`Layout`; advantages normalised per minibatch where
    asked). Returns (params, opt_state, metrics: means over every step)."""
    def epoch(carry, k):
        perm, dealt = layout.shuffle(batch, k, global_shuffle)

        def sgd_step(carry, i):
            p, o = carry
            if layout.minibatches == 1:
                mb = batch
            elif layout.samples:
                mb = layout.steps(dealt, i, perm)
            else:
                mb = layout.chunk(dealt, i, perm)
            (loss, metrics), grads = grad_fn(p, mb, normalize_advantages)
            p, o = _apply(tx, p, o, grads)
            return (p, o), {"loss": loss, **metrics}

        return jax.lax.scan(sgd_step, carry, jnp.arange(layout.minibatches))

    (params, opt_state), metrics = jax.lax.scan(
        epoch, (params, opt_state), jax.random.split(key, epochs))
    return params, opt_state, jax.tree.map(jnp.mean, metrics)
