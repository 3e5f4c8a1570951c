"""Acrobot (Gymnasium Acrobot-v1): swing the tip of a two-link pendulum above a line.

Its params, pure-JAX reference, spec and env. The kernel is
`cuda/envs/acrobot.h`; the pure-JAX reference is ``acrobot_reset``,
``acrobot_step`` and ``acrobot_observe`` below. What the four classic-control
envs share (how the kernels are built, time limit, returns, auto-reset,
float32, random draws) is in `jaxwarp/envs/_classic.py`.

| observation (f32[envs, 1, 6]) | cos t1, sin t1, cos t2, sin t2, dtheta1, dtheta2 |
|---|---|
| action (i32[envs, 1, 1]) | torque 0: -1, 1: 0, 2: +1 on the middle joint |
| reward | -1 every step, 0 on the terminating step |
| end | terminated: -cos t1 - cos(t1 + t2) > 1 (tip above the line); truncated: 500 steps |

Differences from Gymnasium besides the shared ones (each one deliberate):

* ``cos(a - pi/2)`` in the equations of motion is written ``sin(a)``
  (identical in exact arithmetic, closer to Gymnasium's float64 value than
  the float32 subtraction of pi/2).
* **The angle wrap**: Gymnasium's ``wrap`` subtracts/adds ``2 pi`` in a
  ``while`` loop; here the loop is unrolled ``ACROBOT_MAX_WRAPS = 8`` times
  each way (exact for ``|angle| < 17 pi``; a random search over 2e5 states
  within the velocity bounds found RK4 results up to ``9.5 pi``).
* Gymnasium's options are fixed to their defaults: the ``book`` dynamics and
  ``torque_noise_max = 0``.

Reset: draws ``d = 0..3`` for (theta1, theta2, dtheta1, dtheta2) in
[-0.1, 0.1) (``ACROBOT_RESET``).
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
from jaxwarp.render import DARK, GREY, ORANGE, Canvas
from jaxwarp.envs._classic import (F32, ClassicParams, check_holds_reset, env_spec, reference,
                                   uniform_fields, validate)

ACROBOT_MAX_WRAPS = 8  # unrolled iterations of Gymnasium's `wrap` while-loop, each way
# Reset range [low, high) of each drawn state variable, in draw order.
ACROBOT_RESET = ((-0.1, 0.1),) * 4  # theta1, theta2, dtheta1, dtheta2


@dataclasses.dataclass(frozen=True)
class AcrobotParams(ClassicParams):
    """Acrobot-v1 (gymnasium `AcrobotEnv`, "book" dynamics, RK4, no torque noise).

    Gymnasium's LINK_LENGTH_2 only draws the picture (the goal height ``1.0``
    and the dynamics do not use it), so it is not a parameter here.
    """

    dt: float = 0.2  # RK4 step
    link_length_1: float = 1.0
    link_mass_1: float = 1.0
    link_mass_2: float = 1.0
    link_com_pos_1: float = 0.5
    link_com_pos_2: float = 0.5
    link_moi: float = 1.0  # moment of inertia of both links
    gravity: float = 9.8
    max_vel_1: float = 4 * math.pi
    max_vel_2: float = 9 * math.pi
    max_steps: int = 500  # TimeLimit of Acrobot-v1

    obs_dim = 6
    num_actions = 3

    def __post_init__(self) -> None:
        validate(self, "acrobot", ("max_steps",),
                 ("dt", "link_length_1", "link_mass_1", "link_mass_2", "link_com_pos_1",
                  "link_com_pos_2", "link_moi", "max_vel_1", "max_vel_2"))
        reach = ACROBOT_RESET[2][1]
        for field in ("max_vel_1", "max_vel_2"):
            v = getattr(self, field)
            check_holds_reset("acrobot", field, v, v >= reach,
                              f">= {reach} (resets draw dtheta1, dtheta2 in [-{reach}, {reach}))")


ACROBOT_TORQUES = np.array([-1.0, 0.0, 1.0], np.float32)  # AVAIL_TORQUE


@struct.dataclass
class AcrobotState:
    """theta1, theta2 (relative to link 1), dtheta1, dtheta2: f32[envs, 1];
    timestep: i32[envs]; episode_return: f32[envs, 1]."""

    theta1: jax.Array = state_field("f32")
    theta2: jax.Array = state_field("f32")
    dtheta1: jax.Array = state_field("f32")
    dtheta2: jax.Array = state_field("f32")
    timestep: jax.Array = state_field("i32", "env")
    episode_return: jax.Array = state_field("f32")


def _f32_value(x: float) -> float:
    """x rounded to float32, as a Python float (the kernels receive float32 params)."""
    return float(F32(x))


def _acrobot_dsdt(p: AcrobotParams, torque, theta1, theta2, dtheta1, dtheta2):
    """Gymnasium's `_dsdt` (book): (dtheta1, dtheta2, ddtheta1, ddtheta2).

    The constants are folded in double from the float32 params, as the kernel
    (which receives float32 params) folds them: from the Python floats,
    ``(m1 lc1 + m2 l1) g`` rounds to 14.6999998 instead of the kernel's 14.700001.
    """
    m1, m2, l1 = _f32_value(p.link_mass_1), _f32_value(p.link_mass_2), _f32_value(p.link_length_1)
    lc1, lc2 = _f32_value(p.link_com_pos_1), _f32_value(p.link_com_pos_2)
    inertia, g = _f32_value(p.link_moi), _f32_value(p.gravity)
    s2, c2 = sincos_fixed(theta2)
    s1, _ = sincos_fixed(theta1)
    s12, _ = sincos_fixed(theta1 + theta2)
    # d1 = m1 lc1^2 + m2 (l1^2 + lc2^2 + 2 l1 lc2 cos t2) + I1 + I2
    d1 = F32(m1 * lc1**2 + m2 * (l1**2 + lc2**2) + 2 * inertia) \
        + F32(2 * m2 * l1 * lc2) * c2
    # d2 = m2 (lc2^2 + l1 lc2 cos t2) + I2
    d2 = F32(m2 * lc2**2 + inertia) + F32(m2 * l1 * lc2) * c2
    # phi2 = m2 lc2 g cos(t1 + t2 - pi/2)
    phi2 = F32(m2 * lc2 * g) * s12
    k = F32(m2 * l1 * lc2)
    phi1 = (-(k * (dtheta2 * dtheta2) * s2)
            - F32(2 * m2 * l1 * lc2) * dtheta2 * dtheta1 * s2
            + F32((m1 * lc1 + m2 * l1) * g) * s1
            + phi2)
    ddtheta2 = (torque + d2 / d1 * phi1 - k * (dtheta1 * dtheta1) * s2 - phi2) \
        / (F32(m2 * lc2**2 + inertia) - d2 * d2 / d1)
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return dtheta1, dtheta2, ddtheta1, ddtheta2


def _wrap_pi(x: jax.Array) -> jax.Array:
    """Gymnasium's `wrap(x, -pi, pi)` (while x > pi: x -= 2 pi; while x < -pi: x += 2 pi)."""
    hi, lo, diff = F32(math.pi), F32(-math.pi), F32(2 * math.pi)
    for _ in range(ACROBOT_MAX_WRAPS):
        x = jnp.where(x > hi, x - diff, x)
    for _ in range(ACROBOT_MAX_WRAPS):
        x = jnp.where(x < lo, x + diff, x)
    return x


def _acrobot_dynamics(p: AcrobotParams, s: AcrobotState, a: jax.Array):
    torque = jnp.asarray(ACROBOT_TORQUES)[a]
    y0 = (s.theta1, s.theta2, s.dtheta1, s.dtheta2)
    dt, dt2 = F32(p.dt), F32(_f32_value(p.dt) / 2.0)

    def f(y):
        return _acrobot_dsdt(p, torque, *y)

    k1 = f(y0)
    k2 = f(tuple(y + dt2 * k for y, k in zip(y0, k1)))
    k3 = f(tuple(y + dt2 * k for y, k in zip(y0, k2)))
    k4 = f(tuple(y + dt * k for y, k in zip(y0, k3)))
    dt6 = F32(_f32_value(p.dt) / 6.0)
    ns = [y + dt6 * (((a1 + F32(2) * a2) + F32(2) * a3) + a4)
          for y, a1, a2, a3, a4 in zip(y0, k1, k2, k3, k4)]
    theta1, theta2 = _wrap_pi(ns[0]), _wrap_pi(ns[1])
    v1, v2 = F32(p.max_vel_1), F32(p.max_vel_2)
    dtheta1 = jnp.minimum(jnp.maximum(ns[2], -v1), v1)
    dtheta2 = jnp.minimum(jnp.maximum(ns[3], -v2), v2)
    _, c1 = sincos_fixed(theta1)
    _, c12 = sincos_fixed(theta2 + theta1)
    terminated = (-c1 - c12 > F32(1.0))[:, 0]
    reward = jnp.where(terminated[:, None], F32(0), F32(-1))
    fields = dict(theta1=theta1, theta2=theta2, dtheta1=dtheta1, dtheta2=dtheta2)
    return fields, reward, terminated


@partial(jax.jit, static_argnums=(0,))
def acrobot_observe(p: AcrobotParams, state: AcrobotState) -> jax.Array:
    """obs: f32[envs, 1, 6] = (cos t1, sin t1, cos t2, sin t2, dtheta1, dtheta2)."""
    s1, c1 = sincos_fixed(state.theta1)
    s2, c2 = sincos_fixed(state.theta2)
    return jnp.stack([c1, s1, c2, s2, state.dtheta1, state.dtheta2], axis=-1)


acrobot_reset, acrobot_step = reference(
    "acrobot", AcrobotParams, AcrobotState,
    uniform_fields(("theta1", "theta2", "dtheta1", "dtheta2"), ACROBOT_RESET),
    _acrobot_dynamics, acrobot_observe, "in {0, 1, 2} (torque -1, 0, +1)")


def render_view(p: AcrobotParams) -> tuple[float, float, float, float]:
    h = 1.1 * (float(p.link_length_1) + float(getattr(p, "link_length_2", 1.0)))
    return -h, h, -h, h


def render_draw(p: AcrobotParams, s: dict[str, jax.Array], canvas: Canvas) -> None:
    px = canvas.px
    t1, t2 = s["theta1"][0], s["theta2"][0]  # 0: hanging down (gym's drawing)
    l1, l2 = float(p.link_length_1), float(getattr(p, "link_length_2", 1.0))
    x1, y1 = l1 * jnp.sin(t1), -l1 * jnp.cos(t1)
    x2, y2 = x1 + l2 * jnp.sin(t1 + t2), y1 - l2 * jnp.cos(t1 + t2)
    canvas.segment(-2.2, 1.0, 2.2, 1.0, max(0.01, px), GREY)  # target height
    canvas.segment(0.0, 0.0, x1, y1, max(0.06, 2 * px), DARK)
    canvas.segment(x1, y1, x2, y2, max(0.06, 2 * px), DARK)
    canvas.disc(0.0, 0.0, max(0.06, 2 * px), ORANGE)
    canvas.disc(x1, y1, max(0.06, 2 * px), ORANGE)


SPEC = env_spec(
    "acrobot", AcrobotParams, AcrobotState, acrobot_reset, acrobot_step,
    render_view=render_view, render_draw=render_draw, render_fps=15,  # Gymnasium's
    obs_bounds=lambda p: (
        np.array([-1.0, -1.0, -1.0, -1.0, -p.max_vel_1, -p.max_vel_2]),
        np.array([1.0, 1.0, 1.0, 1.0, p.max_vel_1, p.max_vel_2])))


Acrobot = env_class(SPEC)  # Gymnasium Acrobot-v1; see the module docstring
ENV = Acrobot  # what jaxwarp.registry registers under SPEC.name
