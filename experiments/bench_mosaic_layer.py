"""One dense layer in Pallas on the Mosaic GPU backend (wgmma, TMA) against XLA's dot (cuBLAS).

Issue 51 asks for the learner's MLP on tensor cores, written in Pallas's Mosaic
GPU backend (``jax.experimental.pallas.mosaic_gpu``: wgmma fed by TMA, warp
specialised pipelines), and first for measurements of a single layer against
cuBLAS. ``bench_layer.py`` timed jax's own Hopper matmul with XLA's epilogue
after it; this script times a layer of our own with the epilogue fused, and
the layer's backward matmuls, at the learner's shapes: M rows (a minibatch of
agent-steps; Tag's 2,000 envs x 110 steps = 220,000) by K inputs and N outputs
of 64 to 512, bfloat16 in, float32 accumulation, bfloat16 out.

Sides (each one in its own try/except: one that fails to lower or to run
leaves the others' results, and its error's first lines are printed and kept):

* ``xla``: ``act(jnp.dot(x, w, preferred_element_type=f32) + b)`` in bf16
  (cuBLAS, or cuBLASLt with its epilogue, as XLA picks);
* ``mgpu_matmul``: jax's Hopper matmul (``ops/gpu/hopper_matmul_mgpu``, bf16
  out) with the bias and activation after it as an XLA fusion (the Mosaic side
  of ``bench_layer.py``);
* ``mgpu_fused``: ours, ``y = act(x @ w + b)`` in one kernel. A persistent
  grid (one CTA per SM, output tiles dealt round-robin over the CTAs), three
  warpgroups per CTA: a memory warpgroup issues the TMA loads of a pipeline
  whose steps run over (this CTA's output tiles) x (K / 64), so the next
  tile's operands are in flight while a tile's last step and epilogue run
  (for K = 64 every step is a new tile); two compute warpgroups each take
  ``tile_m`` rows of a ``2 tile_m x tile_n`` tile, wgmma from swizzled shared
  memory into a float32 accumulator in registers; at a tile's last K step the
  accumulator gets the bias (a TMA'd slice of b, broadcast in the WGMMA
  layout) and the activation in registers, is cast to bf16, stored to shared
  memory and written by a TMA store that overlaps the next tile;
* backward (``--parts bwd``): ``dx = dz @ w^T`` (``xla_dx``; ``mgpu_dx``: the
  fused kernel with ``w`` read transposed from shared memory, no bias, no
  activation) and ``dW = x^T @ dz`` in float32 (``xla_dw``; ``mgpu_dw``: a
  split-K kernel, each CTA reduces an interleaved slice of the rows into one
  tile of dW, x read transposed from shared memory; its two compute
  warpgroups take 64 rows of dW each (a 128 x 128 tile, K >= 128) or, at
  K = 64, alternate halves of each step's rows; the partial tiles are summed
  by XLA in a fixed order, so the result is deterministic). ``dz`` is the
  pre-activation gradient (act' applied), as the learner's backward has it.

Every side is checked against a float32 reference on the same inputs (NumPy
on the host; max absolute and relative-to-max error, asserted within bf16
tolerance) and timed as a jitted program of ``inner`` independent layers (distinct inputs,
every output returned, so none can be dropped or merged): compile apart,
warm-up, then the median of ``--repeats`` calls (``jaxwarp.benchmark.median_seconds``,
wall clock with ``block_until_ready``), and, where CUPTI works, the GPU time
of its kernels alone (``jax.experimental.mosaic.gpu.profiler.measure``).
Reported per layer: microseconds, TFLOP/s, the fraction of the dense bf16 peak
(989 TFLOP/s on H100/H200 SXM), of the memory roofline (bytes that must move:
inputs read once, output written once, over 4.8 TB/s on an H200, 3.35 on an
H100) and the speed against XLA. Rows are rounded up to a multiple of 256 for
the kernels' tiles (220,000 -> 220,160), the same rows for every side.

    python experiments/bench_mosaic_layer.py            # full grid; no new shape after 150 s
    python experiments/bench_mosaic_layer.py --quick    # 220,160 rows, (K, N) = 256x256, 64x256
    python experiments/bench_mosaic_layer.py --quick --out /tmp/x.json   # no GPU: checks only

Without a GPU the XLA sides are checked on the CPU and the Mosaic GPU sides
are reported as ``skipped: no GPU``; where Mosaic GPU's bindings are installed
(a jax-cuda plugin) they are still lowered for CUDA (``jax.export``), which
catches most API errors.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere: jaxwarp from this checkout
    sys.path.insert(0, str(ROOT))

from jaxwarp.benchmark import median_seconds, run_meta, write_result

# The product's helpers (the rollout's Mosaic GPU forward), under the names these benches use.
from jaxwarp.models.mlp_mosaic import load_vector as _load_vector
from jaxwarp.models.mlp_mosaic import smem_transforms as _transforms

# Dense bf16 tensor-core peak and HBM bandwidth by device kind (datasheets:
# H100 SXM 989 TFLOP/s, 3.35 TB/s; H200 989 TFLOP/s, 4.8 TB/s).
PEAKS = {"H200": (989e12, 4.8e12), "H100": (989e12, 3.35e12)}
ROWS = (220_000, 32_768, 4_096)  # the decisive size first: a cut-off run keeps it
PAIRS = ((64, 64), (128, 128), (256, 256), (512, 512), (64, 256))
QUICK_ROWS, QUICK_PAIRS = (220_000,), ((256, 256), (64, 256))
ROW_ALIGN = 256  # rows rounded up to this (2 warpgroups x 128 rows; the Hopper matmul's tile)
FWD = ("xla", "mgpu_matmul", "mgpu_fused")
BWD = ("xla_dx", "mgpu_dx", "xla_dw", "mgpu_dw")
REFERENCE_OF = {"mgpu_matmul": "xla", "mgpu_fused": "xla", "mgpu_dx": "xla_dx",
                "mgpu_dw": "xla_dw"}
# Largest error allowed against the float32 reference, relative to its largest
# magnitude: a bf16 output is within half an ulp (2^-9 relative) of the exact
# value, twice that where the matmul is rounded to bf16 before the epilogue
# (mgpu_matmul); float32 outputs (dW) differ only in summation order.
TOL = {"bf16": 1.6e-2, "f32": 1e-3}


class Skip(Exception):
    """A side that does not apply here (no GPU, a shape its tiles do not fit)."""


# --- the XLA sides and the float32 reference -----------------------------------------------


def activation(z: jax.Array, act: str) -> jax.Array:
    if act == "relu":
        return jnp.maximum(z, 0.0)
    if act == "tanh":
        return jnp.tanh(z)
    assert act == "none", act
    return z


def xla_layer(x, w, b, act: str, out_dtype=jnp.bfloat16):
    z = jnp.dot(x, w, preferred_element_type=jnp.float32) + b
    return activation(z, act).astype(out_dtype)


def xla_dx(dz, w):
    return jnp.dot(dz, w.T, preferred_element_type=jnp.float32).astype(jnp.bfloat16)


def xla_dw(x, dz):
    return jnp.dot(x.T, dz, preferred_element_type=jnp.float32)


def reference(part: str, x, w, b, dz, act: str) -> jax.Array:
    """The float32 result of `part` ("fwd", "dx", "dw") from the same bf16 inputs,
    computed by NumPy on the host (products of bf16 values are exact in float32;
    XLA's float32 dots at full precision spent ~25 s a shape in autotuning),
    then put on the device, where the checks run."""
    def f32(a):
        return np.asarray(a).astype(np.float32)
    if part == "fwd":
        z = f32(x) @ f32(w) + np.asarray(b, np.float32)
        ref = {"relu": lambda z: np.maximum(z, 0.0), "tanh": np.tanh,
               "none": lambda z: z}[act](z)
    elif part == "dx":
        ref = f32(dz) @ f32(w).T
    else:
        ref = f32(x).T @ f32(dz)
    return jax.device_put(np.ascontiguousarray(ref, np.float32))


@jax.jit
def differences(got: jax.Array, want: jax.Array) -> tuple[jax.Array, ...]:
    """(largest |got - want|, largest |want|, whether got is finite everywhere)."""
    got = got.astype(jnp.float32)
    return (jnp.max(jnp.abs(got - want)), jnp.max(jnp.abs(want)),
            jnp.all(jnp.isfinite(got)))


# --- Pallas on Mosaic GPU ------------------------------------------------------------------


def _plgpu():
    import jax.experimental.pallas as pl
    import jax.experimental.pallas.mosaic_gpu as plgpu
    return pl, plgpu


def _semantics(plgpu, name: str):
    sem = getattr(plgpu, "LoweringSemantics", None)
    if sem is None:
        raise Skip("this jax has no plgpu.LoweringSemantics")
    return {"warpgroup": sem.Warpgroup, "lane": sem.Lane}[name]


def num_sms() -> int:
    dev = jax.devices()[0]
    return int(getattr(dev, "core_count", 0) or 132) if dev.platform == "gpu" else 132


@dataclasses.dataclass(frozen=True)
class Tiles:
    """A CTA of the fused kernel computes a (2 tile_m) x tile_n output tile, one
    warpgroup per tile_m rows; `stages` pipeline slots of (2 tile_m x tile_k)
    of x and (tile_k x tile_n) of w in shared memory."""
    tile_m: int = 128
    tile_n: int = 128
    tile_k: int = 64
    stages: int = 2
    semantics: str = "warpgroup"

    def label(self) -> str:
        return (f"{2 * self.tile_m}x{self.tile_n}x{self.tile_k}/{self.stages}st/"
                f"{self.semantics[:2]}")


def fused_tiles(n: int, semantics: str) -> Tiles:
    """The fused kernel's tiles for n output columns: a warpgroup's float32
    accumulator at 128 registers a thread (128 x 128 or 64 x 256), 2 stages at
    most ~100 KB of shared memory, 3 stages where the tiles are small."""
    if n <= 128:
        return Tiles(tile_m=128, tile_n=n, stages=3 if n <= 64 else 2, semantics=semantics)
    return Tiles(tile_m=64, tile_n=256, stages=2, semantics=semantics)


def fused_dense(x, w, b, *, act: str, tiles: Tiles, transpose_w: bool = False,
                out_dtype=jnp.bfloat16, sms: int | None = None):
    """act(x @ w + b) in one Mosaic GPU kernel (see the module docstring);
    with `transpose_w`, w is [n, k] and the product is x @ w.T; b may be None."""
    pl, plgpu = _plgpu()
    m, k = x.shape
    n, kw = (w.shape if transpose_w else w.shape[::-1])
    if kw != k:
        raise ValueError(f"shapes {x.shape} and {w.shape} (transpose_w={transpose_w})")
    tm, tn, tk = tiles.tile_m, min(tiles.tile_n, n), min(tiles.tile_k, k)
    cta_m = 2 * tm
    if m % cta_m or n % tn or k % tk or tn % 64 or tk % 64:
        raise Skip(f"tiles {tiles.label()} do not fit m={m} k={k} n={n}")
    m_tiles, n_tiles, k_iters = m // cta_m, n // tn, k // tk
    total = m_tiles * n_tiles
    ctas = min(sms or num_sms(), total)
    in_tf = _transforms(plgpu, tk, x.dtype)  # x tiles [2 tm, tk]; w.T tiles [tn, tk]
    w_tf = in_tf if transpose_w else _transforms(plgpu, tn, w.dtype)  # w tiles [tk, tn]
    out_tf = _transforms(plgpu, tn, out_dtype)
    has_bias = b is not None

    def kernel(*refs):
        if has_bias:
            x_gmem, w_gmem, b_gmem, y_gmem, out_smem = refs
        else:
            (x_gmem, w_gmem, y_gmem, out_smem), b_gmem = refs, None
        cta = lax.axis_index("sm")
        wg = lax.axis_index("wg")
        # This CTA's tiles: cta, cta + ctas, ... (tile t is row block t // n_tiles,
        # column block t % n_tiles: CTAs side by side share x's rows in L2).
        my_tiles = lax.div(total - 1 - cta, ctas) + 1

        def tile_mn(i):
            t = cta + i * ctas
            return lax.div(t, n_tiles), lax.rem(t, n_tiles)

        specs = [plgpu.BlockSpec((cta_m, tk), lambda i, kk: (tile_mn(i)[0], kk),
                                 transforms=in_tf)]
        if transpose_w:
            specs.append(plgpu.BlockSpec((tn, tk), lambda i, kk: (tile_mn(i)[1], kk),
                                         transforms=w_tf))
        else:
            specs.append(plgpu.BlockSpec((tk, tn), lambda i, kk: (kk, tile_mn(i)[1]),
                                         transforms=w_tf))
        if has_bias:  # a [tn] slice of b, fetched with each step's tiles (tn x 4 bytes)
            specs.append(plgpu.BlockSpec((tn,), lambda i, kk: (tile_mn(i)[1],)))

        def compute_context(run):
            @functools.partial(pl.run_scoped, acc_ref=plgpu.ACC((tm, tn), jnp.float32))
            def _scope(acc_ref):
                run(acc_ref)

        def body(idx, x_smem, w_smem, *rest):
            *b_smem, acc_ref = rest
            i, kk = idx
            rhs = w_smem.transpose((1, 0)) if transpose_w else w_smem
            plgpu.wgmma(acc_ref, x_smem.at[pl.ds(wg * tm, tm)], rhs)
            plgpu.wgmma_wait(0)

            @pl.when(kk == k_iters - 1)
            def _epilogue():
                m_idx, n_idx = tile_mn(i)
                z = acc_ref[...]
                if has_bias:
                    bias = _load_vector(plgpu, b_smem[0], plgpu.Layout.WGMMA.reduce(0))
                    z = z + lax.broadcast_in_dim(bias, (tm, tn), (1,))
                z = activation(z, act).astype(out_dtype)
                plgpu.wait_smem_to_gmem(0, wait_read_only=True)  # the last tile's store
                out_smem[wg] = z
                plgpu.commit_smem()
                plgpu.copy_smem_to_gmem(
                    out_smem.at[wg],
                    y_gmem.at[pl.ds(m_idx * cta_m + wg * tm, tm), pl.ds(n_idx * tn, tn)])
                # Zeroed once the tile is out (z is dead: no second 128 registers live).
                acc_ref[...] = plgpu.layout_cast(jnp.zeros((tm, tn), jnp.float32),
                                                 plgpu.Layout.WGMMA)
            return acc_ref

        pipeline = plgpu.emit_pipeline_warp_specialized(
            body, grid=(my_tiles, k_iters), memory_registers=40, in_specs=specs,
            wg_axis="wg", num_compute_wgs=2, max_concurrent_steps=tiles.stages,
            compute_context=compute_context)
        pipeline(x_gmem, w_gmem, *([b_gmem] if has_bias else []))
        plgpu.wait_smem_to_gmem(0, wait_read_only=True)

    call = plgpu.kernel(
        kernel, out_type=jax.ShapeDtypeStruct((m, n), out_dtype),
        scratch_types=[plgpu.SMEM((2, tm, tn), out_dtype, transforms=out_tf)],
        grid=(ctas,), grid_names=("sm",), num_threads=3, thread_name="wg",
        compiler_params=plgpu.CompilerParams(approx_math=True,
                                             lowering_semantics=_semantics(plgpu,
                                                                           tiles.semantics)))
    return call(x, w, b) if has_bias else call(x, w)


@dataclasses.dataclass(frozen=True)
class WgradTiles:
    """dW = x^T dz: a CTA owns a tile of dW and a slice of the rows. Its two
    compute warpgroups each hold a tile_k x tile_n float32 accumulator and
    split either the rows of each step (``split="rows"``: the same dW tile,
    two partial sums; a step loads 2 tile_r rows) or dW's rows (``"k"``: a
    2 tile_k x tile_n tile of dW, each step's tile_r rows shared, fewer
    re-reads of x and dz from L2)."""
    tile_k: int = 64
    tile_n: int = 128
    tile_r: int = 64
    stages: int = 2
    split: str = "rows"
    semantics: str = "warpgroup"

    def label(self) -> str:
        cta_k = self.tile_k * (2 if self.split == "k" else 1)
        rows = self.tile_r * (2 if self.split == "rows" else 1)
        return f"{cta_k}x{self.tile_n}/r{rows}/{self.stages}st/{self.split}/{self.semantics[:2]}"


def wgrad_tiles(k: int, n: int, semantics: str, split: str) -> WgradTiles:
    if split == "k":  # 3 stages of 64 rows x (128 + tile_n) at most 96 KB
        return WgradTiles(tile_k=64, tile_n=min(n, 128), tile_r=64, stages=3, split="k",
                          semantics=semantics)
    return WgradTiles(tile_k=64, tile_n=min(n, 128), stages=3 if n <= 64 else 2,
                      semantics=semantics)


def wgrad_splits(m: int, out_tiles: int, rows_per_step: int, sms: int) -> int:
    """Row slices per dW tile: enough that slices x tiles fill the SMs once."""
    return max(1, min(m // rows_per_step, sms // out_tiles))


def mgpu_wgrad(x, dz, *, tiles: WgradTiles, sms: int | None = None):
    """x^T @ dz in float32: per-CTA partial tiles (one per row slice, and per
    compute warpgroup with split="rows") written by TMA, then summed by XLA in
    a fixed order."""
    pl, plgpu = _plgpu()
    m, k = x.shape
    n = dz.shape[1]
    by_k = tiles.split == "k"
    tk, tn, tr = min(tiles.tile_k, k), min(tiles.tile_n, n), tiles.tile_r
    cta_k = 2 * tk if by_k else tk  # dW rows per CTA
    step_rows = tr if by_k else 2 * tr
    if k % cta_k or n % tn or m % step_rows or tk % 64 or tn % 64:
        raise Skip(f"tiles {tiles.label()} do not fit m={m} k={k} n={n}")
    k_tiles, n_tiles = k // cta_k, n // tn
    total_steps = m // step_rows
    splits = wgrad_splits(m, k_tiles * n_tiles, step_rows, sms or num_sms())
    parts_per_split = 1 if by_k else 2
    x_tf = _transforms(plgpu, cta_k, x.dtype)
    dz_tf = _transforms(plgpu, tn, dz.dtype)
    out_tf = _transforms(plgpu, tn, jnp.float32)

    def kernel(x_gmem, dz_gmem, part_gmem, out_smem):
        s, kt, nt = lax.axis_index("s"), lax.axis_index("kt"), lax.axis_index("nt")
        wg = lax.axis_index("wg")
        # Slice s takes the row steps s, s + splits, ... (a dynamic count).
        my_steps = lax.div(total_steps - 1 - s, splits) + 1
        if by_k:
            part, dw_rows = s, pl.ds(kt * cta_k + wg * tk, tk)
        else:
            part, dw_rows = 2 * s + wg, pl.ds(kt * cta_k, tk)

        def compute_context(run):
            @functools.partial(pl.run_scoped, acc_ref=plgpu.ACC((tk, tn), jnp.float32))
            def _scope(acc_ref):
                run(acc_ref)
                out_smem[wg] = acc_ref[...]
                plgpu.commit_smem()
                plgpu.copy_smem_to_gmem(out_smem.at[wg],
                                        part_gmem.at[part, dw_rows, pl.ds(nt * tn, tn)])
                plgpu.wait_smem_to_gmem(0, wait_read_only=True)

        def body(_, x_smem, dz_smem, acc_ref):
            if by_k:  # this warpgroup's tk columns of x, all the step's rows
                lhs, rhs = x_smem.at[:, pl.ds(wg * tk, tk)], dz_smem
            else:  # this warpgroup's tr rows of the step
                rs = pl.ds(wg * tr, tr)
                lhs, rhs = x_smem.at[rs], dz_smem.at[rs]
            plgpu.wgmma(acc_ref, lhs.transpose((1, 0)), rhs)
            plgpu.wgmma_wait(0)
            return acc_ref

        pipeline = plgpu.emit_pipeline_warp_specialized(
            body, grid=(my_steps,), memory_registers=40,
            in_specs=[plgpu.BlockSpec((step_rows, cta_k), lambda r: (s + r * splits, kt),
                                      transforms=x_tf),
                      plgpu.BlockSpec((step_rows, tn), lambda r: (s + r * splits, nt),
                                      transforms=dz_tf)],
            wg_axis="wg", num_compute_wgs=2, max_concurrent_steps=tiles.stages,
            compute_context=compute_context)
        pipeline(x_gmem, dz_gmem)

    parts = plgpu.kernel(
        kernel,
        out_type=jax.ShapeDtypeStruct((parts_per_split * splits, k, n), jnp.float32),
        scratch_types=[plgpu.SMEM((2, tk, tn), jnp.float32, transforms=out_tf)],
        grid=(splits, k_tiles, n_tiles), grid_names=("s", "kt", "nt"), num_threads=3,
        thread_name="wg",
        compiler_params=plgpu.CompilerParams(lowering_semantics=_semantics(plgpu,
                                                                           tiles.semantics)))(
        x, dz)
    return jnp.sum(parts, axis=0)


def hopper_matmul_layer(x, w, b, act: str):
    """jax's own Hopper matmul (bf16 out), then bias and activation in XLA."""
    from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm
    if jax.default_backend() != "gpu":  # lowering for cuda here: its SM count asks the device
        hm.get_num_sms = num_sms
    m, k = x.shape
    n = w.shape[1]
    tile_n = min(128, n)
    config = hm.TuningConfig(tile_m=128, tile_n=tile_n, tile_k=64, max_concurrent_steps=2,
                             epi_tile_m=64, epi_tile_n=min(64, tile_n),
                             wg_dimension=hm.MatmulDimension.M)
    if m % 256 or n % tile_n or k % 64:
        raise Skip(f"the Hopper matmul's tiles do not fit m={m} k={k} n={n}")
    z = hm.matmul(x, w, None, config=config).astype(jnp.float32) + b
    return activation(z, act).astype(jnp.bfloat16)


# --- the harness ---------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    rows: int  # as run (rounded up to ROW_ALIGN)
    k: int
    n: int
    act: str
    inner: int
    xs: list  # `inner` distinct inputs [rows, k]
    dzs: list  # `inner` distinct pre-activation gradients [rows, n]
    w: jax.Array
    b: jax.Array


def make_case(rows: int, k: int, n: int, act: str, inner: int, parts: set[str]) -> Case:
    key = jax.random.PRNGKey(rows * 7 + k * 3 + n)
    kw, kb, *kx = jax.random.split(key, 2 + 2 * inner)
    normal = jax.jit(lambda key, shape: jax.random.normal(key, shape, jnp.float32)
                     .astype(jnp.bfloat16), static_argnums=1)
    xs = [normal(kx[i], (rows, k)) for i in range(inner)]
    dzs = [normal(kx[inner + i], (rows, n)) for i in range(inner)] if "bwd" in parts else []
    w = (jax.random.normal(kw, (k, n), jnp.float32) / np.sqrt(k)).astype(jnp.bfloat16)
    b = 0.1 * jax.random.normal(kb, (n,), jnp.float32)
    return Case(rows, k, n, act, inner, xs, dzs, w, b)


def side_fn(side: str, case: Case, sms: int, semantics: str,
            variant: str | None = None) -> tuple[Callable, str, str]:
    """(one layer of `side` as a function of its own inputs, the part it
    computes ("fwd", "dx", "dw"), a label of its tiles)."""
    act = case.act
    if side == "xla":
        return (lambda x, w, b: xla_layer(x, w, b, act)), "fwd", "XLA dot"
    if side == "mgpu_matmul":
        return (lambda x, w, b: hopper_matmul_layer(x, w, b, act)), "fwd", "128x128x64 jax"
    if side == "mgpu_fused":
        t = fused_tiles(case.n, semantics)
        return (lambda x, w, b: fused_dense(x, w, b, act=act, tiles=t, sms=sms)), "fwd", t.label()
    if side == "xla_dx":
        return (lambda dz, w: xla_dx(dz, w)), "dx", "XLA dot"
    if side == "mgpu_dx":
        t = fused_tiles(case.k, semantics)
        return ((lambda dz, w: fused_dense(dz, w, None, act="none", tiles=t, transpose_w=True,
                                           sms=sms)), "dx", t.label())
    if side == "xla_dw":
        return (lambda x, dz: xla_dw(x, dz)), "dw", "XLA dot"
    if side == "mgpu_dw":
        t = wgrad_tiles(case.k, case.n, semantics, variant or "rows")
        return (lambda x, dz: mgpu_wgrad(x, dz, tiles=t, sms=sms)), "dw", t.label()
    raise ValueError(side)


def operands(part: str, case: Case, i: int) -> tuple:
    if part == "fwd":
        return (case.xs[i], case.w, case.b)
    if part == "dx":
        return (case.dzs[i], case.w)
    return (case.xs[i], case.dzs[i])


def cost(part: str, case: Case) -> tuple[float, float]:
    """(FLOPs, bytes that must move) of one layer: every input read once, the
    output written once."""
    m, k, n = case.rows, case.k, case.n
    flops = 2.0 * m * k * n
    if part == "fwd":
        return flops, 2.0 * m * k + 2.0 * k * n + 4.0 * n + 2.0 * m * n
    if part == "dx":
        return flops, 2.0 * m * n + 2.0 * k * n + 2.0 * m * k
    return flops, 2.0 * m * k + 2.0 * m * n + 4.0 * k * n


def first_lines(e: BaseException, lines: int = 6) -> str:
    text = f"{type(e).__name__}: {e}".strip().splitlines()
    return "\n".join(text[:lines])


def cupti_seconds(compiled: Callable, args: tuple, repeats: int) -> float | None:
    """Median over `repeats` calls of the summed GPU time of the program's
    kernels (CUPTI, through Mosaic GPU's profiler), or None where unavailable."""
    from jax.experimental.mosaic.gpu import profiler
    if hasattr(profiler, "Cupti"):  # attached once for the whole run (attaching is slow)
        measure = profiler.Cupti(finalize=False).measure
    else:
        measure = profiler.measure
    _, per_call = measure(compiled, iterations=repeats)(*args)
    if per_call is None:
        return None
    per_call = per_call if isinstance(per_call, list) else [per_call]
    return statistics.median(per_call) / 1e3


def lower_for_cuda(fn: Callable, args: tuple) -> None:
    """Lowers `fn` for CUDA on a machine without a GPU (Pallas -> Mosaic GPU
    runs in Python; compiling to SASS is left to the GPU)."""
    shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), list(args))
    jax.export.export(jax.jit(fn), platforms=["cuda"])(*shapes)


def lowered_only(fn: Callable, operands: tuple, label: str = "") -> None:
    """Without a GPU: lowers `fn` for CUDA where Mosaic GPU's bindings are
    installed (a jax-cuda plugin), then Skip saying what was checked."""
    try:
        importlib.import_module("jax._src.lib.mosaic_gpu")
    except Exception:  # noqa: BLE001
        raise Skip("skipped: no GPU (Mosaic GPU bindings absent; lowering not checked)")
    lower_for_cuda(fn, operands)
    raise Skip("skipped: no GPU (lowered for cuda: ok)" + (f" [{label}]" if label else ""))


def timed(compiled: Callable, ops: tuple, inner: int, args: argparse.Namespace,
          gpu: bool) -> dict[str, Any]:
    """A compiled program of `inner` calls timed: wall clock (median of
    --repeats) and, on a GPU, CUPTI's kernel time (None where refused, with
    why); `us` per call from the kernel time where there is one."""
    out: dict[str, Any] = {"wall_us": 1e6 * median_seconds(compiled, ops, args.repeats) / inner,
                           "kernel_us": None}
    if gpu and not args.no_cupti:
        try:
            sec = cupti_seconds(compiled, ops, args.repeats)
            out["kernel_us"] = None if sec is None else 1e6 * sec / inner
        except Exception as e:  # noqa: BLE001  (CUPTI refused: wall clock only)
            out["cupti_error"] = first_lines(e, 2)
    out["us"] = out["kernel_us"] or out["wall_us"]
    out["us_from"] = "kernel" if out["kernel_us"] else "wall"
    return out


def start_run(args: argparse.Namespace, sides: list[str], note: str = ""
              ) -> tuple[bool, int, dict[str, Any]]:
    """(whether jax runs on a GPU, its SMs, the result's meta), the run's
    first line printed; --peak and --bandwidth from PEAKS where not given; one
    repeat on the CPU (its times say nothing here)."""
    gpu = jax.default_backend() == "gpu"
    kind = jax.devices()[0].device_kind
    peak, bandwidth = next((v for key, v in PEAKS.items() if key in kind), (None, None))
    args.peak = getattr(args, "peak", None) or peak
    args.bandwidth = getattr(args, "bandwidth", None) or bandwidth
    if not gpu:
        args.repeats = 1
    sms = num_sms()
    meta = run_meta(device_count=len(jax.devices()), sms=sms, gpu=gpu,
                    peak_flops=args.peak, bandwidth_bytes_s=args.bandwidth)
    print(f"{meta['device']} ({sms} SMs), jax {jax.__version__}, commit {meta['commit']}; "
          f"sides {','.join(sides)}{note}", flush=True)
    return gpu, sms, meta


def run_side(side: str, case: Case, ref: dict[str, jax.Array], args: argparse.Namespace,
             gpu: bool, sms: int, semantics: str, variant: str | None = None) -> dict[str, Any]:
    fn, part, tiles = side_fn(side, case, sms, semantics, variant)
    out: dict[str, Any] = {"part": part, "tiles": tiles}
    layer = jax.jit(fn)  # lowered once, called `inner` times a program
    if side.startswith("mgpu") and not gpu:
        lowered_only(fn, operands(part, case, 0))

    def program(*ops):  # `inner` layers, each on its own inputs, every output kept
        per = len(ops) // case.inner
        return tuple(layer(*ops[i * per:(i + 1) * per]) for i in range(case.inner))

    ops = tuple(a for i in range(case.inner) for a in operands(part, case, i))
    t = time.perf_counter()
    compiled = jax.jit(program).lower(*ops).compile()
    out["compile_s"] = time.perf_counter() - t
    # The check: the program's first layer (inputs 0) against the reference.
    err, scale, finite = (float(v) for v in differences(compiled(*ops)[0], ref[part]))
    scale = scale or 1.0
    out.update(max_abs_err=err, max_rel_err=err / scale, ref_max_abs=scale)
    tol = TOL["f32" if part == "dw" else "bf16"]
    if not finite or out["max_rel_err"] > tol:
        raise AssertionError(f"values differ from the float32 reference: max abs err "
                             f"{out['max_abs_err']:.3e}, relative to max |ref| "
                             f"{out['max_rel_err']:.3e} > {tol:.1e}")
    out["check"] = "ok"
    out.update(timed(compiled, ops, case.inner, args, gpu))
    us = out["us"]
    flops, bytes_ = cost(part, case)
    peak, bandwidth = args.peak, args.bandwidth
    out["tflops"] = flops / us / 1e6
    out["peak_fraction"] = flops / (us * 1e-6) / peak if peak else None
    out["memory_roofline_us"] = 1e6 * bytes_ / bandwidth if bandwidth else None
    out["memory_fraction"] = bytes_ / (us * 1e-6) / bandwidth if bandwidth else None
    if peak and bandwidth:
        out["roofline_us"] = 1e6 * max(flops / peak, bytes_ / bandwidth)
        out["roofline_fraction"] = out["roofline_us"] / us
    return out


def describe(side: str, r: dict[str, Any], xla_us: float | None) -> str:
    if "us" not in r:
        return f"  {side:12s} {r.get('status', '')}"
    frac = lambda v: "   -  " if v is None else f"{100 * v:5.1f}%"
    speed = f" {xla_us / r['us']:5.2f}x xla" if xla_us and side.startswith("mgpu") else ""
    wall = f" (wall {r['wall_us']:.1f})" if r["us_from"] == "kernel" else " (wall)"
    return (f"  {side:12s} {r['us']:9.1f} us{wall:15s} {r['tflops']:6.1f} TFLOP/s "
            f"{frac(r['peak_fraction'])} peak {frac(r['memory_fraction'])} mem  "
            f"err {r['max_rel_err']:.1e}{speed}  [{r['tiles']}]")


def inner_for(rows: int, k: int, n: int, budget_bytes: float) -> int:
    per_layer = 2.0 * rows * (k + n) * 2  # x or dz in, y out (forward and backward alike)
    return int(min(20, max(3, budget_bytes // per_layer)))


def shape_grid(acts: str, rows_list: tuple[int, ...], shapes: tuple[tuple[int, int], ...]
               ) -> Iterator[tuple[str, int, int, tuple[int, int]]]:
    """(activation, rows asked, rows run: rounded up to ROW_ALIGN, shape) of
    every case, the rows in the order given (the decisive size first)."""
    for act in acts.split(","):
        for rows_asked in rows_list:
            for shape in shapes:
                yield act, rows_asked, -(-rows_asked // ROW_ALIGN) * ROW_ALIGN, shape


def past_budget(entry: dict[str, Any], head: str, start: float, budget_s: float) -> bool:
    """Whether the run is past its time budget; if so, `entry` says so (printed)."""
    if time.perf_counter() - start <= budget_s:
        return False
    entry["status"] = f"skipped: past --budget-s {budget_s:.0f}"
    print(f"{head}: {entry['status']}", flush=True)
    return True


def run_parser(doc: str, quick: str, what: str, budget_s: float) -> argparse.ArgumentParser:
    """The options every Mosaic GPU bench shares: --quick (`quick` says what it
    runs), the rows, lowering semantics, repeats, the timed program's size
    (`what` it chains), the time budget, CUPTI, tracebacks."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=quick)
    ap.add_argument("--rows", default=None, help="comma-separated row counts (default: all)")
    ap.add_argument("--semantics", default="warpgroup,lane",
                    help="Mosaic GPU lowering semantics to try for our kernels, in order "
                         "(the next is tried where one fails)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--inner-bytes", type=float, default=2e9,
                    help=f"inputs + outputs of one timed program (sets {what} per program, "
                         "3-20)")
    ap.add_argument("--budget-s", type=float, default=budget_s,
                    help="no new shape is started after this many seconds")
    ap.add_argument("--no-cupti", action="store_true", help="wall clock only")
    ap.add_argument("--traceback", action="store_true", help="print whole tracebacks")
    return ap


def main() -> int:
    ap = run_parser(__doc__, "one row count (220,000) and two (K, N): 256x256, 64x256",
                    "layers", 150.0)
    ap.add_argument("--pairs", default=None, help="K x N pairs, e.g. 64x64,128x128 (default: all)")
    ap.add_argument("--acts", default="relu", help="of relu, tanh, none")
    ap.add_argument("--parts", default="fwd,bwd", help="fwd and/or bwd")
    ap.add_argument("--sides", default=",".join(FWD + BWD), help="a subset of: " + ", ".join(
        FWD + BWD))
    ap.add_argument("--peak", type=float, default=None, help="dense bf16 FLOP/s (default: "
                    "989e12 on H100/H200)")
    ap.add_argument("--bandwidth", type=float, default=None, help="HBM bytes/s (default: "
                    "4.8e12 on H200, 3.35e12 on H100)")
    ap.add_argument("--out", default="experiments/results/bench_mosaic_layer_h200.json")
    args = ap.parse_args()
    start = time.perf_counter()

    rows_list = (QUICK_ROWS if args.quick else ROWS) if args.rows is None else tuple(
        int(r) for r in args.rows.split(","))
    pairs = (QUICK_PAIRS if args.quick else PAIRS) if args.pairs is None else tuple(
        tuple(int(v) for v in p.split("x")) for p in args.pairs.split(","))
    parts = set(args.parts.split(","))
    sides = [s for s in args.sides.split(",")
             if (s in FWD and "fwd" in parts) or (s in BWD and "bwd" in parts)]
    semantics = args.semantics.split(",")
    gpu, sms, meta = start_run(args, sides)
    if not gpu:
        print("no GPU: the XLA sides are checked on the CPU, the Mosaic GPU sides skipped "
              "(lowered for cuda where the bindings are installed)", flush=True)
    results: list[dict[str, Any]] = []
    failures: list[str] = []
    data = {"meta": meta, "config": {"rows": list(rows_list), "pairs": [list(p) for p in pairs],
                                     "acts": args.acts, "sides": sides, "semantics": semantics,
                                     "repeats": args.repeats, "row_align": ROW_ALIGN,
                                     "tolerance": TOL},
            "results": results, "failures": failures}
    for act, rows_asked, rows, (k, n) in shape_grid(args.acts, rows_list, pairs):
        head = f"{act} rows {rows_asked} (run as {rows}) K={k} N={n}"
        entry: dict[str, Any] = {"act": act, "rows_asked": rows_asked, "rows": rows,
                                 "k": k, "n": n, "sides": {}}
        results.append(entry)
        if past_budget(entry, head, start, args.budget_s):
            continue
        t_setup = time.perf_counter()
        try:
            inner = inner_for(rows, k, n, args.inner_bytes) if gpu else 1
            case = make_case(rows, k, n, act, inner, parts)
            entry["inner"] = inner
            ref = {p: reference(p, case.xs[0], case.w, case.b,
                                case.dzs[0] if case.dzs else None, act)
                   for p in (["fwd"] if "fwd" in parts else []) + (
                       ["dx", "dw"] if "bwd" in parts else [])}
        except Exception as e:  # noqa: BLE001  (e.g. out of memory: the next shape)
            entry["status"] = "error: " + first_lines(e)
            failures.append(f"{head}: {entry['status']}")
            print(f"{head}: {entry['status']}", flush=True)
            continue
        jax.block_until_ready(ref)
        entry["setup_s"] = time.perf_counter() - t_setup
        print(f"{head}, {inner} layers a program:", flush=True)
        for side in sides:
            ours = side in ("mgpu_fused", "mgpu_dx", "mgpu_dw")
            tries = [(sem, None) for sem in (semantics if ours else semantics[:1])]
            if side == "mgpu_dw":  # dW's rows split over the warpgroups where K allows
                tries = [(sem, split) for sem in semantics
                         for split in (("k", "rows") if k >= 128 else ("rows",))]
            attempts = []
            t_side = time.perf_counter()
            for sem, variant in tries:
                try:
                    r = run_side(side, case, ref, args, gpu, sms, sem, variant)
                except Skip as e:
                    r = {"status": str(e)}
                    break
                except Exception as e:  # noqa: BLE001  (a side that fails is a finding)
                    msg = first_lines(e)
                    attempts.append({"semantics": sem, "variant": variant, "error": msg,
                                     "detail": traceback.format_exc()[-3000:]})
                    if args.traceback:
                        traceback.print_exc()
                    r = {"status": "error: " + msg}
                    if ours:
                        how = sem + (f", {variant}" if variant else "")
                        r["status"] = f"error ({how}): {msg}"
                        if (sem, variant) != tries[-1]:
                            print(f"  {side:12s} {r['status']}", flush=True)
                    continue
                if ours:
                    r["semantics"] = sem
                break
            if attempts:
                r["failed_attempts"] = attempts
                if "us" not in r:
                    failures.append(f"{head} {side}: {r['status']}")
            r["side_s"] = time.perf_counter() - t_side
            entry["sides"][side] = r
            ref_side = REFERENCE_OF.get(side)
            xla_us = entry["sides"].get(ref_side, {}).get("us") if ref_side else None
            if xla_us and "us" in r:
                r["speed_vs_xla"] = xla_us / r["us"]
            print(describe(side, r, xla_us), flush=True)
        del case
        # Written after every shape: a cut-off run keeps what it measured.
        data["elapsed_s"] = time.perf_counter() - start
        write_result(args.out, data)
    return finish(args.out, data, start)


def finish(out: str, data: dict[str, Any], start: float) -> int:
    """Writes the result a last time and says how it went: exit status 1
    where a shape or side failed."""
    data["elapsed_s"] = time.perf_counter() - start
    write_result(out, data)
    failures = data["failures"]
    print(f"done in {data['elapsed_s']:.0f} s; {len(failures)} failure(s)")
    for f in failures:
        print("  " + f.splitlines()[0])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
