"""Generic type and finiteness check of an env's params dataclass.

Env params are static under jit and reach the kernels as attributes: a
string where a float belongs, or a NaN/inf reward or bound, is not caught by
the compiler and turns into NaN observations at run time. `check_params`
rejects such values by the field's annotation (or, where that cannot be
resolved, by the type of its default).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import types
import typing
from typing import Any

__all__ = ["check_params"]


def _kind(annotation: Any, default: Any) -> tuple[type | None, bool]:
    """(float | int | bool | None, None allowed) of one field."""
    optional = False
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        annotation = args[0] if len(args) == 1 else None
    if annotation in (bool, int, float):
        return annotation, optional
    if annotation is None or isinstance(annotation, str):  # unresolved: use the default
        for t in (bool, int, float):
            if type(default) is t:
                return t, optional
    return None, optional


def check_params(params: Any, name: str | None = None) -> None:
    """Checks every float, int and bool field of an env's params dataclass.

    float fields: a finite real number (an int is accepted; bool is not);
    int fields: an integer (not a bool, not a float); bool fields: a bool.
    A field annotated ``T | None`` also accepts None. Other fields are not
    checked.

    Args:
        params: a dataclass instance (the env's ``Params``).
        name: the env's name for the message (default: the class name).

    Raises:
        ValueError: naming the field and the value, e.g.
            ``cartpole: gravity='9.8' is invalid; expected a finite number``.
    """
    if not dataclasses.is_dataclass(params) or isinstance(params, type):
        raise TypeError(f"check_params: expected a dataclass instance; got {params!r}")
    where = name or type(params).__name__
    try:
        hints = typing.get_type_hints(type(params))
    except Exception:  # noqa: BLE001  (unresolvable forward references: use defaults)
        hints = {}
    for f in dataclasses.fields(params):
        default = f.default if f.default is not dataclasses.MISSING else None
        kind, optional = _kind(hints.get(f.name, f.type), default)
        if kind is None:
            continue
        v = getattr(params, f.name)
        if v is None and optional:
            continue
        is_bool = isinstance(v, bool) or type(v).__name__ == "bool_"  # numpy bool
        if kind is bool:
            ok, what = is_bool, "true or false"
        elif kind is int:
            ok, what = isinstance(v, numbers.Integral) and not is_bool, "an integer"
        else:
            ok = (isinstance(v, numbers.Real) and not is_bool
                  and math.isfinite(float(v)))
            what = "a finite number"
        if not ok:
            if optional:
                what += " or None"
            raise ValueError(f"{where}: {f.name}={v!r} is invalid; expected {what}")
