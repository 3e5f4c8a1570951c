# Launch-layout experiments on the GPU, variants side by side in one process.
#   bash experiments/tools/gpu_layout_ab.sh epb   # GPU tests; envs per block fitted to the env count
#   bash experiments/tools/gpu_layout_ab.sh tag   # Tag warpdrive_default: registers, blocks per SM, obs passes
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
esac
