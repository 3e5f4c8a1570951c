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

from jaxwarp.authoring import _DTYPES, ContractEnv, _compile
from jaxwarp.core import key_data_of


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


class PyCudaEnv:
    """A contract env stepped WarpDrive's way: its generated CUDA kernels
    launched from Python through PyCUDA, one launch per call, then a sync.

    The state lives in JAX arrays that this object owns and updates in place
    (``self.state``; obs/reward/done likewise); read them between steps with
    `as_gpuarray` or `numpy()`.

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
        self.env = env
        self.spec = env.spec
        self.ctx = primary_context(device)
        self.device = jax.devices("gpu")[device]
        cubin = _compile(env.spec, env._header, "cuda", cubin=True, params=env.params)
        self.module = cuda.module_from_file(str(cubin))
        self._reset_fn = self.module.get_function(f"jaxwarp_{env.name}_reset_kernel")
        self._step_fn = self.module.get_function(f"jaxwarp_{env.name}_step_kernel")
        # Params as the kernel's by-value struct: its 4-byte fields in order,
        # each passed as one argument (same layout; an empty struct is 1 byte).
        self._params = list(env._attrs.values()) or [np.int8(0)]
        n = env.num_agents
        self.n = n
        self.obs_dim = env.obs_dim
        self.heads = len(env.spec.nvec(env.params))
        self.tpe = n if n < 1024 else 1024
        self.epb = 1 if self.tpe >= 128 else 128 // self.tpe
        # What the generated launcher's layout_for() picks: state, then
        # observations, staged in shared memory while they fit in 48 KiB.
        budget = 48 * 1024 // 4 - 2 * self.epb
        words = sum(n if f.scope == "agent" else 1 for f in env.spec.fields)
        self.words = words if n > 1 and words * self.epb <= budget else 0
        self.obs_staged = int(self.words * self.epb + self.epb * n * self.obs_dim <= budget)
        self.smem = 4 * ((2 + self.words) * self.epb
                         + (self.epb * n * self.obs_dim if self.obs_staged else 0))
        self.state = None

    def numpy(self, x: jax.Array) -> np.ndarray:
        """Current contents of one of this env's buffers (e.g. ``env.numpy(env.obs)``),
        copied from the device. (``np.asarray`` keeps the host copy of a jax.Array from
        its first read, so it would not see later in-place steps.)"""
        return as_gpuarray(x).get()

    def _bases(self):
        return [np.uintp(device_pointer(getattr(self.state, f.name))) for f in self.spec.fields]

    def _grid(self, envs: int):
        return dict(block=(self.tpe * self.epb, 1, 1),
                    grid=((envs + self.epb - 1) // self.epb, 1))

    def reset(self, key: jax.Array, num_envs: int) -> None:
        """Allocates the state (zeros, as before the FFI reset) and runs the reset
        kernel: fills self.state and self.obs."""
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) \
                or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int; got {num_envs!r}")
        n = self.n
        with jax.default_device(self.device):
            # Fresh buffers that nothing else in JAX refers to: written in place.
            self.state = self.spec.state_type(*[
                jnp.zeros((num_envs, n) if f.scope == "agent" else (num_envs,),
                          _DTYPES[f.dtype][1]) for f in self.spec.fields])
            self.obs = jnp.zeros((num_envs, n, self.obs_dim), jnp.float32)
            self.reward = jnp.zeros((num_envs, n), jnp.float32)
            self.done = jnp.zeros((num_envs,), bool)
            self.terminated = jnp.zeros((num_envs,), bool)
            self.truncated = jnp.zeros((num_envs,), bool)
            keys = jnp.asarray(key_data_of(key), jnp.uint32).reshape(2)
        self.num_envs = int(num_envs)
        self._reset_fn(*self._params, *self._bases(), np.int64(num_envs), np.int64(num_envs),
                       np.uintp(device_pointer(keys)), np.int32(n), np.int32(self.obs_dim),
                       np.uintp(device_pointer(self.obs)), np.int32(self.tpe),
                       np.int32(self.epb), np.int32(self.words), np.int32(self.obs_staged),
                       **self._grid(self.num_envs))
        self.ctx.synchronize()
        self.prepare()

    def step_pointers(self, key_ptr: int, actions_ptr: int) -> None:
        """One step from raw device pointers (key: u32[2], actions: i32[envs, agents,
        heads]), launched and synchronised: the per-step cost WarpDrive pays."""
        self._step_fn(*self._params, *self._bases_cached, np.int64(self.num_envs),
                      np.int64(self.num_envs), np.uintp(key_ptr), np.int32(self.n),
                      np.int32(self.obs_dim), np.int32(self.heads), np.uintp(actions_ptr),
                      *self._out_cached, np.int32(self.tpe), np.int32(self.epb),
                      np.int32(self.words), np.int32(self.obs_staged), shared=self.smem,
                      **self._grid(self.num_envs))
        self.ctx.synchronize()

    def prepare(self) -> None:
        """Caches the buffer addresses (they do not move between steps)."""
        self._bases_cached = self._bases()
        self._out_cached = [np.uintp(device_pointer(x)) for x in
                            (self.obs, self.reward, self.done, self.terminated, self.truncated)]

    def step(self, key: jax.Array, actions: jax.Array) -> None:
        """One step in place: self.state, self.obs, self.reward, self.done."""
        if self.state is None:
            raise RuntimeError("PyCudaEnv.step before reset")
        want = (self.num_envs, self.n, self.heads)
        if tuple(actions.shape) != want or actions.dtype != jnp.int32:
            raise ValueError(f"actions: expected int32{list(want)}, got "
                             f"{actions.dtype}{list(actions.shape)}")
        keys = jax.device_put(jnp.asarray(key_data_of(key), jnp.uint32).reshape(2), self.device)
        actions = jax.device_put(actions, self.device)
        self.step_pointers(device_pointer(keys), device_pointer(actions))
