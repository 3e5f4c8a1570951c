"""Cross-backend consistency checking.

`check_consistency` steps two backends of one env with the same keys and the
same actions over whole episodes (auto-resets included) and reports the first
place where they disagree: step, field, env, agent, both values.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from jaxwarp.core import episode_length
from jaxwarp.registry import make


@dataclasses.dataclass(frozen=True)
class Mismatch:
    """First disagreement between two backends."""

    step: int  # -1 for the reset, t >= 0 for the (t+1)-th step
    field: str  # "obs", "reward", "done" or "state.<name>"
    env: int
    agent: int | None
    index: tuple[int, ...]  # full index into the field
    value_a: Any
    value_b: Any

    def __str__(self) -> str:
        where = f"env {self.env}" + ("" if self.agent is None else f", agent {self.agent}")
        when = "reset" if self.step < 0 else f"step {self.step}"
        return (f"{when}: {self.field} differs at {where} (index {self.index}): "
                f"{self.value_a!r} vs {self.value_b!r}")


@dataclasses.dataclass(frozen=True)
class ConsistencyReport:
    backends: tuple[str, str]
    num_envs: int
    steps: int  # steps compared
    episodes_finished: int  # done flags seen (auto-resets exercised)
    max_abs_diff: float  # over all float fields compared
    mismatch: Mismatch | None

    @property
    def ok(self) -> bool:
        return self.mismatch is None

    def __str__(self) -> str:
        a, b = self.backends
        head = (f"{a} vs {b}: {self.steps} steps x {self.num_envs} envs, "
                f"{self.episodes_finished} episodes finished, max |diff| {self.max_abs_diff:.3g}")
        return head + (": consistent" if self.ok else f": MISMATCH {self.mismatch}")


def _device_for(backend: str) -> jax.Device | None:
    # The "cpu" backend's FFI targets exist on XLA:CPU only: run it there even
    # when the default device is a GPU.
    return jax.devices("cpu")[0] if backend == "cpu" else None


def _first_mismatch(name, a, b, rtol, atol, step, per_env_axes):
    a = np.asarray(a)
    b = np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return Mismatch(step, name, -1, None, (), f"{a.dtype}{a.shape}", f"{b.dtype}{b.shape}"), 0.0
    if np.issubdtype(a.dtype, np.floating):
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        bad = ~(diff <= atol + rtol * np.abs(b.astype(np.float64)))
        max_diff = float(np.max(diff)) if diff.size else 0.0
    else:
        bad = a != b
        max_diff = 0.0
    if not bad.any():
        return None, max_diff
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    agent = idx[1] if per_env_axes >= 2 and len(idx) >= 2 else None
    return Mismatch(step, name, idx[0], agent, idx, a[idx].item(), b[idx].item()), max_diff


def _put(x, dev):
    """`x` placed on `dev`, or left where it is when `dev` is None (the default device)."""
    return x if dev is None else jax.device_put(x, dev)


def _compare(step, pairs, rtol, atol, max_diff):
    """(first Mismatch over the (name, a, b) pairs or None, running max |a - b| up to it)."""
    for name, a, b in pairs:
        mm, d = _first_mismatch(name, a, b, rtol, atol, step, np.ndim(a))
        max_diff = max(max_diff, d)
        if mm is not None:
            return mm, max_diff
    return None, max_diff


def _state_pairs(sa, sb):
    """("state.<field>", a, b) for each pytree field of the two states, in field order."""
    return [(f"state.{f.name}", getattr(sa, f.name), getattr(sb, f.name))
            for f in dataclasses.fields(sa) if f.metadata.get("pytree_node", True)]


def check_consistency(env: str = "tag_continuous", backends: tuple[str, str] = ("cpu", "jax"),
                      num_envs: int = 4, num_steps: int | None = None, seed: int = 0,
                      rtol: float = 1e-5, atol: float = 1e-6, resync: bool = False,
                      config: str | None = None, **params: Any) -> ConsistencyReport:
    """Steps `env` on two backends with identical keys and actions and compares.

    Args:
        env: registered env name.
        backends: the two backends to compare ("cuda", "cpu", "jax").
        num_envs: env replicas.
        num_steps: steps to run; default two episode lengths (episode_length or
            max_steps) plus 3 steps, so every env finishes and restarts at least once.
        seed: seeds the reset key, the per-step keys and the random actions.
        rtol, atol: float fields pass when |a - b| <= atol + rtol |b|; ints and
            done flags must be equal. rtol=atol=0 demands identical bits.
        resync: start each step of backend b from backend a's state, so that
            rounding differences cannot compound over an episode.
        config, **params: env configuration, as for `jaxwarp.make`.
    """
    envs = [make(env, backend=bk, config=config, **params) for bk in backends]
    if num_steps is None:
        num_steps = 2 * episode_length(envs[0]) + 3
    devices = [_device_for(bk) for bk in backends]

    resets = [jax.jit(e.reset, static_argnums=1) for e in envs]
    steps = [jax.jit(e.step) for e in envs]
    space = envs[0].action_space
    sample = jax.jit(lambda k: space.sample(k, (num_envs, envs[0].num_agents)))

    key = jax.random.key(seed)
    key, k_reset = jax.random.split(key)
    outs = [r(_put(k_reset, d), num_envs) for r, d in zip(resets, devices)]
    states = [o[1] for o in outs]
    finished = 0
    mm, max_diff = _compare(-1, [("obs", outs[0][0], outs[1][0])] + _state_pairs(*states),
                            rtol, atol, 0.0)
    t = 0
    while mm is None and t < num_steps:
        key, k_step, k_act = jax.random.split(key, 3)
        actions = np.asarray(sample(k_act))
        if resync:
            states[1] = jax.tree.map(lambda x: _put(np.asarray(x), devices[1]), states[0])
        res = [st(_put(k_step, d), s, _put(actions, d))
               for st, s, d in zip(steps, states, devices)]
        (oa, sa, ra, da, _), (ob, sb, rb, db, _) = res
        finished += int(np.sum(np.asarray(da)))
        mm, max_diff = _compare(t, [("done", da, db), ("reward", ra, rb), ("obs", oa, ob)]
                                + _state_pairs(sa, sb), rtol, atol, max_diff)
        states = [sa, sb]
        t += 1
    return ConsistencyReport(tuple(backends), num_envs, t, finished, max_diff, mm)
