"""PettingZoo `ParallelEnv` over one copy of a (multi-agent) jaxwarp env.

    from jaxwarp.adapters.pettingzoo import parallel_env
    env = parallel_env("mpe_simple_spread", backend="cpu")
    obs, infos = env.reset(seed=0)               # {"agent_0": f32[18], ...}
    while env.agents:
        actions = {a: env.action_space(a).sample() for a in env.agents}
        obs, rewards, terminations, truncations, infos = env.step(actions)

Agents are named by the env's ``agent_names`` when it has them, else
``agent_0 .. agent_{n-1}``. All agents live until the env's episode ends
(jaxwarp ends episodes per env, not per agent): then every agent is
terminated or truncated together and `agents` becomes empty until `reset`.

Each step is one jitted call (`jaxwarp.adapters._batched`). The observations
returned on the step that ends an episode are the final observations (the
step runs without auto-reset, `ContractEnv.step(autoreset=False)`, and again
with it when the episode ended, so that `render` and the next `reset`
continue as the direct API does), for every env that supports it
(`jaxwarp.adapters._batched.supports_final_obs`; others return the next
episode's first observations); the infos of that step carry
``episode_return`` per agent. See docs/adapters.md.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from pettingzoo import ParallelEnv

from jaxwarp.adapters._batched import BatchedEnv, supports_final_obs


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
            any number of agents.

    Per agent: observation space ``Box(obs_dim)`` (f32), action space
    ``Discrete(n)`` (one action head) or ``MultiDiscrete(nvec)``; actions are
    ints (or int arrays of shape ``[heads]``); rewards are Python floats.
        render_mode: None, or ``"rgb_array"``: `render` returns the env's
            current frame, ``u8[H, W, 3]`` (`jaxwarp.render`).
    `state` is not implemented.
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "jaxwarp", "render_modes": ["rgb_array"],
                                          "is_parallelizable": True}

    def __init__(self, env: Any, render_mode: str | None = None, render_size: int = 128):
        import gymnasium as gym

        from jaxwarp.adapters.gymnasium import _renderer

        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array'; got {render_mode!r}")

        self.env = env
        self._batch = BatchedEnv(env, 1, squeeze_agent=False,
                                 final_obs=supports_final_obs(env))
        self.possible_agents = list(agent_names(env))
        self.agents: list[str] = []
        self.render_mode = render_mode
        self._render = _renderer(env, render_size) if render_mode else None
        self.metadata = {**type(self).metadata, "name": f"jaxwarp_{env.name}"}
        box = env.observation_space
        nvec = tuple(int(v) for v in env.action_space.nvec)
        obs_space = gym.spaces.Box(np.asarray(box.low, np.float32),
                                   np.asarray(box.high, np.float32), dtype=np.float32)
        act_space = (gym.spaces.Discrete(nvec[0]) if len(nvec) == 1
                     else gym.spaces.MultiDiscrete(np.asarray(nvec, np.int64)))
        # One space object per agent, the same object on every call (seeding
        # an agent's space must not seed another's).
        self._obs_spaces = {a: obs_space if i == 0 else _clone(obs_space)
                            for i, a in enumerate(self.possible_agents)}
        self._act_spaces = {a: act_space if i == 0 else _clone(act_space)
                            for i, a in enumerate(self.possible_agents)}

    def observation_space(self, agent: str) -> Any:
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> Any:
        return self._act_spaces[agent]

    def _obs_dict(self, obs: Any) -> dict[str, np.ndarray]:
        obs = np.asarray(obs)[0]
        return {a: obs[i].copy() for i, a in enumerate(self.possible_agents)}

    def reset(self, seed: int | None = None, options: dict | None = None
              ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        """Starts a new episode. seed: an int seeds the key
        (``jax.random.key(seed)``), None continues from the current key.
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
        a = np.stack([np.reshape(np.asarray(actions[name]), (self._batch.heads,))
                      for name in self.possible_agents])[None]
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
        ended = (term or trunc) and out.final_obs is not None
        obs = self._obs_dict(out.final_obs if ended else out.obs)
        rewards = {name: float(reward[i]) for i, name in enumerate(names)}
        terminations = dict.fromkeys(names, term)
        truncations = dict.fromkeys(names, trunc)
        if term or trunc:
            self.agents = []
        return obs, rewards, terminations, truncations, infos

    def render(self) -> np.ndarray | None:
        """The env's current frame, ``u8[H, W, 3]`` (render_mode "rgb_array";
        after the step that ends an episode: the next episode's start, since
        jaxwarp resets inside that step); None without a render_mode."""
        if self._render is None:
            return None
        if not self._batch.started:
            raise RuntimeError("call reset() before render()")
        return np.asarray(self._render(self._batch.state))[0]

    def close(self) -> None:
        self._batch.close()
        self.agents = []


def _clone(space: Any) -> Any:
    import copy

    return copy.deepcopy(space)


def parallel_env(name: str, backend: str = "auto", *, config: str | None = None,
                 render_mode: str | None = None, **params: Any) -> JaxwarpParallelEnv:
    """`JaxwarpParallelEnv` over ``jaxwarp.make(name, backend, config, **params)``."""
    import jaxwarp

    return JaxwarpParallelEnv(jaxwarp.make(name, backend=backend, config=config, **params),
                              render_mode=render_mode)
