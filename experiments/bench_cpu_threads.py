"""The `cpu` backend on 1 core and on all cores (issue: CPU backend on every core).

The XLA:CPU handlers split envs over XLA's own FFI thread pool; its size
follows the cores the process may use. This script times a jitted
`lax.scan` of random actions + env steps for a few envs, and, run with
`--all`, re-runs itself pinned to one core (`taskset -c 0`) and on every
core, writing both to JSON.

    python experiments/bench_cpu_threads.py --all --out experiments/results/bench_cpu_threads.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

CASES = [("tag_continuous", 256, 10), ("mpe_simple_spread", 8192, 20), ("cartpole", 65536, 20)]


def measure() -> list[dict]:
    import jax
    import jax.numpy as jnp

    import jaxwarp

    rows = []
    for name, envs, steps in CASES:
        env = jaxwarp.make(name, backend="cpu")
        _, state = jax.jit(env.reset, static_argnums=1)(jax.random.key(0), envs)

        @jax.jit
        def run(state, key, env=env, envs=envs, steps=steps):
            def body(c, k):
                state, acc = c
                a = env.action_space.sample(k, (envs, env.num_agents))
                _, state, r, _, _ = env.step(k, state, a)
                return (state, acc + r.sum()), None
            return jax.lax.scan(body, (state, jnp.float32(0)), jax.random.split(key, steps))[0]

        jax.block_until_ready(run(state, jax.random.key(1)))
        best = min(_timed(run, state, jax.random.key(i)) for i in range(3))
        rate = envs * steps / best
        rows.append(dict(env=name, num_envs=envs, steps=steps, num_agents=env.num_agents,
                         cores=len(os.sched_getaffinity(0)), env_steps_per_s=rate,
                         agent_steps_per_s=rate * env.num_agents))
    return rows


def _timed(run, state, key) -> float:
    import jax

    t0 = time.perf_counter()
    jax.block_until_ready(run(state, key))
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--all", action="store_true", help="1 core, then every core")
    ap.add_argument("--out", default="experiments/results/bench_cpu_threads.json")
    args = ap.parse_args()
    if not args.all:
        print(json.dumps(measure()))
        return
    results = []
    for pin in (["taskset", "-c", "0"], []):
        out = subprocess.run([*pin, sys.executable, __file__], capture_output=True, text=True,
                             check=True).stdout.strip().splitlines()[-1]
        results += json.loads(out)
    from jaxwarp.units import rate_text

    machine = f"{os.cpu_count()}-core CPU (this project's CI class)"

    def cpu(cores: int) -> str:
        return f"cpu, {cores} of {os.cpu_count()} cores"

    for r in results:
        print(f"{r['env']:18s} envs={r['num_envs']:6d} cores={r['cores']} "
              f"{rate_text(r['env_steps_per_s'], r['num_agents'], cpu(r['cores']))}")
    with open(args.out, "w") as f:
        json.dump(dict(machine=machine, results=results), f, indent=1)


if __name__ == "__main__":
    main()
