"""Pendulum (Gymnasium Pendulum-v1, discrete torques): swing it up and hold it.

Its params, pure-JAX reference, spec and env. The kernel is
`cuda/envs/pendulum.h`; the pure-JAX reference is ``pendulum_reset``,
``pendulum_step`` and ``pendulum_observe`` below. What the four classic-control
envs share (how the kernels are built, time limit, returns, auto-reset,
float32, random draws) is in `jaxwarp/envs/_classic.py`.

| observation (f32[envs, 1, 3]) | cos theta, sin theta, theta_dot |
|---|---|
| action (i32[envs, 1, 1]) | i in [0, num_torque_levels): torque ``PendulumParams.torques[i]`` (default 5 levels, -2 .. 2) |
| reward | -(normalize(theta)^2 + 0.1 theta_dot^2 + 0.001 u^2) of the state before the step |
| end | never terminated; truncated: 200 steps |

The reward is that of the state *before* the step and the applied torque
``u``. **The action is discrete** (unlike Gymnasium's continuous
``Box(-2, 2)`` torque): ``num_torque_levels`` (default 5) choices, action
``i`` applies ``linspace(-max_torque, max_torque, n)[i]`` (computed in
float64, rounded to float32). Reset: draw ``d = 0`` theta in [-pi, pi),
``d = 1`` theta_dot in [-1, 1) (``PENDULUM_RESET``).
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxwarp.authoring import env_class, state_field
from jaxwarp.core import sincos_fixed
from jaxwarp.render import DARK, ORANGE, Canvas
from jaxwarp.envs._classic import (F32, ClassicParams, check_holds_reset, env_spec, reference,
                                   uniform_fields, validate)

# Reset range [low, high) of each drawn state variable, in draw order.
PENDULUM_RESET = ((-math.pi, math.pi), (-1.0, 1.0))  # theta, theta_dot


@dataclasses.dataclass(frozen=True)
class PendulumParams(ClassicParams):
    """Pendulum-v1 (gymnasium `PendulumEnv`) with a DISCRETE action:
    action i applies torque ``linspace(-max_torque, max_torque, num_torque_levels)[i]``."""

    max_speed: float = 8.0
    max_torque: float = 2.0
    dt: float = 0.05
    g: float = 10.0
    m: float = 1.0
    l: float = 1.0  # noqa: E741 (gymnasium's name)
    num_torque_levels: int = 5
    max_steps: int = 200  # TimeLimit of Pendulum-v1

    obs_dim = 3

    def __post_init__(self) -> None:
        validate(self, "pendulum", ("max_steps",),
                 ("max_speed", "max_torque", "dt", "m", "l"))
        n = self.num_torque_levels
        # The pure-JAX reference looks torques up in a table (`torques`, one
        # float32 per level: 2**31 levels were 8 GB), and a policy's head is
        # as wide as the level count.
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 2 <= n <= 1024:
            raise ValueError(f"pendulum: num_torque_levels={n!r} is invalid; "
                             "expected an int in [2, 1024]")
        reach = PENDULUM_RESET[1][1]
        check_holds_reset("pendulum", "max_speed", self.max_speed, self.max_speed >= reach,
                          f">= {reach} (resets draw theta_dot in [-{reach}, {reach}))")

    @property
    def num_actions(self) -> int:
        return self.num_torque_levels

    @property
    def torques(self) -> np.ndarray:
        """f32[num_torque_levels]: the torque of each action."""
        return np.linspace(-self.max_torque, self.max_torque,
                           self.num_torque_levels).astype(np.float32)


@struct.dataclass
class PendulumState:
    """theta (not wrapped), theta_dot: f32[envs, 1]; timestep: i32[envs];
    episode_return: f32[envs, 1]."""

    theta: jax.Array = state_field("f32")
    theta_dot: jax.Array = state_field("f32")
    timestep: jax.Array = state_field("i32", "env")
    episode_return: jax.Array = state_field("f32")


def _angle_normalize(x: jax.Array) -> jax.Array:
    """((x + pi) % (2 pi)) - pi, with Python's sign convention for %."""
    return jnp.mod(x + F32(math.pi), F32(2 * math.pi)) - F32(math.pi)


def _pendulum_dynamics(p: PendulumParams, s: PendulumState, a: jax.Array):
    u = jnp.asarray(p.torques)[a]
    th, thdot = s.theta, s.theta_dot
    an = _angle_normalize(th)
    costs = an * an + F32(0.1) * (thdot * thdot) + F32(0.001) * (u * u)
    sin_th, _ = sincos_fixed(th)
    acc = F32(3 * p.g / (2 * p.l)) * sin_th + F32(3.0 / (p.m * p.l**2)) * u
    newthdot = thdot + acc * F32(p.dt)
    vmax = F32(p.max_speed)
    newthdot = jnp.minimum(jnp.maximum(newthdot, -vmax), vmax)
    newth = th + newthdot * F32(p.dt)
    terminated = jnp.zeros(th.shape[:1], bool)
    return dict(theta=newth, theta_dot=newthdot), -costs, terminated


@partial(jax.jit, static_argnums=(0,))
def pendulum_observe(p: PendulumParams, state: PendulumState) -> jax.Array:
    """obs: f32[envs, 1, 3] = (cos theta, sin theta, theta_dot)."""
    s, c = sincos_fixed(state.theta)
    return jnp.stack([c, s, state.theta_dot], axis=-1)


pendulum_reset, pendulum_step = reference(
    "pendulum", PendulumParams, PendulumState,
    uniform_fields(("theta", "theta_dot"), PENDULUM_RESET), _pendulum_dynamics, pendulum_observe,
    "in [0, num_torque_levels) (torque `PendulumParams.torques`[a])")


def render_view(p: PendulumParams) -> tuple[float, float, float, float]:
    h = 1.2 * float(p.l)
    return -h, h, -h, h


def render_draw(p: PendulumParams, s: dict[str, jax.Array], canvas: Canvas) -> None:
    px = canvas.px
    th, l = s["theta"][0], float(p.l)  # theta 0: upright
    canvas.segment(0.0, 0.0, -l * jnp.sin(th), l * jnp.cos(th), max(0.08, 2 * px), ORANGE)
    canvas.disc(0.0, 0.0, max(0.05, 2 * px), DARK)


SPEC = env_spec(
    "pendulum", PendulumParams, PendulumState, pendulum_reset, pendulum_step,
    render_view=render_view, render_draw=render_draw, render_fps=30,  # Gymnasium's
    obs_bounds=lambda p: (np.array([-1.0, -1.0, -p.max_speed]),
                          np.array([1.0, 1.0, p.max_speed])))


Pendulum = env_class(SPEC)  # Gymnasium Pendulum-v1 (5 torques); see the module docstring
ENV = Pendulum  # what jaxwarp.registry registers under SPEC.name
