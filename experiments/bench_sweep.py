"""A sweep as one program against the same runs one process at a time.

N settings (a grid of learning rates x entropy coefficients) x S seeds of a
small-batch config: ``jaxwarp sweep`` trains them in one process and one
compiled program; the sequential baseline is what a user of jaxwarp did before:
one ``jaxwarp train --seeds S`` process per setting (its seeds already vmapped),
each compiling its own program. Both are timed by the wall clock of the whole
command (Python start, env build, compile, training, outputs; no evaluation
after training: ``--eval-episodes 0``), one after the other on the same GPU.

Cases: MPE ``simple_spread`` at JaxMARL's IPPO size (16 envs x 128 steps) and
CartPole at PureJaxRL's PPO size (4 envs x 128 steps).

    python experiments/bench_sweep.py --case mpe --out experiments/results/sweep_h200.json
    python experiments/bench_sweep.py --case mpe --total-steps 20480 --settings 4 --seeds 2 \
        --out /tmp/sweep_cpu.json   # a CPU-sized try
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from jaxwarp.benchmark import run_meta
from jaxwarp.units import rate_text

CASES = {
    # JaxMARL's IPPO MPE size; the shipped config's model and PPO settings.
    "mpe": ("mpe_simple_spread_ppo", ["num_envs=16", "num_steps=128", "num_minibatches=2"]),
    # PureJaxRL's CartPole PPO: 4 envs x 128 steps, 4 epochs x 4 minibatches.
    "cartpole": ("cartpole_ppo", ["num_envs=4", "num_steps=128"]),
}
LRS = ("1e-4", "3e-4", "1e-3", "3e-3", "2e-4", "5e-4", "2e-3", "5e-3")
ENTS = ("0", "0.003", "0.01", "0.03", "0.001", "0.005", "0.02", "0.05")


def timed(argv: list[str]) -> float:
    """Wall-clock seconds of one jaxwarp command (its output to our stderr)."""
    t = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          check=False)
    dt = time.perf_counter() - t
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{done.stdout[-3000:]}")
    return dt


def summary(out: Path) -> dict[str, Any]:
    s = json.loads((out / "summary.json").read_text())
    return {k: s[k] for k in ("compile_s", "run_s", "env_steps_per_s", "agents_per_env",
                              "updates", "device")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", choices=sorted(CASES), default="mpe")
    p.add_argument("--settings", type=int, default=16,
                   help="4, 8, 16, 32 or 64 (learning rates x entropy coefficients)")
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--total-steps", type=int, default=1_000_000, help="env-steps per run")
    p.add_argument("--sequential", type=int, default=None,
                   help="settings trained one process at a time (default: all)")
    p.add_argument("--devices", type=lambda t: [int(x) for x in t.split(",")], default=[1],
                   help="device counts the sweep runs on, one after the other (e.g. 1,2)")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    config, size = CASES[a.case]
    lrs = LRS[:max(1, min(8, a.settings // 4))]
    ents = ENTS[:a.settings // len(lrs)]
    base = ["--config", config, *size, f"total_env_steps={a.total_steps}", "--no-progress"]
    jw = [sys.executable, "-m", "jaxwarp"]
    work = Path(tempfile.mkdtemp(prefix="bench_sweep_"))
    n = len(lrs) * len(ents)
    result: dict[str, Any] = {
        "case": a.case, "config": config, "overrides": size, "settings": n, "seeds": a.seeds,
        "env_steps_per_run": a.total_steps,
        "meta": run_meta(devices=os.environ.get("CUDA_VISIBLE_DEVICES", "all"))}
    try:
        for d in a.devices:  # the first count is the one the sequential runs face
            out = work / f"sweep{d}"
            dt = timed([*jw, "sweep", *base, f"policies.agent.lr={','.join(lrs)}",
                        f"ent_coef={','.join(ents)}", "--seeds", str(a.seeds),
                        f"devices={d}", "--out", str(out)])
            result.setdefault("sweep_devices", []).append(
                {"devices": d, "wall_s": dt, **summary(out)})
            s = result["sweep_devices"][-1]
            print(f"sweep of {n} settings x {a.seeds} seeds on {d} device(s): {dt:.1f} s, "
                  f"{rate_text(s['env_steps_per_s'], s['agents_per_env'], s['device'])}",
                  file=sys.stderr, flush=True)
            Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
        result["sweep"] = result["sweep_devices"][0]
        sweep_s = result["sweep"]["wall_s"]
        runs = result["sequential_runs"] = []
        grid = [(lr, e) for lr in lrs for e in ents][:a.sequential]
        for k, (lr, e) in enumerate(grid):
            out = work / f"run{k}"
            dt = timed([*jw, "train", *base, f"policies.agent.lr={lr}", f"ent_coef={e}",
                        "--seeds", str(a.seeds), "--eval-episodes", "0", "--out", str(out)])
            runs.append({"lr": float(lr), "ent_coef": float(e), "wall_s": dt, **summary(out)})
            seq_s = sum(r["wall_s"] for r in runs)
            # A speedup only where every setting ran one at a time: no projection.
            result |= {"sequential_wall_s": seq_s, "sequential_settings": len(runs),
                       "speedup": seq_s / sweep_s if len(runs) == n else None}
            Path(a.out).write_text(json.dumps(result, indent=1) + "\n")  # kept if cut short
            print(f"sequential {k + 1}/{len(grid)}: {dt:.1f} s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"{a.case}: sweep of {n} settings x {a.seeds} seeds {sweep_s:.1f} s; "
          f"{len(runs)} sequential runs {result.get('sequential_wall_s', 0):.1f} s"
          + (f"; speedup {result['speedup']:.1f}x" if result.get("speedup") else ""))


if __name__ == "__main__":
    main()
