"""``jaxwarp envs``: one line per registered env.

`env_rows` gives each env's name, agents (at its default params), the
backends that run it on this machine and a one-line description (the first
paragraph of its module's docstring); `format_env_rows` prints them as a
table. A backend marked ``*`` has no prebuilt library for the env's default
params here: its first use compiles one (C++ compiler or nvcc), then caches it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def env_rows() -> list[dict[str, Any]]:
    """One dict per registered env (`registry.registered_envs` order): name,
    agents (int or None), backends (list of str), description."""
    from jaxwarp import registry

    rows = []
    for name in registry.registered_envs():
        spec = registry.env_spec(name)
        env_cls = registry.registered_env_class(name)
        rows.append({
            "name": name,
            "agents": spec.num_agents(spec.params_type()) if spec is not None else None,
            "backends": _backends(spec) if spec is not None else [],
            "description": describe((spec.params_type if spec is not None else env_cls)
                                    .__module__),
        })
    return rows


def describe(module_name: str) -> str:
    """The first paragraph of a module's docstring on one line ("" without one)."""
    doc = getattr(sys.modules.get(module_name), "__doc__", None) or ""
    return " ".join(doc.strip().split("\n\n")[0].split())


def _backends(spec: Any) -> list[str]:
    """The backends that run the env on this machine, fastest first: cuda (a
    GPU and jaxwarp's CUDA library), cpu, then the pure-JAX reference; ``*``
    where the library for its default params is not prebuilt but a compiler
    is found to build it."""
    from jaxwarp import _ffi
    from jaxwarp.authoring import build, generated_source, prebuilt
    from jaxwarp.authoring.spec import EnvBuildError

    header = Path(spec.header)
    platforms = [("cuda", build.find_nvcc)] if _ffi.gpu_available() else []
    out = []
    for platform, find_compiler in [*platforms, ("cpu", build.find_cxx)]:
        try:
            src = generated_source(spec, platform, header=header)
            arch = int(build.gpu_arch()) if platform == "cuda" else None
            if prebuilt.find(spec.name, header, platform, src, arch) is not None:
                out.append(platform)
                continue
            find_compiler()
            out.append(f"{platform}*")
        except (EnvBuildError, OSError, ValueError):
            continue
    return [*out, "jax"]


def format_env_rows(rows: list[dict[str, Any]]) -> str:
    """The table `jaxwarp envs` prints: a header, one line per env, and notes
    on ``*`` and a missing GPU."""
    from jaxwarp import _ffi

    table = [("env", "agents", "backends", "description")]
    table += [(r["name"], "?" if r["agents"] is None else str(r["agents"]),
               " ".join(r["backends"]) or "?", r["description"]) for r in rows]
    w = [max(len(t[i]) for t in table) for i in range(3)]
    lines = [f"{n:{w[0]}}  {a:>{w[1]}}  {b:{w[2]}}  {d}".rstrip() for n, a, b, d in table]
    if any("*" in b for r in rows for b in r["backends"]):
        lines.append("* not prebuilt for the default params: the first use compiles it "
                     "(then it is cached; jaxwarp build ENV does it ahead)")
    if not _ffi.gpu_available():
        lines.append("cuda: not listed, no CUDA GPU visible to JAX here")
    return "\n".join(lines)
