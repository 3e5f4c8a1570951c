"""A jaxwarp env at a fixed batch size behind two jitted calls: the common core
of the host-side adapters (Gymnasium, PettingZoo, PyTorch).

`BatchedEnv` keeps the key and the env state on the env's device between
calls; `reset` and `step` are each one jitted call (the key is split inside
it, the state and key buffers are donated, so the kernels update them in
place; with final observations only the key: two steps read the state).
What crosses to the caller is what it asked for: observations,
rewards, terminated/truncated flags, the final return of the envs whose
episode ended and (``final_obs=True``) their final observations.

Key schedule (the direct API reproduces every value bit for bit)::

    key = jax.random.key(seed)                   # reset(seed), seed < 2**32
    key, k = jax.random.split(key); obs, state = env.reset(k, num_envs)
    key, k = jax.random.split(key); env.step(k, state, actions)   # each step

Seeds are ints in [0, 2**64), all 64 bits significant: the key is
``jax.random.key(seed)`` as JAX computes it with 64-bit integers
(``jax_enable_x64``), key data ``u32[seed >> 32, seed & 0xFFFFFFFF]`` (`seed_key`).
With x64 off (JAX's default) ``jax.random.key`` keeps only the low 32 bits,
so seeds 2**32 apart would give the same stream; seeds below 2**32 give
exactly ``jax.random.key(seed)`` either way.

A reset without a seed continues from the current key. A list of seeds (one
per env) starts env e as a reset with seed ``seeds[e]`` would (a masked reset
per distinct seed), and the key continues from ``seeds[0]``'s.

Autoreset modes (``autoreset_mode``, Gymnasium's names):

* ``"same_step"`` (jaxwarp's own): a finished env restarts inside the step
  that ends it; that step returns the next episode's first obs (and, with
  ``final_obs=True``, the final obs apart).
* ``"next_step"`` (Gymnasium's default): the step that ends an episode
  returns its final obs (the env steps with ``autoreset=False``); the next
  step ignores that env's action and returns a fresh start (drawn by
  ``env.reset`` with that step's key) with reward 0 and both flags False.
* ``"disabled"``: steps never reset; the caller resets finished envs with a
  masked reset.

Observation dtype: the env's own (``env.obs_dtype``: float32, or bfloat16
for an env made with ``obs_dtype="bfloat16"``), or, with ``obs_dtype=``, cast
to that dtype inside the jitted calls (the NumPy adapters ask for float32:
NumPy consumers generally cannot take ml_dtypes' bfloat16, and bf16 -> f32 is
exact).

Layout (``squeeze_agent=True`` and a single-agent env): the agent axis is
dropped, so ``obs: f32[envs, obs_dim]``, ``reward: f32[envs]`` and actions
``i32[envs]`` (one action head) or ``i32[envs, heads]``. Otherwise
``obs: f32[envs, agents, obs_dim]``, ``reward: f32[envs, agents]``, actions
``i32[envs, agents, heads]`` (jaxwarp's own layout).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp.authoring import reference_takes_autoreset
from jaxwarp.core import auto_reset
from jaxwarp.params_check import check_num_envs


class StepOut(NamedTuple):
    """One step's outputs, device arrays in the adapter's layout.

    obs: f32 (or the env's / the adapter's obs dtype) [envs, (agents,) obs_dim]
        (for done envs: the next episode's first obs);
    reward: f32[envs, (agents)]; terminated, truncated: bool[envs];
    final_return: f32[envs, (agents)]: the return of the episode that ended
        where terminated | truncated, 0 elsewhere; None if the env's state
        has no ``episode_return`` field.
    final_obs: f32[envs, (agents,) obs_dim]: where terminated | truncated the
        observation of the state the episode ended in (elsewhere equal to
        obs); None unless the adapter asked for it (same-step mode; in the
        other modes obs is the final observation where an episode ended).
    """

    obs: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    final_return: jax.Array | None
    final_obs: jax.Array | None = None


def supports_final_obs(env: Any) -> bool:
    """Whether `env` can report final observations: its step takes
    ``autoreset=`` (every ContractEnv on the kernel backends; on the 'jax'
    backend, where the env's pure-JAX reference takes it too)."""
    step = getattr(env, "step", None)
    if step is None or "autoreset" not in inspect.signature(step).parameters:
        return False
    if getattr(env, "backend", "jax") == "jax":
        spec = getattr(env, "spec", None)
        return spec is not None and reference_takes_autoreset(spec)
    return True


def env_device(env: Any) -> jax.Device:
    """The device the env's kernels run on: the GPU for backend "cuda", the CPU
    for "cpu", JAX's default device for "jax"."""
    backend = getattr(env, "backend", "jax")
    if backend == "cuda":
        return jax.devices("gpu")[0]
    if backend == "cpu":
        return jax.devices("cpu")[0]
    return jax.devices()[0]


def _obs_cast(obs_dtype: Any) -> np.dtype | None:
    """The floating dtype observations are cast to (None: keep the env's); TypeError otherwise."""
    if obs_dtype is None:
        return None
    try:
        cast = np.dtype(obs_dtype)
    except TypeError as e:
        raise TypeError(f"obs_dtype must be None or a floating dtype; got "
                        f"{obs_dtype!r}") from e
    if not jnp.issubdtype(cast, jnp.floating):
        raise TypeError(f"obs_dtype must be None or a floating dtype; got {cast}")
    return cast


def _check_autoreset(env: Any, autoreset_mode: str, final_obs: bool) -> None:
    """ValueError unless `env` can step as `autoreset_mode` and `final_obs` ask."""
    if autoreset_mode != "same_step":
        if final_obs:
            raise ValueError(f"final_obs=True applies to autoreset_mode 'same_step'; in "
                             f"{autoreset_mode!r} the step that ends an episode returns "
                             "its final observation as obs")
        if not supports_final_obs(env):
            raise ValueError(f"autoreset_mode={autoreset_mode!r}: {type(env).__name__} "
                             f"(backend {getattr(env, 'backend', 'jax')!r}) cannot step "
                             "without auto-reset (use 'same_step')")
    if final_obs and not supports_final_obs(env):
        raise ValueError(f"final_obs=True: {type(env).__name__} (backend "
                         f"{getattr(env, 'backend', 'jax')!r}) cannot step without "
                         "auto-reset (its step, or on the 'jax' backend its reference_step, "
                         "takes no autoreset=)")


class BatchedEnv:
    """``num_envs`` copies of a jaxwarp env, stepped by one jitted call each step.

    Args:
        env: a jaxwarp env (`jaxwarp.make(...)`).
        num_envs: batch size, fixed for the life of the object.
        squeeze_agent: drop the agent axis of single-agent envs (see the module
            docstring).
        final_obs: also return the final observations of the envs that finish
            (`StepOut.final_obs`). The step then runs without auto-reset and,
            only when some env finished, once more with it from the same key
            and state (the same outcome, plus the resets). ValueError if the
            env cannot (`supports_final_obs`).
        autoreset_mode: "same_step" (default), "next_step" or "disabled" (see
            the module docstring); the last two need an env that steps
            without auto-reset (`supports_final_obs`) and take no final_obs.
        obs_dtype: None (observations in the env's dtype, ``env.obs_dtype``)
            or a floating dtype the observations (and final observations)
            are cast to inside the jitted calls; `obs_dtype` says which.
    """

    def __init__(self, env: Any, num_envs: int, squeeze_agent: bool = True,
                 final_obs: bool = False, autoreset_mode: str = "same_step",
                 obs_dtype: Any = None):
        num_envs = check_num_envs(num_envs)
        self.env = env
        self.num_envs = int(num_envs)
        self.num_agents = int(env.num_agents)
        self.obs_dim = int(env.obs_dim)
        self.nvec = tuple(int(v) for v in env.action_space.nvec)
        self.heads = len(self.nvec)
        self.squeezed = bool(squeeze_agent) and self.num_agents == 1
        self.device = env_device(env)
        self.final_obs = bool(final_obs)
        if autoreset_mode not in AUTORESET_MODES:
            raise ValueError(f"autoreset_mode must be one of {AUTORESET_MODES}; got "
                             f"{autoreset_mode!r}")
        self.autoreset_mode = autoreset_mode
        env_dtype = np.dtype(getattr(env, "obs_dtype", np.float32))
        cast = _obs_cast(obs_dtype)
        # dtype of the observations handed out: f32[...] or bf16[...].
        self.obs_dtype: np.dtype = env_dtype if cast is None else cast
        cast_name = None if cast is None or cast == env_dtype else cast.name
        _check_autoreset(env, autoreset_mode, self.final_obs)
        if self.squeezed:
            self.action_shape: tuple[int, ...] = () if self.heads == 1 else (self.heads,)
            self.obs_shape: tuple[int, ...] = (self.obs_dim,)
        else:
            self.action_shape = (self.num_agents, self.heads)
            self.obs_shape = (self.num_agents, self.obs_dim)
        # nvec broadcast to one action's shape (host-side range check).
        self._nvec_np = np.broadcast_to(np.asarray(self.nvec, np.int64),
                                        self.action_shape or (1,)).reshape(self.action_shape)
        self._nvec_min = min(self.nvec)
        self._key: jax.Array | None = None
        self._state: Any = None
        self._obs: jax.Array | None = None
        # next_step: bool[envs], the envs whose episode ended on the last step
        # (they restart on the next one).
        self._pending: jax.Array | None = None
        self._reset_fn, self._masked_fn, self._step_fn = _compiled(
            env, self.num_envs, self.squeezed, bool(getattr(env, "checks", False)),
            self.final_obs, autoreset_mode, cast_name)

    # -- host API ----------------------------------------------------------
    @property
    def started(self) -> bool:
        return self._state is not None

    def reset(self, seed: Any = None, mask: Any = None) -> jax.Array:
        """Resets every env (or, with ``mask: bool[envs]``, those where mask is
        true; the others keep their state and observation). Returns obs.

        seed: an int in [0, 2**64) starts a new key (`seed_key`); None
        continues from the current key (a first reset without a seed draws one
        from NumPy's entropy); a list of ``num_envs`` ints (or None entries:
        one fresh seed for those) starts env e as ``reset(seeds[e])`` would.
        """
        if seed is not None and not is_int(seed):
            seeds = check_seeds(seed, self.num_envs)
            if mask is not None:
                raise ValueError("reset: a list of seeds resets every env; pass no mask")
            return self._reset_seeds(seeds)
        if seed is not None:
            self._key = _key_data(check_seed(seed), self.device)
        elif self._key is None:
            fresh = int(np.random.SeedSequence().generate_state(1)[0])
            self._key = _key_data(fresh, self.device)
        if mask is None or not self.started:
            if mask is not None:
                raise ValueError("a masked reset needs a first full reset")
            self._key, self._state, self._obs = self._reset_fn(self._key)
        else:
            mask = np.asarray(mask)
            if mask.shape != (self.num_envs,) or mask.dtype != np.bool_:
                raise ValueError(f"reset mask must be bool[{self.num_envs}]; got "
                                 f"{mask.dtype}{list(mask.shape)}")
            self._key, self._state, self._obs = self._masked_fn(
                self._key, self._state, self._obs, mask)
        if self.autoreset_mode == "next_step":
            self._pending = (jnp.zeros((self.num_envs,), bool) if mask is None
                             else self._pending & ~jnp.asarray(mask))
        return self._obs

    def _reset_seeds(self, seeds: list[int]) -> jax.Array:
        """Env e as ``reset(seed=seeds[e])`` would start it: one full reset
        and a masked reset per other distinct seed, ``seeds[0]``'s last (so
        the key continues from it)."""
        arr = np.asarray(seeds, np.uint64)  # seeds lie in [0, 2**64)
        order = [s for s in dict.fromkeys(seeds) if s != seeds[0]] + [seeds[0]]
        self.reset(seed=order[0])
        for s in order[1:]:
            self.reset(seed=s, mask=arr == s)
        return self._obs

    def check_actions(self, actions: np.ndarray) -> np.ndarray:
        """Host-side check of numpy actions: shape, integer dtype, range.
        Returns them as int32."""
        want = (self.num_envs, *self.action_shape)
        if actions.shape != want:
            raise ValueError(f"actions must have shape {want}; got {tuple(actions.shape)}")
        if actions.dtype.kind not in "iu":
            raise TypeError(f"actions must be integers; got dtype {actions.dtype}")
        # Two reductions in the common case; the per-head test only when the
        # largest action reaches the smallest head size (this runs every step).
        if actions.size and (actions.min() < 0 or (actions.max() >= self._nvec_min and np.any(
                actions >= self._nvec_np))):
            raise ValueError(f"actions out of range: each action head h must lie in "
                             f"[0, nvec[h]) with nvec={self.nvec}")
        return actions.astype(np.int32, copy=False)

    def step(self, actions: Any) -> StepOut:
        """One step of every env. actions: int32 array (numpy or a device array
        already checked by the caller) of shape ``(num_envs, *action_shape)``."""
        if not self.started:
            raise RuntimeError("call reset() before step()")
        if self.autoreset_mode == "next_step":
            self._key, self._state, out, self._pending = self._step_fn(
                self._key, self._state, actions, self._pending)
        else:
            self._key, self._state, out = self._step_fn(self._key, self._state, actions)
        self._obs = out.obs
        return out

    @property
    def state(self) -> Any:
        """The env state (device arrays; donated by the next step: read, do not keep)."""
        return self._state

    def close(self) -> None:
        self._key = self._state = self._obs = self._pending = None


AUTORESET_MODES = ("same_step", "next_step", "disabled")


def is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def check_seeds(seed: Any, num_envs: int) -> list[int]:
    """A list/tuple/array of ``num_envs`` seeds as ints (None entries: one
    fresh seed from NumPy's entropy for all of them); TypeError/ValueError
    otherwise."""
    if isinstance(seed, (str, bytes, bool, np.bool_)) or not hasattr(seed, "__len__"):
        raise TypeError("seed must be an int, a list of num_envs ints, or None (one key "
                        "seeds the whole batch; env e draws its own stream from it); got "
                        f"{seed!r}")
    seeds = list(np.asarray(seed, dtype=object).reshape(-1)) if isinstance(
        seed, np.ndarray) else list(seed)
    if len(seeds) != num_envs:
        raise ValueError(f"seed: a list of seeds needs one per env ({num_envs}); got "
                         f"{len(seeds)}")
    bad = [s for s in seeds if s is not None and not is_int(s)]
    if bad:
        raise TypeError(f"seed: every entry must be an int or None; got {bad[0]!r}")
    fresh = int(np.random.SeedSequence().generate_state(1)[0])
    return [fresh if s is None else check_seed(s) for s in seeds]


def check_seed(seed: Any) -> int:
    """An int seed in [0, 2**64) (Gymnasium refuses negative seeds; a
    threefry key holds 64 bits of seed, `seed_key`) as a Python int;
    ValueError otherwise."""
    if not 0 <= int(seed) < 2**64:
        raise ValueError(f"seed must be an int in [0, 2**64); got {seed!r}")
    return int(seed)


def seed_key(seed: int) -> jax.Array:
    """The adapters' key for an int ``seed`` in [0, 2**64): ``jax.random.key(seed)``
    as JAX computes it with 64-bit integers on, whatever ``jax_enable_x64`` says.

    With x64 off (JAX's default) ``jax.random.key`` converts the seed to
    int32 and keeps its low 32 bits, so ``key(2**32) == key(0)``: Gymnasium
    accepts any non-negative seed, and seeds 2**32 apart would replay the
    same episodes. Seeds below 2**32 take ``jax.random.key(seed)`` itself
    (the same stream as before and as the direct API with x64 off); larger
    ones the 64-bit seed (for the default threefry key: data
    ``u32[seed >> 32, seed & 0xFFFFFFFF]``, what the key's seeding function
    makes of a 64-bit seed), so distinct seeds give distinct keys."""
    if seed < 2**32:
        return jax.random.key(seed)
    with jax.enable_x64(True):
        return jax.random.key(np.uint64(seed))


# ---------------------------------------------------------------------------
# The jitted bodies: one set per (env, num_envs, layout), shared by every
# adapter over the same env object (a new adapter does not recompile).
# ---------------------------------------------------------------------------
def _key_data(seed: int, device: jax.Device) -> jax.Array:
    """u32[2]: the raw data of `seed_key` (``jax.random.key(seed)``). The
    adapters carry the key as raw data between calls: a typed key array costs
    a Python wrapper per call (about 15 us of a 64-env step on a CPU), the
    bits are the same."""
    return jax.device_put(jax.random.key_data(seed_key(seed)), device)


def _split(key_data: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(next key data, typed subkey) of ``jax.random.split``."""
    key, k = jax.random.split(jax.random.wrap_key_data(key_data))
    return jax.random.key_data(key), k


def _user(x: jax.Array, squeezed: bool) -> jax.Array:
    return x[:, 0] if squeezed else x


def _user_obs(obs: jax.Array, squeezed: bool, obs_dtype: str | None) -> jax.Array:
    """Observations in the adapter's layout and dtype (a cast inside the jitted
    call: the buffer handed out is the cast one, no second pass on the host)."""
    obs = _user(obs, squeezed)
    return obs if obs_dtype is None else obs.astype(obs_dtype)


def _reset_impl(env: Any, num_envs: int, squeezed: bool, key: jax.Array, *,
                obs_dtype: str | None = None):
    key, k = _split(key)
    obs, state = env.reset(k, num_envs)
    return key, state, _user_obs(obs, squeezed, obs_dtype)


def _masked_reset_impl(env: Any, num_envs: int, squeezed: bool, key: jax.Array, state: Any,
                       obs: jax.Array, mask: jax.Array, *, obs_dtype: str | None = None):
    key, fresh_state, fresh_obs = _reset_impl(env, num_envs, squeezed, key,
                                              obs_dtype=obs_dtype)
    return key, auto_reset(mask, fresh_state, state), auto_reset(mask, fresh_obs, obs)


def _step_impl(env: Any, num_envs: int, squeezed: bool, final_obs: bool, key: jax.Array,
               state: Any, actions: jax.Array, mode: str = "same_step",
               pending: jax.Array | None = None, obs_dtype: str | None = None):
    key, k = _split(key)
    heads = len(env.action_space.nvec)
    actions = actions.reshape(num_envs, env.num_agents, heads)
    final = None
    if mode != "same_step":
        # The step that ends an episode shows its last state.
        obs, state, reward, done, info = env.step(k, state, actions, autoreset=False)
        if mode == "next_step":
            # Envs that ended on the last step start over instead of stepping:
            # a fresh start (its own key: fold_in(k, 1)), reward 0, no flags.
            def with_reset(a: tuple[jax.Array, Any]) -> tuple[jax.Array, Any]:
                fresh_obs, fresh = env.reset(jax.random.fold_in(k, 1), num_envs)
                return auto_reset(pending, fresh_obs, a[0]), auto_reset(pending, fresh, a[1])

            obs, state = jax.lax.cond(pending.any(), with_reset, lambda a: a, (obs, state))
            p = pending.reshape(pending.shape + (1,) * (reward.ndim - 1))
            reward = jnp.where(p, jnp.zeros_like(reward), reward)
            done = done & ~pending
            info = {**info, **{f: info[f] & ~pending for f in ("terminated", "truncated")
                               if f in info}}
    elif final_obs:
        # Without auto-reset first: the finished envs' final observations.
        # Where some env finished, the step again with auto-reset from the same
        # key and state: the same rewards and flags, and the fresh starts
        # (a lax.cond: steps where no episode ends pay for one env step).
        final, ended, reward, done, info = env.step(k, state, actions, autoreset=False,
                                                    in_place=False)

        def with_reset(_: Any) -> tuple[jax.Array, Any]:
            obs, state_r, *_ = env.step(k, state, actions, in_place=False)
            return obs, state_r

        obs, state = jax.lax.cond(done.any(), with_reset, lambda _: (final, ended), None)
        final = _user_obs(final, squeezed, obs_dtype)
    else:
        obs, state, reward, done, info = env.step(k, state, actions)
    truncated = info.get("truncated", jnp.zeros_like(done))
    terminated = info.get("terminated", done & ~truncated)
    ret = getattr(state, "episode_return", None)
    if ret is not None:
        # A new array, not the state's buffer (the next step donates that one).
        d = done.reshape(done.shape + (1,) * (ret.ndim - 1))
        ret = jnp.where(d, ret, jnp.zeros_like(ret))
        ret = _user(ret, squeezed) if ret.ndim == 2 else ret
    out = StepOut(_user_obs(obs, squeezed, obs_dtype), _user(reward, squeezed), terminated,
                  truncated, ret, final)
    if mode == "next_step":
        return key, state, out, done
    return key, state, out


@functools.lru_cache(maxsize=64)
def _compiled(env: Any, num_envs: int, squeezed: bool, checks: bool, final_obs: bool = False,
              mode: str = "same_step", obs_dtype: str | None = None):
    """(reset, masked reset, step): jitted, key and state donated (step with
    final_obs: the key only; next_step's step also takes and returns the
    pending mask); observations cast to ``obs_dtype`` (a dtype name) unless
    None; with
    checks=True the env reports out-of-range actions through checkify and
    the call raises on the host."""
    def make(fn: Any, donate: tuple[int, ...]) -> Any:
        body = functools.partial(fn, env, num_envs, squeezed, obs_dtype=obs_dtype)
        if not checks:
            return jax.jit(body, donate_argnums=donate)
        from jax.experimental import checkify

        checked = jax.jit(checkify.checkify(body), donate_argnums=donate)

        def call(*args: Any) -> Any:
            err, out = checked(*args)
            err.throw()
            return out
        return call

    def step_impl(env: Any, num_envs: int, squeezed: bool, key: jax.Array, state: Any,
                  actions: jax.Array, pending: jax.Array | None = None, *,
                  obs_dtype: str | None = None):
        return _step_impl(env, num_envs, squeezed, final_obs, key, state, actions, mode,
                          pending, obs_dtype)

    # With final observations the state is read by two steps: donating it
    # would make XLA copy it (small copies cost XLA:CPU ~10 us each).
    return (make(_reset_impl, ()), make(_masked_reset_impl, (0, 1)),
            make(step_impl, (0,) if final_obs else (0, 1)))
