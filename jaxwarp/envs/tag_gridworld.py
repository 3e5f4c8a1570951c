"""Tag on a grid (WarpDrive's tag_gridworld): taggers chase one runner.

Built through jaxwarp's authoring contract: `num_taggers` taggers (agent ids
``0 .. num_taggers-1``) chase one runner (agent id ``num_taggers``) on the
integer cells ``{0..L} x {0..L}``, ``L = grid_length``. The kernel is
`cuda/envs/tag_gridworld.h`, written against `cuda/jaxwarp_env.h` exactly as a
user env would be; it is built on first use with the FFI handlers of
`ffi/env_ffi.cc` and a layout header generated from `SPEC` (cached). The
pure-JAX reference below is its oracle, bit for bit.

| observation, full (f32[envs, N, 4N+1]) | x/L of all, y/L of all, type of all, one-hot self, t/T |
|---|---|
| observation, partial (f32[envs, N, 6]) | own x/L, y/L; target x/L, y/L; own type; t/T |
| action (i32[envs, N, 1]) | 0 stay, 1 x+1, 2 x-1, 3 y+1, 4 y-1 (others clamped to 0..4) |
| reward, tagger | tag: +tag_reward_for_tagger, else -step_cost_for_tagger; - wall term |
| reward, runner | tag: -tag_penalty_for_runner, else +step_cost_for_tagger; - wall term |
| end | terminated: the runner is tagged; truncated: episode_length steps |

Type is 1 for the runner, 0 for taggers. The partial view's target is the
runner for a tagger and the nearest tagger (squared distance, lowest id on
ties) for the runner. A tag: any tagger on the runner's cell after the moves
(every tagger gets the tag reward). Wall term: `wall_hit_penalty` for a move
off the grid, which is clipped back.

Starts: as WarpDrive, every episode starts with the taggers on cell
``(L // 2, L // 2)`` and the runner on ``(0, 0)``; ``random_start=True``
instead puts every agent on a uniformly drawn cell (keyed, per env and
episode). Tags are only checked after moves, as in WarpDrive.

Where this differs from WarpDrive: observations are products with f32
reciprocals (``x * (1/L)``, at most 1 ulp from its ``x / L``), so that the
kernels and the reference agree bit for bit; a finished episode auto-resets
inside `step` (the returned observation is the new episode's); the state
also keeps `wall_hit` and `tagged` of the last step.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxwarp.authoring import API_DIR, EnvSpec, agent_uniform, env_class, state_field
from jaxwarp.core import auto_reset, reset_mask
from jaxwarp.render import BLUE, RED, Canvas

F32 = np.float32


@dataclasses.dataclass(frozen=True)
class TagGridworldParams:
    """Static game configuration (hashable, static under jit).

    Names follow WarpDrive's `TagGridWorld`; defaults are its training
    configuration (run_configs/tag_gridworld.yaml, `warpdrive_default`).
    """

    num_taggers: int = 4  # taggers per env (agent ids 0..num_taggers-1); one runner after them
    grid_length: int = 100  # L: cells are 0..L on each axis
    episode_length: int = 100  # T: steps per episode
    wall_hit_penalty: float = 0.1  # cost of a move off the grid (clipped back)
    tag_reward_for_tagger: float = 10.0  # every tagger's reward when the runner is tagged
    tag_penalty_for_runner: float = 5.0  # subtracted from the runner's reward when tagged
    step_cost_for_tagger: float = 0.01  # taggers pay it, the runner earns it, each untagged step
    use_full_observation: bool = True  # all agents (4N+1) vs own + one target (6)
    random_start: bool = False  # False: WarpDrive's fixed starts; True: uniform random cells

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, what: str) -> None:
            if not ok:
                raise ValueError(
                    f"tag_gridworld: {name}={getattr(self, name)!r} is invalid; expected {what}")

        for name in ("num_taggers", "grid_length", "episode_length"):
            v = getattr(self, name)
            need(isinstance(v, (int, np.integer)) and not isinstance(v, bool), name, "an int")
        need(self.num_taggers >= 1, "num_taggers", "an int >= 1")
        need(1 <= self.grid_length <= 46340, "grid_length",
             "an int in [1, 46340] (squared distances fit in int32)")
        need(self.episode_length >= 1, "episode_length", "an int >= 1")
        for name in ("wall_hit_penalty", "tag_reward_for_tagger", "tag_penalty_for_runner",
                     "step_cost_for_tagger"):
            v = getattr(self, name)
            need(isinstance(v, (int, float, np.integer, np.floating))
                 and not isinstance(v, bool) and np.isfinite(v), name, "a finite float")
        for name in ("use_full_observation", "random_start"):
            need(isinstance(getattr(self, name), (bool, np.bool_)), name, "a bool")

    @property
    def num_agents(self) -> int:
        return self.num_taggers + 1

    @property
    def obs_dim(self) -> int:
        return 4 * self.num_agents + 1 if self.use_full_observation else 6

    @property
    def max_episode_steps(self) -> int:
        """Steps per episode at most (episode_length; sooner when the runner is tagged;
        ``jaxwarp.core.episode_length``)."""
        return self.episode_length


# Named configurations: WarpDrive's training run (the defaults) and the
# defaults of its TagGridWorld constructor.
CONFIGS: dict[str, dict[str, Any]] = {
    "warpdrive_default": {},
    "warpdrive_constructor": {"num_taggers": 10, "grid_length": 10,
                              "tag_penalty_for_runner": 2.0},
}


@struct.dataclass
class TagGridworldState:
    """Batched game state (fields in the spec's order).

    x, y: i32[envs, agents] cells in 0..grid_length.
    wall_hit: i32[envs, agents] 1 where the agent's last move was clipped at a wall.
    timestep: i32[envs] steps taken in the current episode.
    tagged: i32[envs] 1 where the last step tagged the runner (so after a done
        step it says whether the finished episode ended with a tag).
    episode_return: f32[envs, agents] return of the current episode so far;
        after a done step, the finished episode's return.
    """

    x: jax.Array = state_field("i32")
    y: jax.Array = state_field("i32")
    wall_hit: jax.Array = state_field("i32")
    timestep: jax.Array = state_field("i32", "env")
    tagged: jax.Array = state_field("i32", "env")
    episode_return: jax.Array = state_field("f32")


def _start(p: TagGridworldParams, key_data: jax.Array, num_envs: int):
    """Starting cells (x, y: i32[envs, agents]): what reset() writes."""
    n, L = p.num_agents, p.grid_length
    if p.random_start:
        cells = L + 1

        def cell(u):  # the header's cell_of
            return jnp.minimum((u * F32(cells)).astype(jnp.int32), cells - 1)

        return (cell(agent_uniform(key_data, num_envs, n, 0)),
                cell(agent_uniform(key_data, num_envs, n, 1)))
    start = np.full(n, L // 2, np.int32)
    start[-1] = 0
    xy = jnp.broadcast_to(jnp.asarray(start), (num_envs, n))
    return xy, xy


def observe(p: TagGridworldParams, s: TagGridworldState) -> jax.Array:
    """obs f32[envs, agents, obs_dim] (see the module docstring)."""
    num_envs, n = s.x.shape
    runner = p.num_taggers
    # Products with f32 reciprocals, as the header computes them (XLA would
    # rewrite a division by a constant into this anyway).
    inv_len = F32(1) / F32(p.grid_length)
    fx = s.x.astype(jnp.float32) * inv_len
    fy = s.y.astype(jnp.float32) * inv_len
    time = s.timestep.astype(jnp.float32) * (F32(1) / F32(p.episode_length))
    is_runner = (np.arange(n) == runner).astype(np.float32)
    if p.use_full_observation:
        rows = jnp.concatenate([fx, fy, jnp.broadcast_to(is_runner, (num_envs, n)),
                                time[:, None]], axis=1)  # [envs, 3n + 1] shared by all
        own = jnp.broadcast_to(jnp.eye(n, dtype=jnp.float32), (num_envs, n, n))
        shared = jnp.broadcast_to(rows[:, None, :], (num_envs, n, 3 * n + 1))
        return jnp.concatenate([shared[..., :3 * n], own, shared[..., 3 * n:]], axis=-1)
    dx = s.x[:, :runner] - s.x[:, runner:]
    dy = s.y[:, :runner] - s.y[:, runner:]
    nearest = jnp.argmin(dx * dx + dy * dy, axis=1)  # first minimum: lowest id on ties
    target = jnp.broadcast_to(jnp.int32(runner), (num_envs, n)).at[:, runner].set(nearest)
    tx = jnp.take_along_axis(fx, target, axis=1)
    ty = jnp.take_along_axis(fy, target, axis=1)
    return jnp.stack([fx, fy, tx, ty, jnp.broadcast_to(is_runner, (num_envs, n)),
                      jnp.broadcast_to(time[:, None], (num_envs, n))], axis=-1)


def reference_reset(p: TagGridworldParams, key_data: jax.Array, num_envs: int):
    """(obs f32[envs, agents, obs_dim], state): every env at its start."""
    x, y = _start(p, key_data, num_envs)
    zeros = jnp.zeros((num_envs, p.num_agents), jnp.int32)
    s = TagGridworldState(x=x, y=y, wall_hit=zeros,
                          timestep=jnp.zeros((num_envs,), jnp.int32),
                          tagged=jnp.zeros((num_envs,), jnp.int32),
                          episode_return=jnp.zeros((num_envs, p.num_agents), jnp.float32))
    return observe(p, s), s


def reference_step(p: TagGridworldParams, key_data: jax.Array, s: TagGridworldState,
                   actions: jax.Array, autoreset: bool = True):
    """One step of every env with auto-reset, as the kernels do it."""
    L, runner = p.grid_length, p.num_taggers
    m = jnp.clip(actions[..., 0], 0, 4)
    nx = s.x + jnp.where(m == 1, 1, jnp.where(m == 2, -1, 0))
    ny = s.y + jnp.where(m == 3, 1, jnp.where(m == 4, -1, 0))
    x, y = jnp.clip(nx, 0, L), jnp.clip(ny, 0, L)
    hit = (x != nx) | (y != ny)
    on_runner = (x[:, :runner] == x[:, runner:]) & (y[:, :runner] == y[:, runner:])
    tagged = jnp.any(on_runner, axis=1)
    t = s.timestep + 1
    is_tagger = np.arange(p.num_agents) < runner
    tag = tagged[:, None]
    term = jnp.where(is_tagger,
                     jnp.where(tag, F32(p.tag_reward_for_tagger), F32(-p.step_cost_for_tagger)),
                     jnp.where(tag, F32(-p.tag_penalty_for_runner), F32(p.step_cost_for_tagger)))
    reward = jnp.where(hit, F32(-p.wall_hit_penalty), F32(0)) + term
    episode_return = jnp.where((t == 1)[:, None], F32(0), s.episode_return) + reward
    terminated = tagged
    truncated = t >= p.episode_length
    done = terminated | truncated
    reset = reset_mask(done, autoreset)
    x0, y0 = auto_reset(reset, _start(p, key_data, s.x.shape[0]), (x, y))
    new = TagGridworldState(
        x=x0, y=y0,
        wall_hit=hit.astype(jnp.int32), timestep=jnp.where(reset, 0, t),
        tagged=tagged.astype(jnp.int32), episode_return=episode_return)
    info = {"terminated": terminated, "truncated": truncated, "episode_return": episode_return}
    return observe(p, new), new, reward, done, info


def render_view(p: TagGridworldParams) -> tuple[float, float, float, float]:
    m = 0.5 + 0.03 * p.grid_length  # cells 0..L
    return -m, p.grid_length + m, -m, p.grid_length + m


def render_draw(p: TagGridworldParams, s: dict[str, jax.Array], canvas: Canvas) -> None:
    # A disc fills its cell, and is at least the share of the picture it has in a
    # 128-pixel frame (2.5 pixels there; that look at any --size on a large grid).
    xmin, xmax, _, _ = render_view(p)
    nt, r = p.num_taggers, max(0.45, 2.5 * max(canvas.px, (xmax - xmin) / 128))
    x, y = s["x"].astype(jnp.float32), s["y"].astype(jnp.float32)
    canvas.disc(x[nt:], y[nt:], r, BLUE)
    canvas.disc(x[:nt], y[:nt], r, RED)


SPEC = EnvSpec(
    name="tag_gridworld",
    header=API_DIR / "envs" / "tag_gridworld.h",
    params_type=TagGridworldParams,
    state_type=TagGridworldState,
    num_agents=lambda p: p.num_agents,
    obs_dim=lambda p: p.obs_dim,
    nvec=lambda p: (5,),
    reference_reset=reference_reset,
    reference_step=reference_step,
    time_limit="episode_length",  # the kernels truncate at timestep >= episode_length
    obs_bounds=lambda p: (np.zeros(p.obs_dim, np.float32), np.ones(p.obs_dim, np.float32)),
    policy_groups=lambda p: {"tagger": np.arange(p.num_taggers),
                             "runner": np.array([p.num_taggers])},
    render_view=render_view,
    render_draw=render_draw,
)


TagGridworld = env_class(SPEC)  # WarpDrive's tag_gridworld; see the module docstring
ENV = TagGridworld  # what jaxwarp.registry registers under SPEC.name
