"""The build layer: compilers, flags, the cache, loading and registration.

`compile_library` takes the library the package carries prebuilt for exactly
these sources (`jaxwarp.authoring.prebuilt`: the built-in envs), else
compiles an env's library, the checked-in ffi/env_ffi.cc with
the env's generated layout header beside it, with the same flags as
jaxwarp's built-ins (cuda/compile_flags.txt) and caches the library in the
user cache directory (`cache_dir`), keyed by the sources, compiler, jaxlib
version and GPU architecture, with a checksum beside it (`_seal`,
`_intact`); `register_targets` loads it and registers its FFI targets;
`launch_layout` asks the library for its launch layout. Nothing is ever
written into the installed package.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jax

from jaxwarp.authoring.codegen import (API_DIR, API_HEADERS, FFI_DIR, FFI_SOURCE, FFI_SOURCES,
                                       LAYOUT_NAME, generated_source)
from jaxwarp.authoring.spec import EnvBuildError, EnvSpec, per_env_words


def cache_dir() -> Path:
    """Where built user envs live: $JAXWARP_CACHE_DIR, else the user cache
    directory ($XDG_CACHE_HOME or ~/.cache)/jaxwarp."""
    if os.environ.get("JAXWARP_CACHE_DIR"):
        return Path(os.environ["JAXWARP_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "jaxwarp"


# Temporary files of a build are named ``<file>.<host>-<pid>.tmp`` (host: a
# digest of the host name, the cache may be shared between machines) and
# renamed into place when whole. A build killed before that (kill -9, power
# loss) leaves its temporary file behind: `_remove_stale_tmp` deletes those of
# dead processes of this host at the next build, and any older than
# _STALE_TMP_S (another host's, or a reused pid's).
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_TMP = re.compile(r"\.(?:([0-9a-f]{8})-)?(\d+)\.tmp$")
_STALE_TMP_S = 24 * 3600


def _tmp_name(path: Path) -> Path:
    """`path`'s temporary name while this process writes it."""
    return path.with_name(f"{path.name}.{_HOST}-{os.getpid()}.tmp")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):  # another user's process, or unknowable
        return True
    return True


def _remove_stale_tmp(root: Path, now: float | None = None) -> list[Path]:
    """Deletes the temporary files of dead builds in the cache folders under
    `root` (``root/*/*.tmp``): those of this host whose process is gone, and
    any (another host's, or from before host names were part of the name)
    older than _STALE_TMP_S. Returns the paths removed; errors are ignored
    (another process may remove the same file)."""
    now = time.time() if now is None else now
    removed = []
    for f in root.glob("*/*.tmp"):
        m = _TMP.search(f.name)
        if m is None:
            continue
        try:
            dead = m.group(1) == _HOST and not _pid_alive(int(m.group(2)))
            if dead or now - f.stat().st_mtime > _STALE_TMP_S:
                f.unlink()
                removed.append(f)
        except OSError:
            continue
    return removed


def _flags(compiler: str) -> tuple[str, ...]:
    """Flags of `compiler` ("cxx" or "nvcc") from cuda/compile_flags.txt, the
    one place they are defined (CMakeLists.txt reads it too)."""
    for line in (API_DIR / "compile_flags.txt").read_text().splitlines():
        if line.startswith(compiler + " "):
            return tuple(line.split()[1:])
    raise EnvBuildError(f"{API_DIR / 'compile_flags.txt'} has no {compiler!r} line")


CXX_FLAGS = _flags("cxx")


def _sanitize_flags() -> list[str]:
    """Extra g++/clang flags of the CPU build from JAXWARP_SANITIZE (e.g.
    ``address,undefined``): the env libraries are built with those
    sanitizers (part of the cache key), any finding aborts. Loading an
    ASan-built library into Python needs the ASan runtime preloaded
    (``LD_PRELOAD=$(g++ -print-file-name=libasan.so)``); tests/test_sanitizers.py
    runs every env that way."""
    kinds = os.environ.get("JAXWARP_SANITIZE", "").strip()
    if not kinds:
        return []
    if not re.fullmatch(r"[a-z]+(,[a-z]+)*", kinds):
        raise EnvBuildError(f"JAXWARP_SANITIZE must be a comma-separated list of sanitizers, "
                            f"e.g. address,undefined; got {kinds!r}")
    # -O0 -g1 (after the -O2 of compile_flags.txt, so it wins): a third of -O2 -g's
    # compile time (the suite builds every env this way), no access optimized
    # away, and line tables enough for a finding to name its header line.
    return [f"-fsanitize={kinds}", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer",
            "-O0", "-g1"]


NVCC_FLAGS = _flags("nvcc")


def find_cxx() -> str:
    for cand in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if cand and shutil.which(cand):
            return shutil.which(cand)  # type: ignore[return-value]
    raise EnvBuildError("no C++ compiler found to build the env for XLA:CPU: install g++ "
                        "(e.g. `apt install g++`) or set CXX to a C++17 compiler")


def _pip_nvccs() -> list[str]:
    """nvcc from NVIDIA's pip wheels (`nvidia-cuda-nvcc`, pulled in by the
    ``cuda13`` extra: ``<site-packages>/nvidia/cu13/bin/nvcc``, its headers in
    ``nvidia/cu13/include``, cudart in ``nvidia/cu13/lib``), newest major
    first, in the order of sys.path."""
    found: list[str] = []
    for entry in sys.path:
        base = Path(entry or ".") / "nvidia"
        try:
            homes = sorted(base.glob("cu[0-9]*"), key=lambda p: -int(p.name[2:] or 0))
        except (OSError, ValueError):
            continue
        found += [str(h / "bin" / "nvcc") for h in homes if (h / "bin" / "nvcc").is_file()]
    return found


def find_nvcc() -> str:
    """nvcc: $NVCC, $CUDA_HOME/bin, $CUDA_PATH/bin, PATH, NVIDIA's pip wheels
    (`_pip_nvccs`), /usr/local/cuda/bin, the first that exists."""
    cands = [os.environ.get("NVCC")]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if home:
            cands.append(os.path.join(home, "bin", "nvcc"))
    cands += [shutil.which("nvcc"), *_pip_nvccs(), "/usr/local/cuda/bin/nvcc"]
    for c in cands:
        if c and os.path.exists(c):
            return c
    raise EnvBuildError("nvcc not found to build the env for CUDA: pip install "
                        "'jaxwarp[cuda13]' (NVIDIA's nvcc wheel), install the CUDA toolkit, "
                        "put nvcc on PATH or set CUDA_HOME (or NVCC); or use backend='cpu' "
                        "or backend='jax'")


def _nvcc_lib_flags(nvcc: str) -> list[str]:
    """Linker path of a pip wheel's nvcc: its nvcc.profile looks for cudart in
    lib64/, the wheels put it in lib/ (nvidia/cu13/lib)."""
    lib = Path(nvcc).resolve().parent.parent / "lib"
    if (lib / "libcudart_static.a").is_file() and not (lib.parent / "lib64").exists():
        return ["-L", str(lib)]
    return []


@functools.cache
def compiler_id(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return path


def gpu_arch() -> str:
    """Compute capability to build for ("90"): $JAXWARP_CUDA_ARCH, else the first GPU's."""
    if os.environ.get("JAXWARP_CUDA_ARCH"):
        return os.environ["JAXWARP_CUDA_ARCH"]
    try:
        cc = jax.devices("gpu")[0].compute_capability
    except (RuntimeError, AttributeError) as e:
        raise EnvBuildError("no CUDA GPU to build for: set JAXWARP_CUDA_ARCH (e.g. 90) to "
                            f"compile without one ({e})") from None
    return str(cc).replace(".", "")


def _readable_errors(text: str, header: Path, generated: Path) -> str:
    """Compiler output with the user's header first; generated-file lines last."""
    lines = text.splitlines()
    mine = [ln for ln in lines if str(header) in ln or header.name in ln]
    rest = [ln for ln in lines if ln not in mine]
    return "\n".join(mine + (["", "(more compiler output:)"] if mine and rest else [])
                     + rest[:60])


def compile_library(spec: EnvSpec, header: Path, platform: str, cubin: bool = False,
                    params: Any = None) -> Path:
    """The env's FFI library for `platform` (or, with cubin=True, the device code
    alone as a CUDA module for PyCUDA), from the cache or freshly compiled."""
    import jaxlib

    src = generated_source(spec, platform, params, header)
    extra = shlex.split(os.environ.get("JAXWARP_NVCC_FLAGS", "")) if platform == "cuda" else []
    if platform == "cpu":
        extra = _sanitize_flags() + shlex.split(os.environ.get("JAXWARP_CXX_FLAGS", ""))
    if not cubin and not extra:
        lib = _prebuilt(spec, header, platform, src)
        if lib is not None:
            return lib
    compiler = find_nvcc() if platform == "cuda" else find_cxx()
    arch = gpu_arch() if platform == "cuda" else ""
    h = hashlib.sha256()
    # Every file the build reads: the framework's headers and FFI sources
    # and, followed recursively, every header the env's header includes
    # (subfolders too).
    sources = _included_files(header, [API_DIR, FFI_DIR, header.parent])
    sources |= {API_DIR / f for f in API_HEADERS} | {API_DIR / "compile_flags.txt"}
    sources |= {FFI_DIR / f for f in FFI_SOURCES}
    files = "".join(str(f) + f.read_text() for f in sorted(sources))
    for part in (src, files, compiler_id(compiler), jaxlib.__version__,
                 arch, sys.platform, " ".join(extra), " ".join(CXX_FLAGS + NVCC_FLAGS)):
        h.update(part.encode())
    digest = h.hexdigest()[:16]
    out_dir = cache_dir() / f"{spec.name}-{platform}-{digest}"
    lib = out_dir / (f"{spec.name}.cubin" if cubin else f"lib{spec.name}_{platform}.so")
    _check_own(cache_dir(), out_dir, lib, lib.with_name(lib.name + ".sha256"))
    if _intact(lib):
        return lib
    gen = out_dir / LAYOUT_NAME
    try:
        # Only the user may write there (`_check_own`), whatever the umask.
        cache_dir().mkdir(mode=0o700, parents=True, exist_ok=True)
        out_dir.mkdir(mode=0o700, exist_ok=True)
        # Written whole or not at all: a concurrent build of the same env
        # compiles from this folder too.
        gen_tmp = _tmp_name(gen)
        gen_tmp.write_text(src)
        os.replace(gen_tmp, gen)
    except OSError as e:
        raise EnvBuildError(f"{spec.name}: cannot write the build cache {out_dir} ({e}); set "
                            "JAXWARP_CACHE_DIR to a writable folder") from None
    _remove_stale_tmp(cache_dir())  # left by builds killed before they finished
    tmp = _tmp_name(lib)
    cmd = compile_command(compiler, platform, out_dir, header, tmp, arch=arch, cubin=cubin,
                          extra=extra + (_nvcc_lib_flags(compiler) if platform == "cuda" else []))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise EnvBuildError(
            f"{spec.name}: compiling {header} for {platform} failed "
            f"({Path(compiler).name}); generated layout: {gen}, compiled through "
            f"{FFI_DIR / FFI_SOURCE}\n"
            + _readable_errors(proc.stderr + proc.stdout, header, gen))
    _seal(tmp, lib)
    return lib


def _check_own(*paths: Path) -> None:
    """EnvBuildError, naming the path and the fix, when one of `paths` (those
    that exist: the cache folder, an env's folder, its library and checksum)
    belongs to another user or others may write it. The checksum says that a
    library is whole, not who wrote it: a library planted in a cache that
    others can write would run as this user. Root's own files are trusted."""
    uid = os.getuid()
    for p in paths:
        try:
            st = os.stat(p)
        except FileNotFoundError:
            continue
        except OSError:  # (unreadable: the build reports it)
            continue
        if st.st_uid not in (uid, 0):
            raise EnvBuildError(f"the build cache {p} belongs to another user (uid {st.st_uid}); "
                                "a library there would run as you: remove it, or set "
                                "JAXWARP_CACHE_DIR to a folder of your own")
        if st.st_mode & 0o022:
            raise EnvBuildError(f"the build cache {p} can be written by others (mode "
                                f"{st.st_mode & 0o777:o}); a library planted there would run "
                                f"as you: chmod go-w {p} (chmod 700 for the folder), or set "
                                "JAXWARP_CACHE_DIR to a folder of your own")


def _prebuilt(spec: EnvSpec, header: Path, platform: str, src: str) -> Path | None:
    """The library the package carries for exactly these sources
    (`prebuilt.find`), for a GPU it runs on; None: compile."""
    from jaxwarp.authoring import prebuilt

    arch = None
    if platform == "cuda":
        try:
            arch = int(gpu_arch())
        except (EnvBuildError, ValueError):
            arch = None
    return prebuilt.find(spec.name, header, platform, src, arch)


def compile_command(compiler: str, platform: str, layout_dir: Path, header: Path, out: Path,
                    arch: str = "", cubin: bool = False, extra: list[str] | None = None
                    ) -> list[str]:
    """The compiler's argv that builds an env's library: ffi/env_ffi.cc, with
    the env's generated layout as ``layout_dir/env_layout.h`` and its header
    found in ``header``'s folder, for `platform` ("cpu": g++, a shared
    library; "cuda": nvcc, a shared library with machine code and PTX for
    `arch`, e.g. "90"; cubin=True: nvcc, the device code alone as a cubin).

    The include path: the framework's headers, the FFI sources, the layout's
    folder, the env header's folder, XLA's FFI headers. The layout's folder
    comes before the header's, so "env_layout.h" is always the generated one.
    """
    includes = ["-I", str(API_DIR), "-I", str(FFI_DIR), "-I", str(layout_dir),
                "-I", str(header.parent), "-I", jax.ffi.include_dir()]
    src = str(FFI_DIR / FFI_SOURCE)
    extra = list(extra or [])
    if cubin:
        return [compiler, *NVCC_FLAGS, "-cubin", f"-arch=sm_{arch}", "-w",
                *extra, *includes, "-x", "cu", src, "-o", str(out)]
    if platform == "cuda":
        return [compiler, *NVCC_FLAGS, "-shared", "-Xcompiler", "-fPIC,-w", "-cudart", "static",
                f"-gencode=arch=compute_{arch},code=[sm_{arch},compute_{arch}]",
                *extra, *includes, "-x", "cu", src, "-o", str(out)]
    return [compiler, *CXX_FLAGS, *extra, "-shared", "-fPIC", "-w", *includes, src, "-o",
            str(out)]


_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def _included_files(header: Path, search: list[Path]) -> set[Path]:
    """`header` and every file it includes with #include "...", recursively:
    each name is looked up next to the including file, then in `search`."""
    seen: set[Path] = set()
    todo = [header.resolve()]
    while todo:
        f = todo.pop()
        if f in seen or not f.is_file():
            continue
        seen.add(f)
        for name in _INCLUDE.findall(f.read_text(errors="replace")):
            for d in [f.parent, *search]:
                cand = (d / name).resolve()
                if cand.is_file():
                    todo.append(cand)
                    break
    return seen


def _seal(tmp: Path, lib: Path) -> None:
    """Moves a fresh build into place with its checksum beside it (written
    first: a library without a matching checksum is never used)."""
    digest = hashlib.sha256(tmp.read_bytes()).hexdigest()
    side = lib.with_name(lib.name + ".sha256")
    side_tmp = _tmp_name(side)
    side_tmp.write_text(digest)
    os.chmod(side_tmp, 0o644)  # not the umask's: others must not write them (`_check_own`)
    os.chmod(tmp, 0o755)
    os.replace(side_tmp, side)
    os.replace(tmp, lib)


def _intact(lib: Path) -> bool:
    """Whether a cached library exists and matches its checksum (a truncated
    or half-copied file would crash the process when loaded)."""
    side = lib.with_name(lib.name + ".sha256")
    try:
        return lib.is_file() and side.read_text().strip() == hashlib.sha256(
            lib.read_bytes()).hexdigest()
    except OSError:
        return False


_REGISTERED: dict[str, Any] = {}


def register_targets(spec: EnvSpec, header: Path, platform: str, params: Any = None) -> str:
    """Builds (or loads from the cache) and registers; returns the target prefix."""
    import ctypes

    lib_path = compile_library(spec, header, platform, params=params)
    prefix = f"jaxwarp_user_{spec.name}_{lib_path.parent.name.rsplit('-', 1)[-1]}"
    if (prefix, platform) not in _REGISTERED:
        lib = ctypes.cdll.LoadLibrary(str(lib_path))
        for kind in ("reset", "step", "rollout"):
            fn = getattr(lib, f"jaxwarp_{spec.name}_{kind}_{platform}")
            jax.ffi.register_ffi_target(f"{prefix}_{kind}_{platform}", jax.ffi.pycapsule(fn),
                                        platform="CUDA" if platform == "cuda" else "cpu")
        _REGISTERED[(prefix, platform)] = lib
    return prefix


class _Layout(__import__("ctypes").Structure):
    """jaxwarp::Layout (cuda/jaxwarp_kernels.h)."""

    _fields_ = [(name, __import__("ctypes").c_int32) for name in
                ("tpe", "epb", "staged", "obs_staged", "words", "scratch_words", "smem_bytes")]


def launch_layout(spec: EnvSpec, params: Any, platform: str, header: Path | None = None
                  ) -> _Layout:
    """The launch layout the built library computes for these params
    (`jaxwarp_<env>_layout`, exported by the library: one implementation)."""
    import ctypes

    prefix = register_targets(spec, Path(header or spec.header).resolve(), platform, params)
    lib = _REGISTERED[(prefix, platform)]
    per_env = per_env_words(spec, params)
    out = _Layout()
    fn = getattr(lib, f"jaxwarp_{spec.name}_layout")
    fn(ctypes.c_int32(int(spec.num_agents(params))), ctypes.c_int32(int(spec.obs_dim(params))),
       per_env.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), ctypes.byref(out))
    return out

