// MPE simple_spread (JaxMARL's simple_spread_v3, discrete actions): N agents
// cover L landmarks; shared reward -sum over landmarks of the distance to the
// nearest agent, local penalty -1 per agent collided with. Written against
// jaxwarp's authoring API (cuda/jaxwarp_env.h) like any user env; spec and
// pure-JAX reference: jaxwarp/envs/mpe_simple_spread.py (same expressions as JaxMARL's
// jaxmarl/environments/mpe/simple.py and simple_spread.py).
//
// Landmark l lives in slot l of the per-agent fields lm_x / lm_y, so
// num_landmarks <= num_agents (slots >= num_landmarks stay 0).
#pragma once

// 0: forces from the old positions; 1: integrate; 2: rewards on the new
// positions. The kernels keep the step counter, the returns and the time
// limit (the spec's time_limit, max_episode_steps).
constexpr int kStepPhases = 3;

// JaxMARL's soft contact: contact_margin * logaddexp(0, -(dist - dist_min) / margin),
// with jax.numpy's logaddexp: max(0, z) + log1p(exp(-|z|)).
JW_HD float mpe_penetration(float dist, float dist_min, float k) {
  const float z = -(dist - dist_min) / k;
  return (fmaxf(0.0f, z) + log1pf(expf(-fabsf(z)))) * k;
}

JW_HD void reset(const Params& p, const State& s, const jaxwarp::Agent& a) {
  const int i = a.agent;
  s.x[i] = a.uniform(0, -1.0f, 1.0f);
  s.y[i] = a.uniform(1, -1.0f, 1.0f);
  s.vx[i] = 0.0f;
  s.vy[i] = 0.0f;
  const bool lm = i < p.num_landmarks;
  s.lm_x[i] = lm ? a.uniform(2, -1.0f, 1.0f) : 0.0f;
  s.lm_y[i] = lm ? a.uniform(3, -1.0f, 1.0f) : 0.0f;
  s.force_x[i] = 0.0f;
  s.force_y[i] = 0.0f;
}

JW_HD void step(const Params& p, const State& s, const jaxwarp::Agent& a, const int32_t* action,
                int phase, jaxwarp::StepResult& r) {
  const int i = a.agent;
  const int n = a.num_agents;
  if (phase == 0) {
    // JaxMARL's discrete decoding: 0 no-op, 1 -x, 2 +x, 3 -y, 4 +y (for any
    // int: <= 2 moves along x, even is +, 0 is no move), times accel.
    const int m = action[0];
    const float sign = (m & 1) == 0 ? 1.0f : -1.0f;
    const float u = m != 0 ? sign * p.accel : 0.0f;
    const float ux = m <= 2 ? u : 0.0f;
    const float uy = m <= 2 ? 0.0f : u;
    // Soft collisions with the other agents (landmarks do not collide).
    const float dist_min = p.agent_size + p.agent_size;
    float fx = 0.0f, fy = 0.0f;
    for (int j = 0; j < n; ++j) {
      if (j == i) continue;
      const float dx = s.x[i] - s.x[j];
      const float dy = s.y[i] - s.y[j];
      // XLA contracts the reference's dx * dx + dy * dy into this fma.
      const float dist = sqrtf(fmaf(dx, dx, dy * dy));
      const float pen = mpe_penetration(dist, dist_min, p.contact_margin);
      fx += p.contact_force * dx / dist * pen;
      fy += p.contact_force * dy / dist * pen;
    }
    s.force_x[i] = fx + ux;
    s.force_y[i] = fy + uy;
  } else if (phase == 1) {
    // Semi-implicit as JaxMARL: position with the old velocity, then damping
    // and force (no speed cap in simple_spread).
    const float keep = 1.0f - p.damping;
    s.x[i] = fmaf(s.vx[i], p.dt, s.x[i]);
    s.y[i] = fmaf(s.vy[i], p.dt, s.y[i]);
    s.vx[i] = fmaf(s.vx[i], keep, s.force_x[i] / p.mass * p.dt);
    s.vy[i] = fmaf(s.vy[i], keep, s.force_y[i] / p.mass * p.dt);
  } else {
    const float dist_min = p.agent_size + p.agent_size;
    int collisions = 0;
    for (int j = 0; j < n; ++j) {
      if (j == i) continue;
      const float dx = s.x[i] - s.x[j];
      const float dy = s.y[i] - s.y[j];
      collisions += sqrtf(fmaf(dx, dx, dy * dy)) < dist_min ? 1 : 0;
    }
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
  const int i = a.agent;
  const int n = a.num_agents;
  int k = 0;
  obs[k++] = s.vx[i];
  obs[k++] = s.vy[i];
  obs[k++] = s.x[i];
  obs[k++] = s.y[i];
  for (int l = 0; l < p.num_landmarks; ++l) {
    obs[k++] = s.lm_x[l] - s.x[i];
    obs[k++] = s.lm_y[l] - s.y[i];
  }
  for (int j = 0; j < n; ++j) {
    if (j == i) continue;
    obs[k++] = s.x[j] - s.x[i];
    obs[k++] = s.y[j] - s.y[i];
  }
  for (int j = 0; j < 2 * (n - 1); ++j) obs[k++] = 0.0f;
}
