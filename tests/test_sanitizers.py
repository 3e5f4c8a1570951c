"""The CPU kernels under AddressSanitizer and UndefinedBehaviorSanitizer.

`JAXWARP_SANITIZE=address,undefined` builds the env libraries with those
sanitizers (jaxwarp/authoring/build.py, `_sanitize_flags`); a Python process that
loads them needs the ASan runtime (and libstdc++, whose `__cxa_throw` ASan
intercepts) preloaded, so every check runs in a subprocess. Any finding
aborts that process. The first test runs every registered env (and Tag's
three neighbour-search paths) through resets, steps with auto-resets and
out-of-range actions; the second shows the mode catches a planted
out-of-bounds write and names the header line.

The GPU kernels (and the action sampler, built by CMake and not covered
here) are checked with compute-sanitizer by experiments/sanitize_kernels.py,
on a GPU machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _runtime() -> str:
    if not sys.platform.startswith("linux"):
        pytest.skip("sanitizer runtimes are preloaded with LD_PRELOAD (Linux)")
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("g++ not found")
    libs = []
    for name in ("libasan.so", "libstdc++.so"):
        path = subprocess.run([cxx, f"-print-file-name={name}"], capture_output=True,
                              text=True).stdout.strip()
        if not os.path.isabs(path) or not os.path.exists(path):
            pytest.skip(f"{name} not found (g++ -print-file-name)")
        libs.append(path)
    return " ".join(libs)


def _sanitized(script: str, cache: Path, *args: str) -> subprocess.Popen:
    env = dict(os.environ, LD_PRELOAD=_runtime(), JAXWARP_SANITIZE="address,undefined",
               JAXWARP_CACHE_DIR=str(cache), ASAN_OPTIONS="detect_leaks=0",
               UBSAN_OPTIONS="print_stacktrace=1", JAX_PLATFORMS="cpu")
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def _run_sanitized(script: str, cache: Path) -> subprocess.CompletedProcess:
    proc = _sanitized(script, cache)
    out, err = proc.communicate(timeout=1500)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


EVERY_ENV = """
import sys
import jax, jax.numpy as jnp, numpy as np
import jaxwarp
from jaxwarp.envs import tag_continuous as tc

print("REGISTERED", " ".join(jaxwarp.registered_envs()), flush=True)
cases = [(name, {}) for name in jaxwarp.registered_envs()]
cases += [("tag_continuous", dict(num_taggers=20, num_runners=280)),       # uniform grid
          ("tag_continuous", dict(num_taggers=3, num_runners=9,
                                  use_full_observation=True)),            # full observation
          ("tag_continuous", dict(num_taggers=2, num_runners=30,
                                  num_other_agents_observed=20))]         # k > 16: selection
part, parts = map(int, sys.argv[1:3])  # this process's share of the cases
for name, params in cases[part::parts]:
    env = jaxwarp.make(name, backend="cpu", **params)
    nvec = np.asarray(env.action_space.nvec)
    length = getattr(env.params, "episode_length", None) or env.params.max_steps
    for num_envs in (1, 5):
        obs, state = env.reset(jax.random.key(0), num_envs)
        step = jax.jit(env.step)
        for t in range(min(length, 40) + 2):
            a = env.action_space.sample(jax.random.key(t), (num_envs, env.num_agents))
            if t % 7 == 3:  # out of range both ways: the kernels clamp
                a = jnp.where(a % 2 == 0, -3, jnp.asarray(nvec) + 2).astype(a.dtype)
            obs, state, reward, done, info = step(jax.random.key(100 + t), state, a)
        jax.block_until_ready((obs, state))
        assert np.isfinite(np.asarray(obs)).all(), name
    print("clean", name, params, flush=True)
print("ALL CLEAN")
"""


def test_every_env_is_clean_under_asan_and_ubsan(tmp_path):
    # Two processes, each with every other case: the sanitized builds (most of
    # the time) run on two cores.
    procs = [_sanitized(EVERY_ENV, tmp_path / "cache", str(i), "2") for i in range(2)]
    outs = [p.communicate(timeout=1500) for p in procs]
    stdout = "".join(out for out, _ in outs)
    for p, (out, err) in zip(procs, outs):
        report = out + err
        assert p.returncode == 0 and "ALL CLEAN" in out, report[-6000:]
        assert "AddressSanitizer" not in report and "runtime error" not in report, report[-6000:]
    # Every env registered in a fresh process (the built-ins; this process
    # may hold more, registered by other tests).
    names = next(line.split()[1:] for line in stdout.splitlines()
                 if line.startswith("REGISTERED"))
    assert {"tag_continuous", "cartpole", "mpe_simple_spread"} <= set(names)
    for name in names:
        assert f"clean {name} " in stdout
    assert stdout.count("clean tag_continuous ") == 4  # its default and three paths


PLANTED = """
import sys, jax
sys.path.insert(0, "examples/goal_reach")
import goal_reach
from jaxwarp import authoring
env = authoring.build_env(goal_reach.SPEC, backend="cpu", header=sys.argv[-1])
obs, s = env.reset(jax.random.key(0), 3)
a = env.action_space.sample(jax.random.key(1), (3, env.num_agents))
jax.block_until_ready(env.step(jax.random.key(2), s, a))
print("no finding")
"""


def test_sanitized_build_catches_an_out_of_bounds_write(tmp_path):
    src = (ROOT / "examples/goal_reach/goal_reach.h").read_text()
    anchor = "    const float ex = s.x[i] - s.goal_x[0];\n"
    assert anchor in src
    bad = tmp_path / "goal_reach.h"
    bad.write_text(src.replace(
        anchor, "    if (i == 0) s.episode_return[a.num_agents] = 1.0f;  // one row too far\n"
        + anchor))
    proc = _run_sanitized(PLANTED.replace("sys.argv[-1]", repr(str(bad))), tmp_path / "cache")
    assert proc.returncode != 0 and "no finding" not in proc.stdout
    assert "ERROR: AddressSanitizer: heap-buffer-overflow" in proc.stderr, proc.stderr[-3000:]
    line = src[:src.index(anchor)].count("\n") + 1  # the planted line's number
    assert f"goal_reach.h:{line}" in proc.stderr, proc.stderr[-3000:]
