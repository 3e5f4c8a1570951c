// What the two MPE env headers share (not an env: no spec, no layout of its
// own): mpe_simple_spread.h and mpe_simple_tag.h include it, inside their
// env's namespace, so it reads their Params and State (the fields both have:
// x, y, vx, vy, lm_x, lm_y, force_x, force_y; dt, damping, mass,
// contact_force, contact_margin). The Python side: jaxwarp/envs/_mpe.py.
// Same expressions as JaxMARL's jaxmarl/environments/mpe/simple.py.
//
// Step phases of both: 0 forces from the old positions; 1 integrate; 2
// rewards on the new positions. The kernels keep the step counter, the
// episode returns and the time limit (the spec's time_limit,
// max_episode_steps: JaxMARL's or mpe2's episode length).
#pragma once

constexpr int kStepPhases = 3;

// JaxMARL's soft contact: contact_margin * logaddexp(0, -(dist - dist_min) / margin),
// with jax.numpy's logaddexp: max(0, z) + log1p(exp(-|z|)).
JW_HD float mpe_penetration(float dist, float dist_min, float k) {
  const float z = -(dist - dist_min) / k;
  return (fmaxf(0.0f, z) + log1pf(expf(-fabsf(z)))) * k;
}

// A fresh start: positions uniform in [-1, 1), at rest; landmark (obstacle)
// l < num_landmarks in slot l of lm_x / lm_y, the other slots 0.
JW_HD void mpe_reset(const State& s, const jaxwarp::Agent& a, int num_landmarks) {
  const int i = a.agent;
  s.x[i] = a.uniform(0, -1.0f, 1.0f);
  s.y[i] = a.uniform(1, -1.0f, 1.0f);
  s.vx[i] = 0.0f;
  s.vy[i] = 0.0f;
  const bool lm = i < num_landmarks;
  s.lm_x[i] = lm ? a.uniform(2, -1.0f, 1.0f) : 0.0f;
  s.lm_y[i] = lm ? a.uniform(3, -1.0f, 1.0f) : 0.0f;
  s.force_x[i] = 0.0f;
  s.force_y[i] = 0.0f;
}

// JaxMARL's discrete decoding of action m: 0 no-op, 1 -x, 2 +x, 3 -y, 4 +y
// (for any int: <= 2 moves along x, even is +, 0 is no move), times accel.
JW_HD void mpe_action_force(int32_t m, float accel, float* ux, float* uy) {
  const float sign = (m & 1) == 0 ? 1.0f : -1.0f;
  const float u = m != 0 ? sign * accel : 0.0f;
  *ux = m <= 2 ? u : 0.0f;
  *uy = m <= 2 ? 0.0f : u;
}

// Adds to (fx, fy) the soft-contact force on agent i from an entity at
// (qx, qy), their radii summing to dist_min.
JW_HD void mpe_add_contact(const Params& p, const State& s, int i, float qx, float qy,
                           float dist_min, float* fx, float* fy) {
  const float dx = s.x[i] - qx;
  const float dy = s.y[i] - qy;
  // XLA contracts the reference's dx * dx + dy * dy into this fma.
  const float dist = sqrtf(fmaf(dx, dx, dy * dy));
  const float pen = mpe_penetration(dist, dist_min, p.contact_margin);
  *fx += p.contact_force * dx / dist * pen;
  *fy += p.contact_force * dy / dist * pen;
}

// Semi-implicit Euler as JaxMARL: the position moves with the old velocity;
// the new velocity (damped, plus force / mass dt) is returned in (vx, vy),
// for the env to cap or store.
JW_HD void mpe_integrate(const Params& p, const State& s, int i, float* vx, float* vy) {
  const float keep = 1.0f - p.damping;
  s.x[i] = fmaf(s.vx[i], p.dt, s.x[i]);
  s.y[i] = fmaf(s.vy[i], p.dt, s.y[i]);
  *vx = fmaf(s.vx[i], keep, s.force_x[i] / p.mass * p.dt);
  *vy = fmaf(s.vy[i], keep, s.force_y[i] / p.mass * p.dt);
}

// Distance between agents i and j (dx * dx + dy * dy contracted as XLA does).
JW_HD float mpe_agent_dist(const State& s, int i, int j) {
  const float dx = s.x[i] - s.x[j];
  const float dy = s.y[i] - s.y[j];
  return sqrtf(fmaf(dx, dx, dy * dy));
}

// The start of both observations: [vel (2), pos (2), landmark - pos (2 L),
// other agent - pos (2 (N-1), by index)]. Returns the columns written.
JW_HD int mpe_observe_common(const State& s, const jaxwarp::Agent& a, int num_landmarks,
                             float* obs) {
  const int i = a.agent;
  int k = 0;
  obs[k++] = s.vx[i];
  obs[k++] = s.vy[i];
  obs[k++] = s.x[i];
  obs[k++] = s.y[i];
  for (int l = 0; l < num_landmarks; ++l) {
    obs[k++] = s.lm_x[l] - s.x[i];
    obs[k++] = s.lm_y[l] - s.y[i];
  }
  for (int j = 0; j < a.num_agents; ++j) {
    if (j == i) continue;
    obs[k++] = s.x[j] - s.x[i];
    obs[k++] = s.y[j] - s.y[i];
  }
  return k;
}
