"""jaxwarp: multi-agent RL environments as CUDA kernels inside jitted JAX programs.

The names below are imported on first use (PEP 562), not with the package:
``import jaxwarp.cli`` (the ``jaxwarp`` command) loads no jax, numpy or env,
so that the command handles Ctrl-C from its first line on (the heavy imports
run inside ``cli.main``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["make", "register_env", "register_spec", "build_env", "registered_envs",
           "sample_actions", "spaces",
           "testing", "gpu_available"]

# name -> (module, attribute; None: the module itself)
_LAZY = {
    "make": ("jaxwarp.registry", "make"),
    "register_env": ("jaxwarp.registry", "register_env"),
    "register_spec": ("jaxwarp.registry", "register_spec"),
    "registered_envs": ("jaxwarp.registry", "registered_envs"),
    "build_env": ("jaxwarp.authoring", "build_env"),
    "sample_actions": ("jaxwarp.sampler", "sample_actions"),
    "gpu_available": ("jaxwarp._ffi", "gpu_available"),
    "spaces": ("jaxwarp.spaces", None),
    "testing": ("jaxwarp.testing", None),
}

if TYPE_CHECKING:
    from jaxwarp import _ffi, spaces, testing
    from jaxwarp._ffi import gpu_available
    from jaxwarp.authoring import build_env
    from jaxwarp.registry import make, register_env, register_spec, registered_envs
    from jaxwarp.sampler import sample_actions


def __getattr__(name: str) -> Any:
    """The public names above, and any submodule (``jaxwarp.render``), on first use."""
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = importlib.import_module(module)
        value = value if attr is None else getattr(value, attr)
    elif not name.startswith("__"):
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
