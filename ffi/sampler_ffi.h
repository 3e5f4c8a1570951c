// FFI attribute decoding and buffer bookkeeping for the categorical sampler,
// shared by the XLA:CPU and CUDA handlers.
#pragma once

#include <cstdint>
#include <utility>

#include "sampler.h"
#include "xla/ffi/api/ffi.h"

namespace jaxwarp {
namespace sampler {

namespace ffi = xla::ffi;

// How the flat buffers split into vmap batch members and rows. Under
// `vmap_method="broadcast_all"` every batch axis is folded into the leading
// axes of the logits, the keys arrive as u32[members, H, 2] and the row
// offsets as u32[members]; member `m` owns rows
// [m * rows_per_member, (m + 1) * rows_per_member) of this call, which are
// rows [row_offset[m], row_offset[m] + rows_per_member) of the member's whole
// draw of `draw_rows` rows: a call over one device's block of a sharded batch
// counts its random draws from the block's global first row, so it draws the
// numbers of the unsharded call.
struct Layout {
  int64_t rows;
  int64_t rows_per_member;
  int64_t draw_rows;  // rows of the member's whole draw (>= rows_per_member)
};

// Attributes exactly as `jaxwarp/sampler.py::_sample_ffi` passes them. Python
// validates first; these checks guard against a call that bypassed it.
// draw_rows: the `draw_rows` attribute (0: this call's own rows per member).
inline ffi::Error MakeSampler(ffi::Span<const int32_t> nvec, int32_t partitionable,
                              int64_t draw_rows, int64_t key_elements,
                              int64_t logit_elements, int64_t offset_elements,
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
  if (offset_elements != members)
    return ffi::Error::InvalidArgument("row offsets must be u32[members] (one per key)");
  if (draw_rows < 0 || (draw_rows > 0 && draw_rows < lay->rows_per_member))
    return ffi::Error::InvalidArgument("draw_rows must be 0 or >= the rows per member");
  lay->draw_rows = draw_rows > 0 ? draw_rows : lay->rows_per_member;
  if (action_elements != lay->rows * h || log_prob_elements != lay->rows)
    return ffi::Error::InvalidArgument("output buffers do not match the logits");
  return ffi::Error::Success();
}

// The buffers of one call: keys u32[members, H, 2], logits f32[rows, sum(nvec)],
// row offsets u32[members] in; actions s32[rows, H], log-probs f32[rows] out.
template <class Keys, class Logits, class Offsets, class Actions, class LogProb>
inline ffi::Error MakeSampler(const Keys& keys, const Logits& logits, const Offsets& offsets,
                              Actions& actions, LogProb& log_prob,
                              ffi::Span<const int32_t> nvec, int32_t partitionable,
                              int64_t draw_rows, SamplerParams* p, Layout* lay) {
  return MakeSampler(nvec, partitionable, draw_rows, keys.element_count(),
                     logits.element_count(), offsets.element_count(),
                     actions->element_count(), log_prob->element_count(), p, lay);
}

// Both handlers' buffers and attributes, in order, after what `bind` already
// binds (the CUDA handler's stream): XLA_FFI_DEFINE_HANDLER_SYMBOL(...,
// SamplerBinding(ffi::Ffi::Bind()), ...).
template <class Binding>
inline auto SamplerBinding(Binding bind) {
  return std::move(bind)
      .template Arg<ffi::Buffer<ffi::U32>>()
      .template Arg<ffi::Buffer<ffi::F32>>()
      .template Arg<ffi::Buffer<ffi::U32>>()
      .template Ret<ffi::Buffer<ffi::S32>>()
      .template Ret<ffi::Buffer<ffi::F32>>()
      .template Attr<ffi::Span<const int32_t>>("nvec")
      .template Attr<int32_t>("partitionable")
      .template Attr<int64_t>("draw_rows");
}

}  // namespace sampler
}  // namespace jaxwarp
