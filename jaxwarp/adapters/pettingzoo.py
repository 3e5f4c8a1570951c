"""PettingZoo `ParallelEnv` over one copy of a (multi-agent) jaxwarp env.

    from jaxwarp.adapters.pettingzoo import parallel_env
    env = parallel_env("mpe_simple_spread", backend="cpu")
    obs, infos = env.reset(seed=0)               # {"agent_0": f32[18], ...}
    while env.agents:
        actions = {a: env.action_space(a).sample() for a in env.agents}
        obs, rewards, terminations, truncations, infos = env.step(actions)

Agents are named by the env's ``agent_names`` when it has them (mpe_simple_tag:
mpe2's ``adversary_0 .. adversary_2``, ``agent_0``), else ``agent_0 ..
agent_{n-1}``. Each agent's observation space is ``Box`` of its own width
(``env.agent_obs_dims`` where the env pads some agents' rows with zeros, as
mpe_simple_tag's good agents: mpe2's Box(14) and Box(16)), else ``obs_dim``.
All agents live until the env's episode ends (jaxwarp ends episodes per env,
not per agent): then every agent is terminated or truncated together and
`agents` becomes empty until `reset`. `state()` is the concatenation of
every agent's current observation, in `possible_agents` order, as mpe2's
(and PettingZoo's MPE) ``state()``.

Each step is one jitted call (`jaxwarp.adapters._batched`). The step that
ends an episode returns its final observations and leaves the env there
(stepped without auto-reset, `ContractEnv.step(autoreset=False)`; `render`
shows the final state) for every env that supports it
(`jaxwarp.adapters._batched.supports_final_obs`; others reset inside that
step and return the next episode's first observations); the infos of that
step carry ``episode_return`` per agent. See docs/adapters.md.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from pettingzoo import ParallelEnv

from jaxwarp.adapters._batched import BatchedEnv, supports_final_obs
from jaxwarp.adapters.gymnasium import as_env, render_fps


def agent_names(env: Any) -> tuple[str, ...]:
    """``env.agent_names`` if present, else ``("agent_0", ..., "agent_{n-1}")``."""
    names = getattr(env, "agent_names", None)
    if names is None:
        return tuple(f"agent_{i}" for i in range(int(env.num_agents)))
    names = tuple(str(n) for n in names)
    if len(names) != int(env.num_agents) or len(set(names)) != len(names):
        raise ValueError(f"env.agent_names must be {env.num_agents} distinct names; got {names}")
    return names


class JaxwarpParallelEnv(ParallelEnv):
    """One jaxwarp env as a PettingZoo ParallelEnv (dicts keyed by agent name).

    Args:
        env: a jaxwarp env (`jaxwarp.make(name, backend=...)`), any backend and
            any number of agents, or a registered env's name
            (``jaxwarp.make(name)``; `parallel_env` takes a backend and params).
        render_mode: None, or ``"rgb_array"``: `render` returns the env's
            current frame, ``u8[H, W, 3]`` (`jaxwarp.render`).

    Per agent: observation space ``Box(d)`` (f32, and f32 observations also
    over an env made with ``obs_dtype="bfloat16"``; d the agent's own width,
    see the module docstring), action space ``Discrete(n)`` (one action
    head) or ``MultiDiscrete(nvec)``; actions are ints (or int arrays of
    shape ``[heads]``); rewards are Python floats. ``state(): f32[sum d]``
    with `state_space`.
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "jaxwarp", "render_modes": ["rgb_array"],
                                          "is_parallelizable": True, "render_fps": 30}

    def __init__(self, env: Any, render_mode: str | None = None, render_size: int = 128):
        import gymnasium as gym

        from jaxwarp.render import batch_renderer

        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array'; got {render_mode!r}")

        env = as_env(env, "JaxwarpParallelEnv")
        self.env = env
        # Episodes end for good in PettingZoo (reset() starts the next), so the
        # env steps without auto-reset where it can: the final observations
        # at the price of one env step.
        mode = "disabled" if supports_final_obs(env) else "same_step"
        # float32 observations (the spaces' dtype) over a bfloat16-obs env too.
        self._batch = BatchedEnv(env, 1, squeeze_agent=False, autoreset_mode=mode,
                                 obs_dtype=np.float32)
        self.possible_agents = list(agent_names(env))
        self.agents: list[str] = []
        self.render_mode = render_mode
        self._render = batch_renderer(env, render_size) if render_mode else None
        self.metadata = {**type(self).metadata, "name": f"jaxwarp_{env.name}",
                         "render_fps": render_fps(env)}
        self._obs_dims = agent_obs_dims(env)
        box = env.observation_space
        low = np.broadcast_to(np.asarray(box.low, np.float32), (int(env.obs_dim),))
        high = np.broadcast_to(np.asarray(box.high, np.float32), (int(env.obs_dim),))
        nvec = tuple(int(v) for v in env.action_space.nvec)
        act_space = (gym.spaces.Discrete(nvec[0]) if len(nvec) == 1
                     else gym.spaces.MultiDiscrete(np.asarray(nvec, np.int64)))
        # One space object per agent, the same object on every call (seeding
        # an agent's space must not seed another's).
        self._obs_spaces = {a: gym.spaces.Box(low[:d].copy(), high[:d].copy(), dtype=np.float32)
                            for a, d in zip(self.possible_agents, self._obs_dims)}
        self._act_spaces = {a: act_space if i == 0 else _clone(act_space)
                            for i, a in enumerate(self.possible_agents)}
        self.state_space = gym.spaces.Box(
            np.concatenate([low[:d] for d in self._obs_dims]),
            np.concatenate([high[:d] for d in self._obs_dims]), dtype=np.float32)
        self._rows: np.ndarray | None = None  # f32[agents, obs_dim]: the last observations

    def observation_space(self, agent: str) -> Any:
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> Any:
        return self._act_spaces[agent]

    def _obs_dict(self, obs: Any) -> dict[str, np.ndarray]:
        self._rows = np.asarray(obs)[0]
        return {a: self._rows[i, :d].copy()
                for i, (a, d) in enumerate(zip(self.possible_agents, self._obs_dims))}

    def state(self) -> np.ndarray:
        """``f32[sum of the agents' observation widths]``: every agent's last
        observation (from `reset` or `step`), concatenated in `possible_agents`
        order, as mpe2's ``state()``."""
        if self._rows is None:
            raise RuntimeError("call reset() before state()")
        return np.concatenate([self._rows[i, :d] for i, d in enumerate(self._obs_dims)])

    def reset(self, seed: int | None = None, options: dict | None = None
              ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        """Starts a new episode. seed: an int in [0, 2**64) seeds the key
        (``jax.random.key(seed)`` with all 64 bits kept,
        `jaxwarp.adapters._batched.seed_key`), None continues from the
        current key.
        options are accepted and ignored (jaxwarp envs take none)."""
        obs = self._batch.reset(seed=seed)
        self.agents = list(self.possible_agents)
        return self._obs_dict(obs), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]):
        """One step; actions for every live agent. Returns (obs, rewards,
        terminations, truncations, infos), dicts keyed by agent name."""
        if not self.agents:
            raise RuntimeError("the episode is over (or never started): call reset() first")
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise KeyError(f"no action for agent(s) {missing}: jaxwarp steps every agent "
                           "of the env together")
        heads = self._batch.heads
        rows = []
        for name in self.possible_agents:
            v = np.asarray(actions[name])
            if v.size != heads:
                raise ValueError(f"action for agent {name!r} must be "
                                 + ("an int" if heads == 1 else f"{heads} ints (one per head)")
                                 + f"; got {actions[name]!r}")
            rows.append(v.reshape(heads))
        a = np.stack(rows)[None]
        out = self._batch.step(self._batch.check_actions(a))
        reward = np.asarray(out.reward)[0]
        term = bool(np.asarray(out.terminated)[0])
        trunc = bool(np.asarray(out.truncated)[0])
        names = self.possible_agents
        infos: dict[str, dict] = {name: {} for name in names}
        if (term or trunc) and out.final_return is not None:
            ret = np.asarray(out.final_return)[0]
            for i, name in enumerate(names):
                infos[name]["episode_return"] = float(ret[i])
        obs = self._obs_dict(out.obs)
        rewards = {name: float(reward[i]) for i, name in enumerate(names)}
        terminations = dict.fromkeys(names, term)
        truncations = dict.fromkeys(names, trunc)
        if term or trunc:
            self.agents = []
        return obs, rewards, terminations, truncations, infos

    def render(self) -> np.ndarray | None:
        """The env's current frame, ``u8[H, W, 3]`` (render_mode "rgb_array";
        after the step that ends an episode: its final state, for envs that
        step without auto-reset); None without a render_mode."""
        if self._render is None:
            return None
        if not self._batch.started:
            raise RuntimeError("call reset() before render()")
        return np.asarray(self._render(self._batch.state))[0]

    def close(self) -> None:
        self._batch.close()
        self.agents = []
        self._rows = None


def agent_obs_dims(env: Any) -> tuple[int, ...]:
    """Each agent's observation width: ``env.agent_obs_dims`` if present (the
    leading entries of its row; the rest are padding), else ``obs_dim`` each."""
    n, width = int(env.num_agents), int(env.obs_dim)
    dims = getattr(env, "agent_obs_dims", None)
    if dims is None:
        return (width,) * n
    dims = tuple(int(d) for d in dims)
    if len(dims) != n or not all(1 <= d <= width for d in dims):
        raise ValueError(f"env.agent_obs_dims must be {n} ints in [1, obs_dim={width}]; got "
                         f"{dims}")
    return dims


def _clone(space: Any) -> Any:
    import copy

    return copy.deepcopy(space)


def parallel_env(name: str, backend: str = "auto", *, config: str | None = None,
                 render_mode: str | None = None, **params: Any) -> JaxwarpParallelEnv:
    """`JaxwarpParallelEnv` over ``jaxwarp.make(name, backend, config, **params)``."""
    import jaxwarp

    return JaxwarpParallelEnv(jaxwarp.make(name, backend=backend, config=config, **params),
                              render_mode=render_mode)
