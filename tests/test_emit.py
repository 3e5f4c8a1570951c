"""The generated FFI source made visible: `authoring.generated_source` (the
one generator the build compiles), `jaxwarp build ENV --emit DIR`, and golden
files in tests/golden that keep the generated text reviewable."""

from __future__ import annotations

from pathlib import Path

import pytest

from jaxwarp import authoring
from jaxwarp.authoring import build
from jaxwarp.cli import main
from jaxwarp.envs.cartpole import SPEC as CARTPOLE

GOLDEN = Path(__file__).resolve().parent / "golden"


@pytest.mark.parametrize("name", ["cartpole", "tag_continuous"])
def test_generated_source_matches_the_golden_file(name):
    golden = GOLDEN / f"{name}_ffi.cc"
    text = authoring.generated_source(name, "cpu")
    assert text == golden.read_text(), (
        f"the generated FFI source of {name!r} differs from {golden}; if the change is "
        f"intended, regenerate with `jaxwarp build {name} --emit tests/golden` and review "
        "the diff")
    # One text for both platforms today (g++ or nvcc picks the code path), so
    # --emit writes no .cu beside the golden .cc.
    assert authoring.generated_source(name, "cuda") == text
    assert not (GOLDEN / f"{name}_ffi.cu").exists()


def test_generated_source_is_what_the_build_compiles(tmp_path, monkeypatch):
    """_compile writes the text it compiles into the cache; building with a
    compiler that only succeeds (no real compile) shows it is generated_source's."""
    monkeypatch.setenv("JAXWARP_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "_find_cxx", lambda: "true")
    monkeypatch.setattr(build, "_compiler_id", lambda path: "true")
    monkeypatch.setattr(build, "_seal", lambda tmp, lib: None)
    build._compile(CARTPOLE, Path(CARTPOLE.header), "cpu")
    (written,) = tmp_path.glob("cartpole-cpu-*/cartpole_ffi.cc")
    assert written.read_text() == authoring.generated_source(CARTPOLE, "cpu")


def test_generated_source_names_no_absolute_path():
    text = authoring.generated_source(CARTPOLE, "cpu")
    assert '#include "cartpole.h"' in text
    assert str(authoring.API_DIR) not in text and str(Path.home()) not in text


def test_generated_source_bad_arguments():
    with pytest.raises(ValueError, match=r"backend must be 'cpu' or 'cuda'; got 'gpu'"):
        authoring.generated_source("cartpole", "gpu")
    with pytest.raises(ValueError, match=r"'nope' is not an env built through the authoring"):
        authoring.generated_source("nope", "cpu")
    with pytest.raises(TypeError, match=r"env must be an EnvSpec or an env name; got int"):
        authoring.generated_source(3, "cpu")


def test_header_named_like_a_framework_header_is_refused(tmp_path):
    header = tmp_path / "jaxwarp_env.h"
    header.write_text(Path(CARTPOLE.header).read_text())
    with pytest.raises(authoring.EnvBuildError, match=r"has the name of jaxwarp's own"):
        authoring.generated_source(CARTPOLE, "cpu", header=header)


def test_params_are_part_of_the_generated_source():
    """Static params are compiled in: other params, other text (the build's
    cache key follows); by default, the registered env's params."""
    from jaxwarp.envs.tag_continuous import SPEC, TagContinuousParams

    default = authoring.generated_source("tag_continuous", "cpu")
    assert authoring.generated_source(SPEC, "cpu") == default
    assert "static constexpr int32_t full_obs = 0;" in default
    full = authoring.generated_source(
        SPEC, "cpu", params=TagContinuousParams(use_full_observation=True))
    assert "static constexpr int32_t full_obs = 1;" in full


# ---------------------------------------------------------------------------
# The command line.
# ---------------------------------------------------------------------------
def test_cli_emit_writes_the_sources_and_prints_their_paths(tmp_path, monkeypatch, capsys):
    def no_compile(*args, **kwargs):
        raise AssertionError("--emit must not compile")

    monkeypatch.setattr(build, "_compile", no_compile)
    out = tmp_path / "new" / "gen"
    assert main(["build", "cartpole", "acrobot", "--emit", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(out / "cartpole_ffi.cc"), str(out / "acrobot_ffi.cc")]
    assert sorted(p.name for p in out.iterdir()) == ["acrobot_ffi.cc", "cartpole_ffi.cc"]
    assert (out / "cartpole_ffi.cc").read_text() == (GOLDEN / "cartpole_ffi.cc").read_text()
    assert (out / "acrobot_ffi.cc").read_text() == authoring.generated_source("acrobot", "cpu")


def test_cli_emit_cuda_only_writes_the_cu_file(tmp_path, capsys):
    assert main(["build", "cartpole", "--backend", "cuda", "--emit", str(tmp_path)]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "cartpole_ffi.cu")]
    assert (tmp_path / "cartpole_ffi.cu").read_text() == authoring.generated_source(
        "cartpole", "cuda")


def test_cli_emit_without_names_writes_every_contract_env(tmp_path, capsys):
    from jaxwarp.registry import _REGISTRY

    assert main(["build", "--backend", "cpu", "--emit", str(tmp_path)]) == 0
    capsys.readouterr()
    contract = {n for n, (cls, _, _) in _REGISTRY.items()
                if isinstance(cls, type) and issubclass(cls, authoring.ContractEnv)}
    assert {p.name for p in tmp_path.iterdir()} == {f"{n}_ffi.cc" for n in contract}


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
