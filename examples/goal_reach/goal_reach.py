"""Goal reach: the tutorial env of docs/custom_env.md, written as a user would.

The env follows the recipe of every built-in env: the kernel `goal_reach.h`
(next to this file), this module, its spec (the params dataclass, the state
fields, the pure-JAX reference, `SPEC` and the env class `ENV`), and its
doc, `README.md` (rules, spaces, rewards). Importing it registers the env
under "goal_reach", so that `jaxwarp.make("goal_reach")` and
`jaxwarp train env_module=examples/goal_reach/goal_reach.py env=goal_reach`
find it; the kernels are compiled at first use (`jaxwarp.build_env`).
The code blocks of docs/custom_env.md are excerpts of this file
(tests/test_docs.py checks that they still are).

| observation (f32[envs, agents, 3]) | goal_x - x, goal_y - y, home (0/1) |
|---|---|
| action (i32[envs, agents, 1]) | 0 stay, 1 right, 2 left, 3 up, 4 down |
| reward | -distance to the goal, + bonus on arrival |
| end | terminated: all agents home; truncated: max_steps |
"""

import dataclasses
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

import jaxwarp
from jaxwarp.authoring import EnvSpec, agent_uniform, state_field
from jaxwarp.core import finish_step
from jaxwarp.render import BLUE, GREEN

F32 = np.float32


@dataclasses.dataclass(frozen=True)
class GoalReachParams:
    num_agents: int = 3
    step_size: float = 0.05
    radius: float = 0.1
    bonus: float = 10.0
    max_steps: int = 100

    def __post_init__(self) -> None:
        if not (isinstance(self.num_agents, int) and self.num_agents >= 1):
            raise ValueError(f"goal_reach: num_agents={self.num_agents!r}; expected an int >= 1")
        if not (isinstance(self.max_steps, int) and self.max_steps >= 1):
            raise ValueError(f"goal_reach: max_steps={self.max_steps!r}; expected an int >= 1")


@struct.dataclass
class GoalReachState:
    x: jax.Array = state_field("f32")  # f32[envs, agents]
    y: jax.Array = state_field("f32")
    home: jax.Array = state_field("i32")  # i32[envs, agents], 1 once within radius
    goal_x: jax.Array = state_field("f32", "env")  # f32[envs]
    goal_y: jax.Array = state_field("f32", "env")
    timestep: jax.Array = state_field("i32", "env")  # i32[envs]
    episode_return: jax.Array = state_field("f32")  # f32[envs, agents]


def _fresh(p, key_data, num_envs):
    """A new episode for every env: the draws reset() makes in goal_reach.h."""
    n = p.num_agents
    return dict(x=agent_uniform(key_data, num_envs, n, 0),
                y=agent_uniform(key_data, num_envs, n, 1),
                home=jnp.zeros((num_envs, n), jnp.int32),
                goal_x=agent_uniform(key_data, num_envs, 1, 2)[:, 0],
                goal_y=agent_uniform(key_data, num_envs, 1, 3)[:, 0])


def observe(p, s):
    return jnp.stack([s.goal_x[:, None] - s.x, s.goal_y[:, None] - s.y,
                      s.home.astype(jnp.float32)], axis=-1)


def reference_reset(p, key_data, num_envs):
    s = GoalReachState(**_fresh(p, key_data, num_envs),
                       timestep=jnp.zeros((num_envs,), jnp.int32),
                       episode_return=jnp.zeros((num_envs, p.num_agents), jnp.float32))
    return observe(p, s), s


def reference_step(p, key_data, s, actions, autoreset=True):
    m = actions[..., 0]
    home = s.home == 1
    h = F32(p.step_size)
    dx = jnp.where(m == 1, h, jnp.where(m == 2, -h, F32(0)))
    dy = jnp.where(m == 3, h, jnp.where(m == 4, -h, F32(0)))
    x = jnp.where(home, s.x, jnp.clip(s.x + dx, F32(0), F32(1)))
    y = jnp.where(home, s.y, jnp.clip(s.y + dy, F32(0), F32(1)))
    ex, ey = x - s.goal_x[:, None], y - s.goal_y[:, None]
    dist = jnp.sqrt(ex * ex + ey * ey)  # the kernel: sqrtf(fmaf(ex, ex, ey * ey))
    arrived = ~home & (dist < F32(p.radius))
    reward = -dist + jnp.where(arrived, F32(p.bonus), F32(0))
    terminated = jnp.all(home | arrived, axis=1)
    moved = dict(x=x, y=y, home=(home | arrived).astype(jnp.int32), goal_x=s.goal_x,
                 goal_y=s.goal_y)
    # What the kernels keep, as they do it: the step counter, the time limit,
    # the returns, and the auto-reset (the fields of `moved` taken from a fresh
    # start, drawn with this step's key, where the env is done).
    return finish_step(s, moved, _fresh(p, key_data, s.x.shape[0]), reward, terminated,
                       p.max_steps, partial(observe, p), autoreset)


def render_view(p):
    return -0.05, 1.05, -0.05, 1.05  # the unit square and a margin


def render_draw(p, s, canvas):  # one env at one time: s["x"] is f32[agents]
    canvas.disc(s["goal_x"], s["goal_y"], F32(p.radius), GREEN)
    canvas.disc(s["x"], s["y"], max(0.02, 2 * canvas.px), BLUE)


SPEC = EnvSpec(
    name="goal_reach",
    header=Path(__file__).with_name("goal_reach.h"),
    params_type=GoalReachParams,
    state_type=GoalReachState,
    num_agents=lambda p: p.num_agents,
    obs_dim=lambda p: 3,
    nvec=lambda p: (5,),
    reference_reset=reference_reset,
    reference_step=reference_step,
    time_limit="max_steps",  # the kernels truncate episodes after max_steps steps
    render_view=render_view,  # optional hooks: jaxwarp render, the adapters' render()
    render_draw=render_draw,
    render_fps=10,
)
ENV = jaxwarp.register_spec(SPEC)  # registers "goal_reach"; ENV: its env class
