"""What the two MPE envs share (not an env: no SPEC): state, physics, episode length.

``mpe_simple_spread`` (`mpe_simple_spread.py`) and ``mpe_simple_tag``
(`mpe_simple_tag.py`) are MPE's simple_spread and simple_tag as JaxMARL has
them, through the authoring contract. Same dynamics, observations, rewards,
episode length, reset ranges and discrete action decoding as JaxMARL's
``simple_spread_v3`` / ``simple_tag_v3`` (``jaxmarl/environments/mpe/simple.py``,
``simple_spread.py``, ``simple_tag.py``, ``default_params.py``; checked against
jaxmarl 0.2.0 by ``tests/test_mpe.py``), in jaxwarp's stacked layout: state
fields ``[envs, agents]`` instead of per-entity rows, ``obs: f32[envs, agents,
obs_dim]``, ``actions: i32[envs, agents, 1]``. The kernels are
``cuda/envs/mpe_simple_spread.h`` and ``cuda/envs/mpe_simple_tag.h``, written
against ``cuda/jaxwarp_env.h`` exactly like a user env, what they share in
``cuda/envs/_mpe.h`` (as this module is to the env modules); the pure-JAX
references in the env modules are their oracles.

Physics (JaxMARL's ``SimpleMPE._world_step``), per step of ``dt = 0.1``:

* action force ``u``: 0 none, 1 ``-x``, 2 ``+x``, 3 ``-y``, 4 ``+y``, times the
  agent's ``accel`` (JaxMARL's decoding is applied to any int);
* soft contact between colliding entities at distance ``d`` with radii sum
  ``d_min``: ``contact_force * delta / d * k * logaddexp(0, -(d - d_min) / k)``,
  ``k = contact_margin``;
* ``pos += vel dt``; ``vel = vel (1 - damping) + force / mass dt``; speed
  capped at ``max_speed`` where the env has one (simple_tag).

Episode length (param ``truncation``; there is no termination):

* ``"jaxmarl"`` (default): truncated when the step count *before* the step is
  ``>= max_steps`` (JaxMARL's ``done = state.step >= max_steps``), i.e. an
  episode lasts ``max_steps + 1`` steps (26 by default);
* ``"mpe2"``: truncated on the ``max_steps``-th step, as mpe2 / PettingZoo MPE
  with ``max_cycles=max_steps`` (25 by default). Random play over 25 steps
  instead of 26 changes returns too (simple_spread, uniform random actions:
  -26.3 instead of -27.5 per agent over 1000 episodes), so compare with the
  library whose counting you chose.

``params.max_episode_steps`` (and ``jaxwarp.core.episode_length(env)``) is that
number of steps under either convention. Finished envs restart inside
``step`` (positions uniform in ``[-1, 1)``, velocities 0) and the returned obs
is the new episode's first.

Each env module has its observation, its transition (forces, integration,
rewards) and its params; `reference` makes its jitted reset/step pair from
them and `env_spec` its `EnvSpec`.

Deviations from JaxMARL (layout, not behaviour): landmark ``l`` is stored in
slot ``l`` of the per-agent fields ``lm_x``, ``lm_y``, so ``num_landmarks <=
num_agents``; ``force_x``, ``force_y`` hold the last step's total force
(scratch between the kernel's phases); random draws are jaxwarp's
counter-based ones, not ``jax.random``'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxwarp.authoring import API_DIR, EnvSpec, agent_uniform, state_field
from jaxwarp.core import finish_step

F32 = np.float32


def check_int(env: str, name: str, v: Any, lo: int) -> None:
    """ValueError naming env and param unless v is an int >= lo."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{env}: {name}={v!r}; expected an int >= {lo}")


def check_positive(env: str, name: str, v: Any) -> None:
    """ValueError naming env and param unless v is a number > 0."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise ValueError(f"{env}: {name}={v!r}; expected a number > 0")


TRUNCATIONS = ("jaxmarl", "mpe2")  # MPE episode-length conventions (module docstring)


def check_episode(env: str, p: Any) -> None:
    """Checks ``truncation`` and ``max_steps`` (an int >= 1 under either
    convention: ``max_steps=0`` would read as episodes of no steps)."""
    if p.truncation not in TRUNCATIONS:
        raise ValueError(f"{env}: truncation={p.truncation!r}; expected one of {TRUNCATIONS} "
                         "(episodes of max_steps + 1 or max_steps steps)")
    check_int(env, "max_steps", p.max_steps, 1)


def episode_steps(p: Any) -> int:
    """Steps per episode: max_steps + 1 (JaxMARL) or max_steps (mpe2)."""
    return p.max_steps + 1 if p.truncation == "jaxmarl" else p.max_steps


class MPEParams:
    """Base of the MPE params dataclasses (no fields of its own): the episode
    length and the checks of the fields every MPE env has (``max_steps``,
    ``truncation``, ``dt``, ``damping``, ``contact_margin``, ``mass``)."""

    def _check_world(self, env: str, positive: tuple[str, ...]) -> None:
        """`check_episode`; ``dt``, ``contact_margin``, the fields `positive`
        and ``mass`` > 0; ``0 <= damping <= 1``. ValueError naming env and field."""
        check_episode(env, self)
        for name in ("dt", "contact_margin", *positive, "mass"):
            check_positive(env, name, getattr(self, name))
        if not 0.0 <= self.damping <= 1.0:
            raise ValueError(f"{env}: damping={self.damping!r}; expected 0 <= damping <= 1")

    @property
    def max_episode_steps(self) -> int:
        """Steps per episode (``jaxwarp.core.episode_length``): max_steps + 1
        with JaxMARL's truncation, max_steps with mpe2's."""
        return episode_steps(self)


def kernel_params(p: Any) -> dict[str, Any]:
    """The C++ Params: every field but ``truncation`` (a string), with
    ``max_steps`` replaced by ``max_episode_steps`` (`episode_steps`: the
    length under either convention), the spec's time_limit."""
    return {("max_episode_steps" if f.name == "max_steps" else f.name):
            (episode_steps(p) if f.name == "max_steps" else getattr(p, f.name))
            for f in dataclasses.fields(p) if f.name != "truncation"}


@struct.dataclass
class MPEState:
    """State of simple_spread / simple_tag (fields in the spec's order)."""

    x: jax.Array = state_field("f32")  # f32[envs, agents] position
    y: jax.Array = state_field("f32")  # f32[envs, agents]
    vx: jax.Array = state_field("f32")  # f32[envs, agents] velocity
    vy: jax.Array = state_field("f32")  # f32[envs, agents]
    # f32[envs, agents]: landmark l in slot l (< num_landmarks), else 0
    lm_x: jax.Array = state_field("f32")
    lm_y: jax.Array = state_field("f32")  # f32[envs, agents]
    # f32[envs, agents] total force of the last step (0 after a reset)
    force_x: jax.Array = state_field("f32")
    force_y: jax.Array = state_field("f32")  # f32[envs, agents]
    timestep: jax.Array = state_field("i32", "env")  # i32[envs] steps taken in this episode
    episode_return: jax.Array = state_field("f32")  # f32[envs, agents]


def fresh_episode(num_landmarks: int, key_data: jax.Array, num_envs: int, n: int) -> dict:
    """A new episode: the draws reset() makes in the headers."""

    def u(draw):  # a.uniform(draw, -1, 1): fmaf(u, 2, -1)
        return agent_uniform(key_data, num_envs, n, draw) * F32(2) + F32(-1)

    slot = jnp.arange(n)[None, :] < num_landmarks
    zeros = jnp.zeros((num_envs, n), jnp.float32)
    return dict(x=u(0), y=u(1), vx=zeros, vy=zeros,
                lm_x=jnp.where(slot, u(2), F32(0)), lm_y=jnp.where(slot, u(3), F32(0)),
                force_x=zeros, force_y=zeros)


def decode_actions(actions: jax.Array, accel: jax.Array) -> tuple[jax.Array, jax.Array]:
    """JaxMARL's ``_decode_discrete_action`` for i32[envs, agents, 1]."""
    m = actions[..., 0]
    sign = jnp.where(jnp.mod(m, 2) == 0, F32(1), F32(-1))
    u = jnp.where(m != 0, sign * accel, F32(0))
    return jnp.where(m <= 2, u, F32(0)), jnp.where(m <= 2, F32(0), u)


def _penetration(dist: jax.Array, dist_min, k) -> jax.Array:
    return jnp.logaddexp(F32(0), -(dist - dist_min) / F32(k)) * F32(k)


def contact(px, py, qx, qy, dist_min, mask, p) -> tuple[jax.Array, jax.Array]:
    """Force on entities p [envs, A] from entities q [envs, B], summed over q
    where mask [A, B] (or [envs, A, B]) holds."""
    dx = px[:, :, None] - qx[:, None, :]
    dy = py[:, :, None] - qy[:, None, :]
    dist = jnp.sqrt(dx * dx + dy * dy)
    pen = _penetration(dist, dist_min, p.contact_margin)
    cf = F32(p.contact_force)
    fx = jnp.where(mask, cf * dx / dist * pen, F32(0))
    fy = jnp.where(mask, cf * dy / dist * pen, F32(0))
    return fx.sum(-1), fy.sum(-1)


def integrate(p, s: MPEState, fx, fy, max_speed=None):
    """Semi-implicit Euler step of every agent: (x, y, vx, vy), f32[envs, N] each."""
    dt, keep = F32(p.dt), F32(1) - F32(p.damping)
    x = s.x + s.vx * dt
    y = s.y + s.vy * dt
    vx = s.vx * keep + fx / F32(p.mass) * dt
    vy = s.vy * keep + fy / F32(p.mass) * dt
    if max_speed is not None:
        speed = jnp.sqrt(vx * vx + vy * vy)
        over = speed > max_speed
        vx = jnp.where(over, vx / speed * max_speed, vx)
        vy = jnp.where(over, vy / speed * max_speed, vy)
    return x, y, vx, vy


def others_rel(v: jax.Array) -> jax.Array:
    """f32[envs, N] -> f32[envs, N, N-1]: v[j] - v[i] for j != i, by index."""
    n = v.shape[1]
    idx = np.array([[j for j in range(n) if j != i] for i in range(n)], np.int32).reshape(n,
                                                                                          n - 1)
    return v[:, idx] - v[:, :, None]


def landmarks_rel(v: jax.Array, lm: jax.Array, num_landmarks: int) -> jax.Array:
    """f32[envs, N, L]: lm[l] - v[i]."""
    return lm[:, None, :num_landmarks] - v[:, :, None]


def interleave(*parts: tuple[jax.Array, jax.Array]) -> jax.Array:
    """(x-part [envs, N, K], y-part) pairs -> [envs, N, sum 2K], x and y alternating."""
    out = []
    for px, py in parts:
        out.append(jnp.stack([px, py], axis=-1).reshape(px.shape[0], px.shape[1], -1))
    return jnp.concatenate(out, axis=-1)


Moved = tuple[tuple[jax.Array, jax.Array, jax.Array, jax.Array], tuple[jax.Array, jax.Array],
              jax.Array]


def reference(params_cls: type, observe: Callable[[Any, MPEState], jax.Array],
              transition: Callable[[Any, MPEState, jax.Array], Moved],
              num_landmarks: Callable[[Any], int]) -> tuple[Callable, Callable]:
    """The jitted pure-JAX ``(xxx_reset, xxx_step)`` of an MPE env, named
    after its ``xxx_observe``.

    Args:
        params_cls: the env's params dataclass.
        observe: its jitted ``xxx_observe(params, state) -> f32[envs, agents, obs_dim]``.
        transition: ``(params, state, actions i32[envs, agents, 1]) -> ((x, y, vx, vy),
            (force_x, force_y), reward)``, f32[envs, agents] each: the agents after
            one step, the total force on them and their rewards.
        num_landmarks: params -> the landmarks in use (slots of ``lm_x``, ``lm_y``).
    """

    def reset(p, key_data: jax.Array, num_envs: int):
        n = p.num_agents
        s = MPEState(**fresh_episode(num_landmarks(p), key_data, num_envs, n),
                     timestep=jnp.zeros((num_envs,), jnp.int32),
                     episode_return=jnp.zeros((num_envs, n), jnp.float32))
        return observe(p, s), s

    def step(p, key_data: jax.Array, s: MPEState, actions: jax.Array, autoreset: bool = True):
        (x, y, vx, vy), (fx, fy), reward = transition(p, s, actions)
        moved = dict(x=x, y=y, vx=vx, vy=vy, lm_x=s.lm_x, lm_y=s.lm_y, force_x=fx, force_y=fy)
        num_envs, n = s.x.shape
        never = jnp.zeros((num_envs,), bool)  # MPE episodes only truncate
        return finish_step(s, moved, fresh_episode(num_landmarks(p), key_data, num_envs, n),
                           reward, never, episode_steps(p), partial(observe, p), autoreset)

    obs = "f32[envs, agents, obs_dim]"
    reset.__doc__ = f"key_data: u32[2] -> (obs {obs}, MPEState)."
    step.__doc__ = (f"actions: i32[envs, agents, 1] (0 no-op, 1 left, 2 right, 3 down, 4 up) -> "
                    f"(obs {obs}, MPEState, reward f32[envs, agents], done bool[envs], info); "
                    "see `jaxwarp/envs/_mpe.py`.")
    for fn, kind in ((reset, "reset"), (step, "step")):
        fn.__name__ = fn.__qualname__ = observe.__name__.replace("observe", kind)
        fn.__module__ = observe.__module__
        fn.__annotations__.update(p=params_cls)
    return (partial(jax.jit, static_argnums=(0, 2))(reset),
            partial(jax.jit, static_argnums=0, static_argnames="autoreset")(step))


def env_spec(name: str, params_cls: type, obs_dim: Callable[[Any], int], reset: Callable,
             step: Callable, **more: Any) -> EnvSpec:
    """The `EnvSpec` of the MPE env ``name`` (kernel ``cuda/envs/<name>.h``):
    `MPEState`, ``params.num_agents`` agents, one action head of 5 choices,
    `kernel_params`; ``more``: the env's other `EnvSpec` fields."""
    return EnvSpec(name=name, header=API_DIR / "envs" / f"{name}.h", params_type=params_cls,
                   state_type=MPEState, num_agents=lambda p: p.num_agents, obs_dim=obs_dim,
                   nvec=lambda p: (5,), reference_reset=reset, reference_step=step,
                   kernel_params=kernel_params, time_limit="max_episode_steps",
                   global_state=all_observations, **more)


def render_view(p: Any) -> tuple[float, float, float, float]:
    """The square both MPE envs are drawn in (`EnvSpec.render_view`)."""
    return -1.5, 1.5, -1.5, 1.5


def all_observations(p: Any, obs: jax.Array, s: Any) -> jax.Array:
    """The global state of an MPE env: every agent's observation side by side,
    f32[envs, agents * obs_dim] (JaxMARL's MAPPO world state for MPE)."""
    return obs.reshape(obs.shape[0], -1)
