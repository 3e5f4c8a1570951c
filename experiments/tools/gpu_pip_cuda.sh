#!/usr/bin/env bash
# Issue 40, items 1 and 2 on the GPU machine: the wheel's prebuilt CUDA code and
# nvcc from NVIDIA's pip wheels, with the system CUDA toolkit hidden.
#
# The wheels travel in .whl/ (git-excluded): jaxwarp's own cp312 wheel and
# nvidia-cuda-nvcc, nvidia-nvvm, nvidia-cuda-crt, nvidia-cuda-runtime, nvidia-cuda-cccl 13.0.x
# (the driver there is CUDA 13.0). Together they are ~100 MiB, more than one call
# carries (nvidia-nvvm alone is 58.7 MiB), so .whl/ holds one tar of them split in
# two parts (.whl/1, .whl/2), each with SHA256SUMS (of wheels.tar); the parts are staged in /tmp on the
# warm machine, two calls in a row:
#   call 1, carry [".whl/1"]: bash experiments/tools/gpu_pip_cuda.sh
#   call 2, carry [".whl/2"]: bash experiments/tools/gpu_pip_cuda.sh
# (the second finds both parts, checks the tar's sha256 and runs). Log:
# $OUT/gpu_pip_cuda.log.
#
# In a fresh venv (the image's packages for jax[cuda13] and the rest, no
# jaxwarp): install the jaxwarp wheel and the NVIDIA wheels; hide the toolkit
# (PATH without it, CUDA_HOME/CUDA_PATH/NVCC unset; /usr/local/cuda stays on
# disk, the finder's last resort, after the pip wheels); then
#   1. jaxwarp info; the nvcc the finder picks must be the venv's;
#   2. a user env (examples/goal_reach) compiled at first use with the pip nvcc
#      into an empty cache, run on cuda and checked against its pure-JAX
#      reference step by step;
#   3. built-in envs on cuda from the wheel's prebuilt libraries (nothing
#      compiled for them), checked against the pure-JAX reference, and a short
#      PPO run on cuda (the wheel's sampler).
set -uo pipefail
export PYTHONUNBUFFERED=1
REPO=$(pwd)
STAGE=/tmp/jw_pip_cuda
LOG=${OUT:-/tmp}/gpu_pip_cuda.log
mkdir -p "$STAGE/parts"
for d in .whl/1 .whl/2; do [ -d "$d" ] && cp -f "$d"/* "$STAGE/parts/"; done
if [ ! -f "$STAGE/parts/wheels.tar.part1" ] || [ ! -f "$STAGE/parts/wheels.tar.part2" ]; then
  echo "staged: $(ls "$STAGE/parts" | tr '\n' ' '); run again carrying the other part" | tee "$LOG"
  exit 0
fi
exec > >(tee "$LOG") 2>&1
cd "$STAGE" || exit 1
cat parts/wheels.tar.part1 parts/wheels.tar.part2 > wheels.tar
sha256sum -c parts/SHA256SUMS || { echo "wheels.tar: checksum mismatch"; exit 1; }
rm -rf wheels && mkdir wheels && tar -xf wheels.tar -C wheels && ls -la wheels
echo "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"

# The image's python3 is itself a venv (/opt/torch/.venv): --system-site-packages
# would see the base interpreter's packages, not its; a .pth line adds them,
# after the new venv's own site-packages.
SYS_SITE=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
rm -rf "$STAGE/venv" && python3 -m venv --without-pip "$STAGE/venv" || exit 1
V="$STAGE/venv/bin"
VSITE=$("$V/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$SYS_SITE" > "$VSITE/zz_system_site.pth"
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target "$VSITE" \
    wheels/nvidia_*.whl wheels/jaxwarp-*.whl || exit 1
ls "$VSITE/nvidia/cu13" "$VSITE/nvidia/cu13/bin"
# The system toolkit hidden: PATH holds the venv and the base system only.
export PATH="$V:/usr/bin:/bin"
unset CUDA_HOME CUDA_PATH NVCC CUDA_ROOT
export JAXWARP_CACHE_DIR="$STAGE/cache"
rm -rf "$JAXWARP_CACHE_DIR"
echo "nvcc on PATH: $(command -v nvcc || echo none)"
cd /tmp || exit 1   # not the checkout: import the installed wheel
"$V/python" -m jaxwarp info || exit 1
"$V/python" - "$REPO" "$V" <<'PY' || exit 1
import sys, time
from pathlib import Path
repo, venv = Path(sys.argv[1]), Path(sys.argv[2]).parent
import jax, jaxwarp
from jaxwarp.authoring import build, prebuilt
from jaxwarp.testing import check_consistency
from jaxwarp.units import device_name
assert "site-packages" in jaxwarp.__file__, jaxwarp.__file__
nvcc = build.find_nvcc()
print("finder's nvcc:", nvcc, "|", build.compiler_id(nvcc).splitlines()[-1])
assert str(venv) in nvcc and "nvidia/cu13/bin/nvcc" in nvcc, nvcc
print("device:", device_name())

# 2. A user env, compiled at first use by the pip nvcc.
sys.path.insert(0, str(repo / "examples" / "goal_reach"))
import goal_reach  # registers "goal_reach"
t = time.perf_counter()
env = jaxwarp.make("goal_reach", backend="cuda")
print(f"goal_reach on cuda: built in {time.perf_counter() - t:.1f} s")
built = sorted(p.relative_to(build.cache_dir()) for p in build.cache_dir().rglob("*.so"))
print("cache:", built)
assert any("goal_reach-cuda-" in str(p) for p in built), built
for pair in (("cuda", "jax"), ("cuda", "cpu")):
    r = check_consistency("goal_reach", backends=pair, num_envs=64, num_steps=120,
                          resync=True, rtol=1e-5, atol=1e-6)
    print("goal_reach", r); assert r.ok

# 3. Built-in envs from the wheel's prebuilt CUDA libraries.
rows = {Path(r["folder"]).name: r for r in prebuilt.manifest() if r["platform"] == "cuda"}
print("prebuilt cuda:", sorted(r["name"] + " " + r["archs"] for r in rows.values()))
for name in ("cartpole", "mpe_simple_spread", "tag_gridworld", "tag_continuous"):
    e = jaxwarp.make(name, backend="cuda")
    assert any(e._prefix.endswith(f.rsplit("-", 1)[-1]) for f in rows), (name, e._prefix)
    r = check_consistency(name, backends=("cuda", "jax"), num_envs=32, num_steps=80,
                          resync=True, rtol=1e-4, atol=1e-5)
    print(name, "(prebuilt)", r); assert r.ok
built = sorted(str(p.relative_to(build.cache_dir())) for p in build.cache_dir().rglob("*.so"))
assert all(b.startswith("goal_reach-") for b in built), built
print("PASS: user env via pip nvcc; built-ins prebuilt, nothing compiled for them")
PY
"$V/python" -m jaxwarp train --config cartpole_ppo total_env_steps=204800 --out "$STAGE/run" \
    --eval-episodes 0 --no-progress || exit 1
echo "cache after the run: $(find "$JAXWARP_CACHE_DIR" -name '*.so' | sed "s|$JAXWARP_CACHE_DIR/||")"
echo "gpu_pip_cuda: done"
