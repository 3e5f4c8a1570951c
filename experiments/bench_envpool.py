"""Host-loop throughput: EnvPool CartPole-v1 vs jaxwarp's Gymnasium adapter.

Both driven from the same Python loop, as a PyTorch/NumPy trainer would:
NumPy actions in, NumPy observations out, one step call per batch. EnvPool
in sync mode (``batch_size == num_envs``; its default thread count, one per
core, and one thread); jaxwarp
through `jaxwarp.adapters.gymnasium.JaxwarpVectorEnv` (backend cpu, one
jitted call per step, copy=True: writable arrays like EnvPool's; and
copy=False: read-only views). For context, the adapter's jitted step alone
(device actions, no NumPy conversion, no host checks, one sync per run).
Actions are uniform random, drawn before timing and cycled. 50 warm-up steps
(jaxwarp's compile time reported apart); each figure is the median of 5
timed runs of `steps` steps, the runs of all implementations interleaved.

    pip install envpool
    python experiments/bench_envpool.py --out experiments/results/bench_envpool_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import jax
import numpy as np

import jaxwarp
from jaxwarp.adapters.gymnasium import JaxwarpVectorEnv

SIZES = (64, 1024, 8192)
STEPS = {64: 2000, 1024: 1000, 8192: 200}  # per timed run
POOL = 16  # distinct action batches, cycled


def timed_run(step, actions: list, steps: int, finish=lambda out: None) -> float:
    """Env-steps per second of `steps` calls of step(actions[i]), cycled."""
    t = time.perf_counter()
    out = None
    for i in range(steps):
        out = step(actions[i % len(actions)])
    finish(out)
    return actions[0].shape[0] * steps / (time.perf_counter() - t)


def make_envpool(n: int, threads: int):
    import envpool

    env = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=n, batch_size=n, seed=0,
                       num_threads=threads)
    env.reset()
    meta = {"num_threads": threads or "0 (EnvPool's default: one per core)",
            "version": envpool.__version__}
    return env.step, None, meta, env.close


def make_jaxwarp_gym(n: int, copy: bool, first_actions: np.ndarray):
    envs = JaxwarpVectorEnv(jaxwarp.make("cartpole", backend="cpu"), n, copy=copy)
    t = time.perf_counter()
    envs.reset(seed=0)
    envs.step(first_actions)
    return envs.step, None, {"compile_s": time.perf_counter() - t}, envs.close


def make_jitted_step(n: int):
    """The adapter's jitted step alone (same function, same donation), device
    actions, synced once at the end of a run."""
    from jaxwarp.adapters._batched import BatchedEnv

    b = BatchedEnv(jaxwarp.make("cartpole", backend="cpu"), n)
    b.reset(seed=0)
    return b.step, b.device, {}, b.close


def bench_size(n: int, actions: list[np.ndarray], steps: int, envpool_threads: list[int]
               ) -> dict:
    """Every implementation at n envs; their timed runs interleaved (run r of each,
    then run r + 1 of each), so a change of machine load hits all alike."""
    impls = {}
    for threads in envpool_threads:
        try:
            impls[f"envpool_threads{threads}"] = make_envpool(n, threads)
        except ImportError as e:
            print(f"envpool not importable: {e}")
    impls["jaxwarp_gym"] = make_jaxwarp_gym(n, True, actions[0])
    impls["jaxwarp_gym_nocopy"] = make_jaxwarp_gym(n, False, actions[0])
    impls["jaxwarp_jitted_step"] = make_jitted_step(n)
    args = {}
    for name, (step, device, _, _) in impls.items():
        acts = actions if device is None else [jax.device_put(a, device) for a in actions]
        finish = jax.block_until_ready if device is not None else (lambda out: None)
        args[name] = (step, acts, finish)
        for i in range(50):  # warm-up
            step(acts[i % len(acts)])
    runs: dict[str, list[float]] = {name: [] for name in impls}
    for _ in range(5):
        for name, (step, acts, finish) in args.items():
            runs[name].append(timed_run(step, acts, steps, finish))
    row = {}
    for name, (_, _, meta, close) in impls.items():
        close()
        row[name] = {"env_steps_per_s": statistics.median(runs[name]), "runs": runs[name],
                     **meta}
    return row


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


LABELS = {"envpool_threads0": "EnvPool, default threads", "envpool_threads1": "EnvPool, 1 thread",
          "jaxwarp_gym": "jaxwarp Gymnasium adapter (copy=True)",
          "jaxwarp_gym_nocopy": "jaxwarp Gymnasium adapter (copy=False)",
          "jaxwarp_jitted_step": "jaxwarp jitted step alone (no NumPy, no per-step sync)"}


def markdown_table(results: list[dict]) -> str:
    """Env-steps/s (millions), one row per implementation, one column per size."""
    sizes = [r["num_envs"] for r in results]
    keys = [k for k in LABELS if any(k in r for r in results)]
    lines = ["| CartPole-v1, M env-steps/s | " + " | ".join(f"{n} envs" for n in sizes) + " |",
             "|---|" + "---:|" * len(sizes)]
    for k in keys:
        cells = [f"{r[k]['env_steps_per_s'] / 1e6:.2f}" if "env_steps_per_s" in r.get(k, {})
                 else "n/a" for r in results]
        lines.append(f"| {LABELS[k]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES))
    parser.add_argument("--envpool-threads", type=int, nargs="*", default=[0, 1],
                        help="EnvPool num_threads settings to time (0: its default)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    load_before = os.getloadavg()
    results = []
    for n in args.sizes:
        steps = STEPS.get(n, max(100, 200_000 // n))
        actions = [rng.integers(0, 2, n).astype(np.int32) for _ in range(POOL)]
        row = {"num_envs": n, "steps_per_run": steps,
               **bench_size(n, actions, steps, args.envpool_threads)}
        results.append(row)
        print(f"{n:6d} envs: " + "  ".join(
            f"{k} {v['env_steps_per_s'] / 1e6:.3f} M/s" for k, v in row.items()
            if isinstance(v, dict) and "env_steps_per_s" in v), flush=True)
    meta = {"cpu": cpu_name(), "cores": os.cpu_count(), "python": platform.python_version(),
            "jax": jax.__version__, "numpy": np.__version__,
            "loadavg_1_5_15_before_after": [load_before, os.getloadavg()],
            "env": "CartPole-v1 / cartpole",
            "protocol": "same Python loop, numpy int32 actions (random, 16 batches cycled), "
                        "one step call per batch, 50 warm-up steps, median of 5 runs interleaved "
                        "across implementations"}
    out = {"meta": meta, "results": results}
    print(markdown_table(results))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
