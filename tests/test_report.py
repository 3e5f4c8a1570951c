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


# --- units: env-steps/s with agent-steps/s, and the device (issue 40) -------

def _tables(page: str):
    """(section title, text before the table, header cells, rows of cells) per table."""
    for sec in re.split(r"^#{2,3} ", page, flags=re.M)[1:]:
        lines = sec.splitlines()
        i = start = 1  # the text since the title or the table before
        while i < len(lines):
            if lines[i].startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
                before = "\n".join(lines[start:i])
                j = i + 2
                while j < len(lines) and lines[j].startswith("|"):
                    j += 1
                cells = [[c.strip() for c in row.strip("|").split(" | ")] for row in lines[i:j]]
                yield lines[0], before, cells[0], cells[2:]
                i = start = j
            else:
                i += 1


def test_throughput_tables_give_agent_steps_and_name_the_device():
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    throughput = 0
    for title, before, header, rows in _tables(page):
        if "env-steps/s" not in before + " ".join(header):
            continue
        throughput += 1
        assert "agent-steps/s" in before + " ".join(header), f"'{title}': no agent-steps/s"
        assert re.search(r"NVIDIA|CPU|cores", before), f"'{title}': the text names no device"
        # Where the table gives the agents per env, every row of more than one agent
        # carries agent-steps/s.
        col = next((k for k, h in enumerate(header) if h in ("agents", "envs × agents")), None)
        for row in rows if col is not None else []:
            agents = int(row[col].split("×")[-1].replace(",", ""))
            assert (agents > 1) == ("agent-steps/s" in " ".join(row)), (title, row)
    assert throughput >= 15, throughput
    # The peers' units are named where their figures are compared.
    assert "2.9 M env-steps/s (its figure counts env-steps: 2.9G agent-steps/s)" in page
    assert "PufferLib's steps/s are agent-steps" in page


def test_rate_cells_use_jaxwarp_units():
    report = _report()
    assert report.rate(18.8e6, 110) == "18.8 (2.07G agent-steps/s)"
    assert report.rate(3.3e6, 1) == report.mega(3.3e6) == "3.30"  # one agent: the same figure
    assert report.rate(410e3, None, report.kilo_or_mega, also="rollout 43%") == "410K (rollout 43%)"
    assert report.rate(410e3, 110, report.kilo_or_mega, also="rollout 43%") == (
        "410K (45.1M agent-steps/s; rollout 43%)")


def test_agent_counts_of_older_result_files_match_the_configs():
    # Files written before runs recorded agents_per_env name a config or an env.
    import jaxwarp
    from jaxwarp.train import load_config

    report = _report()
    configs = {p.stem for p in (ROOT / "jaxwarp" / "train" / "configs").glob("*.yaml")}
    for key, agents in report.AGENTS.items():
        if key in configs:
            c = load_config(key)
            env = jaxwarp.make(c.env, backend="jax", config=c.env_config, **dict(c.env_params))
        else:
            name, _, config = key.partition("[")
            env = jaxwarp.make(name, backend="jax",
                               **({"config": config.rstrip("]")} if config else {}))
        assert env.num_agents == agents, key
    assert report.agents_of("tag_chase", ["num_envs=2000"]) == 110
    assert report.agents_of("tag_chase", ["env_params.num_runners=5"]) is None
    assert report.agents_of("tag_continuous", params={"config": "warpdrive_default"}) == 110
    assert report.agents_of("tag_continuous", params={"num_taggers": 5}) is None


def test_the_report_reads_the_clis_summary_line_before_and_since_units():
    report = _report()
    old = ("500/500 updates, 1,600,000 env-steps per seed x 1 seed(s); 377,649 env-steps/s "
           "(compile 18.1 s); final {}")
    new = ("500/500 updates, 1,600,000 env-steps per seed x 1 seed(s); 378K env-steps/s "
           "(2.64M agent-steps/s) on NVIDIA H100 80GB HBM3 (compile 18.1 s); final {}")
    a, b = report._run_line(old), report._run_line(new)
    assert a["env_steps_per_s"] == 377_649 and b["env_steps_per_s"] == 378_000
    assert a["updates"] == b["updates"] == 500 and a["compile_s"] == b["compile_s"] == 18.1
    assert a["env_steps"] == b["env_steps"] == 1_600_000


def test_experiments_print_throughput_through_jaxwarp_units():
    # No script formats env-steps/s by hand: each prints through jaxwarp.units
    # (rate_text: env-steps/s, agent-steps/s, device) or names agent-steps/s beside.
    hand = re.compile(r"env_steps_per_s['\"]\]\s*(?:/\s*1e\d)?\s*:[^}]*\}[\sKMG\"f]*"
                      r"(?:env-steps/s|M/s)")
    quiet = {"ablation_launch.py": "prints µs per step", "report.py": "writes the page"}
    for path in sorted((ROOT / "experiments").glob("*.py")):
        src = path.read_text()
        assert not hand.findall(src), (path.name, hand.findall(src))
        if "env_steps_per_s" in src and "print(" in src and path.name not in quiet:
            assert "rate_text(" in src or "agent-steps/s" in src, path.name
