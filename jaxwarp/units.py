"""Throughput as jaxwarp prints it: env-steps/s and agent-steps/s, and the device.

An env-step is one step of one env with all its agents; an agent-step is one
agent's step (env-steps x agents per env). Peers count differently:
PufferLib's steps per second count agent-steps; WarpDrive's paper reports
environment steps (2.9 M/s at 2,000 envs x 1,000 agents, i.e. 2.9 G
agent-steps/s); EnvPool, gymnax and JaxMARL count env-steps. A comparison
names the unit of both sides.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def device_name(devices: Sequence[Any] | None = None) -> str:
    """The devices a run used, for a throughput line: ``"NVIDIA H100 80GB
    HBM3"``, ``"2 x NVIDIA H200"``, ``"cpu"`` (jax's device_kind; default: the
    default backend's devices)."""
    if devices is None:
        import jax

        devices = jax.devices()
    kinds = [str(getattr(d, "device_kind", None) or getattr(d, "platform", d)) for d in devices]
    if not kinds:
        return "no device"
    names = sorted(set(kinds))
    if len(names) == 1:
        return names[0] if len(kinds) == 1 else f"{len(kinds)} x {names[0]}"
    return ", ".join(f"{kinds.count(n)} x {n}" for n in names)


def si(value: float) -> str:
    """3 significant digits with K, M or G: 1.23M, 456K, 9.80G."""
    if value is None or not math.isfinite(value):
        return "n/a"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= div:
            return f"{value / div:.3g}{suffix}"
    return f"{value:.3g}"


def rate_text(env_steps_per_s: float, agents_per_env: int | None,
              device: str | None = None) -> str:
    """``"1.23M env-steps/s (135M agent-steps/s) on NVIDIA H100 80GB HBM3"``;
    no agent count: env-steps only; no timed steps (NaN): says so."""
    if env_steps_per_s is None or not math.isfinite(env_steps_per_s):
        text = "no steps timed"
    else:
        text = f"{si(env_steps_per_s)} env-steps/s"
        if agents_per_env:
            text += f" ({si(env_steps_per_s * agents_per_env)} agent-steps/s)"
    return text + (f" on {device}" if device else "")
