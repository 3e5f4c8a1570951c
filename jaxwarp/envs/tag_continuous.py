"""Tag (continuous): taggers chase runners in a square arena.

The benchmark environment of the WarpDrive paper, specified in
`docs/envs/tag_continuous.md` (agents, reset, actions, step order, observation,
rewards, named configurations). One header and one spec, like every env:

* kernel: `cuda/envs/tag_continuous.h` (phases, team passes with reductions,
  the neighbour grid), built for XLA:CPU and CUDA by `jaxwarp.authoring`;
* spec: `SPEC` below (params, state, scratch, static params);
* the pure-JAX reference below (`reference_reset`, `reference_step`), the
  oracle of the tests and the baseline of the benchmarks.

| observation (per agent, f32) | 7 features for each observed agent j, feature-major, then time |
|---|---|
| ``(x_j - x_i) / (sqrt(2) L)``, ``(y_j - y_i) / (sqrt(2) L)`` | relative position |
| ``(speed_j - speed_i) / max_speed``, ``(acc_j - acc_i) / max_speed`` | relative motion |
| ``(dir_j - dir_i) / (2 pi)`` | relative heading |
| ``type_j`` (1 tagger, 0 runner), ``still_in_game_j`` | |
| ``timestep / episode_length`` | last element |

Observed agents: all N-1 others in id order (``use_full_observation``) or the
k nearest others still in the game (ties to the lower id), nearest first,
empty slots 0. Agents out of the game observe zeros.

| action (per agent, i32[2]) | index 0 is the no-op, 1..n map to ``linspace(min, max, n)`` |
|---|---|
| 0 | acceleration level, ``num_acceleration_levels + 1`` choices |
| 1 | turn level, ``num_turn_levels + 1`` choices |

| reward (per agent, f32) | |
|---|---|
| in the game | ``edge_hit_penalty`` if it hit the wall this step, plus the step reward of its type |
| tagger | ``+tag_reward_for_tagger`` per runner it tagged this step |
| runner | ``tag_penalty_for_runner`` when tagged; ``end_of_game_reward_for_runner`` if still in the game at the last step |

Numerics: float arithmetic is written operation for operation as in the C++
(`cuda/envs/tag_continuous.h`): the reference's ``a * b + c`` patterns are the
places where the C++ calls ``fmaf`` (XLA contracts them), divisions by
constants are multiplications by float32 reciprocals, and sin/cos use the
same fixed polynomial. On XLA:CPU the backends agree bit for bit.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.extend.random import threefry2x32_p

from jaxwarp.core import auto_reset, reset_mask, sincos_fixed
from jaxwarp.render import BLUE, RED, Canvas
from jaxwarp.authoring import (API_DIR, ContractEnv, EnvSpec, ParamArray, ScratchField,
                               grid_scratch, state_field)

NUM_FEATURES = 7
MAX_LEVELS = 64  # most levels per head (the kernel's accel / turn tables hold MAX_LEVELS + 1)
MAX_AGENTS = 65535  # neighbour ids are uint16 in the kernels


@dataclasses.dataclass(frozen=True)
class TagContinuousParams:
    """Static game configuration (hashable, static under jit).

    Names follow WarpDrive's `TagContinuous` so its configurations carry over;
    defaults are WarpDrive's training configuration (`warpdrive_default`).
    """

    num_taggers: int = 10  # taggers per env (agent ids 0..num_taggers-1)
    num_runners: int = 100  # runners per env
    grid_length: float = 20.0  # side L of the square arena
    episode_length: int = 500  # steps per episode
    max_speed: float = 1.0  # speed cap before skill
    skill_level_tagger: float = 1.0  # multiplier on a tagger's speed cap
    skill_level_runner: float = 1.0  # multiplier on a runner's speed cap
    max_acceleration: float = 0.1  # acceleration action range
    min_acceleration: float = -0.1
    max_turn: float = 2.356  # turn action range (radians)
    min_turn: float = -2.356
    num_acceleration_levels: int = 20  # levels besides the no-op
    num_turn_levels: int = 20
    use_full_observation: bool = False  # all others vs the k nearest
    num_other_agents_observed: int = 10  # k
    tagging_distance: float = 0.02  # tag when distance < this * L
    tag_reward_for_tagger: float = 10.0
    tag_penalty_for_runner: float = -10.0
    end_of_game_reward_for_runner: float = 1.0
    step_penalty_for_tagger: float = 0.0
    step_reward_for_runner: float = 0.0
    edge_hit_penalty: float = 0.0
    runner_exits_game_after_tagged: bool = True
    # None: every env replica gets its own keyed random start. An int: every
    # replica and every episode starts from the one start this seed gives
    # (WarpDrive's behaviour).
    fixed_start_seed: int | None = None

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, what: str) -> None:
            if not ok:
                raise ValueError(
                    f"tag_continuous: {name}={getattr(self, name)!r} is invalid; expected {what}"
                )

        for name in ("num_taggers", "num_runners", "episode_length",
                     "num_acceleration_levels", "num_turn_levels",
                     "num_other_agents_observed"):
            value = getattr(self, name)
            need(isinstance(value, (int, np.integer)) and not isinstance(value, bool),
                 name, "an int")
        need(self.num_taggers >= 1, "num_taggers", "an int >= 1")
        need(self.num_runners >= 1, "num_runners", "an int >= 1")
        if self.num_agents > MAX_AGENTS:  # the sum: name both, not the last one checked
            raise ValueError(f"tag_continuous: num_taggers={self.num_taggers!r} + num_runners="
                             f"{self.num_runners!r} = {self.num_agents} agents is invalid; "
                             f"expected num_taggers + num_runners <= {MAX_AGENTS}")
        need(self.episode_length >= 1, "episode_length", "an int >= 1")
        need(1 <= self.num_acceleration_levels <= MAX_LEVELS, "num_acceleration_levels",
             f"an int in [1, {MAX_LEVELS}]")
        need(1 <= self.num_turn_levels <= MAX_LEVELS, "num_turn_levels",
             f"an int in [1, {MAX_LEVELS}]")
        need(self.grid_length > 0, "grid_length", "a float > 0")
        need(self.max_speed > 0, "max_speed", "a float > 0")
        need(self.skill_level_tagger > 0, "skill_level_tagger", "a float > 0")
        need(self.skill_level_runner > 0, "skill_level_runner", "a float > 0")
        need(self.tagging_distance >= 0, "tagging_distance", "a float >= 0")
        need(self.min_acceleration <= self.max_acceleration, "min_acceleration",
             "min_acceleration <= max_acceleration")
        need(self.min_turn <= self.max_turn, "min_turn", "min_turn <= max_turn")
        if not self.use_full_observation:
            need(1 <= self.num_other_agents_observed <= self.num_agents - 1,
                 "num_other_agents_observed",
                 f"an int in [1, num_agents - 1 = {self.num_agents - 1}]")
        if self.fixed_start_seed is not None:
            need(isinstance(self.fixed_start_seed, (int, np.integer))
                 and 0 <= self.fixed_start_seed < 2**32,
                 "fixed_start_seed", "None or an int in [0, 2**32)")

    @property
    def num_agents(self) -> int:
        return self.num_taggers + self.num_runners

    @property
    def obs_dim(self) -> int:
        slots = self.num_agents - 1 if self.use_full_observation else (
            self.num_other_agents_observed)
        return NUM_FEATURES * slots + 1

    @property
    def max_episode_steps(self) -> int:
        """Steps per episode at most (episode_length; sooner when every runner is tagged;
        ``jaxwarp.core.episode_length``)."""
        return self.episode_length


# Named configurations of the spec ("configurations used for comparison").
CONFIGS: dict[str, dict[str, Any]] = {
    "warpdrive_default": {},
    "large": {"num_taggers": 50, "num_runners": 950, "grid_length": 100.0},
}


@struct.dataclass
class TagContinuousState:
    """Batched game state; every field is donated and updated in place.

    x, y, speed, direction, acceleration: f32[envs, agents]
    still_in_game: i32[envs, agents] (1 in the game, 0 out)
    timestep: i32[envs]; num_runners_left: i32[envs]
    episode_return: f32[envs, agents]: return of the current episode so far;
        after a step that ended an episode (done), the final return of that
        episode (it restarts from the next step on).
    """

    x: jax.Array = state_field("f32")
    y: jax.Array = state_field("f32")
    speed: jax.Array = state_field("f32")
    direction: jax.Array = state_field("f32")
    acceleration: jax.Array = state_field("f32")
    still_in_game: jax.Array = state_field("i32")
    timestep: jax.Array = state_field("i32", "env")
    num_runners_left: jax.Array = state_field("i32", "env")
    episode_return: jax.Array = state_field("f32")


# ---------------------------------------------------------------------------
# Float32 constants shared by every backend.
# ---------------------------------------------------------------------------
TWO_PI = np.float32(2 * np.pi)
HEADINGS = (np.arange(4) * (np.pi / 2)).astype(np.float32)  # reset directions


@dataclasses.dataclass(frozen=True)
class _Constants:
    vmax_tagger: np.float32
    vmax_runner: np.float32
    tag_dist2: np.float32
    pos_scale: np.float32
    speed_scale: np.float32
    dir_scale: np.float32
    time_scale: np.float32
    accel: np.ndarray  # f32[num_acceleration_levels + 1]
    turn: np.ndarray  # f32[num_turn_levels + 1]
    fixed_key: np.ndarray  # u32[2]


def _constants(p: TagContinuousParams) -> _Constants:
    def table(lo: float, hi: float, n: int) -> np.ndarray:
        return np.concatenate([[0.0], np.linspace(lo, hi, n)]).astype(np.float32)

    seed = p.fixed_start_seed or 0
    return _Constants(
        vmax_tagger=np.float32(p.max_speed * p.skill_level_tagger),
        vmax_runner=np.float32(p.max_speed * p.skill_level_runner),
        tag_dist2=np.float32((p.tagging_distance * p.grid_length) ** 2),
        pos_scale=np.float32(1.0 / (math.sqrt(2.0) * p.grid_length)),
        speed_scale=np.float32(1.0 / (p.max_speed + 1e-10)),
        dir_scale=np.float32(1.0 / (2.0 * math.pi)),
        time_scale=np.float32(1.0 / p.episode_length),
        accel=table(p.min_acceleration, p.max_acceleration, p.num_acceleration_levels),
        turn=table(p.min_turn, p.max_turn, p.num_turn_levels),
        # Same derivation as jax.random.PRNGKey(seed) for a 32-bit seed.
        fixed_key=np.array([0, seed], dtype=np.uint32),
    )


# ---------------------------------------------------------------------------
# Pure-JAX reference. Vectorised over [envs, agents]; O(N^2) pairwise
# distances per env and lax.top_k for the k nearest.
# ---------------------------------------------------------------------------
def _reset_agents(p: TagContinuousParams, c: _Constants, key_data: jax.Array,
                  num_envs: int) -> tuple[jax.Array, ...]:
    """Fresh starts for all envs: (x, y, direction) f32[envs, agents]."""
    k = jnp.asarray(c.fixed_key) if p.fixed_start_seed is not None else key_data
    shape = (num_envs, p.num_agents)
    env = jnp.broadcast_to(jnp.arange(num_envs, dtype=jnp.uint32)[:, None], shape)
    if p.fixed_start_seed is not None:
        env = jnp.zeros_like(env)
    agent = jnp.broadcast_to(jnp.arange(p.num_agents, dtype=jnp.uint32), shape)
    k0 = jnp.broadcast_to(k[0], shape)
    k1 = jnp.broadcast_to(k[1], shape)
    ua, ub = threefry2x32_p.bind(k0, k1, env, agent * np.uint32(2))
    wa, _ = threefry2x32_p.bind(k0, k1, env, agent * np.uint32(2) + np.uint32(1))
    scale = np.float32(2.0**-24)
    L = np.float32(p.grid_length)
    # The min (a no-op on the value) and the table lookup end each draw in an
    # operation that XLA cannot contract into a later subtraction (it would
    # turn u_j*c - x_i into fma(u_j, c, -x_i) and change the rounding).
    x = jnp.minimum((ua >> 8).astype(jnp.float32) * scale * L, L)
    y = jnp.minimum((ub >> 8).astype(jnp.float32) * scale * L, L)
    direction = jnp.asarray(HEADINGS)[(wa >> 30).astype(jnp.int32)]
    return x, y, direction


def _nearest(neg: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """``lax.top_k(neg, k)`` over f32[envs, agents, agents] (ties: lower id
    first), as one op that ``jax.jit`` partitions along the env axis. XLA's
    partitioner has no rule for TopK's batch axes: under a plain jit over
    env-sharded state it all-gathered the operand onto every device (the only
    collective in any env's pure-JAX step). The envs' own partitioning rule
    (`jaxwarp._ffi.env_partitioned_call`) runs it per device on its own envs;
    on one device it is top_k itself."""
    from jaxwarp._ffi import env_partitioned_call

    def top_k(env_offset, local_envs, a):
        return jax.lax.top_k(a, k)

    return env_partitioned_call(top_k, [neg], [True], neg.shape[0], "tag_nearest_agents")


def _observe(p: TagContinuousParams, c: _Constants, x, y, speed, direction, acc,
             still, timestep) -> jax.Array:
    """obs: f32[envs, agents, obs_dim] of the given (observation) state."""
    n = p.num_agents
    is_tagger_f = (jnp.arange(n) < p.num_taggers).astype(jnp.float32)
    still_f = still.astype(jnp.float32)
    if p.use_full_observation:
        slot = np.arange(n - 1)
        other = np.where(slot[None, :] < np.arange(n)[:, None], slot[None, :], slot[None, :] + 1)
        idx = jnp.broadcast_to(jnp.asarray(other, jnp.int32), (x.shape[0], n, n - 1))
        present = jnp.ones(idx.shape, bool)
    else:
        dx = x[:, None, :] - x[:, :, None]  # [e, i, j] = x_j - x_i
        dy = y[:, None, :] - y[:, :, None]
        d2 = dx * dx + dy * dy
        valid = (still[:, None, :] == 1) & ~jnp.eye(n, dtype=bool)[None]
        neg = jnp.where(valid, -d2, -jnp.inf)
        vals, idx = _nearest(neg, p.num_other_agents_observed)
        present = vals > -jnp.inf

    def gather(v):  # v[e, j] for every (e, i, slot)
        return jnp.take_along_axis(v[:, None, :], idx, axis=2)

    def rel(v, scale):
        return (gather(v) - v[:, :, None]) * scale

    feats = [
        rel(x, c.pos_scale), rel(y, c.pos_scale), rel(speed, c.speed_scale),
        rel(acc, c.speed_scale), rel(direction, c.dir_scale),
        jnp.broadcast_to(is_tagger_f[idx], idx.shape), gather(still_f),
    ]
    feats = [jnp.where(present, f, np.float32(0)) for f in feats]
    t = jnp.broadcast_to((timestep.astype(jnp.float32) * c.time_scale)[:, None, None],
                         (x.shape[0], n, 1))
    obs = jnp.concatenate(feats + [t], axis=-1)
    return jnp.where((still == 1)[:, :, None], obs, np.float32(0))


def reference_reset(p: TagContinuousParams, key_data: jax.Array, num_envs: int
                    ) -> tuple[jax.Array, TagContinuousState]:
    """Pure-JAX reset. key_data: u32[2]. Returns (obs, state)."""
    c = _constants(p)
    x, y, direction = _reset_agents(p, c, key_data, num_envs)
    zeros = jnp.zeros_like(x)
    still = jnp.ones(x.shape, jnp.int32)
    timestep = jnp.zeros((num_envs,), jnp.int32)
    state = TagContinuousState(
        x=x, y=y, speed=zeros, direction=direction, acceleration=zeros,
        still_in_game=still, timestep=timestep,
        num_runners_left=jnp.full((num_envs,), p.num_runners, jnp.int32),
        episode_return=zeros)
    obs = _observe(p, c, x, y, zeros, direction, zeros, still, timestep)
    return obs, state


def _move(p: TagContinuousParams, c: _Constants, state: TagContinuousState,
          actions: jax.Array, is_tagger: jax.Array, in_game: jax.Array):
    """Moved (x, y, speed, direction, acc, edge penalty), each f32[E, N]."""
    # 1. Move (out-of-range actions are clamped, as in the kernels).
    a_acc = jnp.clip(actions[..., 0], 0, p.num_acceleration_levels)
    a_turn = jnp.clip(actions[..., 1], 0, p.num_turn_levels)
    vmax = jnp.where(is_tagger, c.vmax_tagger, c.vmax_runner)
    acc = state.acceleration + jnp.asarray(c.accel)[a_acc]
    d = jnp.fmod(state.direction + jnp.asarray(c.turn)[a_turn], TWO_PI)
    d = jnp.where(d < 0, d + TWO_PI, d)
    direction = jnp.where(in_game, d, np.float32(0))
    v = jnp.minimum(jnp.maximum(state.speed + acc, np.float32(0)), vmax)
    speed = jnp.where(in_game, v, np.float32(0))
    acc = jnp.where((speed <= 0) | (speed >= vmax), np.float32(0), acc)
    sn, cs = sincos_fixed(direction)
    x = speed * cs + state.x
    y = speed * sn + state.y
    L = np.float32(p.grid_length)
    crossed = (x < 0) | (x > L) | (y < 0) | (y > L)
    x = jnp.clip(x, np.float32(0), L)
    y = jnp.clip(y, np.float32(0), L)
    edge = jnp.where(crossed, np.float32(p.edge_hit_penalty), np.float32(0))
    return x, y, speed, direction, acc, edge


def _tag(p: TagContinuousParams, c: _Constants, x: jax.Array, y: jax.Array,
         in_game: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Who was tagged (bool[E, N]) and each tagger's tag count (int[E, N], runners 0)."""
    # 2. Tagging: each runner in the game finds its nearest tagger.
    n, nt = p.num_agents, p.num_taggers
    num_envs = x.shape[0]
    dx = x[:, None, :nt] - x[:, nt:, None]  # [e, runner, tagger]
    dy = y[:, None, :nt] - y[:, nt:, None]
    d2 = dx * dx + dy * dy
    nearest = jnp.argmin(d2, axis=-1)  # first minimum: ties -> lower id
    best = jnp.min(d2, axis=-1)
    tagged_r = in_game[:, nt:] & (best < c.tag_dist2)
    tags = jnp.sum(tagged_r[:, :, None] & (nearest[:, :, None] == jnp.arange(nt)), axis=1)
    tagged = jnp.concatenate([jnp.zeros((num_envs, nt), bool), tagged_r], axis=1)
    tags = jnp.concatenate([tags, jnp.zeros((num_envs, n - nt), tags.dtype)], axis=1)
    return tagged, tags


def _reward(p: TagContinuousParams, is_tagger: jax.Array, in_game: jax.Array,
            edge: jax.Array, tagged: jax.Array, tags: jax.Array, still_after: jax.Array,
            last_step: jax.Array) -> jax.Array:
    """This step's reward per agent, f32[E, N]."""
    # 3. Rewards.
    step_reward = jnp.where(is_tagger, np.float32(p.step_penalty_for_tagger),
                            np.float32(p.step_reward_for_runner))
    base = jnp.where(in_game, edge + step_reward, np.float32(0))
    tagger_r = tags.astype(jnp.float32) * np.float32(p.tag_reward_for_tagger) + base
    runner_r = jnp.where(tagged, base + np.float32(p.tag_penalty_for_runner), base)
    runner_r = jnp.where((still_after == 1) & last_step[:, None],
                         runner_r + np.float32(p.end_of_game_reward_for_runner), runner_r)
    return jnp.where(is_tagger, tagger_r, runner_r)


def reference_step(p: TagContinuousParams, key_data: jax.Array, state: TagContinuousState,
                   actions: jax.Array, autoreset: bool = True):
    """Pure-JAX step with auto-reset. Returns (obs, state, reward, done, info)."""
    c = _constants(p)
    n, nt = p.num_agents, p.num_taggers
    num_envs = state.x.shape[0]
    is_tagger = jnp.arange(n) < nt
    still = state.still_in_game
    in_game = still == 1
    t = state.timestep + 1

    x, y, speed, direction, acc, edge = _move(p, c, state, actions, is_tagger, in_game)
    tagged, tags = _tag(p, c, x, y, in_game)
    exits = tagged & p.runner_exits_game_after_tagged
    runners_left = state.num_runners_left - jnp.sum(exits, axis=1, dtype=jnp.int32)
    still_after = (in_game & ~exits).astype(jnp.int32)
    last_step = t == p.episode_length
    done = last_step | (runners_left == 0)

    reward = _reward(p, is_tagger, in_game, edge, tagged, tags, still_after, last_step)
    episode_return = jnp.where((state.timestep == 0)[:, None], np.float32(0),
                               state.episode_return) + reward

    # 4. Auto-reset finished envs, then observe. Fresh starts are drawn for
    # every env and selected where done: a lax.cond skipping the draw would
    # make XLA:GPU copy its predicate to the host every step (a sync).
    rx, ry, rdir = _reset_agents(p, c, key_data, num_envs)
    zeros = jnp.zeros_like(rx)
    fresh = (rx, ry, zeros, rdir, zeros)
    moved = (x, y, speed, direction, acc)
    reset = reset_mask(done, autoreset)
    x, y, speed, direction, acc = auto_reset(reset, fresh, moved)
    still_obs = jnp.where(reset[:, None], 1, still)
    t_obs = jnp.where(reset, 0, t)
    obs = _observe(p, c, x, y, speed, direction, acc, still_obs, t_obs)
    new_state = TagContinuousState(
        x=x, y=y, speed=speed, direction=direction, acceleration=acc,
        still_in_game=jnp.where(reset[:, None], 1, still_after),
        timestep=t_obs,
        num_runners_left=jnp.where(reset, p.num_runners, runners_left),
        episode_return=episode_return)
    terminated = runners_left == 0
    info = {"terminated": terminated, "truncated": done & ~terminated}
    return obs, new_state, reward, done, info


# ---------------------------------------------------------------------------
# The env through the authoring contract: cuda/envs/tag_continuous.h + SPEC.
# ---------------------------------------------------------------------------
# Agents from which the k-nearest search uses the uniform grid instead of one
# scan over the agents in the game. Both give the same lists: a speed choice
# (on the H100 the scan wins at 110 agents, the grid at 1000;
# docs/decisions.md, "Kernels").
GRID_MIN_AGENTS = 256


def _use_grid(p: TagContinuousParams) -> bool:
    """The k-nearest search uses the uniform grid (many agents, partial obs)."""
    return (not p.use_full_observation and p.num_other_agents_observed <= 16
            and p.num_agents >= GRID_MIN_AGENTS)


def kernel_params(p: TagContinuousParams) -> dict[str, Any]:
    """The C++ Params of cuda/envs/tag_continuous.h: derived float32 constants
    computed once here, so every backend uses the same values."""
    c = _constants(p)
    i32, f32 = np.int32, np.float32
    return dict(
        num_agents=i32(p.num_agents), num_taggers=i32(p.num_taggers),
        episode_length=i32(p.episode_length), num_acc_levels=i32(p.num_acceleration_levels),
        num_turn_levels=i32(p.num_turn_levels), full_obs=i32(p.use_full_observation),
        k_observed=i32(p.num_other_agents_observed),
        exit_after_tag=i32(p.runner_exits_game_after_tagged),
        fixed_start=i32(p.fixed_start_seed is not None), fixed_key0=c.fixed_key[0],
        fixed_key1=c.fixed_key[1], use_grid=i32(_use_grid(p)),
        grid_length=f32(p.grid_length),
        vmax_tagger=c.vmax_tagger, vmax_runner=c.vmax_runner,
        edge_penalty=f32(p.edge_hit_penalty), step_reward_tagger=f32(p.step_penalty_for_tagger),
        step_reward_runner=f32(p.step_reward_for_runner), tag_reward=f32(p.tag_reward_for_tagger),
        tag_penalty=f32(p.tag_penalty_for_runner), end_reward=f32(p.end_of_game_reward_for_runner),
        tag_dist2=c.tag_dist2, pos_scale=c.pos_scale, speed_scale=c.speed_scale,
        dir_scale=c.dir_scale, time_scale=c.time_scale,
        accel=ParamArray(c.accel, MAX_LEVELS + 1), turn=ParamArray(c.turn, MAX_LEVELS + 1))


def _obs_bounds(p: TagContinuousParams) -> tuple[np.ndarray, np.ndarray]:
    c = _constants(p)
    slots = (p.obs_dim - 1) // NUM_FEATURES
    vmax = float(max(c.vmax_tagger, c.vmax_runner))
    amax = float(np.max(np.abs(c.accel)))
    bounds = [1.0, 1.0, vmax / p.max_speed, 2 * (vmax + amax) / p.max_speed, 1.0]
    low = np.concatenate([np.full(slots, -b) for b in bounds] + [np.zeros(2 * slots + 1)])
    high = np.concatenate([np.full(slots, b) for b in bounds] + [np.ones(2 * slots + 1)])
    return low.astype(np.float32), high.astype(np.float32)


def render_view(p: TagContinuousParams) -> tuple[float, float, float, float]:
    m = 0.03 * float(p.grid_length)
    return -m, p.grid_length + m, -m, p.grid_length + m


def render_draw(p: TagContinuousParams, s: dict[str, jax.Array], canvas: Canvas) -> None:
    # Agents are points: the discs are a share of the picture (2 and 3 pixels of
    # a 128-pixel frame; that look at any --size), at least 2 and 3 pixels.
    xmin, xmax, _, _ = render_view(p)
    nt, unit = p.num_taggers, max(canvas.px, (xmax - xmin) / 128)
    x, y, alive = s["x"], s["y"], s["still_in_game"] != 0
    canvas.disc(x[nt:], y[nt:], 2.0 * unit, BLUE, alive[nt:])  # runners under taggers
    canvas.disc(x[:nt], y[:nt], 3.0 * unit, RED, alive[:nt])


SPEC = EnvSpec(
    name="tag_continuous",
    header=API_DIR / "envs" / "tag_continuous.h",
    params_type=TagContinuousParams,
    state_type=TagContinuousState,
    scratch=(ScratchField("base", "f32"), ScratchField("tagged_by", "i32"),
             ScratchField("seen", "i32"),
             ScratchField("tags", "i32"),
             ScratchField("nbr", "i32", "agent",
                          lambda p: 0 if p.use_full_observation else p.num_other_agents_observed),
             ScratchField("vis", "f32", "agent",
                          lambda p: 0 if p.use_full_observation or _use_grid(p) else 2),
             ScratchField("vis_id", "i32", "agent",
                          lambda p: 0 if p.use_full_observation or _use_grid(p) else 2),
             grid_scratch("grid", lambda p: p.num_agents, _use_grid)),
    num_agents=lambda p: p.num_agents,
    obs_dim=lambda p: p.obs_dim,
    nvec=lambda p: (p.num_acceleration_levels + 1, p.num_turn_levels + 1),
    reference_reset=reference_reset,
    reference_step=reference_step,
    obs_bounds=_obs_bounds,
    policy_groups=lambda p: {"tagger": np.arange(p.num_taggers),
                             "runner": np.arange(p.num_taggers, p.num_agents)},
    kernel_params=kernel_params,
    # No time limit kept by the kernels: the episode end is one of the rules
    # (truncated on exactly the last step, and only while runners are left),
    # reported by the header. The step counter and the returns are kept.
    time_limit=None,
    # Compiled in: the k-nearest lists are sized by k, unused paths dropped.
    static_params=("k_observed", "full_obs", "use_grid"),
    render_view=render_view,
    render_draw=render_draw,
    default_config="tag_duel_cpu",
)


class TagContinuous(ContractEnv):
    """Batched Tag (continuous) environment; see the module docstring.

    ``obs, state = env.reset(key, num_envs)`` and
    ``obs, state, reward, done, info = env.step(key, state, actions)`` with
    ``actions: i32[envs, agents, 2]``, ``obs: f32[envs, agents, obs_dim]``,
    ``reward: f32[envs, agents]``, ``done: bool[envs]``. Finished envs restart
    inside `step` from fresh starts drawn with its key; `info["episode_return"]`
    (f32[envs, agents]) holds each finished episode's return where done.
    """

    def __init__(self, params: TagContinuousParams | None = None, backend: str = "auto",
                 checks: bool = False, obs_dtype: Any = "float32"):
        super().__init__(SPEC, params=params or TagContinuousParams(), backend=backend,
                         checks=checks, obs_dtype=obs_dtype)

    @property
    def agent_types(self) -> np.ndarray:
        """i32[agents]: 1 for taggers, 0 for runners."""
        return (np.arange(self.num_agents) < self.params.num_taggers).astype(np.int32)

    @property
    def agent_names(self) -> tuple[str, ...]:
        p = self.params
        return tuple([f"tagger_{i}" for i in range(p.num_taggers)]
                     + [f"runner_{i}" for i in range(p.num_runners)])

    def episode_metrics(self, episode_return: jax.Array) -> dict[str, jax.Array]:
        """Per-env statistics of finished episodes, from their returns.

        episode_return: f32[envs, agents] -> {"tags_per_episode": f32[envs]}:
        taggers' summed return over ``tag_reward_for_tagger``. That is the
        number of tags only when taggers earn nothing else (no step or edge
        penalty, as in the named configs); otherwise nothing is reported.
        """
        p = self.params
        if p.step_penalty_for_tagger != 0 or p.edge_hit_penalty != 0 \
                or p.tag_reward_for_tagger == 0:
            return {}
        tagger_total = episode_return[:, :p.num_taggers].sum(axis=1)
        return {"tags_per_episode": tagger_total * np.float32(1 / p.tag_reward_for_tagger)}


ENV = TagContinuous  # what jaxwarp.registry registers under SPEC.name
