"""docs/envs/: one page per built-in env, and the pages say what the code does.

For every built-in env (`jaxwarp.registry.builtin_envs()`: the env modules
of jaxwarp/envs/; envs that a test registers at run time are not built-ins):

* the index ``docs/envs/README.md`` links exactly the built-ins' pages
  (``docs/envs/<name>.md``, what `jaxwarp.registry.env_doc` finds), one table
  row each, and its Drawing table names exactly the built-ins that draw;
* the index's row for the env states its default shapes (below), and the
  README's table of envs names every built-in;

and for every env's page (the checks named ``test_page_*``, which
tests/test_new_env.py also runs on the page of an env of its own):

* the page's Spaces table states the observation and action shapes that
  ``jaxwarp.make(name, backend="jax")`` has at default params, in two rows of
  a fixed form::

      | observation | `f32[envs, 1, 4]` | ...
      | action | `i32[envs, 1, 1]`, nvec `(2,)` | ...

  (agents, observation width, action heads and choices per head);
* the Params table lists every field of the env's params dataclass, one row
  each, ``| `name` | `default` | meaning |``, with the dataclass's default
  (a Python literal, or an expression of literals and ``pi``);
* the page names the files that make the env, its usage line and every named
  configuration.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import re
import sys
from pathlib import Path

import jax
import pytest

import jaxwarp
from jaxwarp.registry import builtin_envs, env_configs, env_doc, env_spec

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "envs"
INDEX = DOCS / "README.md"

OBS_ROW = re.compile(r"^\| observation \| `f32\[envs, (\d+), (\d+)\]` \|", re.M)
ACT_ROW = re.compile(r"^\| action \| `i32\[envs, (\d+), (\d+)\]`, nvec `\(([\d, ]*)\)` \|", re.M)
PARAM_ROW = re.compile(r"^\| `(\w+)` \| `([^`]+)` \|", re.M)


BUILTIN = builtin_envs()


def _page(name: str) -> tuple[Path, str]:
    """(path, text) of the env's page, as `env_doc` finds it."""
    path = env_doc(name)
    assert path is not None, (f"{name}: no page found (docs/envs/{name}.md for a built-in; "
                              f"{name}.md or README.md beside a user env's header)")
    return path, path.read_text()


def _spec_module_file(name: str) -> Path:
    """The file of the module that declares the env's spec (exports SPEC)."""
    spec = env_spec(name)
    module = next((m for m in list(sys.modules.values())
                   if getattr(m, "SPEC", None) is spec and getattr(m, "__file__", None)),
                  sys.modules[spec.reference_step.__module__])
    return Path(module.__file__)


def _section(text: str, title: str, where: str) -> str:
    """The text of `## title` up to the next `## ` heading."""
    m = re.search(rf"^## {re.escape(title)}\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"{where}: no '## {title}' section"
    return m.group(1)


def _one(pattern: re.Pattern, text: str, where: str) -> re.Match:
    found = list(pattern.finditer(text))
    assert len(found) == 1, (f"{where}: expected exactly one row matching {pattern.pattern!r}; "
                             f"found {len(found)}")
    return found[0]


def _nvec(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.replace(" ", "").split(",") if v)


def _spaces(name: str) -> tuple[int, int, int, tuple[int, ...]]:
    """(agents, obs_dim, heads, nvec) of the env at default params, read
    through the public API and an abstract reset (no compilation)."""
    env = jaxwarp.make(name, backend="jax")
    obs = jax.eval_shape(lambda key: env.reset(key, 2)[0], jax.random.PRNGKey(0))
    assert obs.dtype == jax.numpy.float32, (name, obs.dtype)
    assert obs.shape == (2, env.num_agents, env.obs_dim), (name, obs.shape)
    assert env.observation_space.shape == (env.obs_dim,)
    space = env.action_space
    assert space.dtype == jax.numpy.int32
    return env.num_agents, env.obs_dim, len(space.nvec), tuple(space.nvec)


def _default_value(text: str, where: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        pass
    # An expression of numbers and pi, e.g. `12 * 2 * pi / 360`.
    tree = ast.parse(text, mode="eval")
    allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Load,
               ast.operator,
               ast.unaryop)
    for node in ast.walk(tree):
        assert isinstance(node, allowed) and (not isinstance(node, ast.Name) or node.id == "pi"), (
            f"{where}: default `{text}` is not a literal or an expression of numbers and pi")
    return eval(compile(tree, where, "eval"), {"__builtins__": {}, "pi": math.pi})  # noqa: S307


def _same(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
    return a == b


def _index_links() -> list[str]:
    return re.findall(r"\]\((\w+)\.md\)", INDEX.read_text())


def _index_row(name: str) -> str:
    """The index row the env's default shapes call for (its last cell, the
    reference it reproduces, is the page's to say)."""
    agents, obs_dim, _, nvec = _spaces(name)
    return (f"| [`{name}`]({name}.md) | {agents} | `f32[envs, {agents}, {obs_dim}]` | "
            f"nvec `{nvec}` | <reference> |")


def test_every_builtin_env_is_found():
    assert len(BUILTIN) >= 8 and set(BUILTIN) >= {"tag_continuous", "cartpole"}, BUILTIN


def test_index_links_every_builtin_page_and_no_other():
    links = _index_links()
    rows = [n for n in links if any(line.startswith(f"| [`{n}`]({n}.md)")
                                    for line in INDEX.read_text().splitlines())]
    missing = [n for n in BUILTIN if n not in rows]
    assert not missing, ("docs/envs/README.md: add a row to the table of envs for "
                         + "; ".join(f"{n}: {_index_row(n)}" for n in missing))
    unknown = sorted(set(links) - set(BUILTIN))
    assert not unknown, f"docs/envs/README.md links pages of no built-in env: {unknown}"
    for name in BUILTIN:
        assert env_doc(name) == DOCS / f"{name}.md", f"docs/envs/{name}.md is missing"


def test_drawing_table_names_every_env_that_draws():
    table = _section(INDEX.read_text(), "Drawing", "docs/envs/README.md")
    named = re.findall(r"^\| `(\w+)` \|", table, re.M)
    draws = [n for n in BUILTIN if env_spec(n).render_draw is not None]
    assert len(named) == len(set(named)), f"docs/envs/README.md, Drawing: a row twice: {named}"
    assert set(named) == set(draws), (
        f"docs/envs/README.md, Drawing: missing {sorted(set(draws) - set(named))}, "
        f"no such env drawing {sorted(set(named) - set(draws))}")


def test_readme_table_of_envs_names_every_builtin_and_no_other():
    m = re.search(r"^### Environments\s*$(.*?)(?=^#)", (ROOT / "README.md").read_text(),
                  re.M | re.S)
    assert m, "README.md: no '### Environments' section"
    first_cells = [line.split("|")[1] for line in m.group(1).splitlines()
                   if line.startswith("| `")]
    named = re.findall(r"`(\w+)`", "\n".join(first_cells))
    assert sorted(named) == sorted(BUILTIN), (
        f"README.md, Environments: missing {sorted(set(BUILTIN) - set(named))}, "
        f"no such built-in {sorted(set(named) - set(BUILTIN))}")


@pytest.mark.parametrize("name", BUILTIN)
def test_index_row_states_the_default_shapes(name):
    agents, obs_dim, heads, nvec = _spaces(name)
    rows = [line for line in INDEX.read_text().splitlines()
            if re.search(rf"\]\({re.escape(name)}\.md\)", line) and line.startswith("|")]
    assert len(rows) == 1, (f"docs/envs/README.md: expected one table row for {name}, "
                            f"{_index_row(name)}; got {rows}")
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    want = [c.strip() for c in _index_row(name).strip("|").split("|")]
    assert cells[1:4] == want[1:4], f"docs/envs/README.md: {rows[0]}; expected {_index_row(name)}"


@pytest.mark.parametrize("name", BUILTIN)
def test_page_spaces_section_states_the_default_shapes(name):
    path, text = _page(name)
    spaces = _section(text, "Spaces", str(path))
    where = f"{path.name}, Spaces"
    agents, obs_dim, heads, nvec = _spaces(name)
    m = _one(OBS_ROW, spaces, where)
    assert (int(m[1]), int(m[2])) == (agents, obs_dim), (
        f"{where}: observation `f32[envs, {m[1]}, {m[2]}]`; the env has "
        f"f32[envs, {agents}, {obs_dim}] at default params")
    m = _one(ACT_ROW, spaces, where)
    assert (int(m[1]), int(m[2]), _nvec(m[3])) == (agents, heads, nvec), (
        f"{where}: action `i32[envs, {m[1]}, {m[2]}]`, nvec ({m[3]}); the env has "
        f"i32[envs, {agents}, {heads}], nvec {nvec} at default params")


@pytest.mark.parametrize("name", BUILTIN)
def test_page_params_table_lists_every_field_with_its_default(name):
    path, text = _page(name)
    where = f"{path.name}, Params"
    rows = PARAM_ROW.findall(_section(text, "Params", str(path)))
    params = jaxwarp.make(name, backend="jax").params
    fields = {f.name: f.default for f in dataclasses.fields(params)}
    documented = [n for n, _ in rows]
    assert len(documented) == len(set(documented)), f"{where}: a field listed twice"
    assert set(documented) == set(fields), (
        f"{where}: missing {sorted(set(fields) - set(documented))}, "
        f"unknown {sorted(set(documented) - set(fields))}")
    for field, default in rows:
        value = _default_value(default, where)
        assert _same(value, fields[field]), (
            f"{where}: `{field}` default `{default}` = {value!r}; the dataclass has "
            f"{fields[field]!r}")


@pytest.mark.parametrize("name", BUILTIN)
def test_page_names_its_files_and_configs(name):
    path, text = _page(name)
    if name in BUILTIN:
        files = [f"cuda/envs/{name}.h", f"jaxwarp/envs/{name}.py"]
    else:  # a user env's page names its files as it likes: by their names at least
        files = [Path(env_spec(name).header).name, _spec_module_file(name).name]
    for file in files:
        assert re.search(rf"`([^`\s]*/)?{re.escape(file)}`", text), (
            f"{path}: does not name `{file}`")
    assert f'jaxwarp.make("{name}"' in text, f"{path}: has no usage line"
    for config in env_configs(name):
        assert f"`{config}`" in text, f"{path}: does not name config `{config}`"
