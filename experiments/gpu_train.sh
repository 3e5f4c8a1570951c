#!/usr/bin/env bash
# One GPU session for the trainer: build, GPU tests (env + sampler), training
# throughput (kernel vs pure-JAX backends). Logs and JSON go to $OUT (or
# experiments/results when OUT is unset). The learning curve is a separate
# call: experiments/learn_tag.py (about 6 minutes).
set -o pipefail
OUT=${OUT:-experiments/results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -c "import jax; print(jax.__version__, jax.devices())" | tee -a "$OUT/gpu.txt"
python3 -m pip install --no-build-isolation -e . 2>&1 | tail -3 | tee "$OUT/build.log" || exit 1
python3 -m pytest -m gpu -q tests/test_train_gpu.py tests/test_sampler_gpu.py tests/test_tag_continuous_gpu.py 2>&1 | tee "$OUT/pytest_gpu.log"
python3 experiments/bench_train.py --out "$OUT/bench_train_h100.json" "$@" 2>&1 | tee "$OUT/bench_train_h100.log"
