"""Reliability of training runs (issue 15), CPU: corrupt checkpoints, two runs on
one folder, non-finite losses and configs, env params of the wrong type, and
errors that must reach the CLI as one line (``jaxwarp train: error: ...``, exit
code 2) instead of a traceback. Each fault is reproduced first, then checked.

The runs are tiny CartPole runs on the pure-JAX backend (no C++ build)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
from _tiny_run import TINY, ckpt_steps, cli, metric_table, tiny_config

import jaxwarp
from jaxwarp.params_check import check_params
from jaxwarp.registry import _REGISTRY, builtin_envs
from jaxwarp.run.lock import RunLock
from jaxwarp.run.loop import (
    CheckpointError,
    CheckpointWarning,
    RunLockedError,
    train_run,
)
from jaxwarp.train import ConfigError, build_trainer, load_config, make_train


def strict_rows(out: Path) -> list[dict]:
    """metrics.jsonl parsed as strict JSON (NaN/Infinity are rejected)."""
    def reject(name):
        raise ValueError(f"non-standard JSON constant {name} in metrics.jsonl")

    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line, parse_constant=reject) for line in lines if line.strip()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """An uninterrupted 8-update run, and the same run killed after 6 updates
    (checkpoints 4 and 6 on disk)."""
    base = tmp_path_factory.mktemp("runs")
    full = train_run(tiny_config(), base / "full", progress=False)
    assert full.summary["finished"]
    part = train_run(tiny_config(), base / "part", progress=False, stop_after_updates=6)
    assert not part.summary["finished"] and ckpt_steps(base / "part") == [4, 6]
    return base / "full", base / "part"


# ---------------------------------------------------------------------------
# 1. Corrupt checkpoints: resume falls back to the previous good one.
# ---------------------------------------------------------------------------
def truncate_data(step_dir: Path) -> None:
    for f in (step_dir / "default").rglob("d/*"):
        if f.is_file():
            f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def empty_metadata(step_dir: Path) -> None:
    (step_dir / "_CHECKPOINT_METADATA").write_text("")


def empty_item_metadata(step_dir: Path) -> None:
    (step_dir / "default" / "_METADATA").write_text("")


def test_resume_skips_truncated_checkpoint_api(runs, tmp_path):
    full, part = runs
    out = tmp_path / "run"
    shutil.copytree(part, out)
    truncate_data(out / "checkpoints" / "6")
    with pytest.warns(CheckpointWarning, match=r"checkpoint at update 6 is unreadable .*"
                                               r"resuming from update 4"):
        resumed = train_run(None, out, resume=True, progress=False)
    assert resumed.summary["finished"]
    assert [r["update"] for r in resumed.metrics] == [5, 6, 7, 8]
    # Same numbers as never interrupted; the kept rows (update 1 has no finished
    # episode: NaN return) were rewritten as strict JSON (null, not NaN).
    assert strict_rows(out)[0]["agent/episode_return"] is None
    assert metric_table(strict_rows(out)) == metric_table(strict_rows(full))
    assert ckpt_steps(out) == [6, 8]  # 6 saved again from good state
    assert (out / "checkpoints_corrupt" / "6").is_dir()


@pytest.mark.parametrize("corrupt", [empty_metadata, empty_item_metadata])
def test_resume_skips_corrupt_metadata_cli(runs, tmp_path, capsys, corrupt):
    full, part = runs
    out = tmp_path / "run"
    shutil.copytree(part, out)
    corrupt(out / "checkpoints" / "6")
    code, stdout, err = cli(capsys, "--resume", str(out))
    assert code == 0, err
    assert "8/8 updates" in stdout
    warning = [line for line in err.splitlines() if "jaxwarp train:" in line]
    assert len(warning) == 1 and warning[0].startswith(
        "jaxwarp train: warning: checkpoint at update 6 is unreadable"), err
    assert "resuming from update 4" in warning[0]
    assert metric_table(strict_rows(out)) == metric_table(strict_rows(full))


def test_resume_without_an_intact_checkpoint_is_one_line_error(runs, tmp_path, capsys):
    _, part = runs
    out = tmp_path / "run"
    shutil.copytree(part, out)
    truncate_data(out / "checkpoints" / "6")
    empty_item_metadata(out / "checkpoints" / "4")
    with pytest.raises(CheckpointError, match=r"no intact checkpoint \(update 6: .*; update 4"):
        train_run(None, out, resume=True, progress=False)
    code, _, err = cli(capsys, "--resume", str(out))
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("jaxwarp train: error: --resume ")
    assert "no intact checkpoint" in err and "Traceback" not in err
    assert ckpt_steps(out) == [4, 6]  # nothing moved when resume fails


# ---------------------------------------------------------------------------
# 2. Two runs, one folder.
# ---------------------------------------------------------------------------
def test_second_run_on_a_locked_folder_fails(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text("")
    first = RunLock(out)  # the first run holds the folder
    try:
        with pytest.raises(RunLockedError, match=r"is in use by a jaxwarp run \(process "
                                                 rf"{os.getpid()}\)"):
            train_run(tiny_config(), out, progress=False)
        code, _, err = cli(capsys, "--out", str(out), *TINY)
        assert code == 2 and err.count("\n") == 1
        assert err.startswith(f"jaxwarp train: error: {out} is in use by a jaxwarp run")
        code, _, err = cli(capsys, "--resume", str(out))  # no config.yaml: not a run yet
        assert code == 2
        assert sorted(p.name for p in out.iterdir()) == [".lock", "metrics.jsonl"]
        assert (out / "metrics.jsonl").read_text() == ""  # untouched
    finally:
        first.release()
    RunLock(out).release()  # free again once released


def test_killed_run_leaves_no_stale_lock(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from pathlib import Path
            from jaxwarp.run.lock import RunLock
            lock = RunLock(Path({str(out)!r}))
            print("locked", flush=True)
            time.sleep(120)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunLockedError, match=rf"process {holder.pid}\)"):
            RunLock(out)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
    RunLock(out).release()  # the kernel dropped the dead process's lock


def test_stale_folder_with_logged_metrics_is_not_overwritten(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"update": 1, "seed": 0}\n')
    code, _, err = cli(capsys, "--out", str(out), *TINY)
    assert code == 2 and "already holds a run; pass --resume" in err
    assert (out / "metrics.jsonl").read_text() == '{"update": 1, "seed": 0}\n'


# ---------------------------------------------------------------------------
# 3. Non-finite configs and losses.
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("override", [
    "policies.agent.lr=.inf", "vf_coef=.inf", "ent_coef=.nan", "gamma=.nan",
    "gae_lambda=.nan", "clip_eps=.inf", "max_grad_norm=.inf", "policies.agent.lr=-.inf",
])
def test_non_finite_config_values_are_rejected(override, tmp_path, capsys):
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"{key}: expected a finite number"):
        tiny_config(override)
    out = tmp_path / "run"
    code, _, err = cli(capsys, "--out", str(out), *TINY, override)
    assert code == 2 and err.count("\n") == 1 and "expected a finite number" in err
    assert not out.exists()


def test_finite_flag_is_one_on_a_healthy_run():
    c = tiny_config("total_env_steps=32")
    _, m = jax.jit(make_train(c))(jax.random.PRNGKey(0))
    np.testing.assert_array_equal(m["finite"], [1.0, 1.0])


def test_nan_loss_stops_the_run_at_its_update(tmp_path, capsys):
    # lr=1e30 is finite: the first Adam step moves the parameters by ~1e30, the
    # second overflows f32, so update 2 is the first with NaN/inf.
    out = tmp_path / "run"
    code, _, err = cli(capsys, "--out", str(out), *TINY, "policies.agent.lr=1e30",
                       "chunk_updates=1", "checkpoint_every=1")
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.startswith("jaxwarp train:")]
    assert lines == [line for line in err.splitlines() if line.strip()], err  # nothing else
    assert lines[0].startswith("jaxwarp train: error: update 2: the loss or the parameters "
                               "became non-finite")
    assert "checkpoints up to update 1 kept" in lines[0]
    assert ckpt_steps(out) == [1]  # no checkpoint of the NaN state
    rows = strict_rows(out)  # logged up to the failing update, NaN written as null
    assert [r["update"] for r in rows] == [1, 2]
    assert rows[1]["agent/loss"] is None
    summary = json.loads((out / "summary.json").read_text())
    assert not summary["finished"] and summary["updates"] == 1
    assert summary["error"].startswith("update 2:")


# ---------------------------------------------------------------------------
# 4. Env params of the wrong type or not finite (jaxwarp.params_check).
# ---------------------------------------------------------------------------
def _bad_values(kind: type) -> list:
    return {float: ["9.8", math.nan, math.inf, -math.inf, True, None],
            int: [5.0, True, "5", None],
            bool: [1, 0, "true", None]}[kind]


def _with(params, name: str, value):
    bad = dataclasses.replace(params)
    object.__setattr__(bad, name, value)  # past the frozen dataclass and __post_init__
    return bad


BUILTIN_ENVS = builtin_envs()  # every built-in env (jaxwarp/envs/): no list to keep here


@pytest.mark.parametrize("env", BUILTIN_ENVS)
def test_check_params_on_builtin_params(env):
    params = _REGISTRY[env][1]()
    check_params(params, env)  # defaults are valid
    checked = 0
    for f in dataclasses.fields(params):
        default = getattr(params, f.name)
        kind = type(default) if type(default) in (bool, int, float) else None
        if kind is None:
            continue
        for bad in _bad_values(kind):
            with pytest.raises(ValueError, match=rf"^{env}: {f.name}={bad!r} is invalid; "):
                check_params(_with(params, f.name, bad), env)
        if kind is float:  # an int is a valid float
            check_params(_with(params, f.name, int(default)), env)
        checked += 1
    assert checked >= 1  # every env has scalar params (Tag and MPE a dozen)


def test_check_params_optional_and_numpy_values():
    tag = _REGISTRY["tag_continuous"][1]()
    check_params(_with(tag, "fixed_start_seed", None))
    check_params(_with(tag, "fixed_start_seed", np.int32(3)))
    check_params(_with(tag, "grid_length", np.float32(3.0)))
    with pytest.raises(ValueError, match=r"fixed_start_seed=3.5 is invalid; expected an "
                                         r"integer or None"):
        check_params(_with(tag, "fixed_start_seed", 3.5))
    with pytest.raises(ValueError, match=r"TagContinuousParams: max_turn=inf is invalid"):
        check_params(_with(tag, "max_turn", math.inf))


@pytest.mark.parametrize("override, match", [
    ('env_params.gravity="9.8"', r"cartpole: gravity='9.8' is invalid; expected a"),
    ("env_params.gravity=.nan", r"gravity=nan is invalid"),
    ("env_params.max_steps=true", r"max_steps=True is invalid"),
])
def test_trainer_checks_env_params(override, match):
    with pytest.raises(ConfigError, match=match):
        build_trainer(tiny_config(override))


# ---------------------------------------------------------------------------
# 5. Errors reach the CLI as one line; failed runs leave no folder.
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("override, match", [
    ("env_params.foo=1", r"cartpole: unknown parameter\(s\) \['foo'\]"),
    ("num_envs=[", r"override 'num_envs=\[': the value is not valid YAML"),
    ("env_config=large", r"unknown config 'large' for cartpole"),
    pytest.param("backend=cuda", r"backend=cuda: backend='cuda' is not available",
                 marks=pytest.mark.skipif(jaxwarp.gpu_available(), reason="a GPU is here")),
    pytest.param("sampler=cuda", r"sampler=cuda: backend='cuda' is not available",
                 marks=pytest.mark.skipif(jaxwarp.gpu_available(), reason="a GPU is here")),
])
def test_cli_errors_are_one_line(override, match, tmp_path, capsys):
    out = tmp_path / "run"
    code, _, err = cli(capsys, "--out", str(out), *TINY, override)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("jaxwarp train: error: "), err
    assert re.search(match, err), err
    assert not out.exists()  # the failed run left no folder behind


def test_cli_unknown_env_is_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    code, _, err = cli(capsys, "--out", str(out), "--env", "no_such_env", *TINY[2:])
    assert code == 2 and err.count("\n") == 1, err
    assert re.search(r"^jaxwarp train: error: .*unknown env 'no_such_env'", err), err
    assert not out.exists()


def test_cli_yaml_syntax_error_in_config_file(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("env: cartpole\nnum_envs: [4\n")
    code, _, err = cli(capsys, "--config", str(bad), "--out", str(tmp_path / "run"))
    assert code == 2 and err.count("\n") == 1
    assert f"config '{bad}': invalid YAML (" in err and "line 3" in err


def test_failed_run_in_an_existing_folder_writes_no_config(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    code, _, _ = cli(capsys, "--out", str(out), *TINY, "env_params.foo=1")
    assert code == 2
    assert sorted(p.name for p in out.iterdir()) == []  # no config.yaml, no stale .lock


@pytest.mark.parametrize("text, match", [
    ("config: {num_envs: [4\n", r"config.yaml is not valid YAML \("),
    ("", r"config.yaml is not a jaxwarp run config"),
    ("config: {num_envs: 4}\n", r"config.yaml is not a jaxwarp run config"),
    ("config: {num_envz: 4}\nseeds: 1\n", r"config.yaml: num_envz: unknown config key"),
])
def test_resume_with_a_corrupt_config_yaml(text, match, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.yaml").write_text(text)
    with pytest.raises(ConfigError, match=match):
        train_run(None, out, resume=True, progress=False)
    code, _, err = cli(capsys, "--resume", str(out))
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert (out / "config.yaml").read_text() == text


def test_python_int_key_is_a_clear_type_error():
    c = tiny_config()
    with pytest.raises(TypeError, match=r"key must be a JAX PRNG key .* got int 0"):
        make_train(c)(0)
    with pytest.raises(TypeError, match=r"key must be a JAX PRNG key"):
        build_trainer(c).init(0)
    # typed keys are accepted like raw ones
    t = build_trainer(c)
    a, b = t.init(jax.random.key(3)), t.init(jax.random.PRNGKey(3))
    np.testing.assert_array_equal(a.key, b.key)


@pytest.mark.parametrize("env", BUILTIN_ENVS)
def test_default_config_builds_for_every_env(env):
    # `jaxwarp train --env NAME` used env_config=warpdrive_default, which only Tag has.
    c = load_config(None, [f"env={env}", "backend=jax"])
    assert c.env_config is None
    assert build_trainer(c).env.num_agents >= 1


# ---------------------------------------------------------------------------
# 5. Issue 30: Ctrl-C keeps the chunks done; a resume without a checkpoint
#    says so; a finished run leaves no .lock.
# ---------------------------------------------------------------------------
def test_finished_run_leaves_no_lock_file(runs):
    full, part = runs
    assert not (full / ".lock").exists() and not (part / ".lock").exists()
    RunLock(full).release()  # the folder can be locked again


def test_lock_released_by_its_holder_is_taken_by_the_next(tmp_path):
    first = RunLock(tmp_path)
    assert (tmp_path / ".lock").read_text() == f"{os.getpid()}\n"
    first.release()
    assert not (tmp_path / ".lock").exists()
    second = RunLock(tmp_path)  # a new file, locked
    with pytest.raises(RunLockedError):
        RunLock(tmp_path)
    second.release()


def _interrupt_after(monkeypatch, chunks: int, how: str) -> None:
    """Ctrl-C after `chunks` chunks of a run: a real SIGINT to this process
    (how="signal"), or KeyboardInterrupt raised by the progress bar's update
    (how="raise", as where no SIGINT handler of ours is installed)."""
    from jaxwarp.run.progress import Progress

    calls = []
    advance = Progress.advance

    def hooked(self, *args):
        advance(self, *args)
        calls.append(1)
        if len(calls) == chunks:
            if how == "signal":
                os.kill(os.getpid(), signal.SIGINT)
            else:
                raise KeyboardInterrupt

    monkeypatch.setattr(Progress, "advance", hooked)


def test_ctrl_c_checkpoints_the_last_chunk_and_resume_continues(runs, tmp_path, capsys,
                                                              monkeypatch):
    full, _ = runs
    out = tmp_path / "run"
    _interrupt_after(monkeypatch, 1, "signal")
    # Checkpoints every 6 updates: none was due when Ctrl-C came after update 2.
    with pytest.raises(KeyboardInterrupt):
        train_run(tiny_config("checkpoint_every=6"), out, progress=False)
    monkeypatch.undo()
    assert "saving a checkpoint at update 2" in capsys.readouterr().err
    assert ckpt_steps(out) == [2]
    assert [r["update"] for r in strict_rows(out)] == [1, 2]
    assert not (out / ".lock").exists()
    code, stdout, err = cli(capsys, "--resume", str(out))
    assert code == 0, err
    assert "8/8 updates" in stdout and "warning" not in err
    # as if never interrupted
    assert metric_table(strict_rows(out)) == metric_table(strict_rows(full))


def test_keyboard_interrupt_in_host_code_checkpoints_the_chunks_done(tmp_path, capsys,
                                                                    monkeypatch):
    out = tmp_path / "run"
    _interrupt_after(monkeypatch, 2, "raise")
    code, _, err = cli(capsys, "--out", str(out), *TINY, "checkpoint_every=6")
    assert code == 130, err
    assert ckpt_steps(out) == [4]
    assert err.strip().splitlines()[-1] == (
        f"jaxwarp train: interrupted; last checkpoint: update 4 in {out / 'checkpoints'}; "
        f"continue with: jaxwarp train --resume {out}")
    assert [r["update"] for r in strict_rows(out)] == [1, 2, 3, 4]


def test_resume_without_a_checkpoint_says_it_starts_from_update_1(tmp_path, capsys):
    out = tmp_path / "run"
    part = train_run(tiny_config("checkpoint_every=6"), out, progress=False,
                     stop_after_updates=4)
    assert part.summary["updates"] == 4 and ckpt_steps(out) == []
    code, stdout, err = cli(capsys, "--resume", str(out))
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("jaxwarp train:")]
    assert lines == [f"jaxwarp train: warning: --resume {out}: no checkpoint was written "
                     "before the run stopped; it starts from update 1 of 8"], err
    assert "8/8 updates" in stdout
    assert [r["update"] for r in strict_rows(out)] == list(range(1, 9))  # no duplicates


# ---------------------------------------------------------------------------
# 6. Issue 30: actions as NumPy's default int64 and as Python lists.
# ---------------------------------------------------------------------------
def _step_setup(name: str, backend: str, num_envs: int = 3):
    env = jaxwarp.make(name, backend=backend)
    _, state = env.reset(jax.random.key(0), num_envs)
    nvec = np.asarray(env.action_space.nvec)
    shape = (num_envs, env.num_agents, len(nvec))
    actions = (np.arange(np.prod(shape)).reshape(shape) % nvec).astype(np.int32)
    return env, state, actions


def _same_step(env, state, a, b) -> None:
    key = jax.random.key(5)
    want = env.step(key, state, a, in_place=False)
    got = env.step(key, state, b, in_place=False)
    for w, g in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.parametrize("backend", ["jax", "cpu"])
@pytest.mark.parametrize("name", ["cartpole", "mpe_simple_spread", "tag_continuous"])
def test_step_accepts_numpy_int64_and_lists(name, backend):
    env, state, actions = _step_setup(name, backend)
    for other in (actions.astype(np.int64), actions.tolist(), actions.astype(np.uint8),
                  jax.numpy.asarray(actions, jax.numpy.int16)):
        _same_step(env, state, actions, other)
    # Under jit as well: int64 from NumPy is a constant, a uint8 array traced.
    step = jax.jit(lambda s, a: env.step(jax.random.key(5), s, a, in_place=False)[0])
    np.testing.assert_array_equal(step(state, actions.astype(np.uint8)), step(state, actions))
    if len(env.action_space.nvec) == 1:  # single head: [envs, agents] lists too
        _same_step(env, state, actions, actions[..., 0].astype(np.int64).tolist())


@pytest.mark.parametrize("backend", ["jax", "cpu"])
@pytest.mark.parametrize("name", ["cartpole", "mpe_simple_spread"])
def test_step_rejects_float_bool_and_out_of_int32_actions(name, backend):
    env, state, actions = _step_setup(name, backend)
    key = jax.random.key(5)
    for bad in (actions.astype(np.float32), actions.astype(np.float64).tolist(),
                jax.numpy.asarray(actions, jax.numpy.float32), actions.astype(bool)):
        with pytest.raises(TypeError, match=r"actions must have dtype int32; got "
                                            r"(float32|float64|bool) \(integer dtypes"):
            env.step(key, state, bad)
    big = actions.astype(np.int64)
    big[0, 0, 0] = 2**31  # a cast would wrap it to -2**31
    with pytest.raises(ValueError, match=r"actions must fit int32 .* got int64 value 2147483648"):
        env.step(key, state, big)
    with pytest.raises(ValueError, match=r"rectangular"):
        env.step(key, state, [[[0]], [[0], [1]], [[0]]])
    with pytest.raises(ValueError, match=r"actions must have shape"):
        env.step(key, state, actions[:-1].tolist())


@pytest.mark.parametrize("backend", ["jax", "cpu"])
def test_wide_unsigned_actions_checked_when_known_clamped_when_traced(backend):
    env, state, actions = _step_setup("cartpole", backend)
    wide = jax.numpy.full(actions.shape, 2**32 - 1, jax.numpy.uint32)
    with pytest.raises(ValueError, match=r"must fit int32 .* got uint32 value 4294967295"):
        env.step(jax.random.key(5), state, wide)  # a concrete array: its values are checked
    # Traced, the values are unknown: past int32 they are clamped to its maximum,
    # which the env clamps to its last action, as it does an int32 maximum.
    step = jax.jit(lambda s, a: env.step(jax.random.key(5), s, a, in_place=False))
    top = np.full_like(actions, np.iinfo(np.int32).max)
    for w, g in zip(jax.tree.leaves(step(state, top)), jax.tree.leaves(step(state, wide))):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    _same_step(env, state, actions, jax.numpy.asarray(actions, jax.numpy.uint32))


# ---------------------------------------------------------------------------
# Faults of the fault-injection trial on CPU (issue 37, item 6): inputs that
# were accepted silently, blamed wrongly or answered with an unbounded message.
# ---------------------------------------------------------------------------
# 9**5 * 9 = 531441 "lol"s from a few hundred bytes: the message quoting `seed`
# was 3.8 MB on one line (39 MB, or MemoryError after 145 s, one level deeper).
LAUGHS = """\
env_params:
  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
  b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
  c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
  d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
  e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
seed: [*e,*e,*e,*e,*e,*e,*e,*e,*e]
"""


def _one_line(code: int, err: str, limit: int = 400) -> str:
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("jaxwarp train: error: "), err[:1000]
    assert len(err) <= limit, f"{len(err)} characters: {err[:300]}..."
    return err


def test_yaml_aliases_are_refused_and_the_message_is_short(tmp_path, capsys):
    path = tmp_path / "laughs.yaml"
    path.write_text(LAUGHS)
    assert len(LAUGHS) < 300
    err = _one_line(*cli(capsys, "--config", str(path), "--out", str(tmp_path / "run"))[::2])
    assert err == (f"jaxwarp train: error: config '{path}': invalid YAML (YAML anchor &a at "
                   "line 2, column 6: anchors and aliases are not allowed in a config; write "
                   "the value out)\n"), err
    with pytest.raises(ConfigError, match=r"YAML anchor &a at line 2, column 6: anchors and"):
        load_config(path)
    alias_only = tmp_path / "alias.yaml"  # an alias of an undefined anchor: still refused
    alias_only.write_text("env: cartpole\nseed: *x\n")
    with pytest.raises(ConfigError, match=r"YAML alias \*x at line 2, column 7: anchors and "
                                          r"aliases are not allowed"):
        load_config(alias_only)
    with pytest.raises(ConfigError, match=r"override 'seed=&a \[1\]': .* \(YAML anchor &a at"):
        load_config(None, ["env=cartpole", "seed=&a [1]"])


@pytest.mark.parametrize("text, key, line", [
    ("env: cartpole\nnum_envs: 8\nnum_envs: 16\n", "num_envs", 3),
    ("env: cartpole\npolicies:\n  agent: {lr: 0.1, lr: 0.2}\n", "lr", 3),
    ("env: cartpole\nenv_params:\n  gravity: 9.8\n  gravity: 1.0\n", "gravity", 4),
])
def test_yaml_duplicate_keys_are_refused_naming_the_key(text, key, line, tmp_path, capsys):
    """YAML kept the last value silently."""
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"invalid YAML \(key {key} at line {line}, column "
                                          r"\d+: given twice in one mapping; give it once\)"):
        load_config(path)
    _one_line(*cli(capsys, "--config", str(path), "--out", str(tmp_path / "run"))[::2])


def test_config_messages_quote_a_bounded_part_of_a_value(tmp_path, capsys):
    big = tmp_path / "big.yaml"
    big.write_text("env: cartpole\nseed: [" + ", ".join(["123456789"] * 50_000) + "]\n")
    err = _one_line(*cli(capsys, "--config", str(big), "--out", str(tmp_path / "run"))[::2])
    assert "seed: expected an integer, got [123456789, 123456789," in err and "...]" in err
    huge = tmp_path / "huge.yaml"  # bigger than any config: refused before parsing
    huge.write_text("env: cartpole\n" + "# padding\n" * 120_000)
    with pytest.raises(ConfigError, match=r"huge.yaml': 1,200,014 bytes; a config file is at "
                                          r"most 1,048,576 bytes"):
        load_config(huge)
    # Keys and env params too.
    with pytest.raises(ConfigError) as e:
        load_config(None, ["x" * 10_000 + "=1"])
    assert len(str(e.value)) < 700, len(str(e.value))
    with pytest.raises(ValueError) as e:
        jaxwarp.make("cartpole", backend="jax", gravity=list(range(100_000)))
    assert str(e.value).startswith("cartpole: gravity=[0, 1, 2, 3, 4, 5, 6, 7, ...] is invalid")


def test_cli_env_contradictions_are_refused(tmp_path, capsys):
    """`--env cartpole env=acrobot` announced cartpole and trained acrobot;
    `--config tag_duel_cpu --env cartpole` answered "unknown config
    'warpdrive_default' for cartpole; expected one of ()"."""
    out = tmp_path / "run"
    err = _one_line(*cli(capsys, "--env", "cartpole", "env=acrobot", "--out", str(out))[::2])
    assert err == ("jaxwarp train: error: --env cartpole and the override 'env=acrobot' name "
                   "different envs; give the env once\n"), err
    err = _one_line(*cli(capsys, "--config", "tag_duel_cpu", "--env", "cartpole", "--out",
                         str(out))[::2])
    assert err == ("jaxwarp train: error: env=cartpole contradicts the config tag_duel_cpu, "
                   "which is written for tag_continuous (its env_config, env_params, policies "
                   "belong to that env); use a config written for cartpole (jaxwarp configs "
                   "lists them) or none\n"), err
    with pytest.raises(ConfigError, match=r"env=cartpole contradicts the config tag_duel_cpu"):
        load_config("tag_duel_cpu", ["env=cartpole"])
    assert not out.exists()
    # Agreeing names, and a file with nothing of its env's own, are fine.
    assert load_config("tag_duel_cpu", ["env=tag_continuous"]).env == "tag_continuous"
    plain = tmp_path / "plain.yaml"
    plain.write_text("env: cartpole\nnum_envs: 8\n")
    assert load_config(plain, ["env=acrobot"]).env == "acrobot"


@pytest.mark.parametrize("argv, message", [
    (["--eval-episodes", "-1"], "--eval-episodes must be >= 0 (0 skips the evaluation); got -1"),
    (["--seeds", "0"], ("--seeds must be in [1, 10000] (seeds trained together in one "
                        "program); got 0")),
    (["--seeds", "1000000"], ("--seeds must be in [1, 10000] (seeds trained together in one "
                              "program); got 1000000")),
    (["--seeds", "10", "seed=2147483640"], ("--seeds=10 with seed=2147483640 runs past the "
                                            "last seed 2**31 - 1; expected seed + seeds <= "
                                            "2**31")),
])
def test_cli_refuses_bad_counts_in_one_line(argv, message, tmp_path, capsys):
    """--eval-episodes -1 was accepted; --seeds 1000000 looked hung (one key
    per seed built in a Python loop: 58 s for 10,000 seeds)."""
    out = tmp_path / "run"
    err = _one_line(*cli(capsys, *TINY, "--out", str(out), *argv)[::2])
    assert err == f"jaxwarp train: error: {message}\n", err
    assert not out.exists()


def test_seed_keys_are_the_loop_keys_built_at_once():
    import time

    from jaxwarp.train.config import MAX_SEEDS
    from jaxwarp.train.seeds import seed_keys

    for seed, seeds in ((0, 1), (7, 5), (2**31 - 3, 3)):
        loop = jax.numpy.stack([jax.random.PRNGKey(seed + i) for i in range(seeds)])
        got = seed_keys(seed, seeds)
        assert got.dtype == loop.dtype and got.shape == loop.shape
        np.testing.assert_array_equal(np.asarray(got), np.asarray(loop))
    t = time.perf_counter()
    keys = seed_keys(0, MAX_SEEDS)
    assert keys.shape[0] == MAX_SEEDS and time.perf_counter() - t < 5.0
    np.testing.assert_array_equal(np.asarray(keys[-1]), np.asarray(jax.random.PRNGKey(9999)))
    for seed, seeds in ((0, 0), (0, MAX_SEEDS + 1), (2**31 - 1, 2)):
        with pytest.raises(ValueError, match=r"^seeds"):
            seed_keys(seed, seeds)
    with pytest.raises(ValueError, match=r"seeds must be in \[1, 10000\]"):
        train_run(tiny_config(), "unused", seeds=10**6, progress=False)


def test_reset_refuses_num_envs_beyond_memory_before_allocating(monkeypatch):
    """reset(key, 10**9) on cartpole filled 22.7 GB of RAM before failing."""
    from jaxwarp import memory

    key = jax.random.key(0)
    for backend in ("jax", "cpu"):
        env = jaxwarp.make("cartpole", backend=backend)
        assert env.bytes_per_env == 6 * 4 + 4 * 4  # six f32/i32 state fields, four obs
        # More than any machine's memory, unpatched.
        with pytest.raises(ValueError, match=r"^num_envs=1099511627776 needs 43980.5 GB "
                                             r"for the state and observations alone \(40 "
                                             r"bytes per env\), more than the host's memory"):
            env.reset(key, 2**40)
    # The trial's case on a host of 23 GB: refused at once, nothing allocated.
    monkeypatch.setattr(memory, "memory_limit", lambda platform: 23 * 10**9)
    env = jaxwarp.make("cartpole", backend="jax")
    with pytest.raises(ValueError, match=r"num_envs=1000000000 needs 40.0 GB .* more than the "
                                         r"host's memory \(23.0 GB\); use fewer"):
        env.reset(key, 10**9)
    obs, _ = env.reset(key, 4)  # sizes that fit are untouched
    assert obs.shape == (4, 1, 4)
    tag = jaxwarp.make("tag_continuous", backend="jax")
    obs, state = tag.reset(key, 2)
    assert tag.bytes_per_env * 2 == obs.nbytes + sum(x.nbytes for x in jax.tree.leaves(state))
