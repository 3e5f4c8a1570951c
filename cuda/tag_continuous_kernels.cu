// Tag (continuous) CUDA kernels: one block per env, agents tiled over the
// block's threads (any number of agents, not one thread per agent), the whole
// env in shared memory, one fused kernel per step:
//   move -> tag -> rewards/returns/done -> masked auto-reset -> k nearest
//   neighbours (registers) -> coalesced observation writes.
// Nothing O(N^2) ever touches global memory. See cuda/README.md.
#include <cuda_runtime.h>

#include <atomic>

#include "tag_continuous_kernels.h"

namespace jaxwarp {
namespace tag {
namespace {

constexpr uint16_t kNoNeighbour = 0xFFFF;
constexpr int kMaxThreads = 512;

// Shared-memory carve-up of one env (see SharedBytes for the sizes).
struct Smem {
  float2* pos;       // [n] (x, y); NaN in partial mode for agents out of game
  float* feat;       // [5][n] x, y, speed, acc, dir: observation features 0-4
  float* speed;      // = feat + 2n
  float* acc;        // = feat + 3n
  float* dir;        // = feat + 4n
  float* base;       // [n] reward before tagging
  int* tags;         // [num_taggers] runners tagged this step
  uint16_t* nbr;     // [n * k] neighbour ids (partial observation)
  uint16_t* col;     // [obs_dim] (feature << 8 | slot) of each column
  uint8_t* still;    // [n] in the game, as observed this step
  uint8_t* tagged;   // [n]
  // Uniform grid over the arena (large agent counts, partial observation):
  int* cell_start;   // [cells + 1] first sorted slot of each cell
  uint16_t* cell;    // [n] cell of each visible agent
  uint16_t* rank;    // [n] its slot within the cell
  float2* spos;      // [n] positions sorted by cell
  uint16_t* sid;     // [n] agent id of each sorted slot
};

// Grid geometry: about two agents per cell, at most 64 x 64 cells.
struct Grid {
  int g;         // cells per side (0: no grid)
  float cell;    // cell side
  float inv;     // 1 / cell side
};

constexpr int kGridMinAgents = 256;

__host__ __device__ inline Grid MakeGrid(const Params& p) {
  Grid gr{0, 0.0f, 0.0f};
  if (p.full_obs || p.k_observed > 16 || p.num_agents < kGridMinAgents) return gr;
  int g = static_cast<int>(ceilf(sqrtf(0.5f * p.num_agents)));
  g = g > 64 ? 64 : (g < 1 ? 1 : g);
  gr.g = g;
  gr.cell = p.grid_length / g;
  gr.inv = g / p.grid_length;
  return gr;
}

__host__ __device__ inline size_t AlignUp(size_t v) { return (v + 15) & ~size_t(15); }

__host__ __device__ inline size_t SharedBytes(const Params& p, Smem* s, char* base) {
  const int n = p.num_agents;
  const int k = p.full_obs ? 0 : p.k_observed;
  const int dim = obs_dim(p);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* ptr = base + off;
    off = AlignUp(off + bytes);
    return ptr;
  };
  const Grid gr = MakeGrid(p);
  const int cells = gr.g * gr.g;
  const int gn = gr.g ? n : 0;
  char* pos = take(sizeof(float2) * n);
  char* feat = take(sizeof(float) * 5 * n);
  char* rbase = take(sizeof(float) * n);
  char* tags = take(sizeof(int) * (p.num_taggers + 1));
  char* nbr = take(sizeof(uint16_t) * n * k);
  char* col = take(sizeof(uint16_t) * dim);
  char* still = take(n);
  char* tagged = take(n);
  char* cell_start = take(sizeof(int) * (cells + 1));
  char* cell = take(sizeof(uint16_t) * gn);
  char* rank = take(sizeof(uint16_t) * gn);
  char* spos = take(sizeof(float2) * gn);
  char* sid = take(sizeof(uint16_t) * gn);
  if (s) {
    s->pos = reinterpret_cast<float2*>(pos);
    s->feat = reinterpret_cast<float*>(feat);
    s->speed = s->feat + 2 * n;
    s->acc = s->feat + 3 * n;
    s->dir = s->feat + 4 * n;
    s->base = reinterpret_cast<float*>(rbase);
    s->tags = reinterpret_cast<int*>(tags);
    s->nbr = reinterpret_cast<uint16_t*>(nbr);
    s->col = reinterpret_cast<uint16_t*>(col);
    s->still = reinterpret_cast<uint8_t*>(still);
    s->tagged = reinterpret_cast<uint8_t*>(tagged);
    s->cell_start = reinterpret_cast<int*>(cell_start);
    s->cell = reinterpret_cast<uint16_t*>(cell);
    s->rank = reinterpret_cast<uint16_t*>(rank);
    s->spos = reinterpret_cast<float2*>(spos);
    s->sid = reinterpret_cast<uint16_t*>(sid);
  }
  return off;
}

__device__ inline void StoreShared(const Params& p, const Smem& s, int i, const Agent& a) {
  const bool hide = !p.full_obs && !a.still;
  s.pos[i] = hide ? make_float2(NAN, NAN) : make_float2(a.x, a.y);
  s.feat[i] = a.x;
  s.feat[p.num_agents + i] = a.y;
  s.speed[i] = a.speed;
  s.dir[i] = a.dir;
  s.acc[i] = a.acc;
  s.still[i] = static_cast<uint8_t>(a.still);
}

// Same arithmetic as obs_feature() in tag_continuous.h, on shared memory.
// Features 0-4 share one code path (lanes of a warp usually hold different
// features, so a switch would serialise them).
__device__ inline float Feature(const Params& p, const Smem& s, int f, int i, int j) {
  if (f < 5) {
    const float scale = f < 2 ? p.pos_scale : (f < 4 ? p.speed_scale : p.dir_scale);
    const float* v = s.feat + f * p.num_agents;
    return (v[j] - v[i]) * scale;
  }
  return f == 5 ? (j < p.num_taggers ? 1.0f : 0.0f) : static_cast<float>(s.still[j]);
}

// The K nearest visible others of agent i, ordered by (distance^2, id), kept
// in registers by an unrolled insertion. K is a compile-time constant so the
// lists never leave registers (a run-time bound would put them in local
// memory).
template <int K>
__device__ inline void NearestInRegisters(const Params& p, const Smem& s, int i) {
  const int n = p.num_agents;
  float bd[K];
  int bi[K];
#pragma unroll
  for (int m = 0; m < K; ++m) {
    bd[m] = INFINITY;
    bi[m] = kNoNeighbour;
  }
  const float2 me = s.pos[i];
  for (int j = 0; j < n; ++j) {
    const float2 o = s.pos[j];  // same j across the warp: a broadcast read
    const float d2 = sq_dist(me.x, me.y, o.x, o.y);  // NaN for hidden agents
    if (d2 < bd[K - 1] && j != i) {
#pragma unroll
      for (int m = K - 1; m > 0; --m) {
        if (d2 < bd[m - 1]) {
          bd[m] = bd[m - 1];
          bi[m] = bi[m - 1];
        } else if (d2 < bd[m]) {
          bd[m] = d2;
          bi[m] = j;
        }
      }
      if (d2 < bd[0]) {
        bd[0] = d2;
        bi[0] = j;
      }
    }
  }
#pragma unroll
  for (int m = 0; m < K; ++m) s.nbr[i * K + m] = static_cast<uint16_t>(bi[m]);
}

// (d2, id) lexicographic order: candidates arrive in no particular id order.
__device__ inline bool Before(float d2, int j, float d2b, int jb) {
  return d2 < d2b || (d2 == d2b && j < jb);
}

// Builds the grid of visible agents: counting sort by cell (atomics only count;
// ordering inside a cell does not matter, the search compares (d2, id)).
__device__ inline void BuildGrid(const Params& p, const Smem& s, const Grid& gr) {
  const int n = p.num_agents;
  const int cells = gr.g * gr.g;
  for (int c = threadIdx.x; c <= cells; c += blockDim.x) s.cell_start[c] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    if (!s.still[i]) continue;
    const float2 q = s.pos[i];
    int cx = static_cast<int>(q.x * gr.inv), cy = static_cast<int>(q.y * gr.inv);
    cx = cx < 0 ? 0 : (cx >= gr.g ? gr.g - 1 : cx);
    cy = cy < 0 ? 0 : (cy >= gr.g ? gr.g - 1 : cy);
    const int c = cy * gr.g + cx;
    s.cell[i] = static_cast<uint16_t>(c);
    s.rank[i] = static_cast<uint16_t>(atomicAdd(&s.cell_start[c + 1], 1));
  }
  __syncthreads();
  if (threadIdx.x < 32) {  // exclusive scan of the counts by one warp
    const int lane = threadIdx.x;
    int carry = 0;
    for (int b = 0; b < cells; b += 32) {
      const int idx = b + lane;
      int v = idx < cells ? s.cell_start[idx + 1] : 0;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int u = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += u;
      }
      if (idx < cells) s.cell_start[idx + 1] = v + carry;
      carry += __shfl_sync(0xffffffffu, v, 31);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    if (!s.still[i]) continue;
    const int slot = s.cell_start[s.cell[i]] + s.rank[i];
    s.spos[slot] = s.pos[i];
    s.sid[slot] = static_cast<uint16_t>(i);
  }
  __syncthreads();
}

// The K nearest visible others of agent i by rings of grid cells around its
// own; stops once the K-th distance is inside the radius every unvisited
// agent lies beyond. Same result as NearestInRegisters.
template <int K>
__device__ inline void NearestInGrid(const Params& p, const Smem& s, const Grid& gr, int i) {
  float bd[K];
  int bi[K];
#pragma unroll
  for (int m = 0; m < K; ++m) {
    bd[m] = INFINITY;
    bi[m] = kNoNeighbour;
  }
  const float2 me = s.pos[i];
  const int c0 = s.cell[i];
  const int cx = c0 % gr.g, cy = c0 / gr.g;
  for (int r = 0;; ++r) {
    for (int gy = cy - r; gy <= cy + r; ++gy) {
      if (gy < 0 || gy >= gr.g) continue;
      const bool full_row = r == 0 || gy == cy - r || gy == cy + r;
      for (int gx = cx - r; gx <= cx + r; gx += full_row ? 1 : 2 * r) {
        if (gx < 0 || gx >= gr.g) continue;
        const int c = gy * gr.g + gx;
        const int end = s.cell_start[c + 1];
        for (int q = s.cell_start[c]; q < end; ++q) {
          const int j = s.sid[q];
          const float2 o = s.spos[q];
          const float d2 = sq_dist(me.x, me.y, o.x, o.y);
          if (j != i && Before(d2, j, bd[K - 1], bi[K - 1])) {
#pragma unroll
            for (int m = K - 1; m > 0; --m) {
              if (Before(d2, j, bd[m - 1], bi[m - 1])) {
                bd[m] = bd[m - 1];
                bi[m] = bi[m - 1];
              } else if (Before(d2, j, bd[m], bi[m])) {
                bd[m] = d2;
                bi[m] = j;
              }
            }
            if (Before(d2, j, bd[0], bi[0])) {
              bd[0] = d2;
              bi[0] = j;
            }
          }
        }
      }
    }
    // Every unvisited agent is at least r cells' width away (less a margin
    // for rounding in the cell index).
    const float reach = (static_cast<float>(r) - 0.001f) * gr.cell;
    if (r > 0 && bd[K - 1] < reach * reach) break;
    if (cx - r <= 0 && cy - r <= 0 && cx + r >= gr.g - 1 && cy + r >= gr.g - 1) break;
  }
#pragma unroll
  for (int m = 0; m < K; ++m) s.nbr[i * K + m] = static_cast<uint16_t>(bi[m]);
}

// Fallback for k > 16: k passes over the agents, each taking the
// next one in (d2, id) order.
__device__ inline void NearestBySelection(const Params& p, const Smem& s, int i) {
  const int n = p.num_agents;
  const int k = p.k_observed;
  const float2 me = s.pos[i];
  float last_d = -1.0f;
  int last_j = -1;
  for (int slot = 0; slot < k; ++slot) {
    float best_d = INFINITY;
    int best_j = kNoNeighbour;
    for (int j = 0; j < n; ++j) {
      if (j == i) continue;
      const float d2 = sq_dist(me.x, me.y, s.pos[j].x, s.pos[j].y);
      const bool after_last = d2 > last_d || (d2 == last_d && j > last_j);
      if (after_last && d2 < best_d) {
        best_d = d2;
        best_j = j;
      }
    }
    s.nbr[i * k + slot] = static_cast<uint16_t>(best_j);
    if (best_j != kNoNeighbour) {
      last_d = best_d;
      last_j = best_j;
    }
  }
}

// K: -1 = full observation (no search), 0 = selection fallback, else the
// exact k of the register lists.
template <int K>
__global__ void __launch_bounds__(kMaxThreads) TagKernel(Params p, TagBuffers b) {
  extern __shared__ __align__(16) char smem_raw[];
  Smem s;
  SharedBytes(p, &s, smem_raw);
  __shared__ int s_left;

  const int n = p.num_agents;
  const int nt = p.num_taggers;
  const int dim = obs_dim(p);
  const int64_t e = blockIdx.x;
  const int64_t base = e * n;
  const bool reset_only = b.actions == nullptr;
  const uint32_t env_local = static_cast<uint32_t>(e % b.envs_per_key);
  const int64_t kb = e / b.envs_per_key;
  const uint32_t k0 = b.key[2 * kb], k1 = b.key[2 * kb + 1];

  for (int c = threadIdx.x; c < dim - 1; c += blockDim.x) {
    const int slots = (dim - 1) / kFeatures;
    s.col[c] = static_cast<uint16_t>(((c / slots) << 8) | (c % slots));
  }

  bool done = true;
  int32_t t = 0;
  if (!reset_only) {
    // 1. Move. State writes go straight out; a reset below overwrites them.
    if (threadIdx.x == 0) s_left = b.left_in[e];
    for (int i = threadIdx.x; i < nt; i += blockDim.x) s.tags[i] = 0;
    t = b.t_in[e] + 1;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const int64_t g = base + i;
      Agent a{b.x_in[g], b.y_in[g], b.speed_in[g], b.dir_in[g], b.acc_in[g], b.still_in[g]};
      const int2 act = reinterpret_cast<const int2*>(b.actions)[g];
      const float edge = move_agent(p, i < nt, act.x, act.y, a);
      b.x[g] = a.x;
      b.y[g] = a.y;
      b.speed[g] = a.speed;
      b.dir[g] = a.dir;
      b.acc[g] = a.acc;
      s.base[i] = a.still ? base_reward(p, i < nt, edge) : 0.0f;
      s.tagged[i] = 0;
      StoreShared(p, s, i, a);
    }
    __syncthreads();

    // 2. Tagging: each runner in the game finds its nearest tagger.
    for (int i = nt + threadIdx.x; i < n; i += blockDim.x) {
      if (!s.still[i]) continue;
      const float2 me = s.pos[i];
      float best = INFINITY;
      int best_t = -1;
      for (int j = 0; j < nt; ++j) {
        const float d2 = sq_dist(me.x, me.y, s.pos[j].x, s.pos[j].y);
        if (d2 < best) {
          best = d2;
          best_t = j;
        }
      }
      if (best_t >= 0 && best < p.tag_dist2) {
        s.tagged[i] = 1;
        atomicAdd(&s.tags[best_t], 1);  // integer count: order-independent
        if (p.exit_after_tag) atomicSub(&s_left, 1);
      }
    }
    __syncthreads();

    // 3. Rewards, returns, next still_in_game; done.
    const int32_t t_prev = t - 1;
    const bool last_step = t == p.episode_length;
    done = last_step || s_left == 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const int64_t g = base + i;
      const bool is_tagger = i < nt;
      const bool tagged = !is_tagger && s.tagged[i];
      const bool still_after = s.still[i] && !(tagged && p.exit_after_tag);
      const float r = final_reward(p, is_tagger, s.base[i], is_tagger ? s.tags[i] : 0,
                                   tagged, still_after, last_step);
      b.reward[g] = r;
      b.ret[g] = (t_prev == 0 ? 0.0f : b.ret_in[g]) + r;
      b.still[g] = done ? 1 : still_after;
    }
    if (threadIdx.x == 0) {
      b.done[e] = done;
      b.t[e] = done ? 0 : t;
      b.left[e] = done ? num_runners(p) : s_left;
    }
  } else if (threadIdx.x == 0) {
    b.t[e] = 0;
    b.left[e] = num_runners(p);
  }

  // 4. Masked auto-reset: only finished envs draw new starts.
  if (done) {
    __syncthreads();  // everyone is past reading shared state of the old episode
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const int64_t g = base + i;
      const Agent a = reset_agent(p, k0, k1, env_local, static_cast<uint32_t>(i));
      b.x[g] = a.x;
      b.y[g] = a.y;
      b.speed[g] = a.speed;
      b.dir[g] = a.dir;
      b.acc[g] = a.acc;
      if (reset_only) {
        b.still[g] = 1;
        b.ret[g] = 0.0f;
      }
      StoreShared(p, s, i, a);
    }
    t = 0;
  }
  __syncthreads();

  // 5. k nearest neighbours of every observing agent.
  const Grid gr = MakeGrid(p);
  if (K > 0 && gr.g > 0) {
    BuildGrid(p, s, gr);
    // Walk agents in cell order so a warp's lanes search neighbouring cells.
    const int visible = s.cell_start[gr.g * gr.g];
    for (int q = threadIdx.x; q < visible; q += blockDim.x)
      NearestInGrid<(K > 0 ? K : 1)>(p, s, gr, s.sid[q]);
    __syncthreads();
  } else if (K >= 0) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      if (!s.still[i]) continue;
      if (K == 0) {
        NearestBySelection(p, s, i);
      } else {
        NearestInRegisters<(K > 0 ? K : 1)>(p, s, i);
      }
    }
    __syncthreads();
  }

  // 6. Observations, written coalesced: consecutive threads write
  // consecutive floats of this env's [n, dim] block.
  float* obs = b.obs + e * static_cast<int64_t>(n) * dim;
  const float time_feature = static_cast<float>(t) * p.time_scale;
  if (K < 0) {
    // Full observation: a warp per agent; lanes walk the (feature, slot) row.
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warps = blockDim.x / 32;
    for (int i = warp; i < n; i += warps) {
      float* row = obs + static_cast<int64_t>(i) * dim;
      const bool visible = s.still[i];
      for (int f = 0; f < kFeatures; ++f)
        for (int slot = lane; slot < n - 1; slot += 32)
          row[f * (n - 1) + slot] =
              visible ? Feature(p, s, f, i, full_obs_other(i, slot)) : 0.0f;
      if (lane == 0) row[dim - 1] = visible ? time_feature : 0.0f;
    }
  } else {
    const int k = p.k_observed;
    const int total = n * dim;
    int row = threadIdx.x / dim, c = threadIdx.x % dim;
    const int step_rows = blockDim.x / dim, step_cols = blockDim.x % dim;
    for (int idx = threadIdx.x; idx < total; idx += blockDim.x) {
      float v = 0.0f;
      if (s.still[row]) {
        if (c == dim - 1) {
          v = time_feature;
        } else {
          const int fs = s.col[c];
          const int j = s.nbr[row * k + (fs & 0xFF)];
          if (j != kNoNeighbour) v = Feature(p, s, fs >> 8, row, j);
        }
      }
      obs[idx] = v;
      row += step_rows;
      c += step_cols;
      if (c >= dim) {
        c -= dim;
        row += 1;
      }
    }
  }
}

template <int K>
cudaError_t Launch(const Params& p, const TagBuffers& b, int64_t total_envs,
                   cudaStream_t stream) {
  const size_t bytes = SharedBytes(p, nullptr, nullptr);
  // Above 48 KiB a kernel must opt in; done once per instantiation and size.
  static std::atomic<size_t> opted_in{48 * 1024};
  if (bytes > opted_in.load()) {
    cudaError_t err = cudaFuncSetAttribute(
        TagKernel<K>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (err != cudaSuccess) return err;
    opted_in.store(bytes);
  }
  int threads = ((p.num_agents + 31) / 32) * 32;
  threads = threads > kMaxThreads ? kMaxThreads : threads;
  TagKernel<K><<<static_cast<unsigned>(total_envs), threads, bytes, stream>>>(p, b);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchTag(const Params& p, const TagBuffers& b, int64_t total_envs,
                      cudaStream_t stream) {
  if (total_envs == 0) return cudaSuccess;
  if (p.full_obs) return Launch<-1>(p, b, total_envs, stream);
  switch (p.k_observed) {
#define JW_CASE(K) \
  case K:          \
    return Launch<K>(p, b, total_envs, stream);
    JW_CASE(1) JW_CASE(2) JW_CASE(3) JW_CASE(4) JW_CASE(5) JW_CASE(6) JW_CASE(7)
    JW_CASE(8) JW_CASE(9) JW_CASE(10) JW_CASE(11) JW_CASE(12) JW_CASE(13)
    JW_CASE(14) JW_CASE(15) JW_CASE(16)
#undef JW_CASE
    default:
      return Launch<0>(p, b, total_envs, stream);
  }
}

}  // namespace tag
}  // namespace jaxwarp
