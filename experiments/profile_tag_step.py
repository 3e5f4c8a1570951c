"""One jitted Tag step at 2000 envs (warpdrive_default, large) for Nsight Compute:

    ncu --kernel-name regex:step_kernel --launch-skip 2 --launch-count 1 python experiments/profile_tag_step.py
"""
import jax
import jax.numpy as jnp
from jaxwarp.envs import tag_continuous as tc
for cfg, E in (("warpdrive_default", 2000), ("large", 2000)):
    env = tc.TagContinuous(tc.TagContinuousParams(**tc.CONFIGS[cfg]), backend="cuda")
    o, s = env.reset(jax.random.key(0), E)
    a = jnp.zeros((E, env.num_agents, 2), jnp.int32)
    f = jax.jit(env.step)
    for _ in range(3):
        o, s, r, d, _ = f(jax.random.key(1), s, a)
    jax.block_until_ready(o)
