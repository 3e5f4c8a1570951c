"""MountainCar (Gymnasium MountainCar-v0): drive an underpowered car out of a valley.

Its params, pure-JAX reference, spec and env. The kernel is
`cuda/envs/mountain_car.h`; the pure-JAX reference is ``mountain_car_reset``,
``mountain_car_step`` and ``mountain_car_observe`` below. What the four
classic-control envs share (how the kernels are built, time limit, returns,
auto-reset, float32, random draws) is in `jaxwarp/envs/_classic.py`.

| observation (f32[envs, 1, 2]) | position, velocity |
|---|---|
| action (i32[envs, 1, 1]) | 0: push left, 1: no push, 2: push right |
| reward | -1 every step |
| end | terminated: position >= 0.5 and velocity >= 0; truncated: 200 steps |

Reset: draw ``d = 0`` position in [-0.6, -0.4) (``MOUNTAIN_CAR_RESET``),
velocity 0.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxwarp.authoring import env_class, state_field
from jaxwarp.core import sincos_fixed
from jaxwarp.render import DARK, GREY, ORANGE, Canvas
from jaxwarp.envs._classic import (F32, ClassicParams, check_holds_reset, env_spec, reference,
                                   uniform_start, validate)

# Reset range [low, high) of each drawn state variable, in draw order.
MOUNTAIN_CAR_RESET = ((-0.6, -0.4),)  # position (velocity starts at 0)


@dataclasses.dataclass(frozen=True)
class MountainCarParams(ClassicParams):
    """MountainCar-v0 (gymnasium `MountainCarEnv`): drive an underpowered car uphill."""

    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float = 0.5
    goal_velocity: float = 0.0
    force: float = 0.001
    gravity: float = 0.0025
    max_steps: int = 200  # TimeLimit of MountainCar-v0

    obs_dim = 2
    num_actions = 3

    def __post_init__(self) -> None:
        validate(self, "mountain_car", ("max_steps",), ("max_speed", "force"))
        if not self.min_position < self.max_position:
            raise ValueError(f"mountain_car: min_position={self.min_position!r} must be < "
                             f"max_position={self.max_position!r}")
        (lo, hi), = MOUNTAIN_CAR_RESET
        where = f"(resets draw the position in [{lo}, {hi}))"
        check_holds_reset("mountain_car", "min_position", self.min_position,
                          self.min_position <= lo, f"<= {lo} {where}")
        check_holds_reset("mountain_car", "max_position", self.max_position,
                          self.max_position >= hi, f">= {hi} {where}")
        if not self.min_position < self.goal_position <= self.max_position:
            # The car never leaves [min_position, max_position]: a goal beyond
            # max_position is never reached, one at min_position always is.
            raise ValueError(f"mountain_car: goal_position={self.goal_position!r} is invalid; "
                             f"expected a float in (min_position, max_position] = "
                             f"({self.min_position!r}, {self.max_position!r}]")


@struct.dataclass
class MountainCarState:
    """position, velocity: f32[envs, 1]; timestep: i32[envs];
    episode_return: f32[envs, 1]."""

    position: jax.Array = state_field("f32")
    velocity: jax.Array = state_field("f32")
    timestep: jax.Array = state_field("i32", "env")
    episode_return: jax.Array = state_field("f32")


def _mountain_car_start(p: MountainCarParams, key_data: jax.Array, num_envs: int):
    return dict(uniform_start(key_data, num_envs, ("position",), MOUNTAIN_CAR_RESET),
                velocity=jnp.zeros((num_envs, 1), jnp.float32))


def _mountain_car_dynamics(p: MountainCarParams, s: MountainCarState, a: jax.Array):
    push = jnp.asarray(np.array([-p.force, 0.0, p.force], np.float32))[a]  # (a - 1) * force
    _, c3 = sincos_fixed(F32(3) * s.position)
    velocity = s.velocity + (push + c3 * F32(-p.gravity))
    vmax = F32(p.max_speed)
    velocity = jnp.minimum(jnp.maximum(velocity, -vmax), vmax)
    lo, hi = F32(p.min_position), F32(p.max_position)
    position = jnp.minimum(jnp.maximum(s.position + velocity, lo), hi)
    velocity = jnp.where((position == lo) & (velocity < 0), F32(0), velocity)
    terminated = ((position >= F32(p.goal_position))
                  & (velocity >= F32(p.goal_velocity)))[:, 0]
    reward = jnp.full_like(position, F32(-1))
    return dict(position=position, velocity=velocity), reward, terminated


@partial(jax.jit, static_argnums=(0,))
def mountain_car_observe(p: MountainCarParams, state: MountainCarState) -> jax.Array:
    """obs: f32[envs, 1, 2] = (position, velocity)."""
    return jnp.stack([state.position, state.velocity], axis=-1)


mountain_car_reset, mountain_car_step = reference(
    "mountain_car", MountainCarParams, MountainCarState, _mountain_car_start,
    _mountain_car_dynamics, mountain_car_observe, "in {0, 1, 2} (push left, none, right)")


def render_view(p: MountainCarParams) -> tuple[float, float, float, float]:
    lo, hi = float(p.min_position), float(p.max_position)
    half = (hi - lo) / 2
    return lo, hi, 0.55 - half, 0.55 + half


def render_draw(p: MountainCarParams, s: dict[str, jax.Array], canvas: Canvas) -> None:
    px = canvas.px
    h = lambda v: 0.45 * np.sin(3 * v) + 0.55
    xs = np.linspace(p.min_position, p.max_position, 41, dtype=np.float32)
    canvas.segment(xs[:-1], h(xs[:-1]), xs[1:], h(xs[1:]), max(0.005, px), GREY)  # the hill
    g = float(p.goal_position)
    canvas.segment(g, h(g), g, h(g) + 0.15, max(0.005, px), DARK)  # flag
    pos = s["position"][0]
    r = max(0.04, 2 * px)
    canvas.disc(pos, 0.45 * jnp.sin(3 * pos) + 0.55 + r, r, ORANGE)


SPEC = env_spec(
    "mountain_car", MountainCarParams, MountainCarState, mountain_car_reset, mountain_car_step,
    render_view=render_view, render_draw=render_draw, render_fps=30,  # Gymnasium's
    obs_bounds=lambda p: (np.array([p.min_position, -p.max_speed]),
                          np.array([p.max_position, p.max_speed])))


MountainCar = env_class(SPEC)  # Gymnasium MountainCar-v0; see the module docstring
ENV = MountainCar  # what jaxwarp.registry registers under SPEC.name
