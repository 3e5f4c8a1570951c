"""Gymnasium 1.x vector env over any jaxwarp env and backend.

    from jaxwarp.adapters.gymnasium import make_vec
    envs = make_vec("cartpole", num_envs=1024, backend="cpu")
    obs, infos = envs.reset(seed=0)                      # f32[1024, 4]
    obs, rew, term, trunc, infos = envs.step(envs.action_space.sample())

NumPy in, NumPy out; each `step` is one jitted call (see
`jaxwarp.adapters._batched` for the key schedule); the env state never
leaves the device. Rewards are float64 (as Gymnasium's SyncVectorEnv gives
them), observations float32, as the observation spaces say, also over an env
made with ``obs_dtype="bfloat16"`` (cast inside the jitted call, exactly: NumPy
code generally cannot take ml_dtypes' bfloat16). Seeds are ints in [0, 2**64),
all 64 bits significant (`jaxwarp.adapters._batched.seed_key`).

Autoreset (``metadata["autoreset_mode"]``, chosen with ``autoreset_mode=``):

* ``AutoresetMode.NEXT_STEP`` (the default, as Gymnasium's): the step that
  ends an episode returns its final observation; the next step ignores that
  env's action and returns the first observation of a new episode, reward 0,
  ``terminated = truncated = False``. Gymnasium's vector wrappers
  (NormalizeObservation, RecordEpisodeStatistics, ...) expect this mode.
* ``AutoresetMode.SAME_STEP`` (jaxwarp's own): a finished env restarts inside
  the step that ends it, so the obs returned for a done env is the first
  observation of its next episode, and, as SyncVectorEnv does in that mode,
  ``infos["final_obs"]`` (an object array: the final observation of each
  done env, None elsewhere, with the mask ``"_final_obs"``) and
  ``infos["final_info"]`` (with ``"_final_info"``): ``episode_return``,
  ``terminated``, ``truncated`` of the episode that ended, each with its
  ``_key`` mask. The final observations come from stepping without
  auto-reset (`ContractEnv.step(autoreset=False)`) and, when some env
  finished, again with it from the same key and state: a step that ends an
  episode costs two env steps. ``final_obs=False`` skips them
  (``metadata["final_obs"]`` says which).
* ``AutoresetMode.DISABLED``: no reset inside `step`; reset finished envs with
  ``reset(options={"reset_mask": mask})``.

In NEXT_STEP and DISABLED modes the step that ends an episode carries
``infos["episode_return"]`` (with ``"_episode_return"``). See docs/adapters.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvSpec
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from jaxwarp.adapters._batched import (BatchedEnv, check_seed, check_seeds, is_int,
                                       supports_final_obs)
from jaxwarp.render import batch_renderer

_MODES = {AutoresetMode.NEXT_STEP: "next_step", AutoresetMode.SAME_STEP: "same_step",
          AutoresetMode.DISABLED: "disabled"}


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


def render_fps(env: Any) -> int:
    """Frames per second for `env`'s renders (``metadata["render_fps"]``):
    the env's own (its spec's ``render_fps``: the original's where jaxwarp
    mirrors one), else one frame per simulated time step where its params
    say how long that is (``1 / dt`` or ``1 / tau``), else 30."""
    fps = getattr(getattr(env, "spec", None), "render_fps", None)
    if fps is not None:
        return int(fps)
    params = getattr(env, "params", None)
    for field in ("dt", "tau"):
        dt = getattr(params, field, None)
        if isinstance(dt, (int, float)) and dt > 0:
            return max(1, round(1 / dt))
    return 30


def as_env(env: Any, adapter: str) -> Any:
    """`env` itself if it is a jaxwarp env; ``jaxwarp.make(env)`` for a
    registered env's name; TypeError otherwise."""
    if isinstance(env, str):
        import jaxwarp

        return jaxwarp.make(env)
    needed = ("num_agents", "obs_dim", "action_space", "observation_space", "reset", "step")
    missing = [a for a in needed if not hasattr(env, a)]
    if missing:
        raise TypeError(f"{adapter}: env must be a jaxwarp env (jaxwarp.make(name, ...)) or a "
                        f"registered env's name (str); got {type(env).__name__} (no "
                        f"{', '.join(missing)})")
    return env


def autoreset_mode_of(mode: Any) -> AutoresetMode:
    """An `AutoresetMode` from the enum, its value ("NextStep") or its name in
    any case ("next_step"); ValueError otherwise."""
    if isinstance(mode, AutoresetMode):
        return mode
    if isinstance(mode, str):
        for m in AutoresetMode:
            if mode in (m.value, m.name) or mode.upper() == m.name:
                return m
    raise ValueError(f"autoreset_mode must be a gymnasium.vector.AutoresetMode (NEXT_STEP, "
                     f"SAME_STEP or DISABLED) or its name; got {mode!r}")


class JaxwarpVectorEnv(gym.vector.VectorEnv):
    """`gymnasium.vector.VectorEnv` over ``num_envs`` copies of a jaxwarp env.

    Args:
        env: a jaxwarp env (`jaxwarp.make(name, backend=...)`), any backend, or
            a registered env's name (``jaxwarp.make(name)``; `make_vec` takes
            a backend and params too).
        num_envs: batch size.
        copy: return writable copies of the arrays (True, like Gymnasium's
            SyncVectorEnv) or read-only views of the device buffers where the
            backend allows (False; CPU backends: no copy at all). Rewards
            are float64 copies either way.
        render_mode: None, or ``"rgb_array"``: `render` returns every env's
            current frame, a tuple of ``u8[H, W, 3]`` (`jaxwarp.render`,
            drawn in one jitted call; ``render_size`` pixels square).
        final_obs: SAME_STEP mode only: report ``infos["final_obs"]`` (None:
            wherever the env can, see
            `jaxwarp.adapters._batched.supports_final_obs`; True: ValueError
            where it cannot; False: never).
        autoreset_mode: `gymnasium.vector.AutoresetMode` (or its name):
            NEXT_STEP (default), SAME_STEP or DISABLED; see the module
            docstring.

    Spaces: see `single_spaces`. step returns ``obs: f32[envs, obs_dim]``
    (multi-agent: ``f32[envs, agents, obs_dim]``; float32 over a bfloat16-obs
    env too, the spaces' dtype), ``reward: f64[envs]``
    (multi-agent: ``f64[envs, agents]``, one reward per agent),
    ``terminated, truncated: bool[envs]`` and infos (see the module docstring).
    `get_attr`, `call` and `set_attr` reach the one jaxwarp env object that
    every copy shares.
    """

    metadata: ClassVar[dict[str, Any]] = {"autoreset_mode": AutoresetMode.NEXT_STEP,
                                          "render_modes": ["rgb_array"], "render_fps": 30,
                                          "final_obs": False}

    def __init__(self, env: Any, num_envs: int, *, copy: bool = True,
                 render_mode: str | None = None, render_size: int = 128,
                 final_obs: bool | None = None,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array'; got {render_mode!r}")
        if final_obs not in (None, True, False):
            raise TypeError(f"final_obs must be None, True or False; got {final_obs!r}")
        mode = autoreset_mode_of(autoreset_mode)
        env = as_env(env, "JaxwarpVectorEnv")
        self.env = env
        if mode != AutoresetMode.SAME_STEP:
            if final_obs:
                raise ValueError(f"final_obs=True applies to AutoresetMode.SAME_STEP; in "
                                 f"{mode.name} the step that ends an episode returns its "
                                 "final observation as obs")
            final_obs = False
        final_obs = supports_final_obs(env) if final_obs is None else final_obs
        # float32 observations whatever the env's obs_dtype: the spaces are f32
        # Boxes, and NumPy consumers generally cannot take bfloat16.
        self._batch = BatchedEnv(env, num_envs, squeeze_agent=True, final_obs=final_obs,
                                 autoreset_mode=_MODES[mode], obs_dtype=np.float32)
        self.num_envs = self._batch.num_envs
        self.copy = bool(copy)
        self.single_observation_space, self.single_action_space = single_spaces(env)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.render_mode = render_mode
        self.metadata = {**type(self).metadata, "autoreset_mode": mode,
                         "render_fps": render_fps(env), "final_obs": self._batch.final_obs}
        self.spec = _spec(env, mode, render_mode)
        self._render = batch_renderer(env, render_size) if render_mode else None

    def _np(self, x: Any) -> np.ndarray:
        return np.array(x) if self.copy else np.asarray(x)

    def reset(self, *, seed: int | list[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """Resets every env; returns (obs, {}).

        seed: one int in [0, 2**64) seeds the whole batch
        (``jax.random.key(seed)`` with all 64 bits kept,
        `jaxwarp.adapters._batched.seed_key`; env e draws its own stream
        from it); a list of ``num_envs`` ints (None
        entries: fresh ones) starts env e as ``reset(seed=seeds[e])`` would
        start it (one reset per distinct seed); None continues from the
        current key.
        options: ``{"reset_mask": bool[num_envs]}`` resets only those envs
        (the others keep their state); no other option is known.
        """
        if seed is not None:
            seed = check_seed(seed) if is_int(seed) else check_seeds(seed, self.num_envs)
        super().reset(seed=None if seed is None else (seed if is_int(seed) else seed[0]))
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if options:
            raise ValueError(f"unknown reset options {sorted(options)}; only 'reset_mask'")
        if mask is not None:
            mask = np.asarray(mask)
            if mask.dtype != np.bool_ or mask.shape != (self.num_envs,) or not mask.any():
                raise ValueError(f"options['reset_mask'] must be a bool[{self.num_envs}] array "
                                 "with at least one True value")
            if seed is not None and not is_int(seed):
                raise ValueError("reset: seed as a list resets every env; pass no reset_mask")
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
            if self._batch.autoreset_mode != "same_step":
                if out.final_return is not None:
                    infos["episode_return"] = np.array(out.final_return)
                    infos["_episode_return"] = done
            else:
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
        reward = np.asarray(out.reward).astype(np.float64)
        return self._np(out.obs), reward, terminated, truncated, infos

    def render(self) -> tuple[np.ndarray, ...] | None:
        """Every env's current frame, ``u8[H, W, 3]`` each (render_mode
        "rgb_array"); None without a render_mode, as Gymnasium does."""
        if self._render is None:
            return None
        if not self._batch.started:
            raise RuntimeError("call reset() before render()")
        return tuple(np.asarray(self._render(self._batch.state)))

    # -- Gymnasium's per-sub-env access. Every copy is the same jaxwarp env
    # object (its params are static, compiled into the step), so each call
    # answers num_envs times the same thing.
    def get_attr(self, name: str) -> tuple[Any, ...]:
        """``getattr(env, name)`` of the jaxwarp env, once per copy (a tuple of
        ``num_envs``); AttributeError if it has none."""
        value = getattr(self.env, name)
        return (value,) * self.num_envs

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """The jaxwarp env's attribute `name`, called with the arguments if
        callable (once: the copies share it), as a tuple of ``num_envs``.
        ``call("render")`` gives each env's own frame (`render`)."""
        if name == "render":
            frames = self.render()
            return (None,) * self.num_envs if frames is None else frames
        value = getattr(self.env, name)
        if callable(value):
            value = value(*args, **kwargs)
        return (value,) * self.num_envs

    def set_attr(self, name: str, values: Any) -> None:
        """Sets a new attribute on the jaxwarp env that every copy shares: one
        value, or a list/tuple of ``num_envs`` equal values. An attribute the
        env already has (its params, backend, ...) is refused (AttributeError):
        the compiled step would not see the change; build a new env instead."""
        if isinstance(values, (list, tuple)):
            if len(values) != self.num_envs:
                raise ValueError(f"set_attr: values must be one value or a list/tuple of "
                                 f"num_envs={self.num_envs}; got {len(values)}")
            if any(v is not values[0] and v != values[0] for v in values[1:]):
                raise ValueError("set_attr: every copy shares one jaxwarp env object, so "
                                 "the values must all be equal")
            values = values[0]
        if name in self._set_attrs or not hasattr(self.env, name):
            setattr(self.env, name, values)
            self._set_attrs.add(name)
            return
        raise AttributeError(f"set_attr: {type(self.env).__name__} already has {name!r}; "
                             "jaxwarp compiles the env's params and backend into its step, "
                             "so changing them here would not take effect: build a new env "
                             "(make_vec(name, ..., **params))")

    @property
    def _set_attrs(self) -> set[str]:
        attrs = self.__dict__.setdefault("_set_attr_names", set())
        return attrs

    def close_extras(self, **kwargs: Any) -> None:
        self._batch.close()


def _spec(env: Any, mode: AutoresetMode, render_mode: str | None) -> EnvSpec:
    """A Gymnasium `EnvSpec` that `gymnasium.make_vec(spec, num_envs=n)` turns
    back into the same adapter (vector entry point `make_vec`)."""
    name = str(getattr(env, "name", type(env).__name__))
    params = getattr(env, "params", None)
    kwargs: dict[str, Any] = {"name": name, "backend": getattr(env, "backend", "auto"),
                              "autoreset_mode": mode.name}
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    if dataclasses.is_dataclass(params):
        kwargs.update(dataclasses.asdict(params))
    return EnvSpec(id=f"jaxwarp/{name}", entry_point=None,
                   vector_entry_point="jaxwarp.adapters.gymnasium:make_vec", kwargs=kwargs)


def make_vec(name: str, num_envs: int, backend: str = "auto", *, copy: bool = True,
             config: str | None = None, render_mode: str | None = None,
             final_obs: bool | None = None,
             autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
             **params: Any) -> JaxwarpVectorEnv:
    """`JaxwarpVectorEnv` over ``jaxwarp.make(name, backend, config, **params)``."""
    import jaxwarp

    return JaxwarpVectorEnv(jaxwarp.make(name, backend=backend, config=config, **params),
                            num_envs, copy=copy, render_mode=render_mode, final_obs=final_obs,
                            autoreset_mode=autoreset_mode)
