"""Gymnasium 1.x vector env over any jaxwarp env and backend.

    from jaxwarp.adapters.gymnasium import make_vec
    envs = make_vec("cartpole", num_envs=1024, backend="cpu")
    obs, infos = envs.reset(seed=0)                      # f32[1024, 4]
    obs, rew, term, trunc, infos = envs.step(envs.action_space.sample())

NumPy in, NumPy out; each `step` is one jitted call (see
`jaxwarp.adapters._batched` for the key schedule); the env state never
leaves the device.

Autoreset: jaxwarp resets a finished env inside the step that ends it, so
``metadata["autoreset_mode"]`` is ``AutoresetMode.SAME_STEP``: the obs
returned for a done env is the first observation of its next episode, and,
as Gymnasium's SyncVectorEnv does in that mode, ``infos["final_obs"]`` (an
object array: the final observation of each done env, None elsewhere, with
the mask ``"_final_obs"``) and ``infos["final_info"]`` (with
``"_final_info"``): ``episode_return``, ``terminated``, ``truncated`` of the
episode that ended, each with its ``_key`` mask. The final observations come
from stepping without auto-reset (`ContractEnv.step(autoreset=False)`) and,
when some env finished, again with it from the same key and state: a step
that ends an episode costs two env steps. ``final_obs=False`` skips them
(``metadata["final_obs"]`` says which); see docs/adapters.md.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from jaxwarp.adapters._batched import BatchedEnv, supports_final_obs


def single_spaces(env: Any, squeeze_agent: bool = True) -> tuple[gym.Space, gym.Space]:
    """(observation space, action space) of one env as Gymnasium spaces.

    Single-agent (and squeeze_agent): ``Box(obs_dim)`` and ``Discrete(n)``
    (one action head) or ``MultiDiscrete(nvec)``; multi-agent:
    ``Box[agents, obs_dim]`` and ``MultiDiscrete`` of shape ``[agents, heads]``.
    """
    box = env.observation_space
    low = np.asarray(box.low, np.float32)
    high = np.asarray(box.high, np.float32)
    nvec = np.asarray(env.action_space.nvec, np.int64)
    n = int(env.num_agents)
    if squeeze_agent and n == 1:
        obs_space = gym.spaces.Box(low, high, dtype=np.float32)
        act_space: gym.Space = (gym.spaces.Discrete(int(nvec[0])) if len(nvec) == 1
                                else gym.spaces.MultiDiscrete(nvec))
    else:
        shape = (n, *low.shape)
        obs_space = gym.spaces.Box(np.broadcast_to(low, shape).copy(),
                                   np.broadcast_to(high, shape).copy(), dtype=np.float32)
        act_space = gym.spaces.MultiDiscrete(np.broadcast_to(nvec, (n, len(nvec))).copy())
    return obs_space, act_space


class JaxwarpVectorEnv(gym.vector.VectorEnv):
    """`gymnasium.vector.VectorEnv` over ``num_envs`` copies of a jaxwarp env.

    Args:
        env: a jaxwarp env (`jaxwarp.make(name, backend=...)`), any backend.
        num_envs: batch size.
        copy: return writable copies of the arrays (True, like Gymnasium's
            SyncVectorEnv) or read-only views of the device buffers where the
            backend allows (False; CPU backends: no copy at all).

    Spaces: see `single_spaces`. step returns ``obs: f32[envs, obs_dim]``
    (multi-agent: ``f32[envs, agents, obs_dim]``), ``reward: f32[envs]``
    (multi-agent: ``f32[envs, agents]``, one reward per agent),
    ``terminated, truncated: bool[envs]`` and infos (see the module docstring).
        render_mode: None, or ``"rgb_array"``: `render` returns every env's
            current frame, a tuple of ``u8[H, W, 3]`` (`jaxwarp.render`,
            drawn in one jitted call; ``render_size`` pixels square).
        final_obs: report ``infos["final_obs"]`` (None: wherever the env
            can, see `jaxwarp.adapters._batched.supports_final_obs`; True:
            ValueError where it cannot; False: never).
    """

    metadata: ClassVar[dict[str, Any]] = {"autoreset_mode": AutoresetMode.SAME_STEP,
                                          "render_modes": ["rgb_array"], "final_obs": False}

    def __init__(self, env: Any, num_envs: int, *, copy: bool = True,
                 render_mode: str | None = None, render_size: int = 128,
                 final_obs: bool | None = None):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array'; got {render_mode!r}")
        if final_obs not in (None, True, False):
            raise TypeError(f"final_obs must be None, True or False; got {final_obs!r}")
        self.env = env
        final_obs = supports_final_obs(env) if final_obs is None else final_obs
        self._batch = BatchedEnv(env, num_envs, squeeze_agent=True, final_obs=final_obs)
        self.num_envs = self._batch.num_envs
        self.copy = bool(copy)
        self.single_observation_space, self.single_action_space = single_spaces(env)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.render_mode = render_mode
        self.metadata = {**type(self).metadata, "final_obs": self._batch.final_obs}
        self._render = _renderer(env, render_size) if render_mode else None

    def _np(self, x: Any) -> np.ndarray:
        return np.array(x) if self.copy else np.asarray(x)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """Resets every env; returns (obs, {}).

        seed: one int seeds the whole batch (``jax.random.key(seed)``; env e
        draws its own stream from it); None continues from the current key.
        options: ``{"reset_mask": bool[num_envs]}`` resets only those envs
        (the others keep their state); no other option is known.
        """
        if seed is not None and (isinstance(seed, bool)
                                 or not isinstance(seed, (int, np.integer))):
            raise TypeError("seed must be an int or None (one key seeds the whole batch; env e "
                            f"draws its own stream from it); got {seed!r}")
        super().reset(seed=None if seed is None else int(seed))
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if options:
            raise ValueError(f"unknown reset options {sorted(options)}; only 'reset_mask'")
        if mask is not None:
            mask = np.asarray(mask)
            if mask.dtype != np.bool_ or mask.shape != (self.num_envs,) or not mask.any():
                raise ValueError(f"options['reset_mask'] must be a bool[{self.num_envs}] array "
                                 "with at least one True value")
        return self._np(self._batch.reset(seed=seed, mask=mask)), {}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                          dict[str, Any]]:
        """One step of every env (one jitted call); actions of `action_space`'s shape."""
        out = self._batch.step(self._batch.check_actions(np.asarray(actions)))
        terminated = np.array(out.terminated)
        truncated = np.array(out.truncated)
        infos: dict[str, Any] = {}
        if terminated.any() or truncated.any():
            done = terminated | truncated
            final: dict[str, Any] = {"terminated": terminated, "_terminated": done.copy(),
                                     "truncated": truncated, "_truncated": done.copy()}
            if out.final_return is not None:
                final["episode_return"] = np.array(out.final_return)
                final["_episode_return"] = done.copy()
            infos["final_info"] = final
            infos["_final_info"] = done
            if out.final_obs is not None:
                rows = np.asarray(out.final_obs)
                final_obs = np.full(self.num_envs, None, dtype=object)
                for e in np.flatnonzero(done):
                    final_obs[e] = rows[e].copy()
                infos["final_obs"] = final_obs
                infos["_final_obs"] = done.copy()
        return self._np(out.obs), self._np(out.reward), terminated, truncated, infos

    def render(self) -> tuple[np.ndarray, ...] | None:
        """Every env's current frame, ``u8[H, W, 3]`` each (render_mode
        "rgb_array"); None without a render_mode, as Gymnasium does."""
        if self._render is None:
            return None
        if not self._batch.started:
            raise RuntimeError("call reset() before render()")
        return tuple(np.asarray(self._render(self._batch.state)))

    def close_extras(self, **kwargs: Any) -> None:
        self._batch.close()


def _renderer(env: Any, size: int):
    """Jitted state -> u8[envs, size, size, 3]; ValueError for an env with
    no drawing."""
    import jax

    from jaxwarp.render import check_renderable, render_batch

    check_renderable(env)
    return jax.jit(lambda state: render_batch(env, state, size))


def make_vec(name: str, num_envs: int, backend: str = "auto", *, copy: bool = True,
             config: str | None = None, render_mode: str | None = None,
             final_obs: bool | None = None, **params: Any) -> JaxwarpVectorEnv:
    """`JaxwarpVectorEnv` over ``jaxwarp.make(name, backend, config, **params)``."""
    import jaxwarp

    return JaxwarpVectorEnv(jaxwarp.make(name, backend=backend, config=config, **params),
                            num_envs, copy=copy, render_mode=render_mode, final_obs=final_obs)
