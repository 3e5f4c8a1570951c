"""How a batch of [T, envs, ...] arrays is cut into minibatches.

A PPO minibatch is a set of single (step, env) samples (`Minibatches.samples`,
feed-forward models) or of whole env sequences (all T steps of its envs), so
that a recurrent model can replay each env from its first step; A2C's
gradient chunks are always env sequences. Over several devices each minibatch
takes an equal share of every device's envs, so that no minibatch moves
between devices (docs/sharding.md); `pinner` is the sharding constraint that
every cut (and the update's batch) applies on the run's mesh.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxwarp.train.seeds import folded_vmap

# (tree, PartitionSpec) -> tree with that sharding constraint (identity on one device)
Pin = Callable[[Any, P], Any]


def pinner(mesh: Mesh | None) -> Pin:
    """(tree, spec) -> the tree with sharding constraint `spec` on every leaf
    (identity on one device). Under vmap over seeds jax adds the seed axis to
    the spec itself."""
    def pin(tree: Any, spec: P) -> Any:
        if mesh is None:
            return tree
        target = NamedSharding(mesh, spec)
        return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, target), tree)

    return pin


# A steps permutation sorts up to 2**MEMBER_BITS members' steps together, a member's index in
# the keys' top bits: the rest of each key is random.
MEMBER_BITS = 6


def _rounds(n: int) -> int:
    """Sorts by random keys of 32 - MEMBER_BITS bits that make a permutation
    of n uniform but for ties (jax's criterion: keys of rounds x bits >= n^3)."""
    return int(np.ceil(3 * np.log(max(1, n)) / np.log(2.0 ** (32 - MEMBER_BITS) - 1)))


def _permutations(keys: jax.Array, n: int) -> jax.Array:
    """keys [members] -> one permutation of range(n) each, i32[members, n]:
    rounds of one stable 1-D sort of every member's positions by (member,
    the round's random bits), as jax's permutation sorts by random bits but
    for all members at once. A vmapped sort of [members, n] is a batched sort
    that XLA's GPU sort kernels take; one row is CUB's radix sort
    (docs/decisions.md, "The minibatches' permutation")."""
    m = keys.shape[0]
    if n == 0:
        return jnp.zeros((m, 0), jnp.int32)
    per = min(2 ** MEMBER_BITS, max(1, (2 ** 31 - 1) // n))  # positions fit int32
    if m > per:  # groups of `per` members in turn
        groups = -(-m // per)
        padded = jnp.concatenate([keys, jnp.broadcast_to(keys[:1], (groups * per - m,
                                                                    *keys.shape[1:]))])
        out = jax.lax.map(lambda k: _permutations(k, n), padded.reshape(groups, per,
                                                                        *keys.shape[1:]))
        return out.reshape(groups * per, n)[:m]
    pos = jnp.arange(m * n, dtype=jnp.int32)
    member = (pos // n).astype(jnp.uint32) << (32 - MEMBER_BITS)
    x = pos % n
    for _ in range(_rounds(n)):
        pair = jax.vmap(jax.random.split)(keys)
        keys, sub = pair[:, 0], pair[:, 1]
        bits = jax.vmap(lambda k: jax.random.bits(k, (n,), jnp.uint32))(sub).reshape(-1)
        _, order = jax.lax.sort_key_val(member | (bits >> MEMBER_BITS), pos)
        x = x[order]
    return x.reshape(m, n)


def permutation(key: jax.Array, n: int) -> jax.Array:
    """A random permutation of range(n), i32[n], from key, uniform as jax's
    (sorts by random keys, rounds enough that ties are as rare as jax makes
    them); under ``jax.vmap`` (seeds, a sweep's runs) every member's is drawn
    in the same sorts (`_permutations`), and each is the one drawn alone.
    `Minibatches.shuffle` over several devices draws each device's own with
    jax's (its batched sort splits by device)."""
    return folded_vmap(lambda keys: _permutations(keys, n))(key[None])[0]


class Minibatches(NamedTuple):
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
                perm = permutation(jax.random.split(key, 1)[0], t * self.num_envs)
                return perm, self.deal_steps(batch, perm)
            # one permutation of each device's T x envs/D steps; over several devices
            # jax's, whose batched sort XLA splits by device (one 1-D sort of every
            # device's steps would run whole on each device)
            steps = t * (self.num_envs // self.shards)
            draw = permutation if self.shards == 1 else jax.random.permutation
            return jax.vmap(lambda kd: draw(kd, steps))(
                jax.random.split(key, self.shards)), batch
        if self.shards == 1 or global_shuffle:
            perm = jax.random.permutation(key, self.num_envs)
            return perm, (self.deal(batch, perm) if self.shards > 1 else batch)
        perm = jax.vmap(lambda kd: jax.random.permutation(kd, self.num_envs // self.shards))(
            jax.random.split(key, self.shards))
        return perm, batch
