// Python module `jaxwarp._jaxwarp_cuda`: hands CUDA FFI handlers to Python as
// capsules. Importing it needs no GPU (the CUDA runtime is linked statically).
#include <nanobind/nanobind.h>

#include "xla/ffi/api/c_api.h"

extern "C" XLA_FFI_Error* JaxwarpSampleCategoricalCuda(XLA_FFI_CallFrame*);

namespace nb = nanobind;

template <typename T>
static nb::capsule Encapsulate(T* fn) {
  return nb::capsule(reinterpret_cast<void*>(fn));
}

NB_MODULE(_jaxwarp_cuda, m) {
  m.def("registrations", []() {
    nb::dict d;
    d["jaxwarp_sample_categorical_cuda"] = Encapsulate(JaxwarpSampleCategoricalCuda);
    return d;
  });
}
