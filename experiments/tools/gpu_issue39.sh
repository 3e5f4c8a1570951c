#!/usr/bin/env bash
# Issue 39 on one lent GPU; logs and JSON under $OUT. Run from a checkout
# holding .snap/src.tar (`git archive HEAD`, with .snap_commit inside).
#   bash experiments/tools/gpu_issue39.sh check    # fused-rollout GPU tests, compute-sanitizer
#                                                  # (memcheck, racecheck) over the fused kernel's
#                                                  # capped layouts, bench_fused_rollout, and
#                                                  # the Tag duel's profile against the jax backend
#   bash experiments/tools/gpu_issue39.sh sanitize # compute-sanitizer only
#   bash experiments/tools/gpu_issue39.sh ttr CASES SCALE
#                                                  # bench_time_to_return, 10 seeds (the peers'
#                                                  # wheels carried in .whl/ttr)
set -o pipefail
export PYTHONUNBUFFERED=1
W=/tmp/w; rm -rf $W; mkdir -p $W && tar -xf .snap/src.tar -C $W || exit 1
[ -d .whl/ttr ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --upgrade --target /tmp/site .whl/ttr/*.whl && export PYTHONPATH=/tmp/site
cd $W || exit 1
export JAXWARP_COMMIT=$(cat .snap_commit 2>/dev/null || echo unknown)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SUF=_$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -o 'H[0-9]\+' | tr 'H' 'h')
python3 -m pip install --no-build-isolation --no-deps -e . -q 2>&1 | tail -2
for e in cartpole mpe_simple_spread tag_continuous tag_gridworld; do
  jaxwarp build --backend cuda $e > /dev/null 2>&1 & done
wait
F="^W1\|bfc_alloc\|^I1"
case "$1" in
check)
  { echo "# commit $JAXWARP_COMMIT, $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
    echo "\$ python3 -m pytest -m gpu tests/test_fused_rollout.py"
    timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_fused_rollout.py 2>&1 \
      | grep -v "$F" | tail -8
  } 2>&1 | tee "$OUT/fused_checks$SUF.log"
  ;;&
check|sanitize)
  { echo "# commit $JAXWARP_COMMIT, $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
    for tool in memcheck racecheck; do
      echo "\$ compute-sanitizer --tool $tool --kernel-name kns=rollout_kernel python3 experiments/tools/fused_sanitize.py 5 6 7 3"
      timeout 200 compute-sanitizer --tool $tool --kernel-name kns=rollout_kernel \
        python3 experiments/tools/fused_sanitize.py 5 6 7 3 2>&1 | grep -v "$F" | tail -8
    done
  } 2>&1 | tee "$OUT/fused_sanitize$SUF.log" ;;
ttr)
  timeout 500 python3 experiments/bench_time_to_return.py --cases "$2" --scale "$3" --seeds 10 \
    --out "$OUT/time_to_return_${2//,/_}_$3$SUF.json" 2>&1 | grep -v "$F" | tail -30 ;;
esac
case "$1" in
check)
  timeout 300 python3 experiments/bench_fused_rollout.py \
    --out "$OUT/bench_fused_rollout$SUF.json" 2>&1 | grep -v "$F" | tail -20
  # Wall times with XLA's command buffers (the benchmark's); kernels by phase without them.
  for run in "gpu " "gpu _nocb" "paper "; do
    set -- $run; CB=(); [ -n "$2" ] && CB=(env XLA_FLAGS=--xla_gpu_enable_command_buffer=)
    timeout 300 "${CB[@]}" python3 experiments/tools/peer_profile.py --case tag --scale $1 \
      --variant default --variant step @step_by_step \
      --out "$OUT/peer_profile_tag_$1$2$SUF.json" 2>&1 | grep -v "$F" | tail -12
  done ;;
esac
