// gru_scan.h's handlers on the CPU: the kernel's threads run in turn, so the
// bench's CPU check (experiments/bench_gru_scan.py --check) tests its maths.
#include <vector>

#include "gru_scan.h"
#include "gru_scan_ffi.h"
#include "xla/ffi/api/ffi.h"

namespace {

using gru_scan::kMaxRows;

::xla::ffi::Error Forward(GRU_FWD_PARAMS) {
  const auto d = xs.dimensions();
  const int T = static_cast<int>(d[0]), B = static_cast<int>(d[1]);
  const int H = static_cast<int>(d[2] / 3);
  const bool* rs = reset.typed_data();
  std::vector<float> buf(2 * kMaxRows * H), next(H * kMaxRows);
  for (int row0 = 0; row0 < B; row0 += kMaxRows) {
    const int rows = B - row0 < kMaxRows ? B - row0 : kMaxRows;
    for (int b = 0; b < rows; ++b)
      for (int i = 0; i < H; ++i)
        buf[b * H + i] = rs[row0 + b] ? 0.f : h0.typed_data()[(row0 + b) * H + i];
    for (int t = 0; t < T; ++t) {
      float* hin = buf.data() + (t & 1) * kMaxRows * H;
      float* nxt = buf.data() + (1 - (t & 1)) * kMaxRows * H;
      const int64_t o = static_cast<int64_t>(t) * B + row0;
      for (int b = 0; b < rows; ++b)
        for (int i = 0; i < H; ++i) s_hin->typed_data()[(o + b) * H + i] = hin[b * H + i];
      for (int i = 0; i < H; ++i) {
        gru_scan::forward_unit(i, rows, H, hin, w.typed_data(), xs.typed_data() + o * 3 * H,
                               b_hn.typed_data()[i], ys->typed_data() + o * H,
                               s_r->typed_data() + o * H, s_z->typed_data() + o * H,
                               s_n->typed_data() + o * H, s_hnb->typed_data() + o * H,
                               next.data() + i * kMaxRows);
      }
      for (int b = 0; b < rows; ++b) {
        const bool r = t + 1 < T && rs[(t + 1) * B + row0 + b];
        for (int i = 0; i < H; ++i) nxt[b * H + i] = r ? 0.f : next[i * kMaxRows + b];
      }
    }
    for (int b = 0; b < rows; ++b)
      for (int i = 0; i < H; ++i)
        h_t->typed_data()[(row0 + b) * H + i] = next[i * kMaxRows + b];
  }
  return ::xla::ffi::Error::Success();
}

::xla::ffi::Error Backward(GRU_BWD_PARAMS) {
  const auto d = d_ys.dimensions();
  const int T = static_cast<int>(d[0]), B = static_cast<int>(d[1]), H = static_cast<int>(d[2]);
  const bool* rs = reset.typed_data();
  std::vector<float> wt(3 * H * H), drec(kMaxRows * 3 * H), dh(H * kMaxRows);
  for (int k = 0; k < H; ++k)
    for (int j = 0; j < 3 * H; ++j) wt[j * H + k] = w.typed_data()[k * 3 * H + j];
  for (int row0 = 0; row0 < B; row0 += kMaxRows) {
    const int rows = B - row0 < kMaxRows ? B - row0 : kMaxRows;
    for (int i = 0; i < H; ++i)
      for (int b = 0; b < rows; ++b) dh[i * kMaxRows + b] = d_ht.typed_data()[(row0 + b) * H + i];
    for (int t = T - 1; t >= 0; --t) {
      const int64_t o = static_cast<int64_t>(t) * B + row0;
      for (int i = 0; i < H; ++i) {
        float* dhi = dh.data() + i * kMaxRows;
        for (int b = 0; b < rows; ++b) dhi[b] += d_ys.typed_data()[(o + b) * H + i];
        gru_scan::backward_gates(i, rows, H, dhi, s_hin.typed_data() + o * H,
                                 s_r.typed_data() + o * H, s_z.typed_data() + o * H,
                                 s_n.typed_data() + o * H, s_hnb.typed_data() + o * H,
                                 dxs->typed_data() + o * 3 * H, d_rec->typed_data() + o * 3 * H,
                                 drec.data());
      }
      for (int i = 0; i < H; ++i)
        gru_scan::backward_carry(i, rows, H, dh.data() + i * kMaxRows,
                                 s_z.typed_data() + o * H, drec.data(), wt.data(), rs + o);
    }
    for (int i = 0; i < H; ++i)
      for (int b = 0; b < rows; ++b) dh0->typed_data()[(row0 + b) * H + i] = dh[i * kMaxRows + b];
  }
  return ::xla::ffi::Error::Success();
}

}  // namespace

GRU_BIND_FORWARD(GruScanForward, Forward, );
GRU_BIND_BACKWARD(GruScanBackward, Backward, );
