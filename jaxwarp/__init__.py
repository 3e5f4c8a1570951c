"""jaxwarp: multi-agent RL environments as CUDA kernels inside jitted JAX programs."""

from jaxwarp import _ffi, spaces, testing
from jaxwarp.authoring import build_env
from jaxwarp.registry import make, register_env, register_spec, registered_envs
from jaxwarp.sampler import sample_actions

__version__ = "0.1.0"
__all__ = ["make", "register_env", "register_spec", "build_env", "registered_envs",
           "sample_actions", "spaces",
           "testing", "gpu_available"]

gpu_available = _ffi.gpu_available


def _release_device_state() -> None:
    """Drops what jaxwarp's own caches hold on the devices (jitted samplers,
    meshes and shardings, the adapters' compiled steps) and jax's caches, so
    that no compiled program or buffer outlives jax's backend at exit
    (issue 37: XLA's allocator reported failed frees at interpreter teardown
    on the GPU). Registered with atexit below; runs before jax's own
    clean-up (atexit runs the last registered first), which destroys the
    backend client while CUDA is still up."""
    import gc
    import sys

    import jax

    caches = {"jaxwarp.sharding": ("_placement", "_jit_sample"),
              "jaxwarp.adapters._batched": ("_compiled",)}
    for module, names in caches.items():  # only those imported: nothing new at exit
        if module in sys.modules:
            for name in names:
                getattr(sys.modules[module], name).cache_clear()
    jax.clear_caches()
    gc.collect()


import atexit as _atexit  # noqa: E402

_atexit.register(_release_device_state)
