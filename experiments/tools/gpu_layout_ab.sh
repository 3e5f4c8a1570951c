# Tag and launch-layout experiments on the GPU (H100), variants side by side
# in one process; results under $OUT, named after the GPU (_h100, _h200).
#   bash experiments/tools/gpu_layout_ab.sh tests   # the GPU tests these touch
#   bash experiments/tools/gpu_layout_ab.sh ablate  # Tag: time without the features, without the search
#   bash experiments/tools/gpu_layout_ab.sh search  # Tag: scan vs grid neighbour search at both sizes
#   bash experiments/tools/gpu_layout_ab.sh ncu     # Tag (NCU_CONFIG, default warpdrive_default): Nsight Compute, one played-in step
#   bash experiments/tools/gpu_layout_ab.sh final   # Tag at three sizes, with the protocol and kernel alone
# ABLATE_NAME (default tag_ablation) names the ablation's results. Variants
# are patches under experiments/patches/ (experiments/patches/apply.py);
# what was measured and decided: docs/decisions.md, "Kernels".
set -o pipefail
: "${OUT:?set OUT to a results folder}"
export PYTHONUNBUFFERED=1
case "$1" in
tests|ablate|search|ncu|final) ;;
*) echo "usage: $0 tests|ablate|search|ncu|final" >&2; exit 2 ;;
esac
python3 -m pip install -q --no-build-isolation -e . 2>&1 | tail -2
# Result names end in the GPU's model (_h100, _h200; _gpu if nvidia-smi does not say).
SUF=_$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -o 'H[0-9]\+' | tr 'H' 'h')
[ "$SUF" = "_" ] && SUF=_gpu
case "$1" in
tests)
  python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_authoring_gpu.py tests/test_mpe.py \
    tests/test_tag_gridworld.py tests/test_classic_control_kernels.py \
    tests/test_tag_continuous_gpu.py 2>&1 | tee $OUT/pytest_layout_gpu${SUF}.log | tail -4 ;;
ablate)
  python3 - <<'PY' | tee $OUT/${ABLATE_NAME:-tag_ablation}_roofline${SUF}.txt
import sys; sys.path.insert(0, "experiments")
import jax
from bench_env import bytes_per_env_step, measure_bandwidth
bw = measure_bandwidth(jax.devices()[0])
print(f"device-to-device copy rate (read + write): {bw / 1e9:.0f} GB/s")
for name, n in (("warpdrive_default", 110), ("large", 1000)):
    b = bytes_per_env_step(n, 71)
    print(f"{name}: {b} B per env-step at least; roofline {bw / b / 1e6:.1f} M env-steps/s")
PY
  python3 experiments/bench_contract_envs.py --tag --hashed --no-jax \
    --variant= --variant=tag_ablate_features.patch --variant=tag_ablate_search.patch \
    --out $OUT/${ABLATE_NAME:-tag_ablation}${SUF}.json 2>&1 | tee $OUT/${ABLATE_NAME:-tag_ablation}${SUF}.log ;;
search)
  python3 experiments/bench_contract_envs.py --tag --hashed --no-jax --variant= \
    --variant=tag_continuous.GRID_MIN_AGENTS=1 --variant=tag_continuous.GRID_MIN_AGENTS=100000 \
    --out $OUT/tag_search_kind${SUF}.json 2>&1 | tee $OUT/tag_search_kind${SUF}.log ;;
ncu)
  cfg=${NCU_CONFIG:-warpdrive_default}; name=${cfg#warpdrive_}
  (cd experiments && JAXWARP_NVCC_FLAGS=-lineinfo ncu --kernel-name regex:step_kernel \
    --launch-skip 302 --launch-count 1 --section SourceCounters --section WarpStateStats \
    --section SpeedOfLight --section Occupancy --import-source yes -o /tmp/rep \
    python3 profile_tag_step.py --config $cfg --warm 300) > $OUT/ncu_tag_${name}_run.txt 2>&1
  ncu -i /tmp/rep.ncu-rep --page source --csv --print-source cuda,sass > /tmp/src.csv
  (grep "agents in game" $OUT/ncu_tag_${name}_run.txt; python3 experiments/tools/ncu_lines.py /tmp/src.csv --top 60) \
    > $OUT/ncu_tag_${name}_lines${SUF}.txt
  ncu -i /tmp/rep.ncu-rep --print-details all > $OUT/ncu_tag_${name}_details${SUF}.txt 2>&1 ;;
final)
  python3 experiments/bench_contract_envs.py --tag --tag-configs warpdrive_default large \
    --out $OUT/tag_final${SUF}.json 2>&1 | tee $OUT/tag_final${SUF}.log
  python3 experiments/bench_contract_envs.py --tag --hashed --no-jax --variant= \
    --variant=obs_parts_only.patch --out $OUT/tag_final_hashed${SUF}.json 2>&1 | tee -a $OUT/tag_final${SUF}.log
  for mode in "" --hashed; do
    python3 experiments/bench_contract_envs.py --tag --tag-configs agents_10000 --no-jax $mode \
      --out $OUT/tag_final_10000${mode:+_hashed}${SUF}.json 2>&1 | tee -a $OUT/tag_final${SUF}.log
  done ;;
esac
