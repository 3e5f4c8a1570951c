// MPE simple_tag (mpe2's simple_tag_v3, discrete actions; JaxMARL's
// simple_tag_v3 where it agrees): agents 0 .. A-1 are adversaries (slower,
// larger) that chase good agents A .. N-1 among L obstacles; +10 to every
// adversary per adversary/good contact, -10 to a good agent per adversary
// touching it, and a penalty for good agents leaving [-1, 1].
// Written against jaxwarp's authoring API (cuda/jaxwarp_env.h) like any user
// env; spec and pure-JAX reference: jaxwarp/envs/mpe_simple_tag.py (same expressions as
// JaxMARL's jaxmarl/environments/mpe/simple.py and simple_tag.py for the
// physics; rewards and observations as mpe2's simple_tag.py, which JaxMARL
// reproduces only with one good agent: see docs/envs/mpe_simple_tag.md).
// What both MPE envs share (phases, physics, reset, observation start): _mpe.h.
//
// Obstacle l lives in slot l of the per-agent fields lm_x / lm_y, so
// num_obs <= num_agents (slots >= num_obs stay 0).
#pragma once

#include "_mpe.h"

JW_HD void reset(const Params& p, const State& s, const jaxwarp::Agent& a) {
  mpe_reset(s, a, p.num_obs);
}

JW_HD float tag_size(const Params& p, int i) {
  return i < p.num_adversaries ? p.adversary_size : p.good_size;
}

// JaxMARL's map_bounds_reward of |coordinate| x.
JW_HD float tag_bound(float x) {
  if (x < 0.9f) return 0.0f;
  if (x < 1.0f) return (x - 0.9f) * 10.0f;
  return fminf(expf(2.0f * x - 2.0f), 10.0f);
}

JW_HD void step(const Params& p, const State& s, const jaxwarp::Agent& a, const int32_t* action,
                int phase, jaxwarp::StepResult& r) {
  const int i = a.agent;
  const int n = a.num_agents;
  const bool adversary = i < p.num_adversaries;
  if (phase == 0) {
    float ux, uy;
    mpe_action_force(action[0], adversary ? p.adversary_accel : p.good_accel, &ux, &uy);
    // Soft collisions with every other agent and every obstacle.
    float fx = 0.0f, fy = 0.0f;
    for (int j = 0; j < n + p.num_obs; ++j) {
      if (j == i) continue;
      const bool agent = j < n;
      const float qx = agent ? s.x[j] : s.lm_x[j - n];
      const float qy = agent ? s.y[j] : s.lm_y[j - n];
      const float dist_min = tag_size(p, i) + (agent ? tag_size(p, j) : p.obs_size);
      mpe_add_contact(p, s, i, qx, qy, dist_min, &fx, &fy);
    }
    s.force_x[i] = fx + ux;
    s.force_y[i] = fy + uy;
  } else if (phase == 1) {
    float vx, vy;
    mpe_integrate(p, s, i, &vx, &vy);
    const float max_speed = adversary ? p.adversary_max_speed : p.good_max_speed;
    const float speed = sqrtf(fmaf(vx, vx, vy * vy));
    if (speed > max_speed) {
      vx = vx / speed * max_speed;
      vy = vy / speed * max_speed;
    }
    s.vx[i] = vx;
    s.vy[i] = vy;
  } else {
    // hit(g, b): good agent g touches adversary b. A good agent counts its
    // own row (mpe2; JaxMARL's clamped index gives every good agent the last
    // good agent's row), an adversary every contact.
    const int good = n - p.num_adversaries;
    const int row = adversary ? -1 : i - p.num_adversaries;
    int total = 0, mine = 0;
    for (int g = 0; g < good; ++g) {
      const int gi = p.num_adversaries + g;
      for (int b = 0; b < p.num_adversaries; ++b) {
        const bool hit = mpe_agent_dist(s, gi, b) < p.good_size + p.adversary_size;
        total += hit ? 1 : 0;
        mine += hit && g == row ? 1 : 0;
      }
    }
    if (adversary) {
      r.reward = static_cast<float>(10 * total);
    } else {
      r.reward = static_cast<float>(-10 * mine) - (tag_bound(fabsf(s.x[i])) +
                                                   tag_bound(fabsf(s.y[i])));
    }
  }
}

// [vel (2), pos (2), obstacle - pos (2 L), other agent - pos (2 (N-1), by
// index), velocity of every other good agent (2 each, by index)], as mpe2:
// 4 + 2 L + 2 (N-1) + 2 G entries for adversaries, 2 fewer for good agents
// (who do not see their own velocity twice); their last 2 entries are 0.
JW_HD void observe(const Params& p, const State& s, const jaxwarp::Agent& a, float* obs) {
  const int i = a.agent;
  int k = mpe_observe_common(s, a, p.num_obs, obs);
  for (int j = p.num_adversaries; j < a.num_agents; ++j) {
    if (j == i) continue;
    obs[k++] = s.vx[j];
    obs[k++] = s.vy[j];
  }
  if (i >= p.num_adversaries) {  // padding to the adversaries' width
    obs[k++] = 0.0f;
    obs[k++] = 0.0f;
  }
}
