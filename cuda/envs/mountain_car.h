// MountainCar (Gymnasium MountainCar-v0): drive an underpowered car up a hill
// by rocking it. Written against jaxwarp's authoring API (cuda/jaxwarp_env.h),
// like any user env; spec: jaxwarp/envs/mountain_car.py, pure-JAX reference:
// jaxwarp/envs/mountain_car.py (same expressions, operation for operation).
//
// Gymnasium computes in float64; this env and its reference in float32, with
// cos from jaxwarp's fixed polynomial.
#pragma once

constexpr int kStepPhases = 1;

JW_HD void reset(const Params&, const State& s, const jaxwarp::Agent& a) {
  const int i = a.agent;
  s.position[i] = a.uniform(0, -0.6f, -0.4f);
  s.velocity[i] = 0.0f;
}

JW_HD void step(const Params& p, const State& s, const jaxwarp::Agent& a, const int32_t* action,
                int /*phase*/, jaxwarp::StepResult& r) {
  const int i = a.agent;
  const int act = action[0] < 0 ? 0 : (action[0] > 2 ? 2 : action[0]);
  const float push = act == 0 ? -p.force : (act == 2 ? p.force : 0.0f);  // (a - 1) * force
  float s3_unused, c3;
  jaxwarp::sincos_fixed(3.0f * s.position[i], &s3_unused, &c3);
  // fmaf: the multiply-add that XLA contracts in the reference (same bits).
  float velocity = s.velocity[i] + fmaf(c3, -p.gravity, push);
  velocity = fminf(fmaxf(velocity, -p.max_speed), p.max_speed);
  const float lo = p.min_position, hi = p.max_position;
  const float position = fminf(fmaxf(s.position[i] + velocity, lo), hi);
  if (position == lo && velocity < 0.0f) velocity = 0.0f;
  s.position[i] = position;
  s.velocity[i] = velocity;
  r.reward = -1.0f;
  r.terminated = position >= p.goal_position && velocity >= p.goal_velocity;
}

JW_HD void observe(const Params&, const State& s, const jaxwarp::Agent& a, float* obs) {
  const int i = a.agent;
  obs[0] = s.position[i];
  obs[1] = s.velocity[i];
}
