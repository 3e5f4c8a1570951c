"""MPE simple_tag (mpe2's simple_tag_v3): adversaries chase faster good agents.

Its params, pure-JAX reference, spec and env (mpe2's / JaxMARL's
``simple_tag_v3``, discrete actions). Adversaries chase good agents among
obstacles. The kernel is ``cuda/envs/mpe_simple_tag.h``; the physics, the state
and the episode length (param ``truncation``) that both MPE envs share are in
`jaxwarp/envs/_mpe.py`.

| mpe_simple_tag (agents 0..A-1 adversaries, A..N-1 good; G = N - A) | |
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

from jaxwarp.authoring import env_class
from jaxwarp.envs._mpe import (F32, MPEParams, MPEState, check_int, contact, decode_actions,
                               env_spec, integrate, interleave, landmarks_rel, others_rel,
                               reference, render_view)
from jaxwarp.render import DARK, GREEN, RED, Canvas


@dataclasses.dataclass(frozen=True)
class MPESimpleTagParams(MPEParams):
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
        check_int(env, "num_good_agents", self.num_good_agents, 1)
        check_int(env, "num_adversaries", self.num_adversaries, 1)
        check_int(env, "num_obs", self.num_obs, 0)
        if self.num_obs > self.num_good_agents + self.num_adversaries:
            raise ValueError(f"{env}: num_obs={self.num_obs} > num_good_agents + "
                             f"num_adversaries={self.num_good_agents + self.num_adversaries}; "
                             "jaxwarp stores obstacle l in agent slot l, so at most "
                             "num_agents obstacles are supported")
        self._check_world(env, ("adversary_size", "good_size", "obs_size", "adversary_max_speed",
                                "good_max_speed"))

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
    rel = interleave((landmarks_rel(s.x, s.lm_x, p.num_obs),
                      landmarks_rel(s.y, s.lm_y, p.num_obs)),
                     (others_rel(s.x), others_rel(s.y)))
    # seen[i]: the good agents agent i sees the velocity of, padded with -1
    # (a good agent does not list itself).
    seen = np.array([[j for j in range(na, n) if j != i] + [-1] * (i >= na)
                     for i in range(n)], np.int32).reshape(n, p.num_good_agents)
    pad = seen < 0
    vel = interleave((jnp.where(pad, F32(0), s.vx[:, seen]),
                      jnp.where(pad, F32(0), s.vy[:, seen])))
    return jnp.concatenate([own, rel, vel], axis=-1)


def _bound(x: jax.Array) -> jax.Array:
    """JaxMARL's ``map_bounds_reward`` of |coordinate| x."""
    return jnp.where(x < F32(0.9), F32(0),
                     jnp.where(x < F32(1), (x - F32(0.9)) * F32(10),
                               jnp.minimum(jnp.exp(F32(2) * x - F32(2)), F32(10))))


def _tag_transition(p: MPESimpleTagParams, s: MPEState, actions: jax.Array):
    """Physics and rewards of one step (`jaxwarp.envs._mpe.reference`)."""
    n, na, nl = p.num_agents, p.num_adversaries, p.num_obs
    adversary = np.arange(n) < na
    accel = jnp.asarray(np.where(adversary, p.adversary_accel, p.good_accel), jnp.float32)
    size = jnp.asarray(np.where(adversary, p.adversary_size, p.good_size), jnp.float32)
    max_speed = jnp.asarray(np.where(adversary, p.adversary_max_speed, p.good_max_speed),
                            jnp.float32)
    ux, uy = decode_actions(actions, accel)
    not_self = ~np.eye(n, dtype=bool)
    ax, ay = contact(s.x, s.y, s.x, s.y, size[:, None] + size[None, :], not_self, p)
    ox, oy = contact(s.x, s.y, s.lm_x[:, :nl], s.lm_y[:, :nl],
                     (size[:, None] + F32(p.obs_size)), np.ones((n, nl), bool), p)
    fx, fy = ax + ox + ux, ay + oy + uy
    x, y, vx, vy = integrate(p, s, fx, fy, max_speed)
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
    return (x, y, vx, vy), (fx, fy), reward


tag_reset, tag_step = reference(MPESimpleTagParams, tag_observe, _tag_transition,
                                lambda p: p.num_obs)


def render_draw(p: MPESimpleTagParams, s: dict[str, jax.Array], canvas: Canvas) -> None:
    nl, na, px = p.num_obs, p.num_adversaries, canvas.px
    canvas.disc(s["lm_x"][:nl], s["lm_y"][:nl], p.obs_size, DARK, label="landmark")
    canvas.disc(s["x"][na:], s["y"][na:], max(p.good_size, 2 * px), GREEN)
    canvas.disc(s["x"][:na], s["y"][:na], max(p.adversary_size, 2 * px), RED)


SPEC = env_spec("mpe_simple_tag", MPESimpleTagParams, tag_obs_dim, tag_reset, tag_step,
                render_view=render_view, render_draw=render_draw, render_fps=10,  # mpe2's
                policy_groups=lambda p: {"adversary": np.arange(p.num_adversaries),
                                         "agent": np.arange(p.num_adversaries, p.num_agents)},
                default_config="mpe_simple_tag_ppo")


class MPESimpleTag(env_class(SPEC)):  # type: ignore[misc]
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


ENV = MPESimpleTag  # what jaxwarp.registry registers under SPEC.name
