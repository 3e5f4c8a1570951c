"""CartPole (Gymnasium CartPole-v1): balance a pole on a cart by pushing the cart.

Its params, pure-JAX reference, spec and env. The kernel is
`cuda/envs/cartpole.h`; the pure-JAX reference is ``cartpole_reset``,
``cartpole_step`` and ``cartpole_observe`` below. What the four classic-control
envs share (how the kernels are built, time limit, returns, auto-reset,
float32, random draws) is in `jaxwarp/envs/_classic.py`.

| observation (f32[envs, 1, 4]) | x, x_dot, theta, theta_dot |
|---|---|
| action (i32[envs, 1, 1]) | 0: push left, 1: push right |
| reward | 1 every step |
| end | terminated: abs(x) > 2.4 or abs(theta) > 12 degrees; truncated: 500 steps |

Gymnasium's options are fixed to their defaults: the Euler integrator and
the +1 reward (no ``sutton_barto_reward``). Reset: draws ``d = 0..3`` for
(x, x_dot, theta, theta_dot) in [-0.05, 0.05) (``CARTPOLE_RESET``).
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxwarp.authoring import env_class, state_field
from jaxwarp.core import sincos_fixed
from jaxwarp.render import DARK, GREY, ORANGE, Canvas
from jaxwarp.envs._classic import (F32, ClassicParams, check_holds_reset, env_spec, reference,
                                   uniform_fields, validate)

# Reset range [low, high) of each drawn state variable, in draw order.
CARTPOLE_RESET = ((-0.05, 0.05),) * 4  # x, x_dot, theta, theta_dot


@dataclasses.dataclass(frozen=True)
class CartPoleParams(ClassicParams):
    """CartPole-v1 (gymnasium `CartPoleEnv`): push a cart to balance a pole."""

    gravity: float = 9.8
    masscart: float = 1.0
    masspole: float = 0.1
    length: float = 0.5  # half the pole's length
    force_mag: float = 10.0
    tau: float = 0.02  # seconds per step (Euler integration)
    theta_threshold_radians: float = 12 * 2 * math.pi / 360
    x_threshold: float = 2.4
    max_steps: int = 500  # TimeLimit of CartPole-v1
    # Partially observed CartPole: the velocities (x_dot, theta_dot) read as 0, so a
    # policy must infer them from the positions it saw before (a memory task)
    hide_velocities: bool = False

    obs_dim = 4
    num_actions = 2

    def __post_init__(self) -> None:
        validate(self, "cartpole", ("max_steps",),
                 ("masscart", "masspole", "length", "tau", "theta_threshold_radians",
                  "x_threshold"))
        # The space's bounds are twice the termination thresholds (Gymnasium's).
        reach = CARTPOLE_RESET[0][1]
        for field in ("x_threshold", "theta_threshold_radians"):
            v = getattr(self, field)
            check_holds_reset("cartpole", field, v, 2 * v >= reach,
                              f">= {reach / 2} (the space's bound is twice it; resets draw "
                              f"x and theta in [-{reach}, {reach}))")


@struct.dataclass
class CartPoleState:
    """x, x_dot, theta, theta_dot: f32[envs, 1]; timestep: i32[envs];
    episode_return: f32[envs, 1]."""

    x: jax.Array = state_field("f32")
    x_dot: jax.Array = state_field("f32")
    theta: jax.Array = state_field("f32")
    theta_dot: jax.Array = state_field("f32")
    timestep: jax.Array = state_field("i32", "env")
    episode_return: jax.Array = state_field("f32")


def cartpole_constants(p: CartPoleParams) -> dict[str, np.float32]:
    """The constants of CartPole's dynamics, folded in float64 from the
    Python params and rounded to float32 once: the reference uses them, and
    the kernel gets them as params (`kernel_params` below)."""
    total_mass = p.masspole + p.masscart
    polemass_length = p.masspole * p.length
    return dict(polemass_length=F32(polemass_length), inv_total_mass=F32(1.0 / total_mass),
                four_thirds_length=F32(p.length * 4.0 / 3.0),
                length_masspole=F32(p.length * p.masspole / total_mass),
                polemass_length_over_mass=F32(polemass_length / total_mass))


def _cartpole_dynamics(p: CartPoleParams, s: CartPoleState, a: jax.Array):
    """Gymnasium's Euler step. a: i32[envs, 1] -> (fields, reward, terminated)."""
    c = cartpole_constants(p)
    force = jnp.where(a == 1, F32(p.force_mag), F32(-p.force_mag))
    sintheta, costheta = sincos_fixed(s.theta)
    temp = (force + c["polemass_length"] * (s.theta_dot * s.theta_dot) * sintheta) \
        * c["inv_total_mass"]
    # length * (4/3 - masspole cos^2 / total_mass)
    denom = c["four_thirds_length"] - c["length_masspole"] * (costheta * costheta)
    thetaacc = (F32(p.gravity) * sintheta - costheta * temp) / denom
    xacc = temp - c["polemass_length_over_mass"] * thetaacc * costheta
    tau = F32(p.tau)
    x = s.x + tau * s.x_dot
    x_dot = s.x_dot + tau * xacc
    theta = s.theta + tau * s.theta_dot
    theta_dot = s.theta_dot + tau * thetaacc
    xt, tt = F32(p.x_threshold), F32(p.theta_threshold_radians)
    terminated = ((x < -xt) | (x > xt) | (theta < -tt) | (theta > tt))[:, 0]
    reward = jnp.ones_like(x)
    return dict(x=x, x_dot=x_dot, theta=theta, theta_dot=theta_dot), reward, terminated


@partial(jax.jit, static_argnums=(0,))
def cartpole_observe(p: CartPoleParams, state: CartPoleState) -> jax.Array:
    """obs: f32[envs, 1, 4] = (x, x_dot, theta, theta_dot); the velocities are 0
    where ``hide_velocities``."""
    if p.hide_velocities:
        zero = jnp.zeros_like(state.x)
        return jnp.stack([state.x, zero, state.theta, zero], axis=-1)
    return jnp.stack([state.x, state.x_dot, state.theta, state.theta_dot], axis=-1)


cartpole_reset, cartpole_step = reference(
    "cartpole", CartPoleParams, CartPoleState,
    uniform_fields(("x", "x_dot", "theta", "theta_dot"), CARTPOLE_RESET),
    _cartpole_dynamics, cartpole_observe, "in {0, 1} (push left, push right)")


def kernel_params(p: CartPoleParams) -> dict[str, Any]:
    """The C++ Params of cuda/envs/cartpole.h: the constants of the dynamics
    as the reference folds them (`cartpole_constants`, once here in Python,
    not in float64 by every GPU thread on every step), and the plain params
    the header reads."""
    f32 = np.float32
    return dict(
        force_mag=f32(p.force_mag), gravity=f32(p.gravity), tau=f32(p.tau),
        x_threshold=f32(p.x_threshold), theta_threshold_radians=f32(p.theta_threshold_radians),
        max_steps=np.int32(p.max_steps), hide_velocities=np.int32(bool(p.hide_velocities)),
        **cartpole_constants(p))


def render_view(p: CartPoleParams) -> tuple[float, float, float, float]:
    h = 1.2 * float(p.x_threshold)
    return -h, h, -h + 0.5, h + 0.5


def render_draw(p: CartPoleParams, s: dict[str, jax.Array], canvas: Canvas) -> None:
    px = canvas.px
    x, th = s["x"][0], s["theta"][0]
    xt = float(p.x_threshold)
    canvas.segment(-xt, -0.2, xt, -0.2, max(0.02, px), GREY)  # track
    canvas.segment(x - 0.25, 0.0, x + 0.25, 0.0, 0.12, DARK)  # cart
    pole = 2.0 * float(p.length)
    canvas.segment(x, 0.0, x + pole * jnp.sin(th), pole * jnp.cos(th), max(0.05, 1.5 * px),
                   ORANGE)
    canvas.disc(x, 0.0, max(0.04, 1.5 * px), GREY)


SPEC = env_spec(
    "cartpole", CartPoleParams, CartPoleState, cartpole_reset, cartpole_step,
    kernel_params=kernel_params, render_view=render_view, render_draw=render_draw,
    render_fps=50,  # Gymnasium's
    default_config="cartpole_ppo",
    obs_bounds=lambda p: (
        np.array([-2 * p.x_threshold, -np.inf, -2 * p.theta_threshold_radians, -np.inf]),
        np.array([2 * p.x_threshold, np.inf, 2 * p.theta_threshold_radians, np.inf])))


CartPole = env_class(SPEC)  # Gymnasium CartPole-v1; see the module docstring
ENV = CartPole  # what jaxwarp.registry registers under SPEC.name
