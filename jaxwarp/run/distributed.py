"""The processes of a training run: multi-host start and keeping the processes in step
(the data-parallel mesh over their devices: `jaxwarp.train.mesh`).

* `initialize(...)` / `maybe_initialize(requested)`: ``jax.distributed.initialize``
  for a multi-host run, from arguments, the environment
  (``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``) or a
  cluster that jax detects itself (SLURM, Open MPI). It must run before
  anything touches a jax backend (``jax.devices()``, an array); the host loop
  calls `maybe_initialize` first thing.
* `is_primary`, `all_ok`, `same_on_all`: what the host loop needs to keep the
  processes in step (process 0 writes files; decisions taken on the host,
  such as stopping early, are taken by process 0 for all).

See docs/sharding.md ("Training on several devices", "Several hosts").
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import jax
import numpy as np

from jaxwarp.train.config import ConfigError

# jax itself reads JAX_COORDINATOR_ADDRESS (and JAX_LOCAL_DEVICE_IDS); jax 0.10
# does not read the process count and id from the environment, so we do.
ENV_ADDRESS = "JAX_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "JAX_NUM_PROCESSES"
ENV_PROCESS_ID = "JAX_PROCESS_ID"


@dataclass(frozen=True)
class ProcessInfo:
    """Where this process stands after `maybe_initialize`."""

    initialized: bool  # jax.distributed is initialized (by us or before)
    process_id: int
    num_processes: int


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected an integer") from None
    if value < 0:
        raise ConfigError(f"{name}={raw!r}: expected an integer >= 0")
    return value


def _is_initialized() -> bool:
    check = getattr(jax.distributed, "is_initialized", None)
    if check is not None:
        return bool(check())
    from jax._src import distributed as _d  # pragma: no cover (older jax)
    return _d.global_state.client is not None


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None) -> ProcessInfo:
    """``jax.distributed.initialize`` (once per process; a second call is a no-op).

    Arguments left None come from ``JAX_COORDINATOR_ADDRESS`` ("host:port" of
    process 0), ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID``, else from the
    cluster (jax detects SLURM, Open MPI, ...). Every process of the run calls
    it with the same address and count and its own id in [0, num_processes).
    On CPU, cross-process collectives use jax's default
    ``jax_cpu_collectives_implementation`` ("gloo" in jax 0.10).
    Raises RuntimeError (naming the variables) when jax cannot start.
    """
    if _is_initialized():
        return _info(True)
    if num_processes is None:
        num_processes = _env_int(ENV_NUM_PROCESSES)
    if process_id is None:
        process_id = _env_int(ENV_PROCESS_ID)
    try:
        jax.distributed.initialize(coordinator_address=coordinator_address,
                                   num_processes=num_processes, process_id=process_id)
    except (ValueError, TypeError, RuntimeError) as e:
        raise RuntimeError(
            f"jax.distributed.initialize failed ({' '.join(str(e).split())}); give the "
            f"coordinator address (host:port of process 0), the number of processes and "
            f"this process's id, e.g. {ENV_ADDRESS}=host0:12345 {ENV_NUM_PROCESSES}=2 "
            f"{ENV_PROCESS_ID}=0, or run under SLURM / Open MPI") from None
    return _info(True)


def maybe_initialize(requested: bool = False) -> ProcessInfo:
    """Initializes jax.distributed when `requested` (the config's ``distributed``)
    or when ``JAX_COORDINATOR_ADDRESS`` is set; otherwise does nothing (a
    single-process run, and no backend is touched)."""
    if _is_initialized():
        return _info(True)
    if requested or os.environ.get(ENV_ADDRESS):
        return initialize()
    return ProcessInfo(initialized=False, process_id=0, num_processes=1)


def _info(initialized: bool) -> ProcessInfo:
    return ProcessInfo(initialized=initialized, process_id=jax.process_index(),
                       num_processes=jax.process_count())


def is_primary() -> bool:
    """This process writes the run's files (process 0)."""
    return jax.process_index() == 0


def all_ok(ok: bool) -> bool:
    """True when `ok` holds on every process (a collective: every process calls
    it at the same point). One process alone: `ok`."""
    if jax.process_count() == 1:
        return ok
    from jax.experimental import multihost_utils

    flags = multihost_utils.process_allgather(np.array([int(ok)], np.int32))
    return bool(np.asarray(flags).all())


def same_on_all(value: int | bool) -> int:
    """Process 0's `value` on every process (a collective), so that decisions
    taken on the host (stop at a time limit, the checkpoint resumed from)
    agree. One process: `value`."""
    if jax.process_count() == 1:
        return int(value)
    from jax.experimental import multihost_utils

    return int(multihost_utils.broadcast_one_to_all(np.array(int(value), np.int32)))


def finish() -> None:
    """Ends a run over several processes together: a barrier, then
    ``jax.distributed.shutdown()`` on every process, so that no process leaves
    while another still talks to the coordinator (which ends in gRPC
    ``CANCELLED`` reports on the others). One process: nothing."""
    if not _is_initialized():
        return
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices("jaxwarp: end of run")
    jax.distributed.shutdown()
