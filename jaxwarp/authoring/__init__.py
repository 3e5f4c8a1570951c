"""Write an env as a C++/CUDA header, get a jitted JAX env.

An env is two things:

* a header (``my_env.h``) with ``reset``, ``step`` and ``observe`` for one
  agent, written against `cuda/jaxwarp_env.h` (see that file for the
  contract), compiled by g++ for XLA:CPU and by nvcc for CUDA;
* an `EnvSpec`: its params dataclass, its state (a dataclass whose fields
  are declared with `state_field`, the one place the state is declared),
  spaces, the pure-JAX reference (the oracle of the consistency tests and
  the benchmarks' baseline) and the env's hooks (drawing, render fps,
  default training config).

`build_env(spec, backend)` generates the env's layout header from the spec
(Params and State structs, the Env traits: no hand-written binding code, no
positional argument lists), compiles the checked-in handler source
`ffi/env_ffi.cc` with it and the env's header, with the same flags as
jaxwarp's built-ins, caches the library in the user cache
directory keyed by the sources, compiler, jaxlib version and GPU
architecture, registers the FFI targets and returns a `ContractEnv`.
Nothing is ever written into the installed package.

The package has one module per layer, each importing (at its top) only those
above it:

* `jaxwarp.authoring.spec`: the spec types (`EnvSpec`, `StateField`,
  `ScratchField`, `ParamArray`, ...), params as the kernels see them, state
  tagging, `agent_uniform`;
* `jaxwarp.authoring.codegen`: the env's generated C++, its layout header
  (`generated_source`);
* `jaxwarp.authoring.build`: compilers, flags (`compile_command`: the
  checked-in ffi/env_ffi.cc with the layout beside it), the cache,
  registration and the launch layout;
* `jaxwarp.authoring.env`: `ContractEnv`, `env_class`, `build_env`.

Every public name is importable from `jaxwarp.authoring` itself.
"""

from jaxwarp.authoring.build import (CXX_FLAGS, NVCC_FLAGS, cache_dir, compile_command,
                                    compile_library, compiler_id, find_cxx, find_nvcc,
                                    gpu_arch, launch_layout, register_targets)
from jaxwarp.authoring.codegen import (API_DIR, API_HEADERS, FFI_DIR, FFI_SOURCE, FFI_SOURCES,
                                       LAYOUT_NAME, generate_source, generated_source)
from jaxwarp.authoring.env import (ContractEnv, build_env, compiled_signature, env_class,
                                   reference_takes_autoreset)
from jaxwarp.authoring.spec import (DTYPES, KEPT_FIELDS, EnvBuildError, EnvSpec, ParamArray,
                                    ScratchField, StateField, agent_uniform, check_params_id,
                                    fields_of, grid_scratch, grid_side, kernel_param_values,
                                    pack_params, params_id, per_env_words, state_field,
                                    static_param_names, tag_state, tagged_state_type)

__all__ = [
    "API_DIR", "API_HEADERS", "CXX_FLAGS", "DTYPES", "FFI_DIR", "FFI_SOURCE", "FFI_SOURCES",
    "KEPT_FIELDS", "LAYOUT_NAME", "NVCC_FLAGS", "ContractEnv", "EnvBuildError", "EnvSpec",
    "ParamArray", "ScratchField", "StateField", "agent_uniform", "build_env", "cache_dir",
    "check_params_id", "compile_command", "compile_library", "compiled_signature",
    "compiler_id", "env_class",
    "fields_of", "find_cxx", "find_nvcc", "generate_source", "generated_source", "gpu_arch",
    "grid_scratch", "grid_side", "kernel_param_values", "launch_layout", "pack_params",
    "params_id", "per_env_words", "reference_takes_autoreset", "register_targets",
    "state_field", "static_param_names", "tag_state", "tagged_state_type",
]
