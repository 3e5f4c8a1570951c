"""`jaxwarp.make`: environments by name."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

import jaxwarp.envs
from jaxwarp.authoring import ContractEnv, EnvSpec, env_class
from jaxwarp.params_check import check_params, check_values

# name -> (env class, params class, named configurations)
_REGISTRY: dict[str, tuple[type, type, dict[str, dict[str, Any]]]] = {}
# name -> EnvSpec, for the envs registered by their spec (`register_spec`)
_SPECS: dict[str, EnvSpec] = {}


def register_spec(spec: EnvSpec, configs: dict[str, dict[str, Any]] | None = None,
                  env_cls: type | None = None) -> type:
    """Makes an env declared by its `EnvSpec` available to `make` under
    ``spec.name``; env_cls only where a subclass of `ContractEnv` adds
    behaviour (default: `env_class(spec)`). Returns the env class registered
    (``ENV = jaxwarp.register_spec(SPEC)`` in a user's env module)."""
    if not isinstance(spec, EnvSpec):
        raise TypeError(f"register_spec: spec must be a jaxwarp.authoring.EnvSpec; got "
                        f"{type(spec).__name__} {spec!r}")
    env_cls = env_cls or env_class(spec)
    _check_registration("register_spec", spec.name, env_cls, spec.params_type, configs)
    _REGISTRY[spec.name] = (env_cls, spec.params_type, dict(configs or {}))
    _SPECS[spec.name] = spec
    return env_cls


def _check_registration(where: str, name: Any, env_cls: Any, params_cls: Any,
                        configs: Any) -> None:
    """Types of what `register_env` / `register_spec` store, checked when they
    are given (not at the first `make`, with a message naming something else)."""
    if not isinstance(name, str):
        raise TypeError(f"{where}: the env name must be a str; got {name!r}")
    if not name.strip():
        raise ValueError(f"{where}: the env name must not be empty or blank; got {name!r}")
    if not callable(env_cls):
        raise TypeError(f"{where}({name!r}): env_cls must be a class (called as "
                        f"env_cls(params, backend=..., checks=..., obs_dtype=...)); got "
                        f"{env_cls!r}")
    if not dataclasses.is_dataclass(params_cls) or not isinstance(params_cls, type):
        raise TypeError(f"{where}({name!r}): params_cls must be a dataclass; got "
                        f"{params_cls!r}")
    if configs is None:
        return
    if not isinstance(configs, Mapping) or not all(
            isinstance(k, str) and isinstance(v, Mapping) for k, v in configs.items()):
        raise TypeError(f"{where}({name!r}): configs must map config names (str) to "
                        f"mappings of params; got {configs!r}")


def env_modules(package: ModuleType = jaxwarp.envs) -> list[str]:
    """The env modules of `package` (default: the built-ins, `jaxwarp.envs`):
    its modules whose names do not start with ``_`` (those hold what several
    envs share), sorted by name, as dotted names."""
    names = sorted(m.name for m in pkgutil.iter_modules(package.__path__)
                   if not m.name.startswith("_"))
    return [f"{package.__name__}.{name}" for name in names]


def register_module(module: ModuleType) -> None:
    """Registers the env of an env module, the one recipe every built-in follows:
    the module ``<name>.py`` exports ``SPEC`` (its `EnvSpec`, with
    ``SPEC.name == "<name>"``), ``ENV`` (its env class: ``env_class(SPEC)`` or
    a subclass of `ContractEnv`) and optionally ``CONFIGS`` (named params).

    Raises ValueError (a missing name, or SPEC.name not the file's name) or
    TypeError (SPEC, ENV or CONFIGS of the wrong kind), naming the file."""
    where = getattr(module, "__file__", None) or module.__name__
    path = Path(where)
    stem = (path.parent.name if path.name == "__init__.py" else path.stem) \
        if path.suffix == ".py" else module.__name__.rpartition(".")[2]
    missing = [n for n in ("SPEC", "ENV") if not hasattr(module, n)]
    if missing:
        raise ValueError(f"{where}: an env module must export SPEC (its EnvSpec) and ENV (its "
                         f"env class), and may export CONFIGS; {' and '.join(missing)} missing")
    spec, env_cls = module.SPEC, module.ENV
    if not isinstance(spec, EnvSpec):
        raise TypeError(f"{where}: SPEC must be a jaxwarp.authoring.EnvSpec; got "
                        f"{type(spec).__name__}")
    if spec.name != stem:
        raise ValueError(f"{where}: SPEC.name is {spec.name!r}; an env module is named after "
                         f"its env, so expected {stem!r} (rename the file or the spec)")
    if not (isinstance(env_cls, type) and issubclass(env_cls, ContractEnv)):
        raise TypeError(f"{where}: ENV must be the env class, env_class(SPEC) or a subclass "
                        f"of jaxwarp.authoring.ContractEnv; got {env_cls!r}")
    try:
        register_spec(spec, getattr(module, "CONFIGS", None), env_cls)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{where}: {e}") from None


def _register_builtins(package: ModuleType = jaxwarp.envs) -> None:
    """The built-in envs, found by discovery: every env module of jaxwarp/envs/
    (no list to keep: a new ``jaxwarp/envs/<name>.py`` is registered as it is)."""
    for name in env_modules(package):
        register_module(importlib.import_module(name))


_register_builtins()


def register_env(name: str, env_cls: type, params_cls: type,
                 configs: dict[str, dict[str, Any]] | None = None) -> None:
    """Makes a user env available to `make` (and to ``jaxwarp train env=name``).

    env_cls(params, backend=..., checks=..., obs_dtype=...) builds the env; params_cls is its
    params dataclass; configs are optional named parameter sets.
    """
    _check_registration("register_env", name, env_cls, params_cls, configs)
    _REGISTRY[name] = (env_cls, params_cls, dict(configs or {}))
    _SPECS.pop(name, None)


def registered_envs() -> tuple[str, ...]:
    """Names accepted by `make`: the built-ins sorted by name, then the envs
    registered since, in the order of registration."""
    return tuple(_REGISTRY)


def builtin_envs() -> tuple[str, ...]:
    """The built-in envs, sorted by name: one per env module of jaxwarp/envs/
    (`env_modules`), each named as its file. The list every test and tool that
    covers "every env" iterates (there is no other)."""
    names = (m.rpartition(".")[2] for m in env_modules())
    return tuple(n for n in names if n in _REGISTRY)


# The built-ins' pages, in a source checkout (an installed package has no docs/).
BUILTIN_DOCS = Path(jaxwarp.envs.__file__).resolve().parents[2] / "docs" / "envs"


def env_doc(name: str) -> Path | None:
    """The page of a registered env (rules, spaces, rewards, params), or None
    where there is none: ``docs/envs/<name>.md`` for a built-in (in a source
    checkout), else ``<name>.md`` or ``README.md`` in the folder of the env's
    header (``examples/goal_reach/README.md``). None for an env registered
    without a spec (`register_env`)."""
    spec = env_spec(name)
    if spec is None:
        return None
    if name in builtin_envs():
        candidates = [BUILTIN_DOCS / f"{name}.md"]
    else:
        folder = Path(spec.header).resolve().parent
        candidates = [folder / f"{name}.md", folder / "README.md"]
    return next((p for p in candidates if p.is_file()), None)


def env_spec(name: str) -> EnvSpec | None:
    """The `EnvSpec` of a registered env (its hooks: drawing, render fps,
    default training config), or None for an env registered without one
    (`register_env`) or not registered."""
    return _SPECS.get(name) if name in _REGISTRY else None


def registered_env_class(name: str) -> type:
    """The env class `make` builds a registered env with (ValueError: not registered)."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown env {name!r}; registered envs: {registered_envs()}")
    return _REGISTRY[name][0]


def env_configs(name: str) -> tuple[str, ...]:
    """The named configs of a registered env (``make(name, config=...)``)."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown env {name!r}; registered envs: {registered_envs()}")
    return tuple(_REGISTRY[name][2])


def contract_envs() -> tuple[str, ...]:
    """The registered envs built through the authoring contract (their class
    a `ContractEnv`: what ``jaxwarp build`` compiles), in registration order."""
    return tuple(n for n, (cls, _, _) in _REGISTRY.items()
                 if isinstance(cls, type) and issubclass(cls, ContractEnv))


# Installed packages' envs: the entry point group (jaxwarp/plugins.py tells the recipe).
ENV_GROUP = "jaxwarp.envs"
_plugin_groups_loaded: set[str] = set()


class PluginError(ImportError):
    """An entry point could not be loaded or names something of the wrong kind."""


def entry_point_objects(group: str):
    """(name, loaded object, description) of every installed entry point of
    `group`, once per group and process (later calls yield nothing); a
    PluginError names one that fails to load."""
    from importlib.metadata import entry_points

    if group in _plugin_groups_loaded:
        return
    _plugin_groups_loaded.add(group)
    for ep in entry_points(group=group):
        where = f"entry point {ep.name} = {ep.value!r} (group {group!r})"
        try:
            obj = ep.load()
        except Exception as e:  # noqa: BLE001 - named, with the cause
            raise PluginError(f"{where}: cannot load it: {type(e).__name__}: {e}") from None
        yield ep.name, obj, where


def load_env_plugins() -> None:
    """Registers the envs of every installed ``jaxwarp.envs`` entry point: an
    env module (SPEC, ENV), a module that registers itself when imported, or
    an `EnvSpec`."""
    from jaxwarp.authoring import EnvSpec

    for _, obj, where in entry_point_objects(ENV_GROUP):
        if isinstance(obj, ModuleType):
            if hasattr(obj, "SPEC") and hasattr(obj, "ENV") \
                    and getattr(obj.SPEC, "name", None) not in _REGISTRY:
                register_module(obj)
            continue  # else: it registered itself when imported
        if not isinstance(obj, EnvSpec):
            raise PluginError(f"{where}: expected an env module (SPEC, ENV) or an EnvSpec; "
                              f"got {type(obj).__name__}")
        register_spec(obj)


def make(name: str, backend: str = "auto", config: str | None = None, checks: bool = False,
         obs_dtype: Any = "float32", **params: Any):
    """Builds an environment.

    Args:
        name: a name from `registered_envs()`, e.g. "tag_continuous".
        backend: "auto" (cuda if a GPU is present, else cpu), "cuda", "cpu" or "jax".
        config: optional named configuration (e.g. "warpdrive_default", "large");
            `params` override its values.
        checks: report out-of-range actions through `jax.experimental.checkify`.
        obs_dtype: "float32" or "bfloat16" (observations rounded to bf16 as
            they are written: half the bytes, for bf16 policies).
        **params: fields of the env's params dataclass.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, one of {registered_envs()}; got "
                        f"{type(name).__name__} {name!r}")
    if name not in _REGISTRY:
        load_env_plugins()  # installed packages' envs (entry points)
    if name not in _REGISTRY:
        raise ValueError(f"unknown env {name!r}; registered envs: {registered_envs()}. A user "
                         "env is registered by importing its module first: env_module=PATH.py "
                         "(or a module name) on the command line, or an entry point of the "
                         "group 'jaxwarp.envs' (docs/custom_env.md)")
    if config is not None and not isinstance(config, str):
        raise TypeError(f"{name}: config must be a str (a named configuration) or None; got "
                        f"{type(config).__name__} {config!r}")
    if not isinstance(checks, (bool, np.bool_)):
        raise TypeError(f"checks must be True or False; got {type(checks).__name__} {checks!r}")
    env_cls, params_cls, configs = _REGISTRY[name]
    values: dict[str, Any] = {}
    if config is not None:
        if config not in configs:
            raise ValueError(f"unknown config {config!r} for {name}; expected one of "
                             f"{tuple(configs)}")
        values.update(configs[config])
    values.update(params)
    known = {f.name for f in dataclasses.fields(params_cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise TypeError(f"{name}: unknown parameter(s) {unknown}; valid parameters: "
                        f"{sorted(known)}")
    # Types first, so that the params' own range checks (__post_init__) never
    # compare a str or None with a number (an unreadable TypeError).
    # Values as their fields' Python types (np.float32(0.1) -> 0.1, 2 -> 2.0 for
    # a float): every env's checks, the params' hash and repr, and the kernels'
    # Params declarations then see one type per field.
    values = check_values(params_cls, values, name)
    p = params_cls(**values)
    check_params(p, name)  # types and finiteness of every field, for every env
    return env_cls(p, backend=backend, checks=bool(checks), obs_dtype=obs_dtype)
