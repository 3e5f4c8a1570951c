"""Prebuilt env libraries: the built-in envs' FFI libraries shipped in the wheel.

The package build (CMakeLists.txt) compiles every layout in ``ffi/layouts/``
(the generated layout header of a built-in env at its default params, or at a
named config whose layout differs: `jaxwarp.layouts.builtin_layouts`, kept
equal to the generator by tests/test_packaging.py and rewritten by ``python -m
jaxwarp.layouts``) for XLA:CPU and, where nvcc is found, for CUDA
(sm_80, sm_90, sm_100 machine code and compute_100 PTX by default;
``JAXWARP_CUDA_ARCHS`` changes the list). Each library is installed as
``jaxwarp/prebuilt/<env>-<platform>-<digest>/lib<env>_<platform>.so``, where
the digest (`digest`) covers every file it was compiled from: the framework's
headers, the FFI sources, the flags, the env's header and the headers of its
folder that it includes (`env_sources`: ``_mpe.h`` for the MPE envs) and the
layout.

`find` returns the library whose digest matches what `build.compile_library` would
compile now, so a changed header, layout or flag falls back to compiling (and
to the user cache); `build.compile_library` asks it before it looks for a compiler.
``JAXWARP_PREBUILT=0`` turns the prebuilt libraries off. ``manifest.txt``
beside them lists each library with its platform and GPU architectures
(read by ``jaxwarp info``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
from pathlib import Path

from jaxwarp.authoring.codegen import API_DIR, API_HEADERS, FFI_DIR, FFI_SOURCES, LAYOUT_NAME

MANIFEST = "manifest.txt"


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def env_sources(header: Path) -> list[Path]:
    """The env's header and, recursively, every file it includes with
    ``#include "name"`` that lies in the header's folder (``cuda/envs/_mpe.h``
    for the MPE envs; names are looked up in that folder only), in the order
    found. CMakeLists.txt collects the same files for the digest."""
    header = Path(header)
    found, todo = [header], [header]
    while todo:
        for name in _INCLUDE.findall(todo.pop(0).read_text(errors="replace")):
            dep = header.parent / name
            if dep.is_file() and dep not in found:
                found.append(dep)
                todo.append(dep)
    return found


def digest(layout: str, header: Path) -> str:
    """16 hex digits over the sources of an env's library: one line
    ``<file name> <sha256 of its bytes>`` per file (framework headers, flags,
    FFI sources, the env's header and the files of its folder it includes
    (`env_sources`), the layout as env_layout.h), sorted, joined with
    newlines. CMakeLists.txt computes the same digest."""
    files = ([API_DIR / h for h in API_HEADERS] + [API_DIR / "compile_flags.txt"]
             + [FFI_DIR / s for s in FFI_SOURCES] + env_sources(Path(header)))
    lines = [f"{f.name} {hashlib.sha256(f.read_bytes()).hexdigest()}" for f in files]
    lines.append(f"{LAYOUT_NAME} {hashlib.sha256(layout.encode()).hexdigest()}")
    return hashlib.sha256(("\n".join(sorted(lines)) + "\n").encode()).hexdigest()[:16]


def prebuilt_dirs() -> list[Path]:
    """Folders that may hold prebuilt libraries: jaxwarp/prebuilt next to the
    package and, in an editable install (where the compiled files live in
    site-packages), next to the compiled sampler library (jaxwarp/_jaxwarp_cpu.so)."""
    dirs = [Path(__file__).resolve().parent.parent / "prebuilt"]
    try:
        spec = importlib.util.find_spec("jaxwarp._jaxwarp_cpu")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        dirs.append(Path(spec.origin).resolve().parent / "prebuilt")
    return [d for i, d in enumerate(dirs) if d.is_dir() and d not in dirs[:i]]


def manifest() -> list[dict[str, str]]:
    """What the package carries: one dict per prebuilt library or extension
    module (keys: name, folder, platform, archs; archs is "" for cpu), from
    every prebuilt folder's manifest.txt."""
    rows = []
    for d in prebuilt_dirs():
        try:
            text = (d / MANIFEST).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 3 and not line.startswith("#"):
                rows.append({"name": parts[0], "folder": str(d / parts[1]), "platform": parts[2],
                             "archs": parts[3] if len(parts) > 3 else ""})
    return rows


def runs_on(archs: str, arch: int) -> bool:
    """Whether code built for `archs` ("sm_80,sm_90,sm_100,compute_100") runs on
    compute capability `arch` (e.g. 90): machine code of the same major
    version and no newer minor, or PTX of no newer version (JIT-compiled)."""
    for a in archs.split(","):
        m = re.fullmatch(r"(sm|compute)_(\d+)[af]?", a.strip())
        if not m:
            continue
        v = int(m.group(2))
        if m.group(1) == "compute" and v <= arch:
            return True
        if m.group(1) == "sm" and v // 10 == arch // 10 and v <= arch:
            return True
    return False


def find(name: str, header: Path, platform: str, layout: str, arch: int | None = None
         ) -> Path | None:
    """The prebuilt library of env `name` for `platform` compiled from exactly
    these sources (its header, the layout text `layout`, the framework's
    files), or None. For "cuda", `arch` (compute capability, e.g. 90; None:
    unknown) must be one the library was built for."""
    if os.environ.get("JAXWARP_PREBUILT", "1").strip() == "0":
        return None
    try:
        d = digest(layout, header)
    except OSError:
        return None
    folder = f"{name}-{platform}-{d}"
    archs = {Path(r["folder"]).name: r["archs"] for r in manifest()}
    for base in prebuilt_dirs():
        lib = base / folder / f"lib{name}_{platform}.so"
        if not lib.is_file():
            continue
        if platform == "cuda" and arch is not None and not runs_on(archs.get(folder, ""), arch):
            return None
        return lib
    return None
