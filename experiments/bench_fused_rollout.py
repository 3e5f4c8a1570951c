"""Fused vs step-by-step rollout, side by side in one process on one device.

For each case (the settings of experiments/bench_time_to_return.py's cases and
scales, and two shipped Tag configs) the trainer's whole update and its
rollout alone are timed twice: with the fused rollout (jaxwarp.train.fused,
what the trainer picks where it applies) and with the step-by-step scan
(`fused.plan` patched to return None: the variant lives here, not as a switch
in the product). Prints env-steps/s, agent-steps/s, ms per update and per
rollout; writes JSON with commit, device and command.

    python experiments/bench_fused_rollout.py --out experiments/results/fused_rollout_h100.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_time_to_return import CASES as TTR, hyperparameters, jaxwarp_overrides  # noqa: E402
from bench_train import bench_case  # noqa: E402

from jaxwarp.benchmark import run_meta  # noqa: E402
from jaxwarp.train import fused  # noqa: E402
from jaxwarp.units import device_name, rate_text  # noqa: E402


def cases(backend: str) -> dict[str, tuple[str, list[str], int]]:
    """name -> (config, overrides, updates per timed call)."""
    out = {}
    for case in ("mpe", "cartpole"):
        for scale in ("paper", "gpu"):
            hp = hyperparameters(case, scale, None)
            out[f"{case}_{scale}"] = (TTR[case]["jaxwarp_config"],
                                      jaxwarp_overrides(case, hp, backend, 0), 20)
    hp = hyperparameters("tag", "paper", None)
    out["tag_duel"] = (TTR["tag"]["jaxwarp_config"], jaxwarp_overrides("tag", hp, backend, 0), 20)
    out["tag_2000_envs"] = ("tag_2000_envs", [f"backend={backend}"], 5)
    out["tag_a2c_f32"] = ("tag_warpdrive_default", [f"backend={backend}"], 5)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--cases", default=None, help="comma list of case names (default: all)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="experiments/results/fused_rollout.json")
    args = ap.parse_args()
    todo = cases(args.backend)
    if args.cases:
        todo = {k: todo[k] for k in args.cases.split(",")}
    meta = {**run_meta(), "date": time.strftime("%Y-%m-%d %H:%M:%S"), "jax": jax.__version__}
    device = device_name(jax.devices()[:1])
    results = []
    original = fused.plan
    for name, (config, overrides, updates) in todo.items():
        row = {}
        for variant in ("fused", "step_by_step"):
            fused.plan = original if variant == "fused" else (lambda *a, **k: None)
            try:
                r = bench_case(config, [o for o in overrides if not o.startswith("backend=")],
                               args.backend, updates, args.repeats)
            finally:
                fused.plan = original
            r.update(case=name, variant=variant)
            results.append(r)
            row[variant] = r
            print(f"{name:15s} {variant:12s} {r['num_envs']:5d} envs x {r['num_steps']:4d} steps: "
                  f"{rate_text(r['env_steps_per_s'], r['num_agents'], device)} "
                  f"({r['seconds_per_update'] * 1e3:7.2f} ms/update, rollout "
                  f"{r['rollout_seconds_per_update'] * 1e3:7.2f} ms)", flush=True)
        f, s = row["fused"], row["step_by_step"]
        print(f"{'':15s} fused/step-by-step: update {f['env_steps_per_s'] / s['env_steps_per_s']:.2f}x, "
              f"rollout {s['rollout_seconds_per_update'] / f['rollout_seconds_per_update']:.2f}x",
              flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
