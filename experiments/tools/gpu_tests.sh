#!/usr/bin/env bash
# Every GPU test (`pytest -m gpu`) in eight processes at once (no preallocation,
# so they share a GPU's memory; GPUS="1 2 3" deals them over those GPUs, one
# GPU by default), compute-sanitizer over every env kernel (`sanitize`), over
# the fused rollout's cases (`fused`) and over the Mosaic GPU forward's cases
# (`mosaic`: memcheck, racecheck, synccheck, initcheck; about 2 minutes on one
# H200), or all of them after one build (`all`: about 20 minutes on one H200 by
# its parts, more than one 600 s device call, not yet run whole: build 36 s, sanitize
# 54 s, the tests past 500 s (group 6, the trainer's, the longest: 16 of its 17 tests in
# 440 s at bdfbb33), the fused cases about 2 minutes, mosaic about 2, ppo a process per
# tool and case). Run from a checkout holding
# .snap/src.tar (`git archive HEAD`, with .snap_commit inside); logs under $OUT.
# Nothing here runs beside anything else on the GPU: a process that preallocates
# leaves the others out of memory.
#   bash experiments/tools/gpu_tests.sh all
#   bash experiments/tools/gpu_tests.sh tests | sanitize | fused | mosaic | ppo
set -o pipefail
export PYTHONUNBUFFERED=1
W=/tmp/w; mkdir -p $W && tar -xf .snap/src.tar -C $W && cd $W || exit 1
export JAXWARP_COMMIT=$(cat .snap_commit 2>/dev/null || echo unknown)
SUF=_$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -o 'H[0-9]\+' | tr 'H' 'h')
# JAXWARP_INSTALLED=1: /tmp/w is already built and installed (by the caller)
[ -n "${JAXWARP_INSTALLED:-}" ] || python3 -m pip install --no-build-isolation --no-deps -e . -q 2>&1 | tail -2
if [ "$1" = all ]; then
  for part in sanitize fused mosaic ppo tests; do
    ( cd "$OLDPWD" && JAXWARP_INSTALLED=1 bash experiments/tools/gpu_tests.sh $part )
  done
  exit
fi
case "$1" in
tests)
  export XLA_PYTHON_CLIENT_PREALLOCATE=false
  # The log: one part per process, "==> groupN <==" then "$ command"
  # (experiments/report.py reads the parts).
  T="python -m pytest -m gpu -q -p no:cacheprovider"
  G=("tests/test_conformance.py -k \"tag_ or mpe\""
     "tests/test_conformance.py -k \"not (tag_ or mpe)\""
     "tests/test_authoring_gpu.py tests/test_classic_control_kernels.py tests/test_mpe.py tests/test_pycuda_bridge.py"
     "tests/test_tag_continuous_gpu.py tests/test_tag_continuous.py tests/test_tag_gridworld.py tests/test_fused_rollout.py"
     "tests/test_sampler_gpu.py tests/test_adapters_gpu.py"
     # alone: its runs of the CLI twice over took it past 500 s beside the sampler's
     "tests/test_train_gpu.py"
     # not marked gpu: on a GPU these run the Pallas kernels themselves, on a CPU their interpreter
     "tests/test_mlp_kernel.py -m \"gpu or not gpu\"")
  # The rest: every other test file's gpu tests (a new file needs no edit here).
  REST="tests"
  for f in $(printf '%s\n' "${G[@]}" | grep -o 'tests/test_[a-z0-9_]*\.py' | sort -u); do
    REST="$REST --ignore=$f"
  done
  G+=("$REST")
  read -ra GS <<< "${GPUS:-}"
  for g in $(seq ${#G[@]}); do
    if [ ${#GS[@]} -gt 0 ]; then export CUDA_VISIBLE_DEVICES=${GS[$(( (g - 1) % ${#GS[@]} ))]}; fi
    eval "python3 ${T#python } ${G[$((g - 1))]}" > $OUT/g$g.log 2>&1 &
  done
  unset CUDA_VISIBLE_DEVICES
  wait
  { echo "# commit $JAXWARP_COMMIT, $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), jax $(python3 -c 'import jax; print(jax.__version__)')"
    WHERE="on one GPU"; [ -n "${GPUS:-}" ] && WHERE="dealt over GPUs $GPUS"
    echo "# ${GPUS:+GPUS=\"$GPUS\" }bash experiments/tools/gpu_tests.sh tests (pytest processes at once, $WHERE)"
    for g in $(seq ${#G[@]}); do
      echo "==> group$g <=="; echo "\$ $T ${G[$((g - 1))]}"
      grep -v "^W1\|bfc_alloc\|^I1" $OUT/g$g.log
    done
  } > $OUT/pytest_gpu$SUF.log
  grep -h "passed\|failed\|error" $OUT/g?.log | grep -v "^W1" | tail -10 ;;
sanitize)
  JAXWARP_NVCC_FLAGS=-lineinfo timeout 560 python3 experiments/sanitize_kernels.py --jobs 12 \
    --out $OUT/sanitize_kernels$SUF.json 2>&1 | tail -25 ;;
fused)
  # One process per case and tool, four at a time, no preallocation. A line per run:
  # clean, reports, or the sanitizer's own crash (on the H200 at 3e2c39c about half
  # of these processes died by SIGSEGV before or while running their case, at random:
  # a case that crashed under one tool ran clean under the other).
  export XLA_PYTHON_CLIENT_PREALLOCATE=false
  N=$(python3 experiments/tools/fused_sanitize.py --count)
  LOG=$OUT/fused_sanitize$SUF.log
  echo "# commit $JAXWARP_COMMIT; compute-sanitizer --kernel-name kns=rollout, one process per case" > $LOG
  run_one() {
    local out; out=$(timeout 150 compute-sanitizer --tool $1 --kernel-name kns=rollout \
      python3 experiments/tools/fused_sanitize.py $2 2>&1); local rc=$?
    local verdict="sanitizer crashed or timed out (rc $rc)"
    if echo "$out" | grep -q "ERROR SUMMARY: 0 errors\|RACECHECK SUMMARY: 0 hazards"; then
      verdict="clean"
    elif echo "$out" | grep -q "ERROR SUMMARY\|RACECHECK SUMMARY"; then
      verdict="REPORTS: $(echo "$out" | grep "SUMMARY" | tail -1)"
    fi
    echo "$1 case $2 ($(echo "$out" | grep " ok " | head -1)): $verdict"
  }
  export -f run_one
  for tool in memcheck racecheck; do for c in $(seq 0 $((N - 1))); do echo "$tool $c"; done; done |
    xargs -P 4 -L 1 bash -c 'run_one $0 $1' | sort >> $LOG
  cat $LOG ;;
mosaic|ppo)
  # Each tool's run: the cases' lines, its summary, and its reports counted by
  # kind (addresses and host backtraces dropped; "in a kernel" counts the
  # reports that name a device thread or memory space). mosaic: the rollout's
  # forward (`mlp_mosaic`); ppo: the PPO minibatch kernels (`ppo_mosaic`).
  export XLA_PYTHON_CLIENT_PREALLOCATE=false
  if [ "$1" = ppo ]; then NAME=ppo_mosaic_sanitize KNS=ppo_tower; else NAME=mosaic_sanitize KNS=mosaic; fi
  LOG=$OUT/$NAME$SUF.log
  # ppo: one process per case (with both cases in one process synccheck and initcheck
  # crashed at 39f1aef; each case alone, both finished at bdfbb33); mosaic: all cases at once.
  CASES=""
  if [ "$1" = ppo ]; then
    N=$(python3 experiments/tools/$NAME.py --count) || { echo "$NAME.py --count failed"; exit 1; }
    CASES=$(seq 0 $((N - 1)))
  fi
  { echo "# commit $JAXWARP_COMMIT, $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), compute-sanitizer $(compute-sanitizer --version | sed -n 's/^Version \([0-9.]*\).*/\1/p')"
    echo "# bash experiments/tools/gpu_tests.sh $1 (one process per tool${CASES:+ and case}, --kernel-name kns=$KNS)"; } > $LOG
  for tt in memcheck:120 racecheck:120 synccheck:60 initcheck:60; do
    tool=${tt%:*}
    echo "==> $tool <==" >> $LOG
    for c in ${CASES:-all}; do
      arg=$c; [ "$c" = all ] && arg=
      # to a file, not $(...): a killed tool leaves its python behind holding the pipe
      timeout -k 5 ${tt#*:} compute-sanitizer --tool $tool --kernel-name kns=$KNS \
        python3 experiments/tools/$NAME.py $arg > /tmp/san_$tool.out 2>&1; rc=$?
      pkill -9 -f "experiments/tools/$NAME.py"; out=$(cat /tmp/san_$tool.out)
      { echo "\$ compute-sanitizer --tool $tool --kernel-name kns=$KNS python experiments/tools/$NAME.py${arg:+ $arg}"
        echo "$out" | grep "^case "
        echo "$out" | grep "SUMMARY"
        echo "$out" | grep "^========= [A-Z]" | grep -v "SUMMARY\|COMPUTE-SANITIZER" |
          sed 's/0x[0-9a-f]*/ADDR/g' | sort | uniq -c | sed 's/^/  reports: /'
        echo "in a kernel: $(echo "$out" | grep -c "by thread\|__global__\|__shared__\|__local__")"
        echo "rc $rc"; } >> $LOG
    done
  done
  cat $LOG ;;
esac
