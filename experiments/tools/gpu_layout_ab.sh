# Launch-layout experiments on the GPU, variants side by side in one process.
#   bash experiments/tools/gpu_layout_ab.sh epb   # GPU tests; envs per block fitted to the env count
#   bash experiments/tools/gpu_layout_ab.sh tag   # Tag warpdrive_default: registers, blocks per SM, obs passes
#   bash experiments/tools/gpu_layout_ab.sh ablate  # Tag: time without the features, without the search
# (epb measured a launch layout with at least JAXWARP_MIN_GRID_BLOCKS blocks
# per SM, off with =0; no gain, removed since: the variant now builds the
# same kernel, bench_contract_envs_min_grid_h100.json has the result.)
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-build-isolation -e . 2>&1 | tail -2
case "$1" in
epb)
  python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_authoring_gpu.py tests/test_mpe_gpu.py \
    tests/test_tag_gridworld_gpu.py tests/test_classic_control_kernels_gpu.py 2>&1 \
    | tee $OUT/pytest_layout_gpu_h100.log | tail -4
  python3 experiments/bench_contract_envs.py --only mpe_simple_tag mpe_simple_spread tag_gridworld cartpole \
    --variant= --variant=-DJAXWARP_MIN_GRID_BLOCKS=0 \
    --out $OUT/bench_contract_envs_min_grid_h100.json 2>&1 | tee $OUT/bench_contract_envs_min_grid_h100.log ;;
tag)
  M48="-DJAXWARP_MAX_THREADS=128 -DJAXWARP_MIN_BLOCKS=10"
  M40="-DJAXWARP_MAX_THREADS=128 -DJAXWARP_MIN_BLOCKS=12"
  O3="-DJAXWARP_OBS_BUDGET=10752 -DJAXWARP_OBS_BUSY=4"
  python3 experiments/bench_contract_envs.py --tag --tag-configs warpdrive_default --hashed --no-jax \
    --variant= "--variant=$M48" "--variant=$M48 $O3" "--variant=$O3" \
    "--variant=$M48 -DJAXWARP_OBS_BUDGET=0" "--variant=$M40 -DJAXWARP_OBS_BUDGET=0" \
    --out $OUT/tune_tag_occupancy_h100.json 2>&1 | tee $OUT/tune_tag_occupancy_h100.log ;;
ablate)
  python3 - <<'PY' | tee $OUT/tag_roofline_h100.txt
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
    --variant= --variant=-DJAXWARP_TAG_ABLATE=1 --variant=-DJAXWARP_TAG_ABLATE=2 \
    --out $OUT/tag_ablation_h100.json 2>&1 | tee $OUT/tag_ablation_h100.log ;;
esac
