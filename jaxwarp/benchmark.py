"""The benchmark protocol of experiments/ (docs/decisions.md, "Benchmarks and protocol").

Every comparison between a kernel and pure JAX makes each step's actions a
function of the previous step's observations. XLA deletes pure-JAX work whose
results nobody reads: in a scan whose observations are carried but never
read (unrolled, it keeps only the last unrolled step's), the pure-JAX env's
observation code is dropped, while a custom call always runs whole, so the
comparison would flatter pure JAX. With actions that read every element of
the observations, the next step (whose results the loop returns) depends on
all of them, and nothing can be dropped.

The actions are a cheap integer hash, far less work than any env step:
``protocol_actions(t, obs, nvec)`` hashes (step, index) and each agent's
observation row (its sum); ``protocol_actions(t, None, nvec, shape)`` hashes
(step, index) alone, for figures of a kernel alone (label them so).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp.models.mlp_mosaic import KERNEL_NAME as MOSAIC_MLP
from jaxwarp.train.ppo_mosaic import KERNEL_NAME as PPO_TOWER


def _mix(h: jax.Array) -> jax.Array:
    h = (h ^ (h >> 15)) * np.uint32(2246822519)
    return h ^ (h >> 13)


def observation_signature(obs: jax.Array) -> jax.Array:
    """u32[envs, agents]: the bits of each agent's observation row sum (every
    element of ``obs``, f32[envs, agents, obs_dim] or f32[envs, obs_dim] for
    one agent, is read)."""
    rows = obs.astype(jnp.float32).sum(axis=-1)  # bf16 obs: summed in f32
    if rows.ndim == 1:
        rows = rows[:, None]
    return jax.lax.bitcast_convert_type(rows, jnp.uint32)


def protocol_actions(t: jax.Array, obs: jax.Array | None, nvec: Sequence[int],
                     shape: tuple[int, int] | None = None) -> jax.Array:
    """i32[envs, agents, heads] with head h in [0, nvec[h]).

    t: i32[] step index; obs: the previous step's observations (None: actions
    from the step index alone, the kernel-alone mode); shape: (envs, agents),
    needed only without obs.
    """
    nvec = np.asarray(nvec, np.uint32).reshape(-1)
    if obs is not None:
        sig = observation_signature(obs)
        shape = sig.shape
    elif shape is None:
        raise ValueError("protocol_actions: shape (envs, agents) is needed when obs is None")
    envs, agents = shape
    heads = nvec.shape[0]
    idx = jnp.arange(envs * agents * heads, dtype=jnp.uint32).reshape(envs, agents, heads)
    h = idx * np.uint32(2654435761) + jnp.asarray(t).astype(jnp.uint32) * np.uint32(40503)
    if obs is not None:
        h = h ^ (sig[..., None] * np.uint32(362437))
    h = _mix(h)
    return (h % jnp.asarray(nvec)).astype(jnp.int32)


# ------------------------------------------------------------ model FLOPs

# Dense tensor-core peaks in TFLOP/s by device kind (jax's device_kind) and
# matmul input dtype, from the vendor's datasheets (H100 SXM5: bf16 989.4,
# tf32 494.7). float32 matmuls count at the TF32 peak because XLA:GPU runs
# them as TF32 at jax's default precision.
PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "NVIDIA H100 80GB HBM3": {"bfloat16": 989.4, "float16": 989.4, "float32": 494.7},
    "NVIDIA H200": {"bfloat16": 989.4, "float16": 989.4, "float32": 494.7},
}


def _sub_jaxprs(value):
    """The jaxprs held in one equation parameter (a jaxpr, a closed jaxpr or
    a tuple/list of them)."""
    from jax.extend import core as jcore
    if isinstance(value, jcore.ClosedJaxpr):
        return [value.jaxpr]
    if isinstance(value, jcore.Jaxpr):
        return [value]
    if isinstance(value, (tuple, list)):
        return [j for v in value for j in _sub_jaxprs(v)]
    return []


def _kernel_names(params: dict[str, Any]) -> set[str]:
    """The kernel names a primitive's parameters carry (a Pallas Mosaic GPU
    kernel's mesh has one)."""
    out = set()
    for v in params.values():
        for u in v if isinstance(v, (tuple, list)) else (v,):
            name = getattr(u, "kernel_name", None)
            if isinstance(name, str):
                out.add(name)
    return out


def _jaxpr_matmul_flops(jaxpr) -> dict[str, float]:
    out: dict[str, float] = {}

    def add(d: dict[str, float], times: float = 1.0) -> None:
        for k, v in d.items():
            out[k] = out.get(k, 0.0) + times * v

    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            lhs, rhs = (v.aval for v in eqn.invars)
            (_, rc), (_, rb) = eqn.params["dimension_numbers"]
            free = [d for i, d in enumerate(rhs.shape) if i not in rc and i not in rb]
            dtype = np.dtype(lhs.dtype).name if lhs.dtype == rhs.dtype else "mixed"
            add({dtype: 2.0 * float(np.prod(lhs.shape)) * float(np.prod(free))})
            continue
        if name == "pallas_call" and eqn.params.get("jaxpr") is not None:
            # a kernel: its body's products once per grid point
            grid = getattr(eqn.params.get("grid_mapping"), "grid", ())
            body = eqn.params["jaxpr"]
            add(_jaxpr_matmul_flops(getattr(body, "jaxpr", body)),
                float(np.prod([g for g in grid if isinstance(g, int)])))
            continue
        if MOSAIC_MLP in _kernel_names(eqn.params):
            # The rollout's Mosaic GPU forward (jaxwarp.models.mlp_mosaic): its
            # body's wgmmas sit in a pipeline loop of unknown trip count, but
            # every row of x [..., in_pad] goes through every weight [k, n] once.
            x, *params = (v.aval for v in eqn.invars)
            rows = float(np.prod(x.shape[:-1]))
            add({"bfloat16": sum(2.0 * rows * w.shape[-2] * w.shape[-1] for w in params
                                 if w.ndim >= 2 and w.dtype == jnp.bfloat16)})
            continue
        if PPO_TOWER in _kernel_names(eqn.params):
            # A PPO minibatch kernel (jaxwarp.train.ppo_mosaic): every row of x
            # [rows, W] through the tower's three [W, W] weights forward, two back
            # and three weight gradients (padding included; the selector wgmmas
            # that sum the bias gradients are not counted).
            x, _, w1 = (v.aval for v in eqn.invars[:3])
            add({"bfloat16": 8 * 2.0 * x.shape[0] * w1.shape[-2] * w1.shape[-1]})
            continue
        if name == "while":  # trip count unknown: the body once
            add(_jaxpr_matmul_flops(eqn.params["body_jaxpr"].jaxpr))
            continue
        subs = [_jaxpr_matmul_flops(j) for v in eqn.params.values() for j in _sub_jaxprs(v)]
        if not subs:
            continue
        if name == "cond":  # one branch runs: count the costliest
            add(max(subs, key=lambda d: sum(d.values())))
        else:  # scan runs its body `length` times; pjit, remat, custom_vjp once
            times = float(eqn.params.get("length", 1)) if name == "scan" else 1.0
            for s in subs:
                add(s, times)
    return out


def matmul_flops(fn, *args, **kwargs) -> dict[str, float]:
    """FLOPs of every matrix product that ``fn(*args, **kwargs)`` computes,
    by input dtype ("float32", "bfloat16", ...): 2 x M x N x K summed over
    the dot_general equations of its jaxpr, scan bodies times their length
    (a forward pass, its backward pass, any einsum), a Pallas kernel's body
    times its grid (the tiles' padding included). Counted from the program
    as written once products whose results nothing reads are dropped (as XLA
    drops them); a while loop's body counts once.
    args may be arrays or jax.ShapeDtypeStruct."""
    jaxpr = jax.make_jaxpr(fn)(*args, **kwargs).jaxpr
    try:  # drop what no output reads (e.g. the gradient of the observations)
        from jax._src.interpreters import partial_eval as pe
        jaxpr, _ = pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars))
    except (ImportError, AttributeError, TypeError):  # a jax without it: count all
        pass
    return _jaxpr_matmul_flops(jaxpr)


def model_flops_utilization(flops: dict[str, float], seconds: float,
                            device_kind: str) -> float | None:
    """Fraction of the device's dense tensor-core peak: the time the matmuls
    of `flops` (by dtype) would take at peak over `seconds`; None for a
    device or dtype without a known peak."""
    peaks = PEAK_TFLOPS.get(device_kind)
    if peaks is None or seconds <= 0:
        return None
    need = 0.0
    for dtype, f in flops.items():
        if f and dtype not in peaks:
            return None
        need += f / (peaks.get(dtype, 1.0) * 1e12)
    return need / seconds


def git_commit(cwd: str | os.PathLike | None = None) -> str:
    """``git rev-parse HEAD`` of the repository holding ``cwd`` (default: this
    package's folder), with ``+dirty`` appended when tracked files differ from
    it; ``"unknown"`` where git or a repository is missing (an installed wheel,
    a GPU machine given a copy of the tree without ``.git``). A copy without
    ``.git`` can be told its commit through ``JAXWARP_COMMIT``, which wins."""
    if os.environ.get("JAXWARP_COMMIT"):
        return os.environ["JAXWARP_COMMIT"]
    where = os.fspath(cwd) if cwd is not None else os.path.dirname(os.path.abspath(__file__))
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0 or not head.stdout.strip():
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=where, capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run_meta(argv: Sequence[str] | None = None, **extra: Any) -> dict[str, Any]:
    """What every result file's ``meta`` records, so that a figure can be traced
    to the code and the machine that produced it (docs/decisions.md, "Benchmarks and
    protocol").

    Args:
      argv: the command line (default ``sys.argv``); recorded as one
        shell-quoted string, ``python <script> <args>``.
      extra: more keys for the same dict (they win over the defaults).

    Returns:
      dict with ``commit`` (``git_commit()``), ``command`` (str), ``device``
      (the first JAX device's kind, e.g. "NVIDIA H100 80GB HBM3", or the CPU's
      name), ``jax``, ``python`` and ``date`` (UTC, "%Y-%m-%d %H:%M:%S").
    """
    argv = list(sys.argv if argv is None else argv)
    if argv and argv[0].endswith(".py"):  # a script path relative to the repository root
        argv[0] = os.path.relpath(argv[0]) if os.path.isabs(argv[0]) else argv[0]
    device = jax.devices()[0]
    kind = device.device_kind
    if device.platform == "cpu":
        kind = f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores)"
    meta: dict[str, Any] = {
        "commit": git_commit(),
        "command": shlex.join(["python", *argv]) if argv else "unknown",
        "device": kind,
        "jax": jax.__version__,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
    }
    meta.update(extra)
    return meta


def add_bench_arguments(ap: argparse.ArgumentParser, out: str, small: str,
                        repeats: int = 5) -> None:
    """The options that the env, sampler and trainer benchmarks share:
    ``--backends``, ``--small`` (helped by `small`), ``--repeats`` and ``--out``
    (default `out`)."""
    ap.add_argument("--backends", default=None,
                    help="comma-separated; default: cuda,jax with a GPU, else cpu,jax")
    ap.add_argument("--small", action="store_true", help=small)
    ap.add_argument("--repeats", type=int, default=repeats)
    ap.add_argument("--out", default=out)


def bench_backends(backends: str | None, gpu: bool) -> list[str]:
    """``--backends`` as a list: the comma-separated names given, else
    ``cuda, jax`` with a GPU (`gpu`) and ``cpu, jax`` without."""
    if backends:
        return backends.split(",")
    return ["cuda", "jax"] if gpu else ["cpu", "jax"]


def write_result(path: str | os.PathLike, data: dict[str, Any], indent: int = 2,
                 end: str = "") -> None:
    """Writes a benchmark's result file: `data` as JSON (`indent`, then `end`)
    at `path`, its folder made where missing; prints ``wrote PATH``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=indent) + end)
    print(f"wrote {path}")


def median_seconds(fn: Callable[..., Any], args: Sequence[Any], repeats: int) -> float:
    """Median wall seconds of ``fn(*args)`` over `repeats` calls, each waited
    for (``jax.block_until_ready``), after one untimed call."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return statistics.median(times)
