"""The generated layouts of the built-in envs, which the package prebuilds.

CMakeLists.txt compiles every ``ffi/layouts/<stem>.h`` into the wheel
(`jaxwarp.authoring.prebuilt`): the layout header (`jaxwarp.authoring.
generated_source`) of each built-in env at its default params (stem
``<env>``), at each named config whose layout differs (``<env>.<config>``)
and at each shipped training config's env params whose layout differs
(``<env>.<training config>``: every shipped config trains from the wheel).
tests/test_packaging.py keeps the checked-in files equal to `builtin_layouts`;
``python -m jaxwarp.layouts`` rewrites them. This module sits above the
registry (it reads which envs are built in); the authoring layer below it
knows no env by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jaxwarp.authoring import FFI_DIR, generated_source
from jaxwarp.registry import builtin_envs, contract_envs, env_configs, make


def builtin_layouts() -> dict[str, str]:
    """The layouts the package prebuilds: file stem -> layout text, for every
    built-in env written through the authoring contract, at its default params
    (stem ``<env>``), at each named config whose layout differs from those
    before it (stem ``<env>.<config>``) and at each shipped training config's
    env params whose layout differs again (stem ``<env>.<training config>``),
    so that every shipped config trains from the wheel with no compiler."""
    out: dict[str, str] = {}
    contract = set(contract_envs())
    for name in builtin_envs():  # not the user envs registered in this process
        if name not in contract:
            continue
        seen: set[str] = set()
        for stem, config, params in _variants(name):
            env = make(name, backend="jax", config=config, **params)
            text = generated_source(env.spec, "cpu", env.params)
            if text not in seen:
                seen.add(text)
                out[stem] = text
    return out


def _variants(name: str) -> list[tuple[str, str | None, dict[str, Any]]]:
    """(stem, env config, env params) of env `name`: its defaults, its named
    configs, then the shipped training configs written for it."""
    from jaxwarp.train.config import load_config, shipped_configs

    out: list[tuple[str, str | None, dict[str, Any]]] = [(name, None, {})]
    out += [(f"{name}.{c}", c, {}) for c in sorted(env_configs(name))]
    for shipped in shipped_configs():
        c = load_config(shipped)
        if c.env == name:
            out.append((f"{name}.{shipped}", c.env_config, dict(c.env_params)))
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
