"""Action-sampler throughput: `sample_actions` backends side by side in one run.

For each shape (rows, nvec) and backend: one jitted `lax.scan` of T draws
from fixed logits f32[rows, sum(nvec)], a fresh key per step (split inside
the scan, so no draw can be hoisted out of the loop), actions and log_prob
reduced into the carry (so none is dead code). Compile time is measured
separately, a warm-up call is excluded, and each timed call ends with
`block_until_ready`; the median of the repeats is reported as G logits/s
and microseconds per `sample_actions` call (scan overhead included).

    python experiments/bench_sampler.py            # GPU sizes (cuda vs jax)
    python experiments/bench_sampler.py --small    # sizes that suit a CPU (cpu vs jax)

"jax" is the definition (`jax.random.categorical` per head + log_softmax).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import jax
import jax.numpy as jnp

import jaxwarp
from jaxwarp.benchmark import add_bench_arguments, bench_backends, run_meta, write_result
from jaxwarp.sampler import sample_actions

# (rows, nvec, draws per timed call). 220000 rows of (21, 21): Tag at 2000
# envs x 110 agents, as in the trainer.
GPU_CASES = [(220_000, (21, 21), 100), (11_000, (21, 21), 100), (1_000_000, (6,), 100),
             (100_000, (100,), 100)]
SMALL_CASES = [(2_000, (21, 21), 20), (200, (21, 21), 20), (10_000, (6,), 20),
               (1_000, (100,), 20)]


def bench_one(backend: str, rows: int, nvec: tuple[int, ...], draws: int, repeats: int,
              device: jax.Device) -> dict:
    def run(key, logits):
        def body(carry, k):
            a, lp = sample_actions(k, logits, nvec, backend=backend)
            lp_sum, a_sum = carry
            return (lp_sum + lp.sum(), a_sum + a.sum()), None

        keys = jax.random.split(key, draws)
        (lp_sum, a_sum), _ = jax.lax.scan(body, (jnp.float32(0), jnp.int32(0)), keys)
        return lp_sum, a_sum

    with jax.default_device(device):
        logits = jax.random.normal(jax.random.key(0), (rows, sum(nvec)), jnp.float32) * 2.0
        keys = [jax.random.key(1 + i) for i in range(repeats + 1)]
        f = jax.jit(run)
        t = time.perf_counter()
        f = f.lower(keys[0], logits).compile()
        compile_s = time.perf_counter() - t
        jax.block_until_ready(f(keys[0], logits))  # warm-up
        times = []
        for k in keys[1:]:
            t = time.perf_counter()
            jax.block_until_ready(f(k, logits))
            times.append(time.perf_counter() - t)
    med = statistics.median(times)
    logits_per_call = rows * sum(nvec)
    return dict(backend=backend, rows=rows, nvec=list(nvec), draws_per_call=draws,
                logits_per_draw=logits_per_call, compile_s=compile_s, times_s=times,
                median_s=med, us_per_draw=1e6 * med / draws,
                g_logits_per_s=logits_per_call * draws / med / 1e9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_bench_arguments(ap, "experiments/results/bench_sampler.json", "CPU-sized shapes")
    args = ap.parse_args()

    gpu = jaxwarp.gpu_available()
    backends = bench_backends(args.backends, gpu)
    cases = SMALL_CASES if args.small else GPU_CASES
    device = jax.devices("gpu")[0] if gpu else jax.devices("cpu")[0]
    print(f"device: {device.device_kind}")

    results = []
    for rows, nvec, draws in cases:
        for backend in backends:
            dev = jax.devices("cpu")[0] if backend == "cpu" else device
            r = bench_one(backend, rows, nvec, draws, args.repeats, dev)
            results.append(r)
            print(f"  {backend:4s} rows={rows:>9,} nvec={str(nvec):10s} "
                  f"{r['us_per_draw']:10.1f} us/draw  {r['g_logits_per_s']:8.3f} G logits/s  "
                  f"(compile {r['compile_s']:.1f} s)", flush=True)

    ratios = []
    print("\n| rows | nvec | backend | us / draw | G logits/s | vs jax |")
    print("|---:|---|---|---:|---:|---:|")
    for r in results:
        ref = next((x for x in results if x["backend"] == "jax" and x["rows"] == r["rows"]
                    and x["nvec"] == r["nvec"]), None)
        ratio = None if ref is None or r["backend"] == "jax" else (
            ref["median_s"] / r["median_s"])
        if ratio is not None:
            ratios.append(dict(rows=r["rows"], nvec=r["nvec"], kernel=r["backend"],
                               speedup_over_jax=ratio))
        print(f"| {r['rows']} | {tuple(r['nvec'])} | {r['backend']} | {r['us_per_draw']:.1f} | "
              f"{r['g_logits_per_s']:.3f} | {'' if ratio is None else f'{ratio:.2f}x'} |")

    print()
    write_result(args.out, dict(
        device=device.device_kind, platform=device.platform, jax=jax.__version__,
        python=platform.python_version(), results=results, kernel_over_jax=ratios,
        meta=run_meta()))


if __name__ == "__main__":
    main()
