"""Classic control: CartPole-v1, Acrobot-v1, Pendulum-v1, MountainCar-v0.

Pure-JAX references of Gymnasium's four classic-control environments (checked
against gymnasium 1.x, `gymnasium/envs/classic_control/`), in jaxwarp's batched
functional form: one agent per env, state fields ``f32[envs, 1]``,
``obs: f32[envs, 1, obs_dim]``, ``actions: i32[envs, 1, 1]``,
``reward: f32[envs, 1]``, ``done: bool[envs]``. Per env ``xxx``:

* ``xxx_reset(params, key_data, num_envs) -> (obs, state)``;
* ``xxx_step(params, key_data, state, actions) -> (obs, state, reward, done, info)``
  with ``info = {"terminated": bool[envs], "truncated": bool[envs],
  "episode_return": f32[envs, 1]}``; finished envs restart inside the step
  from fresh starts drawn with its key, and the returned obs is then the new
  episode's first observation;
* ``xxx_observe(params, state) -> obs``.

Semantics shared by the four envs (as Gymnasium with its ``TimeLimit``):

* ``terminated``: the env's own end condition on the *new* state;
  ``truncated``: ``timestep + 1 >= max_steps`` (independent of terminated, so
  both can be true on the same step, as in Gymnasium); ``done = terminated |
  truncated``. The reward of the final step is always paid.
* ``timestep: i32[envs]``: steps taken in the current episode (0 right after
  a reset). ``episode_return: f32[envs, 1]``: the current episode's return so
  far; after a done step, the finished episode's return (restarted lazily on
  the next step, where ``timestep == 0``).
* Out-of-range actions are clamped to ``[0, num_actions - 1]``.
* ``xxx_reset``, ``xxx_step`` and ``xxx_observe`` are ``jax.jit``-compiled
  (params static, and ``num_envs`` for reset), so that a call outside a jit
  rounds like one inside: XLA contracts ``a * b + c`` into an fma only in a
  compiled program, and the random draws below are defined with that fma.

| env | obs (f32) | action (i32) | reward (f32) |
|---|---|---|---|
| cartpole | ``x, x_dot, theta, theta_dot`` | 0 push left, 1 push right | +1 |
| acrobot | ``cos t1, sin t1, cos t2, sin t2, dt1, dt2`` | torque -1, 0, +1 | -1 (0 if terminated) |
| pendulum | ``cos theta, sin theta, theta_dot`` | ``num_torque_levels`` torques | see below |
| mountain_car | ``position, velocity`` | 0 left, 1 none, 2 right | -1 |

Terminated: cartpole ``|x| > 2.4`` or ``|theta| > 12 deg``; acrobot
``-cos t1 - cos(t1 + t2) > 1``; pendulum never (truncation only); mountain_car
``position >= 0.5`` and ``velocity >= 0``. Pendulum's reward is
``-(normalize(theta)^2 + 0.1 theta_dot^2 + 0.001 u^2)`` of the state *before*
the step and the applied torque ``u``.

Differences from Gymnasium (each one deliberate):

* **float32.** Gymnasium integrates in float64 (Acrobot even resets to
  float32 values and then integrates in float64) and casts observations to
  float32; here every operation is float32 with float32 constants (a product
  or quotient of Gymnasium's constants is folded in float64 first, then
  rounded once). One step from the same state agrees with Gymnasium to about
  1e-6 relative (see ``tests/test_classic_control.py`` for the tolerances);
  trajectories of the chaotic envs (Acrobot) drift apart over many steps.
* **sin/cos** use jaxwarp's fixed polynomial (`jaxwarp.core.sincos_fixed`,
  ~1 ulp) so the C++ kernels can reproduce the reference bit for bit, and
  ``cos(a - pi/2)`` in Acrobot's equations is written ``sin(a)`` (identical in
  exact arithmetic, closer to Gymnasium's float64 value than the float32
  subtraction of pi/2).
* **Pendulum's action is discrete**: ``num_torque_levels`` (default 5)
  choices, action ``i`` applies ``linspace(-max_torque, max_torque, n)[i]``
  (computed in float64, rounded to float32). Gymnasium's Pendulum takes a
  continuous ``Box(-2, 2)`` torque.
* **Acrobot's angle wrap**: Gymnasium's ``wrap`` subtracts/adds ``2 pi`` in a
  ``while`` loop; here the loop is unrolled ``ACROBOT_MAX_WRAPS = 8`` times
  each way (exact for ``|angle| < 17 pi``; a random search over 2e5 states
  within the velocity bounds found RK4 results up to ``9.5 pi``).
* Options Gymnasium exposes as attributes/kwargs are fixed to their defaults:
  CartPole's Euler integrator and +1 reward (no ``sutton_barto_reward``),
  Acrobot's ``book`` dynamics and ``torque_noise_max = 0``, and the reset
  ranges below (no ``options`` bounds).

Random draws (the C++ kernels reproduce them bit for bit): draw ``d`` of env
``e`` is ``u = uniform01(x0)`` with ``(x0, x1) = threefry2x32(key_data, (e, d))``
and ``uniform01(b) = f32(b >> 8) * 2**-24``; a value in ``[low, high)`` is
``min(u * span, span) + f32(low)`` with ``span = f32(high) - f32(low)``, every
operation rounded in float32 (the min, a no-op on the value, keeps XLA from
contracting the multiply-add, so the bits do not depend on the program). Draws: CartPole ``d = 0..3`` for (x, x_dot, theta,
theta_dot) in [-0.05, 0.05); Acrobot ``d = 0..3`` for (theta1, theta2, dtheta1,
dtheta2) in [-0.1, 0.1); Pendulum ``d = 0`` theta in [-pi, pi), ``d = 1``
theta_dot in [-1, 1); MountainCar ``d = 0`` position in [-0.6, -0.4),
velocity 0.
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.extend.random import threefry2x32_p

from jaxwarp.authoring import state_field
from jaxwarp.core import auto_reset, reset_mask, sincos_fixed

F32 = np.float32
ACROBOT_MAX_WRAPS = 8  # unrolled iterations of Gymnasium's `wrap` while-loop, each way

# Reset ranges [low, high) per drawn state variable, in draw order.
CARTPOLE_RESET = ((-0.05, 0.05),) * 4  # x, x_dot, theta, theta_dot
ACROBOT_RESET = ((-0.1, 0.1),) * 4  # theta1, theta2, dtheta1, dtheta2
PENDULUM_RESET = ((-math.pi, math.pi), (-1.0, 1.0))  # theta, theta_dot
MOUNTAIN_CAR_RESET = ((-0.6, -0.4),)  # position (velocity starts at 0)


# ---------------------------------------------------------------------------
# Shared pieces: validation, random draws, actions, auto-reset.
# ---------------------------------------------------------------------------
def _validate(obj: Any, env: str, ints: tuple[str, ...], positive: tuple[str, ...]) -> None:
    for name in ints:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{env}: {name}={value!r} is invalid; expected an int >= 1")
    for name in positive:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating,
                                                               np.integer)) \
                or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{env}: {name}={value!r} is invalid; expected a finite float > 0")


def uniform_draw(key_data: jax.Array, num_envs: int, draw: int, low: float,
                 high: float) -> jax.Array:
    """f32[envs, 1]: draw number `draw` of every env, uniform in [low, high)."""
    shape = (num_envs,)
    k0 = jnp.broadcast_to(key_data[0], shape)
    k1 = jnp.broadcast_to(key_data[1], shape)
    env = jnp.arange(num_envs, dtype=jnp.uint32)
    d = jnp.full(shape, draw, jnp.uint32)
    bits, _ = threefry2x32_p.bind(k0, k1, env, d)
    u = (bits >> 8).astype(jnp.float32) * F32(2.0**-24)
    # span and low in float32 as the kernels compute them; the min (a no-op on
    # the value, since u < 1) keeps XLA from contracting u * span + low into
    # an fma in some programs and not in others, so the bits never depend on
    # the surrounding program (jaxwarp::Agent::uniform(draw, low, high)).
    span = F32(high) - F32(low)
    return (jnp.minimum(u * span, span) + F32(low))[:, None]


def _check_reset_args(key_data: jax.Array, num_envs: int) -> int:
    if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) \
            or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int; got {num_envs!r}")
    if key_data.dtype != jnp.uint32 or tuple(key_data.shape) != (2,):
        raise ValueError(f"key_data must be u32[2] (jax.random.key_data of one key); got "
                         f"{key_data.dtype}{list(key_data.shape)}")
    return int(num_envs)


def _action_index(actions: jax.Array, num_envs: int, num_actions: int) -> jax.Array:
    """i32[envs, 1]: the clamped action of the single agent."""
    expected = (num_envs, 1, 1)
    if not hasattr(actions, "shape") or tuple(actions.shape) != expected:
        raise ValueError(f"actions must have shape {expected} (envs, agents=1, 1); got "
                         f"{getattr(actions, 'shape', type(actions).__name__)}")
    if actions.dtype != jnp.int32:
        raise TypeError(f"actions must have dtype int32; got {actions.dtype}")
    return jnp.clip(actions[:, :, 0], 0, num_actions - 1)


def _finish_step(p: Any, key_data: jax.Array, state: Any, moved: dict[str, jax.Array],
                 reward: jax.Array, terminated: jax.Array,
                 start: Callable[[Any, jax.Array, int], dict[str, jax.Array]],
                 observe: Callable[[Any, Any], jax.Array], autoreset: bool = True):
    """Time limit, returns and auto-reset, common to the four envs.

    moved: the env's fields after the transition, f32[envs, 1] each;
    reward: f32[envs, 1]; terminated: bool[envs].
    """
    if key_data.dtype != jnp.uint32 or tuple(key_data.shape) != (2,):
        raise ValueError(f"key_data must be u32[2]; got {key_data.dtype}{list(key_data.shape)}")
    num_envs = state.timestep.shape[0]
    t = state.timestep + 1
    truncated = t >= p.max_steps
    done = terminated | truncated
    episode_return = jnp.where((state.timestep == 0)[:, None], F32(0),
                               state.episode_return) + reward
    # Fresh starts are drawn for every env and selected where done (no
    # lax.cond: on XLA:GPU its predicate would be copied to the host).
    fresh = start(p, key_data, num_envs)
    reset = reset_mask(done, autoreset)
    fields = auto_reset(reset, {k: fresh[k] for k in moved}, moved)
    new_state = type(state)(**fields, timestep=jnp.where(reset, 0, t),
                            episode_return=episode_return)
    info = {"terminated": terminated, "truncated": truncated,
            "episode_return": episode_return}
    return observe(p, new_state), new_state, reward, done, info


def _new_state(state_cls: type, fields: dict[str, jax.Array], num_envs: int) -> Any:
    return state_cls(**fields, timestep=jnp.zeros((num_envs,), jnp.int32),
                     episode_return=jnp.zeros((num_envs, 1), jnp.float32))


# ---------------------------------------------------------------------------
# CartPole-v1
# ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CartPoleParams:
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

    obs_dim = 4
    num_actions = 2

    def __post_init__(self) -> None:
        _validate(self, "cartpole", ("max_steps",),
                  ("masscart", "masspole", "length", "tau", "theta_threshold_radians",
                   "x_threshold"))

    @property
    def nvec(self) -> tuple[int, ...]:
        return (self.num_actions,)

    @property
    def max_episode_steps(self) -> int:
        """Steps per episode at most (the TimeLimit; terminated episodes end sooner;
        ``jaxwarp.core.episode_length``)."""
        return self.max_steps


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


def _cartpole_start(p: CartPoleParams, key_data: jax.Array, num_envs: int):
    names = ("x", "x_dot", "theta", "theta_dot")
    return {n: uniform_draw(key_data, num_envs, d, lo, hi)
            for d, (n, (lo, hi)) in enumerate(zip(names, CARTPOLE_RESET))}


def cartpole_constants(p: CartPoleParams) -> dict[str, np.float32]:
    """The constants of CartPole's dynamics, folded in float64 from the
    Python params and rounded to float32 once: the reference uses them, and
    the kernel gets them as params (jaxwarp/envs/cartpole.py kernel_params)."""
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
    """obs: f32[envs, 1, 4] = (x, x_dot, theta, theta_dot)."""
    return jnp.stack([state.x, state.x_dot, state.theta, state.theta_dot], axis=-1)


@partial(jax.jit, static_argnums=(0, 2))
def cartpole_reset(p: CartPoleParams, key_data: jax.Array, num_envs: int):
    """key_data: u32[2] -> (obs f32[envs, 1, 4], CartPoleState)."""
    num_envs = _check_reset_args(key_data, num_envs)
    state = _new_state(CartPoleState, _cartpole_start(p, key_data, num_envs), num_envs)
    return cartpole_observe(p, state), state


@partial(jax.jit, static_argnums=(0,), static_argnames="autoreset")
def cartpole_step(p: CartPoleParams, key_data: jax.Array, state: CartPoleState,
                  actions: jax.Array, autoreset: bool = True):
    """actions: i32[envs, 1, 1] in {0, 1} -> (obs, state, reward, done, info)."""
    a = _action_index(actions, state.timestep.shape[0], p.num_actions)
    moved, reward, terminated = _cartpole_dynamics(p, state, a)
    return _finish_step(p, key_data, state, moved, reward, terminated, _cartpole_start,
                        cartpole_observe, autoreset)


# ---------------------------------------------------------------------------
# Acrobot-v1
# ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class AcrobotParams:
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
        _validate(self, "acrobot", ("max_steps",),
                  ("dt", "link_length_1", "link_mass_1", "link_mass_2", "link_com_pos_1",
                   "link_com_pos_2", "link_moi", "max_vel_1", "max_vel_2"))

    @property
    def nvec(self) -> tuple[int, ...]:
        return (self.num_actions,)

    @property
    def max_episode_steps(self) -> int:
        """Steps per episode at most (the TimeLimit; terminated episodes end sooner;
        ``jaxwarp.core.episode_length``)."""
        return self.max_steps


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


def _acrobot_start(p: AcrobotParams, key_data: jax.Array, num_envs: int):
    names = ("theta1", "theta2", "dtheta1", "dtheta2")
    return {n: uniform_draw(key_data, num_envs, d, lo, hi)
            for d, (n, (lo, hi)) in enumerate(zip(names, ACROBOT_RESET))}


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


@partial(jax.jit, static_argnums=(0, 2))
def acrobot_reset(p: AcrobotParams, key_data: jax.Array, num_envs: int):
    """key_data: u32[2] -> (obs f32[envs, 1, 6], AcrobotState)."""
    num_envs = _check_reset_args(key_data, num_envs)
    state = _new_state(AcrobotState, _acrobot_start(p, key_data, num_envs), num_envs)
    return acrobot_observe(p, state), state


@partial(jax.jit, static_argnums=(0,), static_argnames="autoreset")
def acrobot_step(p: AcrobotParams, key_data: jax.Array, state: AcrobotState,
                 actions: jax.Array, autoreset: bool = True):
    """actions: i32[envs, 1, 1] in {0, 1, 2} (torque -1, 0, +1)."""
    a = _action_index(actions, state.timestep.shape[0], p.num_actions)
    moved, reward, terminated = _acrobot_dynamics(p, state, a)
    return _finish_step(p, key_data, state, moved, reward, terminated, _acrobot_start,
                        acrobot_observe, autoreset)


# ---------------------------------------------------------------------------
# Pendulum-v1 (discrete torques)
# ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class PendulumParams:
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
        _validate(self, "pendulum", ("max_steps",),
                  ("max_speed", "max_torque", "dt", "m", "l"))
        n = self.num_torque_levels
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
            raise ValueError(f"pendulum: num_torque_levels={n!r} is invalid; "
                             "expected an int >= 2")

    @property
    def num_actions(self) -> int:
        return self.num_torque_levels

    @property
    def nvec(self) -> tuple[int, ...]:
        return (self.num_torque_levels,)

    @property
    def max_episode_steps(self) -> int:
        """Steps per episode at most (the TimeLimit; Pendulum never terminates;
        ``jaxwarp.core.episode_length``)."""
        return self.max_steps

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


def _pendulum_start(p: PendulumParams, key_data: jax.Array, num_envs: int):
    (lo0, hi0), (lo1, hi1) = PENDULUM_RESET
    return dict(theta=uniform_draw(key_data, num_envs, 0, lo0, hi0),
                theta_dot=uniform_draw(key_data, num_envs, 1, lo1, hi1))


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


@partial(jax.jit, static_argnums=(0, 2))
def pendulum_reset(p: PendulumParams, key_data: jax.Array, num_envs: int):
    """key_data: u32[2] -> (obs f32[envs, 1, 3], PendulumState)."""
    num_envs = _check_reset_args(key_data, num_envs)
    state = _new_state(PendulumState, _pendulum_start(p, key_data, num_envs), num_envs)
    return pendulum_observe(p, state), state


@partial(jax.jit, static_argnums=(0,), static_argnames="autoreset")
def pendulum_step(p: PendulumParams, key_data: jax.Array, state: PendulumState,
                  actions: jax.Array, autoreset: bool = True):
    """actions: i32[envs, 1, 1] in [0, num_torque_levels) (see `PendulumParams.torques`)."""
    a = _action_index(actions, state.timestep.shape[0], p.num_actions)
    moved, reward, terminated = _pendulum_dynamics(p, state, a)
    return _finish_step(p, key_data, state, moved, reward, terminated, _pendulum_start,
                        pendulum_observe, autoreset)


# ---------------------------------------------------------------------------
# MountainCar-v0
# ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class MountainCarParams:
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
        _validate(self, "mountain_car", ("max_steps",), ("max_speed",))
        if not self.min_position < self.max_position:
            raise ValueError(f"mountain_car: min_position={self.min_position!r} must be < "
                             f"max_position={self.max_position!r}")

    @property
    def nvec(self) -> tuple[int, ...]:
        return (self.num_actions,)

    @property
    def max_episode_steps(self) -> int:
        """Steps per episode at most (the TimeLimit; terminated episodes end sooner;
        ``jaxwarp.core.episode_length``)."""
        return self.max_steps


@struct.dataclass
class MountainCarState:
    """position, velocity: f32[envs, 1]; timestep: i32[envs];
    episode_return: f32[envs, 1]."""

    position: jax.Array = state_field("f32")
    velocity: jax.Array = state_field("f32")
    timestep: jax.Array = state_field("i32", "env")
    episode_return: jax.Array = state_field("f32")


def _mountain_car_start(p: MountainCarParams, key_data: jax.Array, num_envs: int):
    (lo, hi), = MOUNTAIN_CAR_RESET
    return dict(position=uniform_draw(key_data, num_envs, 0, lo, hi),
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


@partial(jax.jit, static_argnums=(0, 2))
def mountain_car_reset(p: MountainCarParams, key_data: jax.Array, num_envs: int):
    """key_data: u32[2] -> (obs f32[envs, 1, 2], MountainCarState)."""
    num_envs = _check_reset_args(key_data, num_envs)
    state = _new_state(MountainCarState, _mountain_car_start(p, key_data, num_envs),
                       num_envs)
    return mountain_car_observe(p, state), state


@partial(jax.jit, static_argnums=(0,), static_argnames="autoreset")
def mountain_car_step(p: MountainCarParams, key_data: jax.Array, state: MountainCarState,
                      actions: jax.Array, autoreset: bool = True):
    """actions: i32[envs, 1, 1] in {0, 1, 2} (push left, none, right)."""
    a = _action_index(actions, state.timestep.shape[0], p.num_actions)
    moved, reward, terminated = _mountain_car_dynamics(p, state, a)
    return _finish_step(p, key_data, state, moved, reward, terminated, _mountain_car_start,
                        mountain_car_observe, autoreset)


# ---------------------------------------------------------------------------
# Spec: name -> (Params, reset, step, obs_dim, nvec) with default params
# (Pendulum's nvec follows `PendulumParams.num_torque_levels`; use `params.nvec`).
# ---------------------------------------------------------------------------
CLASSIC_CONTROL: dict[str, tuple[type, Callable, Callable, int, tuple[int, ...]]] = {
    "cartpole": (CartPoleParams, cartpole_reset, cartpole_step, 4, (2,)),
    "acrobot": (AcrobotParams, acrobot_reset, acrobot_step, 6, (3,)),
    "pendulum": (PendulumParams, pendulum_reset, pendulum_step, 3, (5,)),
    "mountain_car": (MountainCarParams, mountain_car_reset, mountain_car_step, 2, (3,)),
}
