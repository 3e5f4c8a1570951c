"""Result files record where they came from, and docs/benchmarks.md is what
experiments/report.py makes of the committed result files."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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


# --- experiments/report.py and docs/benchmarks.md ---------------------------

ROOT = Path(__file__).resolve().parent.parent


def _report():
    spec = importlib.util.spec_from_file_location("jaxwarp_report",
                                                  ROOT / "experiments" / "report.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_committed_benchmarks_page_is_the_reports_output():
    text, _ = _report().render(ROOT)
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    assert page == text, ("docs/benchmarks.md differs from what experiments/report.py makes of "
                          "experiments/results/: run python experiments/report.py")


def test_every_cited_file_exists_and_every_result_file_is_cited():
    _, cited = _report().render(ROOT)
    assert cited and all((ROOT / p).is_file() for p in cited), [
        str(p) for p in cited if not (ROOT / p).is_file()]
    results = ROOT / "experiments" / "results"
    files = sorted(p.relative_to(ROOT) for p in results.rglob("*") if p.is_file())
    orphans = [str(p) for p in files if p not in set(cited)]
    assert not orphans, (f"result files no table cites (cite them in experiments/report.py, or "
                         f"git rm them: git keeps history): {orphans}")
    assert len(files) <= 45, f"experiments/results/ holds {len(files)} files; keep it to 45"


def test_every_table_on_the_page_names_its_file():
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    sections = re.split(r"^#{2,3} ", page, flags=re.M)[1:]
    tables = 0
    for sec in sections:
        if "|---" not in sec:
            continue
        tables += 1
        title = sec.splitlines()[0]
        assert "Source: `experiments/results/" in sec or "experiments/results/" in sec.split(
            "|---", 1)[1] or "| file |" in sec, f"the table under '{title}' cites no result file"
    assert tables >= 12, tables
    # Files without a recorded commit say so; none is left blank.
    for line in page.splitlines():
        if line.startswith("Source: "):
            commit = r" · commit: (not recorded|[0-9a-f]{7,40}(\+dirty)?|unknown) · "
            assert re.search(commit, line), line
            assert " · command: " in line, line


def test_report_refuses_a_missing_file(tmp_path):
    report = _report()
    shutil.copytree(ROOT / "experiments" / "results", tmp_path / "experiments" / "results")
    _, cited = report.render(tmp_path)  # the copy renders
    (tmp_path / cited[0]).unlink()
    with pytest.raises(FileNotFoundError):
        report.render(tmp_path)


def test_cite_uses_what_the_file_records(tmp_path):
    report = _report()
    (tmp_path / "experiments" / "results").mkdir(parents=True)
    meta = benchmark.run_meta(["experiments/bench_train.py", "--cases", "3"])
    meta["commit"] = "0123456789abcdef0123456789abcdef01234567"
    (tmp_path / "experiments" / "results" / "new.json").write_text(json.dumps({"meta": meta}))
    (tmp_path / "experiments" / "results" / "old.json").write_text(json.dumps({"device": "GPU X"}))
    line = report.cite(tmp_path, report.Source("new.json", "python experiments/bench_train.py"))
    assert f"commit: {meta['commit']}" in line
    assert "command: `python experiments/bench_train.py --cases 3`" in line
    assert meta["device"] in line
    old = report.cite(tmp_path, report.Source("old.json", "python experiments/bench_env.py"))
    assert "GPU X" in old and "commit: not recorded" in old
    assert "command: not recorded; made by `python experiments/bench_env.py`" in old


def test_curves_to_csv_keeps_every_value(tmp_path):
    report = _report()
    tag = {"config": "c", "trained": {"final_tags_per_episode": 9.5, "wall_s": [1.0, 2.5],
                                      "env_steps": [10.0, 20.0],
                                      "tags_per_episode": [math.nan, 3.0],
                                      "tags_per_episode_smoothed": [math.nan, 3.0],
                                      "tagger_episode_return": [math.nan, 30.0]}}
    path = tmp_path / "learn_tag.json"
    path.write_text(json.dumps(tag))
    out = report.curves_to_csv(path)
    rows = list(csv.DictReader(out.open()))
    assert [r["update"] for r in rows] == ["1", "2"]
    assert [float(r["wall_s"]) for r in rows] == [1.0, 2.5]
    assert rows[0]["tags_per_episode"] == "" and float(rows[1]["tagger_episode_return"]) == 30.0
    summary = json.loads(path.read_text())
    assert summary["trained"] == {"final_tags_per_episode": 9.5, "curve": "learn_tag.csv"}

    cmp = {"config": "c", "variants": {name: {"final_tags_per_episode": 1.0, "env_steps": [5.0],
                                              "tags_per_episode": [v],
                                              "tags_per_episode_smoothed": [v],
                                              "tagger_episode_return": [v]}
                                       for name, v in (("a", 1.5), ("b", 2.5))}}
    path = tmp_path / "learn_compare.json"
    path.write_text(json.dumps(cmp))
    rows = list(csv.DictReader(report.curves_to_csv(path).open()))
    assert [(r["variant"], float(r["tags_per_episode"])) for r in rows] == [("a", 1.5), ("b", 2.5)]
    assert json.loads(path.read_text())["variants"]["b"] == {"final_tags_per_episode": 1.0,
                                                            "curve": "learn_compare.csv"}


def test_parts_of_merged_files_read_as_the_files_they_were(tmp_path):
    # Result files merged into one (the folder's cap) keep each part under its old name.
    report = _report()
    results = tmp_path / "experiments" / "results"
    results.mkdir(parents=True)
    (results / "runs.log").write_text(
        "# two logs\n\n==> a.log <==\n$ python -m pytest -q a\n1 passed in 2.0s\n\n"
        "==> b.log <==\n$ python -m pytest -q b\n.\n3 passed, 1 skipped in 5.0s\n")
    (results / "runs.json").write_text(json.dumps({"merged": "x", "files": {
        "a.json": {"meta": {"device": "GPU A", "commit": "abcdef0"}, "v": 1},
        "b.json": {"meta": {"device": "GPU B"}, "v": 2}}}))
    (results / "runs.csv").write_text("file,update,x\na.csv,1,0.5\nb.csv,1,7\nb.csv,2,8\n")
    src = report.Source
    assert report._text(tmp_path, src("runs.log", "m", part="b.log")) == (
        ".\n3 passed, 1 skipped in 5.0s\n")
    assert report._text(tmp_path, src("runs.log", "m", part="a.log")).strip() == (
        "1 passed in 2.0s")
    with pytest.raises(ValueError, match="c.log"):
        report._text(tmp_path, src("runs.log", "m", part="c.log"))
    assert report._read_json(tmp_path, src("runs.json", "m", part="b.json"))["v"] == 2
    assert [r["x"] for r in report._csv(tmp_path, src("runs.csv", "m", part="b.csv"))] == [
        "7", "8"]
    line = report.cite(tmp_path, src("runs.json", "m", part="a.json"))
    assert line.startswith("`experiments/results/runs.json` (part `a.json`) · GPU A ")
    assert "commit: abcdef0" in line
    assert "GPU B" in report.cite(tmp_path, src("runs.json", "m", part="b.json"))


def test_cite_marks_a_dirty_tree_and_quotes_backticks(tmp_path):
    report = _report()
    (tmp_path / "experiments" / "results").mkdir(parents=True)
    meta = {"device": "GPU X", "commit": "0123abc", "dirty": True,
            "command": "bash run.sh (each `python b.py` in turn)"}
    (tmp_path / "experiments" / "results" / "d.json").write_text(json.dumps({"meta": meta}))
    line = report.cite(tmp_path, report.Source("d.json", "bash run.sh"))
    assert "commit: 0123abc+dirty · " in line
    assert line.endswith("command: `` bash run.sh (each `python b.py` in turn) ``")
