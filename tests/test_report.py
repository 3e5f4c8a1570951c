"""Result files record where they came from, and docs/benchmarks.md is what
experiments/report.py makes of the committed result files."""

from __future__ import annotations

import re
import shlex
import subprocess

from jaxwarp import benchmark


def test_run_meta_records_commit_command_and_device(monkeypatch):
    monkeypatch.delenv("JAXWARP_COMMIT", raising=False)
    meta = benchmark.run_meta(["experiments/bench_train.py", "--out", "a b.json"], rounds=3)
    assert set(meta) >= {"commit", "command", "device", "jax", "python", "date"}
    assert meta["command"] == "python experiments/bench_train.py --out 'a b.json'"
    assert shlex.split(meta["command"])[-1] == "a b.json"
    assert meta["rounds"] == 3
    assert isinstance(meta["device"], str) and meta["device"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", meta["date"])
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=benchmark.__file__.rsplit("/", 1)[0]).stdout.strip()
    except OSError:
        head = ""
    if head:  # a git checkout: the commit, marked when tracked files differ from it
        assert meta["commit"].split("+")[0] == head
        assert meta["commit"] in (head, head + "+dirty")
    else:
        assert meta["commit"] == "unknown"


def test_git_commit_outside_a_repository_is_unknown(tmp_path, monkeypatch):
    monkeypatch.delenv("JAXWARP_COMMIT", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert benchmark.git_commit(tmp_path) == "unknown"


def test_git_commit_can_be_told(monkeypatch):
    # A GPU machine given a copy of the tree without .git.
    monkeypatch.setenv("JAXWARP_COMMIT", "0123abc")
    assert benchmark.git_commit() == "0123abc"
    assert benchmark.run_meta([])["commit"] == "0123abc"
    assert benchmark.run_meta([])["command"] == "unknown"
