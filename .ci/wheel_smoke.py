"""The installed wheel, in a fresh venv with no compiler reachable (.ci/wheel_check).

Every built-in env runs on the XLA:CPU backend from the libraries the wheel
carries and agrees with its pure-JAX reference; every shipped training
config's trainer builds from them; a short PPO run trains
through the CLI; nothing is compiled (the build cache stays empty and no
compiler is found).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jaxwarp
from jaxwarp import layouts
from jaxwarp.authoring import EnvBuildError, build, prebuilt
from jaxwarp.registry import registered_envs
from jaxwarp.testing import check_consistency
from jaxwarp.train import build_trainer, load_config
from jaxwarp.train.config import shipped_configs

assert "site-packages" in jaxwarp.__file__, f"not the installed wheel: {jaxwarp.__file__}"
cache = Path(os.environ["JAXWARP_CACHE_DIR"])
try:
    sys.exit(f"a C++ compiler is reachable: {build.find_cxx()}")
except EnvBuildError:
    pass
try:  # /usr/local/cuda/bin/nvcc, the last resort, may exist; nothing else may
    nvcc = build.find_nvcc()
    assert nvcc == "/usr/local/cuda/bin/nvcc", f"nvcc is reachable: {nvcc}"
except EnvBuildError:
    pass
names = {r["name"] for r in prebuilt.manifest()}
for name in registered_envs():
    report = check_consistency(name, backends=("cpu", "jax"), num_envs=4, num_steps=40,
                               resync=True, rtol=1e-4, atol=1e-5)
    assert report.ok, f"{name}: {report}"
    print(f"{name:18s} cpu (prebuilt) vs jax: {report}", flush=True)
assert set(layouts.builtin_layouts()) <= names, names
# Every shipped training config's trainer from the prebuilt libraries (none compiled).
for shipped in shipped_configs():
    build_trainer(load_config(shipped, ["backend=cpu", "devices=1"]))
    print(f"{shipped:22s} trainer built on cpu (prebuilt)", flush=True)
out = cache.parent / "run"
cmd = [sys.executable, "-m", "jaxwarp", "train", "--config", "cartpole_ppo",
       "total_env_steps=40960", "--out", str(out), "--eval-episodes", "0", "--no-progress"]
# Not from the checkout: `python -m jaxwarp` there would import its sources.
proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cache.parent)
print(proc.stdout[-2000:], proc.stderr[-2000:])
assert proc.returncode == 0, proc.returncode
assert (out / "summary.json").is_file(), sorted(p.name for p in out.iterdir())
built = sorted(cache.rglob("*.so")) if cache.exists() else []
assert not built, f"compiled at first use: {built}"
print("wheel smoke: every built-in env and a PPO run, nothing compiled")
