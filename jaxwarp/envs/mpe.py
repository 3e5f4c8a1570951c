"""MPE simple_spread and simple_tag as JaxMARL has them, through the authoring contract.

Same dynamics, observations, rewards, episode length, reset ranges and
discrete action decoding as JaxMARL's ``simple_spread_v3`` / ``simple_tag_v3``
(``jaxmarl/environments/mpe/simple.py``, ``simple_spread.py``,
``simple_tag.py``, ``default_params.py``; checked against jaxmarl 0.2.0 by
``tests/test_mpe.py``), in jaxwarp's stacked layout: state fields
``[envs, agents]`` instead of per-entity rows, ``obs: f32[envs, agents,
obs_dim]``, ``actions: i32[envs, agents, 1]``. The kernels are
``cuda/envs/mpe_simple_spread.h`` (and ``mpe_simple_tag.h``), written against
``cuda/jaxwarp_env.h`` exactly like a user env; the pure-JAX references here
are their oracles.

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

Deviations from JaxMARL (layout, not behaviour): landmark ``l`` is stored in
slot ``l`` of the per-agent fields ``lm_x``, ``lm_y``, so ``num_landmarks <=
num_agents``; ``force_x``, ``force_y`` hold the last step's total force
(scratch between the kernel's phases); random draws are jaxwarp's
counter-based ones, not ``jax.random``'s.

| simple_spread | |
|---|---|
| observation (f32[envs, N, 4 + 2 L + 4 (N - 1)]) | vel, pos, landmark - pos (L), other agent - pos (N - 1, by index), comm (2 (N - 1) zeros) |
| action (i32[envs, N, 1]) | 0 no-op, 1 left, 2 right, 3 down, 4 up |
| reward | ``local_ratio * -(agents collided with) + (1 - local_ratio) * -sum_l min_i dist(agent i, landmark l)`` |
| end | truncated after max_steps + 1 = 26 steps (``truncation="mpe2"``: max_steps = 25 steps) |

| simple_tag (agents 0..A-1 adversaries, A..N-1 good; G = N - A) | |
|---|---|
| observation (f32[envs, N, 4 + 2 L + 2 (N - 1) + 2 G]) | vel, pos, obstacle - pos, other agent - pos, velocity of every other good agent (by index); good agents' rows end in 2 zeros (mpe2's are 2 shorter: `MPESimpleTag.agent_obs_dims`) |
| action (i32[envs, N, 1]) | as simple_spread; accel 3 (adversary) / 4 (good), max speed 1.0 / 1.3 |
| reward | adversary: +10 per adversary/good contact (any); good: -10 per adversary touching it, minus the boundary penalty |
| end | truncated after max_steps + 1 = 26 steps (``truncation="mpe2"``: max_steps = 25 steps) |

simple_tag's rewards and observations follow mpe2 (``simple_tag.py``); JaxMARL
agrees with one good agent (the default) and differs with more (each good
agent gets the last good agent's contacts, adversaries see only the last good
agent's velocity, good agents see no velocities): docs/envs/mpe_simple_tag.md.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxwarp.authoring import API_DIR, EnvSpec, agent_uniform, env_class, state_field
from jaxwarp.core import auto_reset, reset_mask

F32 = np.float32


# ---------------------------------------------------------------------------
# Params and state.
# ---------------------------------------------------------------------------
def _check_int(env: str, name: str, v, lo: int) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{env}: {name}={v!r}; expected an int >= {lo}")


def _check_positive(env: str, name: str, v) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise ValueError(f"{env}: {name}={v!r}; expected a number > 0")


TRUNCATIONS = ("jaxmarl", "mpe2")  # MPE episode-length conventions (module docstring)


def _check_episode(env: str, p) -> None:
    if p.truncation not in TRUNCATIONS:
        raise ValueError(f"{env}: truncation={p.truncation!r}; expected one of {TRUNCATIONS} "
                         "(episodes of max_steps + 1 or max_steps steps)")
    _check_int(env, "max_steps", p.max_steps, 0 if p.truncation == "jaxmarl" else 1)


def _episode_steps(p) -> int:
    """Steps per episode: max_steps + 1 (JaxMARL) or max_steps (mpe2)."""
    return p.max_steps + 1 if p.truncation == "jaxmarl" else p.max_steps


def _kernel_params(p) -> dict:
    """The C++ Params: every field but ``truncation`` (a string). The headers
    truncate when the step count before the step reaches ``max_steps``
    (JaxMARL's test), so they get ``max_episode_steps - 1`` for either
    convention (``max_steps`` itself with JaxMARL's)."""
    out = {f.name: getattr(p, f.name) for f in dataclasses.fields(p) if f.name != "truncation"}
    out["max_steps"] = _episode_steps(p) - 1
    return out


@dataclasses.dataclass(frozen=True)
class MPESimpleSpreadParams:
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
        _check_int(env, "num_agents", self.num_agents, 1)
        _check_int(env, "num_landmarks", self.num_landmarks, 0)
        if self.num_landmarks > self.num_agents:
            raise ValueError(f"{env}: num_landmarks={self.num_landmarks} > num_agents="
                             f"{self.num_agents}; jaxwarp stores landmark l in agent slot l, "
                             "so at most num_agents landmarks are supported")
        _check_episode(env, self)
        if not 0.0 <= self.local_ratio <= 1.0:
            raise ValueError(f"{env}: local_ratio={self.local_ratio!r}; expected 0 <= "
                             "local_ratio <= 1")
        for name in ("dt", "contact_margin", "agent_size", "mass"):
            _check_positive(env, name, getattr(self, name))
        if not 0.0 <= self.damping <= 1.0:
            raise ValueError(f"{env}: damping={self.damping!r}; expected 0 <= damping <= 1")

    @property
    def max_episode_steps(self) -> int:
        """Steps per episode (``jaxwarp.core.episode_length``): max_steps + 1
        with JaxMARL's truncation, max_steps with mpe2's."""
        return _episode_steps(self)


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




# ---------------------------------------------------------------------------
# Shared pieces of the references.
# ---------------------------------------------------------------------------
def _fresh(num_landmarks: int, key_data: jax.Array, num_envs: int, n: int) -> dict:
    """A new episode: the draws reset() makes in the headers."""

    def u(draw):  # a.uniform(draw, -1, 1): fmaf(u, 2, -1)
        return agent_uniform(key_data, num_envs, n, draw) * F32(2) + F32(-1)

    slot = jnp.arange(n)[None, :] < num_landmarks
    zeros = jnp.zeros((num_envs, n), jnp.float32)
    return dict(x=u(0), y=u(1), vx=zeros, vy=zeros,
                lm_x=jnp.where(slot, u(2), F32(0)), lm_y=jnp.where(slot, u(3), F32(0)),
                force_x=zeros, force_y=zeros)


def _decode(actions: jax.Array, accel: jax.Array) -> tuple[jax.Array, jax.Array]:
    """JaxMARL's ``_decode_discrete_action`` for i32[envs, agents, 1]."""
    m = actions[..., 0]
    sign = jnp.where(jnp.mod(m, 2) == 0, F32(1), F32(-1))
    u = jnp.where(m != 0, sign * accel, F32(0))
    return jnp.where(m <= 2, u, F32(0)), jnp.where(m <= 2, F32(0), u)


def _penetration(dist: jax.Array, dist_min, k) -> jax.Array:
    return jnp.logaddexp(F32(0), -(dist - dist_min) / F32(k)) * F32(k)


def _contact(px, py, qx, qy, dist_min, mask, p) -> tuple[jax.Array, jax.Array]:
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


def _integrate(p, s: MPEState, fx, fy, max_speed=None):
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


def _others(v: jax.Array) -> jax.Array:
    """f32[envs, N] -> f32[envs, N, N-1]: v[j] - v[i] for j != i, by index."""
    n = v.shape[1]
    idx = np.array([[j for j in range(n) if j != i] for i in range(n)], np.int32).reshape(n,
                                                                                          n - 1)
    return v[:, idx] - v[:, :, None]


def _landmarks_rel(v: jax.Array, lm: jax.Array, num_landmarks: int) -> jax.Array:
    """f32[envs, N, L]: lm[l] - v[i]."""
    return lm[:, None, :num_landmarks] - v[:, :, None]


def _interleave(*parts: tuple[jax.Array, jax.Array]) -> jax.Array:
    """(x-part [envs, N, K], y-part) pairs -> [envs, N, sum 2K], x and y alternating."""
    out = []
    for px, py in parts:
        out.append(jnp.stack([px, py], axis=-1).reshape(px.shape[0], px.shape[1], -1))
    return jnp.concatenate(out, axis=-1)


def _finish(p, key_data, s: MPEState, moved: dict, reward: jax.Array, observe, num_landmarks,
            autoreset: bool = True):
    """Episode bookkeeping and masked auto-reset, as the generated kernels do."""
    t = s.timestep + 1
    episode_return = jnp.where((t == 1)[:, None], F32(0), s.episode_return) + reward
    truncated = t >= _episode_steps(p)  # JaxMARL: s.timestep >= max_steps
    terminated = jnp.zeros_like(truncated)
    done = truncated
    fresh = _fresh(num_landmarks, key_data, s.x.shape[0], s.x.shape[1])
    reset = reset_mask(done, autoreset)
    pick = auto_reset(reset, {k: fresh[k] for k in moved}, moved)
    new = MPEState(**pick, timestep=jnp.where(reset, 0, t), episode_return=episode_return)
    info = {"terminated": terminated, "truncated": truncated, "episode_return": episode_return}
    return observe(p, new), new, reward, done, info


# ---------------------------------------------------------------------------
# simple_spread.
# ---------------------------------------------------------------------------
def spread_obs_dim(p: MPESimpleSpreadParams) -> int:
    return 4 + 2 * p.num_landmarks + 4 * (p.num_agents - 1)


@functools.partial(jax.jit, static_argnums=0)
def spread_observe(p: MPESimpleSpreadParams, s: MPEState) -> jax.Array:
    """obs: f32[envs, agents, spread_obs_dim(p)]."""
    e, n = s.x.shape
    own = jnp.stack([s.vx, s.vy, s.x, s.y], axis=-1)
    rel = _interleave((_landmarks_rel(s.x, s.lm_x, p.num_landmarks),
                       _landmarks_rel(s.y, s.lm_y, p.num_landmarks)),
                      (_others(s.x), _others(s.y)))
    comm = jnp.zeros((e, n, 2 * (n - 1)), jnp.float32)
    return jnp.concatenate([own, rel, comm], axis=-1)


@functools.partial(jax.jit, static_argnums=(0, 2))
def spread_reset(p: MPESimpleSpreadParams, key_data: jax.Array, num_envs: int):
    n = p.num_agents
    s = MPEState(**_fresh(p.num_landmarks, key_data, num_envs, n),
                 timestep=jnp.zeros((num_envs,), jnp.int32),
                 episode_return=jnp.zeros((num_envs, n), jnp.float32))
    return spread_observe(p, s), s


@functools.partial(jax.jit, static_argnums=0, static_argnames="autoreset")
def spread_step(p: MPESimpleSpreadParams, key_data: jax.Array, s: MPEState,
                actions: jax.Array, autoreset: bool = True):
    n, nl = p.num_agents, p.num_landmarks
    ux, uy = _decode(actions, F32(p.accel))
    dist_min = F32(p.agent_size) + F32(p.agent_size)
    not_self = ~np.eye(n, dtype=bool)
    cx, cy = _contact(s.x, s.y, s.x, s.y, dist_min, not_self, p)
    fx, fy = cx + ux, cy + uy
    x, y, vx, vy = _integrate(p, s, fx, fy)
    # Rewards on the new positions.
    dx, dy = x[:, :, None] - x[:, None, :], y[:, :, None] - y[:, None, :]
    hit = (jnp.sqrt(dx * dx + dy * dy) < dist_min) & not_self
    collisions = hit.sum(-1).astype(jnp.int32)
    lx, ly = s.lm_x[:, None, :nl] - x[:, :, None], s.lm_y[:, None, :nl] - y[:, :, None]
    nearest = jnp.sqrt(lx * lx + ly * ly).min(axis=1)  # [envs, L]
    shared = (-nearest).sum(-1)
    reward = ((-collisions).astype(jnp.float32) * F32(p.local_ratio)
              + shared[:, None] * (F32(1) - F32(p.local_ratio)))
    moved = dict(x=x, y=y, vx=vx, vy=vy, lm_x=s.lm_x, lm_y=s.lm_y, force_x=fx, force_y=fy)
    return _finish(p, key_data, s, moved, reward, spread_observe, nl, autoreset)


SPREAD_SPEC = EnvSpec(
    name="mpe_simple_spread",
    header=API_DIR / "envs" / "mpe_simple_spread.h",
    params_type=MPESimpleSpreadParams,
    state_type=MPEState,
    fields=None,  # declared on the state dataclass (state_field)
    num_agents=lambda p: p.num_agents,
    obs_dim=spread_obs_dim,
    nvec=lambda p: (5,),
    reference_reset=spread_reset,
    reference_step=spread_step,
    kernel_params=_kernel_params,
)


MPESimpleSpread = env_class(SPREAD_SPEC)  # JaxMARL simple_spread_v3 (discrete)



# ---------------------------------------------------------------------------
# simple_tag.
# ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class MPESimpleTagParams:
    """JaxMARL ``SimpleTagMPE`` defaults. Agents 0 .. num_adversaries-1 are
    the adversaries, the rest the good agents (JaxMARL's order)."""

    num_good_agents: int = 1
    num_adversaries: int = 3
    num_obs: int = 2  # obstacles (landmarks); <= num_good_agents + num_adversaries
    max_steps: int = 25  # an episode has max_steps + 1 steps, as in JaxMARL (see truncation)
    # "jaxmarl": max_steps + 1 steps per episode; "mpe2": max_steps (max_cycles)
    truncation: str = "jaxmarl"
    dt: float = 0.1
    damping: float = 0.25
    contact_force: float = 100.0
    contact_margin: float = 1e-3
    adversary_size: float = 0.075
    good_size: float = 0.05
    obs_size: float = 0.2
    adversary_accel: float = 3.0
    good_accel: float = 4.0
    adversary_max_speed: float = 1.0
    good_max_speed: float = 1.3
    mass: float = 1.0

    def __post_init__(self) -> None:
        env = "mpe_simple_tag"
        _check_int(env, "num_good_agents", self.num_good_agents, 1)
        _check_int(env, "num_adversaries", self.num_adversaries, 1)
        _check_int(env, "num_obs", self.num_obs, 0)
        if self.num_obs > self.num_good_agents + self.num_adversaries:
            raise ValueError(f"{env}: num_obs={self.num_obs} > num_good_agents + "
                             f"num_adversaries={self.num_good_agents + self.num_adversaries}; "
                             "jaxwarp stores obstacle l in agent slot l, so at most "
                             "num_agents obstacles are supported")
        _check_episode(env, self)
        for name in ("dt", "contact_margin", "adversary_size", "good_size", "obs_size", "mass",
                     "adversary_max_speed", "good_max_speed"):
            _check_positive(env, name, getattr(self, name))
        if not 0.0 <= self.damping <= 1.0:
            raise ValueError(f"{env}: damping={self.damping!r}; expected 0 <= damping <= 1")

    @property
    def max_episode_steps(self) -> int:
        """Steps per episode (``jaxwarp.core.episode_length``): max_steps + 1
        with JaxMARL's truncation, max_steps with mpe2's."""
        return _episode_steps(self)

    @property
    def num_agents(self) -> int:
        return self.num_adversaries + self.num_good_agents


def tag_obs_dim(p: MPESimpleTagParams) -> int:
    """An adversary's observation width (mpe2's); good agents' rows end in 2 zeros."""
    return 4 + 2 * p.num_obs + 2 * (p.num_agents - 1) + 2 * p.num_good_agents


def tag_agent_obs_dims(p: MPESimpleTagParams) -> tuple[int, ...]:
    """Each agent's own observation width, as mpe2's spaces: `tag_obs_dim` for
    adversaries, 2 fewer for good agents (the rest of their row is 0)."""
    d = tag_obs_dim(p)
    return tuple(d if i < p.num_adversaries else d - 2 for i in range(p.num_agents))


@functools.partial(jax.jit, static_argnums=0)
def tag_observe(p: MPESimpleTagParams, s: MPEState) -> jax.Array:
    """obs: f32[envs, agents, tag_obs_dim(p)]; good agents' last 2 are 0.

    Row i: vel, pos, obstacle - pos, other agent - pos (by index), then the
    velocity of every good agent other than i (by index), as mpe2.
    """
    n, na = p.num_agents, p.num_adversaries
    own = jnp.stack([s.vx, s.vy, s.x, s.y], axis=-1)
    rel = _interleave((_landmarks_rel(s.x, s.lm_x, p.num_obs),
                       _landmarks_rel(s.y, s.lm_y, p.num_obs)),
                      (_others(s.x), _others(s.y)))
    # seen[i]: the good agents agent i sees the velocity of, padded with -1
    # (a good agent does not list itself).
    seen = np.array([[j for j in range(na, n) if j != i] + [-1] * (i >= na)
                     for i in range(n)], np.int32).reshape(n, p.num_good_agents)
    pad = seen < 0
    vel = _interleave((jnp.where(pad, F32(0), s.vx[:, seen]),
                       jnp.where(pad, F32(0), s.vy[:, seen])))
    return jnp.concatenate([own, rel, vel], axis=-1)


@functools.partial(jax.jit, static_argnums=(0, 2))
def tag_reset(p: MPESimpleTagParams, key_data: jax.Array, num_envs: int):
    n = p.num_agents
    s = MPEState(**_fresh(p.num_obs, key_data, num_envs, n),
                 timestep=jnp.zeros((num_envs,), jnp.int32),
                 episode_return=jnp.zeros((num_envs, n), jnp.float32))
    return tag_observe(p, s), s


def _bound(x: jax.Array) -> jax.Array:
    """JaxMARL's ``map_bounds_reward`` of |coordinate| x."""
    return jnp.where(x < F32(0.9), F32(0),
                     jnp.where(x < F32(1), (x - F32(0.9)) * F32(10),
                               jnp.minimum(jnp.exp(F32(2) * x - F32(2)), F32(10))))


@functools.partial(jax.jit, static_argnums=0, static_argnames="autoreset")
def tag_step(p: MPESimpleTagParams, key_data: jax.Array, s: MPEState, actions: jax.Array,
             autoreset: bool = True):
    n, na, nl = p.num_agents, p.num_adversaries, p.num_obs
    adversary = np.arange(n) < na
    accel = jnp.asarray(np.where(adversary, p.adversary_accel, p.good_accel), jnp.float32)
    size = jnp.asarray(np.where(adversary, p.adversary_size, p.good_size), jnp.float32)
    max_speed = jnp.asarray(np.where(adversary, p.adversary_max_speed, p.good_max_speed),
                            jnp.float32)
    ux, uy = _decode(actions, accel)
    not_self = ~np.eye(n, dtype=bool)
    ax, ay = _contact(s.x, s.y, s.x, s.y, size[:, None] + size[None, :], not_self, p)
    ox, oy = _contact(s.x, s.y, s.lm_x[:, :nl], s.lm_y[:, :nl],
                      (size[:, None] + F32(p.obs_size)), np.ones((n, nl), bool), p)
    fx, fy = ax + ox + ux, ay + oy + uy
    x, y, vx, vy = _integrate(p, s, fx, fy, max_speed)
    # hit[g, b]: good agent g touches adversary b (on the new positions).
    dx = x[:, na:, None] - x[:, None, :na]
    dy = y[:, na:, None] - y[:, None, :na]
    hit = jnp.sqrt(dx * dx + dy * dy) < F32(p.good_size) + F32(p.adversary_size)
    total = hit.sum((1, 2)).astype(jnp.int32)
    # A good agent's own contacts (mpe2; JaxMARL's clamped index gives every
    # good agent the last good agent's).
    mine = hit.sum(-1).astype(jnp.int32)  # [envs, good]
    good_rew = (-10 * mine).astype(jnp.float32) - (_bound(jnp.abs(x[:, na:]))
                                                    + _bound(jnp.abs(y[:, na:])))
    adv_rew = jnp.broadcast_to((10 * total).astype(jnp.float32)[:, None], (x.shape[0], na))
    reward = jnp.concatenate([adv_rew, good_rew], axis=1)
    moved = dict(x=x, y=y, vx=vx, vy=vy, lm_x=s.lm_x, lm_y=s.lm_y, force_x=fx, force_y=fy)
    return _finish(p, key_data, s, moved, reward, tag_observe, nl, autoreset)


TAG_SPEC = EnvSpec(
    name="mpe_simple_tag",
    header=API_DIR / "envs" / "mpe_simple_tag.h",
    params_type=MPESimpleTagParams,
    state_type=MPEState,
    fields=None,  # declared on the state dataclass (state_field)
    num_agents=lambda p: p.num_agents,
    obs_dim=tag_obs_dim,
    nvec=lambda p: (5,),
    reference_reset=tag_reset,
    reference_step=tag_step,
    kernel_params=_kernel_params,
    policy_groups=lambda p: {"adversary": np.arange(p.num_adversaries),
                             "agent": np.arange(p.num_adversaries, p.num_agents)},
)


class MPESimpleTag(env_class(TAG_SPEC)):  # type: ignore[misc]
    """Batched mpe_simple_tag (mpe2's simple_tag_v3, discrete actions); see
    the module docstring and docs/envs/mpe_simple_tag.md."""

    @property
    def agent_names(self) -> tuple[str, ...]:
        """mpe2's names: ``adversary_0 .. adversary_{A-1}``, ``agent_0 .. agent_{G-1}``."""
        p = self.params
        return tuple([f"adversary_{i}" for i in range(p.num_adversaries)]
                     + [f"agent_{i}" for i in range(p.num_good_agents)])

    @property
    def agent_obs_dims(self) -> tuple[int, ...]:
        """Each agent's own observation width (`tag_agent_obs_dims`): the
        leading entries of its row of ``obs``; the rest are 0."""
        return tag_agent_obs_dims(self.params)
