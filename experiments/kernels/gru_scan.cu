// gru_scan.h's handlers on CUDA: one launch for the whole forward scan and one
// for the backward, a block per `rows` batch rows, a thread per hidden unit.
#include <cuda_runtime.h>

#include "gru_scan.h"
#include "gru_scan_ffi.h"
#include "xla/ffi/api/ffi.h"

namespace {

using gru_scan::kMaxRows;

__global__ void forward_kernel(const float* __restrict__ xs, const float* __restrict__ w,
                               const float* __restrict__ b_hn, const float* __restrict__ h0,
                               const bool* __restrict__ reset, float* h_t, float* ys,
                               float* s_hin, float* s_r, float* s_z, float* s_n, float* s_hnb,
                               int T, int B, int H, int rows_per_block) {
  extern __shared__ float sm[];
  float* ws = sm;                  // [H][3H]
  float* buf = ws + 3 * H * H;     // [2][kMaxRows][H]: the carry after its reset
  const int i = threadIdx.x;
  const int row0 = blockIdx.x * rows_per_block;
  const int rows = min(rows_per_block, B - row0);
  for (int e = i; e < 3 * H * H; e += blockDim.x) ws[e] = w[e];
  for (int b = 0; b < rows; ++b) buf[b * H + i] = reset[row0 + b] ? 0.f : h0[(row0 + b) * H + i];
  const float bias = b_hn[i];
  float next[kMaxRows];
  __syncthreads();
  for (int t = 0; t < T; ++t) {
    const float* hin = buf + (t & 1) * kMaxRows * H;
    float* nxt = buf + (1 - (t & 1)) * kMaxRows * H;
    const int64_t o = static_cast<int64_t>(t) * B + row0;
    for (int b = 0; b < rows; ++b) s_hin[(o + b) * H + i] = hin[b * H + i];
    gru_scan::forward_unit(i, rows, H, hin, ws, xs + o * 3 * H, bias, ys + o * H, s_r + o * H,
                           s_z + o * H, s_n + o * H, s_hnb + o * H, next);
    for (int b = 0; b < rows; ++b) {
      const bool r = t + 1 < T && reset[(t + 1) * static_cast<int64_t>(B) + row0 + b];
      nxt[b * H + i] = r ? 0.f : next[b];
    }
    __syncthreads();  // every thread has read hin (all units) before it is written again
  }
  for (int b = 0; b < rows; ++b) h_t[(row0 + b) * H + i] = next[b];
}

__global__ void backward_kernel(const float* __restrict__ d_ht, const float* __restrict__ d_ys,
                                const float* __restrict__ s_hin, const float* __restrict__ s_r,
                                const float* __restrict__ s_z, const float* __restrict__ s_n,
                                const float* __restrict__ s_hnb, const float* __restrict__ w,
                                const bool* __restrict__ reset, float* dh0, float* dxs,
                                float* d_rec, int T, int B, int H, int rows_per_block) {
  extern __shared__ float sm[];
  float* wt = sm;                  // [3H][H]: w transposed
  float* drec = wt + 3 * H * H;    // [2][kMaxRows][3H]
  const int i = threadIdx.x;
  const int row0 = blockIdx.x * rows_per_block;
  const int rows = min(rows_per_block, B - row0);
  for (int e = i; e < 3 * H * H; e += blockDim.x) {
    const int k = e / (3 * H), j = e % (3 * H);
    wt[j * H + k] = w[e];
  }
  float dh[kMaxRows];
  for (int b = 0; b < rows; ++b) dh[b] = d_ht[(row0 + b) * H + i];
  __syncthreads();
  for (int t = T - 1; t >= 0; --t) {
    float* dr = drec + (t & 1) * kMaxRows * 3 * H;
    const int64_t o = static_cast<int64_t>(t) * B + row0;
    for (int b = 0; b < rows; ++b) dh[b] += d_ys[(o + b) * H + i];
    gru_scan::backward_gates(i, rows, H, dh, s_hin + o * H, s_r + o * H, s_z + o * H,
                             s_n + o * H, s_hnb + o * H, dxs + o * 3 * H, d_rec + o * 3 * H, dr);
    __syncthreads();  // d_rec of every unit is in dr
    gru_scan::backward_carry(i, rows, H, dh, s_z + o * H, dr, wt, reset + o);
  }
  for (int b = 0; b < rows; ++b) dh0[(row0 + b) * H + i] = dh[b];
}

int rows_per_block(int B) {
  static int sms = [] {
    int device = 0, n = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device);
    return n > 0 ? n : 1;
  }();
  const int r = (B + sms - 1) / sms;
  return r < 1 ? 1 : r > kMaxRows ? kMaxRows : r;
}

::xla::ffi::Error check(int H, size_t smem) {
  if (H > 1024 || smem > 227 * 1024) {
    return ::xla::ffi::Error::InvalidArgument(
        "gru_scan: the recurrent kernels must fit shared memory (H <= 128)");
  }
  return ::xla::ffi::Error::Success();
}

::xla::ffi::Error Forward(cudaStream_t stream, GRU_FWD_PARAMS) {
  const auto d = xs.dimensions();
  const int T = static_cast<int>(d[0]), B = static_cast<int>(d[1]);
  const int H = static_cast<int>(d[2] / 3);
  const size_t smem = (3 * H * H + 2 * kMaxRows * H) * sizeof(float);
  if (auto e = check(H, smem); e.failure()) return e;
  cudaFuncSetAttribute(forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(smem));
  const int r = rows_per_block(B);
  forward_kernel<<<(B + r - 1) / r, H, smem, stream>>>(
      xs.typed_data(), w.typed_data(), b_hn.typed_data(), h0.typed_data(), reset.typed_data(),
      h_t->typed_data(), ys->typed_data(), s_hin->typed_data(), s_r->typed_data(),
      s_z->typed_data(), s_n->typed_data(), s_hnb->typed_data(), T, B, H, r);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return ::xla::ffi::Error::Internal(cudaGetErrorString(err));
  return ::xla::ffi::Error::Success();
}

::xla::ffi::Error Backward(cudaStream_t stream, GRU_BWD_PARAMS) {
  const auto d = d_ys.dimensions();
  const int T = static_cast<int>(d[0]), B = static_cast<int>(d[1]), H = static_cast<int>(d[2]);
  const size_t smem = (3 * H * H + 2 * kMaxRows * 3 * H) * sizeof(float);
  if (auto e = check(H, smem); e.failure()) return e;
  cudaFuncSetAttribute(backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(smem));
  const int r = rows_per_block(B);
  backward_kernel<<<(B + r - 1) / r, H, smem, stream>>>(
      d_ht.typed_data(), d_ys.typed_data(), s_hin.typed_data(), s_r.typed_data(),
      s_z.typed_data(), s_n.typed_data(), s_hnb.typed_data(), w.typed_data(),
      reset.typed_data(), dh0->typed_data(), dxs->typed_data(), d_rec->typed_data(), T, B, H,
      r);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return ::xla::ffi::Error::Internal(cudaGetErrorString(err));
  return ::xla::ffi::Error::Success();
}

}  // namespace

#define GRU_STREAM .Ctx<::xla::ffi::PlatformStream<cudaStream_t>>()
GRU_BIND_FORWARD(GruScanForward, Forward, GRU_STREAM);
GRU_BIND_BACKWARD(GruScanBackward, Backward, GRU_STREAM);
