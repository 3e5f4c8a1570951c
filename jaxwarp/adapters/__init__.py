"""Host-side adapters: jaxwarp envs for code that trains outside JAX.

* `jaxwarp.adapters.gymnasium`: `JaxwarpVectorEnv` (``gymnasium.vector.VectorEnv``,
  NumPy in and out), `make_vec`;
* `jaxwarp.adapters.pettingzoo`: `JaxwarpParallelEnv` (``pettingzoo.ParallelEnv``,
  dicts keyed by agent name), `parallel_env`;
* `jaxwarp.adapters.torch`: `TorchVectorEnv` (torch tensors in and out through
  DLPack, on the env's device).

Each step is one jitted call; the env state stays on the device. Importing
this package imports none of gymnasium, pettingzoo or torch: each submodule
imports its own when it (or one of the names below) is first used.
See docs/adapters.md.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "JaxwarpVectorEnv": "gymnasium",
    "make_vec": "gymnasium",
    "JaxwarpParallelEnv": "pettingzoo",
    "parallel_env": "pettingzoo",
    "TorchVectorEnv": "torch",
}
__all__ = ["JaxwarpParallelEnv", "JaxwarpVectorEnv", "TorchVectorEnv", "make_vec", "parallel_env"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        try:
            module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
        except ImportError as e:
            # AttributeError, not ImportError: hasattr(), dir()-based tools and
            # inspect.getmembers must see a missing optional framework as a
            # missing attribute. The import error stays chained (and named).
            raise AttributeError(
                f"module {__name__!r} has no attribute {name!r}: it needs the optional "
                f"package {_LAZY[name]!r}, whose import failed ({type(e).__name__}: {e})"
            ) from e
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
