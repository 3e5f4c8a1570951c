"""docs/envs/: one page per built-in env, and the pages say what the code does.

For every env that jaxwarp ships (registered by name, params declared in a
module of ``jaxwarp.envs``; envs that a test registers at run time are not
built-ins):

* ``docs/envs/<name>.md`` exists and the index ``docs/envs/README.md`` links it;
* the page's Spaces table states the observation and action shapes that
  ``jaxwarp.make(name, backend="jax")`` has at default params, in two rows of
  a fixed form::

      | observation | `f32[envs, 1, 4]` | ...
      | action | `i32[envs, 1, 1]`, nvec `(2,)` | ...

  (agents, observation width, action heads and choices per head), and the
  index's row for the env repeats them;
* the Params table lists every field of the env's params dataclass, one row
  each, ``| `name` | `default` | meaning |``, with the dataclass's default
  (a Python literal, or an expression of literals and ``pi``);
* the page names the files that make the env and every named configuration.
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

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "envs"
INDEX = DOCS / "README.md"

OBS_ROW = re.compile(r"^\| observation \| `f32\[envs, (\d+), (\d+)\]` \|", re.M)
ACT_ROW = re.compile(r"^\| action \| `i32\[envs, (\d+), (\d+)\]`, nvec `\(([\d, ]*)\)` \|", re.M)
PARAM_ROW = re.compile(r"^\| `(\w+)` \| `([^`]+)` \|", re.M)


def _builtin_envs() -> list[str]:
    names = []
    for name in jaxwarp.registered_envs():
        env = jaxwarp.make(name, backend="jax")
        if type(env.params).__module__.startswith("jaxwarp.envs."):
            names.append(name)
    return names


BUILTIN = _builtin_envs()


def _section(text: str, title: str, name: str) -> str:
    """The text of `## title` up to the next `## ` heading."""
    m = re.search(rf"^## {re.escape(title)}\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"docs/envs/{name}.md: no '## {title}' section"
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


def test_every_builtin_env_is_found():
    # The built-ins of this repository; a new env adds its page and its name here.
    assert set(BUILTIN) >= {"tag_continuous", "tag_gridworld", "mpe_simple_spread",
                            "mpe_simple_tag", "cartpole", "acrobot", "pendulum",
                            "mountain_car"}, BUILTIN


@pytest.mark.parametrize("name", BUILTIN)
def test_page_exists_and_the_index_links_it(name):
    assert (DOCS / f"{name}.md").is_file(), f"docs/envs/{name}.md is missing"
    index = INDEX.read_text()
    assert re.search(rf"\]\({re.escape(name)}\.md\)", index), (
        f"docs/envs/README.md does not link {name}.md")


@pytest.mark.parametrize("name", BUILTIN)
def test_spaces_section_states_the_default_shapes(name):
    text = (DOCS / f"{name}.md").read_text()
    spaces = _section(text, "Spaces", name)
    where = f"docs/envs/{name}.md, Spaces"
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
def test_index_row_states_the_default_shapes(name):
    agents, obs_dim, heads, nvec = _spaces(name)
    rows = [line for line in INDEX.read_text().splitlines()
            if re.search(rf"\]\({re.escape(name)}\.md\)", line) and line.startswith("|")]
    assert len(rows) == 1, f"docs/envs/README.md: expected one table row for {name}; got {rows}"
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[1] == str(agents), (name, cells)
    assert cells[2] == f"`f32[envs, {agents}, {obs_dim}]`", (name, cells)
    assert cells[3] == f"nvec `{nvec}`", (name, cells)


@pytest.mark.parametrize("name", BUILTIN)
def test_params_table_lists_every_field_with_its_default(name):
    text = (DOCS / f"{name}.md").read_text()
    where = f"docs/envs/{name}.md, Params"
    rows = PARAM_ROW.findall(_section(text, "Params", name))
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
    text = (DOCS / f"{name}.md").read_text()
    for path in (f"cuda/envs/{name}.h", f"jaxwarp/envs/{name}.py"):
        assert f"`{path}`" in text, f"docs/envs/{name}.md does not name `{path}`"
    assert f'jaxwarp.make("{name}"' in text, f"docs/envs/{name}.md has no usage line"
    params_module = sys.modules[type(jaxwarp.make(name, backend="jax").params).__module__]
    for config in getattr(params_module, "CONFIGS", {}):
        assert f"`{config}`" in text, f"docs/envs/{name}.md does not name config `{config}`"
