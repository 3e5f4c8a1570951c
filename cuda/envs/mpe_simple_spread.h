// MPE simple_spread (JaxMARL's simple_spread_v3, discrete actions): N agents
// cover L landmarks; shared reward -sum over landmarks of the distance to the
// nearest agent, local penalty -1 per agent collided with. Written against
// jaxwarp's authoring API (cuda/jaxwarp_env.h) like any user env; spec and
// pure-JAX reference: jaxwarp/envs/mpe_simple_spread.py (same expressions as JaxMARL's
// jaxmarl/environments/mpe/simple.py and simple_spread.py). What both MPE
// envs share (phases, physics, reset, observation start): _mpe.h.
//
// Landmark l lives in slot l of the per-agent fields lm_x / lm_y, so
// num_landmarks <= num_agents (slots >= num_landmarks stay 0).
#pragma once

#include "_mpe.h"

JW_HD void reset(const Params& p, const State& s, const jaxwarp::Agent& a) {
  mpe_reset(s, a, p.num_landmarks);
}

JW_HD void step(const Params& p, const State& s, const jaxwarp::Agent& a, const int32_t* action,
                int phase, jaxwarp::StepResult& r) {
  const int i = a.agent;
  const int n = a.num_agents;
  const float dist_min = p.agent_size + p.agent_size;
  if (phase == 0) {
    float ux, uy;
    mpe_action_force(action[0], p.accel, &ux, &uy);
    // Soft collisions with the other agents (landmarks do not collide).
    float fx = 0.0f, fy = 0.0f;
    for (int j = 0; j < n; ++j)
      if (j != i) mpe_add_contact(p, s, i, s.x[j], s.y[j], dist_min, &fx, &fy);
    s.force_x[i] = fx + ux;
    s.force_y[i] = fy + uy;
  } else if (phase == 1) {
    float vx, vy;  // no speed cap in simple_spread
    mpe_integrate(p, s, i, &vx, &vy);
    s.vx[i] = vx;
    s.vy[i] = vy;
  } else {
    int collisions = 0;
    for (int j = 0; j < n; ++j)
      if (j != i) collisions += mpe_agent_dist(s, i, j) < dist_min ? 1 : 0;
    float shared = 0.0f;  // -sum over landmarks of the nearest agent's distance
    for (int l = 0; l < p.num_landmarks; ++l) {
      float nearest = 0.0f;
      for (int j = 0; j < n; ++j) {
        const float dx = s.x[j] - s.lm_x[l];
        const float dy = s.y[j] - s.lm_y[l];
        const float d = sqrtf(fmaf(dx, dx, dy * dy));
        nearest = j == 0 ? d : fminf(nearest, d);
      }
      shared += -nearest;
    }
    r.reward = static_cast<float>(-collisions) * p.local_ratio + shared * (1.0f - p.local_ratio);
  }
}

// [vel (2), pos (2), landmark - pos (2 L), other agent - pos (2 (N-1), by
// index), communication (2 (N-1), always 0: agents are silent)].
JW_HD void observe(const Params& p, const State& s, const jaxwarp::Agent& a, float* obs) {
  int k = mpe_observe_common(s, a, p.num_landmarks, obs);
  for (int j = 0; j < 2 * (a.num_agents - 1); ++j) obs[k++] = 0.0f;
}
