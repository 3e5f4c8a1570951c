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
import reprlib
import types
import typing
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["check_num_envs", "check_params", "check_values", "quoted"]


# What the kernels receive (authoring.kernel_param_values): float32 and int32
# attributes. A finite float64 beyond float32's range becomes inf there, one
# below its smallest normal number is flushed to zero by XLA (and by the GPU
# where it flushes denormals), and an int beyond int32 overflows when packed:
# all rejected here, with the field's name, instead of failing later.
_F32_MAX = float(np.finfo(np.float32).max)
_F32_TINY = float(np.finfo(np.float32).tiny)
_I32 = (-2**31, 2**31)
_U32_MAX = 2**32  # fields named "...seed" may hold any uint32 (key words)


# What an error message quotes of one value, at most: a value from a config
# (env_params) can be huge, the message must not be.
QUOTE_LIMIT = 200
_REPR = reprlib.Repr()  # (keyword arguments only from Python 3.12)
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, 80, 80, 60
_REPR.maxdict = _REPR.maxlist = _REPR.maxtuple = _REPR.maxset = 8


def quoted(value: Any, limit: int = QUOTE_LIMIT) -> str:
    """repr(value) for an error message, bounded in time and length: reprlib
    abbreviates containers (8 items, 3 levels) and long strings and ints,
    then the text is cut to `limit` characters with ``...``."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


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


def _field_kinds(params_type: type) -> dict[str, tuple[type | None, bool]]:
    """name -> (kind, optional) of every field of a params dataclass."""
    try:
        hints = typing.get_type_hints(params_type)
    except Exception:  # noqa: BLE001  (unresolvable forward references: use defaults)
        hints = {}
    out = {}
    for f in dataclasses.fields(params_type):
        default = f.default if f.default is not dataclasses.MISSING else None
        out[f.name] = _kind(hints.get(f.name, f.type), default)
    return out


def _is_bool(v: Any) -> bool:
    return isinstance(v, (bool, np.bool_))


def _invalid(kind: type, name: str, v: Any) -> str | None:
    """What `v` should have been for a field of this kind, or None if it is valid."""
    if kind is bool:
        return None if _is_bool(v) else "true or false"
    if kind is int:
        if not isinstance(v, numbers.Integral) or _is_bool(v):
            return "an integer"
        if name.endswith("seed"):
            return None if _I32[0] <= v < _U32_MAX else "an integer in [-2**31, 2**32)"
        return None if _I32[0] <= v < _I32[1] else "an integer in [-2**31, 2**31) (int32)"
    if not isinstance(v, numbers.Real) or _is_bool(v):
        return "a finite number"
    try:
        x = abs(float(v))
    except (OverflowError, ValueError, TypeError):  # e.g. 10**400
        x = math.inf
    if not math.isfinite(x):
        return "a finite number"
    if x > _F32_MAX or 0 < x < _F32_TINY:
        return "a finite number within float32's normal range (0 or 1.2e-38 <= |x| <= 3.4e38)"
    return None


def _check_value(where: str, name: str, kind: type, optional: bool, v: Any) -> None:
    if v is None and optional:
        return
    what = _invalid(kind, name, v)
    if what is not None:
        if optional:
            what += " or None"
        raise ValueError(f"{where}: {name}={quoted(v)} is invalid; expected {what}")


def check_values(params_type: type, values: Mapping[str, Any], name: str | None = None
                 ) -> dict[str, Any]:
    """`check_params` for some fields' values before the dataclass is built
    (its ``__post_init__`` range checks then see values of the right type).

    Returns the values as the Python type of their field: a float field's int
    or NumPy value as a float (a user env's kernel declares its Params members
    from the values' types: ``2`` for a float would make an int32 member),
    an int or bool field's NumPy value as an int or bool. Names that are not
    fields are passed through (left to the caller), NumPy scalars as Python ones.
    """
    where = name or params_type.__name__
    kinds = _field_kinds(params_type)
    out = {}
    for k, v in values.items():
        kind, optional = kinds.get(k, (None, False))
        if kind is not None:
            _check_value(where, k, kind, optional, v)
            if v is not None:
                v = kind(v)
        elif isinstance(v, np.generic):
            v = v.item()
        out[k] = v
    return out


def check_params(params: Any, name: str | None = None) -> None:
    """Checks every float, int and bool field of an env's params dataclass.

    float fields: a finite real number that float32 holds as a normal number
    or zero (an int is accepted; bool is not); int fields: an integer (not a
    bool, not a float) in int32's range (fields named ``...seed``: in
    ``[-2**31, 2**32)``, a uint32 key word); bool fields: a bool. A field
    annotated ``T | None`` also accepts None. Other fields are not checked.

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
    for fname, (kind, optional) in _field_kinds(type(params)).items():
        if kind is not None:
            _check_value(where, fname, kind, optional, getattr(params, fname))


def check_num_envs(num_envs: Any) -> int:
    """num_envs as an int, or a ValueError saying what it must be: a positive
    Python int, static under `jax.jit` (it sets the arrays' shapes)."""
    if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) \
            or num_envs < 1:
        import jax

        if isinstance(num_envs, jax.core.Tracer):
            raise ValueError(
                f"num_envs must be a static Python int (it sets the arrays' shapes); under "
                f"jax.jit mark it static (static_argnums, e.g. jax.jit(env.reset, "
                f"static_argnums=1)); got {type(num_envs).__name__} {num_envs}")
        raise ValueError(f"num_envs must be a positive int; got {num_envs!r}")
    return int(num_envs)
