// The fused rollout: `steps` steps of act-and-step in one call. Per step and
// env: the policy's forward pass (jaxwarp.train.models.MLPActorCritic: one
// or two towers of dense layers, a policy head and a value head), one
// categorical draw per action head (cuda/sampler.h, the draws of
// jaxwarp.sample_actions for the same keys), and the env's step (the templates
// of cuda/jaxwarp_kernels.h: the same code as the step kernel), writing the
// trajectory as it goes. On the GPU one launch runs every step: the state
// stays in shared memory (staged envs) or in place from step to step, and the
// forward pass runs over the block's agents with the whole block's threads.
//
// Python: jaxwarp.train.fused (which models and configs qualify; the packing
// of the parameters) and ContractEnv.rollout_call (the buffers).
//
// Trajectory buffers are step-major, [steps, envs, ...], with `envs` every
// vmap member's envs (members fold into the env axis as in the step call);
// the keys are [steps, members, ...] so that a step's keys are one run.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <vector>

#include "jaxwarp_kernels.h"
#include "sampler.h"

namespace jaxwarp {
namespace fused {

// The model's limits (hidden layers, units per layer) and activation codes:
// jaxwarp.train.fused reads them from this text (jaxwarp._ffi.header_constants:
// keep each one `constexpr int kName = <integer>;` on one line).
constexpr int kMaxLayers = 4;
constexpr int kMaxWidth = 1024;
constexpr int kActTanh = 0;
constexpr int kActRelu = 1;
constexpr int kActNone = -1;
// Threads of a fused block at least (agents beyond the env's own threads
// only help with the forward pass), and the shared memory its forward pass
// may take (rows in passes beyond that).
constexpr int kMinThreads = 128;
// Rows (agents of the block's envs) a block takes at most where envs are
// many: the blocks then outnumber the SMs several times over, so that an SM
// has warps to switch to while others wait on loads and barriers (at two
// blocks of 128 threads per SM, 10 seeds of 2,048 CartPoles took 9 ms a
// rollout against 1.4 ms step by step; docs/decisions.md).
constexpr int kMaxBlockRows = 16;
constexpr int kMlpBudget = 64 * 1024;
constexpr int kSmemLimit = 227 * 1024;  // H100/A100 opt-in maximum per block

// Every group's model: one architecture, parameters side by side.
struct Mlp {
  int32_t in_dim, layers, shared, act, logits, groups;
  int32_t width[kMaxLayers];
  int32_t hidden_max;  // widest hidden layer (1 without)
  int64_t per_group;   // floats of one group's parameters
  // Float offsets within a group's parameters, in the order of the model's
  // Dense_<i> layers: tower k (0: actor, 1: critic) layer i's kernel
  // [in, out] (row-major) then bias [out]; then the policy head, the value head.
  int64_t kern[2][kMaxLayers], bias[2][kMaxLayers];
  int64_t pol_k, pol_b, val_k, val_b;
};

JW_HD int towers(const Mlp& m) { return m.shared || m.layers == 0 ? 1 : 2; }
JW_HD int layer_in(const Mlp& m, int i) { return i == 0 ? m.in_dim : m.width[i - 1]; }
JW_HD int last_width(const Mlp& m) {
  return m.layers ? m.width[m.layers - 1] : m.in_dim;
}

// From the attribute words [in_dim, layers, shared, act, logits, groups,
// width_0 .. width_{layers-1}]. Returns false where they do not describe one.
inline bool make_mlp(const int32_t* w, size_t count, Mlp* m) {
  if (count < 6) return false;
  *m = Mlp{};
  m->in_dim = w[0];
  m->layers = w[1];
  m->shared = w[2];
  m->act = w[3];
  m->logits = w[4];
  m->groups = w[5];
  if (m->layers < 0 || m->layers > kMaxLayers || count != static_cast<size_t>(6 + m->layers) ||
      m->in_dim < 1 || m->logits < 1 || m->groups < 1 ||
      (m->act != kActTanh && m->act != kActRelu))
    return false;
  m->hidden_max = 1;
  for (int i = 0; i < m->layers; ++i) {
    m->width[i] = w[6 + i];
    if (m->width[i] < 1 || m->width[i] > kMaxWidth) return false;
    if (m->width[i] > m->hidden_max) m->hidden_max = m->width[i];
  }
  // Flax creates both towers' layers unless the torso is shared (with no
  // hidden layers the towers are empty).
  const int built = m->shared ? 1 : 2;
  int64_t off = 0;
  for (int k = 0; k < built; ++k)
    for (int i = 0; i < m->layers; ++i) {
      m->kern[k][i] = off;
      off += static_cast<int64_t>(layer_in(*m, i)) * m->width[i];
      m->bias[k][i] = off;
      off += m->width[i];
    }
  const int last = last_width(*m);
  m->pol_k = off;
  off += static_cast<int64_t>(last) * m->logits;
  m->pol_b = off;
  off += m->logits;
  m->val_k = off;
  off += last;
  m->val_b = off;
  off += 1;
  m->per_group = off;
  return true;
}

JW_HD float activate(int act, float x) {
  if (act == kActTanh) return tanhf(x);
  if (act == kActRelu) return x > 0.0f ? x : 0.0f;
  return x;
}

// y[j] = act(b[j] + sum_i x[i] W[i][j]) for j < out, the sum in order of i
// (the CPU path: a row of W at a time, so that the compiler vectorises over j).
inline void dense_row(const float* x, int in, const float* W, const float* b, int out,
                      float* y, int act) {
  for (int j = 0; j < out; ++j) y[j] = b[j];
  for (int i = 0; i < in; ++i) {
    const float xi = x[i];
    const float* w = W + static_cast<int64_t>(i) * out;
    for (int j = 0; j < out; ++j) y[j] += xi * w[j];
  }
  if (act != kActNone)
    for (int j = 0; j < out; ++j) y[j] = activate(act, y[j]);
}

// One agent's forward pass (the CPU path): x f32[in_dim] -> logits
// f32[logits], *value. w: its group's parameters; buf: 2 * hidden_max floats.
inline void mlp_row(const Mlp& m, const float* w, const float* x, float* buf, float* logits,
                    float* value) {
  for (int k = 0; k < towers(m); ++k) {
    const float* h = x;
    for (int i = 0; i < m.layers; ++i) {
      float* y = buf + (i & 1) * m.hidden_max;
      dense_row(h, layer_in(m, i), w + m.kern[k][i], w + m.bias[k][i], m.width[i], y, m.act);
      h = y;
    }
    if (k == 0) dense_row(h, last_width(m), w + m.pol_k, w + m.pol_b, m.logits, logits, kActNone);
    if (k == towers(m) - 1)
      dense_row(h, last_width(m), w + m.val_k, w + m.val_b, 1, value, kActNone);
  }
}

// The fused call's own buffers and sizes (beside the env's Call).
struct Rollout {
  const uint32_t* env_keys;   // [steps][members][3]: each step's env key words and env offset
  const uint32_t* head_keys;  // [steps][members][heads][2]: the sampler's head keys
  const float* weights;       // [members][groups][per_group]
  const int32_t* agent_group;  // [n]: each agent's policy group
  const float* obs0;          // [envs, n, obs_dim]: the observations of step 0
  float* traj_obs;            // [steps, envs, n, obs_dim]: the observation acted on
  float* next_obs;            // [envs, n, obs_dim]: after the last step
  int32_t* actions;           // [steps, envs, n, heads]
  float* log_prob;            // [steps, envs, n]
  float* value;               // [steps, envs, n]
  float* reward;              // [steps, envs, n]
  float* ep_return;           // [steps, envs, n]: episode_return after each step
  bool* done;                 // [steps, envs]
  int32_t steps, members, partitionable;
  int32_t nvec[sampler::kMaxHeads], head_offset[sampler::kMaxHeads];
  Mlp mlp;
  int32_t chunk_rows;     // GPU: rows per forward pass over the block's agents
  int32_t mlp_smem_word;  // GPU: where the forward pass's shared memory starts
};

// Agent `agent` of env e (member `mem`, env `local` within it) at step t:
// actions, log_prob, value from its logits row (the sampler's draws: row
// local * n + agent of the member's [envs * n] draw).
JW_HD void draw_row(const Rollout& ro, const Call& c, int t, int64_t e, int agent,
                           const float* logits, float value) {
  const int64_t mem = e / c.per_member, local = e - mem * c.per_member;
  const uint32_t* hk = ro.head_keys + (static_cast<int64_t>(t) * ro.members + mem) * c.heads * 2;
  const int64_t row = local * c.n + agent;
  const int64_t draw_rows = c.per_member * c.n;
  const int64_t at = (static_cast<int64_t>(t) * c.envs + e) * c.n + agent;
  float lp = 0.0f;
  for (int h = 0; h < c.heads; ++h) {
    const int nv = ro.nvec[h];
    const sampler::HeadSample hs = sampler::sample_head(
        logits + ro.head_offset[h], nv, hk[2 * h], hk[2 * h + 1],
        static_cast<uint64_t>(row) * nv, static_cast<uint64_t>(draw_rows) * nv,
        ro.partitionable != 0);
    ro.actions[at * c.heads + h] = hs.action;
    lp = h == 0 ? hs.log_prob : lp + hs.log_prob;
  }
  ro.log_prob[at] = lp;
  ro.value[at] = value;
}

// Agent i's episode return so far (0 for an env without the field).
template <class E>
JW_HD float episode_return_of(const typename E::State& s, int i) {
  if constexpr (E::kEpisodeReturns) return E::episode_return(s)[i];
  else return 0.0f;
}

// Step t's Call: the base call with this step's keys and output rows.
JW_HD Call step_call(const Call& base, const Rollout& ro, int t) {
  Call c = base;
  const int64_t rows = c.envs * c.n;
  c.keys = ro.env_keys + static_cast<int64_t>(t) * ro.members * 3;
  c.actions = ro.actions + t * rows * c.heads;
  c.obs = t + 1 < ro.steps ? ro.traj_obs + (t + 1) * rows * c.obs_dim : ro.next_obs;
  c.reward = ro.reward + t * rows;
  c.done = ro.done + t * c.envs;
  return c;
}

// ---------------------------------------------------------------------------
// XLA:CPU: each env's steps in turn, its agents in order.
// ---------------------------------------------------------------------------
template <class E>
void rollout_env_cpu(const typename E::Params& p, const Call* calls, const Rollout& ro,
                     int64_t e, int worker, bool rows) {
  const Call& c = calls[0];
  const int n = c.n, dim = c.obs_dim;
  const Mlp& m = ro.mlp;
  const int64_t row_words = static_cast<int64_t>(n) * dim;
  memcpy(ro.traj_obs + e * row_words, ro.obs0 + e * row_words, 4 * row_words);
  thread_local std::vector<float> buf, logits;
  buf.resize(2 * m.hidden_max);
  logits.resize(m.logits);
  const int64_t mem = e / c.per_member;
  const typename E::State s = state_at<E>(c.base, c.stride, e, worker);
  for (int t = 0; t < ro.steps; ++t) {
    const float* obs = ro.traj_obs + (static_cast<int64_t>(t) * c.envs + e) * row_words;
    for (int i = 0; i < n; ++i) {
      const float* w = ro.weights + (mem * m.groups + ro.agent_group[i]) * m.per_group;
      float value = 0.0f;
      mlp_row(m, w, obs + static_cast<int64_t>(i) * dim, buf.data(), logits.data(), &value);
      draw_row(ro, c, t, e, i, logits.data(), value);
    }
    step_env_cpu<E>(p, calls[t], e, worker, rows);
    for (int i = 0; i < n; ++i)
      ro.ep_return[(static_cast<int64_t>(t) * c.envs + e) * n + i] = episode_return_of<E>(s, i);
  }
}

#if defined(__CUDACC__)
// ---------------------------------------------------------------------------
// CUDA: the env's threads as in the step kernel, in blocks of at least
// kMinThreads threads; the forward pass over the block's agents (rows) in
// passes of chunk_rows rows, every thread of the block taking (row, unit)
// pairs of a layer in turn (consecutive threads, consecutive units: the
// weights' loads coalesce, the row's input is one shared-memory broadcast).
// ---------------------------------------------------------------------------
// y[r][j] = act(b[j] + sum_i x[r][i] W[i][j]) for the pass's rows; row r's
// input at x + xrow[r] (xrow null: x + r * xs); param[r]: row r's group
// parameters (its member's and its agent's group's). A thread takes unit j of
// kRowTile consecutive rows, in runs of rows that share their parameters
// (act_block orders a block's rows agent by agent, so a tile is nearly always
// one run): each weight it loads serves every row of the run, and the run's
// rows are independent chains of multiply-adds (slots past the run repeat
// its first row and are not stored). Every row sums in the same order as
// alone (bias, then inputs 0, 1, ...), so neither the tiles nor the row order
// change a bit of y.
constexpr int kRowTile = 4;

__device__ inline void dense_rows(int rows, const float* x, int xs, const int32_t* xrow,
                                  const int64_t* param, const float* weights, int64_t kern,
                                  int64_t bias, int in, int out, float* y, int ys, int act) {
  const int tiles = (rows + kRowTile - 1) / kRowTile;
  for (int idx = threadIdx.x; idx < tiles * out; idx += blockDim.x) {
    const int t = idx / out, j = idx - t * out;
    const int r0 = t * kRowTile;
    const int nr = rows - r0 < kRowTile ? rows - r0 : kRowTile;
    for (int q0 = 0; q0 < nr;) {
      const int64_t p0 = param[r0 + q0];
      int len = 1;
      while (q0 + len < nr && param[r0 + q0 + len] == p0) ++len;
      const float* xr[kRowTile];
#pragma unroll
      for (int q = 0; q < kRowTile; ++q) {
        const int r = r0 + q0 + (q < len ? q : 0);
        xr[q] = x + (xrow ? static_cast<int64_t>(xrow[r]) : static_cast<int64_t>(r) * xs);
      }
      const float* w = weights + p0;
      const float* wk = w + kern + j;
      const float b = __ldg(w + bias + j);
      float acc[kRowTile];
#pragma unroll
      for (int q = 0; q < kRowTile; ++q) acc[q] = b;
      for (int i = 0; i < in; ++i) {
        const float wi = __ldg(wk + static_cast<int64_t>(i) * out);
#pragma unroll
        for (int q = 0; q < kRowTile; ++q) acc[q] = fmaf(xr[q][i], wi, acc[q]);
      }
#pragma unroll
      for (int q = 0; q < kRowTile; ++q)
        if (q < len) y[static_cast<int64_t>(r0 + q0 + q) * ys + j] = activate(act, acc[q]);
      q0 += len;
    }
  }
}

// Pass row q of a block's rows (of envs [first, first + envs_here)): agent by
// agent, each agent's envs in order, so that consecutive rows share their
// agent and hence their parameters (env by env, a Tag duel's taggers and
// runners alternate within every tile of four).
struct PassRow {
  int64_t e;  // the env
  int agent;
};
__device__ inline PassRow pass_row(int64_t first, int64_t envs_here, int64_t q) {
  const int64_t agent = q / envs_here;
  return PassRow{first + (q - agent * envs_here), static_cast<int>(agent)};
}

// Step t's actions, log-probs and values of the block's envs [first,
// first + envs_here); ends on a barrier.
__device__ inline void act_block(const Call& c, const Rollout& ro, int t, int32_t* smem,
                                 int64_t first, int64_t envs_here) {
  const Mlp& m = ro.mlp;
  const int n = c.n, dim = c.obs_dim;
  const int R = ro.chunk_rows, H = m.hidden_max, A = m.logits;
  int64_t* param = reinterpret_cast<int64_t*>(smem);
  int32_t* xrow = smem + 2 * R;
  float* buf0 = reinterpret_cast<float*>(smem + 3 * R);
  float* buf1 = buf0 + static_cast<int64_t>(R) * H;
  float* logits = buf1 + static_cast<int64_t>(R) * H;
  float* value = logits + static_cast<int64_t>(R) * A;
  const int64_t rows = envs_here * n;
  const float* obs = ro.traj_obs + (static_cast<int64_t>(t) * c.envs + first) * n * dim;
  for (int64_t r0 = 0; r0 < rows; r0 += R) {
    const int rc = static_cast<int>(rows - r0 < R ? rows - r0 : R);
    for (int r = threadIdx.x; r < rc; r += blockDim.x) {
      const PassRow pr = pass_row(first, envs_here, r0 + r);
      param[r] = (pr.e / c.per_member * m.groups + ro.agent_group[pr.agent]) * m.per_group;
      xrow[r] = static_cast<int32_t>(((pr.e - first) * n + pr.agent) * dim);
    }
    __syncthreads();
    for (int k = 0; k < towers(m); ++k) {
      const float* x = obs;
      const int32_t* xr = xrow;
      int xs = dim;
      for (int i = 0; i < m.layers; ++i) {
        float* y = (i & 1) ? buf1 : buf0;
        dense_rows(rc, x, xs, xr, param, ro.weights, m.kern[k][i], m.bias[k][i],
                   layer_in(m, i), m.width[i], y, H, m.act);
        __syncthreads();
        x = y;
        xr = nullptr;
        xs = H;
      }
      if (k == 0)
        dense_rows(rc, x, xs, xr, param, ro.weights, m.pol_k, m.pol_b, last_width(m), A,
                   logits, A, kActNone);
      if (k == towers(m) - 1)
        dense_rows(rc, x, xs, xr, param, ro.weights, m.val_k, m.val_b, last_width(m), 1,
                   value, 1, kActNone);
      __syncthreads();
    }
    for (int r = threadIdx.x; r < rc; r += blockDim.x) {
      const PassRow pr = pass_row(first, envs_here, r0 + r);
      draw_row(ro, c, t, pr.e, pr.agent, logits + static_cast<int64_t>(r) * A, value[r]);
    }
    __syncthreads();
  }
}

template <class E, bool Staged, bool Shared>
__device__ inline void rollout_kernel_body(const Call& c, const Layout& l, const Rollout& ro) {
  extern __shared__ __align__(16) int32_t jw_smem[];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * l.epb;
  Lane w = lane_of(l, c.envs);
  if (w.le >= l.epb) {
    // A thread beyond the env layout's (there for the forward pass): inactive,
    // with the block's first env's view (its state, flags and team words), and
    // a lane past the env's threads, so that it reads what that env's threads
    // read (and takes the same turns through the team's barriers) and writes
    // nothing of it (every write of the env code is an active thread's, or
    // lane 0's of a team).
    w.lane = l.tpe + static_cast<int>(threadIdx.x) - l.tpe * l.epb;
    w.le = 0;
    w.e = first;
    w.active = false;
  }
  ParamsIn<E, Shared> p = params_for<E, Shared>(c, w.e);
  int32_t* flags = jw_smem + kTeamWords * w.le;
  typename E::State g;
  const typename E::State s = bind_env<E, Staged>(c, l, w, jw_smem, &g);
  const Team team{c.n, w.lane, l.tpe, w.active, flags + 2};
  if (Staged) copy_fields<E, true>(c, w, l.tpe, s, g);
  const int64_t envs_here = c.envs - first < l.epb ? c.envs - first : l.epb;
  const int64_t row_words = static_cast<int64_t>(c.n) * c.obs_dim;
  for (int64_t j = threadIdx.x; j < envs_here * row_words; j += blockDim.x)
    ro.traj_obs[first * row_words + j] = ro.obs0[first * row_words + j];
  __syncthreads();
  for (int t = 0; t < ro.steps; ++t) {
    act_block(c, ro, t, jw_smem + ro.mlp_smem_word, first, envs_here);
    const Call ct = step_call(c, ro, t);
    uint32_t k0 = 0, k1 = 0, env = 0;
    if (w.active) member_of(ct, w.e, &k0, &k1, &env);
    if (w.lane == 0 && w.le < l.epb) flags[0] = flags[1] = 0;
    const StepEnd r = step_block<E>(p, s, ct, l, w, team, flags, k0, k1, env);
    detail::run_team_pass<E>(p, s, team, kBeforeObserve);
    observe_block<E, Staged>(p, s, ct, l, w, jw_smem, Agent{env, 0, c.n, k0, k1, 0u});
    write_done(ct, w, r);
    if (w.active) {
      for (int i = w.lane; i < c.n; i += l.tpe)
        ro.ep_return[(static_cast<int64_t>(t) * c.envs + w.e) * c.n + i] =
            episode_return_of<E>(s, i);
    }
    __syncthreads();  // this step's observations are out before the next acts on them
  }
  if (Staged) copy_fields<E, false>(c, w, l.tpe, g, s);
}

// Threads of a fused block: the env layout's, at least kMinThreads, whole warps.
inline int rollout_threads(const Layout& l) {
  int t = l.tpe * l.epb;
  t = t < kMinThreads ? kMinThreads : t;
  return (t + 31) / 32 * 32;
}
#endif  // __CUDACC__

}  // namespace fused
}  // namespace jaxwarp
