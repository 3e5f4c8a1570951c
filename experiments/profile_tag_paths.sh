#!/usr/bin/env bash
# Nsight Compute: the hand-written and the contract Tag step kernels at 2000
# envs (warpdrive_default), one launch each, same sections. On a GPU machine:
#   bash experiments/profile_tag_paths.sh > ncu_tag_paths.txt
set -euo pipefail
cat > /tmp/jw_prof_paths.py <<'PY'
import jax, jax.numpy as jnp
from jaxwarp.envs import tag_continuous as tc
p = tc.TagContinuousParams()
for env in (tc.TagContinuousHandWritten(p, backend="cuda"), tc.TagContinuous(p, backend="cuda")):
    o, s = env.reset(jax.random.key(0), 2000)
    a = jnp.ones((2000, env.num_agents, 2), jnp.int32)
    f = jax.jit(env.step)
    for _ in range(3):
        o, s, r, d, _ = f(jax.random.key(1), s, a)
    jax.block_until_ready(o)
PY
for k in TagKernel jaxwarp_tag_continuous_step_kernel_staged; do
  ncu --kernel-name regex:"$k" --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section InstructionStats --section MemoryWorkloadAnalysis --section SchedulerStats \
    python /tmp/jw_prof_paths.py
done
