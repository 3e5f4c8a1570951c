"""The GRU cell's scan as one kernel a direction against jaxwarp's lax.scan.

`jaxwarp.models.recurrent.gru_scan` (the learner's recurrent core: the cell
scanned over a minibatch's sequences, its backward written by hand) launches a
matmul and a fusion per step in each direction: at JaxMARL's IPPO-RNN size (T =
128 steps, minibatches of 24 sequences, GRU 128) that is about 2,000 small
launches per update, and the update is launch-bound (docs/decisions.md,
"Recurrent models"). The variant here (`kernels/gru_scan.cu`, one launch a
direction: a block per few rows, a thread per hidden unit, the recurrent kernels
in shared memory, one barrier a step) computes the same function; its CPU build
(`kernels/gru_scan_cpu.cc`, the same per-unit code run thread by thread) lets
the maths be checked without a GPU.

``--kernel mma`` (GPU) times a second form (`kernels/gru_scan_mma.cu`): a block
per 16 rows through all T steps, the step's matmul on tensor cores (mma.sync,
TF32 inputs and f32 accumulation, XLA:GPU's default for a float32 dot), the
recurrent kernels in shared memory, the carry in float32.

* ``--check``: values and gradients of the kernel against `gru_scan` on random
  shapes with random resets (CPU or GPU); ``mma``: its error against `gru_scan`
  at full float32 precision, beside the error of `gru_scan` at XLA's default
  (TF32) precision, must stay within 3x of it (or 1e-2);
* timing (GPU): forward + backward of the scan alone at the learner's shapes,
  then whole updates of `bench_recurrent.time_case` with the shipped `gru` and
  with the same model whose `gru_scan` is the kernel (model ``gru_kernel``).

    python experiments/bench_gru_scan.py --check                 # CPU or GPU
    python experiments/bench_gru_scan.py --out experiments/results/bench_gru_scan_h200.json
    python experiments/bench_gru_scan.py --kernel mma --out experiments/results/bench_gru_scan_mma_h200.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
KERNELS = HERE / "kernels"


def build(out_dir: Path, kernel: str = "cuda_cores") -> tuple[Path, str]:
    """The kernels' library for this backend: (path, FFI platform)."""
    from jaxwarp.authoring.build import find_cxx, find_nvcc

    inc = ["-I", jax.ffi.include_dir(), "-I", str(KERNELS)]
    if jax.default_backend() == "gpu":
        major, minor = jax.devices()[0].compute_capability.split(".")
        arch = f"{major}{minor}" + ("a" if major == "9" else "")
        lib = out_dir / "gru_scan_cuda.so"
        cmd = [find_nvcc(), "-O3", "-std=c++17", f"-arch=sm_{arch}", "--shared", "-Xcompiler",
               "-fPIC", "-diag-suppress", "940", *inc, "-o", str(lib),
               str(KERNELS / ("gru_scan_mma.cu" if kernel == "mma" else "gru_scan.cu"))]
        platform = "CUDA"
    else:
        lib = out_dir / "gru_scan_cpu.so"
        cmd = [find_cxx(), "-O2", "-std=c++17", "-shared", "-fPIC", "-w", *inc, "-o", str(lib),
               str(KERNELS / "gru_scan_cpu.cc")]
        platform = "cpu"
    subprocess.run(cmd, check=True)
    return lib, platform


def register(lib: Path, platform: str) -> None:
    handle = ctypes.cdll.LoadLibrary(str(lib))
    for name, symbol in (("bench_gru_scan_fwd", "GruScanForward"),
                         ("bench_gru_scan_bwd", "GruScanBackward")):
        jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(handle, symbol)),
                                    platform=platform)


def _flat(xs: jax.Array, h0: jax.Array, reset: jax.Array):
    """[T, ..., X] -> [T, B, X] (B the product of the batch axes)."""
    t, h = xs.shape[0], h0.shape[-1]
    return xs.reshape(t, -1, 3 * h), h0.reshape(-1, h), reset.reshape(t, -1)


def _forward(xs, w_rec, b_hn, h0, reset):
    shape = h0.shape
    x, h, r = _flat(xs, h0, reset)
    t, b, size = x.shape[0], x.shape[1], h.shape[-1]
    f32 = lambda *s: jax.ShapeDtypeStruct(s, jnp.float32)  # noqa: E731
    h_t, ys, *saved = jax.ffi.ffi_call(
        "bench_gru_scan_fwd", (f32(b, size),) + tuple(f32(t, b, size) for _ in range(6)))(
        x, w_rec, b_hn, h, r)
    out = (h_t.reshape(shape), ys.reshape((t,) + shape))
    return out, (tuple(saved), w_rec, r, shape)


def _backward(res, cts):
    saved, w_rec, r, shape = res
    d_ht, d_ys = cts
    t, size = d_ys.shape[0], shape[-1]
    b = int(np.prod(shape[:-1]))
    f32 = lambda *s: jax.ShapeDtypeStruct(s, jnp.float32)  # noqa: E731
    dh0, dxs, d_rec = jax.ffi.ffi_call(
        "bench_gru_scan_bwd", (f32(b, size), f32(t, b, 3 * size), f32(t, b, 3 * size)))(
        d_ht.reshape(b, size), d_ys.reshape(t, b, size), *saved, w_rec, r)
    h_in = saved[0].reshape(-1, size)
    d_w = h_in.T @ d_rec.reshape(-1, 3 * size)  # one matmul over all T x B rows, as gru_scan
    d_b = d_rec[..., 2 * size:].reshape(-1, size).sum(0)
    return (dxs.reshape((t,) + shape[:-1] + (3 * size,)), d_w, d_b, dh0.reshape(shape), None)


@jax.custom_vjp
def kernel_gru_scan(xs, w_rec, b_hn, h0, reset):
    """`jaxwarp.models.recurrent.gru_scan` through the kernels (same signature)."""
    return _forward(xs, w_rec, b_hn, h0, reset)[0]


kernel_gru_scan.defvjp(_forward, _backward)


def inputs(key: jax.Array, t: int, b: int, h: int, reset_p: float = 0.1):
    k = jax.random.split(key, 5)
    xs = jax.random.normal(k[0], (t, b, 3 * h))
    w = jax.random.normal(k[1], (h, 3 * h)) / np.sqrt(h)
    b_hn = 0.1 * jax.random.normal(k[2], (h,))
    h0 = jnp.tanh(jax.random.normal(k[3], (b, h)))
    reset = jax.random.uniform(k[4], (t, b)) < reset_p
    return xs, w, b_hn, h0, reset


def loss_of(scan):
    """A fixed linear function of both outputs, so every output's gradient is used."""
    def loss(xs, w, b_hn, h0, reset):
        h_t, ys = scan(xs, w, b_hn, h0, reset)
        c = jnp.cos(jnp.arange(ys.size, dtype=jnp.float32)).reshape(ys.shape)
        return jnp.sum(ys * c) + jnp.sum(h_t * h_t)
    return loss


def check(shapes: list[tuple[int, int, int]], tf32: bool = False) -> list[dict[str, Any]]:
    from jaxwarp.models.recurrent import gru_scan

    rows = []
    if tf32:  # the kernel rounds the MMA's inputs to TF32, as XLA's default does
        return [_check_tf32(i, t, b, h, gru_scan) for i, (t, b, h) in enumerate(shapes)]
    # XLA:GPU rounds float32 dots to TF32 by default; the kernel does not
    with jax.default_matmul_precision("highest"):
        for i, (t, b, h) in enumerate(shapes):
            rows.append(_check_one(i, t, b, h, gru_scan))
    return rows


def _rel(a: jax.Array, b: jax.Array) -> float:
    return float(jnp.max(jnp.abs(a - b)) / (jnp.max(jnp.abs(b)) + 1e-30))


def _outputs(scan, args):
    grads = jax.jit(jax.grad(loss_of(scan), argnums=(0, 1, 2, 3)))(*args)
    return list(jax.jit(scan)(*args)), list(grads)


def _check_tf32(i: int, t: int, b: int, h: int, gru_scan) -> dict[str, Any]:
    """The TF32 kernel's error against `gru_scan` at full float32 precision,
    beside `gru_scan`'s own error at XLA's default precision."""
    args = inputs(jax.random.PRNGKey(i), t, b, h)
    with jax.default_matmul_precision("highest"):
        ref = _outputs(gru_scan, args)
    xla, got = _outputs(gru_scan, args), _outputs(kernel_gru_scan, args)
    names = ("h_T", "ys", "xs", "w", "b_hn", "h0")
    err = lambda out: {n: _rel(o, r) for n, o, r in zip(names, [*out[0], *out[1]],  # noqa: E731
                                                         [*ref[0], *ref[1]])}
    row = {"T": t, "B": b, "H": h, "kernel_error": err(got), "xla_default_error": err(xla)}
    row["ok"] = all(row["kernel_error"][n] <= max(3 * row["xla_default_error"][n], 1e-2)
                    for n in names)
    print(f"check T={t} B={b} H={h}: kernel " + ", ".join(
        f"{n} {v:.1e}" for n, v in row["kernel_error"].items()) + "; XLA default " + ", ".join(
        f"{n} {v:.1e}" for n, v in row["xla_default_error"].items())
        + ("  ok" if row["ok"] else "  MISMATCH"), flush=True)
    return row


def _check_one(i: int, t: int, b: int, h: int, gru_scan) -> dict[str, Any]:
    """Values and gradients of the kernel against `gru_scan` at one shape (seed `i`)."""
    args = inputs(jax.random.PRNGKey(i), t, b, h)
    ref, got = (jax.jit(s)(*args) for s in (gru_scan, kernel_gru_scan))
    grad = lambda s: jax.jit(jax.grad(loss_of(s), argnums=(0, 1, 2, 3)))(*args)  # noqa: E731
    gref, ggot = grad(gru_scan), grad(kernel_gru_scan)
    rel = lambda a, b: float(jnp.max(jnp.abs(a - b)) / (jnp.max(jnp.abs(b)) + 1e-30))  # noqa: E731
    row = {"T": t, "B": b, "H": h,
           "values": max(rel(g, r) for g, r in zip(got, ref)),
           "grads": {n: rel(g, r) for n, g, r in zip(("xs", "w", "b_hn", "h0"), ggot, gref)}}
    row["ok"] = row["values"] < 1e-5 and max(row["grads"].values()) < 1e-4
    print(f"check T={t} B={b} H={h}: values {row['values']:.1e}, grads "
          + ", ".join(f"{k} {v:.1e}" for k, v in row["grads"].items())
          + ("  ok" if row["ok"] else "  MISMATCH"), flush=True)
    return row


def time_scan(t: int, b: int, h: int, repeats: int) -> dict[str, Any]:
    """Forward + backward of the scan alone, ms, XLA's lax.scan vs the kernels."""
    from jaxwarp.benchmark import median_seconds
    from jaxwarp.models.recurrent import gru_scan

    args = inputs(jax.random.PRNGKey(0), t, b, h)
    out = {"T": t, "B": b, "H": h}
    for name, scan in (("lax_scan", gru_scan), ("kernel", kernel_gru_scan)):
        fn = jax.jit(jax.grad(loss_of(scan), argnums=(0, 1, 2, 3))).lower(*args).compile()
        out[name + "_ms"] = 1e3 * median_seconds(fn, args, repeats)
        out[name + "_kernels"] = _trace(fn, args)
    out["speedup"] = out["lax_scan_ms"] / out["kernel_ms"]
    print(f"scan T={t} B={b} H={h}: lax.scan {out['lax_scan_ms']:.3f} ms, kernel "
          f"{out['kernel_ms']:.3f} ms ({out['speedup']:.2f}x)", flush=True)
    for name in ("lax_scan", "kernel"):
        print(f"  {name} trace: {out[name + '_kernels']}", flush=True)
    return out


def _trace(fn, args) -> dict[str, Any]:
    """One call's GPU kernels from a profiler trace: their count, the sum of
    their times and the span from the first's start to the last's end (ms),
    and the five longest kernels by total time."""
    import collections

    from profile_phases import device_events

    jax.block_until_ready(fn(*args))
    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            jax.block_until_ready(fn(*args))
        events = device_events(Path(tmp))
    if not events:
        return {}
    by = collections.Counter()
    for e in events:
        by[e.get("name", "?")[:50]] += e.get("dur", 0) / 1e3
    span = max(e["ts"] + e.get("dur", 0) for e in events) - min(e["ts"] for e in events)
    return {"count": len(events), "kernel_ms": sum(by.values()), "span_ms": span / 1e3,
            "top": [[k, v] for k, v in by.most_common(5)]}


def register_model() -> None:
    """Model ``gru_kernel``: the shipped gru whose sequence form's scan is the kernel."""
    from jaxwarp.models import GRUActorCritic, recurrent
    from jaxwarp.models import register_model as register

    class KernelGRU(GRUActorCritic):
        def sequence(self, carry, obs, reset):
            with mock.patch.object(recurrent, "gru_scan", kernel_gru_scan):
                return super().sequence(carry, obs, reset)

    register("gru_kernel", lambda nvec, p: KernelGRU(
        tuple(int(n) for n in nvec), tuple(p.hidden_sizes), p.rnn_size, p.activation))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="only the values/gradients check")
    ap.add_argument("--kernel", choices=("cuda_cores", "mma"), default="cuda_cores",
                    help="the kernel form (mma: tensor cores, GPU only)")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--updates", type=int, default=5, help="updates per timed call (0: none)")
    ap.add_argument("--out", default="experiments/results/bench_gru_scan.json")
    args = ap.parse_args()
    gpu = jax.default_backend() == "gpu"
    with tempfile.TemporaryDirectory() as tmp:
        mma = args.kernel == "mma"
        if mma and not gpu:
            raise SystemExit("bench_gru_scan.py: error: --kernel mma needs a GPU")
        register(*build(Path(tmp), args.kernel))
        shapes = ([(5, 7, 32), (9, 3, 64), (4, 17, 128)] if mma
                  else [(5, 7, 16), (9, 3, 32), (4, 17, 64)]) + ([(128, 24, 128)] if gpu else [])
        result: dict[str, Any] = {"kernel": args.kernel, "check": check(shapes, mma)}
        if not all(r["ok"] for r in result["check"]):
            raise SystemExit("bench_gru_scan.py: error: the kernel differs from gru_scan")
        if not args.check and gpu:
            import bench_recurrent
            from jaxwarp.benchmark import run_meta
            from jaxwarp.units import device_name, rate_text

            # minibatches of JaxMARL's IPPO-RNN size (16 envs x 3 agents / 2) and the gpu size
            result["scan"] = [time_scan(128, 24, 128, args.repeats),
                              time_scan(32, 1536, 128, args.repeats)]
            register_model()
            result["update"] = [bench_recurrent.time_case(size, model, None, args.updates, 3)
                                for size in ("jaxmarl", "gpu") for model in ("gru", "gru_kernel")
                                if args.updates > 0]
            for r in result["update"]:
                print(f"update {r['size']:8s} {r['model']:10s} "
                      f"{rate_text(r['env_steps_per_s'], 3, device_name(jax.devices()[:1]))} "
                      f"({r['ms_per_update']:.1f} ms/update)", flush=True)
            result = {"meta": run_meta(), **result}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
