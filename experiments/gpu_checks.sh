#!/usr/bin/env bash
# One GPU session: build, GPU tests, benchmark. Logs and JSON go to $OUT
# (or experiments/results when OUT is unset).
set -o pipefail
OUT=${OUT:-experiments/results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -c "import jax; print(jax.__version__, jax.devices())" | tee -a "$OUT/gpu.txt"
python3 -m pip install --no-build-isolation -e . 2>&1 | tail -3 | tee "$OUT/build.log" || exit 1
python3 -m pytest -m gpu -q -x "$@" 2>&1 | tee "$OUT/pytest_gpu.log"
python3 experiments/bench_env.py --variants --out "$OUT/bench_env.json" 2>&1 | tee "$OUT/bench_env.log"
