// XLA:CPU handlers for Tag (continuous): the same per-agent code as the CUDA
// kernels (cuda/tag_continuous.h), run env by env on the host.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "tag_continuous_ffi.h"

namespace jaxwarp {
namespace tag {
namespace {

// Per-env working set (one env at a time; reused across calls).
struct EnvScratch {
  std::vector<float> x, y, speed, dir, acc, edge, reward;
  std::vector<int32_t> still_obs, still_after, tagged, tags;
  std::vector<std::pair<float, int>> cand;

  void Resize(int n) {
    for (auto* v : {&x, &y, &speed, &dir, &acc, &edge, &reward}) v->resize(n);
    for (auto* v : {&still_obs, &still_after, &tagged, &tags}) v->resize(n);
    cand.reserve(n);
  }
};

void StoreAgent(EnvScratch& s, int i, const Agent& a) {
  s.x[i] = a.x;
  s.y[i] = a.y;
  s.speed[i] = a.speed;
  s.dir[i] = a.dir;
  s.acc[i] = a.acc;
}

// Writes the observation of every agent of one env: obs f32[N, obs_dim].
void WriteObs(const Params& p, EnvScratch& s, int32_t timestep, float* obs) {
  const int n = p.num_agents;
  const int dim = obs_dim(p);
  const int slots = (dim - 1) / kFeatures;
  const float time_feature = static_cast<float>(timestep) * p.time_scale;
  for (int i = 0; i < n; ++i) {
    float* row = obs + static_cast<int64_t>(i) * dim;
    if (!s.still_obs[i]) {
      std::fill(row, row + dim, 0.0f);
      continue;
    }
    int count = slots;
    if (!p.full_obs) {
      // k nearest others still in the game; ties -> lower id.
      s.cand.clear();
      for (int j = 0; j < n; ++j) {
        if (j == i || !s.still_obs[j]) continue;
        s.cand.emplace_back(sq_dist(s.x[i], s.y[i], s.x[j], s.y[j]), j);
      }
      count = std::min<int>(slots, static_cast<int>(s.cand.size()));
      std::partial_sort(s.cand.begin(), s.cand.begin() + count, s.cand.end());
    }
    for (int f = 0; f < kFeatures; ++f) {
      for (int slot = 0; slot < slots; ++slot) {
        float v = 0.0f;
        if (slot < count) {
          const int j = p.full_obs ? full_obs_other(i, slot) : s.cand[slot].second;
          v = obs_feature(p, f, i, j, s.x.data(), s.y.data(), s.speed.data(),
                          s.acc.data(), s.dir.data(), s.still_obs.data());
        }
        row[f * slots + slot] = v;
      }
    }
    row[dim - 1] = time_feature;
  }
}

struct StateOut {
  float *x, *y, *speed, *dir, *acc, *ret;
  int32_t *still, *timestep, *left;
};

void ResetEnv(const Params& p, uint32_t k0, uint32_t k1, int64_t env_local,
              int64_t e, EnvScratch& s, const StateOut& out, float* obs) {
  const int n = p.num_agents;
  for (int i = 0; i < n; ++i) {
    const Agent a = reset_agent(p, k0, k1, static_cast<uint32_t>(env_local),
                                static_cast<uint32_t>(i));
    StoreAgent(s, i, a);
    s.still_obs[i] = 1;
    const int64_t g = e * n + i;
    out.x[g] = a.x;
    out.y[g] = a.y;
    out.speed[g] = a.speed;
    out.dir[g] = a.dir;
    out.acc[g] = a.acc;
    out.still[g] = 1;
  }
  out.timestep[e] = 0;
  out.left[e] = num_runners(p);
  WriteObs(p, s, 0, obs + e * n * obs_dim(p));
}

ffi::Error TagResetCpu(ffi::Buffer<ffi::U32> key, ffi::ResultBuffer<ffi::F32> x,
                       ffi::ResultBuffer<ffi::F32> y,
                       ffi::ResultBuffer<ffi::F32> speed,
                       ffi::ResultBuffer<ffi::F32> dir,
                       ffi::ResultBuffer<ffi::F32> acc,
                       ffi::ResultBuffer<ffi::S32> still,
                       ffi::ResultBuffer<ffi::S32> timestep,
                       ffi::ResultBuffer<ffi::S32> left,
                       ffi::ResultBuffer<ffi::F32> ret,
                       ffi::ResultBuffer<ffi::F32> obs, TagAttrs attrs) {
  Params p;
  if (auto err = MakeParams(attrs, &p); !err.success()) return err;
  Layout lay;
  if (auto err = MakeLayout(p, x->element_count(), key.element_count(), &lay);
      !err.success())
    return err;
  StateOut out{x->typed_data(),   y->typed_data(),     speed->typed_data(),
               dir->typed_data(), acc->typed_data(),   ret->typed_data(),
               still->typed_data(), timestep->typed_data(), left->typed_data()};
  thread_local EnvScratch s;
  s.Resize(p.num_agents);
  const uint32_t* k = key.typed_data();
  for (int64_t e = 0; e < lay.total_envs; ++e) {
    const int64_t b = e / lay.envs_per_key;
    ResetEnv(p, k[2 * b], k[2 * b + 1], e % lay.envs_per_key, e, s, out,
             obs->typed_data());
    std::fill(out.ret + e * p.num_agents, out.ret + (e + 1) * p.num_agents, 0.0f);
  }
  return ffi::Error::Success();
}

ffi::Error TagStepCpu(
    ffi::Buffer<ffi::U32> key, ffi::Buffer<ffi::S32> actions,
    ffi::Buffer<ffi::F32> x_in, ffi::Buffer<ffi::F32> y_in,
    ffi::Buffer<ffi::F32> speed_in, ffi::Buffer<ffi::F32> dir_in,
    ffi::Buffer<ffi::F32> acc_in, ffi::Buffer<ffi::S32> still_in,
    ffi::Buffer<ffi::S32> timestep_in, ffi::Buffer<ffi::S32> left_in,
    ffi::Buffer<ffi::F32> ret_in, ffi::ResultBuffer<ffi::F32> x,
    ffi::ResultBuffer<ffi::F32> y, ffi::ResultBuffer<ffi::F32> speed,
    ffi::ResultBuffer<ffi::F32> dir, ffi::ResultBuffer<ffi::F32> acc,
    ffi::ResultBuffer<ffi::S32> still, ffi::ResultBuffer<ffi::S32> timestep,
    ffi::ResultBuffer<ffi::S32> left, ffi::ResultBuffer<ffi::F32> ret,
    ffi::ResultBuffer<ffi::F32> obs, ffi::ResultBuffer<ffi::F32> reward,
    ffi::ResultBuffer<ffi::PRED> done, TagAttrs attrs) {
  Params p;
  if (auto err = MakeParams(attrs, &p); !err.success()) return err;
  Layout lay;
  if (auto err = MakeLayout(p, x_in.element_count(), key.element_count(), &lay);
      !err.success())
    return err;
  const int n = p.num_agents;
  const int nt = p.num_taggers;
  StateOut out{x->typed_data(),   y->typed_data(),     speed->typed_data(),
               dir->typed_data(), acc->typed_data(),   ret->typed_data(),
               still->typed_data(), timestep->typed_data(), left->typed_data()};
  thread_local EnvScratch s;
  s.Resize(n);
  const uint32_t* k = key.typed_data();
  const int32_t* act = actions.typed_data();
  const int dim = obs_dim(p);

  for (int64_t e = 0; e < lay.total_envs; ++e) {
    const int64_t base = e * n;
    const int32_t t_prev = timestep_in.typed_data()[e];
    const int32_t t = t_prev + 1;
    // 1. Move every agent (reads all inputs of this env before any write).
    for (int i = 0; i < n; ++i) {
      const int64_t g = base + i;
      Agent a{x_in.typed_data()[g],   y_in.typed_data()[g],
              speed_in.typed_data()[g], dir_in.typed_data()[g],
              acc_in.typed_data()[g], still_in.typed_data()[g]};
      s.edge[i] = move_agent(p, i < nt, act[2 * g], act[2 * g + 1], a);
      StoreAgent(s, i, a);
      s.still_obs[i] = a.still;
      s.tagged[i] = 0;
      s.tags[i] = 0;
      s.reward[i] = ret_in.typed_data()[g];  // previous return, used below
    }
    // 2. Tagging: each runner in the game finds its nearest tagger.
    int32_t runners_left = left_in.typed_data()[e];
    for (int i = nt; i < n; ++i) {
      if (!s.still_obs[i]) continue;
      float best = INFINITY;
      int best_t = -1;
      for (int j = 0; j < nt; ++j) {
        const float d2 = sq_dist(s.x[i], s.y[i], s.x[j], s.y[j]);
        if (d2 < best) {
          best = d2;
          best_t = j;
        }
      }
      if (best_t >= 0 && best < p.tag_dist2) {
        s.tagged[i] = 1;
        s.tags[best_t] += 1;
        if (p.exit_after_tag) runners_left -= 1;
      }
    }
    const bool last_step = t == p.episode_length;
    const bool is_done = last_step || runners_left == 0;
    // 3. Rewards, returns and the next state (auto-reset when done).
    for (int i = 0; i < n; ++i) {
      const int64_t g = base + i;
      const bool tagged = s.tagged[i];
      const int32_t still_after =
          s.still_obs[i] && !(tagged && p.exit_after_tag);
      const float base = s.still_obs[i] ? base_reward(p, i < nt, s.edge[i]) : 0.0f;
      const float r = final_reward(p, i < nt, base, s.tags[i], tagged,
                                   still_after, last_step);
      reward->typed_data()[g] = r;
      out.ret[g] = (t_prev == 0 ? 0.0f : s.reward[i]) + r;
      out.x[g] = s.x[i];
      out.y[g] = s.y[i];
      out.speed[g] = s.speed[i];
      out.dir[g] = s.dir[i];
      out.acc[g] = s.acc[i];
      out.still[g] = still_after;
    }
    done->typed_data()[e] = is_done;
    if (is_done) {
      const int64_t b = e / lay.envs_per_key;
      ResetEnv(p, k[2 * b], k[2 * b + 1], e % lay.envs_per_key, e, s, out,
               obs->typed_data());
    } else {
      out.timestep[e] = t;
      out.left[e] = runners_left;
      // Observation after the move, before this step's tagging.
      WriteObs(p, s, t, obs->typed_data() + e * n * dim);
    }
  }
  return ffi::Error::Success();
}

}  // namespace
}  // namespace tag
}  // namespace jaxwarp

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxwarpTagResetCpu, jaxwarp::tag::TagResetCpu,
                              xla::ffi::Ffi::Bind()
                                  .Arg<xla::ffi::Buffer<xla::ffi::U32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::S32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::S32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::S32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Attrs<jaxwarp::tag::TagAttrs>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxwarpTagStepCpu, jaxwarp::tag::TagStepCpu,
                              xla::ffi::Ffi::Bind()
                                  .Arg<xla::ffi::Buffer<xla::ffi::U32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::S32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::S32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::S32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::S32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::S32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::S32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::S32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::PRED>>()
                                  .Attrs<jaxwarp::tag::TagAttrs>());
