// XLA FFI handlers of every jaxwarp env, templated on the env (see
// jaxwarp_kernels.h for the traits struct). One macro,
// JAXWARP_DEFINE_ENV(name, Env), defines for the platform being compiled:
//   jaxwarp_<name>_reset_{cpu,cuda}, jaxwarp_<name>_step_{cpu,cuda}: FFI handlers;
//   jaxwarp_<name>_layout: the launch layout (exported for Python and PyCUDA);
//   jaxwarp_<name>_scratch_elems: size of the scratch buffer Python passes;
//   (CUDA) jaxwarp_<name>_{reset,step}_kernel: the kernels, with C names so
//   that PyCUDA can launch the very same code.
//
// Buffers (Python: jaxwarp.authoring.ContractEnv):
//   reset(keys u32[members*3]) -> (state fields..., scratch i32[*], obs f32[envs, n, obs_dim])
//   step(keys, actions i32[envs, n, heads], state fields...) ->
//       (state fields..., scratch, obs, reward f32[envs, n], done, term, trunc bool[envs])
// Attributes: jw_params (the Params struct as i32 words), jw_per_env (words
// per env of each field), jw_num_agents, jw_obs_dim, jw_heads (step).
// State fields are aliased input -> output; the handlers allocate nothing and
// never synchronise.
#pragma once

#include <stdint.h>
#include <string.h>

#include "jaxwarp_kernels.h"
#include "xla/ffi/api/ffi.h"

namespace jaxwarp {
namespace ffi_impl {
namespace ffi = xla::ffi;

template <class E>
ffi::Error decode_params(ffi::Span<const int32_t> words, typename E::Params* p) {
  if (words.size() * 4 != sizeof(typename E::Params))
    return ffi::Error::InvalidArgument("jaxwarp: jw_params has the wrong size for this env's "
                                       "Params (library and Python spec out of date?)");
  memcpy(p, words.begin(), sizeof(typename E::Params));
  return ffi::Error::Success();
}

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
  for (int f = 0; f < E::kFields; ++f) c->per_env[f] = per_env[f];
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


template <class E>
ffi::Error reset(const void* const* kernels, void* stream, ffi::Buffer<ffi::U32> keys, ffi::RemainingRets rets,
                 ffi::Span<const int32_t> params, ffi::Span<const int32_t> per_env, int32_t n,
                 int32_t obs_dim) {
  typename E::Params p;
  if (auto err = decode_params<E>(params, &p); err.failure()) return err;
  if (rets.size() != static_cast<size_t>(E::kStateFields + 2))
    return ffi::Error::InvalidArgument("jaxwarp reset: wrong number of results");
  auto obs = rets.get<ffi::AnyBuffer>(E::kStateFields + 1);
  if (!obs.has_value()) return obs.error();
  Call c{};
  if (auto err = prepare<E>(&c, per_env, n, obs_dim, (*obs)->element_count(),
                            keys.element_count()); err.failure())
    return err;
  c.keys = keys.typed_data();
  c.obs = static_cast<float*>((*obs)->untyped_data());
  c.heads = 0;
#if defined(__CUDACC__)
  const Layout l = layout_for(n, obs_dim, E::kFields, c.per_env, E::kStateFields, row_observe<E>());
  if (auto err = bind_results<E>(&c, rets, !l.staged); err.failure()) return err;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  // Before the first reset every state field is zero.
  for (int f = 0; f < E::kStateFields; ++f)
    cudaMemsetAsync(c.base[f], 0, 4 * static_cast<size_t>(c.per_env[f]) * c.envs, s);
  if (cudaError_t e = launch(kernels[l.staged ? 1 : 0], l, c.envs, s, &p, c); e != cudaSuccess)
    return ffi::Error::Internal(cudaGetErrorString(e));
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return ffi::Error::Internal(cudaGetErrorString(e));
#else
  (void)stream;
  (void)kernels;
  if (auto err = bind_results<E>(&c, rets, true); err.failure()) return err;
  for (int f = 0; f < E::kStateFields; ++f)
    memset(c.base[f], 0, 4 * static_cast<size_t>(c.per_env[f]) * c.envs);
  reset_cpu<E>(p, c);
#endif
  return ffi::Error::Success();
}

template <class E>
ffi::Error step(const void* const* kernels, void* stream, ffi::Buffer<ffi::U32> keys, ffi::Buffer<ffi::S32> actions,
                ffi::RemainingArgs args, ffi::RemainingRets rets,
                ffi::Span<const int32_t> params, ffi::Span<const int32_t> per_env, int32_t n,
                int32_t obs_dim, int32_t heads) {
  typename E::Params p;
  if (auto err = decode_params<E>(params, &p); err.failure()) return err;
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
  c.heads = heads;
  c.actions = actions.typed_data();
  c.obs = static_cast<float*>((*obs)->untyped_data());
  c.reward = static_cast<float*>((*reward)->untyped_data());
  c.done = static_cast<bool*>((*done)->untyped_data());
  c.term = static_cast<bool*>((*term)->untyped_data());
  c.trunc = static_cast<bool*>((*trunc)->untyped_data());
#if defined(__CUDACC__)
  const Layout l = layout_for(n, obs_dim, E::kFields, c.per_env, E::kStateFields, row_observe<E>());
  if (auto err = bind_results<E>(&c, rets, !l.staged); err.failure()) return err;
#else
  if (auto err = bind_results<E>(&c, rets, true); err.failure()) return err;
#endif
  // State is aliased input -> output; copy where XLA did not alias.
  for (int f = 0; f < E::kStateFields; ++f) {
    auto in = args.get<ffi::AnyBuffer>(f);
    if (!in.has_value()) return in.error();
    if (in->untyped_data() == c.base[f]) continue;
#if defined(__CUDACC__)
    cudaMemcpyAsync(c.base[f], in->untyped_data(), in->size_bytes(), cudaMemcpyDeviceToDevice,
                    static_cast<cudaStream_t>(stream));
#else
    memcpy(c.base[f], in->untyped_data(), in->size_bytes());
#endif
  }
#if defined(__CUDACC__)
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (cudaError_t e = launch(kernels[l.staged ? 1 : 0], l, c.envs, s, &p, c); e != cudaSuccess)
    return ffi::Error::Internal(cudaGetErrorString(e));
#else
  (void)stream;
  (void)kernels;
  step_cpu<E>(p, c);
#endif
  return ffi::Error::Success();
}
}  // namespace ffi_impl

}  // namespace jaxwarp

// The handlers' FFI signatures: keys, (actions, state...), results, attributes.
#define JAXWARP_BIND_RESET(STREAM_BIND)                                                     \
  xla::ffi::Ffi::Bind() STREAM_BIND.Arg<xla::ffi::Buffer<xla::ffi::U32>>()                  \
      .RemainingRets()                                                                      \
      .Attr<xla::ffi::Span<const int32_t>>("jw_params")                                     \
      .Attr<xla::ffi::Span<const int32_t>>("jw_per_env")                                    \
      .Attr<int32_t>("jw_num_agents")                                                       \
      .Attr<int32_t>("jw_obs_dim")
#define JAXWARP_BIND_STEP(STREAM_BIND)                                                      \
  xla::ffi::Ffi::Bind() STREAM_BIND.Arg<xla::ffi::Buffer<xla::ffi::U32>>()                  \
      .Arg<xla::ffi::Buffer<xla::ffi::S32>>()                                               \
      .RemainingArgs()                                                                      \
      .RemainingRets()                                                                      \
      .Attr<xla::ffi::Span<const int32_t>>("jw_params")                                     \
      .Attr<xla::ffi::Span<const int32_t>>("jw_per_env")                                    \
      .Attr<int32_t>("jw_num_agents")                                                       \
      .Attr<int32_t>("jw_obs_dim")                                                          \
      .Attr<int32_t>("jw_heads")
#define JAXWARP_HANDLER_ARGS_RESET                                                          \
  xla::ffi::Buffer<xla::ffi::U32> keys, xla::ffi::RemainingRets rets,                       \
      xla::ffi::Span<const int32_t> params, xla::ffi::Span<const int32_t> per_env,          \
      int32_t n, int32_t obs_dim
#define JAXWARP_HANDLER_ARGS_STEP                                                           \
  xla::ffi::Buffer<xla::ffi::U32> keys, xla::ffi::Buffer<xla::ffi::S32> actions,            \
      xla::ffi::RemainingArgs args, xla::ffi::RemainingRets rets,                           \
      xla::ffi::Span<const int32_t> params, xla::ffi::Span<const int32_t> per_env,          \
      int32_t n, int32_t obs_dim, int32_t heads

// Layout and scratch size, exported with C names (host code on both platforms).
#define JAXWARP_DEFINE_LAYOUT(NAME, ENV)                                                    \
  extern "C" void jaxwarp_##NAME##_layout(int32_t n, int32_t obs_dim,                       \
                                          const int32_t* per_env, jaxwarp::Layout* out) {    \
    *out = jaxwarp::layout_for(n, obs_dim, ENV::kFields, per_env, ENV::kStateFields,        \
                               jaxwarp::row_observe<ENV>());                                \
  }

#if defined(__CUDACC__)
// Two kernels per pass: state and scratch in global memory (_kernel) or
// staged in shared memory (_kernel_staged); the layout picks one.
#define JAXWARP_DEFINE_ENV(NAME, ENV)                                                        \
  extern "C" __global__ void __launch_bounds__(jaxwarp::kMaxThreads)                         \
      jaxwarp_##NAME##_reset_kernel(ENV::Params p, jaxwarp::Call c, jaxwarp::Layout l) {     \
    jaxwarp::reset_kernel_body<ENV, false>(p, c, l);                                         \
  }                                                                                          \
  extern "C" __global__ void __launch_bounds__(jaxwarp::kMaxThreads)                         \
      jaxwarp_##NAME##_reset_kernel_staged(ENV::Params p, jaxwarp::Call c,                   \
                                           jaxwarp::Layout l) {                              \
    jaxwarp::reset_kernel_body<ENV, true>(p, c, l);                                          \
  }                                                                                          \
  extern "C" __global__ void __launch_bounds__(jaxwarp::kMaxThreads)                         \
      jaxwarp_##NAME##_step_kernel(ENV::Params p, jaxwarp::Call c, jaxwarp::Layout l) {      \
    jaxwarp::step_kernel_body<ENV, false>(p, c, l);                                          \
  }                                                                                          \
  extern "C" __global__ void __launch_bounds__(jaxwarp::kMaxThreads)                         \
      jaxwarp_##NAME##_step_kernel_staged(ENV::Params p, jaxwarp::Call c,                    \
                                          jaxwarp::Layout l) {                               \
    jaxwarp::step_kernel_body<ENV, true>(p, c, l);                                           \
  }                                                                                          \
  JAXWARP_DEFINE_LAYOUT(NAME, ENV)                                                           \
  static const void* const jw_reset_kernels_##NAME[2] = {                                   \
      reinterpret_cast<const void*>(jaxwarp_##NAME##_reset_kernel),                          \
      reinterpret_cast<const void*>(jaxwarp_##NAME##_reset_kernel_staged)};                  \
  static const void* const jw_step_kernels_##NAME[2] = {                                    \
      reinterpret_cast<const void*>(jaxwarp_##NAME##_step_kernel),                           \
      reinterpret_cast<const void*>(jaxwarp_##NAME##_step_kernel_staged)};                   \
  static xla::ffi::Error jw_reset_##NAME(cudaStream_t stream, JAXWARP_HANDLER_ARGS_RESET) {  \
    return jaxwarp::ffi_impl::reset<ENV>(jw_reset_kernels_##NAME, stream, keys, rets, params, \
                                         per_env, n, obs_dim);                               \
  }                                                                                          \
  static xla::ffi::Error jw_step_##NAME(cudaStream_t stream, JAXWARP_HANDLER_ARGS_STEP) {    \
    return jaxwarp::ffi_impl::step<ENV>(jw_step_kernels_##NAME, stream, keys, actions, args, \
                                        rets, params, per_env, n, obs_dim, heads);           \
  }                                                                                          \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(                                                             \
      jaxwarp_##NAME##_reset_cuda, jw_reset_##NAME,                                          \
      JAXWARP_BIND_RESET(.Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),                    \
      {xla::ffi::Traits::kCmdBufferCompatible});                                             \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(                                                             \
      jaxwarp_##NAME##_step_cuda, jw_step_##NAME,                                            \
      JAXWARP_BIND_STEP(.Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),                     \
      {xla::ffi::Traits::kCmdBufferCompatible});
#else
#define JAXWARP_DEFINE_ENV(NAME, ENV)                                                        \
  JAXWARP_DEFINE_LAYOUT(NAME, ENV)                                                           \
  static xla::ffi::Error jw_reset_##NAME(JAXWARP_HANDLER_ARGS_RESET) {                       \
    return jaxwarp::ffi_impl::reset<ENV>(nullptr, nullptr, keys, rets, params, per_env, n,   \
                                         obs_dim);                                           \
  }                                                                                          \
  static xla::ffi::Error jw_step_##NAME(JAXWARP_HANDLER_ARGS_STEP) {                         \
    return jaxwarp::ffi_impl::step<ENV>(nullptr, nullptr, keys, actions, args, rets, params, \
                                        per_env, n, obs_dim, heads);                         \
  }                                                                                          \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxwarp_##NAME##_reset_cpu, jw_reset_##NAME,                 \
                                JAXWARP_BIND_RESET(), {});                                   \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxwarp_##NAME##_step_cpu, jw_step_##NAME,                   \
                                JAXWARP_BIND_STEP(), {});
#endif
