// Host interface of the Tag (continuous) CUDA kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tag_continuous.h"

namespace jaxwarp {
namespace tag {

// Device pointers of one call. `actions == nullptr` means reset: every env
// starts fresh (the *_in, reward and done pointers are then unused).
// Input and output state pointers may alias (in-place update).
struct TagBuffers {
  const uint32_t* key;  // [num_keys, 2]
  const int32_t* actions;  // [envs, agents, 2]
  const float *x_in, *y_in, *speed_in, *dir_in, *acc_in, *ret_in;
  const int32_t *still_in, *t_in, *left_in;
  float *x, *y, *speed, *dir, *acc, *ret;
  int32_t *still, *t, *left;
  float* obs;     // [envs, agents, obs_dim]
  float* reward;  // [envs, agents]
  bool* done;     // [envs]
  int64_t envs_per_key;
};

// Enqueues one reset or step of `total_envs` envs on `stream`. Asynchronous:
// never synchronises, allocates nothing.
cudaError_t LaunchTag(const Params& p, const TagBuffers& b, int64_t total_envs,
                      cudaStream_t stream);

}  // namespace tag
}  // namespace jaxwarp
