"""Where an env step spends its GPU time: a jax.profiler trace of the
benchmark's scan (bench_contract_envs.py: random actions drawn on device,
then the step), summarised as the top device ops per backend.

    python experiments/profile_env.py mpe_simple_tag --envs 20000 --backends cuda jax
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import jax

import jaxwarp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_contract_envs import scan_of  # noqa: E402
from profile_train import summarise  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("env")
    ap.add_argument("--envs", type=int, default=20000)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--backends", nargs="+", default=["cuda", "jax"])
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    for backend in args.backends:
        env = jaxwarp.make(args.env, backend=backend)
        run = jax.jit(scan_of(env, args.envs, args.steps), donate_argnums=0)
        obs, state = jax.jit(env.reset, static_argnums=1)(jax.random.PRNGKey(0), args.envs)
        carry, out = run((state, obs), jax.random.PRNGKey(1))
        jax.block_until_ready(out)
        with tempfile.TemporaryDirectory() as d:
            with jax.profiler.trace(d):
                carry, out = run(carry, jax.random.PRNGKey(2))
                jax.block_until_ready(out)
            rows = summarise(Path(d), args.top)
        total = sum(ms for _, ms, _ in rows)
        print(f"== {args.env} {backend}, {args.envs} envs x {args.steps} steps: top ops "
              f"{total:.2f} ms ({1e3 * total / args.steps:.1f} us/step)")
        for name, ms, count in rows:
            print(f"  {ms:8.3f} ms  {count:6d}x  {1e3 * ms / max(count, 1):7.2f} us  {name[:90]}")


if __name__ == "__main__":
    main()
