// jaxwarp's environment authoring API: what an env header is written against.
//
// An env is a header plus a Python spec (jaxwarp.authoring.EnvSpec). jaxwarp
// generates, from the spec, in the env's namespace and before it includes
// the header:
//
//   struct Params { float gravity; int32_t max_steps; ... };  // the spec's params
//   struct State  { float* x; int32_t* timestep; ... };       // state, then scratch
//
// `State` holds pointers to *one env's* rows: a per-agent field is indexed by
// agent (`s.x[a.agent]`), a per-env field has one element (`s.timestep[0]`);
// scratch arrays (spec `scratch=`) are members too: per-env temporaries,
// uninitialised at the start of every call, in shared memory when the env
// fits (global memory otherwise). Static params (spec `static_params=`) are
// `static constexpr` members of Params, read the same way (`p.k`).
// The header implements, in the same namespace:
//
//   constexpr int kStepPhases = 1;  // phases of step(), with a barrier between
//   JW_HD void reset(const Params& p, const State& s, const jaxwarp::Agent& a);
//   JW_HD void step(const Params& p, const State& s, const jaxwarp::Agent& a,
//                   const int32_t* action, int phase, jaxwarp::StepResult& r);
//   JW_HD void observe(const Params& p, const State& s, const jaxwarp::Agent& a, float* obs);
//   // (or observe_part() below)
//
// and optionally (found by name; see cuda/jaxwarp_team.h):
//
//   // Once per env after each phase of step() and before observe()
//   // (phase == jaxwarp::kBeforeObserve), run by all the env's threads:
//   // loops over agents, barriers, reductions, the neighbour grid.
//   JW_HD void team_pass(const Params& p, const State& s, const jaxwarp::Team& t, int phase);
//   // Step phases after which team_pass runs (bit p: after phase p); without
//   // it, after every phase. Always before observe().
//   constexpr unsigned kTeamPassPhases = 0b10;
//   // Instead of observe(), or beside it: agent a's row in parts. Part
//   // `part` (0 <= part < observe_parts(p)) writes its columns through
//   // put(col, value); the parts together write every column once (Tag: one
//   // part per observed agent, its 7 features). Where the rows do not fit
//   // in shared memory, the kernel writes (agent, part) pairs straight to
//   // the output, the parts of a row on consecutive threads; elsewhere rows
//   // (observe(), or the parts in order).
//   JW_HD int observe_parts(const Params& p);
//   template <class Put>
//   JW_HD void observe_part(const Params& p, const State& s, const jaxwarp::Agent& a,
//                           int part, Put&& put);
//
// The state is declared once, in the spec.
//
// What the kernels keep, not the header (the header reads them, never writes
// them), for an env whose state has these fields:
//   timestep        (i32, per env): the step counter. 0 after a reset; it
//                   advances before the first phase of each step, so step()
//                   reads the number of the step it runs (1 for an episode's
//                   first) and observe() the steps taken so far.
//   episode_return  (f32, per agent): after each step, the agent's return
//                   of the episode so far, (timestep == 1 ? 0 : return) +
//                   the step's reward (all phases' r.reward summed). reset()
//                   leaves it alone: after an episode's last step it holds
//                   that episode's return until the next step restarts it.
// and, where the spec names a time_limit param (EnvSpec(time_limit="max_steps")),
// the time limit: an episode is truncated on the step after which timestep
// >= p.max_steps. So step() reports only what its rules decide: reward, and
// terminated (or truncated, for an env whose episode end is one of its rules
// and whose spec then has no time_limit, as Tag's). jaxwarp.core.finish_step
// does the same in a pure-JAX reference.
//
// Per env, the kernels (cuda/jaxwarp_kernels.h) run: reset = timestep = 0,
// every agent's reset(), the team pass before observe, then observe; step =
// timestep += 1, then for each phase, every agent's step() (all agents
// finish a phase before the next starts) and the team pass of that phase;
// then the time limit and the returns; then where any agent reported
// terminated or truncated (or the time is up), timestep = 0 and every
// agent's reset() with the step's key (fresh start; state fields that
// reset() does not write keep their values); then the team pass before
// observe, and observe. The pass before observe and observe() only read the
// state (they write scratch and observations): the GPU kernel copies the
// state out while they run. step(autoreset=False) in Python skips the reset
// of finished envs (their observations are then the final ones). Before the
// first reset every state field is zero. Per-env fields are written by agent
// 0 in reset() and step() (or by the team leader in a team pass).
//
// On the GPU every agent is a thread (an env's agents share a block, with a
// barrier between passes), so within one pass (reset(), one phase of step(),
// observe()) agents run concurrently: an agent may read another agent's
// fields only if no agent writes them in that pass; write in one phase, read
// in the next. The CPU build runs the agents of a pass in order.
#pragma once

#include <stdint.h>

#include "jaxwarp_common.h"
#include "jaxwarp_team.h"

namespace jaxwarp {

// What an env header leaves out (the generated code sees these through a
// using-directive; a header's own declaration takes precedence).
namespace defaults {
constexpr unsigned kTeamPassPhases = ~0u;  // a team pass after every step phase
}  // namespace defaults

// One agent of one env, as its reset/step/observe code sees it.
struct Agent {
  uint32_t env;  // env index within this call's key (vmap members count from 0)
  int agent;     // agent id, 0 .. num_agents-1
  int num_agents;
  uint32_t key0, key1;  // this call's key
  uint32_t stream;      // 0 in reset(), 1 in step(): their draws never collide

  // Draw number `draw` (< 32768) of this agent in this call: uniform in [0, 1).
  // Bits = Threefry-2x32(key, (env, agent << 16 | stream << 15 | draw)).x0, so
  // the pure-JAX reference reproduces it with threefry2x32_p.
  JW_HD float uniform(uint32_t draw) const {
    const uint32_t c1 = (static_cast<uint32_t>(agent) << 16) | (stream << 15) | (draw & 0x7FFFu);
    return uniform01(threefry2x32(key0, key1, env, c1).a);
  }
  // Uniform in [low, high): min(u * span, span) + low with span = high - low,
  // all in float32 and rounded after each operation. The reference writes the
  // same (jaxwarp.authoring.agent_uniform(..., low, high)); the min, a no-op on
  // the value, keeps XLA from contracting the multiply-add into an fma.
  JW_HD float uniform(uint32_t draw, float low, float high) const {
    const float span = high - low;
    return fminf(uniform(draw) * span, span) + low;
  }
};

// What one agent's step() reports; the env is done if any agent says so (or
// the kernels' time limit is reached: an env with a time_limit leaves
// truncated alone).
struct StepResult {
  float reward = 0.0f;
  bool terminated = false;
  bool truncated = false;
};

}  // namespace jaxwarp
