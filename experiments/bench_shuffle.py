"""An epoch's minibatch permutation for every seed of a run: jax's vmapped
`jax.random.permutation` against the same permutations drawn by 1-D sorts.

PPO draws, each epoch, one permutation of a member's T x envs steps
(`Minibatches.shuffle`) and the trainer runs every seed (a sweep's member)
under one ``jax.vmap``. jax's permutation is rounds of stable sorts by
random 32-bit keys; under vmap each round is one batched sort of
[members, n], and XLA's GPU sort rewriter sends a batched 32-bit sort of ten
rows of 65,536 to its own sort kernels, not to CUB's radix sort, which it
takes for one row of more than 22,000 (``IsCubSortFasterOnH100``). Sides,
each at ``--members`` x ``--n`` with the update's four epochs in one program
(median of ``--repeats`` calls):

* ``vmap``: ``jax.vmap(lambda k: jax.random.permutation(k, n))(keys)``, the
  trainer's draw;
* ``folded``: the same rounds, keys and bits per member, each round two
  stable 1-D sorts of all members' elements together: by the round's bits,
  then by member (`folded_permutation`); the same permutations bit for bit
  (checked here on the device: ``same``);
* ``member_key``: one 1-D sort a round by the member's index in the top bits
  of the key and the top bits of the random bits below it (fewer random
  bits: not the same permutations; how much the second sort costs);
* ``shipped``: the trainer's `minibatches.permutation` under the same vmap
  (``member_key``'s way, the index in a fixed 6 bits); its result file
  ``bench_shuffle_h200.json`` predates this side.

Per side: milliseconds for four epochs, and whether XLA's program calls
CUB's radix sort (``cub`` in the compiled HLO).

    python experiments/bench_shuffle.py --out experiments/results/bench_shuffle_h200.json
"""

from __future__ import annotations

import argparse
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp.benchmark import median_seconds, run_meta, write_result
from jaxwarp.train import minibatches

EPOCHS = 4


def rounds(n: int) -> int:
    """The number of sort rounds jax's permutation of n elements draws."""
    return int(np.ceil(3 * np.log(max(1, n)) / np.log(np.iinfo(np.uint32).max)))


def _round_bits(keys: jax.Array, n: int) -> tuple[jax.Array, jax.Array]:
    """(keys for the next round, this round's bits u32[members * n])."""
    pair = jax.vmap(jax.random.split)(keys)
    bits = jax.vmap(lambda k: jax.random.bits(k, (n,), jnp.uint32))(pair[:, 1])
    return pair[:, 0], bits.reshape(-1)


def folded_permutation(keys: jax.Array, n: int) -> jax.Array:
    """``jax.vmap(lambda k: jax.random.permutation(k, n))(keys)`` i32[members,
    n] by 1-D stable sorts: each round sorts all members' positions by the
    round's bits, then by member (stable: each member's positions stay in bit
    order, ties in position order, as a per-member stable sort leaves them)."""
    m = keys.shape[0]
    pos = jnp.arange(m * n, dtype=jnp.int32)
    x = pos % n
    for _ in range(rounds(n)):
        keys, bits = _round_bits(keys, n)
        _, order = lax.sort_key_val(bits, pos)
        if m > 1:
            _, order = lax.sort_key_val((order // n).astype(jnp.uint32), order)
        x = x[order]
    return x.reshape(m, n)


def member_key_permutation(keys: jax.Array, n: int) -> jax.Array:
    """One 1-D sort a round by (member, the round's top 32 - b bits), b the
    bits of the member count: a permutation per member, not jax's."""
    m = keys.shape[0]
    b = max(1, math.ceil(math.log2(m))) if m > 1 else 0
    pos = jnp.arange(m * n, dtype=jnp.int32)
    member = (pos // n).astype(jnp.uint32)
    x = pos % n
    for _ in range(rounds(n)):
        keys, bits = _round_bits(keys, n)
        key = (member << (32 - b)) | (bits >> b) if b else bits
        _, order = lax.sort_key_val(key, pos)
        x = x[order]
    return x.reshape(m, n)


SIDES = {
    "vmap": lambda keys, n: jax.vmap(lambda k: jax.random.permutation(k, n))(keys),
    "folded": folded_permutation,
    "member_key": member_key_permutation,
    # the trainer's: member_key's way with MEMBER_BITS bits for the index whatever the members
    "shipped": lambda keys, n: jax.vmap(lambda k: minibatches.permutation(k, n))(keys),
}


def epochs(side: str, n: int):
    """keys [members] -> the four epochs' permutations i32[4, members, n]."""
    def run(keys):
        out = []
        for e in range(EPOCHS):
            out.append(SIDES[side](jax.vmap(lambda k, e=e: jax.random.fold_in(k, e))(keys), n))
        return jnp.stack(out)
    return jax.jit(run)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", default="1,10,64")
    ap.add_argument("--n", default="65536,98304", help="elements a permutation (T x envs)")
    ap.add_argument("--sides", default=",".join(SIDES))
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--out", default="experiments/results/bench_shuffle.json")
    args = ap.parse_args()
    rows = []
    for m in (int(v) for v in args.members.split(",")):
        for n in (int(v) for v in args.n.split(",")):
            keys = jax.random.split(jax.random.PRNGKey(0), m)
            ref = None
            for side in args.sides.split(","):
                fn = epochs(side, n)
                hlo = fn.lower(keys).compile().as_text()
                out = np.asarray(fn(keys))
                ref = out if side == "vmap" else ref
                ok = bool(np.all(np.sort(out, axis=-1) == np.arange(n)))
                row = {"members": m, "n": n, "side": side,
                       "ms": 1e3 * median_seconds(fn, (keys,), args.repeats),
                       "cub": "cub" in hlo.lower(), "permutations": ok,
                       "same": None if ref is None else bool(np.array_equal(out, ref))}
                rows.append(row)
                print(row, flush=True)
    write_result(args.out, {"meta": run_meta(), "rows": rows}, indent=1)


if __name__ == "__main__":
    main()
