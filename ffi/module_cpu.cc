// Python module `jaxwarp._jaxwarp_cpu`: hands XLA:CPU FFI handlers to Python
// as capsules; `jaxwarp/_ffi.py` registers them with `jax.ffi`.
#include <nanobind/nanobind.h>

#include "xla/ffi/api/c_api.h"

extern "C" XLA_FFI_Error* JaxwarpSampleCategoricalCpu(XLA_FFI_CallFrame*);

namespace nb = nanobind;

template <typename T>
static nb::capsule Encapsulate(T* fn) {
  return nb::capsule(reinterpret_cast<void*>(fn));
}

NB_MODULE(_jaxwarp_cpu, m) {
  m.def("registrations", []() {
    nb::dict d;
    d["jaxwarp_sample_categorical_cpu"] = Encapsulate(JaxwarpSampleCategoricalCpu);
    return d;
  });
}
