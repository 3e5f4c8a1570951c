"""The runtime layer: the env object of a spec.

`ContractEnv` holds an env's spec, params and backend: on "cpu" and "cuda"
it builds (or loads from the cache) the env's library through `build` and
calls its FFI targets; on "jax" it runs the spec's pure-JAX reference.
`env_class(spec)` makes the class users instantiate, `build_env(spec, ...)`
an instance.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp import _ffi
from jaxwarp.authoring.build import register_targets, launch_layout
from jaxwarp.authoring.spec import (DTYPES, EnvBuildError, EnvSpec, static_param_names,
                                    check_params_id, kernel_param_values, pack_params,
                                    params_id, per_env_words, tag_state)
from jaxwarp.core import key_data_of, resolve_backend
from jaxwarp.memory import check_fits
from jaxwarp.params_check import check_num_envs
from jaxwarp.spaces import Box, MultiDiscrete


# ---------------------------------------------------------------------------
# The env object.
# ---------------------------------------------------------------------------
class ContractEnv:
    """A batched env built from an `EnvSpec` (same API as TagContinuous).

    ``obs, state = env.reset(key, num_envs)``;
    ``obs, state, reward, done, info = env.step(key, state, actions)`` with
    ``actions: i32[envs, agents, heads]``, ``obs: f32[envs, agents, obs_dim]``,
    ``reward: f32[envs, agents]``, ``done: bool[envs]``, info
    {"terminated", "truncated": bool[envs], "episode_return" when the state
    has such a field}.

    obs_dtype: "float32" (default) or "bfloat16": observations written in
    bfloat16 (half the bytes of the largest output, for bf16 policies), equal
    to the float32 ones rounded to nearest even, on every backend.

    Params as data: ``reset`` and ``step`` take ``params=``, this env's
    params dataclass or its words ``i32[W]`` (`param_words`), so that one
    compiled program steps envs of other params; ``jax.vmap`` over stacked
    words ``i32[S, W]`` steps S settings at once. Params that change what is
    compiled in (shapes, policy groups, static params) are refused.

    A subclass may declare the metrics it logs beside each group's return:
    ``episode_metrics(episode_return f32[envs, agents]) -> {name: f32[envs]}``
    (per finished episode; Tag's ``tags_per_episode``). Training logs them
    under those names, in the summary, the progress bar and the learning
    curve; ``jaxwarp eval`` reports them for every matchup.
    """

    def __init__(self, spec: EnvSpec, params: Any = None, backend: str = "auto",
                 header: str | Path | None = None, checks: bool = False,
                 obs_dtype: Any = "float32"):
        self.obs_dtype = _obs_dtype(obs_dtype)
        self.spec = spec
        self.name = spec.name
        self.params = params if params is not None else spec.params_type()
        if backend not in ("auto", "cuda", "cpu", "jax"):
            raise ValueError(f"backend={backend!r} is unknown; expected one of "
                             "('auto', 'cuda', 'cpu', 'jax')")
        self.backend = "jax" if backend == "jax" else (
            ("cuda" if _ffi.gpu_available() else "cpu") if backend == "auto"
            else resolve_backend(backend) if backend == "cuda" else "cpu")
        self._header = Path(header or spec.header).resolve()
        self._prefix = None
        if self.backend != "jax":
            if not self._header.exists():
                raise EnvBuildError(f"{spec.name}: header {self._header} does not exist")
            self._prefix = register_targets(spec, self._header, self.backend, self.params)
        self.checks = bool(checks)
        self._params_id = params_id(spec.name, self.params)
        self._attrs = {}
        self._words = np.zeros(1, np.int32)
        self._scratch_words = 0
        self._staged = True
        if self.backend != "jax":
            per_env = per_env_words(spec, self.params)
            values = kernel_param_values(spec, self.params)
            # The Params words are the kernels' second operand (data: vmappable);
            # what fixes shapes is passed as attributes.
            self._words = pack_params(values, static_param_names(spec, values))
            self._attrs = dict(jw_per_env=per_env, jw_num_agents=np.int32(self.num_agents),
                               jw_obs_dim=np.int32(self.obs_dim))
            layout = launch_layout(spec, self.params, self.backend, self._header)
            self._scratch_words = int(layout.scratch_words)
            self._staged = bool(layout.staged) if self.backend == "cuda" else False

    @property
    def header(self) -> Path:
        """The env's header as built (the spec's, or the one `build_env` was given)."""
        return self._header

    @property
    def num_agents(self) -> int:
        return int(self.spec.num_agents(self.params))

    @property
    def obs_dim(self) -> int:
        return int(self.spec.obs_dim(self.params))

    @property
    def action_space(self) -> MultiDiscrete:
        return MultiDiscrete(tuple(self.spec.nvec(self.params)))

    @property
    def observation_space(self) -> Box:
        if self.spec.obs_bounds is not None:
            low, high = self.spec.obs_bounds(self.params)
        else:
            low = np.full(self.obs_dim, -np.inf, np.float32)
            high = np.full(self.obs_dim, np.inf, np.float32)
        return Box(low=np.asarray(low, np.float32), high=np.asarray(high, np.float32))

    @property
    def policy_groups(self) -> dict[str, np.ndarray]:
        if self.spec.policy_groups is not None:
            return self.spec.policy_groups(self.params)
        return {"agent": np.arange(self.num_agents)}

    @property
    def has_global_state(self) -> bool:
        """Whether the env declares a global state (`global_state`)."""
        return self.spec.global_state is not None

    def global_state(self, obs: jax.Array, state: Any) -> jax.Array:
        """f32[envs, S]: the env's global state (what a centralised critic
        reads) from obs f32[envs, agents, obs_dim] and the env state."""
        if self.spec.global_state is None:
            raise ValueError(f"{self.spec.name} declares no global state (EnvSpec.global_state)")
        return self.spec.global_state(self.params, obs, state).astype(jnp.float32)

    def _keys(self, key: jax.Array, env_offset: Any) -> jax.Array:
        """u32[3]: key words and the global index of this call's first env.

        env_offset: a Python/NumPy int in [0, 2**32), or an integer array of
        shape () (traced values cannot be range-checked: they wrap to u32)."""
        if isinstance(env_offset, (int, np.integer)) and not isinstance(env_offset,
                                                                         (bool, np.bool_)):
            if not 0 <= int(env_offset) < 2**32:
                raise ValueError(f"env_offset must lie in [0, 2**32) (the global index of the "
                                 f"first env); got {env_offset}")
            off = jnp.uint32(int(env_offset))
        elif isinstance(env_offset, (jax.Array, np.ndarray)):
            off = env_offset
            if off.ndim != 0 or not jnp.issubdtype(off.dtype, jnp.integer):
                raise ValueError(f"env_offset must be an integer scalar; got {off.dtype}"
                                 f"{list(off.shape)}")
        else:
            raise TypeError(f"env_offset must be an int or an integer array of shape (); got "
                            f"{type(env_offset).__name__}")
        return jnp.concatenate([key_data_of(key), off.astype(jnp.uint32)[None]])

    def _scratch(self, num_envs: int) -> jax.ShapeDtypeStruct:
        """The scratch buffer: on the CPU one env's words per worker thread
        (XLA's pool runs envs in parallel, each worker on its own slot); on
        the GPU every env's, unless the layout keeps scratch in shared memory."""
        words = self._scratch_words
        if self.backend == "cuda" and not self._staged:
            words *= num_envs
        elif self.backend == "cpu":
            words *= min(num_envs, os.cpu_count() or 1)
        return jax.ShapeDtypeStruct((max(words, 1),), jnp.int32)

    @property
    def bytes_per_env(self) -> int:
        """Bytes of one env's state fields and observations (what `reset`
        returns per env; scratch and temporaries not counted)."""
        n = self.num_agents
        state = sum((n if f.scope == "agent" else 1) * jnp.dtype(DTYPES[f.dtype][1]).itemsize
                    for f in self.spec.fields)
        return int(state + n * self.obs_dim * jnp.dtype(self.obs_dtype).itemsize)

    def param_words(self, params: Any = None) -> np.ndarray:
        """i32[W]: the kernels' Params words of `params` (a params dataclass of
        this env's type, checked by its own __post_init__; None: the env's
        own), what `reset` and `step` take as ``params=``. Stack them
        (i32[S, W]) and vmap to step S settings in one program. ValueError
        naming the params at fault when they change what is compiled into
        the env's program (`compiled_signature`); the 'jax' backend's
        reference is compiled per params and takes no words."""
        if params is None:
            return self._words.copy()
        if type(params) is not type(self.params):
            raise TypeError(f"params must be a {type(self.params).__name__}; got "
                            f"{type(params).__name__}")
        if self.backend == "jax":
            raise ValueError(f"{self.name}: params as words need the 'cpu' or 'cuda' backend "
                             "(the 'jax' reference takes the params dataclass)")
        mine = compiled_signature(self.spec, self.params)
        theirs = compiled_signature(self.spec, params)
        changed = [k for k in mine if mine[k] != theirs[k]]
        if changed:
            names = [f.name for f in dataclasses.fields(params)
                     if getattr(params, f.name) != getattr(self.params, f.name)]
            raise ValueError(f"{self.name}: params {', '.join(names)} change the env's "
                             f"{changed[0]}, compiled into its program (build an env with "
                             "these params instead)")
        values = kernel_param_values(self.spec, params)
        return pack_params(values, static_param_names(self.spec, values))

    def _words_of(self, params: Any) -> jax.Array:
        """i32[W]: the words a kernel call reads (`param_words`), from None
        (the env's own), a params dataclass or words (traced or not)."""
        if params is None:
            return jnp.asarray(self._words)
        if dataclasses.is_dataclass(params) and not isinstance(params, type):
            return jnp.asarray(self.param_words(params))
        words = params if isinstance(params, jax.Array) else jnp.asarray(params)
        if words.dtype != jnp.int32 or words.shape != self._words.shape:
            raise ValueError(f"params must be a {type(self.params).__name__} or its words "
                             f"int32{list(self._words.shape)} (env.param_words); got "
                             f"{words.dtype}{list(words.shape)}")
        return words

    def _reference_params(self, params: Any) -> Any:
        """The params the 'jax' backend's reference runs with (a dataclass)."""
        if params is None:
            return self.params
        if type(params) is not type(self.params):
            raise ValueError(f"{self.name}: the 'jax' backend takes params as a "
                             f"{type(self.params).__name__} (its reference is compiled per "
                             "params), not as words")
        return params

    def reset(self, key: jax.Array, num_envs: int, *, env_offset: Any = 0, params: Any = None):
        """obs f32[num_envs, agents, obs_dim], state with [num_envs, ...] fields.

        env_offset: global index of the first env (sharded calls): env e draws
        the random numbers of env env_offset + e.

        params: None (the env's own), a params dataclass of this env's type,
        or its words i32[W] (`param_words`; data: traced and vmapped values
        welcome); what this call's envs run with.

        A num_envs whose state and observations alone (`bytes_per_env` each)
        exceed the memory that could hold them (`jaxwarp.memory.check_fits`:
        the host's RAM, or the GPUs' together) is refused with a ValueError
        naming num_envs before anything is allocated.
        """
        num_envs = check_num_envs(num_envs)
        num_envs = int(num_envs)
        platform = {"cuda": "gpu", "cpu": "cpu"}.get(self.backend) or jax.default_backend()
        check_fits("num_envs", num_envs, self.bytes_per_env, platform,
                   "the state and observations")
        keys = self._keys(key, env_offset)
        if self.backend == "jax":
            _require_zero_offset(env_offset)
            obs, state = self.spec.reference_reset(self._reference_params(params), keys[:2],
                                                   num_envs)
            return obs.astype(self.obs_dtype), self._tag(state)
        # One launch per device over its own envs under jit with env-sharded
        # outputs (jaxwarp._ffi.env_partitioned_call: the partitioning rule).
        words = self._words_of(params)
        outs = _ffi.env_partitioned_call(self._reset_call, (keys, words), (False, False),
                                         num_envs, f"{self._prefix}_reset")
        k = len(self.spec.fields)
        return outs[k], self._tag(self.spec.state_type(*outs[:k]))

    def _reset_call(self, offset: Any, num_envs: int, keys: jax.Array,
                    words: jax.Array) -> tuple:
        """The reset FFI call of num_envs envs: keys u32[..., 3] and the
        Params words i32[..., W] (the same leading vmap axes); offset: None or
        u32[], added to the keys' env offset word.
        Returns the state fields and obs (the scratch output is dropped)."""
        if offset is not None:
            keys = keys.at[..., 2].add(offset)
        n, batch = self.num_agents, tuple(keys.shape[:-1])
        scratch = self._scratch(num_envs)
        outs = jax.ffi.ffi_call(
            f"{self._prefix}_reset_{self.backend}",
            [jax.ShapeDtypeStruct(batch + ((num_envs, n) if f.scope == "agent" else
                                           (num_envs,)), DTYPES[f.dtype][1])
             for f in self.spec.fields]
            + [jax.ShapeDtypeStruct(batch + scratch.shape, scratch.dtype),
               jax.ShapeDtypeStruct(batch + (num_envs, n, self.obs_dim), self.obs_dtype)],
            vmap_method="broadcast_all",
        )(keys, words, **self._attrs)
        k = len(self.spec.fields)
        return tuple(outs[:k]) + (outs[k + 1],)

    def _tag(self, state: Any) -> Any:
        """The state as `tagged_state_type`, carrying this env's params_id."""
        return tag_state(self.spec.state_type, state, self._params_id)

    def check_state(self, state: Any) -> int:
        """Raises unless `state` is this env's state with consistent shapes and
        dtypes (the kernels index every field by env and agent: a wrong shape
        would read and write out of bounds). Returns num_envs."""
        if not isinstance(state, self.spec.state_type):
            raise TypeError(f"state must be a {self.spec.state_type.__name__}; got "
                            f"{type(state).__name__}")
        check_params_id(state, self._params_id)
        fields = [getattr(state, f.name) for f in self.spec.fields]
        # The env count most fields agree on: the error then names the odd one.
        leading = [v.shape[0] for v in fields if getattr(v, "ndim", 0) >= 1]
        num_envs = max(set(leading), key=leading.count) if leading else None
        for f, v in zip(self.spec.fields, fields):
            want = DTYPES[f.dtype][1]
            shape = (num_envs, self.num_agents) if f.scope == "agent" else (num_envs,)
            if tuple(v.shape) != shape or v.dtype != want:
                raise ValueError(f"state.{f.name} must be {jnp.dtype(want).name}{list(shape)}; "
                                 f"got {v.dtype}{list(v.shape)}")
        return num_envs

    def check_actions(self, actions: Any, num_envs: int) -> jax.Array:
        """Returns actions as i32[num_envs, agents, heads], or raises. A
        single-head action may come as i32[envs, agents] (and, for a
        single-agent env, i32[envs]), as gymnax/JaxMARL users pass it. Other
        integer dtypes (NumPy's default int64) and Python lists are cast to
        int32 (`jaxwarp.core.int32_actions`; floats raise TypeError). With
        checks=True, values outside the action space are reported (checkify)."""
        from jaxwarp.core import int32_actions

        if not hasattr(actions, "shape"):  # a Python list: an array first
            actions = int32_actions(actions)
        heads = len(self.spec.nvec(self.params))
        expected = (num_envs, self.num_agents, heads)
        shape = tuple(getattr(actions, "shape", ()))
        if heads == 1 and shape == (num_envs, self.num_agents):
            actions = actions[..., None]
        elif heads == 1 and self.num_agents == 1 and shape == (num_envs,):
            actions = actions[:, None, None]
        elif not hasattr(actions, "shape") or shape != expected:
            also = (f" or {(num_envs, self.num_agents)}" if heads == 1 else "") + \
                (f" or {(num_envs,)}" if heads == 1 and self.num_agents == 1 else "")
            raise ValueError(f"actions must have shape {expected} (envs, agents, heads){also}; "
                             f"got {getattr(actions, 'shape', type(actions).__name__)}")
        actions = int32_actions(actions)
        if self.checks:
            from jax.experimental import checkify

            nvec = tuple(int(v) for v in self.spec.nvec(self.params))
            checkify.check(self.action_space.contains(actions),
                           f"{self.name}: actions out of range: action[..., h] must lie in "
                           f"[0, nvec[h]) with nvec={nvec}")
        return actions

    def _check_finite(self, state: Any) -> None:
        """checks=True: NaN or inf in a float state field is reported through
        checkify (the backends would propagate it differently)."""
        from jax.experimental import checkify

        for f in self.spec.fields:
            if f.dtype == "f32":
                checkify.check(jnp.isfinite(getattr(state, f.name)).all(),
                               f"{self.name}: state.{f.name} holds NaN or inf")

    def step(self, key: jax.Array, state: Any, actions: jax.Array, *, env_offset: Any = 0,
             autoreset: bool = True, in_place: bool = True, params: Any = None):
        """One step of every env with auto-reset; see the class docstring.

        autoreset=False leaves the envs that finish as they ended: obs are
        their final observations and the state must not be stepped again
        before those envs are reset (`step` with autoreset=True from the same
        key and state gives the reset ones; jaxwarp.adapters use the pair for
        Gymnasium's final observation).

        in_place=False: the kernels write the new state to buffers of their
        own and leave the input state's untouched (the default updates it in
        place where XLA can, donating it); for callers that step twice from
        one state, which otherwise make XLA copy it first.

        params: as for `reset` (None: the env's own).
        """
        for name, flag in (("autoreset", autoreset), ("in_place", in_place)):
            if not isinstance(flag, (bool, np.bool_)):
                raise TypeError(f"{name} must be a Python bool; got {type(flag).__name__}")
        num_envs = self.check_state(state)
        actions = self.check_actions(actions, num_envs)
        if self.checks:
            self._check_finite(state)
        keys = self._keys(key, env_offset)
        if self.backend == "jax":
            _require_zero_offset(env_offset)
            p = self._reference_params(params)
            # The reference builds and returns the plain state type.
            plain = tag_state(self.spec.state_type, state, "")
            if autoreset:
                out = self.spec.reference_step(p, keys[:2], plain, actions)
            else:
                if not reference_takes_autoreset(self.spec):
                    raise ValueError(
                        f"{self.name}: step(autoreset=False) on the 'jax' backend needs the "
                        "spec's reference_step to take autoreset= (see jaxwarp.core."
                        "reset_mask); the 'cpu' and 'cuda' backends support it for every env")
                out = self.spec.reference_step(p, keys[:2], plain, actions, autoreset=False)
            obs, state, reward, done = out[:4]
            obs = obs.astype(self.obs_dtype)
            info = dict(out[4]) if len(out) > 4 else {}
        else:
            fields = [getattr(state, f.name) for f in self.spec.fields]
            k = len(fields)
            # One launch per device over its own envs under jit with
            # env-sharded inputs (jaxwarp._ffi.env_partitioned_call).
            outs = _ffi.env_partitioned_call(
                functools.partial(self._step_call, bool(autoreset), bool(in_place)),
                (keys, self._words_of(params), actions, *fields),
                (False, False) + (True,) * (k + 1), num_envs, f"{self._prefix}_step")
            # Else XLA:GPU clones the call in a rollout (docs/decisions.md "Copies in an update").
            outs = jax.lax.optimization_barrier(tuple(outs))
            state = self.spec.state_type(*outs[:k])
            obs, reward, done, term, trunc = outs[k:]
            info = {"terminated": term, "truncated": trunc}
        state = self._tag(state)
        if hasattr(state, "episode_return"):
            info["episode_return"] = state.episode_return
        return obs, state, reward, done, info

    def _step_call(self, autoreset: bool, in_place: bool, offset: Any, num_envs: int,
                   keys: jax.Array, words: jax.Array, actions: jax.Array,
                   *fields: jax.Array) -> tuple:
        """The step FFI call of num_envs envs (leading vmap axes on every
        arg; words: the Params words i32[..., W]); offset: None or u32[],
        added to the keys' env offset word.
        Returns state fields, obs, reward, done, terminated, truncated (the
        scratch output is dropped)."""
        if offset is not None:
            keys = keys.at[..., 2].add(offset)
        n, k, batch = self.num_agents, len(fields), tuple(keys.shape[:-1])
        heads = len(self.spec.nvec(self.params))
        scratch = self._scratch(num_envs)
        outs = jax.ffi.ffi_call(
            f"{self._prefix}_step_{self.backend}",
            [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in fields]
            + [jax.ShapeDtypeStruct(batch + scratch.shape, scratch.dtype),
               jax.ShapeDtypeStruct(batch + (num_envs, n, self.obs_dim), self.obs_dtype),
               jax.ShapeDtypeStruct(batch + (num_envs, n), jnp.float32)]
            + [jax.ShapeDtypeStruct(batch + (num_envs,), jnp.bool_)] * 3,
            vmap_method="broadcast_all",
            # in_place=False: outputs of their own (the handler copies the state).
            input_output_aliases={3 + i: i for i in range(k)} if in_place else {},
        )(keys, words, actions, *fields, jw_heads=np.int32(heads),
          jw_autoreset=np.int32(bool(autoreset)), **self._attrs)
        return tuple(outs[:k]) + tuple(outs[k + 1:])

    def rollout_call(self, env_keys: jax.Array, head_keys: jax.Array, weights: jax.Array,
                     agent_group: jax.Array, obs: jax.Array, state: Any, *,
                     mlp: Sequence[int], nvec: Sequence[int], partitionable: bool,
                     params: jax.Array | None = None
                     ) -> tuple[Any, jax.Array, dict[str, jax.Array]]:
        """The fused rollout (cuda/jaxwarp_fused.h; jaxwarp.train.fused builds
        its arguments): T steps of an MLP policy's forward pass, the action
        draw and the env step in one call, over every env of every vmap member
        folded into the env axis. env_keys u32[T, members, 3] (each step's env
        key and env offset), head_keys u32[T, members, heads, 2] (the sampler's
        head keys), weights f32[members, groups, P], agent_group i32[agents],
        obs f32[envs, agents, obs_dim], state with [envs, ...] fields; mlp: the
        model's words (``jaxwarp.train.fused.mlp_words``); params: the Params
        words i32[members, W] (member m's row) or i32[W] (every member's),
        None: the env's own.
        Returns (state, next obs, trajectory: obs f32[T, envs, agents, obs_dim],
        actions i32[T, envs, agents, heads], log_prob, value, reward,
        episode_return f32[T, envs, agents], done bool[T, envs])."""
        fields = [getattr(state, f.name) for f in self.spec.fields]
        k, steps = len(fields), int(env_keys.shape[0])
        num_envs, n, dim = int(obs.shape[0]), self.num_agents, self.obs_dim
        f32, sds = jnp.float32, jax.ShapeDtypeStruct
        per_step = sds((steps, num_envs, n), f32)
        outs = jax.ffi.ffi_call(
            f"{self._prefix}_rollout_{self.backend}",
            [sds(v.shape, v.dtype) for v in fields]
            + [self._scratch(num_envs), sds((steps, num_envs, n, dim), f32),
               sds((num_envs, n, dim), f32), sds((steps, num_envs, n, len(nvec)), jnp.int32),
               per_step, per_step, per_step, per_step, sds((steps, num_envs), jnp.bool_),
               sds((num_envs,), jnp.bool_), sds((num_envs,), jnp.bool_)],
            input_output_aliases={6 + i: i for i in range(k)},
        )(env_keys, jnp.asarray(self._words if params is None else params), head_keys, weights, agent_group, obs, *fields,
          jw_heads=np.int32(len(nvec)), jw_steps=np.int32(steps),
          jw_mlp=np.asarray(mlp, np.int32), jw_nvec=np.asarray(nvec, np.int32),
          jw_partitionable=np.int32(bool(partitionable)), **self._attrs)
        traj = dict(zip(("obs", "actions", "log_prob", "value", "reward", "episode_return",
                         "done"), (outs[k + 1], *outs[k + 3:k + 9])))
        return self._tag(self.spec.state_type(*outs[:k])), outs[k + 2], traj

    def __repr__(self) -> str:
        return f"ContractEnv({self.name!r}, backend={self.backend!r}, params={self.params})"


def compiled_signature(spec: EnvSpec, params: Any) -> dict[str, Any]:
    """What of `params` is compiled into an env's program, by what it is
    called in errors: params that differ only elsewhere are data (the words
    `ContractEnv.param_words` gives), the same program runs them."""
    values = kernel_param_values(spec, params)
    static = static_param_names(spec, values)
    groups = spec.policy_groups(params) if spec.policy_groups is not None else {}
    return {
        "agent count": int(spec.num_agents(params)),
        "observation width": int(spec.obs_dim(params)),
        "action heads": tuple(int(v) for v in spec.nvec(params)),
        "state layout": tuple(int(w) for w in per_env_words(spec, params)),
        "policy groups": {g: tuple(int(i) for i in np.asarray(a)) for g, a in groups.items()},
        "static params": {k: np.asarray(getattr(values[k], "values", values[k])).tolist()
                          for k in static},
        "params layout": [(k, getattr(v, "capacity", None)) for k, v in values.items()],
    }


def reference_takes_autoreset(spec: EnvSpec) -> bool:
    """Whether the spec's pure-JAX reference_step takes ``autoreset=`` (what
    step(autoreset=False) needs on the 'jax' backend)."""
    return "autoreset" in inspect.signature(spec.reference_step).parameters


def _obs_dtype(obs_dtype: Any) -> np.dtype:
    try:
        dt = jnp.dtype(obs_dtype)
    except TypeError:
        dt = None
    if dt not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16)):
        raise ValueError(f"obs_dtype must be 'float32' or 'bfloat16'; got {obs_dtype!r}")
    return dt


def env_class(spec: EnvSpec) -> type[ContractEnv]:
    """The env class of a spec: ``Cls(params=None, backend="auto", checks=False,
    obs_dtype="float32")``. Envs are declared by their spec; write a subclass
    only to add behaviour."""
    def __init__(self, params: Any = None, backend: str = "auto", checks: bool = False,
                 obs_dtype: Any = "float32"):
        ContractEnv.__init__(self, spec, params=params, backend=backend, checks=checks,
                             obs_dtype=obs_dtype)

    name = "".join(w.capitalize() for w in spec.name.split("_"))
    return type(name, (ContractEnv,), {
        "__init__": __init__, "SPEC": spec, "__module__": __package__,
        "__doc__": f"Batched {spec.name} built from its spec; see `ContractEnv`."})


def _require_zero_offset(env_offset: Any) -> None:
    if not (isinstance(env_offset, (int, np.integer)) and env_offset == 0):
        raise ValueError("env_offset applies to the kernel backends; the 'jax' backend is "
                         "sharded by jit itself (leave env_offset=0)")


def build_env(spec: EnvSpec, params: Any = None, backend: str = "auto",
              header: str | Path | None = None, checks: bool = False,
              obs_dtype: Any = "float32") -> ContractEnv:
    """Builds (or loads from the cache) the env's kernels for `backend` and
    returns the env. Raises EnvBuildError with the field, file and line at
    fault when the header and spec disagree or the code does not compile."""
    return ContractEnv(spec, params=params, backend=backend, header=header, checks=checks,
                       obs_dtype=obs_dtype)
