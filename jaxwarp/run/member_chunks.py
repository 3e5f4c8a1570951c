"""A sweep whose runs do not all fit in the devices' memory at once: one
compiled program over chunks of its runs, one chunk after the other
(docs/sweeps.md, "More runs than fit in memory").

`memory_guard.check_memory` says, from shapes and before anything compiles,
how many runs one program may train, and `memory_guard.check_program` says it
again from XLA's count of the compiled program (`compile_in_memory`).
`MemberChunks` splits the sweep's runs (member ``k * seeds + s``: setting k,
seed s) into the fewest chunks of at most that many, all of one size, a
multiple of the device count: the last chunk is filled up by repeating the
first runs, whose results are dropped. One size is one program, compiled once
(a sweep's compile is most of a short sweep's time), and every run is trained
by that same program whatever chunk it falls in.

Between chunks of updates every run's state waits in host memory, so that
metrics, checkpoints, Ctrl-C and ``--resume`` see the whole sweep's state, as
for a sweep that fits: a chunked sweep writes the same folder, and a resume
may chunk it otherwise (another device, another device count).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxwarp.run.memory_guard import Chunks, check_program
from jaxwarp.run.state import Run
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

    def over(self, compiled: Any) -> ChunkedProgram:
        """`compiled`, the program of one chunk, run on every chunk in turn."""
        return ChunkedProgram(self, compiled)


class ChunkedProgram:
    """``rs -> (rs, metrics)`` for every member of `chunks` (leading axis: the
    members), by the compiled program of one chunk run on each chunk in turn;
    the state and metrics come back as host arrays (the repeated members'
    dropped)."""

    def __init__(self, chunks: MemberChunks, compiled: Any) -> None:
        self.chunks, self.compiled = chunks, compiled

    def __call__(self, rs: Any) -> Any:
        c = self.chunks
        where = None if c.mesh is None else NamedSharding(c.mesh, P(MEMBERS))
        host = jax.device_get(rs)  # every run's state waits in host memory between chunks
        for x in jax.tree.leaves(rs):  # donated, as the input of an unchunked program
            if isinstance(x, jax.Array) and not x.is_deleted():
                x.delete()
        out = None
        for j, idx in enumerate(c.indices()):
            part = jax.device_put(jax.tree.map(lambda x, i=idx: x[i], host), where)
            done = jax.device_get(self.compiled(part))
            if out is None:  # host arrays of every run, filled chunk by chunk
                out = jax.tree.map(lambda x: np.empty((c.members, *x.shape[1:]), x.dtype), done)
            first, n = j * c.size, min(c.size, c.members - j * c.size)  # the repeats dropped
            for o, x in zip(jax.tree.leaves(out), jax.tree.leaves(done)):
                o[first:first + n] = x[:n]
        return out

    def memory_analysis(self) -> Any:
        """The compiled program's (one chunk's)."""
        return self.compiled.memory_analysis()


def compile_in_memory(run: Run, chunks: Chunks | None, compile: Callable[[Run, int], Any],
                      progress: bool | str) -> Any:
    """``compile(run, run.chunk)``, the run's first program: in `chunks` of a
    sweep's runs when `memory_guard.check_memory` said so (before compiling,
    from the arrays' shapes), and compiled again in smaller chunks when XLA's
    count of the compiled program says it does not fit (`check_program`). The
    line saying why is printed each time (with `progress`)."""
    _use(run, chunks, progress)
    compiled = compile(run, run.chunk)
    if not run.settings:
        return compiled
    on, layout = run.member_chunks, run.layout
    # This process's share: its devices train as many runs of the program.
    again = check_program(run, compiled, (run.members if on is None else on.size)
                          // layout.processes, layout.devices)
    if again is None:
        return compiled
    _use(run, again, progress)
    return compile(run, run.chunk)


def _use(run: Run, chunks: Chunks | None, progress: bool | str) -> None:
    if chunks is None:
        return
    run.member_chunks = MemberChunks(run.members, chunks.size, run.layout.mesh)
    if progress and run.primary:
        print(chunks.why, file=sys.stderr)
