"""One jitted Tag step at 2000 envs for Nsight Compute, from a state reached by
`--warm` protocol-action steps (taggers have caught runners: the state a
benchmark loop spends its time in):

    ncu --kernel-name regex:step_kernel --launch-skip 302 --launch-count 1 \\
        python experiments/profile_tag_step.py --config large --warm 300

(with --warm W, skip W + 2 launches: the rollout's W steps run first).
`experiments/tools/ncu_lines.py` turns the report's source page into the lines
with the most stall samples.
"""
import argparse

import jax
import jax.numpy as jnp

from jaxwarp.benchmark import protocol_actions
from jaxwarp.envs import tag_continuous as tc


def make_env(kind: str, config: str):
    """Tag on the cuda backend; ``contract_grid``: the grid search at any size."""
    params = tc.TagContinuousParams(**tc.CONFIGS[config])
    if kind == "contract_grid":  # same lists as the scan
        saved, tc.GRID_MIN_AGENTS = tc.GRID_MIN_AGENTS, 1  # read when the env is made
        try:
            return tc.TagContinuous(params, backend="cuda")
        finally:
            tc.GRID_MIN_AGENTS = saved
    return tc.TagContinuous(params, backend="cuda")


def warm_rollout(env, num_envs: int, steps: int):
    """`steps` env steps with the protocol's actions (a hash of the previous observations)."""
    nvec = env.action_space.nvec

    def rollout(state, obs, key):
        def body(carry, t):
            state, obs, key = carry
            key, k_step = jax.random.split(key)
            a = protocol_actions(t, obs, nvec, (num_envs, env.num_agents))
            obs, state, _, _, _ = env.step(k_step, state, a)
            return (state, obs, key), None

        (state, obs, _), _ = jax.lax.scan(body, (state, obs, key),
                                          jnp.arange(steps, dtype=jnp.int32))
        return state, obs

    return rollout


ap = argparse.ArgumentParser()
ap.add_argument("--kind", default="contract", choices=["contract", "contract_grid"])
ap.add_argument("--config", default="warpdrive_default")
ap.add_argument("--envs", type=int, default=2000)
ap.add_argument("--warm", type=int, default=0)
args = ap.parse_args()
env = make_env(args.kind, args.config)
o, s = env.reset(jax.random.key(0), args.envs)
if args.warm:
    s, o = jax.jit(warm_rollout(env, args.envs, args.warm))(s, o, jax.random.key(2))
a = jnp.ones((args.envs, env.num_agents, 2), jnp.int32)
f = jax.jit(env.step)
for _ in range(3):
    o, s, r, d, _ = f(jax.random.key(1), s, a)
jax.block_until_ready(o)
print("agents in game:", float(s.still_in_game.mean()))
