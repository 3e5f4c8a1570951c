"""Loads jaxwarp's compiled FFI libraries and registers their targets, once.

`_jaxwarp_cpu` (XLA:CPU handlers) is always built; `_jaxwarp_cuda` exists when
the package was built with nvcc. Both import on any host (the CUDA runtime is
linked statically), so importing jaxwarp never needs a GPU.
"""

from __future__ import annotations

import functools
import importlib

import jax


def _load(name: str):
    try:
        return importlib.import_module(f"jaxwarp.{name}")
    except ImportError:
        return None


_cpu_lib = _load("_jaxwarp_cpu")
_cuda_lib = _load("_jaxwarp_cuda")

# Platform strings are case-sensitive in jax.ffi: "cpu" and "CUDA".
if _cpu_lib is not None:
    for _name, _capsule in _cpu_lib.registrations().items():
        jax.ffi.register_ffi_target(_name, _capsule, platform="cpu")
if _cuda_lib is not None:
    for _name, _capsule in _cuda_lib.registrations().items():
        jax.ffi.register_ffi_target(_name, _capsule, platform="CUDA")


def has_cpu_library() -> bool:
    """Whether the XLA:CPU handlers were built and loaded."""
    return _cpu_lib is not None


def has_cuda_library() -> bool:
    """Whether the CUDA handlers were built and loaded."""
    return _cuda_lib is not None


@functools.cache
def gpu_available() -> bool:
    """Whether JAX sees a CUDA GPU and jaxwarp's CUDA library is loaded."""
    if _cuda_lib is None:
        return False
    try:
        return any(d.platform == "gpu" for d in jax.devices("gpu"))
    except RuntimeError:
        return False
