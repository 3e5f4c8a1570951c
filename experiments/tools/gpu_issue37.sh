#!/usr/bin/env bash
# Issue 37 on the lent GPUs, in two device calls; logs and JSON under $OUT.
#   bash experiments/tools/gpu_issue37.sh single  # one GPU: exit lines, determinism tests,
#                                                 # the cost of determinism
#   bash experiments/tools/gpu_issue37.sh multi   # two GPUs: multi-GPU tests, env and
#                                                 # training weak scaling
set -o pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export JAXWARP_COMMIT=${JAXWARP_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SUF=_$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -o 'H[0-9]\+' | tr 'H' 'h')
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import jax; print(jax.__version__, jax.devices())"; } 2>&1 | tee "$OUT/gpu.txt"
python3 -m pip install --no-build-isolation --no-deps -e . -q 2>&1 | tail -2
# Every contract env's CUDA library into the cache, in parallel (first use would build them).
for e in cartpole acrobot pendulum mountain_car mpe_simple_spread mpe_simple_tag \
         tag_gridworld tag_continuous; do jaxwarp build --backend cuda $e > /dev/null 2>&1 & done
wait
T="python3 -m pytest -m gpu -q -p no:cacheprovider"
case "$1" in
single)
  export CUDA_VISIBLE_DEVICES=0
  python3 experiments/tools/exit_check.py --out "$OUT/exit_check$SUF.json" 2>&1 | tee "$OUT/log"
  $T tests/test_train_gpu.py tests/test_compile.py 2>&1 | grep -v "^W1\|bfc_alloc\|^I1" \
    | tee "$OUT/pytest_determinism$SUF.log" | tail -15
  timeout 200 python3 experiments/bench_scaling.py --part train --devices 1 --rounds 7 \
    --configs tag_2000_envs tag_warpdrive_default tag_100_agents \
    --out "$OUT/determinism_cost$SUF.json" 2>&1 | grep -v "^W1\|bfc_alloc" | tee -a "$OUT/log"
  ;;
multi)
  $T tests/test_multi_gpu.py tests/test_sampler_gpu.py -k "two_gpus or sharded" 2>&1 \
    | grep -v "^W1\|bfc_alloc\|^I1" | tee "$OUT/pytest_multi_gpu${SUF}x2.log" | tail -15
  python3 experiments/bench_scaling.py --part env --out "$OUT/scaling_env${SUF}x2.json" 2>&1 \
    | grep -v "^W1\|bfc_alloc" | tee "$OUT/log"
  python3 experiments/bench_scaling.py --part train --configs tag_2000_envs \
    --out "$OUT/scaling_train${SUF}x2.json" 2>&1 | grep -v "^W1\|bfc_alloc" | tee -a "$OUT/log"
  ;;
esac
