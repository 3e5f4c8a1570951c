// XLA:CPU handler of the categorical sampler: the per-head code of
// cuda/sampler.h, row by row on the host.
#include "sampler_ffi.h"

namespace jaxwarp {
namespace sampler {
namespace {

ffi::Error SampleCategoricalCpu(ffi::Buffer<ffi::U32> keys, ffi::Buffer<ffi::F32> logits,
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
  const uint32_t* k = keys.typed_data();
  const uint32_t* offsets = row_offsets.typed_data();
  const float* x = logits.typed_data();
  int32_t* act = actions->typed_data();
  float* lp = log_prob->typed_data();
  const int h_count = p.num_heads;
  for (int64_t r = 0; r < lay.rows; ++r) {
    const int64_t member = r / lay.rows_per_member;
    // The row's index in the member's whole draw (global under sharding).
    const uint64_t local = static_cast<uint64_t>(r % lay.rows_per_member) + offsets[member];
    const float* row = x + r * p.row_len;
    float total = 0.0f;
    for (int h = 0; h < h_count; ++h) {
      const int32_t n = p.nvec[h];
      const uint32_t* kh = k + 2 * (member * h_count + h);
      const HeadSample s = sample_head(
          row + p.offset[h], n, kh[0], kh[1], local * static_cast<uint64_t>(n),
          static_cast<uint64_t>(lay.draw_rows) * static_cast<uint64_t>(n),
          p.partitionable != 0);
      act[r * h_count + h] = s.action;
      // Heads summed in order, as the reference does.
      total = h == 0 ? s.log_prob : total + s.log_prob;
    }
    lp[r] = total;
  }
  return ffi::Error::Success();
}

}  // namespace
}  // namespace sampler
}  // namespace jaxwarp

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxwarpSampleCategoricalCpu,
                              jaxwarp::sampler::SampleCategoricalCpu,
                              jaxwarp::sampler::SamplerBinding(xla::ffi::Ffi::Bind()));
