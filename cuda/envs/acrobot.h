// Acrobot (Gymnasium Acrobot-v1, "book" dynamics, RK4, no torque noise): swing
// the tip of a two-link pendulum above a line by torquing the middle joint.
// Written against jaxwarp's authoring API (cuda/jaxwarp_env.h), like any user
// env; spec: jaxwarp/envs/acrobot.py, pure-JAX reference:
// jaxwarp/envs/acrobot.py (same expressions, operation for operation).
//
// Gymnasium integrates in float64; this env and its reference in float32,
// with sin/cos from jaxwarp's fixed polynomial and cos(a - pi/2) written sin(a).
#pragma once

constexpr int kStepPhases = 1;
constexpr int kAcrobotMaxWraps = 8;  // ACROBOT_MAX_WRAPS: unrolled `wrap` iterations, each way

JW_HD void reset(const Params&, const State& s, const jaxwarp::Agent& a) {
  const int i = a.agent;
  s.theta1[i] = a.uniform(0, -0.1f, 0.1f);
  s.theta2[i] = a.uniform(1, -0.1f, 0.1f);
  s.dtheta1[i] = a.uniform(2, -0.1f, 0.1f);
  s.dtheta2[i] = a.uniform(3, -0.1f, 0.1f);
}

// Constants of Gymnasium's `_dsdt`, folded in double as the reference does in
// Python, then rounded once to float.
struct AcrobotConstants {
  float d1_0, d1_c2, d2_0, d2_c2, phi2_s12, k, phi1_s1, d2_den;
};

JW_HD AcrobotConstants acrobot_constants(const Params& p) {
  const double m1 = p.link_mass_1, m2 = p.link_mass_2, l1 = p.link_length_1;
  const double lc1 = p.link_com_pos_1, lc2 = p.link_com_pos_2, inertia = p.link_moi;
  const double g = p.gravity;
  AcrobotConstants c;
  c.d1_0 = static_cast<float>(m1 * (lc1 * lc1) + m2 * (l1 * l1 + lc2 * lc2) + 2.0 * inertia);
  c.d1_c2 = static_cast<float>(2.0 * m2 * l1 * lc2);
  c.d2_0 = static_cast<float>(m2 * (lc2 * lc2) + inertia);
  c.d2_c2 = static_cast<float>(m2 * l1 * lc2);
  c.phi2_s12 = static_cast<float>(m2 * lc2 * g);
  c.k = static_cast<float>(m2 * l1 * lc2);
  c.phi1_s1 = static_cast<float>((m1 * lc1 + m2 * l1) * g);
  c.d2_den = static_cast<float>(m2 * (lc2 * lc2) + inertia);
  return c;
}

// Time derivative of (theta1, theta2, dtheta1, dtheta2): Gymnasium's `_dsdt` (book).
// The fmaf calls are the multiply-adds that XLA:CPU contracts in the reference
// (checked against its compiled code: LLVM fuses `a + b * c` and `a - b * c`;
// in `-(x * s2) - y * s2` it fuses the first product, `fma(-x, s2, -(y * s2))`).
// Without them the two backends differ in the last bit from the first step and,
// Acrobot being chaotic, by ~1e-6 after a hundred steps.
JW_HD void acrobot_dsdt(const AcrobotConstants& c, float torque, const float y[4], float out[4]) {
  const float theta1 = y[0], theta2 = y[1], dtheta1 = y[2], dtheta2 = y[3];
  float s2, c2, s1, c1_unused, s12, c12_unused;
  jaxwarp::sincos_fixed(theta2, &s2, &c2);
  jaxwarp::sincos_fixed(theta1, &s1, &c1_unused);
  jaxwarp::sincos_fixed(theta1 + theta2, &s12, &c12_unused);
  const float d1 = fmaf(c.d1_c2, c2, c.d1_0);
  const float d2 = fmaf(c.d2_c2, c2, c.d2_0);
  // phi1 = -(k dtheta2^2 s2) - d1_c2 dtheta2 dtheta1 s2 + phi1_s1 s1 + phi2_s12 s12
  const float k_dtheta2_sq = c.k * (dtheta2 * dtheta2);
  const float coriolis = c.d1_c2 * dtheta2 * dtheta1;
  float phi1 = fmaf(-k_dtheta2_sq, s2, -(coriolis * s2));
  phi1 = fmaf(c.phi1_s1, s1, phi1);
  phi1 = fmaf(c.phi2_s12, s12, phi1);
  // ddtheta2 = (torque + d2 / d1 phi1 - k dtheta1^2 s2 - phi2) / (d2_den - d2^2 / d1)
  float num = fmaf(d2 / d1, phi1, torque);
  num = fmaf(-(c.k * (dtheta1 * dtheta1)), s2, num);
  num = fmaf(-c.phi2_s12, s12, num);
  const float ddtheta2 = num / (c.d2_den - d2 * d2 / d1);
  const float ddtheta1 = -fmaf(d2, ddtheta2, phi1) / d1;
  out[0] = dtheta1;
  out[1] = dtheta2;
  out[2] = ddtheta1;
  out[3] = ddtheta2;
}

// Gymnasium's wrap(x, -pi, pi), its while-loops unrolled kAcrobotMaxWraps times.
JW_HD float acrobot_wrap_pi(float x) {
  const float hi = 3.14159265358979323846f, lo = -3.14159265358979323846f;
  const float diff = static_cast<float>(2.0 * 3.14159265358979323846);
  for (int k = 0; k < kAcrobotMaxWraps; ++k) x = x > hi ? x - diff : x;
  for (int k = 0; k < kAcrobotMaxWraps; ++k) x = x < lo ? x + diff : x;
  return x;
}

JW_HD void step(const Params& p, const State& s, const jaxwarp::Agent& a, const int32_t* action,
                int /*phase*/, jaxwarp::StepResult& r) {
  const int i = a.agent;
  const AcrobotConstants c = acrobot_constants(p);
  const int act = action[0] < 0 ? 0 : (action[0] > 2 ? 2 : action[0]);
  const float torque = static_cast<float>(act - 1);  // AVAIL_TORQUE = (-1, 0, +1)
  const float dt = p.dt;
  const float dt2 = static_cast<float>(static_cast<double>(p.dt) / 2.0);
  const float dt6 = static_cast<float>(static_cast<double>(p.dt) / 6.0);
  const float y0[4] = {s.theta1[i], s.theta2[i], s.dtheta1[i], s.dtheta2[i]};
  float k1[4], k2[4], k3[4], k4[4], y[4];
  acrobot_dsdt(c, torque, y0, k1);
  for (int j = 0; j < 4; ++j) y[j] = fmaf(dt2, k1[j], y0[j]);
  acrobot_dsdt(c, torque, y, k2);
  for (int j = 0; j < 4; ++j) y[j] = fmaf(dt2, k2[j], y0[j]);
  acrobot_dsdt(c, torque, y, k3);
  for (int j = 0; j < 4; ++j) y[j] = fmaf(dt, k3[j], y0[j]);
  acrobot_dsdt(c, torque, y, k4);
  float ns[4];
  for (int j = 0; j < 4; ++j)
    ns[j] = fmaf(dt6, ((k1[j] + 2.0f * k2[j]) + 2.0f * k3[j]) + k4[j], y0[j]);
  const float theta1 = acrobot_wrap_pi(ns[0]);
  const float theta2 = acrobot_wrap_pi(ns[1]);
  const float v1 = p.max_vel_1, v2 = p.max_vel_2;
  const float dtheta1 = fminf(fmaxf(ns[2], -v1), v1);
  const float dtheta2 = fminf(fmaxf(ns[3], -v2), v2);
  s.theta1[i] = theta1;
  s.theta2[i] = theta2;
  s.dtheta1[i] = dtheta1;
  s.dtheta2[i] = dtheta2;
  float s1_unused, c1, s12_unused, c12;
  jaxwarp::sincos_fixed(theta1, &s1_unused, &c1);
  jaxwarp::sincos_fixed(theta2 + theta1, &s12_unused, &c12);
  r.terminated = -c1 - c12 > 1.0f;
  r.reward = r.terminated ? 0.0f : -1.0f;
}

JW_HD void observe(const Params&, const State& s, const jaxwarp::Agent& a, float* obs) {
  const int i = a.agent;
  float s1, c1, s2, c2;
  jaxwarp::sincos_fixed(s.theta1[i], &s1, &c1);
  jaxwarp::sincos_fixed(s.theta2[i], &s2, &c2);
  obs[0] = c1;
  obs[1] = s1;
  obs[2] = c2;
  obs[3] = s2;
  obs[4] = s.dtheta1[i];
  obs[5] = s.dtheta2[i];
}
