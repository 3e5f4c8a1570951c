"""Diagnostic for the open tag_gridworld CUDA bug: one step from the same reset
with every action 0, 1 and 3, on the CPU build and the CUDA build (run on a
GPU). On an H100 (nvcc 13.0, sm_90) the CUDA build moved every agent one cell
down (y - 1) in addition to the requested move unless the action was 3 (up),
while the CPU build and the reference are right. Calls the generated bindings
directly (authoring.ContractEnv), bypassing TagGridworld's refusal of "cuda".

What is known: the PTX that nvcc emits for the move (both the original
nested conditional and the current switch) is correct when read by hand, so
the fault is in ptxas's sm_90 code or at run time. Next: run this with
CUDA_FORCE_PTX_JIT=1 (driver JIT from the embedded compute_90 PTX instead of
the sm_90 SASS) and with -Xptxas -O0, and compare.

    python experiments/diag_tag_gridworld_cuda.py
"""

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp.authoring import ContractEnv
from jaxwarp.envs.tag_gridworld import SPEC, TagGridworldParams

kw = dict(num_taggers=2, grid_length=3, episode_length=25, use_full_observation=False,
          random_start=True)
for b in ("cpu", "cuda"):
    e = ContractEnv(SPEC, TagGridworldParams(**kw), backend=b)
    dev = jax.devices("gpu" if b == "cuda" else "cpu")[0]
    with jax.default_device(dev):
        obs, st = jax.jit(e.reset, static_argnums=1)(jax.random.PRNGKey(0), 4)
        print(b, "reset x", np.asarray(st.x).tolist(), "y", np.asarray(st.y).tolist())
        for v in (0, 1, 3):
            a = jnp.full((4, 3, 1), v, jnp.int32)
            o2, st2, r, d, info = jax.jit(e.step)(jax.random.PRNGKey(1), st, a)
            print(b, v, "x", np.asarray(st2.x).tolist(), "y", np.asarray(st2.y).tolist(),
                  "wall", np.asarray(st2.wall_hit).tolist(), "done", np.asarray(d).tolist(),
                  flush=True)
