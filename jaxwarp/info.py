"""What a bug report needs: ``jaxwarp info``.

`report()` gathers the versions (jaxwarp, Python, jax, jaxlib), the devices
JAX sees, jaxwarp's backends, the prebuilt libraries the package carries with
their GPU architectures (`jaxwarp.authoring.prebuilt`), which of the `mlp`
model's GPU kernels can run here, the compilers a user
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
        "imported from": package_origin(Path(jaxwarp.__file__).parent),
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": platform.platform(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "devices": devices,
        "backends": backends,
        "prebuilt": libs or ["none (built-in envs compile at first use)"],
        "model kernels": model_kernels(),
        "c++ compiler": _compiler(build.find_cxx),
        "nvcc": _compiler(build.find_nvcc),
        "cache": str(build.cache_dir()),
    }


def model_kernels() -> list[str]:
    """Which of the `mlp` model's GPU kernels this process can run, or why not
    (docs/models.md, "The fused layers")."""
    from jaxwarp.models import mlp_kernel, mlp_mosaic

    why_triton = mlp_kernel.cannot_lower()
    triton = "on a CUDA GPU" if why_triton is None else f"not here ({why_triton})"
    why = mlp_mosaic.why_not_here()
    hopper = "on a Hopper GPU" if why is None else f"not here ({why})"
    return [f"fused layers (Pallas, Triton): {triton}",
            f"the rollout's forward (Pallas, Mosaic GPU): {hopper}",
            f"PPO minibatch steps of 64-wide bf16 models (Pallas, Mosaic GPU): {hopper}"]


def package_origin(package: Path) -> str:
    """Where the imported jaxwarp package comes from: a source checkout (a
    ``.git`` or ``pyproject.toml`` beside the package: run from a clone's root,
    Python imports the clone, not the installed wheel) or an installed package;
    and, for a checkout, the installed jaxwarp where it is another one."""
    package = package.resolve()
    root = package.parent
    marks = [m for m in (".git", "pyproject.toml") if (root / m).exists()]
    if not marks:
        return f"an installed package ({package})"
    text = f"the source checkout {root} ({' and '.join(marks)} beside the package)"
    installed = installed_jaxwarp()
    if installed is None:
        return f"{text}; no jaxwarp installed"
    version, editable_from, folder = installed
    if editable_from is not None and editable_from.resolve() == root:
        return f"{text}, installed editable (jaxwarp {version})"
    where = f"editable from {editable_from}" if editable_from is not None else \
        f"in {folder}" if folder is not None else None
    if where is None or (folder is not None and folder == package):
        return text
    return (f"{text}; not the installed jaxwarp {version} ({where}): Python finds this folder "
            "first (the current directory or PYTHONPATH); run from elsewhere to use that one")


def installed_jaxwarp() -> tuple[str, Path | None, Path | None] | None:
    """The installed jaxwarp distribution as (version, the folder an editable
    install points at or None, its package folder or None), or None."""
    import json
    from importlib.metadata import PackageNotFoundError, distribution
    from urllib.parse import unquote, urlparse

    try:
        dist = distribution("jaxwarp")
    except PackageNotFoundError:
        return None
    editable = None
    try:
        url = json.loads(dist.read_text("direct_url.json") or "{}")
        if url.get("dir_info", {}).get("editable"):
            editable = Path(unquote(urlparse(url["url"]).path))
    except (ValueError, AttributeError, KeyError, TypeError):
        pass
    init = Path(str(dist.locate_file("jaxwarp/__init__.py")))
    return dist.version, editable, init.parent.resolve() if init.is_file() else None


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
