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

