"""Training as three layers (docs/architecture.md): the algorithm
(`jaxwarp/train/`), the models (`jaxwarp/models/`) and the run shell
(`jaxwarp/run/`), each importing only the layers below it; short functions, no
reaching into another module's privates, no import circle, and the metrics an
env logs declared by the env (not named by the shell)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp.run.loop import train_run
from jaxwarp.run.metrics import is_headline
from jaxwarp.train import load_config
from jaxwarp.train.rollout import env_metric_names

PACKAGE = Path(jaxwarp.__file__).parent
TRAIN, MODELS, RUN = PACKAGE / "train", PACKAGE / "models", PACKAGE / "run"
# Each layer and the jaxwarp packages it must not import (the layers above it).
ABOVE = {"models": ("jaxwarp.train", "jaxwarp.run", "jaxwarp.cli"),
         "train": ("jaxwarp.run", "jaxwarp.cli"), "run": ("jaxwarp.cli",)}


def test_no_function_in_the_package_is_longer_than_60_lines():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 60:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} "
                                f"({lines} lines)")
    assert not long, long


@pytest.mark.parametrize("layer", sorted(ABOVE))
def test_each_layer_imports_only_the_layers_below_it(layer):
    """models <- train <- run <- cli: an upward import (lazy ones inside
    functions included) would make the layers one room again."""
    upward = [f"{path.relative_to(PACKAGE)} imports {m}"
              for path in sorted((PACKAGE / layer).glob("*.py"))
              for m in sorted(_imports(path, PACKAGE))
              if any(m == a or m.startswith(a + ".") for a in ABOVE[layer])]
    assert not upward, upward


def test_the_package_imports_no_private_name_of_a_training_module():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    ("jaxwarp.train", "jaxwarp.models", "jaxwarp.run")):
                found += [f"{path.name}: {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_")]
    assert not found, found


def _imports(path: Path, package: Path) -> set[str]:
    """The jaxwarp modules `path` imports, at module level or inside functions."""
    mod = ".".join(path.relative_to(package.parent).with_suffix("").parts)
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found |= {base} | {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m.startswith("jaxwarp")}


def test_no_import_circle_between_jaxwarp_modules():
    """No module of the package imports, directly or through others, a module
    that imports it back (lazy imports inside functions count too: they are
    the same dependency, resolved later). A package's __init__ re-exporting its
    modules is not an edge back."""
    package = PACKAGE
    files = {".".join(p.relative_to(package.parent).with_suffix("").parts): p
             for p in package.rglob("*.py")}
    files = {k.removesuffix(".__init__"): v for k, v in files.items()}
    graph = {m: {i for i in _imports(p, package) if i in files and i != m
                 and not m.startswith(i + ".")}  # a module's own package __init__
             for m, p in files.items()}
    circles = []

    def visit(m, stack, done):
        if m in stack:
            circles.append(stack[stack.index(m):] + [m])
            return
        if m in done:
            return
        done.add(m)
        for n in sorted(graph[m]):
            visit(n, stack + [m], done)

    done: set[str] = set()
    for m in sorted(graph):
        if not files[m].name == "__init__.py":
            visit(m, [], done)
    assert not circles, circles[:5]


def test_the_run_shell_and_the_algorithm_name_no_env_metric():
    paths = [*sorted(RUN.glob("*.py")), *sorted(TRAIN.glob("*.py"))]
    assert {"loop.py", "plot.py", "metrics.py", "checkpoint.py"} <= {p.name for p in paths}
    for path in paths:
        text = path.read_text()
        assert '"tags_per_episode"' not in text and "'tags_per_episode'" not in text, path


def test_env_metric_names_are_what_the_env_declares():
    tag = jaxwarp.make("tag_continuous", backend="jax")
    assert env_metric_names(tag) == ("tags_per_episode",)
    assert env_metric_names(jaxwarp.make("cartpole", backend="jax")) == ()
    # Tag reports no tag count where taggers earn more than tags.
    penalised = jaxwarp.make("tag_continuous", backend="jax", step_penalty_for_tagger=-0.1)
    assert env_metric_names(penalised) == ()
    assert is_headline("tagger/episode_return", ()) and is_headline("x", ("x",))
    assert not is_headline("tagger/loss", ("x",))


class _CountingCartPole:
    """cartpole with one more episode metric declared (f32[envs] per finished
    episode): the runner must pick it up without naming it."""

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        return getattr(self._env, name)

    def episode_metrics(self, episode_return):
        """episode_return f32[envs, 1] -> {"twice_the_return": f32[envs]}."""
        return {"twice_the_return": 2 * episode_return[:, 0].astype(jnp.float32)}


def test_a_metric_the_env_declares_is_in_the_summary_and_the_plot(tmp_path):
    pytest.importorskip("matplotlib")
    config = load_config(None, ["env=cartpole", "backend=jax", "num_envs=4", "num_steps=16",
                                "total_env_steps=512", "num_minibatches=1",
                                "update_epochs=1", "chunk_updates=4", "checkpoint_every=4",
                                "policies.agent.hidden_sizes=[8]"])
    env = _CountingCartPole(jaxwarp.make("cartpole", backend="jax"))
    result = train_run(config, tmp_path / "run", progress=False, env=env)
    final = result.summary["final"]
    assert set(final) == {"agent/episode_return", "twice_the_return"}
    if final["agent/episode_return"] is not None:
        np.testing.assert_allclose(final["twice_the_return"], 2 * final["agent/episode_return"],
                                   rtol=1e-5)
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())["final"]
    assert set(on_disk) == set(final)
    assert (tmp_path / "run" / "learning_curve.png").is_file()
