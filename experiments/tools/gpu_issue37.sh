#!/usr/bin/env bash
# Issue 37 on the lent GPUs, in two device calls; logs and JSON under $OUT.
#   bash experiments/tools/gpu_issue37.sh single  # one GPU: exit lines, determinism tests,
#                                                 # the cost of determinism
#   bash experiments/tools/gpu_issue37.sh multi   # two GPUs: multi-GPU tests, determinism
#                                                 # and exit checks, env and training scaling
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
F="^W1\|bfc_alloc\|^I1"
case "$1" in
single)
  export CUDA_VISIBLE_DEVICES=0
  python3 experiments/tools/exit_check.py --out "$OUT/exit_check$SUF.json" 2>&1 | tee "$OUT/log"
  $T tests/test_train_gpu.py tests/test_compile.py 2>&1 | grep -v "$F" \
    | tee "$OUT/pytest_determinism$SUF.log" | tail -15
  timeout 200 python3 experiments/bench_scaling.py --part train --devices 1 --rounds 7 \
    --configs tag_2000_envs tag_warpdrive_default tag_100_agents \
    --out "$OUT/determinism_cost$SUF.json" 2>&1 | grep -v "$F" | tee -a "$OUT/log"
  ;;
multi)
  # Tests (no timings): both GPUs, and GPU 1 alone beside them (nothing preallocated).
  ( export XLA_PYTHON_CLIENT_PREALLOCATE=false
    $T tests/test_multi_gpu.py tests/test_sampler_gpu.py -k "two_gpus or sharded" 2>&1 \
      | grep -v "$F" > "$OUT/pytest_multi_gpu${SUF}x2.log" &
    ( export CUDA_VISIBLE_DEVICES=1
      $T tests/test_train_gpu.py -k "same_command or resumed" 2>&1 | grep -v "$F" \
        > "$OUT/pytest_determinism$SUF.log"
      # deterministic=false, the same command twice: do the metrics differ?
      for i in 0 1; do jaxwarp train --config tag_duel_cpu total_env_steps=400000 \
        deterministic=false --no-progress --eval-episodes 0 --out /tmp/nd$i > /dev/null 2>&1; done
      python3 -c "
import csv; r = [list(csv.DictReader(open(f'/tmp/nd{i}/metrics.csv'))) for i in (0, 1)]
keys = [k for k in r[0][0] if k not in ('env_steps_per_s', 'wall_s')]
diff = [(a['update'], k) for a, b in zip(*r) for k in keys if a[k] != b[k]]
print('deterministic=false twice, tag_duel_cpu total_env_steps=400000:', len(r[0]), 'rows,',
      len(diff), 'differing values, first', diff[:3])" ) > "$OUT/nondet_pair.log" 2>&1 &
    wait )
  tail -n 4 "$OUT/pytest_multi_gpu${SUF}x2.log" "$OUT/pytest_determinism$SUF.log" "$OUT/nondet_pair.log"
  CUDA_VISIBLE_DEVICES=0 python3 experiments/tools/exit_check.py --out "$OUT/exit_check$SUF.json" \
    --only train_cli train_beside_holder train_beside_holder_no_prealloc 2>&1 | tee "$OUT/log"
  timeout 200 python3 experiments/bench_scaling.py --part env --rounds 7 \
    --only mpe_simple_spread tag_continuous cartpole \
    --out "$OUT/scaling_env${SUF}x2.json" 2>&1 | grep -v "$F" | tee -a "$OUT/log"
  timeout 150 python3 experiments/bench_scaling.py --part train --configs tag_2000_envs \
    --rounds 7 --out "$OUT/scaling_train${SUF}x2.json" 2>&1 | grep -v "$F" | tee -a "$OUT/log"
  ;;
esac
