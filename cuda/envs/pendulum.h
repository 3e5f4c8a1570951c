// Pendulum (Gymnasium Pendulum-v1) with discrete torques: swing a pendulum up
// and hold it. Written against jaxwarp's authoring API (cuda/jaxwarp_env.h),
// like any user env; spec: jaxwarp/envs/pendulum.py, pure-JAX reference:
// jaxwarp/envs/pendulum.py (same expressions, operation for operation).
//
// Action i applies torque linspace(-max_torque, max_torque, num_torque_levels)[i],
// computed in double as numpy does and rounded once to float. Gymnasium
// integrates in float64; this env and its reference in float32, with sin/cos
// from jaxwarp's fixed polynomial. Never terminates (truncation only).
#pragma once

constexpr int kStepPhases = 1;

JW_HD void reset(const Params&, const State& s, const jaxwarp::Agent& a) {
  const int i = a.agent;
  s.theta[i] = a.uniform(0, -3.14159265358979323846f, 3.14159265358979323846f);
  s.theta_dot[i] = a.uniform(1, -1.0f, 1.0f);
}

// numpy.linspace(-max_torque, max_torque, n)[i] in double (i * step + start,
// the last one exactly stop), rounded to float.
JW_HD float pendulum_torque(const Params& p, int i) {
  const int n = p.num_torque_levels;
  const double start = -static_cast<double>(p.max_torque);
  const double stop = static_cast<double>(p.max_torque);
  if (i == n - 1) return static_cast<float>(stop);
  const double step = (stop - start) / static_cast<double>(n - 1);
  return static_cast<float>(static_cast<double>(i) * step + start);
}

// ((x + pi) mod 2 pi) - pi with Python's sign convention (jnp.mod: fmod, then
// + 2 pi where the remainder is nonzero and of the other sign).
JW_HD float pendulum_angle_normalize(float x) {
  const float pi = 3.14159265358979323846f;
  const float two_pi = static_cast<float>(2.0 * 3.14159265358979323846);
  float r = fmodf(x + pi, two_pi);
  if (r != 0.0f && ((r < 0.0f) != (two_pi < 0.0f))) r = r + two_pi;
  return r - pi;
}

JW_HD void step(const Params& p, const State& s, const jaxwarp::Agent& a, const int32_t* action,
                int /*phase*/, jaxwarp::StepResult& r) {
  const int i = a.agent;
  const int n = p.num_torque_levels;
  const int act = action[0] < 0 ? 0 : (action[0] > n - 1 ? n - 1 : action[0]);
  const float u = pendulum_torque(p, act);
  const float th = s.theta[i], thdot = s.theta_dot[i];
  const float an = pendulum_angle_normalize(th);
  // The fmaf calls are the multiply-adds that XLA contracts in the reference
  // (same bits; without them theta's last bit, amplified by cos/sin of an
  // unbounded angle, would differ visibly in the observation).
  const float costs = fmaf(0.001f, u * u, fmaf(0.1f, thdot * thdot, an * an));
  float sin_th, cos_unused;
  jaxwarp::sincos_fixed(th, &sin_th, &cos_unused);
  // Constants folded in double, as the reference does in Python.
  const double g = p.g, m = p.m, l = p.l;
  const float c_sin = static_cast<float>(3.0 * g / (2.0 * l));
  const float c_u = static_cast<float>(3.0 / (m * (l * l)));
  const float dt = p.dt;
  const float acc = c_sin * sin_th + c_u * u;
  float newthdot = fmaf(acc, dt, thdot);
  newthdot = fminf(fmaxf(newthdot, -p.max_speed), p.max_speed);
  const float newth = fmaf(newthdot, dt, th);
  s.theta[i] = newth;
  s.theta_dot[i] = newthdot;
  r.reward = -costs;
  r.terminated = false;
}

JW_HD void observe(const Params&, const State& s, const jaxwarp::Agent& a, float* obs) {
  const int i = a.agent;
  float sn, cs;
  jaxwarp::sincos_fixed(s.theta[i], &sn, &cs);
  obs[0] = cs;
  obs[1] = sn;
  obs[2] = s.theta_dot[i];
}
