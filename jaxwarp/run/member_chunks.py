"""A sweep whose runs do not all fit in the devices' memory at once: one
compiled program over chunks of its runs, one chunk after the other
(docs/sweeps.md, "More runs than fit").

`memory_guard.check_memory` says, from shapes and before anything compiles,
how many runs one program may train. `MemberChunks` splits the sweep's runs
(member ``k * seeds + s``: setting k, seed s) into the fewest chunks of at most
that many, all of one size, a multiple of the device count: the last chunk is
filled up by repeating the first runs, whose results are dropped. One size is
one program, compiled once (a sweep's compile is most of a short sweep's time),
and every run is trained by that same program whatever chunk it falls in.

Between chunks of updates every run's state waits in host memory, so that
metrics, checkpoints, Ctrl-C and ``--resume`` see the whole sweep's state, as
for a sweep that fits: a chunked sweep writes the same folder, and a resume
may chunk it otherwise (another device, another device count).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxwarp.train.mesh import MEMBERS


@dataclasses.dataclass(frozen=True)
class MemberChunks:
    """`members` runs trained `size` at a time (`size` a multiple of the devices
    of `mesh`, the member mesh a chunk splits over; None: one device)."""

    members: int
    size: int
    mesh: Any = None

    @property
    def count(self) -> int:
        return -(-self.members // self.size)

    def indices(self) -> list[np.ndarray]:
        """Each chunk's members, i32[size]: in order, the last chunk filled up
        with the first members again."""
        order = np.arange(self.count * self.size) % self.members
        return np.split(order, self.count)

    def shapes(self, rs: Any) -> Any:
        """One chunk of the state `rs` (leading axis: the members) as shapes and
        shardings: what the chunk's program is compiled for."""
        where = None if self.mesh is None else NamedSharding(self.mesh, P(MEMBERS))
        return jax.tree.map(lambda x: jax.ShapeDtypeStruct((self.size, *x.shape[1:]), x.dtype,
                                                           sharding=where), rs)

    def over(self, compiled: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``rs -> compiled(rs)`` for every member, the compiled program of one
        chunk (``state -> (state, metrics)``, leading axis: the members) run
        on each chunk in turn; the state and metrics come back as host arrays
        (the repeated members' dropped)."""
        where = None if self.mesh is None else NamedSharding(self.mesh, P(MEMBERS))

        def every_chunk(rs: Any) -> Any:
            host = jax.device_get(rs)  # the whole state: in host memory between chunks
            done = []
            for idx in self.indices():
                part = jax.device_put(jax.tree.map(lambda x, i=idx: x[i], host), where)
                done.append(jax.device_get(compiled(part)))
            return jax.tree.map(lambda *xs: np.concatenate(xs)[:self.members], *done)

        return every_chunk
