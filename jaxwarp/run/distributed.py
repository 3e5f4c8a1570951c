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
* `to_host`, `to_global`: a sweep's arrays split over every process's devices
  (its runs), gathered to the host on every process and placed from it.
* `finish()`: the end of a multi-process run, every process together, with
  no gRPC traces from jax's coordination service on the way out.

See docs/sharding.md ("Training on several devices", "Several hosts").
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from jaxwarp.train.config import ConfigError

# jax itself reads JAX_COORDINATOR_ADDRESS (and JAX_LOCAL_DEVICE_IDS); jax 0.10
# does not read the process count and id from the environment, so we do.
ENV_ADDRESS = "JAX_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "JAX_NUM_PROCESSES"
ENV_PROCESS_ID = "JAX_PROCESS_ID"
# How long `finish` waits for the other processes at the end (the run's end:
# they come within seconds; a process that failed or hangs is not waited for
# longer), how long at interpreter exit (where a process that raised leaves),
# and how long process 0, which hosts the coordination service, outlives the
# others' exit.
FINISH_TIMEOUT_S = 300
EXIT_TIMEOUT_S = 30
EXIT_LINGER_S = 1.0


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
    # Every other way out (the API's train_run, an error, Ctrl-C) meets the other
    # processes first (atexit runs it before jax's own exit hook, which shuts
    # down with no barrier); the CLI's `finish` never gets there.
    atexit.register(_finish_at_exit)
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


def to_host(tree: Any) -> Any:
    """Every leaf of `tree` as a host (NumPy) array, whole on every process: an
    array split over several processes (a sweep's runs, `member_mesh`) is
    gathered from all of them (a collective: every process calls it at the
    same point); otherwise (one process, or an array each process holds
    whole) ``jax.device_get``."""
    if jax.process_count() == 1:
        return jax.device_get(tree)
    from jax.experimental import multihost_utils

    def one(x: Any) -> Any:
        if isinstance(x, jax.Array) and not (x.is_fully_addressable or x.is_fully_replicated):
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(jax.device_get(x))

    return jax.tree.map(one, tree)


def to_global(tree: Any, sharding: Any) -> Any:
    """Host arrays, the same on every process, as arrays with `sharding` (a
    `NamedSharding`, possibly over several processes' devices): each process
    places the slices its own devices hold, from its own copy; nothing is sent
    between processes."""
    if jax.process_count() == 1:
        return jax.device_put(tree, sharding)
    return jax.tree.map(lambda x: jax.make_array_from_callback(
        np.shape(x), sharding, lambda index, x=x: np.asarray(x)[index]), tree)


def finish(timeout_s: float = FINISH_TIMEOUT_S) -> None:
    """Ends this process of a run over several processes, last thing, all
    together and quietly; a single-process run: returns at once.

    A barrier of every process at the coordination service (waiting at most
    `timeout_s` for the others), then the process exits with status 0 at once
    (``os._exit``, stdout and stderr flushed): the other processes first,
    process 0, which hosts the coordination service, a moment later. No
    ``jax.distributed.shutdown()``: jax >= 0.11's device clients watch the
    coordination service from a thread that only their destructor stops
    quietly, and they live (every array and device holds them) until the
    interpreter's teardown, after jax's own exit hook has shut the service
    down; each watch then prints a gRPC ``CANCELLED`` or ``UNAVAILABLE``
    trace (seen on two H200 processes after every clean run). Exiting at once
    runs no destructor; the processes that talk to process 0's service are
    gone before it. Call it only when everything is written (the run's files
    are closed by then)."""
    if not _is_initialized():
        return
    from jax._src import distributed as jax_distributed

    client = jax_distributed.global_state.client
    with contextlib.suppress(Exception):  # a peer that failed or hangs: leave all the same
        client.wait_at_barrier("jaxwarp_finish", int(timeout_s * 1000))
    _exit_now(0, linger_s=EXIT_LINGER_S if jax.process_index() == 0 else 0.0)


def _exit_now(status: int, linger_s: float) -> None:
    """Flushes stdout and stderr, waits `linger_s`, then ends the process."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    time.sleep(linger_s)
    os._exit(status)


def _finish_at_exit() -> None:
    """At interpreter exit (the API's train_run, an error, Ctrl-C): the
    processes meet (at most EXIT_TIMEOUT_S) before jax's own exit hook shuts
    the distributed system down, so that none leaves while another still
    works. (The exit status is Python's: no early exit here; on GPUs jax
    >= 0.11 may then print the watch traces `finish` avoids.)"""
    if not _is_initialized():
        return
    from jax._src import distributed as jax_distributed

    with contextlib.suppress(Exception):
        jax_distributed.global_state.client.wait_at_barrier("jaxwarp_exit",
                                                            EXIT_TIMEOUT_S * 1000)
