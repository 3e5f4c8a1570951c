// Tag on a grid (WarpDrive's tag_gridworld): `num_taggers` taggers chase one
// runner on the integer cells {0..grid_length} x {0..grid_length}. Written
// against jaxwarp's authoring API (cuda/jaxwarp_env.h) like any user env;
// spec and pure-JAX reference: jaxwarp/envs/tag_gridworld.py.
//
// Agents 0..num_taggers-1 are taggers, agent num_taggers (the last) is the
// runner. Each step every agent moves one cell (0 stay, 1 +x, 2 -x, 3 +y,
// 4 -y); a move off the grid is clipped back and costs `wall_hit_penalty`.
// The runner is tagged when a tagger stands on its cell after the moves:
// every tagger then earns `tag_reward_for_tagger`, the runner loses
// `tag_penalty_for_runner`, and the episode ends (terminated). Otherwise
// taggers pay `step_cost_for_tagger` and the runner earns it. The episode is
// truncated after `episode_length` steps (the spec's time_limit: the kernels
// keep the step counter, the time limit and the returns).
//
// Dynamics are integer-only; rewards are one float sum per agent, in
// WarpDrive's order (wall penalty, then the tag term).
#pragma once

constexpr int kStepPhases = 3;  // 0: move, 1: agent 0 checks the tag, 2: rewards

// A cell in {0..n-1} from a uniform draw in [0, 1).
JW_HD int32_t cell_of(float u, int32_t n) {
  const int32_t c = static_cast<int32_t>(u * static_cast<float>(n));
  return c < n - 1 ? c : n - 1;
}

// wall_hit and tagged describe the last step: reset() leaves them alone, so
// after an episode's final step they still say how it ended.
JW_HD void reset(const Params& p, const State& s, const jaxwarp::Agent& a) {
  const int i = a.agent;
  if (p.random_start) {
    s.x[i] = cell_of(a.uniform(0), p.grid_length + 1);
    s.y[i] = cell_of(a.uniform(1), p.grid_length + 1);
  } else if (i < p.num_taggers) {  // WarpDrive: taggers in the centre, runner in a corner
    s.x[i] = p.grid_length / 2;
    s.y[i] = p.grid_length / 2;
  } else {
    s.x[i] = 0;
    s.y[i] = 0;
  }
}

JW_HD void step(const Params& p, const State& s, const jaxwarp::Agent& a, const int32_t* action,
                int phase, jaxwarp::StepResult& r) {
  const int i = a.agent;
  const int runner = p.num_taggers;
  if (phase == 0) {
    // Out-of-range actions are clamped to {0..4}. Keep the move a switch:
    // the equivalent dy = (m == 3) - (m == 4) came out wrong for every action
    // but 4 from nvcc 13.0's optimiser for sm_90 (right at -Xptxas -O0; see
    // experiments/diag_tag_gridworld_cuda.py), and the GPU bitwise tests in
    // tests/test_tag_gridworld_gpu.py are what catch such a fault.
    const int32_t a0 = action[0];
    const int32_t m = a0 < 0 ? 0 : (a0 > 4 ? 4 : a0);
    int32_t dx = 0, dy = 0;
    switch (m) {
      case 1: dx = 1; break;
      case 2: dx = -1; break;
      case 3: dy = 1; break;
      case 4: dy = -1; break;
      default: break;
    }
    const int32_t nx = s.x[i] + dx;
    const int32_t ny = s.y[i] + dy;
    const int32_t cx = nx < 0 ? 0 : (nx > p.grid_length ? p.grid_length : nx);
    const int32_t cy = ny < 0 ? 0 : (ny > p.grid_length ? p.grid_length : ny);
    s.wall_hit[i] = (cx != nx || cy != ny) ? 1 : 0;
    s.x[i] = cx;
    s.y[i] = cy;
  } else if (phase == 1) {
    if (i == 0) {  // every agent has moved
      int32_t tagged = 0;
      for (int j = 0; j < p.num_taggers; ++j)
        tagged |= (s.x[j] == s.x[runner] && s.y[j] == s.y[runner]) ? 1 : 0;
      s.tagged[0] = tagged;
      r.terminated = tagged != 0;
    }
  } else {
    const bool tagged = s.tagged[0] != 0;
    const float term = i < runner ? (tagged ? p.tag_reward_for_tagger : -p.step_cost_for_tagger)
                                  : (tagged ? -p.tag_penalty_for_runner : p.step_cost_for_tagger);
    r.reward = (s.wall_hit[i] ? -p.wall_hit_penalty : 0.0f) + term;
  }
}

// WarpDrive's observations: positions over grid_length, agent type (runner 1),
// and time over episode_length.
//   full (4 N + 1):  x of all N agents, y of all, type of all, one-hot of self, t / T
//   partial (6):     own x, own y, target x, target y, own type, t / T
// In the partial view a tagger's target is the runner and the runner's is the
// nearest tagger (squared distance, lowest id on ties).
JW_HD void observe(const Params& p, const State& s, const jaxwarp::Agent& a, float* obs) {
  const int i = a.agent, n = a.num_agents;
  const int runner = p.num_taggers;
  // Multiplications by f32 reciprocals: XLA turns the reference's division
  // by a constant into exactly this, so both sides write the same bits (at
  // most 1 ulp from WarpDrive's division).
  const float inv_len = 1.0f / static_cast<float>(p.grid_length);
  const float inv_steps = 1.0f / static_cast<float>(p.episode_length);
  const float time = static_cast<float>(s.timestep[0]) * inv_steps;
  if (p.use_full_observation) {
    for (int j = 0; j < n; ++j) {
      obs[j] = static_cast<float>(s.x[j]) * inv_len;
      obs[n + j] = static_cast<float>(s.y[j]) * inv_len;
      obs[2 * n + j] = j == runner ? 1.0f : 0.0f;
      obs[3 * n + j] = j == i ? 1.0f : 0.0f;
    }
    obs[4 * n] = time;
  } else {
    int target = runner;
    if (i == runner) {
      target = 0;
      int32_t best = 0;
      for (int j = 0; j < p.num_taggers; ++j) {
        const int32_t dx = s.x[j] - s.x[runner], dy = s.y[j] - s.y[runner];
        const int32_t d = dx * dx + dy * dy;
        if (j == 0 || d < best) {
          best = d;
          target = j;
        }
      }
    }
    obs[0] = static_cast<float>(s.x[i]) * inv_len;
    obs[1] = static_cast<float>(s.y[i]) * inv_len;
    obs[2] = static_cast<float>(s.x[target]) * inv_len;
    obs[3] = static_cast<float>(s.y[target]) * inv_len;
    obs[4] = i == runner ? 1.0f : 0.0f;
    obs[5] = time;
  }
}
