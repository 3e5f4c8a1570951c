// The FFI library of one env: what jaxwarp.authoring compiles for every env,
// built-in or yours, once per env and platform.
//
// g++ builds it for XLA:CPU, nvcc (as CUDA: `-x cu`) for the GPU, and
// nvcc -cubin for the PyCUDA bridge; the same text each time, the platform
// picks its code path through __CUDACC__. Nothing here names an env: the env
// arrives through "env_layout.h", the one generated file of the build
// (jaxwarp/authoring/codegen.py generates it from the env's spec, build.py
// writes it into the env's cache folder and puts that folder on the include
// path; `jaxwarp build ENV --emit DIR` writes the same text as
// DIR/<env>_layout.h for review, and tests/golden/ keeps two of them). It
// holds what the spec declares, in C++:
//   namespace jaxwarp_env_<env> {
//     struct Params;  // the kernel params (static ones as constexpr members)
//     struct State;   // one pointer per state field, then per scratch field
//     #include "<env>.h"  // the env's reset/step/observe...
//     struct Env;     // the traits the templates read: Params, State,
//                     // field counts, phases, bind() and pointers()
//   }
//   #define JAXWARP_ENV_NAME <env>                 // names the exported symbols
//   #define JAXWARP_ENV jaxwarp_env_<env>::Env
//
// The kernels, the CPU loop and the launch layout are the templates of
// cuda/jaxwarp_kernels.h; the FFI handlers, the registration symbols and
// the kernels' C names are those of ffi/jaxwarp_ffi.h, instantiated below.
#include <stdint.h>

#include "xla/ffi/api/ffi.h"
#include "jaxwarp_env.h"
#include "env_layout.h"
#include "jaxwarp_ffi.h"

#if !defined(JAXWARP_ENV_NAME) || !defined(JAXWARP_ENV)
#error "env_layout.h must define JAXWARP_ENV_NAME and JAXWARP_ENV (jaxwarp.authoring writes it)"
#endif

// JAXWARP_DEFINE_ENV pastes NAME into symbol names (jaxwarp_##NAME##_reset_cpu),
// and a macro argument that is pasted is not expanded first: passed
// JAXWARP_ENV_NAME directly, it would define jaxwarp_JAXWARP_ENV_NAME_reset_cpu.
// One more level of macro expands the env's name (cartpole) before the paste.
#define JAXWARP_DEFINE_ENV_EXPANDED(NAME, ENV) JAXWARP_DEFINE_ENV(NAME, ENV)

// Defines, for this platform: jaxwarp_<env>_{reset,step}_{cpu,cuda} (the FFI
// handlers Python registers), jaxwarp_<env>_layout and, on CUDA, the kernels.
JAXWARP_DEFINE_ENV_EXPANDED(JAXWARP_ENV_NAME, JAXWARP_ENV)
