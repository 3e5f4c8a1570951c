// FFI attribute decoding and buffer bookkeeping for Tag (continuous), shared
// by the XLA:CPU and CUDA handlers.
#pragma once

#include <cstdint>
#include <string>

#include "tag_continuous.h"
#include "xla/ffi/api/ffi.h"

namespace jaxwarp {
namespace tag {

namespace ffi = xla::ffi;

// Attributes exactly as `jaxwarp/envs/tag_continuous.py::_ffi_attrs` passes
// them (names are looked up, order does not matter).
struct TagAttrs {
  int32_t num_agents, num_taggers, episode_length;
  int32_t full_obs, k_observed, exit_after_tag, fixed_start;
  ffi::Span<const uint32_t> fixed_key;
  float grid_length, vmax_tagger, vmax_runner, edge_penalty;
  float step_reward_tagger, step_reward_runner;
  float tag_reward, tag_penalty, end_reward, tag_dist2;
  float pos_scale, speed_scale, dir_scale, time_scale;
  ffi::Span<const float> accel, turn;
};

// Converts decoded attributes into the POD kernels take. Python validates
// first; these checks guard against a call that bypassed it.
inline ffi::Error MakeParams(const TagAttrs& a, Params* p) {
  if (a.num_agents < 2 || a.num_agents > kMaxAgents)
    return ffi::Error::InvalidArgument("num_agents out of range");
  if (a.num_taggers < 0 || a.num_taggers > a.num_agents)
    return ffi::Error::InvalidArgument("num_taggers out of range");
  if (a.accel.size() < 2 || a.accel.size() > kMaxLevels + 1 ||
      a.turn.size() < 2 || a.turn.size() > kMaxLevels + 1)
    return ffi::Error::InvalidArgument("action tables have a bad size");
  if (!a.full_obs && (a.k_observed < 1 || a.k_observed > a.num_agents - 1))
    return ffi::Error::InvalidArgument("k_observed out of range");
  if (a.fixed_key.size() != 2)
    return ffi::Error::InvalidArgument("fixed_key must hold 2 words");
  p->num_agents = a.num_agents;
  p->num_taggers = a.num_taggers;
  p->episode_length = a.episode_length;
  p->num_acc_levels = static_cast<int32_t>(a.accel.size()) - 1;
  p->num_turn_levels = static_cast<int32_t>(a.turn.size()) - 1;
  p->full_obs = a.full_obs;
  p->k_observed = a.k_observed;
  p->exit_after_tag = a.exit_after_tag;
  p->fixed_start = a.fixed_start;
  p->fixed_key0 = a.fixed_key[0];
  p->fixed_key1 = a.fixed_key[1];
  p->grid_length = a.grid_length;
  p->vmax_tagger = a.vmax_tagger;
  p->vmax_runner = a.vmax_runner;
  p->edge_penalty = a.edge_penalty;
  p->step_reward_tagger = a.step_reward_tagger;
  p->step_reward_runner = a.step_reward_runner;
  p->tag_reward = a.tag_reward;
  p->tag_penalty = a.tag_penalty;
  p->end_reward = a.end_reward;
  p->tag_dist2 = a.tag_dist2;
  p->pos_scale = a.pos_scale;
  p->speed_scale = a.speed_scale;
  p->dir_scale = a.dir_scale;
  p->time_scale = a.time_scale;
  for (int i = 0; i <= kMaxLevels; ++i) {
    p->accel[i] = i < static_cast<int>(a.accel.size()) ? a.accel[i] : 0.0f;
    p->turn[i] = i < static_cast<int>(a.turn.size()) ? a.turn[i] : 0.0f;
  }
  return ffi::Error::Success();
}

// How the flat buffers split into batches (from vmap) and envs. Under
// `vmap_method="broadcast_all"` every leading batch axis is folded into the
// env axis; the key buffer has one key per batch member, so env `e` of the
// folded axis uses key `e / envs_per_key` and env-local index
// `e % envs_per_key`, exactly as a Python loop over the batch would.
struct Layout {
  int64_t total_envs;
  int64_t envs_per_key;
};

inline ffi::Error MakeLayout(const Params& p, int64_t agent_elements,
                             int64_t key_elements, Layout* out) {
  if (key_elements < 2 || key_elements % 2 != 0)
    return ffi::Error::InvalidArgument("key buffer must end in 2 uint32 words");
  if (agent_elements % p.num_agents != 0)
    return ffi::Error::InvalidArgument("state buffer size is not a multiple of num_agents");
  const int64_t num_keys = key_elements / 2;
  const int64_t total = agent_elements / p.num_agents;
  if (total % num_keys != 0)
    return ffi::Error::InvalidArgument("env count is not a multiple of the key count");
  out->total_envs = total;
  out->envs_per_key = total / num_keys;
  return ffi::Error::Success();
}

}  // namespace tag
}  // namespace jaxwarp

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(
    ::jaxwarp::tag::TagAttrs,
    ::xla::ffi::StructMember<int32_t>("num_agents"),
    ::xla::ffi::StructMember<int32_t>("num_taggers"),
    ::xla::ffi::StructMember<int32_t>("episode_length"),
    ::xla::ffi::StructMember<int32_t>("full_obs"),
    ::xla::ffi::StructMember<int32_t>("k_observed"),
    ::xla::ffi::StructMember<int32_t>("exit_after_tag"),
    ::xla::ffi::StructMember<int32_t>("fixed_start"),
    ::xla::ffi::StructMember<::xla::ffi::Span<const uint32_t>>("fixed_key"),
    ::xla::ffi::StructMember<float>("grid_length"),
    ::xla::ffi::StructMember<float>("vmax_tagger"),
    ::xla::ffi::StructMember<float>("vmax_runner"),
    ::xla::ffi::StructMember<float>("edge_penalty"),
    ::xla::ffi::StructMember<float>("step_reward_tagger"),
    ::xla::ffi::StructMember<float>("step_reward_runner"),
    ::xla::ffi::StructMember<float>("tag_reward"),
    ::xla::ffi::StructMember<float>("tag_penalty"),
    ::xla::ffi::StructMember<float>("end_reward"),
    ::xla::ffi::StructMember<float>("tag_dist2"),
    ::xla::ffi::StructMember<float>("pos_scale"),
    ::xla::ffi::StructMember<float>("speed_scale"),
    ::xla::ffi::StructMember<float>("dir_scale"),
    ::xla::ffi::StructMember<float>("time_scale"),
    ::xla::ffi::StructMember<::xla::ffi::Span<const float>>("accel"),
    ::xla::ffi::StructMember<::xla::ffi::Span<const float>>("turn"));
