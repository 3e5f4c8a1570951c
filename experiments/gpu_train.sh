#!/usr/bin/env bash
# GPU session for the trainer, in two parts that each fit a 10-minute call.
#   bash experiments/gpu_train.sh checks   # build, GPU tests, sampler bench, profile, CLI run
#   bash experiments/gpu_train.sh bench [CASES]  # training throughput, kernel vs pure-JAX
#                                                # backends (CASES: e.g. 0,1,2,3)
#   bash experiments/gpu_train.sh authoring    # user-env contract: GPU tests, env throughput
#   bash experiments/gpu_train.sh envs-tests   # GPU tests of the contract envs and PyCUDA bridge
#   bash experiments/gpu_train.sh ablation     # launch model: Python loops (jax, PyCUDA) vs fused
#   bash experiments/gpu_train.sh envs-bench   # contract envs vs references/upstream; PPO runs
# The learning curve is experiments/learn_tag.py (about 6 minutes).
# Logs and JSON go to $OUT (or experiments/results when OUT is unset).
set -o pipefail
OUT=${OUT:-experiments/results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install --no-build-isolation -e . 2>&1 | tail -1
case "${1:-checks}" in
checks)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
  python3 -m pytest -m gpu -q tests/test_sampler_gpu.py tests/test_train_gpu.py \
    tests/test_tag_continuous_gpu.py 2>&1 | tee "$OUT/pytest_gpu_h100.log" | tail -3
  python3 experiments/bench_sampler.py --out "$OUT/bench_sampler_h100.json" 2>&1 \
    | tee "$OUT/bench_sampler_h100.log"
  python3 experiments/profile_train.py --config tag_warpdrive_default num_envs=2000 \
    num_steps=50 num_minibatches=10 policies.tagger.dtype=bfloat16 \
    policies.runner.dtype=bfloat16 --updates 1 --top 30 --out /tmp/jaxwarp_prof 2>&1 \
    | grep -v "^W1\|bfc_alloc" > "$OUT/profile_train_2000envs_bf16_h100.txt"
  head -8 "$OUT/profile_train_2000envs_bf16_h100.txt"
  rm -rf /tmp/jaxwarp_cli_run
  timeout 150 jaxwarp train --config tag_warpdrive_default --no-progress \
    total_env_steps=3000000 chunk_updates=50 checkpoint_every=100 \
    --out /tmp/jaxwarp_cli_run 2>&1 | tail -3 | tee "$OUT/cli_run_h100.log"
  ls /tmp/jaxwarp_cli_run | tee -a "$OUT/cli_run_h100.log"
  ;;
bench)
  python3 experiments/bench_train.py --repeats 2 --out "$OUT/bench_train_h100${2:+_${2//,/-}}.json" \
    ${2:+--cases $2} 2>&1 \
    | grep -v "^W1\|bfc_alloc" | tee "$OUT/bench_train_h100${2:+_${2//,/-}}.log"
  ;;
authoring)
  python3 -m pytest -m gpu -q tests/test_authoring_gpu.py 2>&1 \
    | tee "$OUT/pytest_authoring_gpu_h100.log" | tail -3
  python3 experiments/bench_contract_envs.py --out "$OUT/bench_contract_envs_h100.json" 2>&1 \
    | tee "$OUT/bench_contract_envs_h100.log"
  ;;
envs-tests)
  # PyCUDA's tests skip without it. Where pip can reach PyPI, `pip install
  # -e ".[pycuda]"` suffices. Our GPU machine has no network, so a cp312 wheel
  # was built on a CPU machine with CUDA 13 (configure.py --cuda-root=/usr/local/cuda
  # --no-cuda-enable-curand, an empty stub libcuda.so to link against, then
  # `patchelf --add-needed libcuda.so.1` on pycuda/_driver*.so) and installed
  # with pytools, platformdirs, mako, markupsafe and siphash24 into
  # .device_pkgs_pycuda (`pip install --target`).
  PYTHONPATH=.device_pkgs_pycuda python3 -m pytest -m gpu -q tests/test_authoring_gpu.py \
    tests/test_tag_gridworld.py tests/test_mpe.py tests/test_classic_control_kernels.py \
    tests/test_pycuda_bridge.py 2>&1 | tee "$OUT/pytest_envs_gpu_h100.log" | tail -3
  ;;
ablation)
  python3 experiments/ablation_launch.py --out "$OUT/ablation_launch_h100.json" 2>&1 \
    | tee "$OUT/ablation_launch_h100.log"
  PYTHONPATH=.device_pkgs_pycuda python3 experiments/ablation_launch.py --pycuda \
    --out "$OUT/ablation_pycuda_h100.json" 2>&1 | tee "$OUT/ablation_pycuda_h100.log"
  ;;
envs-bench)
  # gymnax and JaxMARL as baselines: their wheels travel in .whl (carry it;
  # `pip download --no-deps` as the device README says) and install here.
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  PYTHONPATH=/tmp/site python3 experiments/bench_contract_envs.py \
    --out "$OUT/bench_contract_envs_h100.json" 2>&1 | grep -v "Submoduled\|Importing sub" \
    | tee "$OUT/bench_contract_envs_h100.log"
  for cfg in cartpole_ppo mpe_simple_spread_ppo; do
    rm -rf "/tmp/jaxwarp_$cfg"
    t0=$(date +%s)
    jaxwarp train --config $cfg --no-progress --out "/tmp/jaxwarp_$cfg" 2>&1 | tail -3 \
      | tee "$OUT/train_${cfg}_h100.log"
    echo "$cfg: wall $(( $(date +%s) - t0 )) s, process start and compile included" \
      | tee -a "$OUT/train_${cfg}_h100.log"
    cp "/tmp/jaxwarp_$cfg/metrics.csv" "$OUT/train_${cfg}_h100_metrics.csv"
  done
  ;;
esac
