"""Faults of a fault-injection trial (issue 37, item 6), CPU: a full disk, a
read-only run folder, memory that cannot hold the run, caches that grew with
every distinct env params, and training numbers that moved with the CPU core
count. Each fault is reproduced first (simulated where it needs root), then
checked: one line on the CLI (``jaxwarp train: error: ...``, exit 2), and a
resume that recovers.

The runs are tiny CartPole runs on the pure-JAX backend (no C++ build)."""

from __future__ import annotations

import errno
import json
import os

import pytest

from jaxwarp.cli import main as cli_main
from jaxwarp.run import checkpoint as checkpoint_module
from jaxwarp.run import loop
from jaxwarp.run import metrics as metrics_module
from jaxwarp.run.loop import StorageError, train_run
from jaxwarp.run.metrics import read_metrics

from _tiny_run import TINY, ckpt_steps, cli, metric_table, tiny_config


def error_line(err: str) -> str:
    """The CLI's stderr, which must be exactly one error line."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("jaxwarp train: error: "), err
    return lines[0]


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """The uninterrupted CLI run of TINY (the CLI starts from the shipped config)."""
    out = tmp_path_factory.mktemp("runs") / "full"
    assert cli_main(["train", "--no-progress", "--eval-episodes", "0", "--out", str(out),
                     *TINY]) == 0
    return out


ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


# ---------------------------------------------------------------------------
# Full disk
# ---------------------------------------------------------------------------
def _disk_full_in_metrics(monkeypatch, at_write: int) -> None:
    """The metric writer's `at_write`-th write gets half a line out, then ENOSPC
    (as a 2 MB tmpfs did: metrics.jsonl ended in a partial line)."""
    calls = []

    def write(self, rows):
        calls.append(1)
        if len(calls) == at_write:
            with self.jsonl.open("a") as f:
                f.write(json.dumps(rows[0])[:40])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.jsonl))
        return real(self, rows)

    real = metrics_module.MetricWriter.write
    monkeypatch.setattr(metrics_module.MetricWriter, "write", write)


def test_full_disk_in_the_metrics_is_one_line_and_resume_recovers(full_run, tmp_path,
                                                                  capsys, monkeypatch):
    out = tmp_path / "run"
    _disk_full_in_metrics(monkeypatch, at_write=3)  # after updates 1-4 and checkpoints 2, 4
    code, _, err = cli(capsys, "--eval-episodes", "0", "--out", str(out), *TINY)
    monkeypatch.undo()
    assert code == 2
    line = error_line(err)
    assert "no space left on device" in line and "metrics.jsonl" in line, line
    assert f"--resume {out}" in line
    assert not (out / "metrics.jsonl").read_text().endswith("\n")  # the partial line
    assert ckpt_steps(out) == [2, 4]
    assert [r["update"] for r in read_metrics(out)] == [1, 2, 3, 4]
    code, stdout, err = cli(capsys, "--eval-episodes", "0", "--resume", str(out))
    assert code == 0, err
    assert "8/8 updates" in stdout and "error" not in err
    # as if the disk never filled
    assert metric_table(read_metrics(out)) == metric_table(read_metrics(full_run))
    assert (out / "metrics.csv").read_text().count("\n") == 1 + 8


def test_full_disk_in_a_checkpoint_is_one_line_and_resume_recovers(full_run, tmp_path,
                                                                   capsys, monkeypatch):
    """Orbax reports the OSError wrapped in its own errors (and may only from
    the next save or the final wait): the fault is found in the chain."""
    out = tmp_path / "run"
    calls = []
    real = checkpoint_module.save_checkpoint

    def save(mngr, update, state, force=False):
        calls.append(update)
        if len(calls) == 3:  # update 6
            try:
                raise ENOSPC
            except OSError as e:
                raise ValueError(f"Error writing checkpoint: {e}") from e
        return real(mngr, update, state, force)

    monkeypatch.setattr(loop, "save_checkpoint", save)
    code, _, err = cli(capsys, "--eval-episodes", "0", "--out", str(out), *TINY)
    monkeypatch.undo()
    assert code == 2
    line = error_line(err)
    assert "no space left on device" in line and "saving update 6" in line, line
    code, stdout, err = cli(capsys, "--eval-episodes", "0", "--resume", str(out))
    assert code == 0, err
    assert metric_table(read_metrics(out)) == metric_table(read_metrics(full_run))


def test_real_orbax_write_error_is_found(tmp_path, monkeypatch):
    """The real save path: TensorStore's writes fail with ENOSPC (patched at
    the lowest Python write Orbax uses for its metadata)."""
    out = tmp_path / "run"
    import orbax.checkpoint as ocp

    real = ocp.CheckpointManager.save
    calls = []

    def save(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise ENOSPC
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "save", save)
    with pytest.raises(StorageError, match="no space left on device"):
        train_run(tiny_config(), out, progress=False)


def test_partial_last_metric_line_is_dropped_and_a_bad_middle_line_named(tmp_path):
    good = json.dumps({"update": 1, "seed": 0, "x": None})
    (tmp_path / "metrics.jsonl").write_text(good + "\n" + good[:20])
    rows = read_metrics(tmp_path)
    assert len(rows) == 1 and rows[0]["update"] == 1
    (tmp_path / "metrics.jsonl").write_text(good[:20] + "\n" + good + "\n")
    with pytest.raises(ValueError, match="line 1 is not a metric row"):
        read_metrics(tmp_path)


def test_orbax_logs_of_handled_faults_are_dropped_and_others_kept():
    """What Orbax's save threads and asyncio log about a full disk (the run says
    it in one line), and Orbax's expected warnings, are dropped; other errors pass."""
    import logging

    from jaxwarp.run.checkpoint import _LOG_FILTER

    def record(name, level, path, msg, exc=None):
        return logging.LogRecord(name, level, path, 1, msg, None,
                                 (type(exc), exc, None) if exc else None)

    orbax = "/site-packages/orbax/checkpoint/_src/checkpoint_manager.py"
    full = ValueError("RESOURCE_EXHAUSTED: Failed to write 70128 bytes to file 18: "
                      "No space left on device [os_error_code='28']")
    assert not _LOG_FILTER.filter(record("absl", logging.ERROR, orbax, "thread failed", full))
    assert not _LOG_FILTER.filter(record("asyncio", logging.ERROR, "/asyncio/base_events.py",
                                         "_GatheringFuture exception was never retrieved",
                                         full))
    assert not _LOG_FILTER.filter(record(
        "absl", logging.WARNING, orbax, "Attempted to create temporary directory "
        "/x/checkpoints/4.orbax-checkpoint-tmp which already exists. Removing existing "
        "directory since it is not finalized."))
    assert _LOG_FILTER.filter(record("absl", logging.ERROR, orbax, "thread failed",
                                     ValueError("shape mismatch")))
    assert _LOG_FILTER.filter(record("absl", logging.WARNING, "/mine.py",
                                     "orbax-checkpoint-tmp"))


# ---------------------------------------------------------------------------
# Read-only run folder (simulated: as root, chmod does not stop writes)
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("code_errno", [errno.EROFS, errno.EACCES])
@pytest.mark.parametrize("resume", [False, True])
def test_read_only_out_folder_is_one_line(tmp_path, capsys, monkeypatch,
                                          code_errno, resume):
    out = tmp_path / "run"
    if resume:  # a run stopped after 2 of its 8 updates
        train_run(tiny_config(), out, progress=False, stop_after_updates=2)
    else:
        out.mkdir()
    real_open = os.open

    def read_only_open(path, flags, *args, **kwargs):
        if str(path).startswith(str(out)) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(code_errno, os.strerror(code_errno), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only_open)
    argv = ["--resume", str(out)] if resume else ["--out", str(out), *TINY]
    code, _, err = cli(capsys, *argv)
    monkeypatch.undo()
    assert code == 2
    line = error_line(err)
    assert ".lock" in line and os.strerror(code_errno).lower() in line, line
    assert out.is_dir()  # an existing folder is left as it was


# ---------------------------------------------------------------------------
# Out of memory: refused up front where the shapes say so, else XLA's error
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("overrides, names", [
    (["policies.agent.hidden_sizes=[1000000,1000000]"], "policies.agent.hidden_sizes"),
    (["num_envs=10000000", "num_steps=100000", "total_env_steps=1000000000000"],
     "num_steps=100000"),
])
def test_a_run_too_big_for_the_memory_is_refused_in_one_line(tmp_path, capsys, overrides,
                                                             names):
    out = tmp_path / "run"
    code, _, err = cli(capsys, "--out", str(out), *TINY, *overrides)
    assert code == 2
    line = error_line(err)
    assert "the run needs at least" in line and names in line, line
    assert not out.exists()  # nothing left behind


def test_xla_out_of_memory_in_the_first_chunk_is_one_line_and_leaves_no_folder(
        tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    real = loop._chunk_fn

    class Compiled:
        def __init__(self, fn):
            self.fn = fn

        def lower(self, *args):
            self.fn.lower(*args).compile()  # the real program compiles
            return self

        def compile(self):
            return self

        def __call__(self, rs):
            raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
                               "400000000000 bytes.")

    monkeypatch.setattr(loop, "_chunk_fn", lambda *a: Compiled(real(*a)))
    code, _, err = cli(capsys, "--out", str(out), *TINY)
    assert code == 2
    line = error_line(err)
    assert "out of memory (RESOURCE_EXHAUSTED" in line and "num_envs" in line, line
    assert not out.exists()
