# The contract-env table with upstream baselines, and Tag's GPU tests. (The
# single-agent kernel's A/B against the generic kernel was a build switch,
# deleted once measured: docs/decisions.md, "Kernels".)
#   bash experiments/tools/gpu_solo_ab.sh table|tag-tests   (carry .whl for table)
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-build-isolation -e . 2>&1 | tail -2
case "$1" in
table)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  PYTHONPATH=/tmp/site python3 experiments/bench_contract_envs.py --out $OUT/bench_contract_envs_h100.json 2>&1 \
    | grep -v "Submoduled\|Importing sub" | tee $OUT/bench_contract_envs_h100.log
  python3 experiments/profile_env.py cartpole --envs 1048576 --steps 50 --top 8 2>&1 | grep -A9 "^==" > $OUT/profile_env_classic_h100.txt
  python3 experiments/profile_env.py mountain_car --envs 65536 --steps 100 --top 8 2>&1 | grep -A9 "^==" >> $OUT/profile_env_classic_h100.txt
  cat $OUT/profile_env_classic_h100.txt ;;
tag-tests)
  python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_tag_continuous_gpu.py 2>&1 | tee $OUT/pytest_tag_gpu_h100.log | tail -3 ;;
esac
