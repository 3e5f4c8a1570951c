"""MPE simple_spread (JaxMARL's simple_spread_v3): agents spread out to cover landmarks.

Its params, pure-JAX reference, spec and env (discrete actions). N agents cover
L landmarks while avoiding each other. The kernel is
``cuda/envs/mpe_simple_spread.h``; the physics, the state and the episode
length (param ``truncation``) that both MPE envs share are in
`jaxwarp/envs/_mpe.py`.

| mpe_simple_spread | |
|---|---|
| observation (f32[envs, N, 4 + 2 L + 4 (N - 1)]) | vel, pos, landmark - pos (L), other agent - pos (N - 1, by index), comm (2 (N - 1) zeros) |
| action (i32[envs, N, 1]) | 0 no-op, 1 left, 2 right, 3 down, 4 up |
| reward | ``local_ratio * -(agents collided with) + (1 - local_ratio) * -sum_l min_i dist(agent i, landmark l)`` |
| end | truncated after max_steps + 1 = 26 steps (``truncation="mpe2"``: max_steps = 25 steps) |
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp.authoring import env_class
from jaxwarp.envs._mpe import (F32, MPEParams, MPEState, check_int, contact, decode_actions,
                               env_spec, integrate, interleave, landmarks_rel, others_rel,
                               reference, render_view)
from jaxwarp.render import BLUE, GREY, Canvas


@dataclasses.dataclass(frozen=True)
class MPESimpleSpreadParams(MPEParams):
    """JaxMARL ``SimpleSpreadMPE`` defaults (and ``default_params.py``)."""

    num_agents: int = 3
    num_landmarks: int = 3  # <= num_agents (landmarks live in per-agent slots)
    local_ratio: float = 0.5  # weight of the local collision penalty
    max_steps: int = 25  # an episode has max_steps + 1 steps, as in JaxMARL (see truncation)
    # "jaxmarl": max_steps + 1 steps per episode; "mpe2": max_steps (max_cycles)
    truncation: str = "jaxmarl"
    dt: float = 0.1
    damping: float = 0.25
    contact_force: float = 100.0
    contact_margin: float = 1e-3
    agent_size: float = 0.15  # agent radius
    accel: float = 5.0  # action force scale
    mass: float = 1.0

    def __post_init__(self) -> None:
        env = "mpe_simple_spread"
        check_int(env, "num_agents", self.num_agents, 1)
        check_int(env, "num_landmarks", self.num_landmarks, 0)
        if self.num_landmarks > self.num_agents:
            raise ValueError(f"{env}: num_landmarks={self.num_landmarks} > num_agents="
                             f"{self.num_agents}; jaxwarp stores landmark l in agent slot l, "
                             "so at most num_agents landmarks are supported")
        if not 0.0 <= self.local_ratio <= 1.0:
            raise ValueError(f"{env}: local_ratio={self.local_ratio!r}; expected 0 <= "
                             "local_ratio <= 1")
        self._check_world(env, ("agent_size",))


def spread_obs_dim(p: MPESimpleSpreadParams) -> int:
    """Observation width: 4 + 2 L + 4 (N - 1)."""
    return 4 + 2 * p.num_landmarks + 4 * (p.num_agents - 1)


@functools.partial(jax.jit, static_argnums=0)
def spread_observe(p: MPESimpleSpreadParams, s: MPEState) -> jax.Array:
    """obs: f32[envs, agents, spread_obs_dim(p)]."""
    e, n = s.x.shape
    own = jnp.stack([s.vx, s.vy, s.x, s.y], axis=-1)
    rel = interleave((landmarks_rel(s.x, s.lm_x, p.num_landmarks),
                      landmarks_rel(s.y, s.lm_y, p.num_landmarks)),
                     (others_rel(s.x), others_rel(s.y)))
    comm = jnp.zeros((e, n, 2 * (n - 1)), jnp.float32)
    return jnp.concatenate([own, rel, comm], axis=-1)


def _spread_transition(p: MPESimpleSpreadParams, s: MPEState, actions: jax.Array):
    """Physics and rewards of one step (`jaxwarp.envs._mpe.reference`)."""
    n, nl = p.num_agents, p.num_landmarks
    ux, uy = decode_actions(actions, F32(p.accel))
    dist_min = F32(p.agent_size) + F32(p.agent_size)
    not_self = ~np.eye(n, dtype=bool)
    cx, cy = contact(s.x, s.y, s.x, s.y, dist_min, not_self, p)
    fx, fy = cx + ux, cy + uy
    x, y, vx, vy = integrate(p, s, fx, fy)
    # Rewards on the new positions.
    dx, dy = x[:, :, None] - x[:, None, :], y[:, :, None] - y[:, None, :]
    hit = (jnp.sqrt(dx * dx + dy * dy) < dist_min) & not_self
    collisions = hit.sum(-1).astype(jnp.int32)
    lx, ly = s.lm_x[:, None, :nl] - x[:, :, None], s.lm_y[:, None, :nl] - y[:, :, None]
    nearest = jnp.sqrt(lx * lx + ly * ly).min(axis=1)  # [envs, L]
    shared = (-nearest).sum(-1)
    reward = ((-collisions).astype(jnp.float32) * F32(p.local_ratio)
              + shared[:, None] * (F32(1) - F32(p.local_ratio)))
    return (x, y, vx, vy), (fx, fy), reward


spread_reset, spread_step = reference(MPESimpleSpreadParams, spread_observe, _spread_transition,
                                      lambda p: p.num_landmarks)


def render_draw(p: MPESimpleSpreadParams, s: dict[str, jax.Array], canvas: Canvas) -> None:
    nl = p.num_landmarks
    canvas.disc(s["lm_x"][:nl], s["lm_y"][:nl], max(0.05, 2 * canvas.px), GREY, label="landmark")
    canvas.disc(s["x"], s["y"], p.agent_size, BLUE)


SPEC = env_spec("mpe_simple_spread", MPESimpleSpreadParams, spread_obs_dim, spread_reset,
                spread_step, render_view=render_view, render_draw=render_draw,
                render_fps=10,  # mpe2's
                default_config="mpe_simple_spread_ppo")


MPESimpleSpread = env_class(SPEC)  # JaxMARL simple_spread_v3 (discrete)
ENV = MPESimpleSpread  # what jaxwarp.registry registers under SPEC.name
