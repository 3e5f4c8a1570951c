"""Cheap up-front memory checks: refuse a request whose arrays alone cannot fit.

An env's ``reset(key, num_envs)`` allocates its state and observations,
``num_envs`` times a size per env known before anything runs. A mistyped
``num_envs`` (``10**9`` cartpoles: 40 GB) used to fill the host's memory for
minutes before XLA failed; `check_fits` compares the estimate with the memory
that could hold it and raises a one-line ValueError naming the argument.
The bound is generous on purpose (all of the host's RAM, or every device of
the platform together): it refuses only what cannot work, never a size that
might.
"""

from __future__ import annotations

import functools
import os

import jax


@functools.cache
def memory_limit(platform: str) -> int | None:
    """Bytes that arrays of `platform` could use at most: the host's physical
    memory for "cpu"; for a GPU platform, the devices' allocator limits added
    up (``memory_stats()["bytes_limit"]``). None where unknown."""
    if platform == "cpu":
        try:
            return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError, AttributeError):  # no sysconf names (not Linux/macOS)
            return None
    try:
        total = sum(int((d.memory_stats() or {}).get("bytes_limit", 0))
                    for d in jax.devices(platform))
    except RuntimeError:  # no such platform
        return None
    return total or None


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def check_fits(name: str, count: int, bytes_each: int, platform: str, what: str,
               unit: str = "env") -> None:
    """ValueError naming `name` when ``count * bytes_each`` bytes exceed
    `memory_limit` of `platform` (nothing is checked where the limit is unknown).

    Args:
        name: the argument the count comes from (``num_envs``).
        count: its value.
        bytes_each: bytes per unit of the count (lower bound of the need).
        platform: "cpu", "gpu", ... (`jax.devices` platform names).
        what: what the bytes hold, for the message ("the state and observations").
        unit: what one of `count` is, for the message.
    """
    need = count * bytes_each
    limit = memory_limit(platform)
    if limit is not None and need > limit:
        where = "the host's memory" if platform == "cpu" else f"the {platform} devices' memory"
        raise ValueError(f"{name}={count} needs {_gb(need)} for {what} alone ({bytes_each} "
                         f"bytes per {unit}), more than {where} ({_gb(limit)}); use fewer")
