"""Envs and models from other packages: Python entry points.

A package makes its envs and models known to jaxwarp (``jaxwarp train
env=NAME``, ``policies.G.model=NAME``, ``jaxwarp.make(NAME)``) without any
flag by declaring entry points, the ecosystem's plugin convention
(``pyproject.toml``)::

    [project.entry-points."jaxwarp.envs"]
    goal_reach = "my_package.goal_reach"          # an env module (SPEC, ENV), or
    # goal_reach = "my_package.goal_reach:SPEC"   # its EnvSpec

    [project.entry-points."jaxwarp.models"]
    my_mlp = "my_package.models:make_my_mlp"      # factory(nvec, policy_config) -> nn.Module

An ``jaxwarp.envs`` entry point names an env module that follows the built-ins'
recipe (``SPEC``, ``ENV``, optional ``CONFIGS``; registered with
`jaxwarp.registry.register_module`), a module that registers its env itself
when imported, or an `EnvSpec`. A ``jaxwarp.models`` entry point names a model
factory, registered under the entry point's name (`register_model`), or a
module that calls `register_model` when imported.

Nothing is imported when jaxwarp is: the groups are loaded once, the first
time a name is not found (`jaxwarp.make`) or a CLI command starts
(`load_plugins`). Without installing a package, ``env_module=PATH_OR_MODULE``
imports one module first (docs/models.md).
"""

from __future__ import annotations

from types import ModuleType

__all__ = ["ENV_GROUP", "MODEL_GROUP", "PluginError", "load_plugins"]

ENV_GROUP = "jaxwarp.envs"
MODEL_GROUP = "jaxwarp.models"

_loaded: set[str] = set()


class PluginError(ImportError):
    """An entry point could not be loaded or names something of the wrong kind."""


def _register_env(name: str, obj: object, where: str) -> None:
    from jaxwarp.authoring import EnvSpec
    from jaxwarp.registry import _REGISTRY, register_module, register_spec

    if isinstance(obj, ModuleType):
        if hasattr(obj, "SPEC") and hasattr(obj, "ENV") \
                and getattr(obj.SPEC, "name", None) not in _REGISTRY:
            register_module(obj)
        return  # else: it registered itself when imported
    if isinstance(obj, EnvSpec):
        register_spec(obj)
        return
    raise PluginError(f"{where}: expected an env module (SPEC, ENV) or an EnvSpec; got "
                      f"{type(obj).__name__}")


def _register_model(name: str, obj: object, where: str) -> None:
    from jaxwarp.train.models import register_model

    if isinstance(obj, ModuleType):
        return  # it called register_model when imported
    if not callable(obj):
        raise PluginError(f"{where}: expected a model factory (nvec, policy_config) -> "
                          f"flax module; got {type(obj).__name__}")
    register_model(name, obj)


def load_plugins(groups: tuple[str, ...] = (ENV_GROUP, MODEL_GROUP)) -> None:
    """Loads and registers every installed entry point of `groups`, once per
    group and process. Raises PluginError naming the entry point that fails."""
    from importlib.metadata import entry_points

    for group in groups:
        if group in _loaded:
            continue
        _loaded.add(group)
        register = _register_env if group == ENV_GROUP else _register_model
        for ep in entry_points(group=group):
            where = f"entry point {ep.name} = {ep.value!r} (group {group!r})"
            try:
                obj = ep.load()
            except Exception as e:  # noqa: BLE001 - named, with the cause
                raise PluginError(f"{where}: cannot load it: {type(e).__name__}: {e}") \
                    from None
            register(ep.name, obj, where)
