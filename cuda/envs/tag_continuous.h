// Tag (continuous), WarpDrive's benchmark env: taggers chase runners in a
// square arena; each agent observes its k nearest others. Written against
// jaxwarp's authoring contract (cuda/jaxwarp_env.h) like any user env: the
// rules are specified in jaxwarp/envs/tag_continuous.py (module docstring),
// whose pure-JAX reference is written operation for operation alike, so that
// the two agree bit for bit.
//
// Step phases (a barrier after each, no team passes between them):
//   0  move (taggers also clear their tag counters);
//   1  each runner in the game finds its nearest tagger (tagged_by[i]) and
//      counts itself in that tagger's tags and, leaving the game, in the
//      runners left (integer atomics);
//   2  rewards, next still_in_game, done.
// The kernels keep the step counter (advanced before phase 0) and the
// returns. The spec has no time_limit: the episode end is one of the rules
// (truncated on exactly the last step, and only if some runner is left).
// Observations show the game after the move and before this step's tags
// (scratch `seen`: still_in_game before tagging, 1 after a reset).
// Before observe(), a team pass finds every agent's k nearest visible others
// (uniform grid when there are many agents, one scan otherwise); observations
// are written by parts (observe_part: one observed agent's 7 features, or the
// time), row by row where the rows fit in shared memory.
#pragma once

constexpr int kStepPhases = 3;
// The team pass runs only before observe(): phase 1 counts tags with
// atomics itself, which saves a pass over the agents and three barriers per
// step.
constexpr unsigned kTeamPassPhases = 0;
constexpr int kFeatures = 7;          // per observed agent
constexpr float kTwoPi = 6.28318548202514648f;  // float32(2 pi)

// Reset directions: float32(k pi / 2), k = 0..3.
JW_HD float heading(uint32_t k) {
  return k == 0 ? 0.0f
                : (k == 1 ? 1.5707963705062866f
                          : (k == 2 ? 3.1415927410125732f : 4.71238899230957f));
}

JW_HD bool is_tagger(const Params& p, int i) { return i < p.num_taggers; }

// Fresh start of agent i from the call's key: threefry(k, (env, 2i)) -> x, y;
// threefry(k, (env, 2i + 1)) -> direction (top two bits pick 0, pi/2, pi, 3pi/2).
JW_HD void reset(const Params& p, const State& s, const jaxwarp::Agent& a) {
  const int i = a.agent;
  uint32_t k0 = a.key0, k1 = a.key1, env = a.env;
  if (p.fixed_start) {
    k0 = p.fixed_key0;
    k1 = p.fixed_key1;
    env = 0;
  }
  const jaxwarp::U32x2 u = jaxwarp::threefry2x32(k0, k1, env, 2u * i);
  const jaxwarp::U32x2 w = jaxwarp::threefry2x32(k0, k1, env, 2u * i + 1u);
  const float x = jaxwarp::uniform01(u.a) * p.grid_length;
  const float y = jaxwarp::uniform01(u.b) * p.grid_length;
  s.x[i] = x > p.grid_length ? p.grid_length : x;  // as the reference: see there
  s.y[i] = y > p.grid_length ? p.grid_length : y;
  s.direction[i] = heading(w.a >> 30);
  s.speed[i] = 0.0f;
  s.acceleration[i] = 0.0f;
  s.still_in_game[i] = 1;
  s.seen[i] = 1;
  if (i == 0) s.num_runners_left[0] = p.num_agents - p.num_taggers;
}

JW_HD void step(const Params& p, const State& s, const jaxwarp::Agent& a, const int32_t* action,
                int phase, jaxwarp::StepResult& r) {
  const int i = a.agent;
  const bool tagger = is_tagger(p, i);
  if (phase == 0) {
    // Move (still-in-game agents only; out-of-range actions are clamped).
    int a_acc = action[0], a_turn = action[1];
    a_acc = a_acc < 0 ? 0 : (a_acc > p.num_acc_levels ? p.num_acc_levels : a_acc);
    a_turn = a_turn < 0 ? 0 : (a_turn > p.num_turn_levels ? p.num_turn_levels : a_turn);
    const bool still = s.still_in_game[i] != 0;
    const float vmax = tagger ? p.vmax_tagger : p.vmax_runner;
    float acc = s.acceleration[i] + p.accel[a_acc];
    float d = fmodf(s.direction[i] + p.turn[a_turn], kTwoPi);
    d = d < 0.0f ? d + kTwoPi : d;
    const float dir = still ? d : 0.0f;
    float v = s.speed[i] + acc;
    v = v < 0.0f ? 0.0f : v;
    v = v > vmax ? vmax : v;
    const float speed = still ? v : 0.0f;
    if (speed <= 0.0f || speed >= vmax) acc = 0.0f;
    float sn, cs;
    jaxwarp::sincos_fixed(dir, &sn, &cs);
    float x = fmaf(speed, cs, s.x[i]);
    float y = fmaf(speed, sn, s.y[i]);
    const bool crossed = x < 0.0f || x > p.grid_length || y < 0.0f || y > p.grid_length;
    x = x < 0.0f ? 0.0f : (x > p.grid_length ? p.grid_length : x);
    y = y < 0.0f ? 0.0f : (y > p.grid_length ? p.grid_length : y);
    s.x[i] = x;
    s.y[i] = y;
    s.speed[i] = speed;
    s.direction[i] = dir;
    s.acceleration[i] = acc;
    const float edge = crossed ? p.edge_penalty : 0.0f;
    s.base[i] = still ? edge + (tagger ? p.step_reward_tagger : p.step_reward_runner) : 0.0f;
    s.tagged_by[i] = -1;
    s.tags[i] = 0;
    s.seen[i] = still ? 1 : 0;  // observations use the game before this step's tags
  } else if (phase == 1) {
    // Each runner still in the game finds its nearest tagger (ties: lower id).
    if (tagger || !s.still_in_game[i]) return;
    float best = INFINITY;
    int best_t = -1;
    for (int j = 0; j < p.num_taggers; ++j) {
      const float dx = s.x[j] - s.x[i];
      const float dy = s.y[j] - s.y[i];
      const float d2 = fmaf(dx, dx, dy * dy);
      if (d2 < best) {
        best = d2;
        best_t = j;
      }
    }
    if (best_t >= 0 && best < p.tag_dist2) {
      s.tagged_by[i] = best_t;
      // Integer atomics: the same counts in any order.
      jaxwarp::atomic_add(&s.tags[best_t], 1);
      if (p.exit_after_tag) jaxwarp::atomic_add(&s.num_runners_left[0], -1);
    }
  } else {
    // Rewards, next still_in_game; every agent reports the end.
    const bool last_step = s.timestep[0] == p.episode_length;
    const bool all_tagged = s.num_runners_left[0] == 0;
    const bool was_still = s.still_in_game[i] != 0;
    const bool tagged = !tagger && s.tagged_by[i] >= 0;
    const bool still_after = was_still && !(tagged && p.exit_after_tag);
    float rew = s.base[i];
    if (tagger) {
      rew = fmaf(static_cast<float>(s.tags[i]), p.tag_reward, rew);
    } else {
      if (tagged) rew = rew + p.tag_penalty;
      if (still_after && last_step) rew = rew + p.end_reward;
    }
    r.reward = rew;
    s.still_in_game[i] = still_after ? 1 : 0;
    r.terminated = all_tagged;
    r.truncated = last_step && !all_tagged;
  }
}

JW_HD void team_pass(const Params& p, const State& s, const jaxwarp::Team& team, int phase) {
  if (phase == jaxwarp::kBeforeObserve && !p.full_obs) {
    // The k nearest others still in the game, for every agent still in it.
    const int n = p.num_agents, k = p.k_observed;
    auto visible = [&](int j) { return s.seen[j] != 0; };
    if (p.use_grid) {
      // Cells for the agents still in the game, not for all n: about four per
      // cell whatever the number left (the scratch is sized for n). Later in
      // an episode most runners have left; cells sized for n would be mostly
      // empty and each search would visit several times as many.
      const int g = jaxwarp::grid_side(team.count(visible));
      const auto grid = jaxwarp::NeighbourGrid::carve(s.grid, n, g, 0.0f, p.grid_length);
      grid.build(team, s.x, s.y, visible);
      // Agents in cell order: neighbouring threads search neighbouring cells.
      team.for_range(grid.size(), [&](int q) {
        const int i = grid.id[q];
        jaxwarp::k_nearest(&grid, n, s.x, s.y, visible, i, s.x[i], s.y[i], INFINITY, k,
                           s.nbr + i * k);
      });
    } else {
      // The agents still in the game, in id order, and their positions: one
      // scan over them alone (ascending ids, as the search's ties need), and
      // the searches go to consecutive threads. Late in an episode most
      // runners have left, and a scan over all n would mostly skip.
      int32_t* ids = s.vis_id;      // n
      int32_t* tmp = s.vis_id + n;  // n
      float* vis_x = s.vis;
      float* vis_y = s.vis + n;
      const int m = team.compact(visible, ids, tmp);
      team.for_range(m, [&](int q) {
        vis_x[q] = s.x[ids[q]];
        vis_y[q] = s.y[ids[q]];
      });
      team.sync();
      team.for_range(m, [&](int q) {
        int32_t* out = s.nbr + ids[q] * k;
        jaxwarp::k_nearest(static_cast<const jaxwarp::NeighbourGrid*>(nullptr), m, vis_x, vis_y,
                           [](int) { return true; }, q, vis_x[q], vis_y[q], INFINITY, k, out);
        for (int slot = 0; slot < k; ++slot) out[slot] = out[slot] < 0 ? out[slot] : ids[out[slot]];
      });
    }
  }
}

JW_HD int observed_slots(const Params& p) {
  return p.full_obs ? p.num_agents - 1 : p.k_observed;
}

// The agent in slot `slot` of agent i's observation (-1: none).
JW_HD int observed_agent(const Params& p, const State& s, int i, int slot) {
  return p.full_obs ? (slot < i ? slot : slot + 1) : s.nbr[i * p.k_observed + slot];
}

// The observation in parts: part q < slots is the 7 features of the agent in
// slot q (columns f * slots + q, feature-major), part `slots` the time. The
// kernel writes rows as their parts in order where the rows fit in shared
// memory (110 agents), and (agent, part) pairs straight to the output
// otherwise (1000 agents): the neighbour id and agent i's own values are read
// once per 7 features, not once per element.
JW_HD int observe_parts(const Params& p) { return observed_slots(p) + 1; }

template <class Put>
JW_HD void observe_part(const Params& p, const State& s, const jaxwarp::Agent& a, int part,
                        Put&& put) {
  const int slots = observed_slots(p);
  const int i = a.agent;
  const bool shown = s.seen[i] != 0;
  if (part == slots) {
    put(kFeatures * slots, shown ? static_cast<float>(s.timestep[0]) * p.time_scale : 0.0f);
    return;
  }
  const int j = shown ? observed_agent(p, s, i, part) : -1;
  if (j < 0) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int f = 0; f < kFeatures; ++f) put(f * slots + part, 0.0f);
    return;
  }
  put(0 * slots + part, (s.x[j] - s.x[i]) * p.pos_scale);
  put(1 * slots + part, (s.y[j] - s.y[i]) * p.pos_scale);
  put(2 * slots + part, (s.speed[j] - s.speed[i]) * p.speed_scale);
  put(3 * slots + part, (s.acceleration[j] - s.acceleration[i]) * p.speed_scale);
  put(4 * slots + part, (s.direction[j] - s.direction[i]) * p.dir_scale);
  put(5 * slots + part, is_tagger(p, j) ? 1.0f : 0.0f);
  put(6 * slots + part, static_cast<float>(s.seen[j]));
}
