"""Packaging (issue 40): the built-in envs' libraries prebuilt into the
package and found before any compiler is looked for; the layouts they are
built from kept equal to the generator; nvcc from NVIDIA's pip wheels found
with no CUDA_HOME; what ``jaxwarp info`` reads."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

import jaxwarp
from jaxwarp import layouts
from jaxwarp.authoring import EnvBuildError, build, prebuilt
from jaxwarp.authoring.codegen import API_DIR

REPO = Path(__file__).resolve().parents[1]
LAYOUTS = REPO / "ffi" / "layouts"


def test_checked_in_layouts_are_the_generated_ones():
    """CMakeLists.txt compiles ffi/layouts/*.h into the package: each must be
    exactly what the generator writes for that env and config now
    (regenerate: python -m jaxwarp.layouts)."""
    built_in = layouts.builtin_layouts()
    assert {p.stem for p in LAYOUTS.glob("*.h")} == set(built_in), \
        "run python -m jaxwarp.layouts"
    for stem, text in built_in.items():
        assert (LAYOUTS / f"{stem}.h").read_text() == text, \
            f"ffi/layouts/{stem}.h is stale: run python -m jaxwarp.layouts"
    # Every built-in env, and Tag's large config (a static param differs).
    assert {"cartpole", "tag_continuous", "tag_continuous.large", "tag_gridworld"} <= set(built_in)


def test_every_shipped_config_trains_on_a_prebuilt_layout():
    """`jaxwarp train --config NAME` needs no compiler from the wheel: each
    shipped training config's env, at its env params, has one of the layouts
    the package prebuilds (.ci/wheel_smoke.py builds each trainer so)."""
    from jaxwarp.authoring import generated_source
    from jaxwarp.registry import contract_envs, make
    from jaxwarp.train.config import load_config, shipped_configs

    texts = set(layouts.builtin_layouts().values())
    for name in shipped_configs():
        c = load_config(name)
        if c.env not in contract_envs():
            continue
        env = make(c.env, backend="jax", config=c.env_config, **dict(c.env_params))
        assert generated_source(env.spec, "cpu", env.params) in texts, name


def test_digest_covers_every_source(tmp_path):
    """One byte more in the env's header or in the layout: another digest,
    so a prebuilt library is never used for sources it was not built from."""
    header = tmp_path / "cartpole.h"
    header.write_bytes((API_DIR / "envs" / "cartpole.h").read_bytes())
    layout = (LAYOUTS / "cartpole.h").read_text()
    d = prebuilt.digest(layout, header)
    assert len(d) == 16 and d == prebuilt.digest(layout, API_DIR / "envs" / "cartpole.h")
    assert prebuilt.digest(layout + " ", header) != d
    header.write_bytes(header.read_bytes() + b"\n")
    assert prebuilt.digest(layout, header) != d


def test_digest_covers_the_shared_headers_an_env_includes(tmp_path):
    """An MPE env's sources are its header and cuda/envs/_mpe.h, which it
    includes (CMakeLists.txt collects the same files): an edit of _mpe.h is
    another digest."""
    src = API_DIR / "envs"
    assert [p.name for p in prebuilt.env_sources(src / "mpe_simple_tag.h")] == [
        "mpe_simple_tag.h", "_mpe.h"]
    assert [p.name for p in prebuilt.env_sources(src / "cartpole.h")] == ["cartpole.h"]
    for name in ("mpe_simple_tag.h", "_mpe.h"):
        (tmp_path / name).write_bytes((src / name).read_bytes())
    layout = (LAYOUTS / "mpe_simple_tag.h").read_text()
    d = prebuilt.digest(layout, tmp_path / "mpe_simple_tag.h")
    assert d == prebuilt.digest(layout, src / "mpe_simple_tag.h")
    (tmp_path / "_mpe.h").write_bytes((src / "_mpe.h").read_bytes() + b"\n")
    assert prebuilt.digest(layout, tmp_path / "mpe_simple_tag.h") != d


def test_runs_on_follows_cuda_compatibility():
    archs = "sm_80,sm_90,sm_100,compute_100"
    assert prebuilt.runs_on(archs, 80) and prebuilt.runs_on(archs, 86)  # sm_80 code on 8.6
    assert prebuilt.runs_on(archs, 90) and prebuilt.runs_on(archs, 100)
    assert prebuilt.runs_on(archs, 120)  # compute_100 PTX, JIT-compiled
    assert not prebuilt.runs_on(archs, 75)  # Turing: no code for it
    assert not prebuilt.runs_on("sm_90", 100) and not prebuilt.runs_on("sm_90", 89)
    assert not prebuilt.runs_on("", 90)


def _fake_prebuilt(tmp_path, monkeypatch, name, header, layout, archs=""):
    """A prebuilt folder holding a (fake) library for these sources."""
    base = tmp_path / "prebuilt"
    folder = f"{name}-cpu-{prebuilt.digest(layout, header)}"
    (base / folder).mkdir(parents=True)
    lib = base / folder / f"lib{name}_cpu.so"
    lib.write_bytes(b"not a library")
    (base / "manifest.txt").write_text(f"{name} {folder} cpu {archs}\n")
    monkeypatch.setattr(prebuilt, "prebuilt_dirs", lambda: [base])
    return lib


def test_prebuilt_library_is_used_before_any_compiler(tmp_path, monkeypatch):
    """With the package's library for exactly these sources, `compile_library`
    returns it without looking for g++ (none on PATH here), and with
    JAXWARP_PREBUILT=0 it looks for the compiler again."""
    from jaxwarp.envs.cartpole import SPEC

    header = Path(SPEC.header)
    layout = (LAYOUTS / "cartpole.h").read_text()
    lib = _fake_prebuilt(tmp_path, monkeypatch, "cartpole", header, layout)
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    monkeypatch.setenv("JAXWARP_CACHE_DIR", str(tmp_path / "cache"))
    assert build.compile_library(SPEC, header, "cpu") == lib
    assert prebuilt.manifest() == [{"name": "cartpole", "folder": str(lib.parent),
                                    "platform": "cpu", "archs": ""}]
    monkeypatch.setenv("JAXWARP_PREBUILT", "0")
    with pytest.raises(EnvBuildError, match="no C\\+\\+ compiler found"):
        build.compile_library(SPEC, header, "cpu")


def test_edited_header_is_compiled_not_taken_prebuilt(tmp_path, monkeypatch):
    """An env whose header differs from the one the package was built from
    (a user's copy, an edited checkout) is compiled into the cache."""
    from jaxwarp.envs.cartpole import SPEC

    layout = (LAYOUTS / "cartpole.h").read_text()
    lib = _fake_prebuilt(tmp_path, monkeypatch, "cartpole", Path(SPEC.header), layout)
    header = tmp_path / "src" / "cartpole.h"
    header.parent.mkdir()
    header.write_text(Path(SPEC.header).read_text() + "\n// edited\n")
    monkeypatch.setenv("JAXWARP_CACHE_DIR", str(tmp_path / "cache"))
    out = build.compile_library(SPEC, header, "cpu")
    assert out != lib and (tmp_path / "cache") in out.parents


def test_installed_package_carries_the_builtins_for_cpu():
    """The package as installed here (editable or wheel) carries every
    built-in env's XLA:CPU library, listed in its manifest, and making a
    built-in env takes it (target prefix = its folder's digest: CMake's
    digest and `prebuilt.digest` agree, _mpe.h included)."""
    rows = prebuilt.manifest()
    if not rows:
        pytest.skip("jaxwarp installed without its compiled part (no prebuilt/manifest.txt)")
    cpu = {r["name"] for r in rows if r["platform"] == "cpu"}
    assert set(layouts.builtin_layouts()) | {"_jaxwarp_cpu"} <= cpu
    for r in rows:
        if r["platform"] == "cuda" and r["name"] != "_jaxwarp_cuda":
            assert "sm_" in r["archs"], r
    for name in ("cartpole", "mpe_simple_spread", "mpe_simple_tag", "tag_gridworld"):
        env = jaxwarp.make(name, backend="cpu")
        folder = next(Path(r["folder"]) for r in rows if r["name"] == name
                      and r["platform"] == "cpu")
        assert env._prefix.endswith(folder.name.rsplit("-", 1)[-1]), name


def _fake_pip_nvcc(site: Path, major: str) -> Path:
    """The layout of NVIDIA's nvidia-cuda-nvcc wheel (checked on 13.0.88):
    nvidia/cu13/bin/nvcc, nvidia/cu13/include, nvidia/cu13/lib/libcudart_static.a
    (from nvidia-cuda-runtime)."""
    home = site / "nvidia" / f"cu{major}"
    (home / "bin").mkdir(parents=True)
    (home / "include").mkdir()
    (home / "lib").mkdir()
    (home / "lib" / "libcudart_static.a").write_bytes(b"")
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR)
    return nvcc


def test_pip_nvcc_is_found_without_cuda_home_or_path(tmp_path, monkeypatch):
    """No CUDA_HOME, CUDA_PATH or NVCC, no nvcc on PATH: the nvcc of NVIDIA's
    pip wheel in site-packages is the one used (before /usr/local/cuda), the
    newest major first, and the compile links cudart from its lib/ folder."""
    site = tmp_path / "site-packages"
    nvcc = _fake_pip_nvcc(site, "13")
    _fake_pip_nvcc(site / "older", "12")
    for var in ("CUDA_HOME", "CUDA_PATH", "NVCC"):
        monkeypatch.delenv(var, raising=False)
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(sys, "path", [str(site / "older"), str(site), *sys.path])
    assert build._pip_nvccs()[0].endswith("cu12/bin/nvcc")  # sys.path order first
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    assert build.find_nvcc() == str(nvcc)
    assert build._nvcc_lib_flags(str(nvcc)) == ["-L", str(nvcc.parent.parent / "lib")]
    # A system toolkit's nvcc (lib64/ beside lib/) gets no extra flags.
    assert build._nvcc_lib_flags("/nonexistent/bin/nvcc") == []
    # An explicit choice still wins.
    monkeypatch.setenv("CUDA_HOME", str(site / "older" / "nvidia" / "cu12"))
    assert build.find_nvcc().endswith("cu12/bin/nvcc")


def test_no_nvcc_anywhere_names_the_pip_extra(tmp_path, monkeypatch):
    for var in ("CUDA_HOME", "CUDA_PATH", "NVCC"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    monkeypatch.setattr(os.path, "exists", lambda p: False)
    with pytest.raises(EnvBuildError, match=r"jaxwarp\[cuda13\]"):
        build.find_nvcc()



def test_wheel_builds_against_the_oldest_supported_jaxlib():
    """The prebuilt handlers carry the XLA FFI API version of the jaxlib headers
    they were compiled with, and XLA refuses handlers newer than itself (seen:
    a wheel built against a newer jaxlib made jax's cpu and cuda backends fail
    to start under jaxlib 0.11.2). So the build pins jaxlib to the lower bound
    that the package supports."""
    import re
    import tomllib

    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    build_req = [r for r in meta["build-system"]["requires"] if r.startswith("jaxlib")]
    runtime = [r for r in meta["project"]["dependencies"] if re.match(r"jaxlib\b", r)]
    assert len(build_req) == 1 and len(runtime) == 1, (build_req, runtime)
    pinned = re.fullmatch(r"jaxlib==([\d.]+)", build_req[0])
    floor = re.fullmatch(r"jaxlib>=([\d.]+)", runtime[0])
    assert pinned and floor and pinned.group(1) == floor.group(1), (build_req, runtime)


def test_a_sampler_library_without_its_handler_says_to_reinstall():
    """A stale file of another build found under the library's name (an old
    extension module) fails in one ImportError naming it and the fix."""
    from jaxwarp import _ffi

    with pytest.raises(ImportError, match=r"_jaxwarp_cpu.*lacks NoSuchHandler.*reinstall"):
        _ffi._load("_jaxwarp_cpu", "NoSuchHandler", "jaxwarp_test_missing", "cpu")
