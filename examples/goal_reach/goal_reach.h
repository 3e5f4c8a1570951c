// Goal reach: the tutorial env of docs/custom_env.md (not a built-in).
//
// N agents on the unit square walk toward one goal per env. Each step an
// agent moves by `step_size` in one of 4 directions (or stays); its reward is
// minus its distance to the goal, plus `bonus` once it is within `radius`
// (it then stays there). The episode ends when every agent is home
// (terminated) or after `max_steps` (truncated: the spec's time_limit, which
// the kernels check, as they keep timestep and episode_return).
//
// Params and State are generated from the spec in goal_reach.py
// (GoalReachParams, GoalReachState) before this header is included.
#pragma once

constexpr int kStepPhases = 2;  // 0: move and score, 1: agent 0 checks if all are home

JW_HD void reset(const Params&, const State& s, const jaxwarp::Agent& a) {
  const int i = a.agent;
  s.x[i] = a.uniform(0);
  s.y[i] = a.uniform(1);
  s.home[i] = 0;
  if (i == 0) {  // per-env fields: agent 0 writes them
    s.goal_x[0] = a.uniform(2);
    s.goal_y[0] = a.uniform(3);
  }
}

JW_HD void step(const Params& p, const State& s, const jaxwarp::Agent& a, const int32_t* action,
                int phase, jaxwarp::StepResult& r) {
  const int i = a.agent;
  if (phase == 0) {
    if (!s.home[i]) {
      const int m = action[0];  // 0 stay, 1 right, 2 left, 3 up, 4 down
      const float dx = m == 1 ? p.step_size : (m == 2 ? -p.step_size : 0.0f);
      const float dy = m == 3 ? p.step_size : (m == 4 ? -p.step_size : 0.0f);
      s.x[i] = fminf(fmaxf(s.x[i] + dx, 0.0f), 1.0f);
      s.y[i] = fminf(fmaxf(s.y[i] + dy, 0.0f), 1.0f);
    }
    const float ex = s.x[i] - s.goal_x[0];
    const float ey = s.y[i] - s.goal_y[0];
    // XLA contracts the reference's ex * ex + ey * ey into this fma.
    const float dist = sqrtf(fmaf(ex, ex, ey * ey));
    const bool arrived = !s.home[i] && dist < p.radius;
    if (arrived) s.home[i] = 1;
    r.reward = -dist + (arrived ? p.bonus : 0.0f);
  } else if (i == 0) {  // phase 1: all agents have moved
    bool all_home = true;
    for (int j = 0; j < a.num_agents; ++j) all_home = all_home && s.home[j];
    r.terminated = all_home;
  }
}

JW_HD void observe(const Params&, const State& s, const jaxwarp::Agent& a, float* obs) {
  const int i = a.agent;
  obs[0] = s.goal_x[0] - s.x[i];
  obs[1] = s.goal_y[0] - s.y[i];
  obs[2] = static_cast<float>(s.home[i]);
}
