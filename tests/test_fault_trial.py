"""What a fault trial of the run shell found and what now holds: links planted in
a run folder are replaced, never written through; files rewritten whole beside
the old ones and renamed (a kill in between loses nothing); SIGTERM as Ctrl-C;
a full disk at the GIF in one line; bounded inputs; one-line errors; a build
cache that others can write is refused."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _tiny_run import cli, tiny_config

from jaxwarp import storage
from jaxwarp.errors import RunError
from jaxwarp.run.lock import RunLock
from jaxwarp.run.loop import train_run
from jaxwarp.run.metrics import METRICS_CSV, METRICS_JSONL, MetricWriter, read_metrics


def error_line(err: str) -> str:
    """The one `jaxwarp ...: error:` line of stderr (asserting there is one)."""
    lines = [ln for ln in err.splitlines() if ": error: " in ln]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory) -> Path:
    """A tiny run stopped after 4 of its 8 updates (checkpoints at 2 and 4)."""
    out = tmp_path_factory.mktemp("stopped") / "run"
    train_run(tiny_config(), out, progress=False, stop_after_updates=4)
    return out


def copy_run(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst, symlinks=True)
    return dst


# ---------------------------------------------------------------------------
# Links in a run folder: replaced, never written through
# ---------------------------------------------------------------------------
def test_atomic_write_replaces_a_link_and_leaves_its_target(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "run").mkdir()
    name = tmp_path / "run" / "summary.json"
    name.symlink_to(victim)
    storage.atomic_write(name, "{}")
    assert victim.read_text() == "precious"
    assert not name.is_symlink() and name.read_text() == "{}"
    assert sorted(p.name for p in name.parent.iterdir()) == ["summary.json"]  # no temp left


def test_atomic_write_failing_midway_leaves_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    path.write_text("old\n" * 10)

    def dies(fd):  # the write is done, the rename not yet: a kill here
        raise KeyboardInterrupt

    monkeypatch.setattr(storage.os, "fsync", dies)
    with pytest.raises(KeyboardInterrupt):
        storage.atomic_write(path, "new\n")
    assert path.read_text() == "old\n" * 10
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "fifo"])
def test_open_own_refuses_what_is_not_the_runs_own_file(tmp_path, kind):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    name = tmp_path / "metrics.jsonl"
    if kind == "symlink":
        name.symlink_to(victim)
    elif kind == "hardlink":
        os.link(victim, name)
    else:
        os.mkfifo(name)
    with pytest.raises(RunError, match=rf"^{name} (is a symbolic link|has other hard links|is "
                                       r"not a regular file); .*remove it$"):
        os.close(storage.open_own(name, os.O_WRONLY | os.O_APPEND))
    assert victim.read_text() == "precious"


def test_a_lock_file_that_is_a_link_is_refused_in_one_line(stopped_run, tmp_path, capsys):
    out = copy_run(stopped_run, tmp_path / "run")
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (out / ".lock").symlink_to(victim)
    with pytest.raises(RunError, match="is a symbolic link"):
        RunLock(out)
    code, _, err = cli(capsys, "--resume", str(out))
    assert code == 2
    assert f"{out / '.lock'} is a symbolic link" in error_line(err)
    assert victim.read_text() == "precious"


def test_links_at_the_run_files_are_replaced_on_resume(stopped_run, tmp_path, capsys):
    """metrics.jsonl/.csv, config.yaml, summary.json, the curve, eval.json and the
    GIF planted as links to the user's files: the resumed run's files replace
    the links, the files they pointed at are untouched."""
    out = copy_run(stopped_run, tmp_path / "run")
    names = [METRICS_JSONL, METRICS_CSV, "config.yaml", "summary.json", "learning_curve.png",
             "eval.json", "trained_vs_random.gif"]
    victims = {}
    for n in names:
        victim = tmp_path / f"victim_{n}"
        victim.write_bytes((out / n).read_bytes() if (out / n).exists() else b"precious")
        victims[n] = victim.read_bytes()
        (out / n).unlink(missing_ok=True)
        (out / n).symlink_to(victim)
    code, stdout, err = cli(capsys, "--eval-episodes", "2", "--resume", str(out))
    assert code == 0, err
    assert "8/8 updates" in stdout and "warning" not in err, err
    for n in names:
        assert (tmp_path / f"victim_{n}").read_bytes() == victims[n], n
        assert (out / n).is_file() and not (out / n).is_symlink(), n
    assert [r["update"] for r in read_metrics(out)] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_a_link_planted_at_the_metrics_during_a_run_is_refused(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    writer = MetricWriter(out, keep_until=None)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (out / METRICS_JSONL).unlink()
    (out / METRICS_JSONL).symlink_to(victim)
    with pytest.raises(RunError, match="is a symbolic link"):
        writer.write([{"update": 1, "seed": 0, "env_steps": 16.0}])
    assert victim.read_text() == "precious"


# ---------------------------------------------------------------------------
# The resume's rewrite of the metrics: whole or not at all
# ---------------------------------------------------------------------------
def test_a_resume_killed_while_rewriting_the_metrics_loses_no_row(stopped_run, tmp_path,
                                                                 monkeypatch):
    out = copy_run(stopped_run, tmp_path / "run")
    before = {n: (out / n).read_bytes() for n in (METRICS_JSONL, METRICS_CSV)}
    real_replace = os.replace
    seen = []

    def killed(src, dst):  # a kill -9 after the new file is written, before its rename
        seen.append(Path(dst).name)
        assert {n: (out / n).read_bytes() for n in before} == before  # still the old files
        raise KeyboardInterrupt

    monkeypatch.setattr(storage.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        MetricWriter(out, keep_until=2)
    monkeypatch.setattr(storage.os, "replace", real_replace)
    assert seen == [METRICS_JSONL]
    assert {n: (out / n).read_bytes() for n in before} == before
    assert [r["update"] for r in read_metrics(out)] == [1, 2, 3, 4]
    MetricWriter(out, keep_until=2).close()  # the resume again: rows after update 2 dropped
    assert [r["update"] for r in read_metrics(out)] == [1, 2]
    csv_lines = (out / METRICS_CSV).read_text().splitlines()
    assert csv_lines[0] == before[METRICS_CSV].decode().splitlines()[0]
    assert csv_lines[1:] == before[METRICS_CSV].decode().splitlines()[1:3]


def test_the_csv_keeps_its_header_and_rows_across_writes(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    w = MetricWriter(out, keep_until=None)
    assert not (out / METRICS_CSV).exists()
    w.write([{"update": 1, "seed": 0, "env_steps": 16.0, "x": 1.5}])
    w.write([{"update": 2, "seed": 0, "env_steps": 32.0, "x": float("nan")}])
    w.close()
    assert (out / METRICS_CSV).read_bytes() == \
        b"update,seed,env_steps,x\r\n1,0,16.0,1.5\r\n2,0,32.0,nan\r\n"
    assert json.loads((out / METRICS_JSONL).read_text().splitlines()[1])["x"] is None
    assert oct((out / METRICS_JSONL).stat().st_mode & 0o777) == \
        oct(0o666 & ~storage._umask())


# ---------------------------------------------------------------------------
# SIGTERM (a scheduler's preemption) as Ctrl-C
# ---------------------------------------------------------------------------
def test_sigterm_is_taken_over_only_from_its_default_and_given_back():
    import signal

    from jaxwarp.run.signals import CtrlC

    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    ctrl_c = CtrlC()
    ctrl_c.install()
    ctrl_c.defer("noted", hand_back=True)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # a second one is noted too, never fatal
        assert ctrl_c.pressed
    finally:
        ctrl_c.release()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    def own(signum, frame):
        pass

    signal.signal(signal.SIGTERM, own)
    try:
        with CtrlC():  # someone else's handler is left alone
            assert signal.getsignal(signal.SIGTERM) is own
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_sigterm_during_training_checkpoints_and_ends_as_ctrl_c(tmp_path):
    """`jaxwarp train` sent SIGTERM once it trains: the chunks done are
    checkpointed, one line says where the run stands, exit 130, no .lock left."""
    import re
    import signal
    import subprocess
    import sys

    out = tmp_path / "run"
    p = subprocess.Popen(
        [sys.executable, "-m", "jaxwarp", "train", "--no-progress", "--env", "cartpole",
         "--out", str(out), "backend=jax", "num_envs=8", "num_steps=8",
         "total_env_steps=100000000", "chunk_updates=2", "checkpoint_every=2",
         "policies.agent.hidden_sizes=[8]"],
        env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in p.stdout:  # the first chunk's line: training
            if line.startswith("update "):
                break
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()  # a run that went on must not outlive the test
    lines = [x for x in err.splitlines() if x.strip()]
    assert p.returncode == 130, (p.returncode, err)
    assert "Traceback" not in err, err
    assert re.match(rf"jaxwarp train: interrupted; last checkpoint: update \d+ in "
                    rf"{re.escape(str(out / 'checkpoints'))}; continue with: jaxwarp train "
                    rf"--resume {re.escape(str(out))}$", lines[-1]), err
    assert not (out / ".lock").exists()


# ---------------------------------------------------------------------------
# A full disk while the GIF is written
# ---------------------------------------------------------------------------
def _disk_full_in_gifs(monkeypatch) -> None:
    """Pillow's GIF writes get part of a GIF out, then ENOSPC (EFBIG alike)."""
    import errno

    from PIL import Image

    def save(self, fp, format=None, **kwargs):
        if format != "GIF":  # (matplotlib writes its PNG through Pillow too)
            return real(self, fp, format=format, **kwargs)
        fp.write(b"GIF89a" + b"\0" * 100)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    real = Image.Image.save
    monkeypatch.setattr(Image.Image, "save", save)


def test_write_gif_on_a_full_disk_keeps_the_old_gif_whole(tmp_path, monkeypatch):
    import numpy as np

    from jaxwarp.render import write_gif

    path = tmp_path / "a.gif"
    frames = np.zeros((3, 8, 8, 3), np.uint8)
    write_gif(frames, path)
    before = path.read_bytes()
    _disk_full_in_gifs(monkeypatch)
    with pytest.raises(OSError, match="No space left"):
        write_gif(frames, path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["a.gif"]


def test_a_full_disk_at_the_gif_after_a_run_is_one_line_and_resume_makes_it(
        stopped_run, tmp_path, capsys, monkeypatch):
    out = copy_run(stopped_run, tmp_path / "run")
    _disk_full_in_gifs(monkeypatch)
    code, stdout, err = cli(capsys, "--eval-episodes", "2", "--resume", str(out))
    monkeypatch.undo()
    assert code == 2 and "8/8 updates" in stdout, err
    line = error_line(err)
    assert line.startswith(f"jaxwarp train: error: cannot write trained_vs_random.gif in {out}: "
                           "no space left on device;"), line
    assert f"jaxwarp train --resume {out}" in line
    assert not (out / "trained_vs_random.gif").exists()
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]
    assert json.loads((out / "summary.json").read_text())["finished"] is True
    assert "after_training" not in json.loads((out / "summary.json").read_text())
    code, _, err = cli(capsys, "--resume", str(out))  # space freed: the outputs are made
    assert code == 0, err
    assert (out / "trained_vs_random.gif").read_bytes().startswith(b"GIF89a")


# ---------------------------------------------------------------------------
# Bounded inputs
# ---------------------------------------------------------------------------
def _cli_any(capsys, *argv: str) -> tuple[int, str]:
    """`jaxwarp ARGV` in this process: (exit code, its one error line)."""
    from jaxwarp.cli import main

    code = main(list(argv))
    return code, error_line(capsys.readouterr().err)


def test_render_steps_beyond_the_memory_limit_are_refused(capsys):
    code, line = _cli_any(capsys, "render", "--env", "cartpole", "--steps", "1000000000")
    assert code == 2
    assert line == ("jaxwarp render: error: --steps must be at most 5,461 at --size 256 "
                    "(every frame, 256 x 512 pixels, is kept in memory: 2 GiB at most); "
                    "got 1,000,000,000")


def test_a_config_whose_size_a_stat_does_not_tell_is_read_only_to_its_limit(capsys):
    code, line = _cli_any(capsys, "train", "--config", "/dev/zero")
    assert code == 2
    assert line == ("jaxwarp train: error: config '/dev/zero': over 1,048,576 bytes; a config "
                    "file is at most 1,048,576 bytes")


def test_a_huge_config_yaml_in_a_run_folder_is_refused_at_once(stopped_run, tmp_path, capsys):
    import time

    out = copy_run(stopped_run, tmp_path / "run")
    with open(out / "config.yaml", "a") as f:
        f.write("# padding\n" * 200_000)  # 2 MB
    start = time.perf_counter()
    code, _, err = cli(capsys, "--resume", str(out))
    assert code == 2 and time.perf_counter() - start < 10
    assert error_line(err) == (f"jaxwarp train: error: --resume {out}: config.yaml is over "
                               "1,048,576 bytes; not a jaxwarp run config (a run writes a few "
                               "KB)")


@pytest.mark.parametrize("override, message", [
    ("update_epochs=1000000000",
     "update_epochs=1000000000 is invalid; expected an integer in [1, 1000]"),
    ("total_env_steps=9223372036854775808",
     "total_env_steps=9223372036854775808 is invalid; expected at most 34,359,738,352 with "
     "these num_envs, num_steps and optimiser steps per update (1): the update counters are "
     "32-bit integers"),
])
def test_counts_past_what_a_run_can_do_are_refused(override, message, tmp_path, capsys):
    from _tiny_run import TINY

    code, _, err = cli(capsys, "--out", str(tmp_path / "run"), *TINY, override)
    assert code == 2
    assert error_line(err) == f"jaxwarp train: error: {message}"
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------------------
# One line, not a traceback
# ---------------------------------------------------------------------------
DEEP = "[" * 5000 + "]" * 5000


def test_deeply_nested_yaml_is_one_line_naming_the_file_or_override(stopped_run, tmp_path,
                                                                     capsys):
    from _tiny_run import TINY

    config = tmp_path / "deep.yaml"
    config.write_text(f"env: cartpole\nnum_envs: {DEEP}\n")
    code, _, err = cli(capsys, "--config", str(config))
    assert code == 2
    assert error_line(err) == (f"jaxwarp train: error: config {str(config)!r}: nested too "
                               "deeply (a config is a few levels of mappings)")
    code, _, err = cli(capsys, "--out", str(tmp_path / "new"), *TINY, f"num_envs={DEEP}")
    assert code == 2
    assert error_line(err).startswith("jaxwarp train: error: override 'num_envs=[[[[")
    assert error_line(err).endswith(": nested too deeply")
    out = copy_run(stopped_run, tmp_path / "run")
    with open(out / "config.yaml", "a") as f:
        f.write(f"deep: {DEEP}\n")
    code, _, err = cli(capsys, "--resume", str(out))
    assert code == 2
    assert error_line(err) == (f"jaxwarp train: error: --resume {out}: config.yaml is nested "
                               "too deeply to be a jaxwarp run config")


@pytest.mark.parametrize("source, raised", [
    ("x = 1 / 0\n", "ZeroDivisionError: division by zero ({path}, line 1)"),
    ("def f(:\n", "SyntaxError: invalid syntax ({path}, line 1)"),
    ("def f():\n    return f()\n\nf()\n",
     "RecursionError: maximum recursion depth exceeded ({path}, line 2)"),
])
def test_an_env_module_that_fails_to_import_is_one_line(source, raised, tmp_path, capsys):
    from _tiny_run import TINY

    path = tmp_path / f"bad_{abs(hash(source))}.py"
    path.write_text(source)
    code, _, err = cli(capsys, "--out", str(tmp_path / "run"), *TINY, f"env_module={path}")
    assert code == 2
    assert error_line(err) == (f"jaxwarp train: error: env_module={path}: importing it raised "
                               + raised.format(path=path))
    assert not (tmp_path / "run").exists()
    code, line = _cli_any(capsys, "render", "--env", "cartpole", f"env_module={path}",
                          "--steps", "1", "--out", str(tmp_path / "a.gif"))
    assert code == 2 and line.startswith("jaxwarp render: error: env_module="), line


@pytest.mark.parametrize("row, why", [
    ('{"foo": 1}', 'no integer "update"'),
    ('{"update": "3", "seed": 0}', 'no integer "update"'),
    ('{"update": 1, "seed": "zero"}', "'seed' is not a number"),
    ('[1, 2]', "not a JSON object"),
])
def test_a_foreign_row_in_the_metrics_on_resume_is_one_line(row, why, stopped_run, tmp_path,
                                                            capsys):
    out = copy_run(stopped_run, tmp_path / "run")
    lines = (out / METRICS_JSONL).read_text().splitlines(keepends=True)
    (out / METRICS_JSONL).write_text("".join([lines[0], row + "\n", *lines[1:]]))
    code, _, err = cli(capsys, "--resume", str(out))
    assert code == 2
    assert error_line(err) == (f"jaxwarp train: error: {out / METRICS_JSONL}: line 2 is not a "
                               f"metric row ({why})")
    assert not (out / ".lock").exists()


# ---------------------------------------------------------------------------
# The build cache: only the user may write it
# ---------------------------------------------------------------------------
def _cartpole_copy(tmp_path: Path, name: str):
    import dataclasses

    from jaxwarp.envs.cartpole import SPEC

    header = tmp_path / f"{name}.h"
    header.write_text(Path(SPEC.header).read_text())
    return dataclasses.replace(SPEC, name=name, header=header), header


def test_a_cache_folder_others_can_write_is_refused_naming_the_fix(tmp_path, monkeypatch):
    from jaxwarp.authoring import EnvBuildError, build

    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    monkeypatch.setenv("JAXWARP_CACHE_DIR", str(cache))
    spec, header = _cartpole_copy(tmp_path, "cache_shared")
    with pytest.raises(EnvBuildError, match=rf"^the build cache {cache} can be written by "
                                            rf"others \(mode 777\); .*: chmod go-w {cache} "):
        build.compile_library(spec, header, "cpu")
    assert list(cache.iterdir()) == []  # nothing built, nothing loaded


@pytest.mark.parametrize("how", ["mode", "owner"])
def test_a_planted_library_is_refused(tmp_path, how):
    from jaxwarp.authoring import EnvBuildError, build

    lib = tmp_path / "libx_cpu.so"
    lib.write_bytes(b"\x7fELF")
    if how == "mode":
        lib.chmod(0o666)
        match = rf"^the build cache {lib} can be written by others \(mode 666\)"
    else:
        if os.getuid() != 0:
            pytest.skip("chown to another user needs root")
        os.chown(lib, 12345, 12345)
        match = rf"^the build cache {lib} belongs to another user \(uid 12345\)"
    with pytest.raises(EnvBuildError, match=match):
        build._check_own(tmp_path, lib)


def test_a_new_cache_is_the_users_alone_whatever_the_umask(tmp_path, monkeypatch):
    from jaxwarp.authoring import build

    cache = tmp_path / "cache" / "jaxwarp"
    monkeypatch.setenv("JAXWARP_CACHE_DIR", str(cache))
    spec, header = _cartpole_copy(tmp_path, "cache_private")
    old = os.umask(0o002)
    try:
        lib = build.compile_library(spec, header, "cpu")
    finally:
        os.umask(old)
    modes = {p: p.stat().st_mode & 0o777 for p in (cache, lib.parent, lib)}
    assert modes == {cache: 0o700, lib.parent: 0o700, lib: 0o755}
    assert lib.with_name(lib.name + ".sha256").stat().st_mode & 0o777 == 0o644
    assert build.compile_library(spec, header, "cpu") == lib  # from the cache


def test_an_output_link_the_user_names_is_followed(tmp_path, capsys):
    """`render --out LINK` writes the file the link names (the user's own
    choice, as before), leaving the link; only run folders' links are replaced."""
    target = tmp_path / "real.gif"
    link = tmp_path / "link.gif"
    link.symlink_to(target)
    from jaxwarp.cli import main

    assert main(["render", "--env", "cartpole", "--steps", "2", "--out", str(link)]) == 0
    assert link.is_symlink() and target.read_bytes().startswith(b"GIF89a")
    assert capsys.readouterr().out.strip() == str(target)
