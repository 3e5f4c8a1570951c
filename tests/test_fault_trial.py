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

from jaxwarp.errors import RunError
from jaxwarp.run import storage
from jaxwarp.run.lock import RunLock
from jaxwarp.run.loop import train_run
from jaxwarp.run.metrics import METRICS_CSV, METRICS_JSONL, MetricWriter, read_metrics

from _tiny_run import cli, tiny_config


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
