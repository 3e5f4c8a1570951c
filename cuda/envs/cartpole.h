// CartPole (Gymnasium CartPole-v1): push a cart left or right to keep a pole
// upright. Written against jaxwarp's authoring API (cuda/jaxwarp_env.h), like
// any user env; spec: jaxwarp/envs/cartpole.py, pure-JAX reference:
// jaxwarp/envs/cartpole.py (same expressions, operation for operation).
//
// Gymnasium computes in float64; this env and its reference in float32, with
// sin/cos from jaxwarp's fixed polynomial.
#pragma once

constexpr int kStepPhases = 1;

JW_HD void reset(const Params&, const State& s, const jaxwarp::Agent& a) {
  const int i = a.agent;
  s.x[i] = a.uniform(0, -0.05f, 0.05f);
  s.x_dot[i] = a.uniform(1, -0.05f, 0.05f);
  s.theta[i] = a.uniform(2, -0.05f, 0.05f);
  s.theta_dot[i] = a.uniform(3, -0.05f, 0.05f);
}

JW_HD void step(const Params& p, const State& s, const jaxwarp::Agent& a, const int32_t* action,
                int /*phase*/, jaxwarp::StepResult& r) {
  const int i = a.agent;
  // p.polemass_length, p.inv_total_mass, ...: constants of the dynamics,
  // folded in float64 in Python (the spec's kernel_params), as the reference.
  const float force = action[0] >= 1 ? p.force_mag : -p.force_mag;
  float sintheta, costheta;
  jaxwarp::sincos_fixed(s.theta[i], &sintheta, &costheta);
  const float td = s.theta_dot[i];
  const float temp = (force + p.polemass_length * (td * td) * sintheta) * p.inv_total_mass;
  const float denom = p.four_thirds_length - p.length_masspole * (costheta * costheta);
  const float thetaacc = (p.gravity * sintheta - costheta * temp) / denom;
  const float xacc = temp - p.polemass_length_over_mass * thetaacc * costheta;
  // Euler integration, as Gymnasium's default.
  const float x = s.x[i] + p.tau * s.x_dot[i];
  const float x_dot = s.x_dot[i] + p.tau * xacc;
  const float theta = s.theta[i] + p.tau * s.theta_dot[i];
  const float theta_dot = s.theta_dot[i] + p.tau * thetaacc;
  s.x[i] = x;
  s.x_dot[i] = x_dot;
  s.theta[i] = theta;
  s.theta_dot[i] = theta_dot;
  r.reward = 1.0f;
  r.terminated = x < -p.x_threshold || x > p.x_threshold ||
                 theta < -p.theta_threshold_radians || theta > p.theta_threshold_radians;
}

JW_HD void observe(const Params& p, const State& s, const jaxwarp::Agent& a, float* obs) {
  const int i = a.agent;
  // hide_velocities: a partially observed CartPole (a memory task).
  obs[0] = s.x[i];
  obs[1] = p.hide_velocities != 0 ? 0.0f : s.x_dot[i];
  obs[2] = s.theta[i];
  obs[3] = p.hide_velocities != 0 ? 0.0f : s.theta_dot[i];
}
