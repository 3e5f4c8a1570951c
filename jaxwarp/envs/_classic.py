"""What the four classic-control envs share (not an env: no SPEC).

CartPole (`cartpole.py`), Acrobot (`acrobot.py`), Pendulum (`pendulum.py`)
and MountainCar (`mountain_car.py`) are pure-JAX references of Gymnasium's
classic-control environments (checked against gymnasium 1.x,
`gymnasium/envs/classic_control/`), in jaxwarp's batched functional form:
one agent per env, state fields ``f32[envs, 1]``, ``obs: f32[envs, 1,
obs_dim]``, ``actions: i32[envs, 1, 1]``, ``reward: f32[envs, 1]``,
``done: bool[envs]``. Each env module ``xxx`` has:

* ``xxx_reset(params, key_data, num_envs) -> (obs, state)``;
* ``xxx_step(params, key_data, state, actions) -> (obs, state, reward, done, info)``
  with ``info = {"terminated": bool[envs], "truncated": bool[envs],
  "episode_return": f32[envs, 1]}``; finished envs restart inside the step
  from fresh starts drawn with its key, and the returned obs is then the new
  episode's first observation;
* ``xxx_observe(params, state) -> obs``.

``xxx_reset`` and ``xxx_step`` are made by `reference` below from the env's
state class, start draws, dynamics and observation; the params classes take
``nvec`` and ``max_episode_steps`` from `ClassicParams`, and `env_spec` makes
each ``SPEC``. Each env's kernel, ``cuda/envs/xxx.h``, is written against
``cuda/jaxwarp_env.h`` exactly as a user env would be, and built on first use
with the FFI handlers of ``ffi/env_ffi.cc`` and a layout header generated from
its ``SPEC`` (`jaxwarp.authoring.build_env`, cached).

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

Differences from Gymnasium shared by the four (each env's module lists its
own):

* **float32.** Gymnasium integrates in float64 (Acrobot even resets to
  float32 values and then integrates in float64) and casts observations to
  float32; here every operation is float32 with float32 constants (a product
  or quotient of Gymnasium's constants is folded in float64 first, then
  rounded once). One step from the same state agrees with Gymnasium to about
  1e-6 relative (see ``tests/test_classic_control.py`` for the tolerances);
  trajectories of the chaotic envs (Acrobot) drift apart over many steps.
* **sin/cos** use jaxwarp's fixed polynomial (`jaxwarp.core.sincos_fixed`,
  ~1 ulp) so the C++ kernels can reproduce the reference bit for bit.
* Options Gymnasium exposes as attributes/kwargs are fixed to their
  defaults, and so are the reset ranges (no ``options`` bounds).

Random draws (the C++ kernels reproduce them bit for bit): draw ``d`` of env
``e`` is ``u = uniform01(x0)`` with ``(x0, x1) = threefry2x32(key_data, (e, d))``
and ``uniform01(b) = f32(b >> 8) * 2**-24``; a value in ``[low, high)`` is
``min(u * span, span) + f32(low)`` with ``span = f32(high) - f32(low)``, every
operation rounded in float32 (the min, a no-op on the value, keeps XLA from
contracting the multiply-add, so the bits do not depend on the program).
Each env's module lists its draws (``XXX_RESET``: the range of each drawn
state variable, in draw order).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry2x32_p

from jaxwarp.authoring import API_DIR, EnvSpec
from jaxwarp.core import finish_step
from jaxwarp.params_check import check_num_envs

F32 = np.float32


def validate(obj: Any, env: str, ints: tuple[str, ...], positive: tuple[str, ...]) -> None:
    """Params checks: the fields `ints` are ints >= 1, the fields `positive`
    finite numbers > 0; ValueError naming the env and field otherwise."""
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


def check_holds_reset(env: str, field: str, value: float, ok: bool, expected: str) -> None:
    """ValueError naming ``field`` unless ``ok``: the observation bound that the
    field sets must hold Gymnasium's fixed reset range (``expected`` says how),
    or the first observations would fall outside the observation space."""
    if not ok:
        raise ValueError(f"{env}: {field}={value!r} is invalid; expected {expected}")


class ClassicParams:
    """Base of the four params dataclasses (no fields of its own): what their
    ``num_actions`` and ``max_steps`` imply."""

    @property
    def nvec(self) -> tuple[int, ...]:
        """One action head of ``num_actions`` choices."""
        return (self.num_actions,)

    @property
    def max_episode_steps(self) -> int:
        """Steps per episode at most (the TimeLimit ``max_steps``; an episode that
        terminates ends sooner; ``jaxwarp.core.episode_length``)."""
        return self.max_steps


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


def uniform_start(key_data: jax.Array, num_envs: int, names: Sequence[str],
                  ranges: Sequence[tuple[float, float]]) -> dict[str, jax.Array]:
    """{name: f32[envs, 1]}: draw ``d`` of every env for ``names[d]``, uniform in
    ``ranges[d]`` (an env's ``XXX_RESET``)."""
    return {n: uniform_draw(key_data, num_envs, d, lo, hi)
            for d, (n, (lo, hi)) in enumerate(zip(names, ranges, strict=True))}


def check_reset_args(key_data: jax.Array, num_envs: int) -> int:
    """num_envs as an int, after checking it and key_data (u32[2])."""
    num_envs = check_num_envs(num_envs)
    if key_data.dtype != jnp.uint32 or tuple(key_data.shape) != (2,):
        raise ValueError(f"key_data must be u32[2] (jax.random.key_data of one key); got "
                         f"{key_data.dtype}{list(key_data.shape)}")
    return int(num_envs)


def action_index(actions: jax.Array, num_envs: int, num_actions: int) -> jax.Array:
    """i32[envs, 1]: the clamped action of the single agent."""
    expected = (num_envs, 1, 1)
    if not hasattr(actions, "shape") or tuple(actions.shape) != expected:
        raise ValueError(f"actions must have shape {expected} (envs, agents=1, 1); got "
                         f"{getattr(actions, 'shape', type(actions).__name__)}")
    if actions.dtype != jnp.int32:
        raise TypeError(f"actions must have dtype int32; got {actions.dtype}")
    return jnp.clip(actions[:, :, 0], 0, num_actions - 1)


def new_state(state_cls: type, fields: dict[str, jax.Array], num_envs: int) -> Any:
    """A first state: `fields` (f32[envs, 1] each), timestep 0, episode_return 0."""
    return state_cls(**fields, timestep=jnp.zeros((num_envs,), jnp.int32),
                     episode_return=jnp.zeros((num_envs, 1), jnp.float32))


Start = Callable[[Any, jax.Array, int], dict[str, jax.Array]]


def uniform_fields(names: Sequence[str], ranges: Sequence[tuple[float, float]]) -> Start:
    """The `Start` of an env whose every fresh start draws field ``names[d]``
    uniform in ``ranges[d]`` whatever its params (`uniform_start`)."""

    def start(p: Any, key_data: jax.Array, num_envs: int) -> dict[str, jax.Array]:
        return uniform_start(key_data, num_envs, names, ranges)

    return start


Dynamics = Callable[[Any, Any, jax.Array], tuple[dict[str, jax.Array], jax.Array, jax.Array]]


def reference(name: str, params_cls: type, state_cls: type, start: Start, dynamics: Dynamics,
              observe: Callable[[Any, Any], jax.Array],
              actions_doc: str) -> tuple[Callable, Callable]:
    """The jitted pure-JAX ``(xxx_reset, xxx_step)`` of a classic-control env.

    Args:
        name: the env's name, prefix of the functions' names (``cartpole``).
        params_cls, state_cls: its params and state dataclasses.
        start: ``(params, key_data, num_envs) -> {field: f32[envs, 1]}``, the
            fresh start of every env (its draws of ``XXX_RESET``).
        dynamics: ``(params, state, a: i32[envs, 1]) -> (fields, reward f32[envs, 1],
            terminated bool[envs])``, one transition of the clamped actions.
        observe: the env's jitted ``xxx_observe``.
        actions_doc: what the action values mean, for the step's docstring
            (``"in {0, 1} (push left, push right)"``).
    """

    def reset(p, key_data: jax.Array, num_envs: int):
        num_envs = check_reset_args(key_data, num_envs)
        state = new_state(state_cls, start(p, key_data, num_envs), num_envs)
        return observe(p, state), state

    def step(p, key_data: jax.Array, state, actions: jax.Array, autoreset: bool = True):
        if key_data.dtype != jnp.uint32 or tuple(key_data.shape) != (2,):
            raise ValueError(f"key_data must be u32[2]; got {key_data.dtype}"
                             f"{list(key_data.shape)}")
        num_envs = state.timestep.shape[0]
        a = action_index(actions, num_envs, p.num_actions)
        moved, reward, terminated = dynamics(p, state, a)
        return finish_step(state, moved, start(p, key_data, num_envs), reward, terminated,
                           p.max_steps, partial(observe, p), autoreset)

    obs = f"f32[envs, 1, {params_cls.obs_dim}]"
    reset.__doc__ = f"key_data: u32[2] -> (obs {obs}, {state_cls.__name__})."
    step.__doc__ = (f"actions: i32[envs, 1, 1] {actions_doc} -> (obs {obs}, {state_cls.__name__}, "
                    "reward f32[envs, 1], done bool[envs], info); see the module docstring.")
    for fn, kind in ((reset, "reset"), (step, "step")):
        fn.__name__ = fn.__qualname__ = f"{name}_{kind}"
        fn.__module__ = f"jaxwarp.envs.{name}"
        fn.__annotations__.update(p=params_cls)
    step.__annotations__.update(state=state_cls)
    return (partial(jax.jit, static_argnums=(0, 2))(reset),
            partial(jax.jit, static_argnums=(0,), static_argnames="autoreset")(step))


def env_spec(name: str, params_cls: type, state_cls: type, reset: Callable, step: Callable,
             **more: Any) -> EnvSpec:
    """The `EnvSpec` of the classic-control env ``name`` (kernel
    ``cuda/envs/<name>.h``): one agent, ``params.obs_dim`` observations, one
    action head ``params.nvec``, the state fields of `state_cls`; ``more``:
    the env's other `EnvSpec` fields (``obs_bounds``, ``kernel_params``)."""
    return EnvSpec(name=name, header=API_DIR / "envs" / f"{name}.h", params_type=params_cls,
                   state_type=state_cls, num_agents=lambda p: 1, obs_dim=lambda p: p.obs_dim,
                   nvec=lambda p: p.nvec, reference_reset=reset, reference_step=step,
                   time_limit="max_steps", **more)
