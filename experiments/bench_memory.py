"""Is memory learned? A recurrent policy against a feed-forward one on the
partially observed CartPole (``hide_velocities``: x_dot and theta_dot read as 0),
at the same budget and hyperparameters, several seeds in one program each.

The GRU model (``model: gru``) can infer the velocities from the positions it
has seen; the MLP cannot. The MLP on the fully observed CartPole is the ceiling.
Figure: the mean episode return over the last 10% of updates, per seed, then
mean and 95% t interval over seeds.

    python experiments/bench_memory.py --seeds 8 --steps 500000 \
        --out experiments/results/memory_cartpole_h100.json
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import jax
import numpy as np

from jaxwarp.benchmark import run_meta
from jaxwarp.train import jit, load_config, make_train

CASES = {
    # name: (model overrides, hide velocities)
    "mlp_hidden": (["policies.agent.model=mlp"], True),
    "gru_hidden": (["policies.agent.model=gru", "policies.agent.hidden_sizes=[64]",
                    "policies.agent.rnn_size=64", "policies.agent.activation=tanh"], True),
    "mlp_full": (["policies.agent.model=mlp"], False),
}


def t95(n: int) -> float:
    """Two-sided 95% Student t quantile for n - 1 degrees of freedom."""
    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365,
             8: 2.306, 9: 2.262, 10: 2.228, 15: 2.131, 20: 2.086, 30: 2.042}
    k = n - 1
    return table.get(k) or table[max(d for d in table if d <= k)] if k >= 1 else math.nan


def run_case(name: str, seeds: int, steps: int, backend: str) -> dict:
    overrides, hidden = CASES[name]
    c = load_config("cartpole_ppo", [*overrides, f"total_env_steps={steps}",
                                     f"backend={backend}",
                                     f"env_params.hide_velocities={str(hidden).lower()}"])
    train = jit(jax.vmap(make_train(c)), c.deterministic, members=seeds)  # as `--seeds` runs it
    keys = jax.numpy.stack([jax.random.PRNGKey(s) for s in range(seeds)])
    t = time.perf_counter()
    compiled = train.lower(keys).compile()
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    _, m = compiled(keys)
    ret = np.asarray(jax.device_get(m["agent/episode_return"]))  # [seeds, updates]
    run_s = time.perf_counter() - t
    tail = ret[:, -max(1, ret.shape[1] // 10):].mean(axis=1)
    half = t95(seeds) * tail.std(ddof=1) / math.sqrt(seeds) if seeds > 1 else math.nan
    return {"case": name, "hide_velocities": hidden, "overrides": overrides,
            "env_steps": steps, "seeds": seeds, "final_return_per_seed": tail.tolist(),
            "final_return_mean": float(tail.mean()), "final_return_ci95": float(half),
            "compile_s": compile_s, "run_s": run_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=500_000)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    for name in args.cases.split(","):
        row = run_case(name, args.seeds, args.steps, args.backend)
        rows.append(row)
        print(f"{name}: {row['final_return_mean']:.1f} +- {row['final_return_ci95']:.1f} "
              f"(seeds {args.seeds}, {args.steps} env-steps, run {row['run_s']:.1f} s)",
              flush=True)
    result = {"meta": run_meta(), "rows": rows}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
