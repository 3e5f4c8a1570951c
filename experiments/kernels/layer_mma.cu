// One dense layer y = act(x @ w + b) on tensor cores with mma.sync (sm_80+),
// for experiments/bench_layer.py: the question it answers is whether a kernel
// of our own matches cuBLAS on the learner's shapes (many rows, K and N of
// 64-256) before any fused multi-layer kernel is written on top of it.
//
// x bf16[M, K] row-major, wt bf16[N, K] (the weights transposed, so that the
// B operand's k-pairs are contiguous), b f32[N] -> y bf16[M, N]. K % 64 == 0,
// N in {64, 128, 256}. A block owns 128 rows and all N columns; its 8 warps
// own 16 rows each and keep N/8 accumulator tiles (m16n8, f32) in registers;
// K is walked in chunks of 64 staged in shared memory (16-byte loads, rows
// padded by 8 elements so that the fragment loads hit 32 distinct banks).
// The epilogue adds the bias, applies the activation and stores bf16 pairs.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int kRows = 128;             // rows per block
constexpr int kWarps = kRows / 16;     // one m16 strip per warp
constexpr int kChunk = 64;             // K per shared-memory stage
constexpr int kPad = kChunk + 8;       // padded row length in shared memory (elements)

__device__ __forceinline__ uint32_t ld32(const __nv_bfloat16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

__device__ __forceinline__ void mma_bf16(float* c, uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// rows x kChunk elements of src (row stride `stride` elements, rows past
// `valid` read as zeros) into dst (row stride kPad), 16 bytes a thread a step.
__device__ __forceinline__ void stage(__nv_bfloat16* dst, const __nv_bfloat16* src, int rows,
                                      int valid, int64_t stride) {
  constexpr int kVec = 8;  // bf16 per 16-byte load
  for (int i = threadIdx.x; i < rows * (kChunk / kVec); i += blockDim.x) {
    const int r = i / (kChunk / kVec), c = (i % (kChunk / kVec)) * kVec;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < valid) v = *reinterpret_cast<const uint4*>(src + r * stride + c);
    *reinterpret_cast<uint4*>(dst + r * kPad + c) = v;
  }
}

__device__ __forceinline__ float activate(float v, int act) {
  return act == 1 ? fmaxf(v, 0.f) : act == 2 ? tanhf(v) : v;
}

template <int N>
__global__ void __launch_bounds__(kWarps * 32)
    layer_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ wt,
                 const float* __restrict__ b, __nv_bfloat16* __restrict__ y, int64_t m, int k,
                 int act) {
  constexpr int kTiles = N / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(smem);  // [kRows][kPad]
  __nv_bfloat16* ws = xs + kRows * kPad;                        // [N][kPad]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t2 = (lane % 4) * 2;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int valid = static_cast<int>(m - row0 < kRows ? m - row0 : kRows);

  float acc[kTiles][4];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;

  for (int k0 = 0; k0 < k; k0 += kChunk) {
    __syncthreads();  // the last chunk's fragments are read
    stage(xs, x + row0 * k + k0, kRows, valid, k);
    stage(ws, wt + k0, N, N, k);
    __syncthreads();
    const __nv_bfloat16* xa = xs + (warp * 16 + g) * kPad + t2;
#pragma unroll
    for (int kk = 0; kk < kChunk; kk += 16) {
      const uint32_t a0 = ld32(xa + kk), a1 = ld32(xa + 8 * kPad + kk);
      const uint32_t a2 = ld32(xa + kk + 8), a3 = ld32(xa + 8 * kPad + kk + 8);
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        const __nv_bfloat16* wb = ws + (j * 8 + g) * kPad + t2 + kk;
        mma_bf16(acc[j], a0, a1, a2, a3, ld32(wb), ld32(wb + 8));
      }
    }
  }
  // Epilogue: accumulator (row g / g+8, columns t2, t2+1 of tile j).
  const int64_t r = row0 + warp * 16 + g;
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    const int col = j * 8 + t2;
    const float b0 = b[col], b1 = b[col + 1];
    if (r < m) {
      *reinterpret_cast<__nv_bfloat162*>(y + r * N + col) = __floats2bfloat162_rn(
          activate(acc[j][0] + b0, act), activate(acc[j][1] + b1, act));
    }
    if (r + 8 < m) {
      *reinterpret_cast<__nv_bfloat162*>(y + (r + 8) * N + col) = __floats2bfloat162_rn(
          activate(acc[j][2] + b0, act), activate(acc[j][3] + b1, act));
    }
  }
}

template <int N>
cudaError_t launch(cudaStream_t stream, const __nv_bfloat16* x, const __nv_bfloat16* wt,
                   const float* b, __nv_bfloat16* y, int64_t m, int k, int act) {
  const size_t smem = static_cast<size_t>(kRows + N) * kPad * sizeof(__nv_bfloat16);
  cudaError_t err = cudaFuncSetAttribute(layer_kernel<N>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  const int64_t blocks = (m + kRows - 1) / kRows;
  layer_kernel<N><<<static_cast<unsigned>(blocks), kWarps * 32, smem, stream>>>(
      x, wt, b, y, m, k, act);
  return cudaGetLastError();
}

ffi::Error LayerImpl(cudaStream_t stream, ffi::Buffer<ffi::BF16> x, ffi::Buffer<ffi::BF16> wt,
                     ffi::Buffer<ffi::F32> b, ffi::ResultBuffer<ffi::BF16> y, int32_t act) {
  const auto xd = x.dimensions(), wd = wt.dimensions();
  if (xd.size() != 2 || wd.size() != 2 || xd[1] != wd[1]) {
    return ffi::Error::InvalidArgument("layer_mma: x [M, K] and wt [N, K] expected");
  }
  const int64_t m = xd[0];
  const int k = static_cast<int>(xd[1]), n = static_cast<int>(wd[0]);
  if (k % kChunk != 0) {
    return ffi::Error::InvalidArgument("layer_mma: K must be a multiple of 64");
  }
  auto* xp = reinterpret_cast<const __nv_bfloat16*>(x.typed_data());
  auto* wp = reinterpret_cast<const __nv_bfloat16*>(wt.typed_data());
  auto* yp = reinterpret_cast<__nv_bfloat16*>(y->typed_data());
  cudaError_t err;
  switch (n) {
    case 64: err = launch<64>(stream, xp, wp, b.typed_data(), yp, m, k, act); break;
    case 128: err = launch<128>(stream, xp, wp, b.typed_data(), yp, m, k, act); break;
    case 256: err = launch<256>(stream, xp, wp, b.typed_data(), yp, m, k, act); break;
    default: return ffi::Error::InvalidArgument("layer_mma: N must be 64, 128 or 256");
  }
  if (err != cudaSuccess) return ffi::Error::Internal(cudaGetErrorString(err));
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(LayerMma, LayerImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::Buffer<ffi::BF16>>()  // x [M, K]
                                  .Arg<ffi::Buffer<ffi::BF16>>()  // wt [N, K]
                                  .Arg<ffi::Buffer<ffi::F32>>()   // b [N]
                                  .Ret<ffi::Buffer<ffi::BF16>>()  // y [M, N]
                                  .Attr<int32_t>("act"));         // 0 none, 1 relu, 2 tanh
