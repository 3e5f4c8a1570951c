// CUDA FFI handler of the categorical sampler: decode buffers and attributes,
// then enqueue cuda/sampler_kernels.cu on XLA's stream. It never
// synchronises, allocates nothing and never reads device memory on the host,
// so it is marked command-buffer (CUDA graph) compatible.
#include <string>

#include "sampler_ffi.h"
#include "sampler_kernels.h"

namespace jaxwarp {
namespace sampler {
namespace {

ffi::Error SampleCategoricalCuda(cudaStream_t stream, ffi::Buffer<ffi::U32> keys,
                                 ffi::Buffer<ffi::F32> logits,
                                 ffi::Buffer<ffi::U32> row_offsets,
                                 ffi::ResultBuffer<ffi::S32> actions,
                                 ffi::ResultBuffer<ffi::F32> log_prob,
                                 ffi::Span<const int32_t> nvec, int32_t partitionable,
                                 int64_t draw_rows) {
  SamplerParams p;
  Layout lay;
  if (auto err = MakeSampler(keys, logits, row_offsets, actions, log_prob, nvec, partitionable,
                             draw_rows, &p, &lay);
      !err.success())
    return err;
  SamplerBuffers b{keys.typed_data(),    logits.typed_data(), row_offsets.typed_data(),
                   actions->typed_data(), log_prob->typed_data(), lay.rows,
                   lay.rows_per_member,  lay.draw_rows};
  const cudaError_t err = LaunchSampler(p, b, stream);
  if (err == cudaSuccess) return ffi::Error::Success();
  return ffi::Error::Internal(std::string("jaxwarp sample_categorical kernel: ") +
                              cudaGetErrorString(err));
}

}  // namespace
}  // namespace sampler
}  // namespace jaxwarp

namespace xffi = xla::ffi;

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    JaxwarpSampleCategoricalCuda, jaxwarp::sampler::SampleCategoricalCuda,
    jaxwarp::sampler::SamplerBinding(xffi::Ffi::Bind().Ctx<xffi::PlatformStream<cudaStream_t>>()),
    {xffi::Traits::kCmdBufferCompatible});
