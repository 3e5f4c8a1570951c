// Tag (continuous): per-agent game logic shared by the CUDA kernels and the
// XLA:CPU handlers. Specification: docs/tag_continuous.md; the
// pure-JAX twin is jaxwarp/envs/tag_continuous.py (`reference_*`), and the two
// are written operation for operation alike so they agree bit for bit.
#pragma once

#include "jaxwarp_common.h"

namespace jaxwarp {
namespace tag {

constexpr int kFeatures = 7;       // per observed agent
constexpr int kMaxLevels = 64;     // action table capacity (checked in Python)
constexpr int kMaxAgents = 65535;  // neighbour ids are stored as uint16

// Static configuration, decoded once from FFI attributes and passed by value
// to the kernels. Derived float constants (speed caps, reciprocals, squared
// tag distance) are computed once in Python so every backend uses the same
// float32 values.
struct Params {
  int32_t num_agents;
  int32_t num_taggers;
  int32_t episode_length;
  int32_t num_acc_levels;   // table size is levels + 1 (index 0 = no-op)
  int32_t num_turn_levels;
  int32_t full_obs;         // 1: all N-1 others; 0: k nearest in the game
  int32_t k_observed;
  int32_t exit_after_tag;
  int32_t fixed_start;      // 1: every reset uses fixed_key and env index 0
  uint32_t fixed_key0, fixed_key1;
  float grid_length;
  float vmax_tagger, vmax_runner;
  float edge_penalty;
  float step_reward_tagger, step_reward_runner;
  float tag_reward, tag_penalty, end_reward;
  float tag_dist2;          // (tagging_distance * L)^2
  float pos_scale;          // 1 / (sqrt(2) L)
  float speed_scale;        // 1 / (max_speed + 1e-10)
  float dir_scale;          // 1 / (2 pi)
  float time_scale;         // 1 / episode_length
  float accel[kMaxLevels + 1];
  float turn[kMaxLevels + 1];
};

JW_HD int obs_dim(const Params& p) {
  const int slots = p.full_obs ? p.num_agents - 1 : p.k_observed;
  return kFeatures * slots + 1;
}

JW_HD int num_runners(const Params& p) { return p.num_agents - p.num_taggers; }

constexpr float kTwoPi = 6.28318548202514648f;  // float32(2 pi)
// Reset directions: float32(k pi / 2), k = 0..3.
JW_HD float heading(uint32_t k) {
  return k == 0 ? 0.0f
                : (k == 1 ? 1.5707963705062866f
                          : (k == 2 ? 3.1415927410125732f : 4.71238899230957f));
}

// One agent's kinematic state; structure-of-arrays in memory.
struct Agent {
  float x, y, speed, dir, acc;
  int32_t still;
};

// Step rule 2 of the spec. Returns this step's edge penalty.
JW_HD float move_agent(const Params& p, bool is_tagger, int a_acc, int a_turn,
                       Agent& s) {
  // Out-of-range actions are clamped (reported in Python under checks=True).
  a_acc = a_acc < 0 ? 0 : (a_acc > p.num_acc_levels ? p.num_acc_levels : a_acc);
  a_turn =
      a_turn < 0 ? 0 : (a_turn > p.num_turn_levels ? p.num_turn_levels : a_turn);
  const float vmax = is_tagger ? p.vmax_tagger : p.vmax_runner;
  s.acc = s.acc + p.accel[a_acc];
  float d = fmodf(s.dir + p.turn[a_turn], kTwoPi);
  d = d < 0.0f ? d + kTwoPi : d;
  s.dir = s.still ? d : 0.0f;
  float v = s.speed + s.acc;
  v = v < 0.0f ? 0.0f : v;
  v = v > vmax ? vmax : v;
  s.speed = s.still ? v : 0.0f;
  if (s.speed <= 0.0f || s.speed >= vmax) s.acc = 0.0f;
  float sn, cs;
  sincos_fixed(s.dir, &sn, &cs);
  float x = fmaf(s.speed, cs, s.x);
  float y = fmaf(s.speed, sn, s.y);
  const bool crossed =
      x < 0.0f || x > p.grid_length || y < 0.0f || y > p.grid_length;
  x = x < 0.0f ? 0.0f : (x > p.grid_length ? p.grid_length : x);
  y = y < 0.0f ? 0.0f : (y > p.grid_length ? p.grid_length : y);
  s.x = x;
  s.y = y;
  return crossed ? p.edge_penalty : 0.0f;
}

// Fresh start of agent `agent` in env `env` (env-local index) from key k.
// Draws: threefry(k, (env, 2 agent)) -> x, y; threefry(k, (env, 2 agent + 1))
// -> direction (top two bits pick one of 0, pi/2, pi, 3pi/2).
JW_HD Agent reset_agent(const Params& p, uint32_t k0, uint32_t k1, uint32_t env,
                        uint32_t agent) {
  if (p.fixed_start) {
    k0 = p.fixed_key0;
    k1 = p.fixed_key1;
    env = 0;
  }
  const U32x2 u = threefry2x32(k0, k1, env, 2u * agent);
  const U32x2 w = threefry2x32(k0, k1, env, 2u * agent + 1u);
  Agent s;
  const float x = uniform01(u.a) * p.grid_length;
  const float y = uniform01(u.b) * p.grid_length;
  s.x = x > p.grid_length ? p.grid_length : x;  // as the reference: see there
  s.y = y > p.grid_length ? p.grid_length : y;
  s.dir = heading(w.a >> 30);
  s.speed = 0.0f;
  s.acc = 0.0f;
  s.still = 1;
  return s;
}

JW_HD float sq_dist(float xi, float yi, float xj, float yj) {
  const float dx = xj - xi;
  const float dy = yj - yi;
  return fmaf(dx, dx, dy * dy);
}

// Feature `f` of agent j as seen by agent i (both in the observation state).
JW_HD float obs_feature(const Params& p, int f, int i, int j, const float* x,
                        const float* y, const float* speed, const float* acc,
                        const float* dir, const int32_t* still) {
  switch (f) {
    case 0: return (x[j] - x[i]) * p.pos_scale;
    case 1: return (y[j] - y[i]) * p.pos_scale;
    case 2: return (speed[j] - speed[i]) * p.speed_scale;
    case 3: return (acc[j] - acc[i]) * p.speed_scale;
    case 4: return (dir[j] - dir[i]) * p.dir_scale;
    case 5: return j < p.num_taggers ? 1.0f : 0.0f;
    default: return static_cast<float>(still[j]);
  }
}

// Agent j observed in slot s of agent i under full observation.
JW_HD int full_obs_other(int i, int s) { return s < i ? s : s + 1; }

// Base reward of an agent in the game before tagging (spec: rewards).
JW_HD float base_reward(const Params& p, bool is_tagger, float edge) {
  return edge + (is_tagger ? p.step_reward_tagger : p.step_reward_runner);
}

// Reward after tagging. `base`: base_reward if the agent was in the game at
// the start of tagging, else 0; `tags`: runners this tagger tagged this step;
// `tagged`: this runner was tagged; `still_after`: in the game after tagging.
JW_HD float final_reward(const Params& p, bool is_tagger, float base, int tags,
                         bool tagged, bool still_after, bool last_step) {
  float r = base;
  if (is_tagger) {
    r = fmaf(static_cast<float>(tags), p.tag_reward, r);
  } else {
    if (tagged) r = r + p.tag_penalty;
    if (still_after && last_step) r = r + p.end_reward;
  }
  return r;
}

}  // namespace tag
}  // namespace jaxwarp
