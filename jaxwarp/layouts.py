"""The generated layouts of the built-in envs, which the package prebuilds.

CMakeLists.txt compiles every ``ffi/layouts/<stem>.h`` into the wheel
(`jaxwarp.authoring.prebuilt`): the layout header (`jaxwarp.authoring.
generated_source`) of each built-in env at its default params (stem
``<env>``) and at each named config whose layout differs (``<env>.<config>``).
tests/test_packaging.py keeps the checked-in files equal to `builtin_layouts`;
``python -m jaxwarp.layouts`` rewrites them. This module sits above the
registry (it reads which envs are built in); the authoring layer below it
knows no env by name.
"""

from __future__ import annotations

from pathlib import Path

from jaxwarp.authoring import FFI_DIR, generated_source
from jaxwarp.registry import builtin_envs, contract_envs, env_configs, make


def builtin_layouts() -> dict[str, str]:
    """The layouts the package prebuilds: file stem -> layout text, for every
    built-in env written through the authoring contract, at its default params
    (stem ``<env>``) and at each named config whose layout differs from those
    before it (stem ``<env>.<config>``)."""
    out: dict[str, str] = {}
    contract = set(contract_envs())
    for name in builtin_envs():  # not the user envs registered in this process
        if name not in contract:
            continue
        seen: set[str] = set()
        for config in [None, *sorted(env_configs(name))]:
            env = make(name, backend="jax", config=config)
            text = generated_source(env.spec, "cpu", env.params)
            if text not in seen:
                seen.add(text)
                out[name if config is None else f"{name}.{config}"] = text
    return out


def write_layouts(folder: Path) -> list[Path]:
    """Writes `builtin_layouts` as folder/<stem>.h (and removes stale ones)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    layouts = builtin_layouts()
    for old in folder.glob("*.h"):
        if old.stem not in layouts:
            old.unlink()
    paths = []
    for stem, text in layouts.items():
        (folder / f"{stem}.h").write_text(text)
        paths.append(folder / f"{stem}.h")
    return paths


if __name__ == "__main__":  # python -m jaxwarp.layouts [FOLDER]
    import sys

    target = Path(sys.argv[1]) if len(sys.argv) > 1 else FFI_DIR / "layouts"
    for p in write_layouts(target):
        print(p)
