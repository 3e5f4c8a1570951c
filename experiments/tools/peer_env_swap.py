"""MPE's sample-efficiency gap: the env or the trainer? The pure-JAX IPPO peer
(`experiments/ippo_reference.py`, as `bench_time_to_return.py` runs it) on
JaxMARL's MPE and on jaxwarp's (the env of the trainer's `mpe_simple_spread_ppo`
config, a chosen backend), the same seeds, hyperparameters and fixed threshold;
per run the updates to the threshold, seed-mean curve and per seed (mean ± 95%
interval). Env-steps do not depend on the device, so a CPU serves.

    python experiments/tools/peer_env_swap.py --scale gpu --total-steps 3276800 \\
        --threshold -22.9 --backend cpu --out /tmp/peer_env_swap.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_time_to_return as ttr  # noqa: E402
import ippo_reference  # noqa: E402

from jaxwarp.benchmark import run_meta  # noqa: E402


def jaxwarp_venv(hp: dict, backend: str) -> ippo_reference.VecEnv:
    """jaxwarp's MPE as the peer's VecEnv (the trainer's env for the case's overrides)."""
    from jaxwarp.train import build_trainer, load_config

    overrides = ttr.jaxwarp_overrides("mpe", hp, backend, 0)
    env = build_trainer(load_config(ttr.CASES["mpe"]["jaxwarp_config"], overrides)).env

    def step(key, state, actions):
        obs, state, reward, done = env.step(key, state, actions[..., None])[:4]
        return obs, state, reward, done

    return ippo_reference.VecEnv(f"jaxwarp mpe_simple_spread ({backend})", env.num_agents,
                                 env.obs_dim, int(env.action_space.nvec[0]), env.reset, step)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="gpu", choices=("paper", "gpu"))
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--total-steps", type=int, default=None)
    ap.add_argument("--threshold", type=float, required=True)
    ap.add_argument("--backend", default="cpu", choices=("cpu", "cuda", "jax"))
    ap.add_argument("--envs", default="jaxmarl,jaxwarp", help="comma list of jaxmarl, jaxwarp")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    hp = ttr.hyperparameters("mpe", args.scale, args.total_steps)
    _, config, _ = ttr.peer_train("mpe", hp)
    keys = jax.numpy.stack([jax.random.PRNGKey(i) for i in range(args.seeds)])
    res = {"meta": run_meta(seeds=args.seeds),
           "hyperparameters": hp, "threshold": args.threshold, "runs": {}}
    for name in args.envs.split(","):
        venv = ippo_reference.jaxmarl_env("MPE_simple_spread_v3") if name == "jaxmarl" \
            else jaxwarp_venv(hp, args.backend)
        compile_s, run_s, (_, metrics) = ttr._timed(ippo_reference.make_train(config, venv), keys)
        run = {"num_updates": config.num_updates, "run_s": run_s, "num_envs": config.num_envs,
               "batch_env_steps": config.num_envs * config.num_steps,
               "episodes": np.asarray(metrics["episodes"], np.float64)}
        returns = np.asarray(metrics["episode_return"], np.float64)
        to = ttr.time_to(run, returns, args.threshold)
        per_update = run_s / config.num_updates
        secs = to["per_seed_seconds"]
        res["runs"][name] = {
            "env": venv.name, "updates_to_threshold": to["updates"],
            "per_seed_updates": {k: (v / per_update if isinstance(v, float) else v)
                                 for k, v in secs.items() if k in ("mean", "ci95")},
            "seeds_reached": to["seeds_reached"],
            "final_return": ttr.mean_ci(ttr.final_per_seed(returns)),
            "compile_s": compile_s, "run_s": run_s}
        print(name, json.dumps(res["runs"][name]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
