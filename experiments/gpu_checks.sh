#!/usr/bin/env bash
# One GPU session in parts that each fit a 10-minute device call: build, GPU
# tests (two halves), benchmarks. Logs and JSON go to $OUT (or
# experiments/results when OUT is unset).
#   bash experiments/gpu_checks.sh tests-a   # conformance, authoring, classic control, MPE
#   bash experiments/gpu_checks.sh tests-b   # Tag, gridworld, sampler, trainer, adapters, PyCUDA
#   bash experiments/gpu_checks.sh bench     # Tag kernels side by side, env benchmark
set -o pipefail
OUT=${OUT:-experiments/results}
PART=${1:-tests-a}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -c "import jax; print(jax.__version__, jax.devices())" | tee -a "$OUT/gpu.txt"
python3 -m pip install --no-build-isolation -e . 2>&1 | tail -3 | tee "$OUT/build.log" || exit 1
case "$PART" in
  tests-a)
    python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_conformance.py \
      tests/test_authoring_gpu.py tests/test_classic_control_kernels.py tests/test_mpe.py \
      2>&1 | tee "$OUT/pytest_gpu_a.log" ;;
  tests-b)
    python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_tag_continuous_gpu.py \
      tests/test_tag_gridworld.py tests/test_sampler_gpu.py tests/test_train_gpu.py \
      tests/test_adapters_gpu.py tests/test_pycuda_bridge.py 2>&1 | tee "$OUT/pytest_gpu_b.log" ;;
  bench)
    (cd experiments && python3 bench_tag_paths.py --out "$OUT/bench_tag_paths.json") 2>&1 \
      | tee "$OUT/bench_tag_paths.log"
    python3 experiments/bench_env.py --out "$OUT/bench_env.json" 2>&1 | tee "$OUT/bench_env.log" ;;
  *) echo "gpu_checks.sh: error: unknown part '$PART' (tests-a, tests-b, bench)" >&2; exit 2 ;;
esac
