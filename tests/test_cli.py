"""The ``jaxwarp`` command line through `jaxwarp.cli.main` (issue 30): overrides
on both sides of a flag, help texts as users read them, `jaxwarp configs` with
one line per config, and where runs go by default. Training itself is
replaced by a stub here (the runs are tested in test_train and
test_reliability); these tests are about what the CLI hands over and prints."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from jaxwarp.cli import main
from jaxwarp.run import loop
from jaxwarp.train.config import config_description, load_config, shipped_configs

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def captured_train(monkeypatch, tmp_path):
    """Replaces train_run: records what `jaxwarp train` passed and returns an
    unfinished run's summary (so no evaluation follows)."""
    calls = []

    def fake_train_run(config, out, **kwargs):
        calls.append(SimpleNamespace(config=config, out=out, **kwargs))
        summary = {"updates": 0, "num_updates": 1, "env_steps_per_seed": 0, "seeds": 1,
                   "env_steps_per_s": 0.0, "compile_s": 0.0, "final": {}, "finished": False}
        return SimpleNamespace(summary=summary, out_dir=tmp_path)

    monkeypatch.setattr(loop, "train_run", fake_train_run)
    return calls


# ---------------------------------------------------------------------------
# Overrides anywhere among the flags (Hydra style).
# ---------------------------------------------------------------------------
def test_train_overrides_on_both_sides_of_a_flag(captured_train, tmp_path, capsys):
    code = main(["train", "--env", "cartpole", "total_env_steps=8192", "--no-progress",
                 "num_envs=8", "--out", str(tmp_path / "run"), "seed=3"])
    assert code == 0, capsys.readouterr().err
    (call,) = captured_train
    c = call.config
    assert (c.env, c.total_env_steps, c.num_envs, c.seed) == ("cartpole", 8192, 8, 3)
    assert call.progress == "lines" and call.out == str(tmp_path / "run")
    # The shipped config for --env is the base; the overrides win over it.
    base = load_config("cartpole_ppo")
    assert c.num_steps == base.num_steps and c.policy("agent") == base.policy("agent")


def test_train_overrides_between_every_kind_of_flag(captured_train, tmp_path, capsys):
    code = main(["train", "num_steps=16", "--seeds", "2", "policies.agent.lr=1e-3",
                 "--env", "cartpole", "num_minibatches=2", "--config", "cartpole_ppo",
                 "num_envs=4", "--out", str(tmp_path / "run"), "--eval-episodes", "0",
                 "total_env_steps=128", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    (call,) = captured_train
    c = call.config
    assert (c.num_steps, c.num_minibatches, c.num_envs, c.total_env_steps) == (16, 2, 4, 128)
    assert c.policy("agent").lr == 1e-3 and call.seeds == 2


def test_train_unknown_flag_is_still_an_error(captured_train, capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--env", "cartpole", "num_envs=8", "--no-such-flag", "seed=1"])
    assert e.value.code == 2
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err
    assert not captured_train


def test_resume_refuses_overrides_given_after_a_flag(captured_train, tmp_path, capsys):
    code = main(["train", "--resume", str(tmp_path), "--no-progress", "num_envs=8"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("jaxwarp train: error: --resume DIR takes the run's "
                                        "saved config"), err
    assert not captured_train


def test_build_env_names_on_both_sides_of_a_flag(monkeypatch, capsys):
    from jaxwarp.authoring import build

    built = []
    monkeypatch.setattr(build, "compile_library",
                        lambda spec, header, platform, params=None:
                        built.append((spec.name, platform)) or Path("/cache/lib.so"))
    assert main(["build", "cartpole", "--backend", "cpu", "acrobot"]) == 0, \
        capsys.readouterr().err
    assert sorted(built) == [("acrobot", "cpu"), ("cartpole", "cpu")]


# ---------------------------------------------------------------------------
# Help texts and the config list.
# ---------------------------------------------------------------------------
def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as e:
        main([*argv, "--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", ["", "train", "sweep", "eval", "render", "configs", "envs",
                                     "build"])
def test_help_shows_plain_text(command, capsys):
    text = _help(capsys, *([command] if command else []))
    assert "``" not in text and "%%" not in text, text  # no RST markup, no escaped percent
    assert text.startswith("usage: jaxwarp")


def test_top_help_describes_the_command_line(capsys):
    text = _help(capsys)
    assert "jaxwarp command line: train policies" in text
    for command in ("train", "eval", "render", "configs", "envs", "build"):
        assert command in text


def test_train_help_says_what_ctrl_c_does(capsys):
    text = " ".join(_help(capsys, "train").split())
    assert "Ctrl-C stops at the end of the current chunk of updates and saves a checkpoint" \
        in text


def test_eval_help_shows_a_plain_percent(capsys):
    text = " ".join(_help(capsys, "eval").split())
    assert "gain with 95% CI" in text


def test_configs_lists_each_name_with_one_line(capsys):
    assert main(["configs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = shipped_configs()
    assert [line.split()[0] for line in lines] == names
    for name, line in zip(names, lines):
        description = config_description(name)
        assert description and line.endswith("  " + description), line
        assert len(description) <= 100


def test_config_description_of_a_user_file(tmp_path):
    plain = tmp_path / "plain.yaml"
    plain.write_text("env: cartpole\n# not at the top\n")
    assert config_description(plain) == ""
    commented = tmp_path / "commented.yaml"
    commented.write_text("# Cartpole, small. More words\n# that follow.\n#\n# Details.\n"
                         "env: cartpole\nnum_envs: 4\n")
    assert config_description(commented) == "Cartpole, small."
    long = tmp_path / "long.yaml"
    long.write_text("# " + "word " * 40 + "\nenv: cartpole\n")
    assert config_description(long).endswith("...") and len(config_description(long)) == 100
    assert load_config(commented).num_envs == 4  # comments do not change the config
    assert config_description(tmp_path / "missing.yaml") == ""


# ---------------------------------------------------------------------------
# Where runs go.
# ---------------------------------------------------------------------------
def test_default_out_dir_is_under_runs_and_git_ignored(captured_train, monkeypatch, tmp_path,
                                                       capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--env", "cartpole", "--no-progress", "num_envs=8"]) == 0
    (call,) = captured_train
    assert Path(call.out).parent == Path("runs") and Path(call.out).name.startswith("cartpole-")
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q",
                              "runs/cartpole-20260101-000000/metrics.jsonl"])
    assert ignored.returncode == 0, "runs/ is not git-ignored"


# ---------------------------------------------------------------------------
# docs/custom_env.md: where its usage blocks go.
# ---------------------------------------------------------------------------
def test_custom_env_usage_blocks_run_as_the_script_the_page_names(tmp_path):
    """§3–§5 of the page, saved as the script it names beside copies of the
    example's two files and begun with the imports it names, run as is."""
    import re
    import sys

    text = (REPO / "docs" / "custom_env.md").read_text()
    s3, s6 = text.index("## 3. Build"), text.index("## 6. Train")
    section = text[s3:s6]
    script = re.search(r"say `examples/goal_reach/(\w+\.py)`", section).group(1)
    imports = re.findall(r"`((?:import|from) [^`]+)`", section)
    assert any(i.startswith("from goal_reach import") for i in imports), imports
    blocks = re.findall(r"^```python\n(.*?)^```", section, re.M | re.S)
    assert len(blocks) == 4
    for name in ("goal_reach.h", "goal_reach.py"):
        shutil.copy(REPO / "examples" / "goal_reach" / name, tmp_path / name)
    (tmp_path / script).write_text("\n".join(imports) + "\n\n" + "\n".join(blocks))
    run = subprocess.run([sys.executable, script], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "cpu vs jax: 83 steps x 8 envs, 16 episodes finished, max |diff| 0: consistent" \
        in run.stdout


@pytest.mark.parametrize("size", ["4", "60000"])
def test_render_size_is_bounded(size, capsys):
    """A huge --size asked XLA for gigabytes per frame and aborted the process."""
    assert main(["render", "--env", "cartpole", "--steps", "2", "--size", size]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"jaxwarp render: error: --size must be in [8, 2048]; got {size}", err


@pytest.mark.parametrize("command", [["render", "--env", "cartpole", "--steps", "2"],
                                     ["eval", "--run", "no-such-run"]])
@pytest.mark.parametrize("seed", ["-1", str(2**32)])
def test_seed_is_bounded(command, seed, capsys):
    """With x64 off jax.random.key keeps 32 bits: --seed 2**32 replayed seed 0."""
    assert main([*command, "--seed", seed]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"jaxwarp {command[0]}: error: --seed must be in [0, 2**31); got {seed}", err


def test_output_into_a_closed_pipe_is_quiet():
    """`jaxwarp configs | head -1`: the reader leaves early; no traceback."""
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "jaxwarp", "configs"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the command writes anything
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_envs_lists_each_registered_env_with_agents_backends_and_description(capsys):
    from jaxwarp import registry

    assert main(["envs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["env", "agents", "backends", "description"]
    names = registry.registered_envs()
    assert set(registry.builtin_envs()) <= set(names)
    rows = dict(zip(names, lines[1:1 + len(names)], strict=True))
    for name, line in rows.items():
        words = line.split()
        assert words[0] == name, line
        spec = registry.env_spec(name)
        assert int(words[1]) == spec.num_agents(spec.params_type()), line
        assert "jax" in words[2:5] and len(line.split("  ")[-1].strip()) > 10, line
    assert rows["tag_continuous"].split()[1] == "110" and rows["cartpole"].split()[1] == "1"
    assert "Tag (continuous): taggers chase runners in a square arena." in rows["tag_continuous"]
    assert "cartpole" in rows and " cpu " in rows["cartpole"]  # prebuilt in this package
    assert lines[-1] == "cuda: not listed, no CUDA GPU visible to JAX here" or \
        " cuda" in rows["cartpole"]


def test_envs_marks_backends_that_compile_at_first_use_and_drops_those_that_cannot(
        capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("JAXWARP_PREBUILT", "0")  # nothing prebuilt: cpu needs the compiler
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    assert " cpu* jax " in out.splitlines()[1]
    assert "* not prebuilt for the default params: the first use compiles it" in out
    for var in ("CUDA_HOME", "CUDA_PATH", "NVCC", "CXX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no compiler either: the jax backend only
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].split()[:3] == ["acrobot", "1", "jax"] and "*" not in out


def test_envs_lists_an_env_registered_without_a_spec_last(capsys, monkeypatch):
    from jaxwarp import registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    cls = type("ToyEnv", (), {"__module__": __name__})
    registry.register_env("toy_env", cls, dataclasses.make_dataclass("ToyParams", []))
    assert main(["envs"]) == 0
    last = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("toy_env")]
    assert len(last) == 1 and last[0].split()[1:3] == ["?", "?"]
    assert "The ``jaxwarp`` command line through" in last[0]  # this module's docstring


# ---------------------------------------------------------------------------
# jaxwarp info (issue 40): what a bug report needs.
# ---------------------------------------------------------------------------
def test_info_prints_every_field(capsys, monkeypatch, tmp_path):
    import jax
    import jaxlib

    import jaxwarp

    monkeypatch.setenv("JAXWARP_CACHE_DIR", str(tmp_path / "jwcache"))
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    fields = {ln.split(":", 1)[0] for ln in out.splitlines() if ln and not ln.startswith(" ")}
    assert {"jaxwarp", "imported from", "python", "platform", "jax", "jaxlib", "devices",
            "backends", "prebuilt", "model kernels", "c++ compiler", "nvcc", "cache"} <= fields
    assert f"jaxwarp: {jaxwarp.__version__} " in out
    assert f"jax: {jax.__version__}\n" in out and f"jaxlib: {jaxlib.__version__}\n" in out
    assert "  cpu:0" in out  # the devices, one a line
    assert "  jax (pure-JAX reference)" in out and "  cpu (XLA:CPU library loaded)" in out
    assert f"cache: {tmp_path / 'jwcache'}\n" in out
    if not jaxwarp.gpu_available():  # the CPU: neither model kernel runs, each says why
        assert "  fused layers (Pallas, Triton): not here (no CUDA GPU)\n" in out
        assert "  the rollout's forward (Pallas, Mosaic GPU): not here (" in out
        assert ("  PPO minibatch steps of 64-wide bf16 models (Pallas, Mosaic GPU): not here ("
                in out)


def test_info_says_whether_jaxwarp_is_imported_from_a_checkout_or_installed(
        capsys, monkeypatch, tmp_path):
    from jaxwarp import info

    assert main(["info"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines()
                if ln.startswith("imported from: "))
    assert line.startswith(f"imported from: the source checkout {REPO} (")  # this clone
    # A clone run from its root while a wheel is installed elsewhere, and the wheel.
    clone, site = tmp_path / "clone", tmp_path / "site-packages"
    for folder in (clone / "jaxwarp", site / "jaxwarp"):
        folder.mkdir(parents=True)
    (clone / "pyproject.toml").write_text("")
    monkeypatch.setattr(info, "installed_jaxwarp", lambda: ("0.1.0", None, site / "jaxwarp"))
    assert info.package_origin(clone / "jaxwarp") == (
        f"the source checkout {clone} (pyproject.toml beside the package); not the installed "
        f"jaxwarp 0.1.0 (in {site / 'jaxwarp'}): Python finds this folder first (the current "
        "directory or PYTHONPATH); run from elsewhere to use that one")
    assert info.package_origin(site / "jaxwarp") == f"an installed package ({site / 'jaxwarp'})"
    monkeypatch.setattr(info, "installed_jaxwarp", lambda: ("0.1.0", clone, site / "jaxwarp"))
    assert info.package_origin(clone / "jaxwarp").endswith(", installed editable (jaxwarp 0.1.0)")
    monkeypatch.setattr(info, "installed_jaxwarp", lambda: None)
    assert info.package_origin(clone / "jaxwarp").endswith("; no jaxwarp installed")


def test_info_lists_prebuilt_libraries_with_archs_and_missing_compilers(capsys, monkeypatch,
                                                                        tmp_path):
    from jaxwarp.authoring import prebuilt

    base = tmp_path / "prebuilt"
    base.mkdir()
    (base / "manifest.txt").write_text(
        "# name folder platform archs\n_jaxwarp_cpu . cpu\n"
        "cartpole cartpole-cuda-0123456789abcdef cuda sm_80,sm_90,sm_100,compute_100\n"
        "tag_continuous.large tag_continuous-cpu-0123456789abcdef cpu\n"
        "tag_continuous.tag_duel_cpu tag_continuous-cpu-fedcba9876543210 cpu\n")
    monkeypatch.setattr(prebuilt, "prebuilt_dirs", lambda: [base])
    for var in ("CUDA_HOME", "CUDA_PATH", "NVCC", "CXX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("jaxwarp.authoring.build._pip_nvccs", lambda: [])
    monkeypatch.setattr("os.path.exists", lambda p: False)
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert ("prebuilt:\n  _jaxwarp_cpu cpu\n"
            "  cartpole cuda [sm_80,sm_90,sm_100,compute_100] (default params)\n"
            "  tag_continuous.large cpu (env config large)\n"
            "  tag_continuous.tag_duel_cpu cpu (env params of the training config "
            "tag_duel_cpu)\n") in out
    assert "c++ compiler: none found\n" in out and "nvcc: none found\n" in out


# ---------------------------------------------------------------------------
# A failed env build: the error line, then the compiler's own lines.
# ---------------------------------------------------------------------------
def test_a_compile_error_prints_the_error_line_then_the_compilers_lines(
        capsys, monkeypatch, tmp_path, captured_train):
    from jaxwarp.authoring import EnvBuildError, build_env
    from jaxwarp.envs.cartpole import SPEC

    monkeypatch.setenv("JAXWARP_CACHE_DIR", str(tmp_path / "cache"))
    lines = Path(SPEC.header).read_text().splitlines()
    i = next(n for n, ln in enumerate(lines) if "const float td" in ln)
    lines[i] = "  const float td = s.theta_dott[i];  // typo"
    header = tmp_path / "my_cartpole.h"
    header.write_text("\n".join(lines) + "\n")
    with pytest.raises(EnvBuildError) as e:
        build_env(SPEC, backend="cpu", header=header)

    def fail_to_build(config, out, **kwargs):
        raise e.value

    monkeypatch.setattr(loop, "train_run", fail_to_build)
    assert main(["train", "--env", "cartpole", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"jaxwarp train: error: cartpole: compiling {header} for cpu "
                             "failed")
    assert len(err) > 2 and all(ln.startswith("  ") or not ln for ln in err[1:])
    assert err[1].startswith(f"  {header}:"), err  # the user's file first
    assert any(ln.startswith(f"  {header}:{i + 1}:") and "theta_dott" in ln for ln in err), err


def test_compiler_output_under_the_error_line_is_bounded(capsys):
    from jaxwarp import cli
    from jaxwarp.authoring import EnvBuildError

    output = "\n".join(f"line {n} " + "x" * 1000 for n in range(100))
    assert cli._fail("build", EnvBuildError(f"env: compiling failed\n{output}\n")) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "jaxwarp build: error: env: compiling failed"
    assert len(err) == 1 + cli.COMPILER_LINES + 1
    assert err[1].startswith("  line 0 x") and len(err[1]) == cli.COMPILER_LINE_LIMIT
    assert err[-1] == "  ... 60 more lines of compiler output"
    # Any other message stays one line.
    assert cli._fail("train", ValueError("a\nb")) == 2
    assert capsys.readouterr().err == "jaxwarp train: error: a b\n"
