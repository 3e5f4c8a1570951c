"""Write an env as a C++/CUDA header, get a jitted JAX env (see `env`)."""

from jaxwarp.authoring.env import *  # noqa: F401,F403
from jaxwarp.authoring.env import (  # noqa: F401
    _DTYPES, _Layout, _compile, _compiler_id, _find_cxx, _find_nvcc, _gpu_arch, _intact, _seal)
