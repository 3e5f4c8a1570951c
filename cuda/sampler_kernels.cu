// Categorical sampler CUDA kernel. A block takes a tile of consecutive rows;
// since rows are contiguous, the tile is one contiguous span of logits that
// the block copies to shared memory with coalesced loads (row stride padded
// to an odd number of floats, so threads reading different rows hit
// different banks). Each (row, head) pair is then sampled by a group of G
// lanes (G a power of two, about n/4 elements per lane) that split the head's
// elements and merge with warp shuffles; per-head log-probabilities are
// summed per row in head order. Heads of more than 64 choices use whole warps
// reading global memory directly (already coalesced), without the tile.
// Random bits depend only on (member key, head, local row, element), never on
// the launch configuration. See cuda/README.md.
#include <cuda_runtime.h>

#include "sampler_kernels.h"

namespace jaxwarp {
namespace sampler {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxTileRows = 256;
// 24 KiB of logits per block: 8 blocks of 256 threads fit on an SM.
constexpr int kTileFloats = 6144;

template <int G>
__global__ void __launch_bounds__(kThreads)
    SampleKernel(SamplerParams p, SamplerBuffers b, int tile_rows, int stride, bool tiled) {
  extern __shared__ float smem[];
  float* tile = smem;                                          // [tile_rows, stride]
  float* terms = smem + (tiled ? tile_rows * stride : 0);      // [tile_rows, H]
  const int num_heads = p.num_heads;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * tile_rows;
  const int64_t left = b.rows - row0;
  const int nrows = left < tile_rows ? static_cast<int>(left) : tile_rows;

  if (tiled) {
    const float* src = b.logits + row0 * p.row_len;
    const int count = nrows * p.row_len;
    for (int i = threadIdx.x; i < count; i += blockDim.x) {
      const int r = i / p.row_len;
      tile[r * stride + (i - r * p.row_len)] = src[i];
    }
    __syncthreads();
  }

  const int group = threadIdx.x / G;
  const int lane = threadIdx.x % G;
  // Lanes of this group only: groups of one warp may run different trip
  // counts of the loop below, but the lanes of one group never do.
  const unsigned mask =
      G == 32 ? 0xffffffffu : ((1u << (G % 32)) - 1u) << ((threadIdx.x % 32) & ~(G - 1));
  const bool partitionable = p.partitionable != 0;
  const int pairs = nrows * num_heads;
  for (int q = group; q < pairs; q += kThreads / G) {
    const int r = q / num_heads;
    const int h = q - r * num_heads;
    const int n = p.nvec[h];
    const int64_t row = row0 + r;
    const float* x = tiled ? tile + r * stride + p.offset[h]
                           : b.logits + row * p.row_len + p.offset[h];
    const int64_t member = row / b.rows_per_member;
    const uint64_t local = static_cast<uint64_t>(row - member * b.rows_per_member);
    const uint32_t k0 = b.keys[2 * (member * num_heads + h)];
    const uint32_t k1 = b.keys[2 * (member * num_heads + h) + 1];
    const uint64_t first = local * static_cast<uint64_t>(n);
    const uint64_t size = static_cast<uint64_t>(b.rows_per_member) * static_cast<uint64_t>(n);

    HeadAcc acc = head_acc_init();
    for (int j = lane; j < n; j += G) {
      const float v = x[j];
      const float g = gumbel_from_bits(categorical_bits(k0, k1, first + j, size, partitionable));
      head_acc_push(acc, v, v + g, j);
    }
    // Butterfly: every lane ends with the merge of the whole group.
#pragma unroll
    for (int off = G / 2; off > 0; off /= 2) {
      HeadAcc o;
      o.max_logit = __shfl_xor_sync(mask, acc.max_logit, off, G);
      o.best = __shfl_xor_sync(mask, acc.best, off, G);
      o.best_i = __shfl_xor_sync(mask, acc.best_i, off, G);
      head_acc_merge(acc, o);
    }
    float sum = 0.0f;
    for (int j = lane; j < n; j += G) sum += expf(x[j] - acc.max_logit);
#pragma unroll
    for (int off = G / 2; off > 0; off /= 2) sum += __shfl_xor_sync(mask, sum, off, G);
    if (lane == 0) {
      b.actions[row * num_heads + h] = acc.best_i;
      terms[r * num_heads + h] = head_log_prob(x[acc.best_i], acc.max_logit, sum);
    }
  }
  __syncthreads();

  // Heads summed in order, as the reference does.
  for (int r = threadIdx.x; r < nrows; r += blockDim.x) {
    float total = terms[r * num_heads];
    for (int h = 1; h < num_heads; ++h) total += terms[r * num_heads + h];
    b.log_prob[row0 + r] = total;
  }
}

template <int G>
cudaError_t Launch(const SamplerParams& p, const SamplerBuffers& b, cudaStream_t stream) {
  const bool tiled = G < 32;
  const int stride = p.row_len | 1;
  int tile_rows;
  if (tiled) {
    // G < 32 means every head has <= 64 choices, so a row (<= 32 * 64
    // floats) always fits the tile.
    tile_rows = kTileFloats / (stride + p.num_heads);
    tile_rows = tile_rows > kMaxTileRows ? kMaxTileRows : (tile_rows < 1 ? 1 : tile_rows);
  } else {
    tile_rows = (kThreads / G) / p.num_heads;
    tile_rows = tile_rows < 1 ? 1 : tile_rows;
  }
  const size_t floats = (tiled ? static_cast<size_t>(tile_rows) * stride : 0) +
                        static_cast<size_t>(tile_rows) * p.num_heads;
  const int64_t blocks = (b.rows + tile_rows - 1) / tile_rows;
  if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  SampleKernel<G><<<static_cast<unsigned>(blocks), kThreads, floats * sizeof(float), stream>>>(
      p, b, tile_rows, stride, tiled);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchSampler(const SamplerParams& p, const SamplerBuffers& b,
                          cudaStream_t stream) {
  if (b.rows == 0) return cudaSuccess;
  int n_max = 1;
  for (int h = 0; h < p.num_heads; ++h) n_max = p.nvec[h] > n_max ? p.nvec[h] : n_max;
  // About four elements per lane; whole warps above 64 choices.
  int g = 1;
  while (g < 32 && 4 * g < n_max) g *= 2;
  switch (g) {
    case 1: return Launch<1>(p, b, stream);
    case 2: return Launch<2>(p, b, stream);
    case 4: return Launch<4>(p, b, stream);
    case 8: return Launch<8>(p, b, stream);
    case 16: return Launch<16>(p, b, stream);
    default: return Launch<32>(p, b, stream);
  }
}

}  // namespace sampler
}  // namespace jaxwarp
