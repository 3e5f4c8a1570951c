// gru_scan.h's handlers on CUDA with the step's matmul on tensor cores
// (mma.sync m16n8k8, TF32 inputs, f32 accumulation: what XLA:GPU's default
// precision does for a float32 dot): one launch for the whole forward scan and
// one for the backward, each block owning 16 batch rows (one MMA row tile)
// through all T steps, the recurrent kernels resident in shared memory.
//
// Block = H / 32 warps (H = 128: 4). Warp w owns hidden units [32w, 32w + 32):
// in the forward it computes the gates r, z, n of those units (3 gates x 4
// column tiles of 8), so each thread's accumulators hold r, z and n of the same
// (row, unit) positions and the cell's elementwise maths needs no exchange; in
// the backward it computes the carry's gradient of those units from every
// unit's gate gradients (K = 3H). Positions a thread holds (MMA C layout):
// rows g and g + 8 (g = lane / 4), units 32w + 8j + 2(lane % 4) + {0, 1},
// j = 0..3. The carry (forward, f32, double buffered) and the gate gradients
// (backward) go through shared memory; the carry itself stays float32, only
// the MMA's inputs are rounded to TF32.
#include <cuda_runtime.h>

#include <cstdint>

#include "gru_scan.h"
#include "gru_scan_ffi.h"
#include "xla/ffi/api/ffi.h"

namespace {

constexpr int kRows = 16;  // rows per block: one m16 tile

__device__ __forceinline__ uint32_t tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ void mma(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                    uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Strides (words) padded so that a warp's fragment loads hit 32 banks.
__host__ __device__ constexpr int w_stride(int H) { return 3 * H + 8; }
__host__ __device__ constexpr int h_stride(int H) { return H + 4; }
__host__ __device__ constexpr int d_stride(int H) { return 3 * H + 4; }

// The recurrent kernels w [H][3H] into shared memory as TF32 words.
__device__ void load_w(const float* __restrict__ w, uint32_t* ws, int H) {
  for (int e = threadIdx.x; e < 3 * H * H; e += blockDim.x) {
    const int k = e / (3 * H), j = e % (3 * H);
    ws[k * w_stride(H) + j] = tf32(w[e]);
  }
}

// Position p (0..15) of a thread's accumulator tile j: (row, unit).
__device__ __forceinline__ void position(int H, int j, int p, int* row, int* unit) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  *row = (lane >> 2) + ((p & 2) ? 8 : 0);
  *unit = 32 * warp + 8 * j + 2 * (lane & 3) + (p & 1);
}

// f(j, p, row, unit) for each of the thread's 16 positions (j and p unrolled,
// so that arrays indexed by them stay in registers).
template <class F>
__device__ __forceinline__ void each_position(int H, F f) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      int b, u;
      position(H, j, p, &b, &u);
      f(j, p, b, u);
    }
  }
}

// acc[gate][j][4] += h [16][H] @ w[:, gate * H + 32 warp + 8 j + (0..7)].
__device__ void forward_mma(const float* h, const uint32_t* ws, int H, float acc[3][4][4]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, q = lane & 3;
  const int hs = h_stride(H), ws_ = w_stride(H);
  for (int kk = 0; kk < H; kk += 8) {
    const uint32_t a0 = tf32(h[g * hs + kk + q]), a1 = tf32(h[(g + 8) * hs + kk + q]);
    const uint32_t a2 = tf32(h[g * hs + kk + q + 4]), a3 = tf32(h[(g + 8) * hs + kk + q + 4]);
#pragma unroll
    for (int gate = 0; gate < 3; ++gate) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int n = gate * H + 32 * warp + 8 * j + g;
        mma(acc[gate][j], a0, a1, a2, a3, ws[(kk + q) * ws_ + n], ws[(kk + q + 4) * ws_ + n]);
      }
    }
  }
}

__global__ void forward_kernel(const float* __restrict__ xs, const float* __restrict__ w,
                               const float* __restrict__ b_hn, const float* __restrict__ h0,
                               const bool* __restrict__ reset, float* __restrict__ h_t,
                               float* __restrict__ ys, float* __restrict__ s_hin,
                               float* __restrict__ s_r, float* __restrict__ s_z,
                               float* __restrict__ s_n, float* __restrict__ s_hnb, int T, int B,
                               int H) {
  extern __shared__ uint32_t sm[];
  uint32_t* ws = sm;                                             // [H][w_stride]
  float* hb = reinterpret_cast<float*>(ws + H * w_stride(H));    // [2][16][h_stride]
  const int hs = h_stride(H), row0 = blockIdx.x * kRows;
  load_w(w, ws, H);
  for (int e = threadIdx.x; e < kRows * H; e += blockDim.x) {
    const int b = e / H, u = e % H, row = row0 + b;
    hb[b * hs + u] = (row < B && !reset[row]) ? h0[static_cast<int64_t>(row) * H + u] : 0.f;
  }
  float bias[4][4];
  each_position(H, [&](int j, int p, int b, int u) {
    bias[j][p] = b_hn[u];
  });
  __syncthreads();
  for (int t = 0; t < T; ++t) {
    const float* hin = hb + (t & 1) * kRows * hs;
    float* nxt = hb + (1 - (t & 1)) * kRows * hs;
    // This step's input projections first: their loads overlap the MMA.
    float x[3][4][4];
    each_position(H, [&](int j, int p, int b, int u) {
      const float* xp = xs + (static_cast<int64_t>(t) * B + min(row0 + b, B - 1)) * 3 * H;
      x[0][j][p] = xp[u];
      x[1][j][p] = xp[H + u];
      x[2][j][p] = xp[2 * H + u];
    });
    float acc[3][4][4] = {};
    forward_mma(hin, ws, H, acc);
    each_position(H, [&](int j, int p, int b, int u) {
      const int row = row0 + b;
      const float h_in = hin[b * hs + u];
      float r, z, n, hnb;
      const float h = gru_scan::cell(x[0][j][p], x[1][j][p], x[2][j][p], acc[0][j][p],
                                     acc[1][j][p], acc[2][j][p], bias[j][p], h_in, &r, &z, &n,
                                     &hnb);
      const bool rs = row < B && t + 1 < T && reset[(t + 1) * static_cast<int64_t>(B) + row];
      nxt[b * hs + u] = (row >= B || rs) ? 0.f : h;
      if (row >= B) return;
      const int64_t o = (static_cast<int64_t>(t) * B + row) * H + u;
      ys[o] = h;
      s_hin[o] = h_in;
      s_r[o] = r;
      s_z[o] = z;
      s_n[o] = n;
      s_hnb[o] = hnb;
      if (t == T - 1) h_t[static_cast<int64_t>(row) * H + u] = h;
    });
    __syncthreads();  // every warp has read hin before it is written again
  }
}

// acc[j][4] = drec [16][3H] @ w^T[:, 32 warp + 8 j + (0..7)] (K = 3H).
__device__ void backward_mma(const float* drec, const uint32_t* ws, int H, float acc[4][4]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, q = lane & 3;
  const int ds = d_stride(H), ws_ = w_stride(H);
  for (int kk = 0; kk < 3 * H; kk += 8) {
    const uint32_t a0 = tf32(drec[g * ds + kk + q]), a1 = tf32(drec[(g + 8) * ds + kk + q]);
    const uint32_t a2 = tf32(drec[g * ds + kk + q + 4]);
    const uint32_t a3 = tf32(drec[(g + 8) * ds + kk + q + 4]);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = 32 * warp + 8 * j + g;  // B[k][n] = w[n][k]
      mma(acc[j], a0, a1, a2, a3, ws[i * ws_ + kk + q], ws[i * ws_ + kk + q + 4]);
    }
  }
}

__global__ void backward_kernel(const float* __restrict__ d_ht, const float* __restrict__ d_ys,
                                const float* __restrict__ s_hin, const float* __restrict__ s_r,
                                const float* __restrict__ s_z, const float* __restrict__ s_n,
                                const float* __restrict__ s_hnb, const float* __restrict__ w,
                                const bool* __restrict__ reset, float* __restrict__ dh0,
                                float* __restrict__ dxs, float* __restrict__ d_rec, int T, int B,
                                int H) {
  extern __shared__ uint32_t sm[];
  uint32_t* ws = sm;                                            // [H][w_stride]
  float* drec = reinterpret_cast<float*>(ws + H * w_stride(H)); // [16][d_stride]
  const int ds = d_stride(H), row0 = blockIdx.x * kRows;
  load_w(w, ws, H);
  float dh[4][4];
  each_position(H, [&](int j, int p, int b, int u) {
    dh[j][p] = row0 + b < B ? d_ht[static_cast<int64_t>(row0 + b) * H + u] : 0.f;
  });
  __syncthreads();
  for (int t = T - 1; t >= 0; --t) {
    // This step's saved values first, all loads in flight together.
    float sv[6][4][4];
    each_position(H, [&](int j, int p, int b, int u) {
      const int64_t o = (static_cast<int64_t>(t) * B + min(row0 + b, B - 1)) * H + u;
      sv[0][j][p] = d_ys[o];
      sv[1][j][p] = s_r[o];
      sv[2][j][p] = s_z[o];
      sv[3][j][p] = s_n[o];
      sv[4][j][p] = s_hin[o];
      sv[5][j][p] = s_hnb[o];
    });
    each_position(H, [&](int j, int p, int b, int u) {
      const int row = row0 + b;
      float* d = drec + b * ds;
      const bool in = row < B;
      const float g = in ? dh[j][p] + sv[0][j][p] : 0.f;
      dh[j][p] = g;
      const float r = sv[1][j][p], z = sv[2][j][p], n = sv[3][j][p];
      const float dn = g * (1.f - z) * (1.f - n * n);
      const float dz = g * (sv[4][j][p] - n) * z * (1.f - z);
      const float dr = dn * sv[5][j][p] * r * (1.f - r);
      d[u] = dr;
      d[H + u] = dz;
      d[2 * H + u] = dn * r;
      if (!in) return;
      const int64_t o3 = (static_cast<int64_t>(t) * B + row) * 3 * H;
      dxs[o3 + u] = dr;
      dxs[o3 + H + u] = dz;
      dxs[o3 + 2 * H + u] = dn;
      d_rec[o3 + u] = dr;
      d_rec[o3 + H + u] = dz;
      d_rec[o3 + 2 * H + u] = dn * r;
    });
    __syncthreads();  // every unit's gate gradients are in drec
    float acc[4][4] = {};
    backward_mma(drec, ws, H, acc);
    __syncthreads();  // every warp has read drec before the next step writes it
    each_position(H, [&](int j, int p, int b, int u) {
      const int row = row0 + b;
      const float d = dh[j][p] * sv[2][j][p] + acc[j][p];
      dh[j][p] = (row < B && !reset[static_cast<int64_t>(t) * B + row]) ? d : 0.f;
    });
  }
  each_position(H, [&](int j, int p, int b, int u) {
    if (row0 + b < B) dh0[static_cast<int64_t>(row0 + b) * H + u] = dh[j][p];
  });
}

::xla::ffi::Error check(int H, size_t smem) {
  if (H % 32 != 0 || H > 1024 || smem > 227 * 1024) {
    return ::xla::ffi::Error::InvalidArgument(
        "gru_scan (mma): H must be a multiple of 32 whose kernels fit shared memory (H <= 128)");
  }
  return ::xla::ffi::Error::Success();
}

::xla::ffi::Error launched() {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return ::xla::ffi::Error::Internal(cudaGetErrorString(err));
  return ::xla::ffi::Error::Success();
}

::xla::ffi::Error Forward(cudaStream_t stream, GRU_FWD_PARAMS) {
  const auto d = xs.dimensions();
  const int T = static_cast<int>(d[0]), B = static_cast<int>(d[1]);
  const int H = static_cast<int>(d[2] / 3);
  const size_t smem = (H * w_stride(H) + 2 * kRows * h_stride(H)) * 4;
  if (auto e = check(H, smem); e.failure()) return e;
  cudaFuncSetAttribute(forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(smem));
  forward_kernel<<<(B + kRows - 1) / kRows, H, smem, stream>>>(
      xs.typed_data(), w.typed_data(), b_hn.typed_data(), h0.typed_data(), reset.typed_data(),
      h_t->typed_data(), ys->typed_data(), s_hin->typed_data(), s_r->typed_data(),
      s_z->typed_data(), s_n->typed_data(), s_hnb->typed_data(), T, B, H);
  return launched();
}

::xla::ffi::Error Backward(cudaStream_t stream, GRU_BWD_PARAMS) {
  const auto d = d_ys.dimensions();
  const int T = static_cast<int>(d[0]), B = static_cast<int>(d[1]), H = static_cast<int>(d[2]);
  const size_t smem = (H * w_stride(H) + kRows * d_stride(H)) * 4;
  if (auto e = check(H, smem); e.failure()) return e;
  cudaFuncSetAttribute(backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(smem));
  backward_kernel<<<(B + kRows - 1) / kRows, H, smem, stream>>>(
      d_ht.typed_data(), d_ys.typed_data(), s_hin.typed_data(), s_r.typed_data(),
      s_z.typed_data(), s_n.typed_data(), s_hnb.typed_data(), w.typed_data(),
      reset.typed_data(), dh0->typed_data(), dxs->typed_data(), d_rec->typed_data(), T, B, H);
  return launched();
}

}  // namespace

#define GRU_STREAM .Ctx<::xla::ffi::PlatformStream<cudaStream_t>>()
GRU_BIND_FORWARD(GruScanForward, Forward, GRU_STREAM);
GRU_BIND_BACKWARD(GruScanBackward, Backward, GRU_STREAM);

#ifdef GRU_SCAN_MAIN
// A driver without jax, for ncu and compute-sanitizer (which do not run under
// jax here): random inputs of [T, B, H], each kernel launched `reps` times,
// its mean time a launch and a step; exit status 1 on a CUDA error.
//   nvcc -O3 -std=c++17 -arch=sm_90a -DGRU_SCAN_MAIN -I $(python -c "import jax;
//     print(jax.ffi.include_dir())") -I experiments/kernels -o gru_mma
//     experiments/kernels/gru_scan_mma.cu && ./gru_mma 128 24 128 20
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

float* device_random(size_t n, uint32_t seed, float scale) {
  std::vector<float> h(n);
  for (auto& v : h) {
    seed = seed * 1664525u + 1013904223u;
    v = scale * (static_cast<float>(seed >> 8) / 16777216.0f - 0.5f);
  }
  float* d = nullptr;
  cudaMalloc(&d, n * sizeof(float));
  cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  return d;
}

float* device_zeros(size_t n) {
  float* d = nullptr;
  cudaMalloc(&d, n * sizeof(float));
  cudaMemset(d, 0, n * sizeof(float));
  return d;
}

template <class F>
float time_ms(F launch, int reps) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  launch();  // warm-up
  cudaEventRecord(a);
  for (int i = 0; i < reps; ++i) launch();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0.f;
  cudaEventElapsedTime(&ms, a, b);
  return ms / reps;
}

}  // namespace

int main(int argc, char** argv) {
  const int T = argc > 1 ? atoi(argv[1]) : 128, B = argc > 2 ? atoi(argv[2]) : 24;
  const int H = argc > 3 ? atoi(argv[3]) : 128, reps = argc > 4 ? atoi(argv[4]) : 20;
  const size_t tbh = static_cast<size_t>(T) * B * H, bh = static_cast<size_t>(B) * H;
  float* xs = device_random(3 * tbh, 1, 2.f);
  float* w = device_random(3 * static_cast<size_t>(H) * H, 2, 0.2f);
  float* b_hn = device_random(H, 3, 0.2f);
  float* h0 = device_random(bh, 4, 1.f);
  bool* reset = nullptr;  // a reset every 13th step of every row
  std::vector<char> r(static_cast<size_t>(T) * B);
  for (size_t i = 0; i < r.size(); ++i) r[i] = (i / B) % 13 == 5;
  cudaMalloc(&reset, r.size());
  cudaMemcpy(reset, r.data(), r.size(), cudaMemcpyHostToDevice);
  float *h_t = device_zeros(bh), *ys = device_zeros(tbh), *s[5];
  for (auto& p : s) p = device_zeros(tbh);
  float *d_ht = device_random(bh, 5, 1.f), *d_ys = device_random(tbh, 6, 1.f);
  float *dh0 = device_zeros(bh), *dxs = device_zeros(3 * tbh), *d_rec = device_zeros(3 * tbh);
  const size_t fsm = (H * w_stride(H) + 2 * kRows * h_stride(H)) * 4;
  const size_t bsm = (H * w_stride(H) + kRows * d_stride(H)) * 4;
  cudaFuncSetAttribute(forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(fsm));
  cudaFuncSetAttribute(backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(bsm));
  const int blocks = (B + kRows - 1) / kRows;
  const float f = time_ms([&] {
    forward_kernel<<<blocks, H, fsm>>>(xs, w, b_hn, h0, reset, h_t, ys, s[0], s[1], s[2], s[3],
                                       s[4], T, B, H);
  }, reps);
  const float g = time_ms([&] {
    backward_kernel<<<blocks, H, bsm>>>(d_ht, d_ys, s[0], s[1], s[2], s[3], s[4], w, reset, dh0,
                                        dxs, d_rec, T, B, H);
  }, reps);
  const cudaError_t err = cudaDeviceSynchronize();
  std::printf("T=%d B=%d H=%d: forward %.3f ms (%.2f us a step), backward %.3f ms (%.2f us a "
              "step): %s\n", T, B, H, f, 1e3f * f / T, g, 1e3f * g / T, cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}
#endif  // GRU_SCAN_MAIN
