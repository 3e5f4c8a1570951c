// Many-agent primitives of jaxwarp's authoring contract: the Team of one env's
// agents (loops over agents, barriers, reductions) and the uniform-grid
// neighbour query. One source for the CPU build (g++: a team is a loop) and
// the CUDA build (nvcc: a team is the env's threads of a block).
//
// A team pass, `team_pass(p, s, team, phase)` in an env header, runs once per
// env after each phase of step() and once before observe() (phase ==
// jaxwarp::kBeforeObserve). Every thread of the env runs it, so:
//   * work over agents goes through `team.for_each([&](int i) {...})`
//     (agents split over the env's threads; in order on the CPU);
//   * `team.sync()` separates writes from later reads of other agents' data;
//   * reductions (`sum`, `count`, `min`, `argmin`) return the same value to
//     every thread; env-level results are written under `team.leader()`;
//   * every env of a launch calls the same sequence of sync()/reductions:
//     never call them under a condition that differs between envs (they are
//     block-wide barriers on the GPU).
// Results never depend on the launch layout: integer reductions and min/argmin
// are order-independent (ties go to the lower agent id), and the float sum is
// taken in agent order by one thread. The measured choices (scan, grid
// density, insert, ring order): docs/decisions.md, "Kernels".
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "jaxwarp_common.h"

namespace jaxwarp {

constexpr int kBeforeObserve = -1;  // the phase argument of the pass before observe()

// Float -> uint32 with the same order (for packed atomic min); -0 is +0 and
// NaN sorts last.
JW_HD uint32_t ordered_bits(float v) {
  v = v + 0.0f;  // -0 -> +0: equal values must tie
#if defined(__CUDA_ARCH__)
  const uint32_t b = __float_as_uint(v);
#else
  uint32_t b;
  memcpy(&b, &v, 4);
#endif
  if (v != v) return 0xFFFFFFFFu;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// *p += v for an int counter that several agents of a team pass may bump at
// once (atomic on the GPU; integer sums do not depend on the order).
JW_HD void atomic_add(int32_t* p, int32_t v) {
#if defined(__CUDA_ARCH__)
  atomicAdd(p, v);
#else
  *p += v;
#endif
}

struct Team {
  int n;          // agents of the env
  int lane;       // this thread's rank in the team (0 on the CPU)
  int stride;     // threads of the team (1 on the CPU)
  bool active;    // false for padding threads past the last env of a launch
  int32_t* slot;  // 2 words of shared memory for reductions (GPU only)

  JW_HD bool leader() const { return active && lane == 0; }

  JW_HD void sync() const {
#if defined(__CUDA_ARCH__)
    __syncthreads();
#endif
  }

  // f(i) for every agent i of the env (split over the team's threads).
  template <class F>
  JW_HD void for_each(F&& f) const {
    for_range(n, f);
  }
  // f(i) for i in [0, count): per-env work that is not per agent.
  template <class F>
  JW_HD void for_range(int count, F&& f) const {
    if (!active) return;
    for (int i = lane; i < count; i += stride) f(i);
  }

  // Sum of f(i) over agents (int32, order-independent).
  template <class F>
  JW_HD int32_t sum(F&& f) const {
#if defined(__CUDA_ARCH__)
    int32_t local = 0;
    if (active)
      for (int i = lane; i < n; i += stride) local += static_cast<int32_t>(f(i));
    __syncthreads();
    if (lane == 0) slot[0] = 0;
    __syncthreads();
    if (active && local != 0) atomicAdd(slot, local);
    __syncthreads();
    return slot[0];
#else
    int32_t total = 0;
    for (int i = 0; i < n; ++i) total += static_cast<int32_t>(f(i));
    return total;
#endif
  }

  // Number of agents with pred(i).
  template <class F>
  JW_HD int32_t count(F&& pred) const {
    return sum([&](int i) { return pred(i) ? 1 : 0; });
  }

  // Sum of f(i) in float32, in agent order 0, 1, ... (deterministic, equal on
  // every backend; one thread adds, so it costs O(n) per env).
  template <class F>
  JW_HD float sum_ordered(F&& f) const {
#if defined(__CUDA_ARCH__)
    __syncthreads();
    if (lane == 0 && active) {
      float total = 0.0f;
      for (int i = 0; i < n; ++i) total += f(i);
      reinterpret_cast<float*>(slot)[0] = total;
    }
    __syncthreads();
    return reinterpret_cast<float*>(slot)[0];
#else
    float total = 0.0f;
    for (int i = 0; i < n; ++i) total += f(i);
    return total;
#endif
  }

  // a[0..count) becomes its inclusive prefix sum. Collective: it ends with
  // a barrier but does not start with one (call team.sync() after writing
  // a from several threads); a is the env's own array.
  JW_HD void inclusive_scan(int32_t* a, int count) const {
#if defined(__CUDA_ARCH__)
    // The env's lanes 0..31 are one whole warp when its threads are whole
    // warps, or when it has the block to itself (and 32+ threads): the same
    // for every env of a launch.
    if (stride % 32 == 0 || (stride >= 32 && static_cast<int>(blockDim.x) == stride)) {
      // By the env's first warp, 32 elements at a time with shuffles.
      if (active && lane < 32) {
        int carry = 0;
        for (int b = 0; b < count; b += 32) {
          const int c = b + lane;
          int v = c < count ? a[c] : 0;
#pragma unroll
          for (int o = 1; o < 32; o <<= 1) {
            const int u = __shfl_up_sync(0xffffffffu, v, o);
            if (lane >= o) v += u;
          }
          if (c < count) a[c] = v + carry;
          carry += __shfl_sync(0xffffffffu, v, 31);
        }
      }
      __syncthreads();
      return;
    }
    // In W chunks: each of W lanes scans its chunk, the leader chains the
    // chunk ends, then each chunk adds its offset.
    const int W = stride < 64 ? stride : 64;
    const int chunk = (count + W - 1) / W;
    auto chunk_end = [&](int l) {  // exclusive
      const int e = (l + 1) * chunk;
      return e < count ? e : count;
    };
    if (active && lane < W)
      for (int c = lane * chunk + 1; c < chunk_end(lane); ++c) a[c] += a[c - 1];
    __syncthreads();
    if (leader())
      for (int l = 1; l < W && l * chunk < count; ++l) a[chunk_end(l) - 1] += a[l * chunk - 1];
    __syncthreads();
    if (active && lane > 0 && lane < W && lane * chunk < count) {
      const int off = a[lane * chunk - 1];
      for (int c = lane * chunk; c < chunk_end(lane) - 1; ++c) a[c] += off;
    }
    __syncthreads();
#else
    for (int c = 1; c < count; ++c) a[c] += a[c - 1];
#endif
  }

  // The agents i with pred(i), in ascending order, into out[0..count);
  // returns count to every thread. tmp: n words of the env's scratch.
  // Collective. Each thread takes a contiguous run of agents, so that a
  // prefix sum over the threads places them in order.
  template <class F>
  JW_HD int compact(F&& pred, int32_t* out, int32_t* tmp) const {
#if defined(__CUDA_ARCH__)
    const int per = (n + stride - 1) / stride;
    const int lo = lane * per;
    const int hi = lo + per < n ? lo + per : n;
    int mine = 0;
    if (active)
      for (int i = lo; i < hi; ++i) mine += pred(i) ? 1 : 0;
    const int lanes = stride < n ? stride : n;  // tmp's entries
    if (active && lane < lanes) tmp[lane] = mine;
    __syncthreads();
    inclusive_scan(tmp, lanes);
    if (active && mine > 0) {
      int q = tmp[lane] - mine;
      for (int i = lo; i < hi; ++i)
        if (pred(i)) out[q++] = i;
    }
    const int total = active ? tmp[lanes - 1] : 0;
    __syncthreads();
    return total;
#else
    int m = 0;
    for (int i = 0; i < n; ++i)
      if (pred(i)) out[m++] = i;
    return m;
#endif
  }

  // The agent i with the smallest f(i) among those with f(i) < +inf (ties to
  // the lower id; NaN never wins); -1 if there is none.
  template <class F>
  JW_HD int argmin(F&& f) const {
#if defined(__CUDA_ARCH__)
    unsigned long long best = ~0ull;
    if (active)
      for (int i = lane; i < n; i += stride) {
        const float v = f(i);
        if (v < INFINITY) {
          const unsigned long long key =
              (static_cast<unsigned long long>(ordered_bits(v)) << 32) | static_cast<uint32_t>(i);
          best = key < best ? key : best;
        }
      }
    __syncthreads();
    unsigned long long* s = reinterpret_cast<unsigned long long*>(slot);
    if (lane == 0) *s = ~0ull;
    __syncthreads();
    if (active && best != ~0ull) atomicMin(s, best);
    __syncthreads();
    const unsigned long long r = *s;
    return r == ~0ull ? -1 : static_cast<int>(r & 0xFFFFFFFFull);
#else
    float best = INFINITY;
    int arg = -1;
    for (int i = 0; i < n; ++i) {
      const float v = f(i);
      if (v < best) {
        best = v;
        arg = i;
      }
    }
    return arg;
#endif
  }

  // min over agents of f(i) (+inf if none is smaller).
  template <class F>
  JW_HD float min(F&& f) const {
    const int i = argmin(f);
    return i < 0 ? INFINITY : f(i);
  }
};

// ---------------------------------------------------------------------------
// Uniform-grid neighbour query: k nearest agents (by squared distance, ties to
// the lower id) within a radius, without any O(N^2) array. The grid lives in
// one scratch array of the env (declared in its spec with
// jaxwarp.authoring.grid_scratch: cells + 2 + 5 n words), carved by carve() into
//   start: i32[cells + 1], id: i32[n], pos: XY[n] (positions sorted by
//   cell), cell, rank: i32[n].
// Build it in a team pass (build() ends with a barrier); query from any
// agent afterwards.
// ---------------------------------------------------------------------------
constexpr int kNoNeighbour = -1;

// Cells per side for n agents in an arena of side `length` (about four agents
// per cell, at most 64 x 64): the same on every backend and in Python
// (jaxwarp.authoring.grid_side sizes the scratch with it). Fewer, fuller
// cells than two per agent mean fewer ring steps per search.
constexpr float kGridAgentsPerCell = 4.0f;
JW_HD int grid_side(int n) {
  int g = static_cast<int>(ceilf(sqrtf((1.0f / kGridAgentsPerCell) * static_cast<float>(n))));
  return g > 64 ? 64 : (g < 1 ? 1 : g);
}

struct alignas(8) XY {
  float x, y;
};

struct NeighbourGrid {
  int32_t* start;
  int32_t* id;
  XY* pos;       // positions sorted by cell (one 8-byte load per candidate)
  int32_t* cell;
  int32_t* rank;
  int g;         // cells per side
  float lo;      // arena lower corner (both axes)
  float length;  // arena side

  // The grid in `words` (cells + 2 + 5 n 4-byte words) for n agents on g x g
  // cells over [lo, lo + length]^2.
  template <class T>
  JW_HD static NeighbourGrid carve(T* words, int n, int g, float lo, float length) {
    int32_t* w = reinterpret_cast<int32_t*>(words);
    const int cells = g * g;
    NeighbourGrid gr;
    gr.start = w;
    gr.id = w + cells + 1;
    // pos on the next 8-byte boundary (the array has a word of slack for it).
    const uintptr_t at = reinterpret_cast<uintptr_t>(gr.id + n);
    gr.pos = reinterpret_cast<XY*>((at + 7) & ~static_cast<uintptr_t>(7));
    gr.cell = reinterpret_cast<int32_t*>(gr.pos + n);
    gr.rank = gr.cell + n;
    gr.g = g;
    gr.lo = lo;
    gr.length = length;
    return gr;
  }

  JW_HD float cell_size() const { return length / static_cast<float>(g); }
  JW_HD int cell_of(float x, float y) const {
    const float inv = static_cast<float>(g) / length;
    int cx = static_cast<int>((x - lo) * inv), cy = static_cast<int>((y - lo) * inv);
    cx = cx < 0 ? 0 : (cx >= g ? g - 1 : cx);
    cy = cy < 0 ? 0 : (cy >= g ? g - 1 : cy);
    return cy * g + cx;
  }

  // Agents i with member(i) go into the grid at (x[i], y[i]). Collective.
  template <class M>
  JW_HD void build(const Team& t, const float* x, const float* y, M&& member) const {
    const int cells = g * g;
    // Counting sort by cell: count, exclusive scan, scatter.
#if defined(__CUDA_ARCH__)
    if (t.active)
      for (int c = t.lane; c <= cells; c += t.stride) start[c] = 0;
    __syncthreads();
    if (t.active)
      for (int i = t.lane; i < t.n; i += t.stride) {
        if (!member(i)) continue;
        const int c = cell_of(x[i], y[i]);
        cell[i] = c;
        rank[i] = atomicAdd(&start[c + 1], 1);  // slot order within a cell is free
      }
    __syncthreads();
    t.inclusive_scan(start + 1, cells);
    if (t.active)
      for (int i = t.lane; i < t.n; i += t.stride) {
        if (!member(i)) continue;
        const int q = start[cell[i]] + rank[i];
        id[q] = i;
        pos[q] = XY{x[i], y[i]};
      }
    __syncthreads();
#else
    for (int c = 0; c <= cells; ++c) start[c] = 0;
    for (int i = 0; i < t.n; ++i) {
      if (!member(i)) continue;
      const int c = cell_of(x[i], y[i]);
      cell[i] = c;
      rank[i] = start[c + 1]++;
    }
    for (int c = 1; c <= cells; ++c) start[c] += start[c - 1];
    for (int i = 0; i < t.n; ++i) {
      if (!member(i)) continue;
      const int q = start[cell[i]] + rank[i];
      id[q] = i;
      pos[q] = XY{x[i], y[i]};
    }
#endif
  }

  // Agents in the grid (valid after build()).
  JW_HD int size() const { return start[g * g]; }
};

namespace detail {
// (d2, id) lexicographic order.
JW_HD bool before(float d2, int j, float d2b, int jb) {
  return d2 < d2b || (d2 == d2b && j < jb);
}
// Inserts (d2, j) into the list (bd, bi)[0..K) kept in (d2, id) order
// (branches on float comparisons: the branch-free and 64-bit-key forms were
// slower).
template <int K>
JW_HD void insert(float d2, int j, float* bd, int* bi) {
  if (!before(d2, j, bd[K - 1], bi[K - 1])) return;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int m = K - 1; m > 0; --m) {
    if (before(d2, j, bd[m - 1], bi[m - 1])) {
      bd[m] = bd[m - 1];
      bi[m] = bi[m - 1];
    } else if (before(d2, j, bd[m], bi[m])) {
      bd[m] = d2;
      bi[m] = j;
    }
  }
  if (before(d2, j, bd[0], bi[0])) {
    bd[0] = d2;
    bi[0] = j;
  }
}
JW_HD float sq_dist(float xi, float yi, float xj, float yj) {
  const float dx = xj - xi;
  const float dy = yj - yi;
  return fmaf(dx, dx, dy * dy);
}

// Lower bound on the squared distance from a point to the points of a cell,
// from the gaps (in cell widths) along each axis, less 0.001 cell width:
// (x - lo) * g / length, which puts agents in cells, and the distances
// themselves round, by far less than that margin, so a point in the cell is
// never nearer than the bound. 0 for the point's own row or column.
JW_HD float cell_bound2(float gap_x, float gap_y, float cs) {
  gap_x = gap_x > 0.001f ? gap_x - 0.001f : 0.0f;
  gap_y = gap_y > 0.001f ? gap_y - 0.001f : 0.0f;
  const float gx = gap_x * cs, gy = gap_y * cs;
  return gx * gx + gy * gy;
}

// K nearest by rings of cells around (x, y). A cell is scanned only if its
// nearest possible point could still enter the list (its bound is not above
// the current K-th distance), and the rings stop once every unvisited cell is
// beyond it. The list is the same as a scan of every agent: what is skipped
// is strictly farther than the K-th (d2, id) pair already held. Cells are
// visited in plain row order (nearest-first orders were slower).
template <int K>
JW_HD void grid_nearest(const NeighbourGrid& gr, int self, float x, float y, float r2,
                        int32_t* out) {
  float bd[K];
  int bi[K];
  // Empty slots hold (r2, -1): a candidate at exactly r2 does not come
  // before them, so the radius is strict (d2 < r2), as in the scan.
  for (int m = 0; m < K; ++m) {
    bd[m] = r2;
    bi[m] = kNoNeighbour;
  }
  const int c0 = gr.cell_of(x, y);
  const int cx = c0 % gr.g, cy = c0 / gr.g;
  const float cs = gr.cell_size();
  // The point in cell widths, as cell_of() computes it (before clamping).
  const float inv = static_cast<float>(gr.g) / gr.length;
  const float fx = (x - gr.lo) * inv, fy = (y - gr.lo) * inv;
  for (int r = 0;; ++r) {
    for (int gy = cy - r; gy <= cy + r; ++gy) {
      if (gy < 0 || gy >= gr.g) continue;
      const float gap_y = gy > cy ? static_cast<float>(gy) - fy
                                  : (gy < cy ? fy - static_cast<float>(gy + 1) : 0.0f);
      const bool full_row = r == 0 || gy == cy - r || gy == cy + r;
      for (int gx = cx - r; gx <= cx + r; gx += full_row ? 1 : 2 * r) {
        if (gx < 0 || gx >= gr.g) continue;
        const float gap_x = gx > cx ? static_cast<float>(gx) - fx
                                    : (gx < cx ? fx - static_cast<float>(gx + 1) : 0.0f);
        if (cell_bound2(gap_x, gap_y, cs) > bd[K - 1]) continue;
        const int c = gy * gr.g + gx;
        const int end = gr.start[c + 1];
        for (int q = gr.start[c]; q < end; ++q) {
          const int j = gr.id[q];
          const XY o = gr.pos[q];
          const float d2 = sq_dist(x, y, o.x, o.y);
          if (j != self) insert<K>(d2, j, bd, bi);
        }
      }
    }
    // Unvisited cells lie beyond the square of rings 0..r: the nearest of
    // them is at least the gap to its nearest open side (a side at the
    // grid's edge has nothing beyond it).
    const bool open_l = cx - r > 0, open_r = cx + r < gr.g - 1;
    const bool open_b = cy - r > 0, open_t = cy + r < gr.g - 1;
    if (!(open_l || open_r || open_b || open_t)) break;
    float gap = INFINITY;
    if (open_l) gap = fminf(gap, fx - static_cast<float>(cx - r));
    if (open_r) gap = fminf(gap, static_cast<float>(cx + r + 1) - fx);
    if (open_b) gap = fminf(gap, fy - static_cast<float>(cy - r));
    if (open_t) gap = fminf(gap, static_cast<float>(cy + r + 1) - fy);
    if (cell_bound2(gap, 0.0f, cs) > bd[K - 1]) break;
  }
  for (int m = 0; m < K; ++m) out[m] = bi[m];
}

// K nearest by one pass over all n agents with member(j).
// insert<K> for a scan in ascending id order: every id already held is lower
// than j, so `before` reduces to a plain `<` on distances (and unused slots
// hold the radius, which any accepted d2 is below). Half the instructions of
// the general insert in the scan's inner loop.
template <int K>
JW_HD void insert_ascending(float d2, int j, float* bd, int* bi) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
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

template <int K, class M>
JW_HD void brute_nearest(int n, const float* xs, const float* ys, M&& member, int self, float x,
                         float y, float r2, int32_t* out) {
  float bd[K];
  int bi[K];
  for (int m = 0; m < K; ++m) {
    bd[m] = r2;
    bi[m] = 0x7FFFFFFF;
  }
  for (int j = 0; j < n; ++j) {
    const float d2 = sq_dist(x, y, xs[j], ys[j]);  // same j across a warp: broadcast reads
    if (d2 < bd[K - 1] && j != self && member(j)) insert_ascending<K>(d2, j, bd, bi);
  }
  for (int m = 0; m < K; ++m) out[m] = bi[m] == 0x7FFFFFFF ? kNoNeighbour : bi[m];
}

// k > 16: k passes, each taking the next agent in (d2, id) order.
template <class Q>
JW_HD void select_nearest(int n, Q&& dist2, int self, float r2, int k, int32_t* out) {
  float last_d = -1.0f;
  int last_j = -1;
  for (int s = 0; s < k; ++s) {
    float best_d = r2;
    int best_j = kNoNeighbour;
    for (int j = 0; j < n; ++j) {
      if (j == self) continue;
      const float d2 = dist2(j);  // +inf for non-members
      const bool after = d2 > last_d || (d2 == last_d && j > last_j);
      if (after && d2 < best_d) {
        best_d = d2;
        best_j = j;
      }
    }
    out[s] = best_j;
    if (best_j != kNoNeighbour) {
      last_d = best_d;
      last_j = best_j;
    }
  }
}
}  // namespace detail

// The k nearest members j != self of (x, y) with squared distance < r2
// (INFINITY: no radius), nearest first, ties to the lower id; out[0..k) gets
// their ids, kNoNeighbour where fewer exist. With `grid` (built this pass)
// the search visits cells in rings; without (nullptr) it scans all n agents.
// k <= 16 keeps the candidate list in registers (one instantiation per k).
template <class M>
JW_HD void k_nearest(const NeighbourGrid* grid, int n, const float* xs, const float* ys,
                     M&& member, int self, float x, float y, float r2, int k, int32_t* out) {
#define JW_KN_CASE(K)                                                             \
  case K:                                                                         \
    if (grid) detail::grid_nearest<K>(*grid, self, x, y, r2, out);                \
    else detail::brute_nearest<K>(n, xs, ys, member, self, x, y, r2, out);        \
    return;
  switch (k) {
    JW_KN_CASE(1) JW_KN_CASE(2) JW_KN_CASE(3) JW_KN_CASE(4) JW_KN_CASE(5) JW_KN_CASE(6)
    JW_KN_CASE(7) JW_KN_CASE(8) JW_KN_CASE(9) JW_KN_CASE(10) JW_KN_CASE(11) JW_KN_CASE(12)
    JW_KN_CASE(13) JW_KN_CASE(14) JW_KN_CASE(15) JW_KN_CASE(16)
    default:
      detail::select_nearest(
          n,
          [&](int j) {
            return member(j) ? detail::sq_dist(x, y, xs[j], ys[j]) : INFINITY;
          },
          self, r2, k, out);
  }
#undef JW_KN_CASE
}

}  // namespace jaxwarp
