"""Subprocess workers on forced CPU devices, shared by the sharding tests.

XLA's host device count is fixed when jax initialises, so tests that need
several devices run their checks in fresh processes started with
``XLA_FLAGS=--xla_force_host_platform_device_count=N``. Each worker
(``python SCRIPT --worker I PARTS``) does its share and prints one JSON line.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest


def run_workers(script: str, devices: int, parts: int, what: str, timeout: int = 900) -> dict:
    """Runs `parts` workers of `script` on `devices` forced CPU devices and
    merges their reports: the ``"envs"`` dicts key by key, the other keys as
    they come. A failed worker fails the test with its stderr's tail."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                        f" --xla_force_host_platform_device_count={devices}").strip()
    env["JAX_PLATFORMS"] = "cpu"
    parts = max(1, min(parts, os.cpu_count() or 1))
    procs = [subprocess.Popen([sys.executable, script, "--worker", str(i), str(parts)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for i in range(parts)]
    outs = [p.communicate(timeout=timeout) for p in procs]
    report: dict = {"envs": {}}
    for p, (stdout, stderr) in zip(procs, outs):
        if p.returncode != 0:
            pytest.fail(f"{what} worker failed (rc {p.returncode}):\n{stderr[-6000:]}")
        part = json.loads(stdout.strip().splitlines()[-1])
        report["envs"].update(part.pop("envs", {}))
        report.update(part)
    return report


def distributed_job(args: list[str], processes: int, devices: int | None = None,
                    timeout: int = 300) -> tuple[list[subprocess.Popen], list[tuple[str, str]]]:
    """Runs `args` as `processes` processes of one jax.distributed job on
    localhost (a fresh coordinator port; one process: no job at all), each on
    `devices` forced CPU devices (None: one, XLA_FLAGS dropped), and waits for
    all: (processes, their (stdout, stderr)); any still running after `timeout`
    seconds is killed."""
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    if devices is not None:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    job = {"JAX_COORDINATOR_ADDRESS": f"localhost:{port}", "JAX_NUM_PROCESSES": str(processes)}
    procs = [subprocess.Popen(args, env=env | (job | {"JAX_PROCESS_ID": str(i)}
                                               if processes > 1 else {}),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(processes)]
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return procs, outs


def leaves_differ(a, b) -> list[str]:
    """Paths of the leaves of pytrees a and b that differ in shape, dtype or bits."""
    import jax
    import numpy as np

    la, lb = jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b)
    if len(la) != len(lb):
        return [f"{len(la)} leaves vs {len(lb)}"]
    return [jax.tree_util.keystr(p) for (p, x), y in zip(la, lb)
            if x.shape != y.shape or x.dtype != y.dtype
            or not np.array_equal(np.asarray(x), np.asarray(y))]


def not_split(tree, mesh, axis: int = 0) -> list[str]:
    """Paths of the leaves whose axis `axis` is not split over the mesh's "envs" axis."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    want = NamedSharding(mesh, P(*([None] * axis), "envs"))
    return [jax.tree_util.keystr(p) for p, x in jax.tree_util.tree_leaves_with_path(tree)
            if not x.sharding.is_equivalent_to(want, x.ndim)]
