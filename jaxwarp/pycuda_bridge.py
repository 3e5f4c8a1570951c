"""PyCUDA interop (optional extra ``pip install jaxwarp[pycuda]``).

Two uses, outside `jax.jit`:

* **Zero-copy access to live env state** from PyCUDA, to prototype a kernel
  on real data: `as_gpuarray(x)` wraps a JAX GPU array's memory (through
  ``__cuda_array_interface__``) as a `pycuda.gpuarray.GPUArray` without a copy.
* **WarpDrive's execution model**: `PyCudaEnv` launches a contract env's own
  generated CUDA kernels (the very code the FFI path runs) from Python, one
  launch per step followed by a context synchronisation, on buffers that
  live in JAX arrays. `experiments/ablation_launch.py` times it against the
  fused `lax.scan`.

Both run in the GPU's *primary* context, the one JAX/XLA uses: memory from
one CUDA context is not valid in another, which is why `import
pycuda.autoinit` (which creates its own context) clashes with JAX. Call
`primary_context()` instead. The core package never imports this module.
"""

from __future__ import annotations

import atexit
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp.authoring import DTYPES, ContractEnv, compile_library, launch_layout, per_env_words
from jaxwarp.core import key_data_of
from jaxwarp.params_check import check_num_envs


def _pycuda():
    try:
        import pycuda.driver as cuda
        import pycuda.gpuarray as gpuarray
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("jaxwarp.pycuda_bridge needs PyCUDA: pip install 'jaxwarp[pycuda]' "
                          f"(it builds against your CUDA toolkit and driver) ({e})") from None
    return cuda, gpuarray


_CONTEXTS: dict[int, Any] = {}


def primary_context(device: int = 0):
    """Makes the device's primary context (shared with JAX) current for PyCUDA
    and returns it. Idempotent; use it instead of ``import pycuda.autoinit``."""
    cuda, _ = _pycuda()
    if device not in _CONTEXTS:
        cuda.init()
        ctx = cuda.Device(device).retain_primary_context()
        ctx.push()
        _CONTEXTS[device] = ctx
        # PyCUDA aborts at exit if a context is still on its stack.
        atexit.register(ctx.pop)
    return _CONTEXTS[device]


def device_pointer(x: jax.Array) -> int:
    """Device address of a JAX GPU array's buffer (waits until it is ready)."""
    if not isinstance(x, jax.Array) or x.devices().pop().platform != "gpu":
        raise TypeError(f"expected a jax.Array on a GPU, got {type(x).__name__}"
                        + (f" on {x.devices().pop().platform}" if isinstance(x, jax.Array)
                           else ""))
    x.block_until_ready()
    return int(x.__cuda_array_interface__["data"][0])


def as_gpuarray(x: jax.Array):
    """`pycuda.gpuarray.GPUArray` over `x`'s memory, no copy; keeps `x` alive.

    Reads see the array's current contents. JAX treats arrays as immutable, so
    a kernel that writes through the view changes what every JAX computation
    holding `x` sees: write only into arrays you own (as `PyCudaEnv` does),
    and call ``primary_context().synchronize()`` before JAX reads them again.
    """
    primary_context(x.devices().pop().id)
    _, gpuarray = _pycuda()
    ptr = device_pointer(x)
    return gpuarray.GPUArray(x.shape, np.dtype(x.dtype), gpudata=ptr, base=x)


# ---------------------------------------------------------------------------
# The kernels' arguments. Every env's kernels (ffi/jaxwarp_ffi.h,
# JAXWARP_DEFINE_ENV) are
#     jaxwarp_<env>_{reset,step}_kernel[_staged](jaxwarp::Call c, jaxwarp::Layout l)
# with both structs passed by value; the env's Params are data, read through
# the Call's params pointer (a device buffer of their int32 words). PyCUDA passes a numpy structured
# scalar (np.void) by value as its raw bytes, packed one after the other with
# no alignment ("<size>s" in its struct format); CUDA places each parameter at
# a multiple of its alignment, so the padding between them is ours to write.
# ---------------------------------------------------------------------------
MAX_FIELDS = 64  # jaxwarp::kMaxFields

# jaxwarp::Call (cuda/jaxwarp_kernels.h), field for field; pointers as u64.
CALL_DTYPE = np.dtype([
    ("envs", "<i8"), ("per_member", "<i8"), ("keys", "<u8"),
    ("n", "<i4"), ("obs_dim", "<i4"), ("heads", "<i4"), ("autoreset", "<i4"),
    ("obs_bf16", "<i4"),                                         # then 4 bytes padding
    ("actions", "<u8"), ("obs", "<u8"), ("reward", "<u8"),
    ("done", "<u8"), ("term", "<u8"), ("trunc", "<u8"),
    ("base", "<u8", (MAX_FIELDS,)), ("per_env", "<i4", (MAX_FIELDS,)),
    ("stride", "<i4", (MAX_FIELDS,)), ("offset", "<i4", (MAX_FIELDS,)),
    ("params", "<u8"), ("params_stride", "<i8"),
], align=True)
# By hand: envs, per_member, keys 3 * 8 = 24; n, obs_dim, heads, autoreset,
# obs_bf16 20 + 4 padding (actions is 8-aligned) = 48; six pointers 48 -> base
# at 96; base 64 * 8 = 512 -> per_env at 608; per_env 256 -> stride at 864;
# stride 256 -> offset at 1120; offset 256 -> params at 1376; params,
# params_stride 16 -> 1392 (a multiple of the alignment, 8: no tail padding).
assert CALL_DTYPE.itemsize == 1392 and CALL_DTYPE.alignment == 8
assert CALL_DTYPE.fields["actions"][1] == 48 and CALL_DTYPE.fields["base"][1] == 96
assert CALL_DTYPE.fields["per_env"][1] == 608 and CALL_DTYPE.fields["stride"][1] == 864
assert CALL_DTYPE.fields["params"][1] == 1376

# jaxwarp::Layout: seven int32 (authoring.build._Layout is the same struct in ctypes).
LAYOUT_DTYPE = np.dtype([(name, "<i4") for name in
                         ("tpe", "epb", "staged", "obs_staged", "words", "scratch_words",
                          "smem_bytes")])
assert LAYOUT_DTYPE.itemsize == 28


def layout_arg(layout: Any) -> np.void:
    """A `jaxwarp::Layout` (the ctypes struct `authoring.launch_layout` returns)
    as a by-value kernel argument."""
    return np.frombuffer(bytes(layout), LAYOUT_DTYPE).copy()[0]


class PyCudaEnv:
    """A contract env stepped WarpDrive's way: its generated CUDA kernels
    launched from Python through PyCUDA, one launch per call, then a sync.

    The state lives in JAX arrays that this object owns and updates in place
    (``self.state``; obs/reward/done likewise); read them between steps with
    `as_gpuarray` or `numpy()`. The launch layout (threads per env, envs per
    block, shared-memory staging, hence which of the two kernels of a pass
    runs) is the one the built library computes for the FFI path.

        env = PyCudaEnv(jaxwarp.make("tag_gridworld", backend="cuda"))
        env.reset(key, num_envs)                 # obs: f32[envs, agents, obs_dim]
        env.step(key, actions)                   # actions: i32[envs, agents, heads] on the GPU
    """

    def __init__(self, env: ContractEnv, device: int = 0):
        if not isinstance(env, ContractEnv) or env.backend != "cuda":
            raise ValueError("PyCudaEnv needs a contract env built with backend='cuda' "
                             f"(got {type(env).__name__} with backend "
                             f"{getattr(env, 'backend', None)!r})")
        cuda, _ = _pycuda()
        self._cuda = cuda
        self.env = env
        self.spec = env.spec
        self.per_env = np.asarray(per_env_words(env.spec, env.params), np.int32)  # state, then scratch
        self._state_fields = len(env.spec.fields)
        if len(self.per_env) > MAX_FIELDS:
            raise ValueError(f"{env.name}: {len(self.per_env)} state and scratch fields; the "
                             f"kernels take at most {MAX_FIELDS} (jaxwarp::kMaxFields)")
        self.ctx = primary_context(device)
        self.device = jax.devices("gpu")[device]
        # The layout of the built library (jaxwarp_<env>_layout): the one the
        # FFI launcher uses, not recomputed here.
        self.layout = launch_layout(env.spec, env.params, "cuda", env.header)
        lay = self.layout
        self.tpe, self.epb = int(lay.tpe), int(lay.epb)
        self.staged, self.obs_staged = bool(lay.staged), bool(lay.obs_staged)
        self.words, self.scratch_words = int(lay.words), int(lay.scratch_words)
        self.smem = int(lay.smem_bytes)
        if self.scratch_words != int(self.per_env[self._state_fields:].sum()):
            raise RuntimeError(f"{env.name}: the library's layout has {self.scratch_words} "
                               "scratch words per env, the spec "
                               f"{int(self.per_env[self._state_fields:].sum())} (stale build?)")
        cubin = compile_library(env.spec, env.header, "cuda", cubin=True, params=env.params)
        self.module = cuda.module_from_file(str(cubin))
        suffix = "_staged" if self.staged else ""
        self._reset_fn = self.module.get_function(f"jaxwarp_{env.name}_reset_kernel{suffix}")
        self._step_fn = self.module.get_function(f"jaxwarp_{env.name}_step_kernel{suffix}")
        if self.smem > 48 * 1024:  # opt in, as jaxwarp::launch does
            for fn in (self._reset_fn, self._step_fn):
                fn.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                 self.smem)
        with jax.default_device(self.device):
            # The Params words (i32[W]) that every env reads (params_stride 0).
            self._params = jnp.asarray(env._words)
        self._layout = layout_arg(lay)
        self.n = env.num_agents
        self.obs_dim = env.obs_dim
        self.heads = len(env.spec.nvec(env.params))
        self.state = None

    def numpy(self, x: jax.Array) -> np.ndarray:
        """Current contents of one of this env's buffers (e.g. ``env.numpy(env.obs)``),
        copied from the device. (``np.asarray`` keeps the host copy of a jax.Array from
        its first read, so it would not see later in-place steps.)"""
        return as_gpuarray(x).get()

    @staticmethod
    def _key_words(key: jax.Array) -> jax.Array:
        """u32[3]: the key words and the global index of the first env (0)."""
        return jnp.concatenate([jnp.asarray(key_data_of(key), jnp.uint32).reshape(2),
                                jnp.zeros((1,), jnp.uint32)])

    def _call(self, step: bool) -> np.ndarray:
        """The `jaxwarp::Call` of a reset or step over this env's buffers (0-d
        CALL_DTYPE array; keys and actions are filled in per launch), as
        ffi_impl::reset/step fill it: one key batch member; state fields, then
        the scratch fields carved from one buffer (stride: every scratch word of
        an env), or null when the layout stages scratch in shared memory."""
        c = np.zeros((), CALL_DTYPE)
        c["envs"] = c["per_member"] = self.num_envs
        c["n"], c["obs_dim"] = self.n, self.obs_dim
        c["obs"] = device_pointer(self.obs)
        if step:
            c["heads"] = self.heads
            c["autoreset"] = 1
            for name, x in (("reward", self.reward), ("done", self.done),
                            ("term", self.terminated), ("trunc", self.truncated)):
                c[name] = device_pointer(x)
        k = self._state_fields
        base = [device_pointer(getattr(self.state, f.name)) for f in self.spec.fields]
        at = device_pointer(self._scratch)
        for words in self.per_env[k:]:
            base.append(0 if self.staged else at)
            at += 4 * int(words)
        fields = len(self.per_env)
        c["base"][:fields] = base
        c["per_env"][:fields] = self.per_env
        c["stride"][:fields] = [*self.per_env[:k], *[self.scratch_words] * (fields - k)]
        c["offset"][:fields] = np.cumsum(self.per_env) - self.per_env  # staged block offsets
        c["params"] = device_pointer(self._params)
        return c

    def _launch(self, fn, call: np.ndarray) -> None:
        fn(call[()], self._layout, block=(self.tpe * self.epb, 1, 1),
           grid=((self.num_envs + self.epb - 1) // self.epb, 1), shared=self.smem)
        self.ctx.synchronize()

    def reset(self, key: jax.Array, num_envs: int) -> None:
        """Allocates the state (zeros, as the FFI reset zeroes it) and runs the reset
        kernel: fills self.state and self.obs."""
        num_envs = check_num_envs(num_envs)
        n = self.n
        with jax.default_device(self.device):
            # Fresh buffers that nothing else in JAX refers to: written in place.
            self.state = self.spec.state_type(*[
                jnp.zeros((num_envs, n) if f.scope == "agent" else (num_envs,),
                          DTYPES[f.dtype][1]) for f in self.spec.fields])
            self.obs = jnp.zeros((num_envs, n, self.obs_dim), jnp.float32)
            self.reward = jnp.zeros((num_envs, n), jnp.float32)
            self.done = jnp.zeros((num_envs,), bool)
            self.terminated = jnp.zeros((num_envs,), bool)
            self.truncated = jnp.zeros((num_envs,), bool)
            # Sized as for the FFI call (unused, one word, when scratch is staged).
            self._scratch = jnp.zeros(self.env._scratch(int(num_envs)).shape, jnp.int32)
            self._key_buf = jnp.zeros((3,), jnp.uint32)  # step_pointers' u32[3] keys
            keys = self._key_words(key)
        self.num_envs = int(num_envs)
        call = self._call(step=False)
        call["keys"] = device_pointer(keys)
        self._launch(self._reset_fn, call)
        self.prepare()

    def step_pointers(self, key_ptr: int, actions_ptr: int, key_words: int = 2) -> None:
        """One step from raw device pointers (actions: i32[envs, agents, heads]),
        launched and synchronised: the per-step cost WarpDrive pays.

        key_words=2: key_ptr points at the key data (u32[2]); it is copied (device
        to device) into this env's u32[3] key buffer, whose third word (the global
        index of the first env) is 0. key_words=3: key_ptr points at the kernels'
        own u32[3] layout (key data, then 0) and is used as is, with no copy."""
        if key_words == 2:
            self._cuda.memcpy_dtod(self._key_ptr, int(key_ptr), 8)
            key_ptr = self._key_ptr
        elif key_words != 3:
            raise ValueError(f"key_words must be 2 or 3; got {key_words!r}")
        call = self._step_call
        call["keys"] = int(key_ptr)
        call["actions"] = int(actions_ptr)
        self._launch(self._step_fn, call)

    def prepare(self) -> None:
        """Caches the step's Call and the key buffer's address (the buffers do not
        move between steps)."""
        self._step_call = self._call(step=True)
        self._key_ptr = device_pointer(self._key_buf)

    def step(self, key: jax.Array, actions: jax.Array) -> None:
        """One step in place: self.state, self.obs, self.reward, self.done."""
        if self.state is None:
            raise RuntimeError("PyCudaEnv.step before reset")
        want = (self.num_envs, self.n, self.heads)
        if tuple(actions.shape) != want or actions.dtype != jnp.int32:
            raise ValueError(f"actions: expected int32{list(want)}, got "
                             f"{actions.dtype}{list(actions.shape)}")
        keys = jax.device_put(self._key_words(key), self.device)
        actions = jax.device_put(actions, self.device)
        self.step_pointers(device_pointer(keys), device_pointer(actions), key_words=3)
