"""Launch-model ablation: the same Tag kernels, stepped from a Python loop with
a device sync every step (WarpDrive's execution model: one launch per step
from Python, then wait) versus fused in one XLA program (`lax.scan` over the
FFI custom call, no host round trip). Same GPU, same configuration, same
kernels, side by side in one process.

The per-step path dispatches the jitted step (the FFI custom call plus the
on-device action sampling) from Python and calls `block_until_ready` after
each step, as a PyCUDA loop that launches and synchronises would; PyCUDA
itself is not used here (it is not installed on our GPU machine).

    python experiments/ablation_launch.py --out experiments/results/ablation_launch_h100.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax

import jaxwarp

CASES = [("warpdrive_default", 100), ("warpdrive_default", 2000), ("large", 500)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--out", default="experiments/results/ablation_launch.json")
    args = ap.parse_args()
    results = []
    for config, num_envs in CASES:
        env = jaxwarp.make("tag_continuous", backend=args.backend, config=config)
        shape = (num_envs, env.num_agents)

        def one_step(state, key):
            k1, k2 = jax.random.split(key)
            actions = env.action_space.sample(k1, shape)
            obs, state, reward, done, _ = env.step(k2, state, actions)
            return state, obs

        step = jax.jit(one_step, donate_argnums=0)
        def fused_body(s, k):  # keep one number per step, not [steps, envs, agents, obs]
            s, obs = one_step(s, k)
            return s, obs[0, 0, 0]

        fused = jax.jit(lambda s, k: jax.lax.scan(fused_body, s, jax.random.split(k, args.steps)),
                        donate_argnums=0)
        _, state = jax.jit(env.reset, static_argnums=1)(jax.random.PRNGKey(0), num_envs)
        keys = jax.random.split(jax.random.PRNGKey(1), args.steps)

        state, obs = step(state, keys[0])  # warm-up / compile
        jax.block_until_ready(obs)
        t = time.perf_counter()
        for k in keys:
            state, obs = step(state, k)
            jax.block_until_ready(obs)  # the per-step sync
        per_step = time.perf_counter() - t

        state, obs = fused(state, jax.random.PRNGKey(2))  # warm-up / compile
        jax.block_until_ready(obs)
        t = time.perf_counter()
        state, obs = fused(state, jax.random.PRNGKey(3))
        jax.block_until_ready(obs)
        fused_s = time.perf_counter() - t

        r = {"config": config, "num_envs": num_envs, "backend": env.backend,
             "steps": args.steps,
             "python_loop_env_steps_per_s": num_envs * args.steps / per_step,
             "fused_env_steps_per_s": num_envs * args.steps / fused_s,
             "python_loop_us_per_step": 1e6 * per_step / args.steps,
             "fused_us_per_step": 1e6 * fused_s / args.steps}
        r["fused_over_loop"] = r["fused_env_steps_per_s"] / r["python_loop_env_steps_per_s"]
        results.append(r)
        print(f"{config:18s} {num_envs:5d} envs: python loop + sync "
              f"{r['python_loop_us_per_step']:8.1f} us/step, fused "
              f"{r['fused_us_per_step']:8.1f} us/step -> {r['fused_over_loop']:.1f}x", flush=True)
    meta = {"device": jax.devices()[0].device_kind, "jax": jax.__version__,
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
