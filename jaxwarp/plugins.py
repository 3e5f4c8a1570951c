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

from jaxwarp.models import MODEL_GROUP, load_model_plugins
from jaxwarp.registry import ENV_GROUP, PluginError, load_env_plugins

__all__ = ["ENV_GROUP", "MODEL_GROUP", "PluginError", "load_plugins"]


def load_plugins(groups: tuple[str, ...] = (ENV_GROUP, MODEL_GROUP)) -> None:
    """Loads and registers every installed entry point of `groups`, once per
    group and process (envs: `jaxwarp.registry`, models: `jaxwarp.models`,
    which own their groups). Raises PluginError naming the entry point that fails."""
    if ENV_GROUP in groups:
        load_env_plugins()
    if MODEL_GROUP in groups:
        load_model_plugins()
