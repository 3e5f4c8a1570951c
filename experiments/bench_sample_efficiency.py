"""Sample efficiency of PPO's minibatch layout: env sequences vs single steps.

jaxwarp's PPO minibatches were whole env sequences (``minibatch_layout: envs``:
every step of a set of envs); PureJaxRL's and JaxMARL's are single steps drawn
from the whole batch (``samples``). At the peers' sizes (CartPole: 4 envs, 4
minibatches, so a minibatch is one env's 128 consecutive steps) that makes
minibatches highly correlated. This script trains both layouts at the peers'
hyperparameters (the ``paper`` scale of `bench_time_to_return.py`'s cases, the
same overrides; ``--scales paper,gpu`` adds its GPU-sized batches) and compares
the env-steps each needs to reach a return.

Per (case, layout): ``--seeds`` seeds in one program (``jax.vmap``); the curve
is the seed-mean return per update, smoothed by a trailing mean over 2% of
the updates. Threshold per case: 90% of the way from the first update's mean
return to the lower of the two layouts' final returns. Env-steps to threshold:
of the seed-mean curve, and per seed (mean ± 95% t interval over seeds; a seed
that never reaches it counts as the run's length and is reported). Final
return: per seed the mean of the last 5% of updates; mean ± 95% t interval.
Device-independent figures (env-steps, not seconds).

    python experiments/bench_sample_efficiency.py --cases cartpole,mpe --seeds 10 \
        --backend cpu --out experiments/results/sample_efficiency_cpu.json
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_time_to_return import CASES, COMMON, T95, jaxwarp_overrides  # noqa: E402

from jaxwarp.benchmark import run_meta  # noqa: E402
from jaxwarp.train import load_config, make_train  # noqa: E402

LAYOUTS = ("envs", "samples")


def smooth(x: np.ndarray) -> np.ndarray:
    w = max(1, len(x) // 50)
    c = np.cumsum(np.insert(x, 0, 0.0))
    out = np.empty_like(x)
    for i in range(len(x)):
        lo = max(0, i + 1 - w)
        out[i] = (c[i + 1] - c[lo]) / (i + 1 - lo)
    return out


def interval(x: np.ndarray) -> float:
    n = len(x)
    return float(T95.get(n - 1, 1.96) * x.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan


def first_reach(curve: np.ndarray, threshold: float) -> int | None:
    hit = np.nonzero(smooth(curve) >= threshold)[0]
    return int(hit[0]) if len(hit) else None


def train(case: str, scale: str, layout: str, seeds: int, backend: str, steps: int | None
          ) -> dict:
    hp = {**COMMON, **CASES[case].get("hyperparameters", {}), **CASES[case]["scales"][scale]}
    if steps:
        hp["total_env_steps"] = steps
    overrides = jaxwarp_overrides(case, hp, backend, 0) + [f"minibatch_layout={layout}"]
    config = load_config(CASES[case]["jaxwarp_config"], overrides)
    fn = jax.jit(jax.vmap(make_train(dataclasses.replace(config, chunk_updates=1))))
    keys = jax.numpy.stack([jax.random.PRNGKey(s) for s in range(seeds)])
    t = time.perf_counter()
    _, m = fn(keys)
    ret = np.asarray(jax.device_get(m[f"{CASES[case]['group']}/episode_return"]), np.float64)
    return {"layout": layout, "overrides": overrides, "returns": ret,
            "batch_env_steps": hp["num_envs"] * hp["num_steps"], "seconds": time.perf_counter() - t}


def compare(case: str, scale: str, seeds: int, backend: str, steps: int | None) -> dict:
    runs = {layout: train(case, scale, layout, seeds, backend, steps) for layout in LAYOUTS}
    tail = {k: r["returns"][:, -max(1, r["returns"].shape[1] // 20):].mean(axis=1)
            for k, r in runs.items()}
    start = float(np.nanmean([np.nanmean(r["returns"][:, 0]) for r in runs.values()]))
    end = min(float(v.mean()) for v in tail.values())
    threshold = start + 0.9 * (end - start)
    out = {"case": case, "scale": scale, "threshold": threshold, "seeds": seeds,
           "layouts": {}}
    for k, r in runs.items():
        ret, batch = np.nan_to_num(r["returns"], nan=start), r["batch_env_steps"]
        updates = ret.shape[1]
        mean_hit = first_reach(ret.mean(axis=0), threshold)
        per_seed = [first_reach(ret[s], threshold) for s in range(seeds)]
        steps_seed = np.array([(h if h is not None else updates) + 1 for h in per_seed]) * batch
        out["layouts"][k] = {
            "overrides": r["overrides"], "updates": updates, "batch_env_steps": batch,
            "env_steps_to_threshold_mean_curve":
                None if mean_hit is None else (mean_hit + 1) * batch,
            "env_steps_to_threshold_per_seed": steps_seed.tolist(),
            "env_steps_to_threshold_seed_mean": float(steps_seed.mean()),
            "env_steps_to_threshold_ci95": interval(steps_seed),
            "seeds_not_reaching": sum(h is None for h in per_seed),
            "final_return_mean": float(tail[k].mean()),
            "final_return_ci95": interval(tail[k]),
            "final_return_per_seed": tail[k].tolist(),
            "curve_seed_mean": ret.mean(axis=0).tolist(), "seconds": r["seconds"]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="cartpole,mpe")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--scales", default="paper",
                    help="comma list of paper (the peers' sizes) and gpu (GPU-sized batches)")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--total-steps", type=int, default=None,
                    help="env-steps per seed instead of the paper's")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    for case, scale in itertools.product(args.cases.split(","), args.scales.split(",")):
        r = compare(case, scale, args.seeds, args.backend, args.total_steps)
        rows.append(r)
        for k, v in r["layouts"].items():
            print(f"{case} {scale} {k}: to {r['threshold']:.1f}: "
                  f"{v['env_steps_to_threshold_seed_mean']:,.0f} ± "
                  f"{v['env_steps_to_threshold_ci95']:,.0f} env-steps (mean curve "
                  f"{v['env_steps_to_threshold_mean_curve']}), final "
                  f"{v['final_return_mean']:.1f} ± {v['final_return_ci95']:.1f} "
                  f"({v['seconds']:.0f} s)", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"meta": run_meta(), "cases": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
