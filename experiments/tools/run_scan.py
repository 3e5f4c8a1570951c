"""Runs bench_contract_envs' protocol scan of one env a few times (for ncu)."""
import sys
from pathlib import Path

import jax

import jaxwarp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench_contract_envs import scan_of  # noqa: E402

name, envs, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
backend = sys.argv[4] if len(sys.argv) > 4 else "cuda"
env = jaxwarp.make(name, backend=backend)
obs, state = jax.jit(env.reset, static_argnums=1)(jax.random.PRNGKey(0), envs)
run = jax.jit(scan_of(env, envs, steps), donate_argnums=0)
carry = (state, obs)
for i in range(2):
    carry, out = run(carry, jax.random.PRNGKey(i))
jax.block_until_ready(out)
