"""docs/custom_env.md runs as written.

The tutorial's code blocks are extracted and run, so the page cannot drift
from the code:

* a block preceded by ``<!-- file: NAME -->`` is (part of) a file of the
  example env in examples/goal_reach/: a ``cpp`` block must be the whole
  file, a ``python`` block a verbatim excerpt of it;
* every ``python`` block not preceded by ``<!-- no-test -->`` is executed,
  in page order, in one module namespace, on CPU, in a temporary folder that
  holds the page's header (``__file__`` points there, so the spec finds it).
  The blocks assert on their results themselves (cpu == jax bit for bit over
  a rollout, the consistency reports, the checkify error); this test checks
  the namespace they leave behind as well.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import jax
import numpy as np

from jaxwarp import registry

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "custom_env.md"
EXAMPLE = ROOT / "examples" / "goal_reach"

# An optional <!-- mark --> line, then a fenced block.
_BLOCK = re.compile(r"(?:^<!--[ \t]*(?P<mark>[^\n]*?)[ \t]*-->\n)?^```(?P<lang>[\w+-]*)\n(?P<body>.*?)^```",
                    re.M | re.S)


def _blocks() -> list[dict]:
    text = DOC.read_text()
    out = []
    for m in _BLOCK.finditer(text):
        mark = m.group("mark") or ""
        assert mark in ("", "no-test") or mark.startswith("file:"), (
            f"docs/custom_env.md: unknown mark <!-- {mark} --> before a code block")
        out.append(dict(lang=m.group("lang"), body=m.group("body"),
                        line=text.count("\n", 0, m.start("body")) + 1,
                        skip=mark == "no-test",
                        file=mark[len("file:"):].strip() if mark.startswith("file:") else None))
    return out


def test_doc_blocks_are_the_example_files():
    blocks = _blocks()
    files = [b for b in blocks if b["file"]]
    assert {b["file"] for b in files} == {"goal_reach.h", "goal_reach.py"}
    assert {b["lang"] for b in blocks} >= {"cpp", "python", "bash"}
    for b in files:
        source = (EXAMPLE / b["file"]).read_text()
        if b["lang"] == "cpp":
            assert b["body"] == source, (
                f"docs/custom_env.md line {b['line']}: the {b['file']} block differs from "
                f"examples/goal_reach/{b['file']}")
        else:
            assert b["body"] in source, (
                f"docs/custom_env.md line {b['line']}: this {b['file']} block is not a verbatim "
                f"excerpt of examples/goal_reach/{b['file']}")
    # Everything that makes the env is on the page: header, state, reference, spec.
    shown = "".join(b["body"] for b in files if b["lang"] == "python")
    for name in ("class GoalReachParams", "class GoalReachState", "def reference_reset",
                 "def reference_step", "SPEC = EnvSpec(", "jaxwarp.register_spec(SPEC)"):
        assert name in shown, name


def test_doc_python_blocks_run(tmp_path, monkeypatch):
    blocks = _blocks()
    skipped = [b["line"] for b in blocks if b["skip"] and b["lang"] == "python"]
    assert len(skipped) <= 2, f"too many <!-- no-test --> python blocks (lines {skipped})"
    for b in blocks:  # the page's header files, next to where the spec expects them
        if b["file"] and b["lang"] == "cpp":
            (tmp_path / b["file"]).write_text(b["body"])
    monkeypatch.chdir(tmp_path)
    # The page registers goal_reach (from tmp_path); leave the registry as it was.
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    module = types.ModuleType("jaxwarp_doc_custom_env")
    module.__file__ = str(tmp_path / "goal_reach.py")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    ran = 0
    with jax.default_device(jax.devices("cpu")[0]):
        for b in blocks:
            if b["lang"] != "python" or b["skip"]:
                continue
            # Padded with newlines so that tracebacks give the page's line numbers.
            code = compile("\n" * (b["line"] - 1) + b["body"], str(DOC), "exec")
            exec(code, module.__dict__)
            ran += 1
    ns = module.__dict__
    assert ran >= 8, ran
    # What the blocks computed (they assert on it too; checked here so that
    # removing an assert from the page does not go unnoticed).
    assert Path(ns["SPEC"].header).parent == tmp_path
    assert ns["env"].backend == "cpu" and ns["env"].checks
    out_cpu, out_ref = ns["out_cpu"], ns["out_ref"]
    for a, b in zip(jax.tree.leaves(out_cpu), jax.tree.leaves(out_ref), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert int(np.sum(out_cpu[1][2])) > 0  # the rollout went through auto-resets
    assert ns["err"].get() is not None
    report = ns["report"]  # the last one: tag_continuous with the neighbour grid
    assert report.ok and report.mismatch is None and report.steps == 30
    assert report.episodes_finished >= 2



# --- README.md ---------------------------------------------------------------

README = ROOT / "README.md"
CUDA_README = ROOT / "cuda" / "README.md"


def _readme_python_blocks() -> list[tuple[int, str]]:
    text = README.read_text()
    return [(text.count("\n", 0, m.start("body")) + 1, m.group("body"))
            for m in _BLOCK.finditer(text) if m.group("lang") == "python"]


def test_readme_python_blocks_run_and_print_what_they_say(monkeypatch, capsys):
    """Every Python block of the README runs as written (on the cpu backend:
    "auto" is made to see no GPU) and prints something a reader can check."""
    from jaxwarp import _ffi

    blocks = _readme_python_blocks()
    assert len(blocks) >= 2, "the README's Use and Train examples"
    monkeypatch.setattr(_ffi, "gpu_available", lambda: False)
    namespaces = []
    with jax.default_device(jax.devices("cpu")[0]):
        for line, body in blocks:
            ns: dict = {"__name__": "jaxwarp_readme"}
            # Padded with newlines so that tracebacks give the README's line numbers.
            exec(compile("\n" * (line - 1) + body, str(README), "exec"), ns)
            namespaces.append(ns)
    out = capsys.readouterr().out

    # Use: a rollout of random play on Tag that tags runners.
    use = next(ns for ns in namespaces if "rollout" in ns)
    assert use["env"].backend == "cpu"
    num_envs, steps = use["num_envs"], use["steps"]
    tagged, state = np.asarray(use["tagged"]), use["state"]
    assert tagged.shape == (steps,) and int(tagged.sum()) > 0
    left = np.asarray(state.num_runners_left)
    assert left.shape == (num_envs,) and 0 <= left.min() and left.max() <= 100
    m = re.search(r"random play, (\d+) envs x (\d+) steps: (\d+) runners tagged, "
                  r"([\d.]+) of 100 left per env", out)
    assert m, out
    assert (int(m[1]), int(m[2]), int(m[3])) == (num_envs, steps, int(tagged.sum()))
    assert float(m[4]) == round(float(left.mean()), 1)

    # Train: seeds trained side by side, and the return goes up.
    train = next(ns for ns in namespaces if "metrics" in ns)
    ret = np.asarray(train["ret"])
    m = re.search(r"(\d+) seeds x (\d+) updates: mean return (-?\d+) -> (-?\d+)", out)
    assert m, out
    assert ret.shape == (int(m[1]), int(m[2])) and ret.shape[0] > 1
    assert np.all(np.isfinite(ret))
    assert ret[:, -1].mean() > 2 * ret[:, 0].mean() > 0  # CartPole: learning, not noise


def test_readme_and_user_docs_name_files_that_exist():
    """Links and repository paths in the README and the user docs it links to
    point at files that exist (a moved doc or script breaks this, not a reader)."""
    pages = [README] + [ROOT / "docs" / n for n in ("numerics.md", "reliability.md", "pycuda.md",
                                                    "architecture.md")]
    pages += sorted((ROOT / "docs" / "envs").glob("*.md"))  # the env pages and their index
    pages += [CUDA_README]  # the kernel design page the README links to
    path_re = re.compile(r"\]\((?!https?:|#)([^)#\s]+)\)|`((?:docs|experiments|cuda|ffi|jaxwarp|"
                         r"examples|tests)/[\w./-]+)`")
    missing = []
    for page in pages:
        # A table runs on into a line that follows it without a blank line (GitHub
        # renders that paragraph as a table row).
        lines = page.read_text().split("\n")
        missing += [f"{page.relative_to(ROOT)} line {i + 2}: no blank line after a table"
                    for i, (a, b) in enumerate(zip(lines, lines[1:]))
                    if a.startswith("|") and b.strip() and not b.startswith("|")]
        for m in path_re.finditer(page.read_text()):
            target = m.group(1) or m.group(2)
            where = page.parent if m.group(1) else ROOT
            if not (where / target).exists():
                missing.append(f"{page.relative_to(ROOT)}: {target}")
    # Result files the README cites by name are under experiments/results/.
    results = {p.name for p in (ROOT / "experiments" / "results").rglob("*") if p.is_file()}
    results |= {p.relative_to(ROOT / "experiments" / "results").as_posix() + "/"
                for p in (ROOT / "experiments" / "results").rglob("*") if p.is_dir()}
    result_re = re.compile(r"`([\w./-]*_(?:h100|h200|cpu)[\w-]*(?:\.(?:json|log|csv|txt|png|gif)|/))`")
    cited = {page: result_re.findall(page.read_text()) for page in (README, CUDA_README)}
    assert len(cited[README]) >= 10, cited[README]
    assert len(cited[CUDA_README]) >= 3, cited[CUDA_README]
    missing += [f"{page.relative_to(ROOT)}: {name}" for page, names in cited.items()
                for name in names
                if Path(name).name not in results and name not in results
                and not (ROOT / name).exists()]
    assert not missing, missing
