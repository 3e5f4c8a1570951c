"""Built-in envs are found by discovery: every module of jaxwarp/envs/ whose
name does not start with ``_`` exports SPEC (named as the file), ENV and
optionally CONFIGS, and is registered as it is; a module that breaks the
recipe is refused with an error naming its file."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
import sys
import textwrap
from pathlib import Path

import pytest

import jaxwarp
import jaxwarp.envs
from jaxwarp import registry
from jaxwarp.authoring import ContractEnv, EnvSpec

ROOT = Path(__file__).resolve().parent.parent
# The built-ins as the files on disk say: every module of jaxwarp/envs/ whose
# name does not start with "_" (no list to keep: a new env is one more file).
BUILTINS = tuple(sorted(p.stem for p in (ROOT / "jaxwarp" / "envs").glob("*.py")
                        if not p.stem.startswith("_")))


def _public_stems(folder: Path, suffix: str) -> set[str]:
    return {p.stem for p in folder.glob(f"*{suffix}") if not p.stem.startswith("_")}


def test_builtins_are_the_env_modules_of_jaxwarp_envs_sorted():
    files = sorted(m.name for m in pkgutil.iter_modules(jaxwarp.envs.__path__)
                   if not m.name.startswith("_"))
    assert tuple(files) == BUILTINS and len(BUILTINS) >= 8
    assert registry.env_modules() == [f"jaxwarp.envs.{n}" for n in BUILTINS]
    assert registry.builtin_envs() == BUILTINS
    # The built-ins come first, in file-name order (other tests may have
    # registered more after them).
    assert jaxwarp.registered_envs()[:len(BUILTINS)] == BUILTINS


def test_every_builtin_has_its_header_and_page_and_nothing_is_left_over():
    """One recipe: jaxwarp/envs/<name>.py, cuda/envs/<name>.h (the spec's
    header) and docs/envs/<name>.md for every built-in, and no header or page
    without its module (shared headers are named _*.h, as shared modules _*.py)."""
    headers = _public_stems(ROOT / "cuda" / "envs", ".h")
    pages = _public_stems(ROOT / "docs" / "envs", ".md") - {"README"}
    for name in BUILTINS:
        spec = registry.env_spec(name)
        assert Path(spec.header).resolve() == ROOT / "cuda" / "envs" / f"{name}.h", (
            f"{name}: SPEC.header is {spec.header}; a built-in's header is cuda/envs/{name}.h")
        assert registry.env_doc(name) == ROOT / "docs" / "envs" / f"{name}.md", (
            f"docs/envs/{name}.md is missing")
    assert headers == set(BUILTINS), (
        f"cuda/envs/: headers without an env module {sorted(headers - set(BUILTINS))} (a "
        f"shared header is named _*.h), modules without a header "
        f"{sorted(set(BUILTINS) - headers)}")
    assert pages == set(BUILTINS), (
        f"docs/envs/: pages without an env module {sorted(pages - set(BUILTINS))}, modules "
        f"without a page {sorted(set(BUILTINS) - pages)}")


def test_every_builtin_layout_is_checked_in_and_no_other():
    """ffi/layouts/<name>.h (and <name>.<config>.h, <config> an env config or
    a shipped training config) are generated from the built-ins (python -m
    jaxwarp.layouts; tests/test_packaging.py holds their text to the
    generator): one for every built-in contract env, none for an env that is
    not one."""
    from jaxwarp.train.config import shipped_configs

    stems = {p.name[:-len(".h")] for p in (ROOT / "ffi" / "layouts").glob("*.h")}
    envs = {s.partition(".")[0] for s in stems}
    contract = set(BUILTINS) & set(registry.contract_envs())
    assert envs == contract, (
        f"ffi/layouts/: stale {sorted(envs - contract)}, missing {sorted(contract - envs)}: "
        "run python -m jaxwarp.layouts")
    for stem in stems - envs:
        name, _, config = stem.partition(".")
        assert config in registry.env_configs(name) or config in shipped_configs(), \
            f"ffi/layouts/{stem}.h: no config {config!r}"


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin_module_follows_the_recipe(name):
    module = importlib.import_module(f"jaxwarp.envs.{name}")
    assert isinstance(module.SPEC, EnvSpec) and module.SPEC.name == name
    assert isinstance(module.ENV, type) and issubclass(module.ENV, ContractEnv)
    env_cls, params_cls, configs = registry._REGISTRY[name]
    assert env_cls is module.ENV
    assert params_cls is module.SPEC.params_type
    assert configs == getattr(module, "CONFIGS", {})


def test_shared_modules_are_not_envs():
    private = {m.name for m in pkgutil.iter_modules(jaxwarp.envs.__path__)
               if m.name.startswith("_")}
    assert {"_classic", "_mpe"} <= private
    assert not private & set(jaxwarp.registered_envs())


def test_register_spec_returns_the_class_it_registers(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    from jaxwarp.envs import cartpole

    spec = dataclasses.replace(cartpole.SPEC, name="cartpole_copy")
    cls = jaxwarp.register_spec(spec)
    assert issubclass(cls, ContractEnv) and registry._REGISTRY["cartpole_copy"][0] is cls
    assert jaxwarp.register_spec(spec, env_cls=cartpole.ENV) is cartpole.ENV


# --- discovery of a package of env modules (a temporary one) ---------------------
GOOD = """
    import dataclasses
    from jaxwarp.authoring import env_class
    from jaxwarp.envs import cartpole

    SPEC = dataclasses.replace(cartpole.SPEC, name="{name}")
    ENV = env_class(SPEC)
    CONFIGS = {{"short": {{"max_steps": 7}}}}
"""


def _package(tmp_path, monkeypatch, files: dict[str, str]):
    """A fresh importable package holding `files` (name -> source)."""
    name = "jw_envs_" + re.sub(r"\W", "_", tmp_path.name)  # tmp_path.name: unique per test
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    for file, source in files.items():
        (root / file).write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    return importlib.import_module(name)


def test_discovery_registers_each_module_and_skips_private_ones(tmp_path, monkeypatch):
    package = _package(tmp_path, monkeypatch, {
        "zeta_env.py": GOOD.format(name="zeta_env"),
        "alpha_env.py": GOOD.format(name="alpha_env"),
        "_shared.py": "HELPER = 1\n",  # no SPEC: skipped, not an error
    })
    before = jaxwarp.registered_envs()
    assert registry.env_modules(package) == [f"{package.__name__}.alpha_env",
                                            f"{package.__name__}.zeta_env"]
    registry._register_builtins(package)
    assert jaxwarp.registered_envs() == before + ("alpha_env", "zeta_env")
    alpha = sys.modules[f"{package.__name__}.alpha_env"]
    assert registry._REGISTRY["alpha_env"][0] is alpha.ENV
    env = jaxwarp.make("alpha_env", backend="jax", config="short")
    assert env.params.max_steps == 7


@pytest.mark.parametrize("source, error, match", [
    ("X = 1\n", ValueError, r"bad_env\.py: an env module must export SPEC .* SPEC and ENV "
                            "missing"),
    (GOOD.format(name="bad_env").replace("ENV = env_class(SPEC)", ""), ValueError,
     r"bad_env\.py: .*; ENV missing"),
    (GOOD.format(name="other_name"), ValueError,
     r"bad_env\.py: SPEC.name is 'other_name'.*expected 'bad_env'"),
    (GOOD.format(name="bad_env").replace("ENV = env_class(SPEC)", "ENV = object"), TypeError,
     r"bad_env\.py: ENV must be the env class"),
    ("SPEC = 'cartpole'\nENV = None\n", TypeError, r"bad_env\.py: SPEC must be a .*EnvSpec"),
    (GOOD.format(name="bad_env").replace('{"short": {"max_steps": 7}}', '["short"]'),
     TypeError, r"bad_env\.py: register_spec\('bad_env'\): configs must map"),
])
def test_a_module_that_breaks_the_recipe_is_named(tmp_path, monkeypatch, source, error, match):
    package = _package(tmp_path, monkeypatch, {"bad_env.py": source,
                                               "good_env.py": GOOD.format(name="good_env")})
    with pytest.raises(error, match=match):
        registry._register_builtins(package)
    assert "bad_env" not in registry._REGISTRY


def test_env_doc_of_a_user_env(tmp_path, monkeypatch):
    """A user env's page sits beside its header: <name>.md, else README.md;
    an env registered without a spec, or not registered, has none."""
    import jaxwarp.envs.cartpole as cartpole

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_SPECS", dict(registry._SPECS))
    spec = dataclasses.replace(cartpole.SPEC, name="pole_copy", header=tmp_path / "pole.h")
    jaxwarp.register_spec(spec)
    assert registry.env_doc("pole_copy") is None
    (tmp_path / "README.md").write_text("# pole_copy\n")
    assert registry.env_doc("pole_copy") == tmp_path / "README.md"
    (tmp_path / "pole_copy.md").write_text("# pole_copy\n")
    assert registry.env_doc("pole_copy") == tmp_path / "pole_copy.md"
    jaxwarp.register_env("bare_env", cartpole.ENV, cartpole.SPEC.params_type)
    assert registry.env_doc("bare_env") is None and registry.env_doc("no_such_env") is None
