"""What a bug report needs: ``jaxwarp info``.

`report()` gathers the versions (jaxwarp, Python, jax, jaxlib), the devices
JAX sees, jaxwarp's backends, the prebuilt libraries the package carries with
their GPU architectures (`jaxwarp.authoring.prebuilt`), the compilers a user
env would be built with, and the cache folder; `format_report` prints it as
``key: value`` lines.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path
from typing import Any


def _compiler(find) -> str:
    from jaxwarp.authoring.build import compiler_id
    from jaxwarp.authoring.spec import EnvBuildError

    try:
        path = find()
    except EnvBuildError:
        return "none found"
    version = next((ln for ln in reversed(compiler_id(path).splitlines())
                    if ln.strip() and "release" in ln.lower()), None)
    version = version or (compiler_id(path).splitlines() or [""])[0]
    return f"{path} ({version.strip()})" if version.strip() else path


def report() -> dict[str, Any]:
    """Everything ``jaxwarp info`` prints, as a dict of strings and lists."""
    import jax
    import jaxlib

    import jaxwarp
    from jaxwarp import _ffi
    from jaxwarp.authoring import build, prebuilt

    try:
        devices = [f"{d.platform}:{d.id} {getattr(d, 'device_kind', '')}".strip()
                   for d in jax.devices()]
    except RuntimeError as e:
        devices = [f"none ({e})"]
    backends = ["jax (pure-JAX reference)"]
    if _ffi.has_cpu_library():
        backends.append("cpu (XLA:CPU library loaded)")
    if _ffi.gpu_available():
        backends.append("cuda (CUDA library loaded, GPU present)")
    elif _ffi.has_cuda_library():
        backends.append("cuda library loaded, but JAX sees no GPU")
    libs = []
    for row in prebuilt.manifest():
        archs = f" [{row['archs']}]" if row["archs"] else ""
        env = "" if row["name"].startswith("_") else f" ({_params_of(row['name'])})"
        libs.append(f"{row['name']} {row['platform']}{archs}{env}")
    return {
        "jaxwarp": f"{jaxwarp.__version__} ({Path(jaxwarp.__file__).parent})",
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": platform.platform(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "devices": devices,
        "backends": backends,
        "prebuilt": libs or ["none (built-in envs compile at first use)"],
        "c++ compiler": _compiler(build.find_cxx),
        "nvcc": _compiler(build.find_nvcc),
        "cache": str(build.cache_dir()),
    }


def format_report(info: dict[str, Any]) -> str:
    """``key: value`` lines; lists as indented lines under their key."""
    lines = []
    for key, value in info.items():
        if isinstance(value, list):
            lines.append(f"{key}:")
            lines += [f"  {v}" for v in value]
        else:
            lines.append(f"{key}: {value}")
    return "\n".join(lines)


def _params_of(stem: str) -> str:
    """Which params a prebuilt layout's stem stands for (`jaxwarp.layouts`)."""
    env, _, variant = stem.partition(".")
    if not variant:
        return "default params"
    from jaxwarp.registry import env_configs

    try:
        if variant in env_configs(env):
            return f"env config {variant}"
    except (KeyError, ValueError):
        pass
    return f"env params of the training config {variant}"
