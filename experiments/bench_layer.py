"""One dense layer on the learner's shapes: our own tensor-core kernel against cuBLAS.

Before a fused multi-layer kernel is written (docs/decisions.md, "The learner
on tensor cores"), the question is whether a kernel of ours matches cuBLAS on
a single layer ``y = act(x @ w + b)`` at the shapes the learner runs: many
rows (a minibatch of agent-steps: 4K to 220K), K and N of 64 to 256, bfloat16
in and out with float32 accumulation. Sides, each timed as its own jitted
program (compile apart, warm-up, median of --repeats calls of --inner layers
chained in one program so launch gaps are amortised):

* ``xla``: ``act(jnp.dot(x, w, preferred_element_type=f32) + b)`` cast to
  bfloat16; XLA picks cuBLAS/cuBLASLt and fuses the epilogue where it can;
* ``mma``: `kernels/layer_mma.cu` (mma.sync m16n8k16, a block of 128 rows x
  all N columns, K staged in shared memory in chunks of 64, bias and
  activation in the epilogue), built here with nvcc and called through
  ``jax.ffi``; the weights' transpose it takes is inside the timed program;
* ``mgpu``: Pallas on the Mosaic GPU backend, jax's own Hopper matmul
  (`jax.experimental.pallas.ops.gpu.hopper_matmul_mgpu`: wgmma from shared
  memory filled by TMA, a pipeline over K, a tiled epilogue), the bias and
  activation after it as XLA's fusion; its tiles picked per shape as the
  fastest of a few (``MGPU_TILES``), the choice recorded.

Per shape: microseconds a layer, TFLOP/s, the fraction of the device's dense
bfloat16 peak and of its memory bandwidth (bytes that cannot be avoided: x
read, y written, w once), and the largest difference to ``xla`` relative to
its largest value (same inputs).

    python experiments/bench_layer.py --out experiments/results/bench_layer_h200.json
    python experiments/bench_layer.py --sides xla,mma,mgpu --acts relu \
        --out experiments/results/bench_layer_h200.json
    compute-sanitizer --tool memcheck python experiments/bench_layer.py --rows 4096 \\
        --repeats 1 --inner 1 --out /tmp/layer_sanitize.json
"""

from __future__ import annotations

import argparse
import ctypes
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp.authoring.build import find_nvcc
from jaxwarp.benchmark import median_seconds, run_meta, write_result

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "kernels" / "layer_mma.cu"
ACTS = {"none": 0, "relu": 1, "tanh": 2}
# Dense bfloat16 tensor-core peak and memory bandwidth by device kind (vendor
# datasheets: H100 SXM 989 TFLOP/s and 3.35 TB/s, H200 989 TFLOP/s and 4.8 TB/s).
PEAKS = {"H100": (989e12, 3.35e12), "H200": (989e12, 4.8e12)}


def build(out_dir: Path) -> Path:
    """layer_mma.cu as a shared library for this GPU's architecture."""
    major, minor = jax.devices()[0].compute_capability.split(".")
    arch = f"{major}{minor}" + ("a" if major == "9" else "")
    lib = out_dir / "layer_mma.so"
    cmd = [find_nvcc(), "-O3", "-std=c++17", f"-arch=sm_{arch}", "--shared", "-Xcompiler",
           "-fPIC", "-I", jax.ffi.include_dir(), "-o", str(lib), str(SOURCE)]
    subprocess.run(cmd, check=True)
    return lib


def register(lib: Path) -> None:
    handle = ctypes.cdll.LoadLibrary(str(lib))
    jax.ffi.register_ffi_target("bench_layer_mma", jax.ffi.pycapsule(handle.LayerMma),
                                platform="CUDA")


def xla_layer(x: jax.Array, w: jax.Array, b: jax.Array, act: str) -> jax.Array:
    z = jnp.dot(x, w, preferred_element_type=jnp.float32) + b
    z = {"none": z, "relu": jax.nn.relu(z), "tanh": jnp.tanh(z)}[act]
    return z.astype(jnp.bfloat16)


def mma_layer(x: jax.Array, w: jax.Array, b: jax.Array, act: str) -> jax.Array:
    out = jax.ShapeDtypeStruct((x.shape[0], w.shape[1]), jnp.bfloat16)
    return jax.ffi.ffi_call("bench_layer_mma", out)(x, w.T, b, act=np.int32(ACTS[act]))


# Mosaic GPU tiles tried per shape: (tile_m, tile_n at most, pipeline steps at
# most, the dimension the two warpgroups of a block split).
MGPU_TILES = [(128, 128, 2, "M"), (128, 128, 4, "M"), (64, 128, 2, "M"), (128, 64, 2, "M"),
              (128, 128, 2, "N"), (128, 256, 2, "M")]


def mgpu_config(rows: int, width: int, tiles: tuple[int, int, int, str]) -> Any:
    """The Hopper matmul's TuningConfig for one entry of MGPU_TILES at a
    layer of `rows` x `width` (None where the shape does not divide)."""
    from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm

    tile_m, tile_n, steps, wg = tiles
    tile_n, tile_k = min(tile_n, width), 64
    dim = hm.MatmulDimension[wg]
    cta_m = tile_m * (1 + (dim == hm.MatmulDimension.M))
    cta_n = tile_n * (1 + (dim == hm.MatmulDimension.N))
    if rows % cta_m or width % cta_n or width % tile_k:
        return None
    return hm.TuningConfig(tile_m=tile_m, tile_n=tile_n, tile_k=tile_k,
                           max_concurrent_steps=min(steps, width // tile_k),
                           epi_tile_m=64, epi_tile_n=min(64, tile_n), wg_dimension=dim)


def mgpu_layer_of(config: Any) -> Callable:
    from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm

    def layer(x: jax.Array, w: jax.Array, b: jax.Array, act: str) -> jax.Array:
        z = hm.matmul(x, w, None, config=config).astype(jnp.float32) + b
        z = {"none": z, "relu": jax.nn.relu(z), "tanh": jnp.tanh(z)}[act]
        return z.astype(jnp.bfloat16)
    return layer


def best_mgpu(x, w, b, act: str, inner: int, repeats: int) -> tuple[Callable | None, dict]:
    """The fastest of MGPU_TILES at this shape: its layer and what was tried."""
    best, tried, seen = None, [], set()
    for tiles in MGPU_TILES:
        try:
            config = mgpu_config(x.shape[0], w.shape[0], tiles)
            if config is None or config in seen:  # the shape narrows some entries alike
                continue
            seen.add(config)
            _, sec = time_side(chained(mgpu_layer_of(config), inner, act), (x, w, b), repeats)
        except Exception as e:  # noqa: BLE001  (a tile the kernel refuses is a finding)
            tried.append({"tiles": list(tiles), "error": " ".join(str(e).split())[:200]})
            continue
        tried.append({"tiles": list(tiles), "us_per_layer": 1e6 * sec / inner})
        if best is None or sec < best[1]:
            best = (mgpu_layer_of(config), sec)
    return (best[0] if best else None), {"tried": tried}


def chained(layer: Callable, inner: int, act: str) -> Callable:
    """`inner` layers in one program, each reading the last one's output
    (square layers: K == N), so none can be dropped or hoisted."""
    def run(x, w, b):
        def body(h, _):
            return layer(h, w, b, act), None
        return jax.lax.scan(body, x, None, length=inner)[0]
    return jax.jit(run)


def time_side(fn: Callable, args: tuple, repeats: int) -> tuple[float, float]:
    t = time.perf_counter()
    compiled = fn.lower(*args).compile()
    compile_s = time.perf_counter() - t
    return compile_s, median_seconds(compiled, args, repeats)


def case(rows: int, width: int, act: str, inner: int, repeats: int,
         sides: tuple[str, ...] = ("xla", "mma")) -> dict[str, Any]:
    kx, kw, kb = jax.random.split(jax.random.PRNGKey(rows + width), 3)
    x = jax.random.normal(kx, (rows, width), jnp.float32).astype(jnp.bfloat16)
    w = (jax.random.normal(kw, (width, width), jnp.float32) / np.sqrt(width)).astype(jnp.bfloat16)
    b = 0.1 * jax.random.normal(kb, (width,), jnp.float32)
    layers = {"xla": xla_layer, "mma": mma_layer}
    out: dict[str, Any] = {"rows": rows, "k": width, "n": width, "act": act, "inner": inner}
    if "mgpu" in sides:
        layers["mgpu"], out["mgpu_tiles"] = best_mgpu(x, w, b, act, inner, repeats)
    ref = np.asarray(jax.jit(xla_layer, static_argnums=3)(x, w, b, act), np.float32)
    kind = jax.devices()[0].device_kind
    peak, bandwidth = next((v for k, v in PEAKS.items() if k in kind), (None, None))
    flops = 2.0 * rows * width * width
    bytes_ = 2.0 * (rows * width * 2 + width * width)
    for side in sides:
        layer = layers[side]
        if layer is None:  # no Mosaic GPU tile fits the shape
            continue
        got = np.asarray(jax.jit(layer, static_argnums=3)(x, w, b, act), np.float32)
        err = float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30))
        if side == "mma":
            out["max_rel_diff_vs_xla"] = err
        compile_s, sec = time_side(chained(layer, inner, act), (x, w, b), repeats)
        per = sec / inner
        out[side] = {"us_per_layer": 1e6 * per, "tflops": flops / per / 1e12,
                     "compile_s": compile_s,
                     "peak_fraction": flops / per / peak if peak else None,
                     "bandwidth_fraction": bytes_ / per / bandwidth if bandwidth else None,
                     "max_rel_diff_vs_xla": err}
    for side in ("mma", "mgpu"):
        if side in out and "xla" in out:
            out[f"{side}_over_xla_speed"] = out["xla"]["us_per_layer"] / out[side]["us_per_layer"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="4096,32768,220160",
                    help="rows per layer (about the Tag A2C minibatch, 2,000 envs x 110, "
                         "rounded up to a multiple of 256 for the Mosaic GPU tiles)")
    ap.add_argument("--widths", default="64,128,256", help="K = N of the layer")
    ap.add_argument("--acts", default="relu,tanh")
    ap.add_argument("--inner", type=int, default=20, help="layers chained in one program")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sides", default="xla,mma", help="of xla, mma, mgpu")
    ap.add_argument("--out", default="experiments/results/bench_layer.json")
    args = ap.parse_args()
    if jax.default_backend() != "gpu":
        raise SystemExit("bench_layer.py: error: needs a CUDA GPU (the kernel is mma.sync)")
    with tempfile.TemporaryDirectory() as tmp:
        register(build(Path(tmp)))
        rows = []
        for act in args.acts.split(","):
            for width in map(int, args.widths.split(",")):
                for n in map(int, args.rows.split(",")):
                    r = case(n, width, act, args.inner, args.repeats,
                             tuple(args.sides.split(",")))
                    rows.append(r)
                    print(f"{act:5s} rows {n:7d} K=N={width:4d}  " + "  ".join(
                        f"{side} {r[side]['us_per_layer']:7.1f} us {r[side]['tflops']:6.1f} "
                        f"TFLOP/s diff {r[side]['max_rel_diff_vs_xla']:.1e}"
                        for side in args.sides.split(",") if side in r), flush=True)
                    # Written after every case: a cut-off run keeps what it measured.
                    write_result(args.out, {"meta": run_meta(), "results": rows})


if __name__ == "__main__":
    main()
