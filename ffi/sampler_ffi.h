// FFI attribute decoding and buffer bookkeeping for the categorical sampler,
// shared by the XLA:CPU and CUDA handlers.
#pragma once

#include <cstdint>

#include "sampler.h"
#include "xla/ffi/api/ffi.h"

namespace jaxwarp {
namespace sampler {

namespace ffi = xla::ffi;

// How the flat buffers split into vmap batch members and rows. Under
// `vmap_method="broadcast_all"` every batch axis is folded into the leading
// axes of the logits and the keys arrive as u32[members, H, 2]; member `m`
// owns rows [m * rows_per_member, (m + 1) * rows_per_member) and counts its
// random draws from its own first row, as a Python loop over members would.
struct Layout {
  int64_t rows;
  int64_t rows_per_member;
};

// Attributes exactly as `jaxwarp/sampler.py::_sample_ffi` passes them. Python
// validates first; these checks guard against a call that bypassed it.
inline ffi::Error MakeSampler(ffi::Span<const int32_t> nvec, int32_t partitionable,
                              int64_t key_elements, int64_t logit_elements,
                              int64_t action_elements, int64_t log_prob_elements,
                              SamplerParams* p, Layout* lay) {
  const int64_t h = static_cast<int64_t>(nvec.size());
  if (h < 1 || h > kMaxHeads)
    return ffi::Error::InvalidArgument("nvec must hold 1..32 heads");
  p->num_heads = static_cast<int32_t>(h);
  p->partitionable = partitionable;
  int64_t len = 0;
  for (int64_t i = 0; i < kMaxHeads; ++i) {
    p->nvec[i] = i < h ? nvec[i] : 0;
    p->offset[i] = static_cast<int32_t>(len);
    if (i < h) {
      if (nvec[i] < 1) return ffi::Error::InvalidArgument("nvec entries must be >= 1");
      len += nvec[i];
      if (len > INT32_MAX) return ffi::Error::InvalidArgument("sum(nvec) too large");
    }
  }
  p->row_len = static_cast<int32_t>(len);
  if (key_elements < 2 * h || key_elements % (2 * h) != 0)
    return ffi::Error::InvalidArgument("keys must be u32[..., H, 2]");
  if (logit_elements % len != 0)
    return ffi::Error::InvalidArgument("logits size is not a multiple of sum(nvec)");
  const int64_t members = key_elements / (2 * h);
  lay->rows = logit_elements / len;
  if (lay->rows % members != 0)
    return ffi::Error::InvalidArgument("row count is not a multiple of the key count");
  lay->rows_per_member = lay->rows / members;
  if (action_elements != lay->rows * h || log_prob_elements != lay->rows)
    return ffi::Error::InvalidArgument("output buffers do not match the logits");
  return ffi::Error::Success();
}

}  // namespace sampler
}  // namespace jaxwarp
