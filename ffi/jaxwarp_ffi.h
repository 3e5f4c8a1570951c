// XLA FFI handlers of every jaxwarp env, templated on the env (see
// cuda/jaxwarp_kernels.h for the traits struct). ffi/env_ffi.cc, compiled
// once per env, instantiates them through one macro,
// JAXWARP_DEFINE_ENV(name, Env), which defines for the platform being compiled:
//   jaxwarp_<name>_{reset,step,rollout}_{cpu,cuda}: FFI handlers;
//   jaxwarp_<name>_layout: the launch layout (exported for Python and PyCUDA);
//   (CUDA) jaxwarp_<name>_{reset,step,rollout}_kernel[_staged], _step_kernel_solo:
//   the kernels, with C names so that PyCUDA can launch the very same code.
//
// Each handler's buffers and attributes are listed once, in its table
// JAXWARP_ARGS_<handler> below; the handler templates' signatures, the XLA
// bindings and the per-env handlers are generated from it (and
// tests/test_ffi_tables.py reads it through jaxwarp._ffi.handler_table to
// check what Python passes). State fields are aliased input -> output; the
// handlers allocate nothing and never synchronise.
#pragma once

#include <stdint.h>
#include <string.h>

#include <atomic>
#include <thread>
#include <type_traits>

#include "jaxwarp_fused.h"
#include "jaxwarp_kernels.h"
#include "xla/ffi/api/ffi.h"

// ---------------------------------------------------------------------------
// The handlers' arguments, one table per handler, after the platform context
// (cudaStream_t or CpuPool) that JAXWARP_DEFINE_ENV puts first. A table is a
// macro JAXWARP_ARGS_<handler>(X) listing, in binding order, one line per
// argument X(kind, FFI type, C++ name, attribute name) /* what it is */:
//   ARG   a buffer argument            ARGS  the remaining buffer arguments
//   RETS  the results, all of them     ATTR  an attribute, passed by name
// Python passes the attributes by name with these types: Span<const int32_t>
// an int32 NumPy array, int32_t an np.int32 (jaxwarp.authoring.ContractEnv;
// XLA decodes attributes by name, so their order here is free).
// A table may include another (JAXWARP_ENV_ATTRS(X): the attributes every
// handler takes). jaxwarp/_ffi.py's handler_table parses these lines: keep
// one X(...) or included table per line.
// ---------------------------------------------------------------------------

// The env's attributes, every handler's (ContractEnv._attrs).
#define JAXWARP_ENV_ATTRS(X)                                                                       \
  X(ATTR, xla::ffi::Span<const int32_t>, per_env, "jw_per_env") /* words/env per field */          \
  X(ATTR, int32_t, n, "jw_num_agents")                          /* agents per env */               \
  X(ATTR, int32_t, obs_dim, "jw_obs_dim")                       /* features per agent */

// Every handler's second buffer is the env's Params, data rather than an
// attribute: i32[members, words] (or i32[words], one row for every member),
// row m the packed Params of vmap member m (ContractEnv.param_words), so
// that one compiled program steps envs of several settings. What fixes
// shapes stays an attribute (agents, observation width, words per field),
// and static params are compiled in (constexpr members of Params).
// reset(keys, params) -> (state fields..., scratch i32[*], obs f32|bf16[envs, n, obs_dim]).
#define JAXWARP_ARGS_reset(X)                                                                      \
  X(ARG, xla::ffi::Buffer<xla::ffi::U32>, keys, "") /* u32[members*3]: key, env offset */          \
  X(ARG, xla::ffi::Buffer<xla::ffi::S32>, params, "") /* i32[members, words]: Params */            \
  X(RETS, xla::ffi::RemainingRets, rets, "")        /* state..., scratch, obs */                   \
  JAXWARP_ENV_ATTRS(X)

// step(keys, params, actions, state fields...) -> (state fields..., scratch, obs,
//   reward f32[envs, n], done, term, trunc bool[envs]).
#define JAXWARP_ARGS_step(X)                                                                       \
  X(ARG, xla::ffi::Buffer<xla::ffi::U32>, keys, "")    /* u32[members*3] */                        \
  X(ARG, xla::ffi::Buffer<xla::ffi::S32>, params, "")  /* i32[members, words] */                   \
  X(ARG, xla::ffi::Buffer<xla::ffi::S32>, actions, "") /* i32[envs, n, heads] */                   \
  X(ARGS, xla::ffi::RemainingArgs, args, "")           /* state fields (aliased) */                \
  X(RETS, xla::ffi::RemainingRets, rets, "")           /* state..., scratch, obs, ... */           \
  JAXWARP_ENV_ATTRS(X)                                                                             \
  X(ATTR, int32_t, heads, "jw_heads")                  /* action heads per agent */                \
  X(ATTR, int32_t, autoreset, "jw_autoreset")          /* 0: done envs keep their final obs */

// The fused rollout (cuda/jaxwarp_fused.h): rollout(...) -> (state fields...,
//   scratch, traj_obs f32[steps, envs, n, obs_dim], next_obs f32[envs, n, obs_dim],
//   actions i32[steps, envs, n, heads], log_prob, value, reward, ep_return
//   f32[steps, envs, n], done bool[steps, envs], term, trunc bool[envs]).
#define JAXWARP_ARGS_rollout(X)                                                                    \
  X(ARG, xla::ffi::Buffer<xla::ffi::U32>, env_keys, "")    /* u32[steps, members, 3] */            \
  X(ARG, xla::ffi::Buffer<xla::ffi::S32>, params, "")      /* i32[members, words] */               \
  X(ARG, xla::ffi::Buffer<xla::ffi::U32>, head_keys, "")   /* u32[steps, members, heads, 2] */     \
  X(ARG, xla::ffi::Buffer<xla::ffi::F32>, weights, "")     /* f32[members, groups, P] */           \
  X(ARG, xla::ffi::Buffer<xla::ffi::S32>, agent_group, "") /* i32[n]: each agent's group */        \
  X(ARG, xla::ffi::Buffer<xla::ffi::F32>, obs0, "")        /* f32[envs, n, obs_dim] */             \
  X(ARGS, xla::ffi::RemainingArgs, args, "")               /* state fields (aliased) */            \
  X(RETS, xla::ffi::RemainingRets, rets, "")               /* state..., scratch, traj... */        \
  JAXWARP_ENV_ATTRS(X)                                                                             \
  X(ATTR, int32_t, heads, "jw_heads")                      /* action heads per agent */            \
  X(ATTR, int32_t, steps, "jw_steps")                      /* steps of the rollout */              \
  X(ATTR, xla::ffi::Span<const int32_t>, mlp, "jw_mlp")    /* fused::make_mlp's words */           \
  X(ATTR, xla::ffi::Span<const int32_t>, nvec, "jw_nvec")  /* choices per head */                  \
  X(ATTR, int32_t, partitionable, "jw_partitionable")      /* the sampler's draw mode */

// What a table generates, per kind: the binding (.Arg<T>() ...), the
// parameter list (", T name") and the forwarded arguments (", name").
#define JW_FFI_BIND_ARG(T, KEY) .Arg<T>()
#define JW_FFI_BIND_ARGS(T, KEY) .RemainingArgs()
#define JW_FFI_BIND_RETS(T, KEY) .RemainingRets()
#define JW_FFI_BIND_ATTR(T, KEY) .Attr<T>(KEY)
#define JW_FFI_BIND(KIND, T, NAME, KEY) JW_FFI_BIND_##KIND(T, KEY)
#define JW_FFI_PARAM(KIND, T, NAME, KEY) , T NAME
#define JW_FFI_PASS(KIND, T, NAME, KEY) , NAME


namespace jaxwarp {

// XLA:CPU's thread pool for FFI handlers (the pool that runs XLA's own
// compute), reached through the FFI C API: the CPU handlers split envs over
// it instead of starting threads of their own.
struct CpuPool {
  const XLA_FFI_Api* api = nullptr;
  XLA_FFI_ExecutionContext* ctx = nullptr;

  int64_t threads() const {
    if (!api || !ctx) return 0;
    XLA_FFI_ThreadPool_NumThreads_Args args;
    args.struct_size = XLA_FFI_ThreadPool_NumThreads_Args_STRUCT_SIZE;
    args.extension_start = nullptr;
    args.ctx = ctx;
    int64_t n = 0;
    args.num_threads = &n;
    if (XLA_FFI_Error* err = api->XLA_FFI_ThreadPool_NumThreads(&args)) {
      destroy(err);
      return 0;
    }
    return n;
  }

  // task(worker, next) for worker in [0, n): worker 0 on the calling thread,
  // the others on the pool. Returns once every worker that started has
  // finished; a task the pool has not started yet by then finds no work
  // (the shared counter is past the end) and only drops its reference.
  template <class T>
  void run(int n, T&& task) const {
    struct Shared {
      std::atomic<int64_t> next{0};
      std::atomic<int> workers{1};  // next worker id
      std::atomic<int> running{0};
      std::atomic<int> refs{1};
      std::atomic<bool> closed{false};
      int limit = 1;
      std::remove_reference_t<T>* fn = nullptr;
    };
    auto* sh = new Shared;
    sh->limit = n;
    sh->fn = &task;
    auto body = [](void* data) {
      auto* s = static_cast<Shared*>(data);
      s->running.fetch_add(1);
      if (!s->closed.load()) {
        const int w = s->workers.fetch_add(1);
        if (w < s->limit) (*s->fn)(w, s->next);
      }
      s->running.fetch_sub(1);
      if (s->refs.fetch_sub(1) == 1) delete s;
    };
    for (int i = 1; i < n; ++i) {
      sh->refs.fetch_add(1);
      XLA_FFI_ThreadPool_Schedule_Args args;
      args.struct_size = XLA_FFI_ThreadPool_Schedule_Args_STRUCT_SIZE;
      args.extension_start = nullptr;
      args.ctx = ctx;
      args.task = body;
      args.data = sh;
      if (XLA_FFI_Error* err = api->XLA_FFI_ThreadPool_Schedule(&args)) {
        destroy(err);
        sh->refs.fetch_sub(1);
        break;  // no pool: the calling thread does the rest
      }
    }
    task(0, sh->next);
    // Late starters must not touch `task` (on this stack) after we return.
    sh->closed.store(true);
    while (sh->running.load() != 0) std::this_thread::yield();
    if (sh->refs.fetch_sub(1) == 1) delete sh;
  }

 private:
  void destroy(XLA_FFI_Error* err) const {
    XLA_FFI_Error_Destroy_Args d;
    d.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
    d.extension_start = nullptr;
    d.error = err;
    api->XLA_FFI_Error_Destroy(&d);
  }
};

}  // namespace jaxwarp

// The handlers receive the pool as a context argument (.Ctx<jaxwarp::CpuPool>()).
template <>
struct xla::ffi::CtxDecoding<jaxwarp::CpuPool> {
  using Type = jaxwarp::CpuPool;
  static std::optional<Type> Decode(const XLA_FFI_Api* api, XLA_FFI_ExecutionContext* ctx,
                                    DiagnosticEngine&) {
    jaxwarp::CpuPool pool;
    pool.api = api;
    pool.ctx = ctx;
    return pool;
  }
};

namespace jaxwarp {
namespace ffi_impl {
namespace ffi = xla::ffi;

// Points c at the params operand: one row of Params words per member
// (members: the key batch's), or a single row that every member reads.
template <class E>
ffi::Error bind_params(Call* c, const ffi::Buffer<ffi::S32>& params, int64_t members) {
  const int64_t words = static_cast<int64_t>(sizeof(typename E::Params)) / 4;
  const int64_t got = static_cast<int64_t>(params.element_count());
  if (got != words && got != words * members)
    return ffi::Error::InvalidArgument("jaxwarp: params has the wrong size for this env's "
                                       "Params and key batch (library and Python spec out of "
                                       "date?)");
  c->params = params.typed_data();
  c->params_stride = got == words ? 0 : words;
  return ffi::Error::Success();
}

// The observation buffer: f32 or bf16 (the env's obs_dtype).
inline ffi::Error bind_obs(Call* c, const ffi::AnyBuffer& obs) {
  if (obs.element_type() != ffi::DataType::F32 && obs.element_type() != ffi::DataType::BF16)
    return ffi::Error::InvalidArgument("jaxwarp: observations must be f32 or bf16");
  c->obs = static_cast<float*>(obs.untyped_data());
  c->obs_bf16 = obs.element_type() == ffi::DataType::BF16;
  return ffi::Error::Success();
}

#if defined(__CUDACC__)
// bf16 observations leave the GPU through shared memory (rows) or by parts;
// an env with observe() only, whose rows do not fit in shared memory, writes
// f32 rows straight to the output and cannot round them.
template <class E>
ffi::Error check_obs_path(const Call& c, const Layout& l) {
  if (c.obs_bf16 && use_rows<E>(l) && !l.obs_staged)
    return ffi::Error::InvalidArgument(
        "jaxwarp: obs_dtype='bfloat16' on the GPU needs the env's observation rows to fit in "
        "shared memory, or an observe_part() in its header (use obs_dtype='float32')");
  return ffi::Error::Success();
}
#endif

template <class E>
ffi::Error prepare(Call* c, ffi::Span<const int32_t> per_env, int32_t n, int32_t obs_dim,
                   int64_t obs_elems, int64_t key_words) {
  if (per_env.size() != static_cast<size_t>(E::kFields))
    return ffi::Error::InvalidArgument("jaxwarp: jw_per_env does not list every field");
  if (n < 1 || obs_dim < 0) return ffi::Error::InvalidArgument("jaxwarp: bad agent count");
  c->n = n;
  c->obs_dim = obs_dim;
  const int64_t row = static_cast<int64_t>(n) * (obs_dim > 0 ? obs_dim : 1);
  c->envs = obs_dim > 0 ? obs_elems / row : 0;
  const int64_t members = key_words / 3;
  if (members < 1 || key_words % 3 != 0 || c->envs % members != 0)
    return ffi::Error::InvalidArgument("jaxwarp: envs not divisible by the key batch");
  c->per_member = c->envs / members;
  int32_t offset = 0;
  for (int f = 0; f < E::kFields; ++f) {
    c->per_env[f] = per_env[f];
    c->offset[f] = offset;
    offset += per_env[f];
  }
  return ffi::Error::Success();
}

// Points c->base at the result buffers: state fields, then the scratch buffer
// (left null when the layout stages scratch in shared memory).
template <class E>
ffi::Error bind_results(Call* c, const ffi::RemainingRets& rets, bool scratch_global) {
  for (int f = 0; f < E::kStateFields; ++f) {
    auto r = rets.get<ffi::AnyBuffer>(f);
    if (!r.has_value()) return r.error();
    c->base[f] = static_cast<int32_t*>((*r)->untyped_data());
  }
  auto scratch = rets.get<ffi::AnyBuffer>(E::kStateFields);
  if (!scratch.has_value()) return scratch.error();
  // Scratch of env e: one block of all its scratch fields, at e * words.
  int32_t* at = static_cast<int32_t*>((*scratch)->untyped_data());
  int32_t words = 0;
  for (int f = E::kStateFields; f < E::kFields; ++f) words += c->per_env[f];
  for (int f = 0; f < E::kFields; ++f) c->stride[f] = f < E::kStateFields ? c->per_env[f] : words;
  for (int f = E::kStateFields; f < E::kFields; ++f) {
    c->base[f] = scratch_global ? at : nullptr;
    at += c->per_env[f];
  }
  return ffi::Error::Success();
}


// Below this much work (envs x agents^2, a proxy for a step's cost: many
// envs step agents by agent, many-agent envs compare agents pairwise) one
// thread does the call: handing envs to the pool costs more than it saves
// (64 CartPole envs: a few microseconds of work).
constexpr int64_t kMinParallelWork = 4096;

// Workers for the CPU loop: the pool's threads (and the caller), at most as
// many as the scratch buffer has env slots (Python sizes it).
template <class E>
int cpu_workers(const Call& c, const ffi::RemainingRets& rets, const CpuPool* pool,
                bool busy = false) {
  if (!busy && c.envs * c.n * c.n < kMinParallelWork) return 1;
  int64_t slots = 1 << 30;
  int32_t words = 0;
  for (int f = E::kStateFields; f < E::kFields; ++f) words += c.per_env[f];
  if (words > 0) {
    auto scratch = rets.get<ffi::AnyBuffer>(E::kStateFields);
    if (scratch.has_value()) slots = static_cast<int64_t>((*scratch)->element_count()) / words;
  }
  int64_t n = pool ? pool->threads() : 0;
  n = n < 1 ? 1 : n;
  n = n < slots ? n : slots;
  return static_cast<int>(n < 1 ? 1 : n);
}

// The state is aliased input -> output: copies the state fields (args)
// into the results where XLA did not alias them.
template <class E>
ffi::Error copy_unaliased(const Call& c, const ffi::RemainingArgs& args, void* stream) {
  for (int f = 0; f < E::kStateFields; ++f) {
    auto in = args.get<ffi::AnyBuffer>(f);
    if (!in.has_value()) return in.error();
    if (in->untyped_data() == c.base[f]) continue;
#if defined(__CUDACC__)
    cudaMemcpyAsync(c.base[f], in->untyped_data(), in->size_bytes(), cudaMemcpyDeviceToDevice,
                    static_cast<cudaStream_t>(stream));
#else
    (void)stream;
    memcpy(c.base[f], in->untyped_data(), in->size_bytes());
#endif
  }
  return ffi::Error::Success();
}

template <class E>
ffi::Error reset(const void* const* kernels, void* stream JAXWARP_ARGS_reset(JW_FFI_PARAM)) {
  if (rets.size() != static_cast<size_t>(E::kStateFields + 2))
    return ffi::Error::InvalidArgument("jaxwarp reset: wrong number of results");
  auto obs = rets.get<ffi::AnyBuffer>(E::kStateFields + 1);
  if (!obs.has_value()) return obs.error();
  Call c{};
  if (auto err = prepare<E>(&c, per_env, n, obs_dim, (*obs)->element_count(),
                            keys.element_count()); err.failure())
    return err;
  c.keys = keys.typed_data();
  if (auto err = bind_params<E>(&c, params, keys.element_count() / 3); err.failure()) return err;
  if (auto err = bind_obs(&c, **obs); err.failure()) return err;
  c.heads = 0;
#if defined(__CUDACC__)
  const Layout l = layout_for(n, obs_dim, E::kFields, c.per_env, E::kStateFields);
  if (auto err = bind_results<E>(&c, rets, !l.staged); err.failure()) return err;
  if (auto err = check_obs_path<E>(c, l); err.failure()) return err;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  // Before the first reset every state field is zero.
  for (int f = 0; f < E::kStateFields; ++f)
    cudaMemsetAsync(c.base[f], 0, 4 * static_cast<size_t>(c.per_env[f]) * c.envs, s);
  if (cudaError_t e = launch(kernels[l.staged ? 1 : 0], l, c.envs, s, c); e != cudaSuccess)
    return ffi::Error::Internal(cudaGetErrorString(e));
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return ffi::Error::Internal(cudaGetErrorString(e));
#else
  (void)kernels;
  if (auto err = bind_results<E>(&c, rets, true); err.failure()) return err;
  for (int f = 0; f < E::kStateFields; ++f)
    memset(c.base[f], 0, 4 * static_cast<size_t>(c.per_env[f]) * c.envs);
  const CpuPool* pool = static_cast<const CpuPool*>(stream);
  const bool rows = use_rows<E>(
      layout_for(n, obs_dim, E::kFields, c.per_env, E::kStateFields));
  for_envs(c.envs, cpu_workers<E>(c, rets, pool),
           [&](int n, auto&& task) { pool->run(n, task); },
           [&](int64_t e, int worker) {
             reset_env_cpu<E>(params_at<E>(c, e), c, e, worker, rows);
           });
#endif
  return ffi::Error::Success();
}

template <class E>
ffi::Error step(const void* const* kernels, void* stream JAXWARP_ARGS_step(JW_FFI_PARAM)) {
  if (args.size() != static_cast<size_t>(E::kStateFields) ||
      rets.size() != static_cast<size_t>(E::kStateFields + 6))
    return ffi::Error::InvalidArgument("jaxwarp step: wrong number of buffers");
  auto obs = rets.get<ffi::AnyBuffer>(E::kStateFields + 1);
  auto reward = rets.get<ffi::AnyBuffer>(E::kStateFields + 2);
  auto done = rets.get<ffi::AnyBuffer>(E::kStateFields + 3);
  auto term = rets.get<ffi::AnyBuffer>(E::kStateFields + 4);
  auto trunc = rets.get<ffi::AnyBuffer>(E::kStateFields + 5);
  if (!obs.has_value() || !reward.has_value() || !done.has_value() || !term.has_value() ||
      !trunc.has_value())
    return ffi::Error::InvalidArgument("jaxwarp step: bad result buffers");
  Call c{};
  if (auto err = prepare<E>(&c, per_env, n, obs_dim, (*obs)->element_count(),
                            keys.element_count()); err.failure())
    return err;
  c.keys = keys.typed_data();
  if (auto err = bind_params<E>(&c, params, keys.element_count() / 3); err.failure()) return err;
  c.heads = heads;
  c.autoreset = autoreset != 0;
  c.actions = actions.typed_data();
  if (auto err = bind_obs(&c, **obs); err.failure()) return err;
  c.reward = static_cast<float*>((*reward)->untyped_data());
  c.done = static_cast<bool*>((*done)->untyped_data());
  c.term = static_cast<bool*>((*term)->untyped_data());
  c.trunc = static_cast<bool*>((*trunc)->untyped_data());
#if defined(__CUDACC__)
  const Layout l = layout_for(n, obs_dim, E::kFields, c.per_env, E::kStateFields);
  if (auto err = bind_results<E>(&c, rets, !l.staged); err.failure()) return err;
  if (auto err = check_obs_path<E>(c, l); err.failure()) return err;
#else
  if (auto err = bind_results<E>(&c, rets, true); err.failure()) return err;
#endif
  if (auto err = copy_unaliased<E>(c, args, stream); err.failure()) return err;
#if defined(__CUDACC__)
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  // kernels: [state in global memory, staged, solo (one agent; null where
  // solo_kernel<E>() is false)].
  const void* kernel = l.staged ? kernels[1] : n == 1 && kernels[2] ? kernels[2] : kernels[0];
  if (cudaError_t e = launch(kernel, l, c.envs, s, c); e != cudaSuccess)
    return ffi::Error::Internal(cudaGetErrorString(e));
#else
  (void)kernels;
  const CpuPool* pool = static_cast<const CpuPool*>(stream);
  const bool rows = use_rows<E>(
      layout_for(n, obs_dim, E::kFields, c.per_env, E::kStateFields));
  for_envs(c.envs, cpu_workers<E>(c, rets, pool),
           [&](int n, auto&& task) { pool->run(n, task); },
           [&](int64_t e, int worker) {
             step_env_cpu<E>(params_at<E>(c, e), c, e, worker, rows);
           });
#endif
  return ffi::Error::Success();
}

// The fused rollout's model and heads (jw_mlp, jw_nvec, ...) into ro.
inline ffi::Error rollout_model(fused::Rollout* ro, ffi::Span<const int32_t> mlp,
                                ffi::Span<const int32_t> nvec, int32_t obs_dim, int32_t heads,
                                int32_t steps, int32_t partitionable) {
  if (!fused::make_mlp(mlp.begin(), mlp.size(), &ro->mlp) || ro->mlp.in_dim != obs_dim)
    return ffi::Error::InvalidArgument("jaxwarp rollout: jw_mlp does not describe a model");
  if (steps < 1 || heads < 1 || heads > sampler::kMaxHeads || nvec.size() != size_t(heads))
    return ffi::Error::InvalidArgument("jaxwarp rollout: bad steps, heads or nvec");
  ro->steps = steps;
  ro->partitionable = partitionable;
  int32_t off = 0;
  for (int h = 0; h < heads; ++h) {
    ro->nvec[h] = nvec[h];
    ro->head_offset[h] = off;
    off += nvec[h];
  }
  if (off != ro->mlp.logits)
    return ffi::Error::InvalidArgument("jaxwarp rollout: sum(nvec) differs from the logits");
  return ffi::Error::Success();
}

// Points c and ro at the fused rollout's results after the state fields and
// the scratch buffer (rets[k + 1...]: traj_obs, next_obs, actions, log_prob,
// value, reward, ep_return, done, term, trunc).
inline ffi::Error rollout_results(const ffi::RemainingRets& rets, int k, Call* c,
                                  fused::Rollout* ro) {
  auto get = [&](int i) { return rets.get<ffi::AnyBuffer>(k + i); };
  auto traj_obs = get(1), next_obs = get(2), actions = get(3), log_prob = get(4), value = get(5),
       reward = get(6), ep_return = get(7), done = get(8), term = get(9), trunc = get(10);
  if (!traj_obs.has_value() || !next_obs.has_value() || !actions.has_value() ||
      !log_prob.has_value() || !value.has_value() || !reward.has_value() ||
      !ep_return.has_value() || !done.has_value() || !term.has_value() || !trunc.has_value())
    return ffi::Error::InvalidArgument("jaxwarp rollout: bad result buffers");
  if (auto err = bind_obs(c, **next_obs); err.failure()) return err;
  if (c->obs_bf16) return ffi::Error::InvalidArgument("jaxwarp rollout: observations must be f32");
  c->term = static_cast<bool*>((*term)->untyped_data());
  c->trunc = static_cast<bool*>((*trunc)->untyped_data());
  ro->traj_obs = static_cast<float*>((*traj_obs)->untyped_data());
  ro->next_obs = static_cast<float*>((*next_obs)->untyped_data());
  ro->actions = static_cast<int32_t*>((*actions)->untyped_data());
  ro->log_prob = static_cast<float*>((*log_prob)->untyped_data());
  ro->value = static_cast<float*>((*value)->untyped_data());
  ro->reward = static_cast<float*>((*reward)->untyped_data());
  ro->ep_return = static_cast<float*>((*ep_return)->untyped_data());
  ro->done = static_cast<bool*>((*done)->untyped_data());
  return ffi::Error::Success();
}

#if defined(__CUDACC__)
// The fused rollout's launch on the GPU: its layout *l, the model's place
// in shared memory (ro->mlp_smem_word, ro->chunk_rows) and the dynamic
// shared memory *smem of a block.
template <class E>
ffi::Error rollout_geometry(const Call& c, fused::Rollout* ro, Layout* l, int* smem) {
  static int sms = 0;
  if (sms == 0) {
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (sms < 1) sms = 1;
  }
  const int32_t n = c.n;
  // Few envs spread over the SMs: about two blocks per SM before blocks fill;
  // many envs: at most kMaxBlockRows agents a block (more blocks per SM).
  int64_t per_block = (c.envs + 2 * sms - 1) / (2 * sms);
  const int64_t cap = fused::kMaxBlockRows / n > 1 ? fused::kMaxBlockRows / n : 1;
  per_block = per_block < cap ? per_block : cap;
  *l = layout_for(n, c.obs_dim, E::kFields, c.per_env, E::kStateFields,
                  static_cast<int>(per_block < 1 ? 1 : per_block));
  ro->mlp_smem_word = (l->smem_bytes / 4 + 3) / 4 * 4;
  // A pass row's shared memory (act_block): its parameters' offset (int64),
  // its input's offset (int32), two hidden layers, logits and value.
  const int64_t row_bytes = 4 * (3 + 2 * static_cast<int64_t>(ro->mlp.hidden_max) +
                                 ro->mlp.logits + 1);
  int64_t room = fused::kSmemLimit - 4 * static_cast<int64_t>(ro->mlp_smem_word);
  room = room < fused::kMlpBudget ? room : fused::kMlpBudget;
  const int64_t block_rows = static_cast<int64_t>(l->epb) * n;
  int64_t chunk = room / row_bytes;
  chunk = chunk < block_rows ? chunk : block_rows;
  if (chunk < 1)
    return ffi::Error::InvalidArgument("jaxwarp rollout: the model's layers do not fit in "
                                       "shared memory beside the env");
  ro->chunk_rows = static_cast<int32_t>(chunk);
  *smem = static_cast<int>(4 * ro->mlp_smem_word + chunk * row_bytes);
  return ffi::Error::Success();
}

// Enqueues the fused rollout's kernel (kernels: [global, staged]) on stream.
template <class E>
ffi::Error rollout_launch(const void* const* kernels, void* stream, Call c, const Layout& l,
                          fused::Rollout ro, int smem) {
  const void* kernel = kernels[l.staged ? 1 : 0];
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (smem > 48 * 1024) {
    if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             smem); e != cudaSuccess)
      return ffi::Error::Internal(cudaGetErrorString(e));
  }
  const unsigned blocks = static_cast<unsigned>((c.envs + l.epb - 1) / l.epb);
  void* kargs[] = {&c, const_cast<Layout*>(&l), &ro};
  if (c.envs > 0) {
    if (cudaError_t e = cudaLaunchKernel(kernel, dim3(blocks), dim3(fused::rollout_threads(l)),
                                         kargs, smem, st); e != cudaSuccess)
      return ffi::Error::Internal(cudaGetErrorString(e));
  }
  return ffi::Error::Success();
}
#else
// Runs the fused rollout on XLA:CPU's pool.
template <class E>
void rollout_cpu(const CpuPool* pool, const Call& c, const fused::Rollout& ro,
                 const ffi::RemainingRets& rets) {
  const bool rows = use_rows<E>(
      layout_for(c.n, c.obs_dim, E::kFields, c.per_env, E::kStateFields));
  std::vector<Call> calls(ro.steps);
  for (int t = 0; t < ro.steps; ++t) calls[t] = fused::step_call(c, ro, t);
  // The forward passes dominate the work: the pool's threads wherever there
  // are several envs (cpu_workers' threshold counts the env's work alone).
  for_envs(c.envs, c.envs > 1 ? cpu_workers<E>(c, rets, pool, true) : 1,
           [&](int n, auto&& task) { pool->run(n, task); },
           [&](int64_t e, int worker) {
             fused::rollout_env_cpu<E>(params_at<E>(c, e), calls.data(), ro, e, worker, rows);
           });
}
#endif

// The fused rollout (cuda/jaxwarp_fused.h): every step's forward pass,
// draws and env step in one call (buffers and attributes:
// JAXWARP_ARGS_rollout).
template <class E>
ffi::Error rollout(const void* const* kernels, void* stream JAXWARP_ARGS_rollout(JW_FFI_PARAM)) {
  const int k = E::kStateFields;
  if (args.size() != static_cast<size_t>(k) || rets.size() != static_cast<size_t>(k + 11))
    return ffi::Error::InvalidArgument("jaxwarp rollout: wrong number of buffers");
  fused::Rollout ro{};
  if (auto err = rollout_model(&ro, mlp, nvec, obs_dim, heads, steps, partitionable);
      err.failure())
    return err;
  Call c{};
  if (auto err = rollout_results(rets, k, &c, &ro); err.failure()) return err;
  const int64_t key_words = env_keys.element_count() / steps;
  const int64_t obs_elems = (*rets.get<ffi::AnyBuffer>(k + 2))->element_count();  // next_obs
  if (auto err = prepare<E>(&c, per_env, n, obs_dim, obs_elems, key_words); err.failure())
    return err;
  ro.members = static_cast<int32_t>(key_words / 3);
  if (auto err = bind_params<E>(&c, params, ro.members); err.failure()) return err;
  if (head_keys.element_count() != static_cast<size_t>(steps) * ro.members * heads * 2 ||
      weights.element_count() != static_cast<size_t>(ro.members) * ro.mlp.groups *
                                     ro.mlp.per_group ||
      agent_group.element_count() != static_cast<size_t>(n) ||
      obs0.element_count() != static_cast<size_t>(c.envs) * n * obs_dim)
    return ffi::Error::InvalidArgument("jaxwarp rollout: buffer sizes disagree");
  c.keys = env_keys.typed_data();
  c.heads = heads;
  c.autoreset = 1;
  ro.env_keys = env_keys.typed_data();
  ro.head_keys = head_keys.typed_data();
  ro.weights = weights.typed_data();
  ro.agent_group = agent_group.typed_data();
  ro.obs0 = obs0.typed_data();
#if defined(__CUDACC__)
  Layout l;
  int smem = 0;
  if (auto err = rollout_geometry<E>(c, &ro, &l, &smem); err.failure()) return err;
  if (auto err = bind_results<E>(&c, rets, !l.staged); err.failure()) return err;
  if (auto err = copy_unaliased<E>(c, args, stream); err.failure()) return err;
  return rollout_launch<E>(kernels, stream, c, l, ro, smem);
#else
  (void)kernels;
  if (auto err = bind_results<E>(&c, rets, true); err.failure()) return err;
  if (auto err = copy_unaliased<E>(c, args, stream); err.failure()) return err;
  rollout_cpu<E>(static_cast<const CpuPool*>(stream), c, ro, rets);
  return ffi::Error::Success();
#endif
}
}  // namespace ffi_impl

}  // namespace jaxwarp

// The binding of a handler with table TABLE (JAXWARP_ARGS_<handler>), after
// its platform context CTX (.Ctx<...>()).
#define JAXWARP_BIND(TABLE, CTX) xla::ffi::Ffi::Bind() CTX TABLE(JW_FFI_BIND)

// One env's FFI handler jaxwarp_<NAME>_<HANDLER>_<PLATFORM> (HANDLER: reset,
// step or rollout): a function jw_<HANDLER>_<NAME>(context, table...) that
// calls ffi_impl::HANDLER<ENV>(KERNELS, STREAM, table...), bound with the
// context CTX_BIND and the traits TRAITS. STREAM is what it passes on as
// ffi_impl's `stream` (the cudaStream_t, or &ctx: the CpuPool).
#define JAXWARP_DEFINE_HANDLER(NAME, ENV, HANDLER, PLATFORM, CTX_TYPE, CTX_BIND, KERNELS,    \
                               STREAM, TRAITS)                                                \
  static xla::ffi::Error jw_##HANDLER##_##NAME(                                               \
      CTX_TYPE ctx JAXWARP_ARGS_##HANDLER(JW_FFI_PARAM)) {                                    \
    return jaxwarp::ffi_impl::HANDLER<ENV>(KERNELS,                                           \
                                           STREAM JAXWARP_ARGS_##HANDLER(JW_FFI_PASS));       \
  }                                                                                           \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxwarp_##NAME##_##HANDLER##_##PLATFORM,                      \
                                jw_##HANDLER##_##NAME,                                        \
                                JAXWARP_BIND(JAXWARP_ARGS_##HANDLER, CTX_BIND), TRAITS);

#if defined(__CUDACC__)
// A CUDA handler: XLA's stream first; command-buffer (CUDA graph) compatible.
#define JAXWARP_DEFINE_CUDA_HANDLER(NAME, ENV, HANDLER)                                        \
  JAXWARP_DEFINE_HANDLER(NAME, ENV, HANDLER, cuda, cudaStream_t,                               \
                         .Ctx<xla::ffi::PlatformStream<cudaStream_t>>(),                       \
                         jw_##HANDLER##_kernels_##NAME, ctx,                                   \
                         {xla::ffi::Traits::kCmdBufferCompatible})
#else
// An XLA:CPU handler: XLA:CPU's thread pool first.
#define JAXWARP_DEFINE_CPU_HANDLER(NAME, ENV, HANDLER)                                         \
  JAXWARP_DEFINE_HANDLER(NAME, ENV, HANDLER, cpu, jaxwarp::CpuPool,                            \
                         .Ctx<jaxwarp::CpuPool>(), nullptr, &ctx, {})
#endif

// Layout and scratch size, exported with C names (host code on both platforms).
#define JAXWARP_DEFINE_LAYOUT(NAME, ENV)                                                    \
  extern "C" void jaxwarp_##NAME##_layout(int32_t n, int32_t obs_dim,                       \
                                          const int32_t* per_env, jaxwarp::Layout* out) {    \
    *out = jaxwarp::layout_for(n, obs_dim, ENV::kFields, per_env, ENV::kStateFields);       \
  }

#if defined(__CUDACC__)
// Blocks of at most kMaxThreads, and no minimum of blocks per SM: a tighter
// register cap spills and makes no env faster.
#define JW_LAUNCH_BOUNDS __launch_bounds__(jaxwarp::kMaxThreads)
// A kernel body's call with S its Shared argument (cuda/jaxwarp_kernels.h,
// params_for): true where every member shares the params operand's one row.
#define JW_BY_ROWS(...)                                 \
  jaxwarp::by_params_rows(c, [&](auto rows) {           \
    constexpr bool S = decltype(rows)::value;           \
    __VA_ARGS__;                                        \
  })
// Two kernels per pass: state and scratch in global memory (_kernel) or
// staged in shared memory (_kernel_staged); the layout picks one. Step has a
// third, _kernel_solo (solo_kernel<ENV>(): state in registers), which runs
// wherever n == 1 and the layout does not stage (an empty kernel otherwise).
#define JAXWARP_DEFINE_ENV(NAME, ENV)                                                        \
  extern "C" __global__ void JW_LAUNCH_BOUNDS                                                \
      jaxwarp_##NAME##_reset_kernel(jaxwarp::Call c, jaxwarp::Layout l) {                    \
    JW_BY_ROWS(jaxwarp::reset_kernel_body<ENV, false, S>(c, l));                             \
  }                                                                                          \
  extern "C" __global__ void JW_LAUNCH_BOUNDS                                                \
      jaxwarp_##NAME##_reset_kernel_staged(jaxwarp::Call c, jaxwarp::Layout l) {             \
    JW_BY_ROWS(jaxwarp::reset_kernel_body<ENV, true, S>(c, l));                              \
  }                                                                                          \
  extern "C" __global__ void JW_LAUNCH_BOUNDS                                                \
      jaxwarp_##NAME##_step_kernel(jaxwarp::Call c, jaxwarp::Layout l) {                     \
    JW_BY_ROWS(jaxwarp::step_kernel_body<ENV, false, S>(c, l));                              \
  }                                                                                          \
  extern "C" __global__ void JW_LAUNCH_BOUNDS                                                \
      jaxwarp_##NAME##_step_kernel_staged(jaxwarp::Call c, jaxwarp::Layout l) {              \
    JW_BY_ROWS(jaxwarp::step_kernel_body<ENV, true, S>(c, l));                               \
  }                                                                                          \
  extern "C" __global__ void JW_LAUNCH_BOUNDS                                                \
      jaxwarp_##NAME##_step_kernel_solo(jaxwarp::Call c, jaxwarp::Layout l) {                \
    if constexpr (jaxwarp::solo_kernel<ENV>())                                               \
      JW_BY_ROWS(jaxwarp::solo_step_kernel_body<ENV, S>(c, l));                              \
  }                                                                                          \
  extern "C" __global__ void JW_LAUNCH_BOUNDS                                                \
      jaxwarp_##NAME##_rollout_kernel(jaxwarp::Call c, jaxwarp::Layout l,                    \
                                      jaxwarp::fused::Rollout ro) {                          \
    JW_BY_ROWS(jaxwarp::fused::rollout_kernel_body<ENV, false, S>(c, l, ro));                \
  }                                                                                          \
  extern "C" __global__ void JW_LAUNCH_BOUNDS                                                \
      jaxwarp_##NAME##_rollout_kernel_staged(jaxwarp::Call c, jaxwarp::Layout l,             \
                                             jaxwarp::fused::Rollout ro) {                   \
    JW_BY_ROWS(jaxwarp::fused::rollout_kernel_body<ENV, true, S>(c, l, ro));                 \
  }                                                                                          \
  static const void* const jw_rollout_kernels_##NAME[2] = {                                 \
      reinterpret_cast<const void*>(jaxwarp_##NAME##_rollout_kernel),                        \
      reinterpret_cast<const void*>(jaxwarp_##NAME##_rollout_kernel_staged)};                \
  JAXWARP_DEFINE_LAYOUT(NAME, ENV)                                                           \
  static const void* const jw_reset_kernels_##NAME[2] = {                                   \
      reinterpret_cast<const void*>(jaxwarp_##NAME##_reset_kernel),                          \
      reinterpret_cast<const void*>(jaxwarp_##NAME##_reset_kernel_staged)};                  \
  static const void* const jw_step_kernels_##NAME[3] = {                                    \
      reinterpret_cast<const void*>(jaxwarp_##NAME##_step_kernel),                           \
      reinterpret_cast<const void*>(jaxwarp_##NAME##_step_kernel_staged),                    \
      jaxwarp::solo_kernel<ENV>()                                                            \
          ? reinterpret_cast<const void*>(jaxwarp_##NAME##_step_kernel_solo)                 \
          : nullptr};                                                                        \
  JAXWARP_DEFINE_CUDA_HANDLER(NAME, ENV, reset)                                              \
  JAXWARP_DEFINE_CUDA_HANDLER(NAME, ENV, step)                                               \
  JAXWARP_DEFINE_CUDA_HANDLER(NAME, ENV, rollout)
#else
#define JAXWARP_DEFINE_ENV(NAME, ENV)                                                        \
  JAXWARP_DEFINE_LAYOUT(NAME, ENV)                                                           \
  JAXWARP_DEFINE_CPU_HANDLER(NAME, ENV, reset)                                               \
  JAXWARP_DEFINE_CPU_HANDLER(NAME, ENV, step)                                                \
  JAXWARP_DEFINE_CPU_HANDLER(NAME, ENV, rollout)
#endif
