"""The env authoring contract: generated bindings, runtime build and cache,
clear build errors, and CartPole built through it (CPU)."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp import authoring
from jaxwarp.authoring import EnvBuildError, StateField, build, build_env
from jaxwarp.envs.cartpole import SPEC as CARTPOLE


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("JAXWARP_CACHE_DIR", str(d))
    return d


def header_copy(tmp_path: Path, edit=None) -> Path:
    text = Path(CARTPOLE.header).read_text()
    if edit is not None:
        text = edit(text)
    path = tmp_path / "my_cartpole.h"
    path.write_text(text)
    return path


def test_cartpole_cpu_matches_reference_step_by_step():
    report = jaxwarp.testing.check_consistency("cartpole", ("cpu", "jax"), num_envs=16,
                                               resync=True, rtol=1e-5, atol=1e-6)
    assert report.ok, report
    assert report.episodes_finished > 16  # every env ended and restarted at least once


def test_cartpole_reset_is_bitwise_and_shapes():
    cpu, ref = (jaxwarp.make("cartpole", backend=b) for b in ("cpu", "jax"))
    key = jax.random.PRNGKey(3)
    # Jitted: XLA then contracts the reference's u * span + low into the fma
    # that the kernel calls (op-by-op execution rounds twice).
    (o1, s1), (o2, s2) = (jax.jit(e.reset, static_argnums=1)(key, 5) for e in (cpu, ref))
    np.testing.assert_array_equal(o1, o2)
    assert o1.shape == (5, 1, 4) and o1.dtype == jnp.float32
    assert s1.timestep.shape == (5,) and s1.timestep.dtype == jnp.int32
    assert (np.abs(o1) <= 0.05).all()
    obs, s, r, d, info = cpu.step(key, s1, jnp.ones((5, 1, 1), jnp.int32))
    assert r.shape == (5, 1) and d.shape == (5,) and d.dtype == jnp.bool_
    assert set(info) == {"terminated", "truncated", "episode_return"}
    np.testing.assert_array_equal(s.timestep, 1)


def test_cartpole_vmap_equals_loop_and_truncates_at_max_steps():
    env = jaxwarp.make("cartpole", backend="cpu", max_steps=7)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    obs_b, st_b = jax.vmap(lambda k: env.reset(k, 4))(keys)
    for i in range(3):
        obs_i, _ = env.reset(keys[i], 4)
        np.testing.assert_array_equal(obs_b[i], obs_i)
    # Balance by pushing toward the pole's lean: never terminates, so every
    # episode is truncated at max_steps with return 7.
    step = jax.jit(env.step)
    _, st = env.reset(keys[0], 4)
    obs = env.reset(keys[0], 4)[0]
    for t in range(7):
        a = (obs[..., 2:3] + 0.5 * obs[..., 3:4] > 0).astype(jnp.int32)
        obs, st, r, d, info = step(jax.random.PRNGKey(t), st, a)
    assert bool(d.all()) and bool(info["truncated"].all()) and not info["terminated"].any()
    np.testing.assert_array_equal(info["episode_return"], 7.0)
    np.testing.assert_array_equal(st.timestep, 0)


def test_build_is_cached_and_outside_the_package(cache):
    header = header_copy(cache.parent)
    build_env(CARTPOLE, backend="cpu", header=header)
    libs = list(cache.rglob("*.so"))
    assert len(libs) == 1
    mtime = libs[0].stat().st_mtime_ns
    build_env(CARTPOLE, backend="cpu", header=header)  # cache hit: no rebuild
    assert libs[0].stat().st_mtime_ns == mtime
    header.write_text(header.read_text() + "\n// edited\n")  # new source, new build
    build_env(CARTPOLE, backend="cpu", header=header)
    assert len(list(cache.rglob("*.so"))) == 2
    pkg = Path(jaxwarp.__file__).parent
    assert not list(pkg.rglob("*cartpole*.so"))


def _state_without(name: str) -> type:
    """CartPole's state dataclass without the field `name` (declared with
    state_field, the one way to declare a state)."""
    from flax import struct

    from jaxwarp.authoring import state_field

    kept = [f for f in CARTPOLE.fields if f.name != name]
    return struct.dataclass(type("ShortState", (), {
        "__annotations__": {f.name: jax.Array for f in kept},
        **{f.name: state_field(f.dtype, f.scope) for f in kept}}))


def test_spec_fields_are_read_from_the_state_dataclass():
    assert [(f.name, f.dtype, f.scope) for f in CARTPOLE.fields][-2:] == [
        ("timestep", "i32", "env"), ("episode_return", "f32", "agent")]
    with pytest.raises(ValueError, match="init=False"):  # no second way to declare state
        dataclasses.replace(CARTPOLE, fields=CARTPOLE.fields[:-1])
    with pytest.raises(EnvBuildError, match=r"state_type must be a state dataclass"):
        dataclasses.replace(CARTPOLE, state_type=None)


def test_field_used_by_the_header_but_not_in_the_spec_is_a_compile_error(cache):
    """Declared once, in the spec: a header that uses a field the spec lacks
    fails to compile, with the field's name and the header's line first."""
    spec = dataclasses.replace(CARTPOLE, state_type=_state_without("theta_dot"))
    with pytest.raises(EnvBuildError, match=r"(?s)my_cartpole\.h:\d+.*theta_dot"):
        build_env(spec, backend="cpu", header=header_copy(cache.parent))


def _state_of(fields: list[tuple[str, str, str]]) -> type:
    """A state dataclass with these (name, dtype, scope) fields."""
    from flax import struct

    from jaxwarp.authoring import state_field

    return struct.dataclass(type("OtherState", (), {
        "__annotations__": {n: jax.Array for n, _, _ in fields},
        **{n: state_field(d, sc) for n, d, sc in fields}}))


CARTPOLE_FIELDS = [(f.name, f.dtype, f.scope) for f in CARTPOLE.fields]
BARE = [f for f in CARTPOLE_FIELDS if f[0] not in ("timestep", "episode_return")]


def test_kept_fields_and_time_limit_are_checked():
    """timestep, episode_return and the time limit are kept by the kernels:
    a spec that declares them otherwise is refused, naming what to write."""
    def redeclared(name, dtype, scope):
        return _state_of([(n, dtype, scope) if n == name else (n, d, sc)
                          for n, d, sc in CARTPOLE_FIELDS])

    with pytest.raises(EnvBuildError, match=r"'timestep' is kept by the kernels.*'i32', 'env'"):
        dataclasses.replace(CARTPOLE, state_type=redeclared("timestep", "i32", "agent"))
    with pytest.raises(EnvBuildError, match=r"'episode_return' is kept.*'f32', 'agent'"):
        dataclasses.replace(CARTPOLE, state_type=redeclared("episode_return", "i32", "agent"))
    with pytest.raises(EnvBuildError, match=r"episode_return.*needs the step counter"):
        dataclasses.replace(CARTPOLE, state_type=_state_of(BARE + [CARTPOLE_FIELDS[-1]]))
    with pytest.raises(EnvBuildError, match=r"time_limit='max_steps'.*needs timestep"):
        dataclasses.replace(CARTPOLE, state_type=_state_of(BARE))
    with pytest.raises(EnvBuildError, match=r"time_limit must be the name of a kernel param"):
        dataclasses.replace(CARTPOLE, time_limit=500)
    for bad, match in (("max_stpes", r"'max_stpes' is not a kernel param"),
                       ("tau", r"'tau' must name an int kernel param")):
        with pytest.raises(EnvBuildError, match=match):
            authoring.generate_source(dataclasses.replace(CARTPOLE, time_limit=bad),
                                      Path(CARTPOLE.header), "cpu")


def test_env_without_kept_fields_or_time_limit(cache):
    """A state without timestep and episode_return, a spec without
    time_limit: the kernels keep nothing and never truncate."""
    spec = dataclasses.replace(CARTPOLE, name="bare_cartpole", state_type=_state_of(BARE),
                               time_limit=None, header=header_copy(cache.parent))
    text = authoring.generate_source(spec, Path(spec.header), "cpu")
    assert "kCountsSteps = false" in text and "kTimeLimit = false" in text
    env = build_env(spec, CARTPOLE.params_type(max_steps=2), backend="cpu")
    obs, state = env.reset(jax.random.PRNGKey(0), 8)
    push = jnp.ones((8, 1, 1), jnp.int32)
    for t in range(4):  # past max_steps: no time limit
        obs, state, r, d, info = env.step(jax.random.PRNGKey(t), state, push)
        assert not bool(info["truncated"].any()) and "episode_return" not in info
        np.testing.assert_array_equal(r, 1.0)


def test_compile_error_points_at_the_user_file_and_line(cache):
    def broken(text):
        lines = text.splitlines()
        i = next(n for n, ln in enumerate(lines) if "const float td" in ln)
        lines[i] = "  const float td = s.theta_dott[i];  // typo"
        return "\n".join(lines) + "\n", i + 1

    text, line = broken(Path(CARTPOLE.header).read_text())
    header = cache.parent / "my_cartpole.h"
    header.write_text(text)
    with pytest.raises(EnvBuildError) as e:
        build_env(CARTPOLE, backend="cpu", header=header)
    msg = str(e.value)
    assert "compiling" in msg and "for cpu failed" in msg
    lines = msg.splitlines()
    first_user = next(i for i, ln in enumerate(lines) if ln.startswith(f"{header}:{line}:"))
    generated = [i for i, ln in enumerate(lines)
                 if ("env_layout.h" in ln or "env_ffi.cc" in ln) and i > 0]
    assert generated  # the generated layout and the file that compiles it are named
    assert all(first_user < i for i in generated)  # the user's file and line come first
    assert "theta_dott" in msg


def test_missing_compiler_is_actionable(cache, monkeypatch, tmp_path):
    empty = tmp_path / "empty_bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    with pytest.raises(EnvBuildError, match=r"no C\+\+ compiler found .*install g\+\+ .*set CXX"):
        build_env(CARTPOLE, backend="cpu", header=header_copy(cache.parent))


def test_state_field_and_param_validation():
    with pytest.raises(ValueError, match=r"not a C\+\+ identifier"):
        StateField("my-field", "f32")
    with pytest.raises(ValueError, match=r"dtype 'f64' is not one of"):
        StateField("x", "f64")

    @dataclasses.dataclass(frozen=True)
    class BadParams:
        table: tuple = (1.0, 2.0)

    with pytest.raises(EnvBuildError, match=r"param 'table' has type tuple"):
        # kernel_params=None: the C++ Params are then the params' own fields.
        authoring.generate_source(dataclasses.replace(CARTPOLE, params_type=BadParams,
                                                      kernel_params=None),
                                  Path(CARTPOLE.header), "cpu")


@pytest.mark.skipif(shutil.which("nvcc") is None and not os.path.exists("/usr/local/cuda/bin/nvcc"),
                    reason="nvcc not installed")
def test_generated_cuda_bindings_compile(cache, monkeypatch):
    monkeypatch.setenv("JAXWARP_CUDA_ARCH", "90")
    monkeypatch.setenv("JAXWARP_PREBUILT", "0")  # compile, even where the package carries it
    lib = build.compile_library(CARTPOLE, Path(CARTPOLE.header), "cuda")
    assert lib.exists() and lib.stat().st_size > 0


def test_ppo_learns_cartpole_on_cpu():
    """PPO on the kernel env: mean episode return climbs far above a random
    policy's (~22) within 300K env-steps."""
    from jaxwarp.train import load_config, make_train

    config = load_config(None, [
        "env=cartpole", "env_config=null", "backend=cpu", "num_envs=32", "num_steps=128",
        "total_env_steps=303104", "update_epochs=4", "num_minibatches=4",
        "policies.agent.hidden_sizes=[64, 64]", "policies.agent.lr=2.5e-3", "gamma=0.99",
        "ent_coef=0.01"])
    _, m = jax.jit(make_train(config))(jax.random.PRNGKey(0))
    final = float(np.nanmean(m["agent/episode_return"][-5:]))
    assert final > 150, final


def test_cli_build_prebuilds_contract_envs(capsys):
    from jaxwarp.cli import main as cli_main

    assert cli_main(["build", "--backend", "cpu", "cartpole", "mpe_simple_spread"]) == 0
    out = capsys.readouterr().out
    assert "cartpole" in out and "libcartpole_cpu.so" in out and "mpe_simple_spread" in out
    assert cli_main(["build", "--backend", "cpu", "tag_continuous"]) == 0  # Tag too
    assert "libtag_continuous_cpu.so" in capsys.readouterr().out
    assert cli_main(["build", "no_such_env"]) == 2
    assert "not an env built through the authoring contract" in capsys.readouterr().err


def test_bad_state_is_refused_before_the_kernel():
    env = jaxwarp.make("cartpole", backend="cpu")
    _, state = env.reset(jax.random.PRNGKey(0), 4)
    a = jnp.zeros((4, 1, 1), jnp.int32)
    short = state.replace(theta=state.theta[:3])
    with pytest.raises(ValueError, match=r"state.theta must be float32\[4, 1\]; got float32\[3, 1\]"):
        env.step(jax.random.PRNGKey(1), short, a)
    with pytest.raises(ValueError, match=r"state.timestep must be int32\[4\]; got float32\[4\]"):
        env.step(jax.random.PRNGKey(1), state.replace(timestep=state.timestep * 1.0), a)
    with pytest.raises(TypeError, match=r"state must be a CartPoleState; got tuple"):
        env.step(jax.random.PRNGKey(1), (state,), a)


def test_truncated_cached_library_is_rebuilt(cache, tmp_path):
    """A cached library cut short (full disk, killed copy) would crash the
    process when loaded: its checksum no longer matches and it is rebuilt."""
    hdr = header_copy(tmp_path)
    spec = dataclasses.replace(CARTPOLE, name="cache_trunc", header=hdr)
    lib = build.compile_library(spec, hdr, "cpu")
    good = lib.read_bytes()
    lib.write_bytes(good[: len(good) // 3])
    assert not build._intact(lib)
    assert build.compile_library(spec, hdr, "cpu") == lib
    assert lib.read_bytes() == good and build._intact(lib)
    env = build_env(spec, backend="cpu")
    obs, _ = env.reset(jax.random.PRNGKey(0), 3)
    assert obs.shape == (3, 1, 4)


def test_kill_9_during_a_build_leaves_no_temporary_file_for_good(cache, tmp_path, monkeypatch):
    """A build killed while the compiler wrote the library left its
    ``lib*.tmp`` in the cache for good; the next build removes it."""
    import signal
    import subprocess
    import sys
    import time

    hdr = header_copy(tmp_path)
    fake = tmp_path / "fake-cxx"  # writes part of its output, then hangs until killed
    fake.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo fake 1.0; exit 0; }\n'
                    'while [ $# -gt 0 ]; do [ "$1" = -o ] && out="$2"; shift; done\n'
                    'echo partial > "$out"\nexec sleep 120\n')
    fake.chmod(0o755)
    script = ("import dataclasses, sys; from pathlib import Path; from jaxwarp.authoring "
              "import build; from jaxwarp.envs.cartpole import SPEC; hdr = Path(sys.argv[1]); "
              "build.compile_library(dataclasses.replace(SPEC, name='cache_killed', header=hdr), "
              "hdr, 'cpu')")
    proc = subprocess.Popen([sys.executable, "-c", script, str(hdr)], start_new_session=True,
                            env={**os.environ, "CXX": str(fake)})
    try:
        deadline = time.monotonic() + 120
        while not list(cache.glob("cache_killed-cpu-*/lib*.tmp")) and proc.poll() is None:
            assert time.monotonic() < deadline, "the build never started"
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the build and its compiler
        proc.wait()
    left = list(cache.glob("cache_killed-cpu-*/lib*.tmp"))
    assert len(left) == 1 and f"-{proc.pid}.tmp" in left[0].name, left
    monkeypatch.delenv("CXX", raising=False)
    spec = dataclasses.replace(CARTPOLE, name="cache_killed", header=hdr)
    lib = build.compile_library(spec, hdr, "cpu")  # a real build: it removes the dead one's file
    assert build._intact(lib)
    assert list(cache.rglob("*.tmp")) == []


def test_stale_temporary_files_are_those_of_dead_builds(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = int(done.stdout)  # a process that has exited
    folder = tmp_path / "env-cpu-0123456789abcdef"
    folder.mkdir()
    other = "ffffffff" if build._HOST != "ffffffff" else "eeeeeeee"
    names = {
        "dead": f"libx_cpu.so.{build._HOST}-{dead}.tmp",  # this host, process gone
        "alive": f"libx_cpu.so.{build._HOST}-{os.getpid()}.tmp",  # this process: kept
        "other_new": f"libx_cpu.so.{other}-{dead}.tmp",  # another host's, fresh: kept
        "other_old": f"env_layout.h.{other}-{dead}.tmp",  # another host's, a day old
        "old_format": f"libx_cpu.{dead}.tmp",  # before host names: by age only
        "not_ours": "notes.tmp",
    }
    for path in names.values():
        (folder / path).write_text("x")
    day_ago = os.path.getmtime(folder / names["other_old"]) - build._STALE_TMP_S - 60
    for key in ("other_old", "old_format"):
        os.utime(folder / names[key], (day_ago, day_ago))
    removed = {p.name for p in build._remove_stale_tmp(tmp_path)}
    assert removed == {names["dead"], names["other_old"], names["old_format"]}
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        names[k] for k in ("alive", "other_new", "not_ours"))


def test_included_header_in_a_subfolder_is_part_of_the_cache_key(cache, tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "helper.h").write_text("JW_HD float jw_test_push() { return 1.0f; }\n")
    hdr = header_copy(tmp_path, lambda t: t.replace("#pragma once", '#pragma once\n#include "sub/helper.h"'))
    spec = dataclasses.replace(CARTPOLE, name="cache_sub", header=hdr)
    first = build.compile_library(spec, hdr, "cpu")
    (sub / "helper.h").write_text("JW_HD float jw_test_push() { return 2.0f; }\n")
    second = build.compile_library(spec, hdr, "cpu")
    assert first != second  # the edit is a new build, not the old code


def test_unwritable_cache_names_the_variable(tmp_path, monkeypatch):
    # A cache path below a regular file cannot be created, even by root (a
    # read-only mount fails the same way).
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    monkeypatch.setenv("JAXWARP_CACHE_DIR", str(blocker / "cache"))
    hdr = header_copy(tmp_path)
    spec = dataclasses.replace(CARTPOLE, name="cache_ro", header=hdr)
    with pytest.raises(EnvBuildError, match="JAXWARP_CACHE_DIR"):
        build.compile_library(spec, hdr, "cpu")


def test_reset_and_step_return_the_declared_state_type(cache):
    """State declared once, on the state dataclass (state_field): reset and
    step return that type (tagged with the params_id), frozen."""
    spec = dataclasses.replace(CARTPOLE, name="cartpole_declared")
    env = build_env(spec, backend="cpu", checks=True)
    _, state = env.reset(jax.random.PRNGKey(0), 3)
    assert type(state).__name__ == CARTPOLE.state_type.__name__
    assert isinstance(state, env.spec.state_type)
    # The spec's fields, then the static params_id (pytree metadata).
    assert [f.name for f in dataclasses.fields(state)] == [
        *(f.name for f in CARTPOLE.fields), "params_id"]
    assert len(jax.tree.leaves(state)) == len(CARTPOLE.fields)
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.x = state.x
    _, state2, *_ = env.step(jax.random.PRNGKey(1), state, jnp.zeros((3, 1), jnp.int32))
    assert type(state2) is type(state) and env.checks


def test_authoring_is_split_by_layer_and_reexports_every_public_name():
    """jaxwarp.authoring is one module per layer (spec, codegen, build, env),
    each importing at its top only the layers before it; the package itself
    re-exports every public name the layers define."""
    import ast

    layers = ["spec", "codegen", "build", "env"]
    for i, name in enumerate(layers):
        module = getattr(authoring, name)
        tree = ast.parse(Path(module.__file__).read_text())
        imported = {node.module.rsplit(".", 1)[-1] for node in tree.body
                    if isinstance(node, ast.ImportFrom) and node.module
                    and node.module.startswith("jaxwarp.authoring.")}
        assert imported <= set(layers[:i]), (name, imported)
        defined = [node.name for node in tree.body
                   if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
        defined += [t.id for node in tree.body if isinstance(node, ast.Assign)
                    for t in node.targets if isinstance(t, ast.Name)]
        public = {k for k in defined if not k.startswith("_")}
        assert public <= set(authoring.__all__), (name, public - set(authoring.__all__))
    for k in authoring.__all__:
        assert getattr(authoring, k) is not None
