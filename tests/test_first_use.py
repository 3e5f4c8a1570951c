"""What a new user hits first (issue 40, item 4): Ctrl-C at any moment, naming
one's own env and model on the command line (entry points), run folders usable
from anywhere, a labelled GIF, a trained policy used from Python, eval/resume
paths, a line per chunk without a terminal, and the messages that name a fix."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from jaxwarp import cli

ROOT = Path(__file__).resolve().parent.parent
GOAL_REACH = ROOT / "examples" / "goal_reach"
TINY = ["env=cartpole", "backend=cpu", "num_envs=8", "num_steps=8", "total_env_steps=128",
        "chunk_updates=1", "checkpoint_every=2", "policies.agent.hidden_sizes=[8]"]


def _jaxwarp(*args: str, cwd: Path | None = None, env: dict | None = None,
             **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "jaxwarp", *args], cwd=cwd,
                            env={**os.environ, "JAX_PLATFORMS": "cpu", **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


@pytest.mark.parametrize("delay", [0.0, 1.0, 3.0, 6.0, 12.0])
def test_ctrl_c_at_any_moment_stops_with_one_line_and_130(tmp_path, delay):
    """SIGINT once the command runs (its first line printed): while loading the
    config, building, compiling (a long run's first seconds) or training:
    exit 130, the one line saying where the run stands last on stderr, never a
    traceback, a segfault or a run that goes on."""
    p = _jaxwarp("train", "--no-progress", "--env", "cartpole", "--out", str(tmp_path / "run"),
                 "backend=cpu", "num_envs=64", "num_steps=64", "total_env_steps=100000000",
                 "chunk_updates=20", "checkpoint_every=20", env={"PYTHONUNBUFFERED": "1"})
    first = p.stdout.readline()  # "cartpole: starting from the shipped config ..."
    assert "starting from the shipped config" in first, first
    time.sleep(delay)
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=240)
    finally:
        p.kill()  # a run that went on must not outlive the test
    lines = [x for x in err.splitlines() if x.strip()]
    assert p.returncode == 130, (p.returncode, err)
    assert "Traceback" not in err and "Fatal" not in err and "Exception ignored" not in err, err
    assert lines and re.match(r"jaxwarp( train)?: interrupted", lines[-1]), err
    # Before it, at most the notice of the stop and of the checkpoint being saved.
    assert len(lines) <= 3 and all(x.startswith("jaxwarp") for x in lines), err


# Sends SIGINT to itself when `module` is first imported (the heavy imports
# that run inside cli.main), or from an object's __del__ run by the garbage
# collector there, where Python only reports the KeyboardInterrupt ("Exception
# ignored in ...") and goes on, as it does in jax's gc callback.
_EARLY_SIGINT = textwrap.dedent("""
    import gc, os, signal, sys

    module, how, args = sys.argv[1], sys.argv[2], sys.argv[3:]

    class Finalized:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(1000))  # the handler runs here, inside __del__

    class Hook:
        def find_spec(self, name, path=None, target=None):
            if name == module:
                sys.meta_path.remove(self)
                if how == "gc":
                    a = Finalized(); a.self = a; del a; gc.collect()
                else:
                    os.kill(os.getpid(), signal.SIGINT)
            return None

    sys.meta_path.insert(0, Hook())
    from jaxwarp.cli import main  # as the console script does, before main
    sys.exit(main(args))
    """)


def test_importing_the_cli_loads_nothing_heavy():
    """The console script imports jaxwarp.cli before main() handles Ctrl-C:
    that import loads no jax, numpy, flax or yaml (they load inside main)."""
    code = ("import sys, jaxwarp.cli; "
            "print([m for m in ('jax', 'numpy', 'flax', 'yaml') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("module, how", [("numpy", "raise"), ("jax", "raise"),
                                         ("flax", "raise"), ("jaxwarp.run.loop", "raise"),
                                         ("flax", "gc")])
def test_ctrl_c_during_the_imports_stops_with_one_line_and_130(tmp_path, module, how):
    """SIGINT while main() imports jax, flax, the envs, the trainer (before the
    command's first line): `jaxwarp train: interrupted` alone on stderr and
    exit 130; one raised inside a gc finalizer (swallowed by Python) too."""
    args = ["train", "--no-progress", "--out", str(tmp_path / "run"), *TINY]
    p = subprocess.run([sys.executable, "-c", _EARLY_SIGINT, module, how, *args],
                       env={**os.environ, "JAX_PLATFORMS": "cpu"}, capture_output=True,
                       text=True, timeout=240)
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert p.returncode == 130, (p.returncode, p.stderr)
    assert len(lines) == 1 and re.fullmatch(r"jaxwarp train: interrupted(; no checkpoint "
                                            r"was written yet)?", lines[0]), p.stderr
    assert not (tmp_path / "run").exists()


def _plugin_dist(tmp_path: Path) -> Path:
    """A folder on sys.path with an installed-looking package (dist-info) that
    declares goal_reach (an env module) and a model factory as entry points."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "jw_demo_models.py").write_text(textwrap.dedent("""
        from jaxwarp.models import MLPActorCritic

        def tiny_mlp(nvec, policy):
            return MLPActorCritic(tuple(int(n) for n in nvec), (4,), "tanh")
        """))
    info = site / "jw_demo-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: jw-demo\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[jaxwarp.envs]\ngoal_reach = goal_reach\n\n"
        "[jaxwarp.models]\ntiny_mlp = jw_demo_models:tiny_mlp\n")
    return site


def test_entry_points_name_an_env_and_a_model_on_the_command_line(tmp_path):
    """`pip install`ed plugins (entry point groups jaxwarp.envs, jaxwarp.models)
    are found by name, with no flag; eval from another folder finds them too."""
    site = _plugin_dist(tmp_path)
    env = {"PYTHONPATH": os.pathsep.join([str(site), str(GOAL_REACH)]
                                         + os.environ.get("PYTHONPATH", "").split(os.pathsep))}
    out = tmp_path / "run"
    p = _jaxwarp("train", "--no-progress", "--out", str(out), "env=goal_reach",
                 "env_config=null", "backend=cpu", "num_envs=8", "num_steps=8",
                 "total_env_steps=128", "chunk_updates=1", "checkpoint_every=2",
                 "policies.agent.model=tiny_mlp", "--eval-episodes", "0", env=env)
    stdout, err = p.communicate(timeout=400)
    assert p.returncode == 0, err
    run = json.loads((out / "summary.json").read_text())
    assert run["env"] == "goal_reach" and run["finished"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = _jaxwarp("eval", "--run", str(out), "--episodes", "2", cwd=elsewhere, env=env)
    stdout, err = p.communicate(timeout=400)
    assert p.returncode == 0, err
    assert "goal_reach update 2" in stdout


def test_env_module_names_a_model_on_the_command_line(tmp_path, monkeypatch, capsys):
    """docs/models.md, "Naming your model on the command line": env_module=PATH.py
    registers a model (register_model) that policies.G.model= then names; the
    run's eval finds it again from another folder; an unknown model's error says
    how to name one."""
    (tmp_path / "my_models.py").write_text(textwrap.dedent("""
        from jaxwarp.models import MLPActorCritic, register_model

        register_model("my_tiny_mlp", lambda nvec, policy: MLPActorCritic(
            tuple(int(n) for n in nvec), (4,), "tanh"))
        """))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", "--no-progress", "--out", "run", "--eval-episodes", "0",
                     "env_module=my_models.py", "policies.agent.model=my_tiny_mlp",
                     *TINY]) == 0
    capsys.readouterr()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = _jaxwarp("eval", "--run", str(tmp_path / "run"), "--episodes", "2", cwd=elsewhere)
    stdout, err = p.communicate(timeout=400)
    assert p.returncode == 0, err
    assert "cartpole update 2" in stdout
    assert cli.main(["train", "--out", "run2", "policies.agent.model=nope", *TINY]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'nope' is unknown" in err
    assert "env_module=PATH.py" in err and "'jaxwarp.models'" in err


def test_config_yaml_keeps_env_module_absolute(tmp_path, monkeypatch):
    """env_module=relative/path.py is stored absolute, so the run folder works
    from any folder (eval --run, --resume)."""
    from jaxwarp.run.checkpoint import read_saved_config
    from jaxwarp.run.loop import _absolute_env_module
    from jaxwarp.train.config import load_config

    monkeypatch.chdir(ROOT)
    config = load_config(None, ["env_module=examples/goal_reach/goal_reach.py"])
    assert _absolute_env_module(config).env_module == str(GOAL_REACH / "goal_reach.py")
    assert _absolute_env_module(load_config(None, ["env_module=my.module"])).env_module \
        == "my.module"
    out = tmp_path / "run"
    assert cli.main(["train", "--no-progress", "--out", str(out), "--eval-episodes", "0",
                     "env_module=examples/goal_reach/goal_reach.py", "env=goal_reach",
                     "env_config=null", *TINY[1:]]) == 0
    saved, _ = read_saved_config(out)
    assert saved.env_module == str(GOAL_REACH / "goal_reach.py")


def test_render_draws_a_user_env_named_by_env_module(tmp_path, monkeypatch, capsys):
    """`jaxwarp render --env NAME env_module=PATH.py`: an env of one's own that
    declares a drawing renders as the built-ins do (no install needed)."""
    from PIL import Image

    monkeypatch.chdir(ROOT)
    out = tmp_path / "g.gif"
    assert cli.main(["render", "--env", "goal_reach", "--backend", "jax", "--steps", "3",
                     "--size", "48", "--out", str(out),
                     "env_module=examples/goal_reach/goal_reach.py"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    with Image.open(out) as im:
        # under a header of 5 lines: the env, "random actions", the step, the episode,
        # the score; then the legend, one entry a line at 48 pixels: agent (its x, y),
        # goal (goal_x, goal_y)
        assert im.n_frames == 4 and im.size == (48, 7 * 12 + 2 + 48)
    assert cli.main(["render", "--env", "goal_reach", "seed=1"]) == 2
    assert capsys.readouterr().err.strip() == (
        "jaxwarp render: error: 'seed=1': render takes no key=value but env_module=PATH.py "
        "(or a module name), with --env")


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    from jaxwarp.run.loop import train_run
    from jaxwarp.train.config import load_config

    out = tmp_path_factory.mktemp("runs") / "cartpole"
    train_run(load_config(None, TINY), out, progress=False)
    return out


def test_gif_panels_are_labelled_with_step_and_score(cartpole_run):
    from jaxwarp.run.evaluate import LINE_PX, label_panels, load_run, render_run

    frames = render_run(load_run(cartpole_run), steps=3, size=64)
    head = LINE_PX * 4 + 2  # "trained, seed 0"/"random", "step t", "episode k", "score s"
    assert frames.shape == (4, head + 64, 64 + 2 + 64, 3) and frames.dtype == np.uint8
    header = frames[:, :head]
    assert (header < 100).any(axis=(1, 2, 3)).all()  # black text on every frame's header
    assert not np.array_equal(header[0], header[1])  # the step counter moves
    plain = render_run(load_run(cartpole_run), steps=3, size=64, labels=False)
    np.testing.assert_array_equal(frames[:, head:], plain)  # the drawing itself unchanged
    # One line of text per entry, cut at the panel's width.
    one = label_panels(np.zeros((2, 8, 8, 3), np.uint8), [["a"], ["b"]])
    assert one.shape == (2, LINE_PX + 2 + 8, 8, 3)


def test_gif_text_grows_with_the_panel():
    """A finished run's GIF has 256-pixel panels; their header text is drawn a
    tenth of the panel high, not in the 8-pixel bitmap font."""
    from jaxwarp.cli import GIF_PANEL_PX
    from jaxwarp.run.evaluate import label_panels, line_px

    assert GIF_PANEL_PX == 256 and line_px(256) == 25 and line_px(64) == 12
    out = label_panels(np.zeros((1, 256, 256, 3), np.uint8), [["trained, seed 3", "step 12"]])
    assert out.shape == (1, 2 * 25 + 2 + 256, 256, 3)
    ink = np.flatnonzero((out[0, :25] < 100).any(axis=(1, 2)))  # the first line's rows
    assert ink.max() - ink.min() >= 12, ink  # taller than the bitmap font's 8 pixels


def test_a_trained_policy_from_python_as_documented(cartpole_run, capsys):
    """docs/models.md, "Using a trained policy from Python": the snippet runs."""
    import jax

    text = (ROOT / "docs" / "models.md").read_text()
    m = re.search(r"## Using a trained policy from Python\n.*?```python\n(.*?)```", text,
                  re.S)
    assert m, "docs/models.md: no snippet under 'Using a trained policy from Python'"
    code = m.group(1).replace('"runs/cartpole"', repr(str(cartpole_run)))
    scope: dict = {}
    exec(compile(code, "docs/models.md", "exec"), scope)  # noqa: S102
    actions = scope["actions"]
    assert actions.shape == (16, 1, 1) and actions.dtype == np.int32
    assert "mean return" in capsys.readouterr().out
    # The loop is jitted (one program a step), and plays as the step op by op does.
    step, env, policy = scope["step"], scope["env"], scope["policy"]
    assert hasattr(step, "lower"), "the docs' step is not jax.jit-ed"
    obs, state = env.reset(jax.random.key(0), 16)
    args = (obs, state, policy.initial_carry(16), jax.numpy.ones((16,), bool))
    for t in range(3):
        jitted = step(jax.random.key(t + 1), *args)
        plain = step.__wrapped__(jax.random.key(t + 1), *args)
        for a, b in zip(jax.tree.leaves(jitted), jax.tree.leaves(plain), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
        args = jitted[1:5]


def test_eval_json_into_a_missing_folder_fails_before_evaluating(cartpole_run, capsys,
                                                                  monkeypatch):
    import jaxwarp.run.evaluate as ev

    monkeypatch.setattr(ev, "evaluate_run", lambda *a, **k: pytest.fail("evaluated"))
    assert cli.main(["eval", "--run", str(cartpole_run), "--json", "missing/dir/e.json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "jaxwarp eval: error: --json missing/dir/e.json: the folder missing/dir " \
                  "does not exist"


def test_resume_of_a_finished_run_makes_its_outputs_once_and_keeps_a_bigger_eval(
        cartpole_run, capsys):
    """A run trained from Python has no end-of-run outputs: the first --resume
    makes them (keeping an eval.json of the same update with more episodes),
    the next one says the run is finished with its outputs."""
    (cartpole_run / "eval.json").write_text(json.dumps({"update": 2, "episodes": 256}))
    before = (cartpole_run / "eval.json").read_text()
    assert cli.main(["train", "--resume", str(cartpole_run), "--eval-episodes", "4"]) == 0
    cap = capsys.readouterr()
    assert "nan" not in cap.err and "nan" not in cap.out
    assert "eval.json of update 2 with 256 episodes kept (this evaluation: 4)" in cap.out
    assert (cartpole_run / "eval.json").read_text() == before
    assert cli.main(["train", "--resume", str(cartpole_run)]) == 0
    cap = capsys.readouterr()
    assert cap.out == ""
    assert cap.err.strip() == (f"jaxwarp train: {cartpole_run} is already finished (2/2 "
                               f"updates) with its outputs; nothing to resume (jaxwarp eval "
                               f"--run {cartpole_run} evaluates it; total_env_steps=N extends "
                               f"it)")


def test_a_line_per_chunk_when_stdout_is_not_a_terminal(tmp_path):
    p = _jaxwarp("train", "--out", str(tmp_path / "run"), "--eval-episodes", "0", *TINY)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    lines = [x for x in out.splitlines() if x.startswith("update ")]
    assert [x.split()[1] for x in lines] == ["1/2", "2/2"], out
    assert "env-steps/s" in lines[0] and "agent" in lines[0]
    assert "tensorboardX" not in out + err  # no install hint on every run


def test_a_return_before_any_episode_ended_is_said_not_nan(capsys):
    """A group's episode_return is NaN until one of its episodes ends: the
    line per chunk says so instead of printing nan."""
    from jaxwarp.run.loop import _Progress

    bar = _Progress(total=2, done=0, batch=8, enabled="lines")
    bar.advance(1, 1000.0, [{"update": 1, "agent/episode_return": float("nan")}])
    bar.advance(1, 1000.0, [{"update": 2, "agent/episode_return": 12.5}])
    first, second = capsys.readouterr().out.splitlines()
    assert first.startswith("update 1/2") and "nan" not in first.lower()
    assert first.endswith("agent - (no episode ended yet)"), first
    assert second.startswith("update 2/2") and second.endswith("agent 12.5"), second


def test_messages_name_the_fix():
    import jax

    import jaxwarp

    with pytest.raises(ValueError, match=r"env_module=.*jaxwarp\.envs"):
        jaxwarp.make("coin_grab")
    env = jaxwarp.make("cartpole", backend="jax")
    with pytest.raises(ValueError, match=r"num_envs must be a static Python int.*static_argnums"):
        jax.jit(env.reset)(jax.random.key(0), 4)
    obs, state = jax.jit(env.reset, static_argnums=1)(jax.random.key(0), 4)
    assert obs.shape == (4, 1, 4)
    with pytest.raises(ValueError, match=r"\(4, 1, 1\).* or \(4, 1\) or \(4,\)"):
        env.step(jax.random.key(1), state, np.zeros((4, 2), np.int32))
