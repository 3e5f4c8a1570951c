"""One jitted Tag step at 2000 envs for Nsight Compute, from a state reached by
`--warm` protocol-action steps (taggers have caught runners: the state a
benchmark loop spends its time in):

    ncu --kernel-name regex:step_kernel --launch-skip 302 --launch-count 1 \\
        python experiments/profile_tag_step.py --config large --warm 300

(with --warm W, skip W + 2 launches: the rollout's W steps run first).
"""
import argparse

import jax
import jax.numpy as jnp

from bench_tag_paths import make_env, rollout_fn  # same folder

ap = argparse.ArgumentParser()
ap.add_argument("--kind", default="contract", choices=["contract", "contract_grid"])
ap.add_argument("--config", default="warpdrive_default")
ap.add_argument("--envs", type=int, default=2000)
ap.add_argument("--warm", type=int, default=0)
args = ap.parse_args()
env = make_env(args.kind, args.config)
o, s = env.reset(jax.random.key(0), args.envs)
if args.warm:
    s, o, _, _ = jax.jit(rollout_fn(env, args.envs, args.warm, True))(s, o, jax.random.key(2),
                                                                      jnp.int32(0))
a = jnp.ones((args.envs, env.num_agents, 2), jnp.int32)
f = jax.jit(env.step)
for _ in range(3):
    o, s, r, d, _ = f(jax.random.key(1), s, a)
jax.block_until_ready(o)
print("agents in game:", float(s.still_in_game.mean()))
