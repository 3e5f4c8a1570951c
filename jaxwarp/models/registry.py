"""Models by name: the config's ``model: <name>`` and the ``jaxwarp.models``
entry points of installed packages."""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from jaxwarp.errors import ConfigError
from jaxwarp.models.mlp import MLPActorCritic, UniformPolicy
from jaxwarp.models.recurrent import GRUActorCritic

ModelFactory = Callable[[Sequence[int], Any], nn.Module]

MODELS: dict[str, ModelFactory] = {
    "mlp": lambda nvec, p: MLPActorCritic(tuple(int(n) for n in nvec), tuple(p.hidden_sizes),
                                          p.activation, p.shared_torso, jnp.dtype(p.dtype)),
    "gru": lambda nvec, p: GRUActorCritic(tuple(int(n) for n in nvec), tuple(p.hidden_sizes),
                                          p.rnn_size, p.activation),
    "uniform": lambda nvec, p: UniformPolicy(tuple(int(n) for n in nvec)),
}


def register_model(name: str, factory: ModelFactory) -> None:
    """Makes `factory(nvec, policy_config) -> nn.Module` available as ``model: name``."""
    MODELS[name] = factory


# Installed packages' models: the entry point group (jaxwarp/plugins.py tells the recipe).
MODEL_GROUP = "jaxwarp.models"


def load_model_plugins() -> None:
    """Registers every installed ``jaxwarp.models`` entry point: a factory,
    under the entry point's name, or a module that calls `register_model`."""
    from jaxwarp.registry import PluginError, entry_point_objects

    for name, obj, where in entry_point_objects(MODEL_GROUP):
        if isinstance(obj, types.ModuleType):
            continue  # it called register_model when imported
        if not callable(obj):
            raise PluginError(f"{where}: expected a model factory (nvec, policy_config) -> "
                              f"flax module; got {type(obj).__name__}")
        register_model(name, obj)


def make_model(name: str, nvec: Sequence[int], policy: Any, group: str) -> nn.Module:
    """The Flax module that the config names for policy group `group`."""
    if name not in MODELS:
        raise ConfigError(f"policies.{group}.model: {name!r} is unknown; expected one of "
                          f"{sorted(MODELS)}. A model of your own is named once registered "
                          "(register_model) by a module imported with env_module=PATH.py, or "
                          "by an entry point of the group 'jaxwarp.models'; from Python, pass "
                          "the flax module via models=... (docs/models.md)")
    return MODELS[name](nvec, policy)
