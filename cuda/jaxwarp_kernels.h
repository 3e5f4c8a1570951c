// The kernels, the CPU loop and the launch layout of every jaxwarp env,
// templated on the env. jaxwarp.authoring generates, per env, only what is
// specific to it (the Params and State structs, a traits struct `Env`, and
// the FFI binding of its buffers and attributes) and instantiates these
// templates; a reader can follow an env's step from here, and compiler errors
// in an env header point into this file's calls.
//
// The traits struct an env's generated code provides:
//   struct Env {
//     using Params = ...; using State = ...;
//     static constexpr int kFields;       // state fields, then scratch fields
//     static constexpr int kStateFields;  // the first kStateFields are JAX buffers
//     static constexpr int kStepPhases;
//     static constexpr unsigned kTeamPassPhases;  // bit p: a team pass after phase p
//     JW_HD static State bind(int32_t* const* field);  // State from field pointers
//     JW_HD static void pointers(const State&, int32_t** field);  // and back
//     // What the kernels keep (detail::advance_step and the others below):
//     static constexpr bool kCountsSteps;     // the state has `timestep`
//     static constexpr bool kEpisodeReturns;  // the state has `episode_return`
//     static constexpr bool kTimeLimit;       // the spec names a time_limit param
//     JW_HD static int32_t* timestep(const State&);     // (nullptr without)
//     JW_HD static float* episode_return(const State&);
//     JW_HD static int32_t time_limit(const Params&);
//   };
// and the env header's reset/step and observe or observe_part (and
// optionally team_pass), found by argument-dependent lookup on Params.
//
// Fields are 4-byte words (f32, i32, u32). Field f of env e starts at word
// e * per_env[f] of its buffer (per_env: n for per-agent fields, 1 for
// per-env fields, count * n or count for scratch arrays).
//
// The measured choices behind the constants and code paths below (shared-memory
// budgets, launch bounds, copy order, observation paths) and the alternatives
// that lost: docs/decisions.md, "Kernels".
#pragma once

#include <stdint.h>
#include <string.h>

#include <atomic>
#include <type_traits>
#include <utility>
#include <vector>

#include "jaxwarp_env.h"
#include "jaxwarp_team.h"

#if defined(__CUDACC__)
#include <cuda_pipeline.h>  // cp.async (copy_fields)
#endif

// Loops over an env's fields are unrolled on the GPU: their trip counts are
// compile-time constants, so pointer arrays and the State stay in registers
// (a run-time index would put them in local memory).
#if defined(__CUDA_ARCH__)
#define JW_UNROLL _Pragma("unroll")
#else
#define JW_UNROLL
#endif

namespace jaxwarp {

constexpr int kMaxFields = 64;

// Launch layout, computed in one place (layout_for) on the host, used by the
// launcher and exported by every built library (jaxwarp_<env>_layout) for
// the PyCUDA bridge and for Python, which sizes the scratch buffer from it.
struct Layout {
  int32_t tpe;         // threads per env (agents beyond it loop)
  int32_t epb;         // envs per block
  int32_t staged;      // 1: each env's state and scratch live in shared memory
  int32_t obs_staged;  // 1: row-wise observations go through shared memory
  int32_t words;       // 4-byte words of one env's state + scratch
  int32_t scratch_words;  // of which scratch
  int32_t smem_bytes;  // dynamic shared memory per block
};

constexpr int kTeamWords = 4;            // per env: term, trunc flags, 2 reduction words
// Shared memory per block, in bytes: state + scratch staging, and all of
// shared memory: 2 blocks per H100 SM.
constexpr int kStagingBudget = 110 * 1024;
// Observation rows staged per pass: small enough that shared memory does not
// cut the blocks an SM holds (Tag, 110 agents: rows in two passes keep 8
// blocks per SM; all rows at once would cut them to 5).
constexpr int kObsBudget = 16 * 1024;
// A pass of staged rows keeps at least 1/kObsBusy of the env's threads busy
// (else the rows are written as parts): fewer, fuller passes beat more
// blocks per SM.
constexpr int kObsBusy = 2;

// Threads per env: one per agent, at most kMaxThreads (more agents loop);
// envs per block: about kBlockThreads threads. The kernels are compiled for
// blocks of at most kMaxThreads (__launch_bounds__), which caps their
// registers.
constexpr int kMaxThreads = 512;
// Threads per block where envs are smaller (several envs per block): each
// warp's chain of dependent steps, not the SMs in use, sets the time, so
// neither smaller blocks nor more of them where few envs leave SMs idle
// help.
constexpr int kBlockThreads = 128;

// max_epb > 0 caps the envs per block (the fused rollout spreads few envs
// over more blocks: cuda/jaxwarp_fused.h).
inline Layout layout_for(int n, int obs_dim, int fields, const int32_t* per_env,
                         int state_fields, int max_epb = 0) {
  Layout l{};
  l.tpe = n < kMaxThreads ? n : kMaxThreads;
  l.epb = l.tpe >= kBlockThreads ? 1 : kBlockThreads / l.tpe;
  if (max_epb > 0 && l.epb > max_epb) l.epb = max_epb;
  int64_t words = 0, scratch = 0;
  for (int f = 0; f < fields; ++f) {
    words += per_env[f];
    if (f >= state_fields) scratch += per_env[f];
  }
  l.words = static_cast<int32_t>(words);
  l.scratch_words = static_cast<int32_t>(scratch);
  const int64_t team = static_cast<int64_t>(kTeamWords) * l.epb;
  // A single agent shares nothing with other threads: nothing to stage
  // unless it has scratch.
  const bool want = n > 1 || scratch > 0;
  l.staged = want && 4 * (team + words * l.epb) <= kStagingBudget;
  const int64_t used = 4 * (team + (l.staged ? words * l.epb : 0));
  // Observation rows: staged in shared memory, R rows per pass, where a pass
  // keeps at least half of the env's threads busy and at least a warp's
  // worth of rows fit (all of the block's rows at once with several envs
  // per block); they start on a 16-byte boundary, with 4 words of slack so
  // that the copy out can shift them into line with the output (float4).
  // (Tag at 1000 agents has no room beside its staged state; its parts go
  // straight to the output: passes through scratch cost more barriers than
  // the coalesced stores save.)
  const int64_t obs_at = (used + 15) / 16 * 16;
  int64_t room = kStagingBudget - obs_at;
  room = room < kObsBudget ? room : kObsBudget;
  const int64_t block_rows = static_cast<int64_t>(l.epb) * n;
  int64_t rows = obs_dim > 0 && room > 16 ? (room / 4 - 4) / obs_dim : 0;
  rows = rows < block_rows ? rows : block_rows;
  const int64_t busy = (block_rows < l.tpe ? block_rows : l.tpe) / kObsBusy;
  const int64_t need = l.epb > 1 ? block_rows
                                 : (block_rows < 32 ? block_rows : (busy > 32 ? busy : 32));
  l.obs_staged = obs_dim > 0 && rows >= need;
  l.smem_bytes = static_cast<int32_t>(l.obs_staged ? obs_at + 4 * (rows * obs_dim + 4) : used);
  return l;
}

// Word offset of the staged observation rows in a block's shared memory.
JW_HD int64_t obs_stage_word(const Layout& l) {
  return (static_cast<int64_t>(kTeamWords) * l.epb + (l.staged ? l.words * l.epb : 0) + 3) / 4 * 4;
}

// Observation rows staged per pass (what layout_for made room for).
JW_HD int obs_rows_per_pass(const Layout& l, int obs_dim) {
  return static_cast<int>((l.smem_bytes / 4 - obs_stage_word(l) - 4) / obs_dim);
}

// Optional parts of an env header, detected by ADL on its Params.
namespace detail {
template <class E, class = void>
struct has_team_pass : std::false_type {};
template <class E>
struct has_team_pass<E, std::void_t<decltype(team_pass(
                            std::declval<const typename E::Params&>(),
                            std::declval<const typename E::State&>(), std::declval<const Team&>(),
                            0))>> : std::true_type {};
template <class E, class = void>
struct has_observe : std::false_type {};
template <class E>
struct has_observe<E, std::void_t<decltype(observe(std::declval<const typename E::Params&>(),
                                                   std::declval<const typename E::State&>(),
                                                   std::declval<const Agent&>(),
                                                   std::declval<float*>()))>> : std::true_type {};
// observe_part(p, s, a, part, put) with put(col, value): detected with this
// stand-in for the kernel's writers.
struct PutProbe {
  JW_HD void operator()(int, float) const {}
};
template <class E, class = void>
struct has_observe_part : std::false_type {};
template <class E>
struct has_observe_part<E, std::void_t<decltype(observe_part(
                               std::declval<const typename E::Params&>(),
                               std::declval<const typename E::State&>(),
                               std::declval<const Agent&>(), 0, std::declval<PutProbe&>()))>>
    : std::true_type {};

template <class E>
JW_HD void run_team_pass(const typename E::Params& p, const typename E::State& s, const Team& t,
                         int phase) {
  if constexpr (has_team_pass<E>::value) {
    team_pass(p, s, t, phase);
    t.sync();
  }
}

// What the kernels keep for every env whose state (and spec) has it, so that
// no env header writes it (cuda/jaxwarp_env.h): the step counter, the time
// limit and the episode returns. Per-env words (the counter) are written by
// one thread of the env, agent a's return by the thread that runs agent a.

// A fresh start: timestep 0 (before the agents' reset()).
template <class E>
JW_HD void restart_clock(const typename E::State& s) {
  if constexpr (E::kCountsSteps) E::timestep(s)[0] = 0;
}

// Before a step's first phase: the counter advances, so that step() reads the
// number of the step it runs (1 for an episode's first). Returns it.
template <class E>
JW_HD int32_t advance_step(const typename E::State& s) {
  if constexpr (E::kCountsSteps) return E::timestep(s)[0] += 1;
  else return 0;
}

// After the phases of step number t: the time limit (the spec's time_limit
// param) is reached.
template <class E>
JW_HD bool time_up(const typename E::Params& p, int32_t t) {
  if constexpr (E::kTimeLimit) return t >= E::time_limit(p);
  else return false;
}

// After the phases of step number t: agent i's return with this step's
// reward (its rewards of all phases, summed as the reward output is). The
// first step of an episode restarts it, so after an episode's last step it
// holds that episode's return until the next step.
template <class E>
JW_HD void add_return(const typename E::State& s, int i, int32_t t, float reward) {
  if constexpr (E::kEpisodeReturns) {
    float* ret = E::episode_return(s);
    ret[i] = (t == 1 ? 0.0f : ret[i]) + reward;
  }
}
}  // namespace detail

// An env defines observe() (a whole row per agent), observe_part() (part of
// a row: Tag's parts are the 7 features of one observed agent), or both.
// Rows need shared memory to leave the GPU as coalesced stores; parts are
// written straight to global memory, the parts of a row on consecutive
// threads. Rows are used where layout_for stages them (Layout::obs_staged:
// the rows fit, in passes that keep half of the env's threads busy) and
// parts otherwise, on the CPU as on the GPU, so both backends always run the
// same code for the same sizes. An env with observe_part() alone has rows
// too: its parts in order.
template <class E>
JW_HD constexpr bool part_observe() {
  return detail::has_observe_part<E>::value;
}
// Rows for this call: always without observe_part(), else where they are
// staged.
template <class E>
JW_HD bool use_rows(const Layout& l) {
  if constexpr (!part_observe<E>()) return true;
  else return l.obs_staged != 0;
}

// Agent a's parts in order, every column through put(col, value).
template <class E, class Put>
JW_HD void observe_all_parts(const typename E::Params& p, const typename E::State& s,
                             const Agent& a, Put&& put) {
  const int parts = observe_parts(p);
  for (int q = 0; q < parts; ++q) observe_part(p, s, a, q, put);
}

// Agent a's whole row into row[0..obs_dim) (f32): observe(), else its parts
// in order.
template <class E>
JW_HD void observe_row(const typename E::Params& p, const typename E::State& s, const Agent& a,
                       float* row) {
  if constexpr (detail::has_observe<E>::value) {
    observe(p, s, a, row);
  } else {
    static_assert(part_observe<E>(),
                  "jaxwarp: the env header defines neither observe() nor observe_part()");
    observe_all_parts<E>(p, s, a, [row](int col, float v) { row[col] = v; });
  }
}

// Pointers of env e's fields: base + e * stride (scratch: env `scratch_env`'s).
template <class E>
JW_HD typename E::State state_at(int32_t* const* base, const int32_t* stride, int64_t e,
                                 int64_t scratch_env) {
  int32_t* ptr[E::kFields];
  JW_UNROLL
  for (int f = 0; f < E::kFields; ++f)
    ptr[f] = base[f] ? base[f] + (f < E::kStateFields ? e : scratch_env) * stride[f] : nullptr;
  return E::bind(ptr);
}

// Call arguments shared by the CPU loop and the kernels.
struct Call {
  int64_t envs;        // envs of this call (all vmap members)
  int64_t per_member;  // envs per key (vmap folds members into the env axis)
  const uint32_t* keys;  // [members][3]: key words, global index of the first env
  int n, obs_dim, heads;
  int autoreset;           // step: 1 resets done envs (the default), 0 leaves them
                           // as they ended (observations of the final state)
  int obs_bf16;            // 1: obs is bf16[envs, n, obs_dim] (rounded to nearest even)
  const int32_t* actions;  // [envs, n, heads] (step only)
  float* obs;              // [envs, n, obs_dim] (bf16 bits where obs_bf16)
  float* reward;           // [envs, n]
  bool *done, *term, *trunc;  // [envs]
  int32_t* base[kMaxFields];  // field buffers (scratch: its buffer, or null when staged)
  int32_t per_env[kMaxFields];  // words of one env's field
  int32_t stride[kMaxFields];   // words from env e to e + 1 in its buffer
  int32_t offset[kMaxFields];   // words from an env's staged block to the field
                                // (prefix sums of per_env, kept here so that a
                                // State pointer costs one add, also when the
                                // compiler rematerializes it)
  // The env's Params, one row of 4-byte words per vmap member (the params
  // operand, i32[members, words]: data, so that one program runs envs of
  // several settings); params_stride words from a member's row to the
  // next, 0 where every member reads the one row.
  const int32_t* params;
  int64_t params_stride;
};

// Observation element idx of the call's output, in its dtype.
JW_HD void put_obs(const Call& c, int64_t idx, float v) {
  if (c.obs_bf16) reinterpret_cast<uint16_t*>(c.obs)[idx] = bf16_bits(v);
  else c.obs[idx] = v;
}

// The Params of env e: its member's row of c.params (an e past the last
// env, an inactive thread's, reads the last env's). Rows are 4-byte words
// and Params has only 4-byte members, so a row is a Params in place.
template <class E>
JW_HD const typename E::Params& params_at(const Call& c, int64_t e) {
  e = e < c.envs ? e : c.envs - 1;
  const int64_t m = c.params_stride == 0 || c.per_member == c.envs ? 0 : e / c.per_member;
  return *reinterpret_cast<const typename E::Params*>(c.params + m * c.params_stride);
}

// How a kernel holds its env's Params: a reference into the params operand
// where every member shares its one row (Shared: loads from one address for
// all threads) or where they hold tables (Tag's accel and turn: a copy would
// go to local memory); otherwise a copy of its member's row (small: their
// members live in registers).
constexpr size_t kParamsCopyBytes = 64 * 4;
template <class E, bool Shared>
using ParamsIn = std::conditional_t<(!Shared && sizeof(typename E::Params) <= kParamsCopyBytes),
                                    const typename E::Params, const typename E::Params&>;

// The Params a kernel's thread reads. Shared (the operand holds one row for
// every member, params_stride == 0: a plain run): the row at c.params, an
// address the same for every thread, so the compiler keeps what it reads
// uniform, as it did for a by-value kernel argument. Otherwise env e's
// member's row. A per-thread row where one is shared spilled: MPE's fused
// rollout went from none to 294 bytes of spill stores (ptxas -v) and took
// 1.40 ms an update against 0.99 (H200, docs/decisions.md, "Env params as data").
template <class E, bool Shared>
JW_HD const typename E::Params& params_for(const Call& c, int64_t e) {
  if constexpr (Shared) return *reinterpret_cast<const typename E::Params*>(c.params);
  else return params_at<E>(c, e);
}

#if defined(__CUDACC__)
// Runs body(std::true_type) where every member shares the operand's row, else
// body(std::false_type): each kernel body is compiled for both (its Shared
// template argument), and a launch takes one branch in every thread.
template <class F>
__device__ inline void by_params_rows(const Call& c, F&& body) {
  if (c.params_stride == 0) body(std::true_type{});
  else body(std::false_type{});
}
#endif

JW_HD void member_of(const Call& c, int64_t e, uint32_t* k0, uint32_t* k1, uint32_t* env) {
  const int64_t m = c.per_member == c.envs ? 0 : e / c.per_member;
  const uint32_t* k = c.keys + 3 * m;
  *k0 = k[0];
  *k1 = k[1];
  *env = static_cast<uint32_t>(e - m * c.per_member) + k[2];
}

// ---------------------------------------------------------------------------
// XLA:CPU: envs one after another, agents of a pass in order.
// ---------------------------------------------------------------------------
template <class E>
void observe_env(const typename E::Params& p, const typename E::State& s, const Call& c,
                 int64_t e, const Agent& proto, bool rows) {
  const int64_t at = e * c.n * c.obs_dim;
  // bf16 output: rows go through a float buffer, rounded as they are copied.
  thread_local std::vector<float> row;
  if (c.obs_bf16) row.resize(c.obs_dim);
  for (int i = 0; i < c.n; ++i) {
    Agent a = proto;
    a.agent = i;
    const int64_t first = at + static_cast<int64_t>(i) * c.obs_dim;
    if constexpr (part_observe<E>()) {
      if (!rows) {
        observe_all_parts<E>(p, s, a, [&](int col, float v) { put_obs(c, first + col, v); });
        continue;
      }
    }
    if (!c.obs_bf16) {
      observe_row<E>(p, s, a, c.obs + first);
      continue;
    }
    observe_row<E>(p, s, a, row.data());
    for (int col = 0; col < c.obs_dim; ++col) put_obs(c, first + col, row[col]);
  }
}

// A fresh episode of one env on the host: its clock restarted, then every
// agent's reset() (`proto`: agent 0 of the env, stream 0).
template <class E>
void restart_env_cpu(const typename E::Params& p, const typename E::State& s,
                     const Agent& proto) {
  detail::restart_clock<E>(s);
  for (int i = 0; i < proto.num_agents; ++i) {
    Agent a = proto;
    a.agent = i;
    reset(p, s, a);
  }
}

// `rows`: use_rows<E>() of the layout the GPU would use for this call.
template <class E>
void reset_env_cpu(const typename E::Params& p, const Call& c, int64_t e, int worker, bool rows) {
  uint32_t k0, k1, env;
  member_of(c, e, &k0, &k1, &env);
  const typename E::State s = state_at<E>(c.base, c.stride, e, worker);
  const Agent proto{env, 0, c.n, k0, k1, 0u};
  restart_env_cpu<E>(p, s, proto);
  detail::run_team_pass<E>(p, s, Team{c.n, 0, 1, true, nullptr}, kBeforeObserve);
  observe_env<E>(p, s, c, e, proto, rows);
}

template <class E>
void step_env_cpu(const typename E::Params& p, const Call& c, int64_t e, int worker, bool rows) {
  uint32_t k0, k1, env;
  member_of(c, e, &k0, &k1, &env);
  const typename E::State s = state_at<E>(c.base, c.stride, e, worker);
  const Team t{c.n, 0, 1, true, nullptr};
  const int n = c.n;
  bool any_term = false, any_trunc = false;
  for (int i = 0; i < n; ++i) c.reward[e * n + i] = 0.0f;
  const int32_t step_no = detail::advance_step<E>(s);
  for (int phase = 0; phase < E::kStepPhases; ++phase) {
    for (int i = 0; i < n; ++i) {
      Agent a{env, i, n, k0, k1, 1u};
      StepResult r;
      step(p, s, a, c.actions + (e * n + i) * c.heads, phase, r);
      c.reward[e * n + i] += r.reward;
      any_term = any_term || r.terminated;
      any_trunc = any_trunc || r.truncated;
    }
    if ((E::kTeamPassPhases >> phase) & 1u) detail::run_team_pass<E>(p, s, t, phase);
  }
  any_trunc = any_trunc || detail::time_up<E>(p, step_no);
  for (int i = 0; i < n; ++i) detail::add_return<E>(s, i, step_no, c.reward[e * n + i]);
  const bool d = any_term || any_trunc;
  const Agent proto{env, 0, n, k0, k1, 0u};
  if (d && c.autoreset) restart_env_cpu<E>(p, s, proto);
  detail::run_team_pass<E>(p, s, t, kBeforeObserve);
  observe_env<E>(p, s, c, e, proto, rows);
  c.done[e] = d;
  c.term[e] = any_term;
  c.trunc[e] = any_trunc;
}

// Runs env(e, worker) for every env: envs are independent, so any split over
// threads gives the same bits. `parallel(n_tasks, task)` (the handler's
// thread pool) runs task(worker) for worker in [0, n_tasks); workers take
// chunks of envs from a shared counter until none are left. Each worker
// owns one env's scratch (scratch slot `worker`).
template <class F, class P>
void for_envs(int64_t envs, int workers, P&& parallel, F&& env) {
  if (workers <= 1 || envs < 2) {
    for (int64_t e = 0; e < envs; ++e) env(e, 0);
    return;
  }
  parallel(workers, [&, envs](int worker, std::atomic<int64_t>& next) {
    const int64_t chunk = envs / (8 * workers) + 1;
    for (int64_t b = next.fetch_add(chunk); b < envs; b = next.fetch_add(chunk))
      for (int64_t e = b; e < b + chunk && e < envs; ++e) env(e, worker);
  });
}

#if defined(__CUDACC__)
// ---------------------------------------------------------------------------
// CUDA: one thread per agent (tpe threads per env), epb envs per block,
// __syncthreads() between passes. Shared memory: [epb][kTeamWords] team
// words, then (staged) each env's state and scratch, then (obs_staged) the
// block's observation rows, stored to global memory as one contiguous run.
// ---------------------------------------------------------------------------
struct Lane {
  int64_t e;  // env (may be past the last: inactive)
  int le;     // env within the block
  int lane;   // thread within the env
  bool active;
};

__device__ inline Lane lane_of(const Layout& l, int64_t envs) {
  Lane r;
  r.le = static_cast<int>(threadIdx.x) / l.tpe;
  r.lane = static_cast<int>(threadIdx.x) - r.le * l.tpe;
  r.e = static_cast<int64_t>(blockIdx.x) * l.epb + r.le;
  r.active = r.le < l.epb && r.e < envs;
  return r;
}

// This env's State: its rows in global memory, or staged in shared memory.
// Staged is a template parameter so that, in the staged kernel, every State
// pointer visibly derives from the shared-memory array: the compiler then
// uses 32-bit shared addresses and shared-memory loads (a generic pointer
// costs two registers and a slower load).
template <class E, bool Staged>
__device__ inline typename E::State bind_env(const Call& c, const Layout& l, const Lane& w,
                                             int32_t* smem, typename E::State* global) {
  const int64_t e = w.active ? w.e : 0;
  *global = state_at<E>(c.base, c.stride, e, e);
  if constexpr (!Staged) return *global;
  int32_t* ptr[E::kFields];
  int32_t* at = smem + kTeamWords * l.epb + static_cast<int64_t>(w.le) * l.words;
  JW_UNROLL
  for (int f = 0; f < E::kFields; ++f) ptr[f] = at + c.offset[f];
  return E::bind(ptr);
}

// Where a block stages observation rows bound for element `at` of the
// output: f32 rows start `shift` words in, so that they line up with the
// output for 16-byte stores (store_rows); bf16 rows at the start.
__device__ inline float* obs_stage(const Call& c, const Layout& l, int32_t* smem, int64_t at) {
  float* base = reinterpret_cast<float*>(smem + obs_stage_word(l));
  if (c.obs_bf16) return base;
  return base + static_cast<int>((reinterpret_cast<uintptr_t>(c.obs + at) >> 2) & 3);
}

// Copies `count` staged floats to the output from element `at` on, all
// threads of the block: f32 through store_rows, bf16 rounded one by one.
__device__ inline void store_obs_rows(const Call& c, int64_t at, const float* src,
                                      int64_t count);

// Copies the env's state fields (not scratch) from src to dst: global to
// shared memory with asynchronous copies (Async: cp.async, every word in
// flight at once and none through a register; the caller's __syncthreads()
// makes them visible), shared to global memory with plain stores.
template <class E, bool Async>
__device__ inline void copy_fields(const Call& c, const Lane& w, int tpe,
                                   const typename E::State& dst, const typename E::State& src) {
  if (!w.active) return;
  int32_t* d[E::kFields];
  int32_t* s[E::kFields];
  E::pointers(dst, d);
  E::pointers(src, s);
  JW_UNROLL
  for (int f = 0; f < E::kStateFields; ++f)
    for (int j = w.lane; j < c.per_env[f]; j += tpe) {
      if constexpr (Async) __pipeline_memcpy_async(d[f] + j, s[f] + j, 4);
      else d[f][j] = s[f][j];
    }
  if constexpr (Async) {
    __pipeline_commit();
    __pipeline_wait_prior(0);
  }
}

// Copies `count` floats from shared to global memory, all threads of the
// block: 16-byte loads and stores where the two line up (the rows were
// written `shift` words into their buffer so that they do), else 4-byte ones.
__device__ inline void store_rows(float* dst, const float* src, int64_t count) {
  const int shift = static_cast<int>((reinterpret_cast<uintptr_t>(dst) >> 2) & 3);
  const bool lined_up = ((reinterpret_cast<uintptr_t>(src) - 4 * shift) & 15) == 0;
  if (!lined_up || count < 8) {
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) dst[j] = src[j];
    return;
  }
  const int head = (4 - shift) & 3;  // floats before dst's first 16-byte boundary
  const int64_t quads = (count - head) / 4;
  if (threadIdx.x < head) dst[threadIdx.x] = src[threadIdx.x];
  float4* d4 = reinterpret_cast<float4*>(dst + head);
  const float4* s4 = reinterpret_cast<const float4*>(src + head);
  for (int64_t j = threadIdx.x; j < quads; j += blockDim.x) d4[j] = s4[j];
  for (int64_t j = head + 4 * quads + threadIdx.x; j < count; j += blockDim.x) dst[j] = src[j];
}

__device__ inline void store_obs_rows(const Call& c, int64_t at, const float* src,
                                      int64_t count) {
  if (!c.obs_bf16) {
    store_rows(c.obs + at, src, count);
    return;
  }
  uint16_t* dst = reinterpret_cast<uint16_t*>(c.obs) + at;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) dst[j] = bf16_bits(src[j]);
}

// This env's observations as (agent, part) pairs over its threads, parts of
// a row on consecutive threads, each written straight to the output through
// store(index from the env's first element, value): for Tag, a warp's lanes
// write the 7 features of ~3 agents' 10 slots, runs of 10 floats per store.
// Where a row's parts fit in the env's threads, each thread keeps one part
// for every row it writes (what observe_part() derives from the part alone
// is loop-invariant).
template <class E, class Store>
__device__ inline void observe_parts_block(const typename E::Params& p,
                                           const typename E::State& s, const Call& c,
                                           const Layout& l, const Lane& w, const Agent& proto,
                                           Store&& store) {
  const int n = c.n, dim = c.obs_dim;
  const int parts = observe_parts(p);
  Agent a = proto;
  if (parts <= l.tpe) {
    const int sweep = l.tpe / parts;
    if (w.lane >= sweep * parts) return;
    const int part = w.lane % parts;
    for (int row = w.lane / parts; row < n; row += sweep) {
      a.agent = row;
      const int64_t first = static_cast<int64_t>(row) * dim;
      observe_part(p, s, a, part, [&](int col, float v) { store(first + col, v); });
    }
    return;
  }
  // More parts than threads (full observations of many agents): the
  // threads take each row's parts in turn.
  for (int row = 0; row < n; ++row) {
    a.agent = row;
    const int64_t first = static_cast<int64_t>(row) * dim;
    for (int part = w.lane; part < parts; part += l.tpe)
      observe_part(p, s, a, part, [&](int col, float v) { store(first + col, v); });
  }
}

template <class E, bool Staged>
__device__ inline void observe_block(const typename E::Params& p, const typename E::State& s,
                                     const Call& c, const Layout& l, const Lane& w,
                                     int32_t* smem, const Agent& proto) {
  const int n = c.n, dim = c.obs_dim;
  if (!use_rows<E>(l)) {
    if constexpr (part_observe<E>()) {
      if (!w.active) return;
      if (c.obs_bf16) {
        uint16_t* out = reinterpret_cast<uint16_t*>(c.obs) + w.e * n * dim;
        observe_parts_block<E>(p, s, c, l, w, proto,
                               [out](int64_t idx, float v) { out[idx] = bf16_bits(v); });
      } else {
        float* out = c.obs + w.e * n * dim;
        observe_parts_block<E>(p, s, c, l, w, proto, [out](int64_t idx, float v) { out[idx] = v; });
      }
    }
    return;
  }
  // The block's rows, one per agent, into shared memory (shifted so that
  // they line up with the output for 16-byte stores), then out as one
  // contiguous run; without room in shared memory, straight out.
  if (!l.obs_staged) {
    if (w.active)
      for (int i = w.lane; i < n; i += l.tpe) {
        Agent a = proto;
        a.agent = i;
        observe_row<E>(p, s, a, c.obs + (w.e * n + i) * dim);
      }
    return;
  }
  const int64_t first = static_cast<int64_t>(blockIdx.x) * l.epb;
  if (l.epb > 1) {  // all of the block's rows in one pass
    const int64_t at = first * n * dim;
    float* staged = obs_stage(c, l, smem, at);
    if (w.active)
      for (int i = w.lane; i < n; i += l.tpe) {
        Agent a = proto;
        a.agent = i;
        observe_row<E>(p, s, a, staged + (static_cast<int64_t>(w.le) * n + i) * dim);
      }
    __syncthreads();
    const int64_t rows = (c.envs - first < l.epb ? c.envs - first : l.epb) * n;
    store_obs_rows(c, at, staged, rows * dim);
    return;
  }
  // One env per block: its rows in passes of R (any thread may write any
  // agent's row: observe() only reads the state).
  const int R = obs_rows_per_pass(l, dim);
  for (int r0 = 0; r0 < n; r0 += R) {
    const int rows = n - r0 < R ? n - r0 : R;
    const int64_t at = (first * n + r0) * dim;
    float* staged = obs_stage(c, l, smem, at);
    if (r0 > 0) __syncthreads();  // the last pass's rows are out
    if (w.active)
      for (int q = w.lane; q < rows; q += l.tpe) {
        Agent a = proto;
        a.agent = r0 + q;
        observe_row<E>(p, s, a, staged + static_cast<int64_t>(q) * dim);
      }
    __syncthreads();
    // Every thread of the block takes part in the copy (the fused rollout's
    // blocks have threads beyond the env's: cuda/jaxwarp_fused.h).
    store_obs_rows(c, at, staged, static_cast<int64_t>(rows) * dim);
  }
}

// The end of reset and step, once the state is final: the team pass before
// observe(), observe(), and (staged) the state's copy back to global memory.
// The pass before observe() and observe() only read the state (they write
// scratch and observations), so the copy is issued first: its stores drain
// while the neighbour search and the observations run, not after them.
template <class E, bool Staged>
__device__ inline void finish_env(const typename E::Params& p, const typename E::State& s,
                                  const typename E::State& g, const Call& c, const Layout& l,
                                  const Lane& w, const Team& t, int32_t* smem,
                                  const Agent& proto) {
  if (Staged) copy_fields<E, false>(c, w, l.tpe, g, s);
  detail::run_team_pass<E>(p, s, t, kBeforeObserve);
  observe_block<E, Staged>(p, s, c, l, w, smem, proto);
}

template <class E, bool Staged, bool Shared>
__device__ inline void reset_kernel_body(const Call& c, const Layout& l) {
  extern __shared__ __align__(16) int32_t jw_smem[];
  const Lane w = lane_of(l, c.envs);
  ParamsIn<E, Shared> p = params_for<E, Shared>(c, w.e);
  uint32_t k0 = 0, k1 = 0, env = 0;
  if (w.active) member_of(c, w.e, &k0, &k1, &env);
  typename E::State g;
  const typename E::State s = bind_env<E, Staged>(c, l, w, jw_smem, &g);
  const Team t{c.n, w.lane, l.tpe, w.active, jw_smem + kTeamWords * w.le + 2};
  if (Staged) copy_fields<E, true>(c, w, l.tpe, s, g);  // zeros: fields reset() leaves alone
  __syncthreads();
  if (w.active) {
    if (w.lane == 0) detail::restart_clock<E>(s);
    for (int i = w.lane; i < c.n; i += l.tpe) {
      Agent a{env, i, c.n, k0, k1, 0u};
      reset(p, s, a);
    }
  }
  __syncthreads();
  finish_env<E, Staged>(p, s, g, c, l, w, t, jw_smem, Agent{env, 0, c.n, k0, k1, 0u});
}

// What one step of an env decided (its lane 0's copy is the env's).
struct StepEnd {
  bool done, term, trunc;
};

// The body of one step of the block's envs, from the counter's advance to
// the state's final values (autoreset included), ending on a barrier; the
// caller has cleared the env's flags (flags[0], flags[1]) before and, staged,
// issued the state's copy in. Shared by the step kernel and the fused
// rollout (cuda/jaxwarp_fused.h), which runs it once per step on a state that
// stays in shared memory.
template <class E>
__device__ inline StepEnd step_block(const typename E::Params& p, const typename E::State& s,
                                     const Call& c, const Layout& l, const Lane& w,
                                     const Team& t, int32_t* flags, uint32_t k0, uint32_t k1,
                                     uint32_t env) {
  const int n = c.n;
  // Lane 0 advances the step counter: it copied the per-env words itself
  // (copy_fields), and its copies have landed.
  if (w.active && w.lane == 0) detail::advance_step<E>(s);
  // One agent per thread (n <= tpe): its reward stays in a register;
  // otherwise it accumulates in the output buffer.
  const bool one_each = n <= l.tpe;
  float my_reward = 0.0f;
  if (w.active && !one_each)
    for (int i = w.lane; i < n; i += l.tpe) c.reward[w.e * n + i] = 0.0f;
  __syncthreads();
  // This step's number, read before the first phase's barrier: lane 0 sets
  // the counter to 0 again (autoreset) only after the last one.
  static_assert(E::kStepPhases >= 1, "jaxwarp: kStepPhases must be at least 1");
  int32_t step_no = 0;
  if constexpr (E::kCountsSteps) step_no = w.active ? E::timestep(s)[0] : 0;
  for (int phase = 0; phase < E::kStepPhases; ++phase) {
    if (w.active)
      for (int i = w.lane; i < n; i += l.tpe) {
        Agent a{env, i, n, k0, k1, 1u};
        StepResult r;
        step(p, s, a, c.actions + (w.e * n + i) * c.heads, phase, r);
        if (one_each) my_reward += r.reward;
        else c.reward[w.e * n + i] += r.reward;
        if (r.terminated) flags[0] = 1;
        if (r.truncated) flags[1] = 1;
      }
    __syncthreads();
    if ((E::kTeamPassPhases >> phase) & 1u) detail::run_team_pass<E>(p, s, t, phase);
  }
  if (w.active && one_each && w.lane < n) {
    c.reward[w.e * n + w.lane] = my_reward;
    detail::add_return<E>(s, w.lane, step_no, my_reward);
  }
  if (w.active && !one_each)  // the rewards this thread summed into the output
    for (int i = w.lane; i < n; i += l.tpe)
      detail::add_return<E>(s, i, step_no, c.reward[w.e * n + i]);
  const bool any_term = w.active && flags[0] != 0;
  const bool any_trunc = w.active && (flags[1] != 0 || detail::time_up<E>(p, step_no));
  const bool d = any_term || any_trunc;
  if (d && c.autoreset) {
    if (w.lane == 0) detail::restart_clock<E>(s);
    for (int i = w.lane; i < n; i += l.tpe) {
      Agent a{env, i, n, k0, k1, 0u};
      reset(p, s, a);
    }
  }
  __syncthreads();
  return {d, any_term, any_trunc};
}

// Lane 0 of each active env writes what its step decided.
__device__ inline void write_done(const Call& c, const Lane& w, const StepEnd& r) {
  if (w.active && w.lane == 0) {
    c.done[w.e] = r.done;
    c.term[w.e] = r.term;
    c.trunc[w.e] = r.trunc;
  }
}

template <class E, bool Staged, bool Shared>
__device__ inline void step_kernel_body(const Call& c, const Layout& l) {
  extern __shared__ __align__(16) int32_t jw_smem[];
  const Lane w = lane_of(l, c.envs);
  ParamsIn<E, Shared> p = params_for<E, Shared>(c, w.e);
  int32_t* flags = jw_smem + kTeamWords * w.le;
  if (w.lane == 0 && w.le < l.epb) flags[0] = flags[1] = 0;
  uint32_t k0 = 0, k1 = 0, env = 0;
  if (w.active) member_of(c, w.e, &k0, &k1, &env);
  typename E::State g;
  const typename E::State s = bind_env<E, Staged>(c, l, w, jw_smem, &g);
  const Team t{c.n, w.lane, l.tpe, w.active, flags + 2};
  if (Staged) copy_fields<E, true>(c, w, l.tpe, s, g);
  const StepEnd r = step_block<E>(p, s, c, l, w, t, flags, k0, k1, env);
  finish_env<E, Staged>(p, s, g, c, l, w, t, jw_smem, Agent{env, 0, c.n, k0, k1, 0u});
  write_done(c, w, r);
}

// The step of an env with one agent, no scratch and no team pass (classic
// control) when it runs with n == 1: one thread per env holding the env's
// state in registers. All of its loads are issued at once, before step()
// runs; through State pointers into global memory, the loads step() makes
// after a store (the compiler must assume they may alias) each wait for a
// trip to memory of their own. The agent index is the constant 0, so that
// every field access resolves to a register. Same bits as step_kernel_body:
// the same calls in the same order on the same values.
template <class E>
JW_HD constexpr bool solo_kernel() {
  return E::kFields == E::kStateFields && !detail::has_team_pass<E>::value;
}

template <class E, bool Shared>
__device__ inline void solo_step_kernel_body(const Call& c, const Layout& l) {
  extern __shared__ __align__(16) int32_t jw_smem[];
  const Lane w = lane_of(l, c.envs);  // tpe == 1: thread threadIdx.x is env le
  const int64_t e = w.active ? w.e : 0;
  ParamsIn<E, Shared> p = params_for<E, Shared>(c, e);
  int32_t* g[E::kFields];
  E::pointers(state_at<E>(c.base, c.stride, e, e), g);
  int32_t word[E::kFields];
  int32_t* r[E::kFields];
  JW_UNROLL
  for (int f = 0; f < E::kFields; ++f) {
    word[f] = w.active ? g[f][0] : 0;
    r[f] = &word[f];
  }
  const typename E::State s = E::bind(r);
  uint32_t k0 = 0, k1 = 0, env = 0;
  if (w.active) member_of(c, e, &k0, &k1, &env);
  float reward = 0.0f;
  bool any_term = false, any_trunc = false;
  if (w.active) {
    const int32_t step_no = detail::advance_step<E>(s);
    const Agent a{env, 0, 1, k0, k1, 1u};
    for (int phase = 0; phase < E::kStepPhases; ++phase) {
      StepResult res;
      step(p, s, a, c.actions + e * c.heads, phase, res);
      reward += res.reward;
      any_term = any_term || res.terminated;
      any_trunc = any_trunc || res.truncated;
    }
    any_trunc = any_trunc || detail::time_up<E>(p, step_no);
    detail::add_return<E>(s, 0, step_no, reward);
  }
  const bool d = any_term || any_trunc;
  const Agent a0{env, 0, 1, k0, k1, 0u};
  if (d && c.autoreset) {
    detail::restart_clock<E>(s);
    reset(p, s, a0);
  }
  if (w.active) {
    JW_UNROLL
    for (int f = 0; f < E::kFields; ++f) g[f][0] = word[f];
    c.reward[e] = reward;
    c.done[e] = d;
    c.term[e] = any_term;
    c.trunc[e] = any_trunc;
  }
  // Observations: the row path where the CPU takes it too (use_rows), the
  // block's rows staged and stored as one run when the layout has room.
  const int dim = c.obs_dim;
  if (use_rows<E>(l)) {
    if (!l.obs_staged) {
      if (w.active) observe_row<E>(p, s, a0, c.obs + e * dim);
      return;
    }
    const int64_t first = static_cast<int64_t>(blockIdx.x) * l.epb;
    float* staged = obs_stage(c, l, jw_smem, first * dim);
    if (w.active) observe_row<E>(p, s, a0, staged + static_cast<int64_t>(w.le) * dim);
    __syncthreads();
    const int64_t rows = c.envs - first < l.epb ? c.envs - first : l.epb;
    store_obs_rows(c, first * dim, staged, rows * dim);
  } else if constexpr (part_observe<E>()) {
    if (w.active)
      observe_all_parts<E>(p, s, a0, [&](int col, float v) { put_obs(c, e * dim + col, v); });
  }
}

// Launches `kernel` (a __global__ wrapper of the bodies above) on `stream`;
// opts the kernel into more than 48 KiB of shared memory where the layout
// needs it.
inline cudaError_t launch(const void* kernel, const Layout& l, int64_t envs, cudaStream_t stream,
                          const Call& c) {
  if (envs == 0) return cudaSuccess;
  if (l.smem_bytes > 48 * 1024) {
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           l.smem_bytes);
    if (err != cudaSuccess) return err;
  }
  const unsigned blocks = static_cast<unsigned>((envs + l.epb - 1) / l.epb);
  void* args[] = {const_cast<Call*>(&c), const_cast<Layout*>(&l)};
  return cudaLaunchKernel(kernel, dim3(blocks),
                          dim3(l.tpe * l.epb), args, l.smem_bytes, stream);
}
#endif  // __CUDACC__

}  // namespace jaxwarp
