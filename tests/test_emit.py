"""The generated part of an env's FFI library made visible: its layout header,
`authoring.generated_source` (the one generator the build compiles, through
the checked-in ffi/env_ffi.cc), `jaxwarp build ENV --emit DIR`, and the built-ins' layouts checked in under
ffi/layouts (the wheel's sources), which keep the generated text reviewable."""

from __future__ import annotations

import shutil
from pathlib import Path

import jax
import pytest

import jaxwarp
from jaxwarp import authoring
from jaxwarp.authoring import build
from jaxwarp.cli import main
from jaxwarp.envs.cartpole import SPEC as CARTPOLE

LAYOUTS = Path(__file__).resolve().parents[1] / "ffi" / "layouts"


@pytest.mark.parametrize("name", ["cartpole", "tag_continuous"])
def test_generated_source_matches_the_checked_in_layout(name):
    checked_in = LAYOUTS / f"{name}.h"
    text = authoring.generated_source(jaxwarp.make(name, backend="jax"), "cpu")
    assert text == checked_in.read_text(), (
        f"the generated layout of {name!r} differs from {checked_in}; if the change is "
        "intended, regenerate with `python -m jaxwarp.layouts` and review the diff")
    # One text for both platforms (g++ or nvcc picks the code path).
    assert authoring.generated_source(jaxwarp.make(name, backend="jax"), "cuda") == text
    # Data only: the handlers are instantiated by the checked-in ffi/env_ffi.cc.
    assert "JAXWARP_DEFINE_ENV" not in text and '#include "jaxwarp_ffi.h"' not in text
    assert f"#define JAXWARP_ENV_NAME {name}\n" in text


def _recording_compiler(tmp_path: Path) -> tuple[Path, Path]:
    """A "compiler" that writes its arguments, one a line, and succeeds."""
    argv = tmp_path / "argv.txt"
    tool = tmp_path / "fake_cc"
    tool.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {argv}\n')
    tool.chmod(0o755)
    return tool, argv


@pytest.mark.parametrize("platform", ["cpu", "cuda"])
def test_build_compiles_the_checked_in_source_with_the_generated_layout(tmp_path, monkeypatch,
                                                                       platform):
    """compile_library writes generated_source's text into the env's cache folder as
    env_layout.h and compiles ffi/env_ffi.cc (nvcc: as CUDA) with that folder,
    the framework's folders and the env header's folder on the include path
    (the layout's folder before the header's)."""
    tool, argv = _recording_compiler(tmp_path)
    monkeypatch.setenv("JAXWARP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("JAXWARP_PREBUILT", "0")  # compile, even where the package carries it
    monkeypatch.setenv("JAXWARP_CUDA_ARCH", "90")
    monkeypatch.setattr(build, "find_cxx", lambda: str(tool))
    monkeypatch.setattr(build, "find_nvcc", lambda: str(tool))
    monkeypatch.setattr(build, "compiler_id", lambda path: "fake")
    monkeypatch.setattr(build, "_seal", lambda tmp, lib: None)
    build.compile_library(CARTPOLE, Path(CARTPOLE.header), platform)
    (written,) = (tmp_path / "cache").glob(f"cartpole-{platform}-*/env_layout.h")
    assert written.read_text() == authoring.generated_source(CARTPOLE, platform)
    args = argv.read_text().splitlines()
    source = str(authoring.FFI_DIR / "env_ffi.cc")
    assert args[-3:] == [source, "-o", args[-1]] and args.count(source) == 1
    includes = [args[i + 1] for i, a in enumerate(args) if a == "-I"]
    assert includes == [str(authoring.API_DIR), str(authoring.FFI_DIR), str(written.parent),
                        str(Path(CARTPOLE.header).parent), jax.ffi.include_dir()]
    if platform == "cuda":
        assert args[-5:-3] == ["-x", "cu"]
    else:
        assert "-x" not in args


def test_checked_in_ffi_sources_exist_and_key_the_cache():
    """ffi/env_ffi.cc includes the layout by its fixed name and instantiates
    the handlers through a macro that expands the env's name first; both FFI
    sources are part of every build's cache key."""
    source = (authoring.FFI_DIR / "env_ffi.cc").read_text()
    assert '#include "env_layout.h"' in source and '#include "jaxwarp_ffi.h"' in source
    assert "JAXWARP_DEFINE_ENV_EXPANDED(JAXWARP_ENV_NAME, JAXWARP_ENV)" in source
    assert (authoring.FFI_DIR / "jaxwarp_ffi.h").is_file()
    assert set(authoring.FFI_SOURCES) == {"env_ffi.cc", "jaxwarp_ffi.h"}
    assert not (authoring.API_DIR / "jaxwarp_ffi.h").exists() or (
        authoring.API_DIR == authoring.FFI_DIR)


def test_cache_key_follows_the_checked_in_ffi_source(tmp_path, monkeypatch):
    """An edit of ffi/env_ffi.cc (or jaxwarp_ffi.h) makes a new library."""
    tool, _ = _recording_compiler(tmp_path)
    ffi_dir = tmp_path / "ffi"
    shutil.copytree(authoring.FFI_DIR, ffi_dir)
    monkeypatch.setenv("JAXWARP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("JAXWARP_PREBUILT", "0")  # compile, even where the package carries it
    monkeypatch.setattr(build, "find_cxx", lambda: str(tool))
    monkeypatch.setattr(build, "compiler_id", lambda path: "fake")
    monkeypatch.setattr(build, "_seal", lambda tmp, lib: None)
    monkeypatch.setattr(build, "FFI_DIR", ffi_dir)
    first = build.compile_library(CARTPOLE, Path(CARTPOLE.header), "cpu")
    (ffi_dir / "env_ffi.cc").write_text((ffi_dir / "env_ffi.cc").read_text() + "// edit\n")
    second = build.compile_library(CARTPOLE, Path(CARTPOLE.header), "cpu")
    assert first.parent != second.parent


def test_generated_source_names_no_absolute_path():
    text = authoring.generated_source(CARTPOLE, "cpu")
    assert '#include "cartpole.h"' in text
    assert str(authoring.API_DIR) not in text and str(Path.home()) not in text


def test_generated_source_bad_arguments():
    with pytest.raises(ValueError, match=r"backend must be 'cpu' or 'cuda'; got 'gpu'"):
        authoring.generated_source(CARTPOLE, "gpu")
    with pytest.raises(TypeError, match=r"env must be an EnvSpec or an env built from one; got "
                                        r"str"):
        authoring.generated_source("cartpole", "cpu")  # by name: jaxwarp.make(name) first
    with pytest.raises(TypeError, match=r"env must be an EnvSpec or an env built from one; got "
                                        r"int"):
        authoring.generated_source(3, "cpu")


@pytest.mark.parametrize("name", ["jaxwarp_env.h", "jaxwarp_ffi.h"])
def test_header_named_like_a_framework_header_is_refused(tmp_path, name):
    header = tmp_path / name
    header.write_text(Path(CARTPOLE.header).read_text())
    with pytest.raises(authoring.EnvBuildError, match=r"has the name of jaxwarp's own"):
        authoring.generated_source(CARTPOLE, "cpu", header=header)


def test_header_named_like_the_generated_layout_is_refused(tmp_path):
    header = tmp_path / "env_layout.h"
    header.write_text(Path(CARTPOLE.header).read_text())
    with pytest.raises(authoring.EnvBuildError, match=r"name of the generated layout"):
        authoring.generated_source(CARTPOLE, "cpu", header=header)


def test_params_are_part_of_the_generated_source():
    """Static params are compiled in: other params, other text (the build's
    cache key follows); by default, the registered env's params."""
    from jaxwarp.envs.tag_continuous import SPEC, TagContinuousParams

    default = authoring.generated_source(jaxwarp.make("tag_continuous", backend="jax"), "cpu")
    assert authoring.generated_source(SPEC, "cpu") == default
    assert "static constexpr int32_t full_obs = 0;" in default
    full = authoring.generated_source(
        SPEC, "cpu", params=TagContinuousParams(use_full_observation=True))
    assert "static constexpr int32_t full_obs = 1;" in full


# ---------------------------------------------------------------------------
# The command line.
# ---------------------------------------------------------------------------
def test_cli_emit_writes_the_layouts_and_prints_their_paths(tmp_path, monkeypatch, capsys):
    def no_compile(*args, **kwargs):
        raise AssertionError("--emit must not compile")

    monkeypatch.setattr(build, "compile_library", no_compile)
    out = tmp_path / "new" / "gen"
    assert main(["build", "cartpole", "acrobot", "--emit", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out.split() == [str(out / "cartpole_layout.h"), str(out / "acrobot_layout.h")]
    # stderr names the checked-in file that compiles them.
    assert str(authoring.FFI_DIR / "env_ffi.cc") in captured.err
    assert sorted(p.name for p in out.iterdir()) == ["acrobot_layout.h", "cartpole_layout.h"]
    assert (out / "cartpole_layout.h").read_text() == (LAYOUTS / "cartpole.h").read_text()
    assert (out / "acrobot_layout.h").read_text() == authoring.generated_source(jaxwarp.make("acrobot", backend="jax"), "cpu")


def test_cli_emit_cuda_writes_the_same_layout(tmp_path, capsys):
    assert main(["build", "cartpole", "--backend", "cuda", "--emit", str(tmp_path)]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "cartpole_layout.h")]
    assert (tmp_path / "cartpole_layout.h").read_text() == authoring.generated_source(
        jaxwarp.make("cartpole", backend="jax"), "cuda")


def test_cli_emit_without_names_writes_every_contract_env(tmp_path, capsys):
    from jaxwarp.registry import contract_envs

    assert main(["build", "--backend", "cpu", "--emit", str(tmp_path)]) == 0
    capsys.readouterr()
    contract = set(contract_envs())
    assert {p.name for p in tmp_path.iterdir()} == {f"{n}_layout.h" for n in contract}


def test_cli_emit_unknown_env_is_an_error(tmp_path, capsys):
    assert main(["build", "cartpole", "nope", "--emit", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxwarp build: error: 'nope' is not an env built through the "
                          "authoring contract"), err
    assert list(tmp_path.iterdir()) == []  # nothing written before the error


def test_cli_emit_unwritable_dir_is_an_error(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    assert main(["build", "cartpole", "--emit", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"jaxwarp build: error: --emit {blocker / 'sub'}: cannot write "
                          "there"), err
    assert len(err.strip().splitlines()) == 1
