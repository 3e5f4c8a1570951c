// Categorical sampler CUDA kernels (see cuda/README.md: Action sampler).
//
// Heads of at most 64 choices (`SampleRowsKernel<G>`): a block takes a tile
// of consecutive rows, copies that contiguous span of logits to shared memory
// with coalesced loads (row stride padded to an odd number of floats, so the
// 32 lanes of a warp, which hold 32 consecutive rows of one head, read 32
// different banks), and gives each (row, head) pair to ONE thread that runs
// the head's elements in order, as the CPU handler does: Threefry, Gumbel,
// running max and first-maximum argmax, then the exp-sum. No shuffles, no
// per-lane redundancy, one set of index/key work per pair; independent
// elements give the thread ILP. The exp-sum keeps the association of the
// previous kernel, which split a head over G lanes (G = smallest power of two
// >= max(nvec) / 4): partial sums over elements j = l, l + G, ... per lane
// l, then a butterfly (xor G/2, ..., 1). So log_prob is bit-identical to that
// kernel's; actions are order-independent anyway. Actions and per-head
// log-probabilities are staged in shared memory and written out coalesced.
//
// Heads of more than 64 choices (`SampleWarpKernel`): a warp per (row, head)
// reading global memory directly (already coalesced), merging with shuffles.
//
// Random bits depend only on (member key, head, global row, element), never on
// the launch configuration: the global row is the call's row within its member
// plus the member's row offset (a device's block of a sharded batch).
#include <cuda_runtime.h>

#include "sampler_kernels.h"

namespace jaxwarp {
namespace sampler {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxTileRows = 256;
// About 24 KiB of shared memory per block: 8 blocks of 256 threads per SM.
constexpr int kTileFloats = 6144;

// Member of `row` under vmap (a 64-bit division only when there are members).
__device__ __forceinline__ int64_t member_of(int64_t row, const SamplerBuffers& b) {
  return b.rows_per_member == b.rows ? 0 : row / b.rows_per_member;
}

// Where (row, head h of n choices) draws: the head's key of the row's vmap
// member, the row's first counter in the member's whole draw (global under
// sharding) and the draw's size.
struct HeadDraw {
  uint32_t k0, k1;
  uint64_t first, size;
};
__device__ __forceinline__ HeadDraw head_draw(int64_t row, int h, int n, int num_heads,
                                              const SamplerBuffers& b) {
  const int64_t member = member_of(row, b);
  const uint64_t local = static_cast<uint64_t>(row - member * b.rows_per_member) +
                         __ldg(b.row_offsets + member);
  return HeadDraw{__ldg(b.keys + 2 * (member * num_heads + h)),
                  __ldg(b.keys + 2 * (member * num_heads + h) + 1),
                  local * static_cast<uint64_t>(n),
                  static_cast<uint64_t>(b.draw_rows) * static_cast<uint64_t>(n)};
}

// Lane 0's value after butterfly rounds xor OFF, OFF / 2, ..., 1 of
// `sum += shfl_xor(sum, off)`: s[l] + s[l + off] for the lanes l < off that
// lane 0 still depends on.
template <int OFF>
__device__ __forceinline__ void butterfly_to_lane0(float* s) {
  if constexpr (OFF > 0) {
#pragma unroll
    for (int l = 0; l < OFF; ++l) s[l] = s[l] + s[l + OFF];
    butterfly_to_lane0<OFF / 2>(s);
  }
}

// The whole (row, head) pair in one thread. x: the head's n logits (shared
// memory); returns the action, writes log_softmax(x)[action] to *log_prob.
template <int G>
__device__ __forceinline__ int32_t sample_pair(const float* x, int n, uint32_t k0, uint32_t k1,
                                               uint64_t first, uint64_t size,
                                               bool partitionable, float* log_prob) {
  // Running max (NaN-propagating) and first-maximum argmax of the perturbed
  // logits, elements in increasing j: the same total order as head_acc_push,
  // specialised to j > best_i (a tie keeps the earlier element; the first
  // NaN wins and stays).
  float max_logit = -INFINITY, best = -INFINITY;
  int32_t best_i = 0;
  auto push = [&](int j, uint32_t bits) {
    const float v = x[j];
    const float p = v + gumbel_from_bits(bits);
    max_logit = nan_max(max_logit, v);
    const bool take = j == 0 || (!isnan(best) && (isnan(p) || p > best));
    best = take ? p : best;
    best_i = take ? j : best_i;
  };
  const uint32_t lo = static_cast<uint32_t>(first);
  if (partitionable && static_cast<uint64_t>(lo) + static_cast<uint64_t>(n) <= 0x100000000ull) {
    // The 64-bit counter's high word is the same for all of this pair's elements.
    const uint32_t hi = static_cast<uint32_t>(first >> 32);
#pragma unroll 4
    for (int j = 0; j < n; ++j) {
      const U32x2 r = threefry2x32(k0, k1, hi, lo + static_cast<uint32_t>(j));
      push(j, r.a ^ r.b);
    }
  } else {
    for (int j = 0; j < n; ++j) push(j, categorical_bits(k0, k1, first + j, size, partitionable));
  }
  // Exp-sum with the G-lane association (see the file comment).
  float s[G];
#pragma unroll
  for (int l = 0; l < G; ++l) s[l] = 0.0f;
  // n <= 4 * G (the launcher picks G so), so each lane had at most 4
  // elements; fully unrolled, s[] stays in registers.
#pragma unroll
  for (int k = 0; k < 4; ++k) {
#pragma unroll
    for (int l = 0; l < G; ++l) {
      const int j = k * G + l;
      if (j < n) s[l] += expf(x[j] - max_logit);
    }
  }
  butterfly_to_lane0<G / 2>(s);
  *log_prob = head_log_prob(x[best_i], max_logit, s[0]);
  return best_i;
}

// Heads of <= 64 choices. tile_rows: a power of two; the block's pairs are
// numbered q = h * tile_rows + r, so a warp holds consecutive rows of one head.
// 8 blocks per SM (32 registers): full occupancy hides the Threefry/logf
// latency across warps.
template <int G>
__global__ void __launch_bounds__(kThreads, 8)
    SampleRowsKernel(SamplerParams p, SamplerBuffers b, int tile_rows, int log2_rows,
                     int stride, float inv_row_len) {
  extern __shared__ float smem[];
  const int num_heads = p.num_heads;
  const int row_len = p.row_len;
  float* tile = smem;                                                    // [tile_rows, stride]
  float* terms = tile + tile_rows * stride;                              // [tile_rows, H]
  int32_t* acts = reinterpret_cast<int32_t*>(terms + tile_rows * num_heads);  // [tile_rows, H]
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * tile_rows;
  const int64_t left = b.rows - row0;
  const int nrows = left < tile_rows ? static_cast<int>(left) : tile_rows;

  {
    // Coalesced copy of the span; i / row_len by a float estimate and one
    // correction (exact: i < 2^14, so the estimate is off by at most one).
    const float* src = b.logits + row0 * row_len;
    const int count = nrows * row_len;
    for (int i = threadIdx.x; i < count; i += kThreads) {
      int r = __float2int_rz(__int2float_rn(i) * inv_row_len);
      int c = i - r * row_len;
      if (c < 0) {
        --r;
        c += row_len;
      } else if (c >= row_len) {
        ++r;
        c -= row_len;
      }
      tile[r * stride + c] = __ldg(src + i);
    }
  }
  __syncthreads();

  const bool partitionable = p.partitionable != 0;
  const int pairs = num_heads << log2_rows;
  for (int q = threadIdx.x; q < pairs; q += kThreads) {
    const int h = q >> log2_rows;
    const int r = q & (tile_rows - 1);
    if (r >= nrows) continue;
    const int n = p.nvec[h];
    const HeadDraw d = head_draw(row0 + r, h, n, num_heads, b);
    float lp;
    acts[r * num_heads + h] = sample_pair<G>(tile + r * stride + p.offset[h], n, d.k0, d.k1,
                                             d.first, d.size, partitionable, &lp);
    terms[r * num_heads + h] = lp;
  }
  __syncthreads();

  // Actions out coalesced ([rows, H] is contiguous); heads summed in order.
  const int count = nrows * num_heads;
  int32_t* act_out = b.actions + row0 * num_heads;
  for (int i = threadIdx.x; i < count; i += kThreads) act_out[i] = acts[i];
  for (int r = threadIdx.x; r < nrows; r += kThreads) {
    float total = terms[r * num_heads];
    for (int h = 1; h < num_heads; ++h) total += terms[r * num_heads + h];
    b.log_prob[row0 + r] = total;
  }
}

// Heads of > 64 choices: a warp per (row, head), lanes split the elements.
__global__ void __launch_bounds__(kThreads)
    SampleWarpKernel(SamplerParams p, SamplerBuffers b, int tile_rows) {
  extern __shared__ float terms[];  // [tile_rows, H]
  const int num_heads = p.num_heads;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * tile_rows;
  const int64_t left = b.rows - row0;
  const int nrows = left < tile_rows ? static_cast<int>(left) : tile_rows;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const bool partitionable = p.partitionable != 0;
  const int pairs = nrows * num_heads;
  for (int q = warp; q < pairs; q += kThreads / 32) {
    const int r = q / num_heads;
    const int h = q - r * num_heads;
    const int n = p.nvec[h];
    const int64_t row = row0 + r;
    const float* x = b.logits + row * p.row_len + p.offset[h];
    const HeadDraw d = head_draw(row, h, n, num_heads, b);

    HeadAcc acc = head_acc_init();
    for (int j = lane; j < n; j += 32) {
      const float v = __ldg(x + j);
      const float g =
          gumbel_from_bits(categorical_bits(d.k0, d.k1, d.first + j, d.size, partitionable));
      head_acc_push(acc, v, v + g, j);
    }
    // Butterfly: every lane ends with the merge of the whole warp.
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
      HeadAcc o;
      o.max_logit = __shfl_xor_sync(0xffffffffu, acc.max_logit, off);
      o.best = __shfl_xor_sync(0xffffffffu, acc.best, off);
      o.best_i = __shfl_xor_sync(0xffffffffu, acc.best_i, off);
      head_acc_merge(acc, o);
    }
    float sum = 0.0f;
    for (int j = lane; j < n; j += 32) sum += expf(__ldg(x + j) - acc.max_logit);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane == 0) {
      b.actions[row * num_heads + h] = acc.best_i;
      terms[r * num_heads + h] = head_log_prob(x[acc.best_i], acc.max_logit, sum);
    }
  }
  __syncthreads();

  for (int r = threadIdx.x; r < nrows; r += blockDim.x) {
    float total = terms[r * num_heads];
    for (int h = 1; h < num_heads; ++h) total += terms[r * num_heads + h];
    b.log_prob[row0 + r] = total;
  }
}

template <int G>
cudaError_t LaunchRows(const SamplerParams& p, const SamplerBuffers& b, cudaStream_t stream) {
  // Every head has <= 64 choices, so a row (<= 32 * 64 floats) always fits.
  const int stride = p.row_len | 1;
  const int per_row = stride + 2 * p.num_heads;
  int cap = kTileFloats / per_row;
  cap = cap > kMaxTileRows ? kMaxTileRows : (cap < 1 ? 1 : cap);
  int log2_rows = 0;
  while ((2 << log2_rows) <= cap) ++log2_rows;
  const int tile_rows = 1 << log2_rows;
  const size_t bytes = static_cast<size_t>(tile_rows) * per_row * sizeof(float);
  const int64_t blocks = (b.rows + tile_rows - 1) / tile_rows;
  if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  SampleRowsKernel<G><<<static_cast<unsigned>(blocks), kThreads, bytes, stream>>>(
      p, b, tile_rows, log2_rows, stride, 1.0f / static_cast<float>(p.row_len));
  return cudaGetLastError();
}

cudaError_t LaunchWarps(const SamplerParams& p, const SamplerBuffers& b, cudaStream_t stream) {
  int tile_rows = (kThreads / 32) / p.num_heads;
  tile_rows = tile_rows < 1 ? 1 : tile_rows;
  const size_t bytes = static_cast<size_t>(tile_rows) * p.num_heads * sizeof(float);
  const int64_t blocks = (b.rows + tile_rows - 1) / tile_rows;
  if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  SampleWarpKernel<<<static_cast<unsigned>(blocks), kThreads, bytes, stream>>>(p, b, tile_rows);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchSampler(const SamplerParams& p, const SamplerBuffers& b,
                          cudaStream_t stream) {
  if (b.rows == 0) return cudaSuccess;
  int n_max = 1;
  for (int h = 0; h < p.num_heads; ++h) n_max = p.nvec[h] > n_max ? p.nvec[h] : n_max;
  // G: the exp-sum association (lanes of the previous kernel), about four
  // elements per lane; heads above 64 choices take whole warps.
  int g = 1;
  while (g < 32 && 4 * g < n_max) g *= 2;
  switch (g) {
    case 1: return LaunchRows<1>(p, b, stream);
    case 2: return LaunchRows<2>(p, b, stream);
    case 4: return LaunchRows<4>(p, b, stream);
    case 8: return LaunchRows<8>(p, b, stream);
    case 16: return LaunchRows<16>(p, b, stream);
    default: return LaunchWarps(p, b, stream);
  }
}

}  // namespace sampler
}  // namespace jaxwarp
