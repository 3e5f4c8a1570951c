"""Helpers every env uses: backend choice, key data, fixed sin/cos, auto-reset.

Generic modules (authoring, sampler, the references of every env) import
these from here; no env module is a dependency of another.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp import _ffi

BACKENDS = ("auto", "cuda", "cpu", "jax")


def resolve_backend(backend: str) -> str:
    """Maps "auto" to "cuda" or "cpu" and checks the backend can run here."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is unknown; expected one of {BACKENDS}")
    if backend == "auto":
        return "cuda" if _ffi.gpu_available() else "cpu"
    if backend == "cuda" and not _ffi.gpu_available():
        why = ("jaxwarp was built without its CUDA library (no nvcc at install time)"
               if not _ffi.has_cuda_library() else "JAX sees no CUDA GPU")
        raise RuntimeError(f"backend='cuda' is not available: {why}. "
                           "Use backend='cpu' or backend='jax'.")
    if backend == "cpu" and not _ffi.has_cpu_library():
        raise RuntimeError("backend='cpu' is not available: jaxwarp's compiled XLA:CPU "
                           "library is missing (reinstall with `pip install -e .`).")
    return backend


def key_data_of(key: jax.Array, argname: str = "key") -> jax.Array:
    """u32[2] key words of a typed key or a raw `jax.random.PRNGKey`."""
    if not hasattr(key, "dtype") or not hasattr(key, "shape"):
        raise TypeError(f"{argname} must be a JAX PRNG key (jax.random.key(seed) or "
                        f"jax.random.PRNGKey(seed)); got {type(key).__name__} {key!r}")
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        data = jax.random.key_data(key)
    else:
        data = key
    if data.dtype != jnp.uint32 or data.shape != (2,):
        raise ValueError(
            f"{argname} must be a single threefry key (jax.random.key(seed) or "
            f"jax.random.PRNGKey(seed), i.e. u32[2] key data); got dtype {data.dtype}, "
            f"shape {data.shape} (split keys and vmap to use several)")
    return data


_INT32 = np.iinfo(np.int32)


def int32_actions(actions: Any) -> Any:
    """Actions as int32, the dtype every env's step reads.

    NumPy's default integers (int64), other integer dtypes and Python lists
    are accepted, as gymnax, JaxMARL and Gymnasium users pass them:
    - int32 arrays (NumPy or JAX, traced too) come back as they are;
    - lists, tuples, NumPy arrays and scalars are converted on the host;
      integer values outside int32's range raise ValueError (a cast would
      wrap them to other, valid-looking actions);
    - JAX arrays of a wider integer dtype (uint32, int64 with x64) are
      checked like NumPy's when concrete; traced ones, whose values are
      unknown here, are clamped to int32's range before the cast, which
      changes no action: every env clamps actions to its action space anyway
      (and reports them with ``checks=True``). Narrower ones are cast.

    Raises:
        TypeError: a float, bool, complex or other non-integer dtype (a
            float action is a bug to report, not to round).
        ValueError: a list that is not a rectangular array, or host values
            beyond int32.
    """
    if isinstance(actions, (list, tuple)) or np.isscalar(actions):
        try:
            actions = np.asarray(actions)
        except ValueError as e:  # ragged nesting
            raise ValueError(f"actions: a list of lists must be rectangular (one action per "
                             f"env, agent and head); got {e}") from None
    dtype = getattr(actions, "dtype", None)
    if dtype is None or not hasattr(actions, "shape"):
        raise TypeError(f"actions must be an integer array (int32, or another integer dtype "
                        f"whose values fit int32); got {type(actions).__name__}")
    if dtype == np.int32:
        return actions
    if not np.issubdtype(dtype, np.integer):
        raise TypeError(f"actions must have dtype int32; got {np.dtype(dtype).name} (integer "
                        f"dtypes whose values fit int32 are cast to it; floats are not "
                        f"rounded)")
    info = np.iinfo(dtype)
    wide = info.min < _INT32.min or info.max > _INT32.max
    if isinstance(actions, (np.ndarray, np.generic)) or (
            wide and isinstance(actions, jax.Array) and not isinstance(actions, jax.core.Tracer)):
        actions = np.asarray(actions)  # values known here: check them (a wide JAX array too)
        if actions.size and (actions.min() < _INT32.min or actions.max() > _INT32.max):
            bad = actions.min() if actions.min() < _INT32.min else actions.max()
            raise ValueError(f"actions must fit int32 (the env's action dtype); got "
                             f"{np.dtype(dtype).name} value {int(bad)}")
        return actions.astype(np.int32)
    if wide:  # traced, values unknown: clamp to int32's range, then cast
        actions = jnp.clip(actions, np.asarray(max(info.min, _INT32.min), dtype),
                           np.asarray(min(info.max, _INT32.max), dtype))
    return actions.astype(jnp.int32)


# sin/cos with the kernels' fixed evaluation order (cuda/jaxwarp_common.h).
_TWO_OVER_PI = np.float32(0.636619772367581343)
_PIO2_HI = np.float32(1.5703125)
_PIO2_MID = np.float32(4.837512969970703125e-4)
_PIO2_LO = np.float32(7.54978995489188216e-8)
_SIN = tuple(np.float32(c) for c in (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1))
_COS = tuple(np.float32(c) for c in (2.443315711809948e-5, -1.388731625493765e-3,
                                      4.166664568298827e-2))


def sincos_fixed(a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(sin a, cos a), f32, evaluated as `jaxwarp::sincos_fixed` in C++ does
    (Cody-Waite reduction by pi/2, Cephes polynomials), so that the pure-JAX
    references and the kernels agree bit for bit."""
    q = jnp.floor(a * _TWO_OVER_PI + np.float32(0.5))
    r = a - q * _PIO2_HI
    r = r - q * _PIO2_MID
    r = r - q * _PIO2_LO
    z = r * r
    ps = _SIN[0] * z + _SIN[1]
    ps = ps * z + _SIN[2]
    sr = (ps * z) * r + r
    pc = _COS[0] * z + _COS[1]
    pc = pc * z + _COS[2]
    pc = pc * z - np.float32(0.5)
    cr = pc * z + np.float32(1.0)
    quadrant = q.astype(jnp.int32) & 3
    odd = (quadrant & 1) == 1
    ss = jnp.where(odd, cr, sr)
    cc = jnp.where(odd, sr, cr)
    s = jnp.where(quadrant >= 2, -ss, ss)
    c = jnp.where((quadrant == 1) | (quadrant == 2), -cc, cc)
    return s, c


def auto_reset(done: jax.Array, fresh: Any, stepped: Any) -> Any:
    """Per-env select of a pytree: `fresh` where done[e], else `stepped`.

    done: bool[envs]; leaves of `fresh` and `stepped` have leading axis envs.
    This is what the kernels' masked reset computes. The references draw the
    fresh start for every env and select (a lax.cond skipping the draw would
    make XLA:GPU copy its predicate to the host every step).
    """
    def pick(f, s):
        d = done.reshape(done.shape + (1,) * (jnp.ndim(s) - 1))
        return jnp.where(d, f, s)
    return jax.tree_util.tree_map(pick, fresh, stepped)


def reset_mask(done: jax.Array, autoreset: bool) -> jax.Array:
    """bool[envs]: the envs a pure-JAX reference resets at the end of a step:
    the done ones, or none with autoreset=False (a step that leaves finished
    envs as they ended, observations of the final state; see
    ContractEnv.step)."""
    return done if autoreset else jnp.zeros_like(done)


def finish_step(state: Any, moved: dict[str, jax.Array], fresh: dict[str, jax.Array],
                reward: jax.Array, terminated: jax.Array, max_episode_steps: int,
                observe: Any, autoreset: bool = True):
    """Time limit, returns and masked auto-reset of a pure-JAX reference step,
    as the kernels do them (`cuda/jaxwarp_kernels.h`); the built-in
    single-team references (classic control, MPE) end their steps here.

    state: the state before the step (a dataclass with the fields of `moved`,
    ``timestep: i32[envs]`` and ``episode_return: f32[envs, agents]``);
    moved: its fields after the transition; fresh: a fresh start of every env
    (the same keys; selected where the env resets); reward: f32[envs, agents];
    terminated: bool[envs]; truncated where ``timestep + 1 >=
    max_episode_steps``; observe: state -> obs. Returns ``(obs, state, reward,
    done, info)`` with info ``{"terminated", "truncated": bool[envs],
    "episode_return": f32[envs, agents]}`` (a finished episode's return where
    done; restarted on the next step, where timestep is 0).
    """
    t = state.timestep + 1
    truncated = t >= max_episode_steps
    done = terminated | truncated
    episode_return = jnp.where((state.timestep == 0)[:, None], np.float32(0),
                               state.episode_return) + reward
    # Fresh starts are drawn for every env and selected where done (no
    # lax.cond: on XLA:GPU its predicate would be copied to the host).
    reset = reset_mask(done, autoreset)
    fields = auto_reset(reset, {k: fresh[k] for k in moved}, moved)
    after = type(state)(**fields, timestep=jnp.where(reset, 0, t),
                        episode_return=episode_return)
    info = {"terminated": terminated, "truncated": truncated,
            "episode_return": episode_return}
    return observe(after), after, reward, done, info


def episode_length(env: Any) -> int:
    """The number of steps an episode of `env` lasts at most: the step that
    returns ``done`` for a time limit is the `episode_length(env)`-th step of
    its episode (episodes that terminate end sooner). The one definition that
    eval, render, the tests and `jaxwarp.testing` use.

    It is the params' ``max_episode_steps`` where they define it (every
    built-in env does; MPE's is ``max_steps + 1`` with JaxMARL's counting),
    else their ``episode_length`` or ``max_steps`` field read as that count
    (user envs: define ``max_episode_steps`` where the field counts otherwise).

    Raises:
        ValueError: naming the env when its params give no length, or one
            that is not an int >= 1.
    """
    p = env.params
    name = getattr(env, "name", None) or type(env).__name__
    for attr in ("max_episode_steps", "episode_length", "max_steps"):
        n = getattr(p, attr, None)
        if n is not None:
            break
    else:
        raise ValueError(f"{name}: params define none of max_episode_steps, episode_length, "
                         "max_steps; cannot tell how long an episode lasts")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"{name}: params.{attr}={n!r}; expected an int >= 1 (steps per "
                         "episode)")
    return int(n)
