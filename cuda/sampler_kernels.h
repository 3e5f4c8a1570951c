// Host interface of the categorical sampler's CUDA kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "sampler.h"

namespace jaxwarp {
namespace sampler {

// Device pointers and sizes of one call (see ffi/sampler_ffi.h: Layout).
struct SamplerBuffers {
  const uint32_t* keys;         // [members, H, 2]
  const float* logits;          // [rows, sum(nvec)]
  const uint32_t* row_offsets;  // [members]: global index of the member's first row
  int32_t* actions;             // [rows, H]
  float* log_prob;              // [rows]
  int64_t rows;
  int64_t rows_per_member;
  int64_t draw_rows;            // rows of a member's whole draw (counter layout)
};

// Enqueues one sampling of every row on `stream`. Asynchronous: never
// synchronises, allocates nothing.
cudaError_t LaunchSampler(const SamplerParams& p, const SamplerBuffers& b,
                          cudaStream_t stream);

}  // namespace sampler
}  // namespace jaxwarp
