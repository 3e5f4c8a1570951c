#!/usr/bin/env bash
# The trainer's figures on one GPU: training throughput of the kernel and
# pure-JAX backends side by side (bench_train, the README's training table) and
# tag_2000_envs's learning curve over seeds (learn_compare, taggers against
# random runners, as learn_compare_ppo_h100 was first measured).
# Run from a checkout holding .snap/src.tar (`git archive HEAD`) and .snap_commit
# inside it; results under $OUT, named after the GPU (_h100, _h200).
set -o pipefail
export PYTHONUNBUFFERED=1
W=/tmp/w; mkdir -p $W && tar -xf .snap/src.tar -C $W && cd $W || exit 1
export JAXWARP_COMMIT=$(cat .snap_commit 2>/dev/null || echo unknown)
SUF=_$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -o 'H[0-9]\+' | tr 'H' 'h')
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
python3 -m pip install --no-build-isolation --no-deps -e . -q 2>&1 | tail -2
F="^W1\|bfc_alloc\|^I1\|^E1"
timeout 330 python3 experiments/bench_train.py --cases 0,2,3,6 --repeats 2 \
  --out $OUT/bench_train$SUF.json 2>&1 | grep -v "$F" | tee $OUT/bench_train$SUF.log
timeout 240 python3 experiments/learn_compare.py --config tag_2000_envs --env-steps 30000000 \
  --seeds 4 env_params.grid_length=150 policies.runner.model=uniform policies.runner.train=false \
  --variant bf16_shared --out $OUT/learn_compare_ppo$SUF 2>&1 | grep -v "$F" \
  | tee $OUT/learn_compare_ppo$SUF.log
