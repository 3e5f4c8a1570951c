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

The largest sweep on one GPU (``--largest``): how many runs of the case's size
one device's memory holds, by the memory check before compiling (the arrays'
lower bound, `memory_guard.arrays_bytes`) and by XLA's count of the compiled
program (a sweep of ``--probe`` runs compiled: `memory_guard.program_bytes`).
Then one sweep of XLA's count, expected in one program, and one of the check's
count, expected in chunks of it, each run for ``--updates`` updates (no
checkpoint) and timed (wall clock of the process; the summary's run time and
env-steps/s). Runs are settings x seeds (a random learning rate per setting),
at most a quarter of the host's memory of states (a sweep in chunks keeps two
copies there). Each sweep runs in a process of its own, as does the count, so
that this one never takes the GPU's memory.

    python experiments/bench_sweep.py --largest --case mpe \
        --out experiments/results/sweep_largest_mpe_h200.json
    python experiments/bench_sweep.py --largest --case cartpole --memory-gb 0.004 --probe 8 \
        --updates 1 --out /tmp/largest_cpu.json   # a CPU-sized try (pretend 4 MB)
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


def one_sweep(case: str, runs: int | str, updates: int, memory_gb: float | None) -> dict:
    """In this process: the memory check's count of the case's runs on one
    device and, for `runs` ("probe:N": the smaller of N and that count), a
    sweep of that many runs stopped after `updates` updates; what it measured."""
    from jaxwarp.run import memory_guard
    from jaxwarp.run.loop import train_run
    from jaxwarp.train import load_config
    from jaxwarp.train.config import derived
    from jaxwarp.train.sweep import MAX_SETTINGS, parse_sweep
    from jaxwarp.train.trainer import build_trainer

    name, size = CASES[case]
    batch = derived(load_config(name, size)).batch_env_steps
    config = load_config(name, [*size, "devices=1", f"total_env_steps={2 * updates * batch}",
                                f"chunk_updates={updates}", f"checkpoint_every={1000 * updates}"])
    trainer = build_trainer(config)
    platform, limit = memory_guard.device_memory(trainer, 1)
    if memory_gb is not None:  # pretend the device has that much (a CPU-sized try)
        limit = int(memory_gb * 1e9)
        memory_guard.device_memory = lambda *_: (platform, limit)
    parts = memory_guard.arrays_bytes(config, trainer, 1)
    per_run = sum(parts.values())
    host = memory_guard.memory_limit("cpu")
    out = {"platform": platform, "memory_bytes": limit, "per_run_bytes": per_run,
           "check_runs": memory_guard.members_that_fit(per_run, limit, 1),
           "host_bytes": host, "host_runs": host // 4 // (parts["model"] + parts["env"])}
    want = max(1, min(out["check_runs"], int(runs[6:])) if isinstance(runs, str) else runs)
    seeds = -(-want // MAX_SETTINGS)
    settings = want // seeds
    _, sw = parse_sweep(["policies.agent.lr=loguniform(1e-4,1e-2)"], settings, config.seed)
    seen: list[int | None] = []  # XLA's count of each program the sweep compiled
    real = memory_guard.program_bytes
    memory_guard.program_bytes = lambda compiled: seen.append(real(compiled)) or seen[-1]
    work = Path(tempfile.mkdtemp(prefix="bench_sweep_"))
    out |= {"runs": settings * seeds, "settings": settings, "seeds": seeds}
    t = time.perf_counter()
    try:
        train_run(config, work / "sweep", seeds=seeds, sweep=sw, progress="lines",
                  stop_after_updates=updates)
    except Exception as e:  # noqa: BLE001  (recorded: an out-of-memory is a finding)
        out["error"] = " ".join(str(e).split())[:500]
    out["wall_s"] = time.perf_counter() - t
    if (work / "sweep" / "summary.json").exists():
        out |= summary(work / "sweep")
    shutil.rmtree(work, ignore_errors=True)
    out["program_bytes"] = seen
    return out


def in_process(args: list[str], env: dict[str, str]) -> dict:
    """`one_sweep` in a process of its own (this script, ``--child``, with the
    environment `env`): its result, with the sweep's lines saying it ran in
    chunks."""
    done = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True,
                          text=True, check=False, env=env)
    lines = [x for x in done.stderr.splitlines() if x.startswith("jaxwarp sweep: its")]
    if done.returncode != 0 or not done.stdout.strip():
        return {"error": done.stderr[-2000:], "chunk_lines": lines}
    return json.loads(done.stdout.strip().splitlines()[-1]) | {"chunk_lines": lines}


def largest(a: argparse.Namespace, env: dict[str, str]) -> None:
    """--largest: the counts, then XLA's count and the check's count run once
    (each in a process with the environment `env`)."""
    from jaxwarp.run.memory_guard import PROGRAM_SHARE, members_that_fit

    config, size = CASES[a.case]
    common = [a.case, str(a.updates), str(a.memory_gb)]
    result: dict[str, Any] = {"case": a.case, "config": config, "overrides": size,
                              "updates": a.updates, "pretend_memory_gb": a.memory_gb}

    def save() -> None:
        Path(a.out).write_text(json.dumps(result, indent=1) + "\n")

    probe = result["probe"] = in_process([*common, f"probe:{a.probe}"], env)
    result["meta"] = run_meta(device=probe.get("device", "unknown"))  # the GPU's, not ours
    save()
    if "per_run_bytes" not in probe or not (probe.get("program_bytes") or [None])[0]:
        sys.exit(f"the probe failed: {probe.get('error', '')[-2000:]}")
    limit, xla = probe["memory_bytes"], probe["program_bytes"][0] / probe["runs"]
    check = min(probe["check_runs"], probe["host_runs"])
    xla_runs = min(members_that_fit(xla, limit * PROGRAM_SHARE, 1), probe["host_runs"])
    result |= {"check_runs": probe["check_runs"], "per_run_bytes": probe["per_run_bytes"],
               "xla_runs": members_that_fit(xla, limit * PROGRAM_SHARE, 1),
               "xla_per_run_bytes": xla,
               "host_runs": probe["host_runs"]}
    print(f"{a.case}: the check allows {probe['check_runs']} runs ({probe['per_run_bytes']} "
          f"bytes each) in {limit / 1e9:.3g} GB; XLA's count {result['xla_runs']} ({xla:.0f} "
          f"bytes each); the host's memory {probe['host_runs']}", file=sys.stderr, flush=True)
    for key, runs in (("one_program", xla_runs), ("in_chunks", check)):
        if key == "in_chunks" and check <= xla_runs:
            break
        r = result[key] = in_process([*common, str(runs)], env)
        save()
        print(f"{key}: {r.get('runs')} runs, {r.get('wall_s', 0):.1f} s, "
              + (rate_text(r["env_steps_per_s"], r["agents_per_env"], r["device"])
                 if "env_steps_per_s" in r else f"failed: {r.get('error', '')[-300:]}"),
              file=sys.stderr, flush=True)


def main() -> None:
    if sys.argv[1:2] == ["--child"]:  # one_sweep in this process: case updates memory runs
        case, updates, memory, runs = sys.argv[2:6]
        print(json.dumps(one_sweep(case, runs if runs.startswith("probe:") else int(runs),
                                   int(updates), None if memory == "None" else float(memory))))
        return
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
    p.add_argument("--largest", action="store_true",
                   help="the largest sweep on one device instead (module docstring)")
    p.add_argument("--updates", type=int, default=2, help="--largest: updates each sweep runs")
    p.add_argument("--probe", type=int, default=1024,
                   help="--largest: runs of the sweep whose program XLA counts")
    p.add_argument("--memory-gb", type=float, default=None,
                   help="--largest: pretend the device has this much memory (a CPU-sized try)")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    if a.largest:
        env = dict(os.environ)
        os.environ.setdefault("JAX_PLATFORMS", "cpu")  # this process: no GPU memory taken
        return largest(a, env)
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
