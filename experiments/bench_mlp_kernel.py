"""The `mlp` model's fused kernels (jaxwarp.models.mlp_kernel) against XLA's layers.

For each case (a shipped model at its training minibatch size) the model's
forward pass and its forward + backward (gradient of a fixed linear function
of logits and value with respect to the parameters) are timed with XLA's
layers (`mlp_kernel.layout_for` patched to return None: the variant lives
here) and with the kernels at each backward tile setting (rows per program,
warps; the forward's are the Layout's).
Also records the largest relative difference of outputs and gradients
(kernel vs XLA, max |a - b| / max |b|), matmul TFLOP/s and the bytes the
kernels cannot avoid (observations in, heads out; the backward's h and dz
per hidden layer written and read back by the weight-gradient matmuls).

With --train, bench_train's GPU cases end to end (the trainer's update with
the kernels, with XLA's layers, and the pure-JAX env backend).

    python experiments/bench_mlp_kernel.py --out experiments/results/mlp_kernel_h100.json
    python experiments/bench_mlp_kernel.py --cases "" --train 3,6
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp.benchmark import run_meta
from jaxwarp.models import MLPActorCritic, mlp_kernel
from jaxwarp.units import device_name, rate_text

# name -> (obs features, hidden, logits, shared torso, activation, dtype, rows)
CASES = {
    # tag_warpdrive_default at 2000 envs x 50 steps, 10 minibatches: 1.1M agent-rows
    "tag_a2c_bf16": (71, (256, 256), 43, True, "relu", "bfloat16", 1_100_000),
    "tag_a2c_f32": (71, (256, 256), 43, True, "relu", "float32", 1_100_000),
    # tag_2000_envs in float32 with separate torsos (bench_train case 7)
    "tag_f32_separate": (71, (256, 256), 43, False, "relu", "float32", 1_100_000),
    # one rollout step's forward pass of the 2000-env A2C row
    "tag_step_bf16": (71, (256, 256), 43, True, "relu", "bfloat16", 220_000),
    # MPE at GPU size (1024 envs x 32 steps x 3 agents, 4 minibatches)
    "tag_step_f32": (71, (256, 256), 43, True, "relu", "float32", 220_000),
    # a 128-128 model at MPE's GPU size (1024 envs x 32 steps x 3 agents, 4 minibatches)
    "mpe_gpu_128": (18, (128, 128), 5, False, "tanh", "float32", 24_576),
    "wide_512": (71, (512, 512), 43, True, "relu", "bfloat16", 550_000),
}
# the backward kernel's (rows, warps); the forward's stay the Layout's
TILES = [(32, 4), (64, 4), (64, 8), (128, 8)]


def _time(f, *args, iters: int = 10, repeats: int = 5) -> float:
    out = f(*args)
    jax.block_until_ready(out)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(iters):
            out = f(*args)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - t) / iters)
    return statistics.median(times)


def _rel(a, b) -> float:
    """The largest over leaves of |a - b| / |b| (Euclidean norms)."""
    return max(float(jnp.linalg.norm((x.astype(jnp.float32) - y.astype(jnp.float32)).ravel())
                     / (jnp.linalg.norm(y.astype(jnp.float32).ravel()) + 1e-12))
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def bench(name: str, tiles: list[tuple[int, int]]) -> dict:
    d, hidden, a, shared, act, dtype, rows = CASES[name]
    net = MLPActorCritic((a,), hidden, act, shared, jnp.dtype(dtype))
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
    obs = jax.random.normal(k1, (rows, d), jnp.float32).astype(
        jnp.bfloat16 if dtype == "bfloat16" else jnp.float32)
    params = jax.jit(net.init)(k2, obs[:8])
    cl = jax.random.normal(k3, (rows, a), jnp.float32)
    cv = jax.random.normal(k1, (rows,), jnp.float32)

    def loss(p, o):
        logits, v = net.apply(p, o)
        return jnp.sum(logits * cl) + jnp.sum(v * cv)

    # fresh functions for each variant: jax.jit caches traces by function
    fwd = jax.jit(lambda p, o: net.apply(p, o))
    grad = jax.jit(jax.grad(lambda p, o: loss(p, o)))
    widths = [d, *hidden]
    towers = 1 if shared else 2
    flops = 2 * rows * towers * sum(k * n for k, n in itertools.pairwise(widths))
    flops += 2 * rows * hidden[-1] * (a + 1)
    item = jnp.dtype(dtype).itemsize
    # fwd kernel: obs in, f32 heads out; bwd kernel + weight grads: h and dz
    # per hidden layer written once and read once, obs and heads' gradient read
    out_pad = mlp_kernel.Layout(d, hidden, a + 1, towers, act, dtype).out_pad
    fwd_bytes = rows * (d * obs.dtype.itemsize + out_pad * 4)
    bwd_bytes = rows * (2 * d * obs.dtype.itemsize + 2 * out_pad * item
                        + towers * sum(4 * w * item for w in hidden))
    res = {"case": name, "obs_dim": d, "hidden": list(hidden), "logits": a,
           "shared_torso": shared, "activation": act, "dtype": dtype, "rows": rows,
           "forward_flops": flops, "backward_flops": 2 * flops,
           "kernel_forward_min_bytes": fwd_bytes, "kernel_backward_min_bytes": bwd_bytes}

    orig = mlp_kernel.layout_for
    mlp_kernel.layout_for = lambda *args, **kw: None
    try:
        ref_out, ref_grad = fwd(params, obs), grad(params, obs)
        res["xla"] = {"forward_s": _time(fwd, params, obs), "grad_s": _time(grad, params, obs)}
    finally:
        mlp_kernel.layout_for = orig
    res["kernel"] = []
    for r, w in tiles:
        def tiled(*args, _r=r, _w=w, **kw):
            lay = orig(*args, **kw)
            return None if lay is None else dataclasses.replace(lay, back_rows=_r,
                                                                 back_warps=_w)
        mlp_kernel.layout_for = tiled
        fwd_k = jax.jit(lambda p, o: net.apply(p, o))
        grad_k = jax.jit(jax.grad(lambda p, o: loss(p, o)))
        try:
            out, g = fwd_k(params, obs), grad_k(params, obs)
            entry = {"rows": r, "warps": w, "forward_rel_diff": _rel(out, ref_out),
                     "grad_rel_diff": _rel(g, ref_grad),
                     "forward_s": _time(fwd_k, params, obs), "grad_s": _time(grad_k, params, obs)}
        except Exception as e:  # a tile setting Triton cannot compile: recorded, not fatal
            entry = {"rows": r, "warps": w, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        finally:
            mlp_kernel.layout_for = orig
        res["kernel"].append(entry)
        print(name, entry, flush=True)
    ok = [e for e in res["kernel"] if "error" not in e]
    if ok:
        best = min(ok, key=lambda e: e["grad_s"])
        res["best"] = {"back_rows": best["rows"], "back_warps": best["warps"],
                       "forward_speedup": res["xla"]["forward_s"] / best["forward_s"],
                       "grad_speedup": res["xla"]["grad_s"] / best["grad_s"],
                       "forward_tflops": flops / best["forward_s"] / 1e12,
                       "grad_tflops": 3 * flops / best["grad_s"] / 1e12}
    print(name, "xla", res["xla"], "best", res.get("best"), flush=True)
    return res


def train(indices: list[int], repeats: int) -> list[dict]:
    """bench_train's GPU cases: the cuda backend with the kernels (what the
    trainer picks) and with XLA's layers, and the jax backend, in turn."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_train import GPU_CASES, bench_case

    out = []
    for i in indices:
        config, overrides, updates = GPU_CASES[i]
        for variant, backend in (("kernel", "cuda"), ("xla", "cuda"), ("kernel", "jax")):
            orig = mlp_kernel.layout_for
            if variant == "xla":
                mlp_kernel.layout_for = lambda *args, **kw: None
            try:
                r = bench_case(config, overrides, backend, updates, repeats)
            finally:
                mlp_kernel.layout_for = orig
            r.update(case_index=i, layers=variant)
            rate = rate_text(r["env_steps_per_s"], r["num_agents"], device_name())
            print(f"train case {i} {backend} {variant}: {rate}, "
                  f"{1e3 * r['seconds_per_update']:.1f} ms/update, rollout "
                  f"{1e3 * r['rollout_seconds_per_update']:.1f} ms", flush=True)
            out.append(r)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--tiles", default=";".join(f"{r},{w}" for r, w in TILES),
                    help="';'-separated rows,warps settings")
    ap.add_argument("--train", default="",
                    help="comma list of bench_train GPU case indices to time end to end")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="experiments/results/mlp_kernel.json")
    args = ap.parse_args()
    if not mlp_kernel.on_cuda():
        raise SystemExit("bench_mlp_kernel: error: needs a CUDA GPU (the kernels lower to Triton)")
    tiles = [tuple(int(v) for v in t.split(",")) for t in args.tiles.split(";")]
    results = [bench(c, tiles) for c in args.cases.split(",") if c]
    trained = train([int(i) for i in args.train.split(",") if i], args.repeats)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"meta": run_meta(), "results": results,
                                          "train": trained}, indent=1))
    print("wrote", args.out)


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
