"""A run on the host: `Run`, the record that the run shell's parts read and
advance while a run is trained (`loop._start` sets it up, `loop._train`
advances it), and `RunResult`, what `loop.train_run` returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax

from jaxwarp.errors import NonFiniteError
from jaxwarp.run import distributed
from jaxwarp.train.config import TrainConfig
from jaxwarp.train.trainer import RunnerState, Trainer


@dataclass
class RunResult:
    """What a run leaves behind (also on disk under `out_dir`)."""

    out_dir: Path
    state: RunnerState  # final state, leading [seeds] axis ([settings x seeds] in a sweep)
    metrics: list[dict[str, float]]  # one row per (update, seed), this process's rows
    summary: dict[str, Any]


@dataclass
class Run:
    """A run being trained: set up by `loop._start`, advanced by `loop._train`."""

    out: Path
    config: TrainConfig
    seeds: int
    trainer: Trainer
    proc: distributed.ProcessInfo
    lock: Any  # lock.RunLock, or lock.NoLock on processes other than 0
    t0: float  # perf_counter at the start of restore/compile: wall_s, time_limit_s
    seed_ids: list[int] = field(default_factory=list)  # each member's seed
    # A sweep's settings (swept key -> value; jaxwarp.train.sweep), [] for a plain
    # run; member k * seeds + s trains setting k with seed config.seed + s.
    settings: list[dict[str, float]] = field(default_factory=list)
    env_metrics: tuple[str, ...] = ()  # the env's episode metrics (headline columns)
    rs: Any = None  # RunnerState with a leading [members] axis
    done_updates: int = 0
    # The update the newest checkpoint holds (None: none yet), and whether `rs`
    # is the state after exactly `done_updates` updates (not while a chunk is
    # in flight: its input was donated and its rows are not logged yet).
    saved_at: int | None = None
    settled: bool = True
    compiled: Any = None  # run_chunk compiled for `chunk` updates
    # A sweep's layout on the devices of every process (train.mesh.SweepLayout),
    # decided before its trainer is built; None for a plain run.
    layout: Any = None
    member_mesh: Any = None  # the layout's mesh while the sweep trains whole (not in chunks)
    member_chunks: Any = None  # a sweep trained in chunks of its runs (run.member_chunks)
    compile_s: float = 0.0
    compiler_options: Any = None  # the XLA options its program got (loop._compile)
    run_s: float = 0.0
    mngr: Any = None  # Orbax CheckpointManager
    writer: Any = None  # MetricWriter, or NoWriter on processes other than 0
    rows: list[dict[str, float]] = field(default_factory=list)  # this process's rows
    stopped_early: bool = False
    failure: NonFiniteError | None = None
    created: bool = False  # out did not exist before this call (process 0)

    @property
    def primary(self) -> bool:
        return self.proc.process_id == 0

    @property
    def members(self) -> int:
        """Runs trained together in the program: seeds, times settings in a sweep."""
        return self.seeds * max(1, len(self.settings))

    @property
    def local_members(self) -> int:
        """Runs this process's devices train: a sweep's share of its runs over
        its processes (`layout`), else every member."""
        return self.members // self.layout.processes if self.layout else self.members

    @property
    def setting_ids(self) -> list[int] | None:
        """Each member's setting (None for a plain run)."""
        return [k for k in range(len(self.settings)) for _ in range(self.seeds)] \
            if self.settings else None

    @property
    def devices(self) -> list[Any]:
        """The devices the run's program runs on, every process's: those of
        the mesh its sweep's runs or its envs are split over, else the default
        device (where jit places an unsharded program)."""
        meshes = (getattr(self.member_chunks, "mesh", None), self.member_mesh,
                  self.trainer.mesh)
        mesh = next((m for m in meshes if m is not None), None)
        return list(mesh.devices.flat) if mesh is not None else jax.devices()[:1]

    @property
    def num_updates(self) -> int:
        return self.trainer.derived.num_updates

    @property
    def chunk(self) -> int:
        return min(self.config.chunk_updates, self.num_updates)
