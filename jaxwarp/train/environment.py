"""The run's env from its config, checked before anything compiles.

`env_on_mesh`: the env ``jaxwarp.make`` gives for the config (or the caller's),
a user env's module imported first (``env_module``), its params checked for
types and finiteness, and wrapped in a `ShardedEnv` over the data-parallel
mesh (`mesh.env_mesh`) when the config spreads the envs over devices. Every
bad choice is a `ConfigError` naming the config key.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jax.sharding import Mesh

from jaxwarp import sharding
from jaxwarp.core import resolve_backend
from jaxwarp.params_check import check_params
from jaxwarp.registry import make as make_env
from jaxwarp.train.config import ConfigError, TrainConfig


def env_on_mesh(c: TrainConfig, env: Any, mesh: Mesh | None) -> Any:
    """The config's env (or `env`), checked (`checked_env`), and wrapped in a
    `ShardedEnv` over `mesh` (the config's `mesh.env_mesh`; None: one device)."""
    env = checked_env(c, env)
    if mesh is not None and not isinstance(env, sharding.ShardedEnv):
        env = sharding.ShardedEnv(env, mesh, "envs")
    return env


def checked_env(c: TrainConfig, env: Any = None) -> Any:
    """The config's env (made, its `env_module` imported first) or `env`, with
    the config's env params checked against it."""
    if c.env_module:
        import_env_module(c.env_module)
    if env is None:
        env = _make_env(c)
    _check_env_params(env, c.env)
    return env


def _make_env(c: TrainConfig) -> Any:
    """``jaxwarp.make`` for the config's env; a bad name, env_config, env
    parameter or an unavailable backend is a ConfigError naming it."""
    for key in ("backend", "sampler"):
        choice = getattr(c, key)
        if choice in ("cuda", "cpu"):
            try:
                resolve_backend(choice)
            except RuntimeError as e:
                raise ConfigError(f"{key}={choice}: {e}") from None
    try:
        env = make_env(c.env, backend=c.backend, config=c.env_config, obs_dtype=c.obs_dtype,
                       **dict(c.env_params))
    except (TypeError, ValueError) as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(str(e)) from None  # make's messages name the env and the field
    return env


def _check_env_params(env: Any, name: str) -> None:
    """Types and finiteness of the env's params dataclass (a string or NaN/inf
    where a float belongs gives NaN observations, not an error)."""
    params = getattr(env, "params", None)
    if params is None or not dataclasses.is_dataclass(params) or isinstance(params, type):
        return
    try:
        check_params(params, name)
    except ValueError as e:
        raise ConfigError(f"env_params: {e}") from None


def import_env_module(name: str) -> None:
    """Imports a user env's module (a .py path or a dotted name) so that it
    registers its env with `jaxwarp.register_spec` (or `jaxwarp.register_env`)."""
    import importlib
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(name)
    if name.endswith(".py"):
        if not path.exists():
            raise ConfigError(f"env_module: {name!r} does not exist")
        mod_name = f"jaxwarp_user_{path.stem}"
        if mod_name in sys.modules:
            return
        spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
    else:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ConfigError(f"env_module: cannot import {name!r}: {e}") from None
