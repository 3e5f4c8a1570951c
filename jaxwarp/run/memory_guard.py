"""A run that cannot fit in memory, said in one line naming the config keys that
size it: before anything is allocated (`check_memory`, from shapes alone), and
when XLA runs out of memory compiling or running a chunk (`OutOfMemory`). A
sweep too big for the memory at once is not refused: `check_memory` says how
many of its runs one program may train, and the sweep runs in chunks of them
(`jaxwarp.run.member_chunks`)."""

from __future__ import annotations

import dataclasses
import shutil
from typing import Any

import jax
import numpy as np

from jaxwarp.errors import RunError, storage_fault
from jaxwarp.memory import memory_limit
from jaxwarp.run.state import Run
from jaxwarp.train.config import TrainConfig
from jaxwarp.train.mesh import resolve_devices
from jaxwarp.train.trainer import Trainer


def run_bytes(run: Run) -> dict[str, int] | None:
    """`arrays_bytes` of the run's members this process trains (seeds, or its
    share of a sweep's settings x seeds)."""
    return arrays_bytes(run.config, run.trainer, run.local_members)


def arrays_bytes(config: TrainConfig, trainer: Trainer, members: int) -> dict[str, int] | None:
    """A lower bound of what `members` runs' arrays take, from shapes only, in
    bytes: "model" (parameters and optimiser state), "env" (the envs' state
    and observations) and "rollout" (one trajectory, num_envs x num_steps x
    agents x (an observation and 8 floats: action, log-prob, value, reward,
    done, advantage, return, mask)). Each part grows in proportion to
    `members`. None where the init fails (it reports that itself)."""
    keys = jax.ShapeDtypeStruct((members, 2), np.uint32)
    try:
        shapes = jax.eval_shape(jax.vmap(trainer.init), keys)
    except Exception:  # noqa: BLE001  (the init itself reports it, with its own message)
        return None

    def size(tree: Any) -> int:
        return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize
                   for x in jax.tree.leaves(tree))

    agents = int(trainer.env.num_agents)
    return {"model": size((shapes.learner.params, shapes.learner.opt_state)),
            "env": size((shapes.envs.env_state, shapes.envs.obs)),
            "rollout": config.num_steps * (size(shapes.envs.obs)
                                           + members * config.num_envs * agents * 8 * 4)}


def device_memory(trainer: Trainer, devices: int | None) -> tuple[str, int | None]:
    """(platform, bytes) of the memory that `devices` local devices (None: all)
    give a program of `trainer`'s env: the host's RAM on the CPU, however many
    devices share it; on GPUs that many devices' share of their allocators'
    limits (`jaxwarp.memory.memory_limit`). Bytes None where unknown."""
    backend = trainer.env.backend
    platform = {"cuda": "gpu", "cpu": "cpu"}.get(backend) or jax.default_backend()
    limit = memory_limit(platform)
    if limit is None or platform == "cpu":
        return platform, limit
    try:
        total = len(jax.devices(platform))
    except RuntimeError:
        return platform, limit
    return platform, limit * min(resolve_devices(devices), total) // total


@dataclasses.dataclass(frozen=True)
class Chunks:
    """A sweep too big for the memory at once: `size` runs per program (a
    multiple of the device count), `why` the line that says so."""

    size: int
    why: str


def members_that_fit(per_run: float, limit: int, devices: int) -> int:
    """The most runs one program may train, from `per_run` bytes each in
    `limit` bytes, rounded down to a multiple of `devices` (each device trains
    as many); 0 when not one per device fits."""
    return int(limit // per_run) // devices * devices


def check_memory(run: Run) -> Chunks | None:
    """Before anything is allocated: None when the run's arrays alone
    (`run_bytes`, a lower bound) fit the memory of its devices
    (`device_memory`; also where either is unknown). A sweep that does not fit
    runs in chunks (`Chunks`). RunError naming the config keys when a plain
    run, or one run per device of a sweep, does not fit."""
    parts = run_bytes(run)
    platform, limit = device_memory(run.trainer, run.layout.devices if run.layout else None)
    need = sum(parts.values()) if parts else 0
    if parts is None or limit is None or need <= limit:
        return None
    chunks = _chunks(run, need / run.local_members, (platform, limit),
                     f"need at least {_size(need)} (their arrays)")
    if chunks is not None:
        return chunks
    c = run.config
    hidden = ", ".join(f"policies.{g}.hidden_sizes" for g, _ in c.policies) or "hidden_sizes"
    raise RunError(
        f"the run needs at least {need / 1e9:.1f} GB, more than {_where(run, platform)} "
        f"({limit / 1e9:.1f} GB): parameters and optimiser state {parts['model'] / 1e9:.1f} GB "
        f"({hidden}), env state {parts['env'] / 1e9:.1f} GB (num_envs={c.num_envs}), one "
        f"rollout {parts['rollout'] / 1e9:.1f} GB (num_envs x num_steps={c.num_steps}) x "
        f"{_members(run)}; lower them"
        + (" (not even one run per device fits)" if run.settings else ""))


def program_bytes(compiled: Any) -> int | None:
    """XLA's count of the memory a compiled program takes on each of its
    devices: its arguments, its outputs not written over donated arguments,
    and its temporaries. None where XLA does not say."""
    try:
        m = compiled.memory_analysis()
        return int(m.argument_size_in_bytes + m.output_size_in_bytes
                   - m.alias_size_in_bytes + m.temp_size_in_bytes)
    except Exception:  # noqa: BLE001  (not every backend implements it)
        return None


# The share of the devices' memory a program may take by XLA's count. The count
# leaves out how the allocator places it: the temporaries are one allocation
# that needs a contiguous block beside the buffers already live. Measured on
# an H200 (docs/sweeps.md): an MPE sweep whose program XLA counted at 95% of
# the limit failed to allocate its temporaries.
PROGRAM_SHARE = 0.9


def check_program(run: Run, compiled: Any, members: int, devices: int) -> Chunks | None:
    """After compiling a sweep's program of `members` runs on `devices`
    devices (this process's share of both): None when XLA's count of its
    memory (`program_bytes`, more than `check_memory`'s lower bound: the
    update's temporaries) fits `PROGRAM_SHARE` of the devices' memory (or is
    unknown); else the chunks that fit by that count; RunError when not one
    run per device does."""
    each = program_bytes(compiled)
    platform, limit = device_memory(run.trainer, devices)
    need = None if each is None else each * devices
    if need is None or limit is None or need <= limit * PROGRAM_SHARE:
        return None
    chunks = _chunks(run, need / members, (platform, int(limit * PROGRAM_SHARE)),
                     f"need {_size(need * run.local_members / members)} (XLA's count of the "
                     f"program compiled for {members}; a program may take "
                     f"{PROGRAM_SHARE:.0%} of the memory)")
    if chunks is None:
        raise RunError(f"one run of the sweep per device needs {_size(need / members)} "
                       f"(XLA's count), more than {_where(run, platform)} ({_size(limit)}); "
                       "lower num_envs, num_steps or the policies' hidden_sizes")
    return chunks


def _chunks(run: Run, per_run: float, memory: tuple[str, int], need: str) -> Chunks | None:
    """A sweep's runs in the fewest chunks of those that fit (`per_run` bytes
    each), all of one size, a multiple of the device count, as few runs
    repeated as can be; None for a plain run or when not one per device fits."""
    if run.layout is None:
        return None
    devices = run.layout.devices
    fit = members_that_fit(per_run, memory[1], devices)
    if fit < devices:
        return None
    _one_process(run, need, memory)
    _check_host(run)
    count = _ceil(run.members, fit)
    size = _ceil(_ceil(run.members, count), devices) * devices
    return Chunks(size, f"jaxwarp sweep: its {run.members} runs ({_members(run)}) {need}, more "
                  f"than {_where(run, memory[0])} ({_size(memory[1])}), which holds {fit}: "
                  f"{count} chunks of {size} runs, one after the other in one compiled "
                  f"program ({count * size - run.members} repeated to fill the last)")


def _one_process(run: Run, need: str, memory: tuple[str, int]) -> None:
    """RunError for a sweep over several processes that does not fit at once:
    chunks of runs (`member_chunks`) keep every run's state on one host."""
    procs = run.layout.processes
    if procs > 1:
        raise RunError(f"a sweep over {procs} processes: the {run.local_members} runs of each "
                       f"({_members(run)} in all) {need}, more than {_where(run, memory[0])} "
                       f"({_size(memory[1])}); a sweep in chunks of its runs runs in one "
                       "process: sweep fewer settings or seeds, or use more processes")


def _check_host(run: Run) -> None:
    """RunError unless the host's memory holds every run's state twice (before
    and after a chunk of updates: `member_chunks.ChunkedProgram`)."""
    parts, host = run_bytes(run), memory_limit("cpu")
    state = 0 if parts is None else 2 * (parts["model"] + parts["env"])
    if host is not None and state > host:
        raise RunError(f"a sweep in chunks keeps its {run.members} runs' states in host memory, "
                       f"twice: {_size(state)}, more than the host's memory ({_size(host)}); "
                       "sweep fewer settings or seeds")


def _where(run: Run, platform: str) -> str:
    if platform == "cpu":
        return "the host's memory"
    if not run.settings:
        return f"the {platform} devices' memory"
    return f"the memory of {run.layout.devices} {platform} device(s)"


def _size(n: float) -> str:
    """Bytes as GB, MB or kB, three significant digits."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n / 1e3:.3g} kB"


def out_of_memory_text(e: BaseException) -> str | None:
    """XLA's out-of-memory error (RESOURCE_EXHAUSTED, not a full disk) as one line."""
    if isinstance(e, RunError) or storage_fault(e) is not None:
        return None
    text = " ".join(str(e).split())
    if "RESOURCE_EXHAUSTED" not in text and not isinstance(e, MemoryError):
        return None
    return text[:200] + ("..." if len(text) > 200 else "")


class OutOfMemory:
    """XLA running out of device or host memory (compiling or running a chunk)
    as a one-line RunError naming the keys that size the run; a folder that
    this run created and that holds no checkpoint yet is removed (`run`: set
    once the run is started)."""

    def __init__(self) -> None:
        self.run: Run | None = None

    def __enter__(self) -> OutOfMemory:
        return self

    def __exit__(self, kind: Any, e: Any, tb: Any) -> bool:
        text = None if not isinstance(e, Exception) else out_of_memory_text(e)
        if text is None:
            return False
        run = self.run
        if run is not None and run.created and run.primary and run.saved_at is None:
            shutil.rmtree(run.out, ignore_errors=True)  # nothing of value in it yet
        raise RunError(f"out of memory ({text}); lower num_envs, num_steps or the policies' "
                       "hidden_sizes") from None


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _members(run: Run) -> str:
    """The runs trained together, as the memory message counts them."""
    seeds = f"{run.seeds} seed(s)"
    return f"{len(run.settings)} settings x {seeds}" if run.settings else seeds
