#!/usr/bin/env bash
# Learner variants side by side on one GPU (train_learner_variants_h200.json): the
# trainer at a47679a ("base", .snap/trainer_base.py = `git show a47679a:jaxwarp/train/trainer.py`),
# the trainer of c07c73f ("new"), new + experiments/patches/head_pad8.patch ("pad8"), and
# new with XLA's Triton GEMMs off ("notriton", since then jaxwarp.train.COMPILER_OPTIONS:
# to rerun the comparison today, set XLA_FLAGS=--xla_gpu_enable_triton_gemm=true for the
# Triton side). Each variant is `experiments/bench_train.py --backends cuda --cases 3,6` in
# its own process, one after another. Then the GPU tests of the changed code.
# Run from a checkout holding .snap/src.tar (`git archive HEAD`) and .snap/trainer_base.py;
# results under $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1
R=$PWD; W=/tmp/w; mkdir -p $W && tar -xf .snap/src.tar -C $W && cd $W || exit 1
export JAXWARP_COMMIT=$(cat .snap_commit 2>/dev/null || echo unknown)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
python3 -m pip install --no-build-isolation --no-deps -e . -q 2>&1 | tail -2
F="^W1\|bfc_alloc\|^I1\|^E1"
cp jaxwarp/train/trainer.py /tmp/trainer_new.py
ab() { local name=$1; shift
  env "$@" timeout 150 python3 experiments/bench_train.py --backends cuda --cases 3,6 --repeats 3 \
    --out $OUT/ab_$name.json 2>&1 | grep -v "$F" | sed "s/^/[$name] /" | tee $OUT/ab_$name.log | grep env-steps; }
cp $R/.snap/trainer_base.py jaxwarp/train/trainer.py; ab base
cp /tmp/trainer_new.py jaxwarp/train/trainer.py; ab new
patch -p1 -s -i experiments/patches/head_pad8.patch && ab pad8 && patch -p1 -s -R -i experiments/patches/head_pad8.patch
ab notriton XLA_FLAGS=--xla_gpu_enable_triton_gemm=false
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_sampler_gpu.py \
  tests/test_mpe.py tests/test_tag_continuous_gpu.py tests/test_tag_continuous.py tests/test_train_gpu.py \
  tests/test_classic_control_kernels.py tests/test_conformance.py 2>&1 | grep -v "$F" > $OUT/pytest_gpu.log
tail -15 $OUT/pytest_gpu.log
