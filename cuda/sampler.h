// Categorical action sampler: per-head logic shared by the XLA:CPU handler and
// the CUDA kernel (`__host__ __device__`).
//
// One head of one row is `jax.random.categorical(key_h, logits_h)` with jax's
// default ("low") Gumbel mode, reproduced draw for draw:
//   bits_j   = 32 random bits of flat element j of the head's draw over the
//              whole member, [draw_rows, n] (see `categorical_bits`); a call
//              over a block of those rows (one device's shard) starts at the
//              block's global first row, so it draws the same bits
//   u_j      = jax.random.uniform(minval=FLT_MIN): the mantissa trick
//   g_j      = -log(-log(u_j))
//   action   = argmax_j (logits_j + g_j), first maximum (NaN counts as the
//              maximum, as in jnp.argmax)
//   log_prob = (logits_a - max) - log(sum_j exp(logits_j - max)), as
//              jax.nn.log_softmax evaluates it.
// logf/expf differ from XLA's in the last bit, so an action can differ from
// jax's only where two perturbed logits tie to within an ulp.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "jaxwarp_common.h"

namespace jaxwarp {
namespace sampler {

constexpr int kMaxHeads = 32;
constexpr float kTiny = 1.17549435e-38f;  // FLT_MIN: jax's minval for the uniform

// Static configuration of one call (decoded from the FFI attributes).
struct SamplerParams {
  int32_t num_heads;             // H
  int32_t row_len;               // sum(nvec): floats per row of logits
  int32_t partitionable;         // jax_threefry_partitionable at trace time
  int32_t nvec[kMaxHeads];       // choices per head
  int32_t offset[kMaxHeads];     // first logit of each head within a row
};

// 32 random bits of flat element `i` of a draw of `size` elements, exactly
// as jax.random.bits(key, shape) makes them for prod(shape) == size.
JW_HD uint32_t categorical_bits(uint32_t k0, uint32_t k1, uint64_t i, uint64_t size,
                                bool partitionable) {
  if (partitionable) {
    // jax_threefry_partitionable (default since jax 0.5): the counter is the
    // 64-bit flat index as (hi, lo) words; the two output words are XORed.
    const U32x2 r = threefry2x32(k0, k1, static_cast<uint32_t>(i >> 32),
                                 static_cast<uint32_t>(i));
    return r.a ^ r.b;
  }
  // jax's original layout: counters 0..size-1 (padded with one 0 when odd)
  // split into halves that form the two input words; the first half of the
  // output is word a, the second word b. Python checks size < 2^32 - 1.
  const uint64_t half = (size + 1) / 2;
  if (i < half) {
    const uint64_t j = i + half;
    return threefry2x32(k0, k1, static_cast<uint32_t>(i),
                        j < size ? static_cast<uint32_t>(j) : 0u).a;
  }
  return threefry2x32(k0, k1, static_cast<uint32_t>(i - half), static_cast<uint32_t>(i)).b;
}

// Gumbel(0, 1) sample from 32 random bits, as jax's `_gumbel(mode="low")`.
JW_HD float gumbel_from_bits(uint32_t bits) {
  const uint32_t mantissa = (bits >> 9) | 0x3f800000u;  // a float in [1, 2)
  float f;
  memcpy(&f, &mantissa, sizeof f);
  f = f - 1.0f;
  // uniform(minval=tiny, maxval=1): f * (maxval - minval) + minval, where
  // maxval - minval rounds to 1 in float32, then max(minval, .).
  float u = f * 1.0f + kTiny;
  u = u > kTiny ? u : kTiny;
  return -logf(-logf(u));
}

// Running state of one head: max logit (NaN-propagating, as jnp.max) and the
// perturbed argmax. `merge` is order-independent (a total order on
// (value, -index) with NaN on top), so any split of a head's elements over
// threads gives the same result as the sequential loop.
struct HeadAcc {
  float max_logit;
  float best;
  int32_t best_i;
};

JW_HD HeadAcc head_acc_init() { return {-INFINITY, -INFINITY, -1}; }

JW_HD bool better(float vx, int32_t ix, float vy, int32_t iy) {
  if (iy < 0) return ix >= 0;
  if (ix < 0) return false;
  const bool nx = isnan(vx), ny = isnan(vy);
  if (nx) return !ny || ix < iy;
  if (ny) return false;
  return vx > vy || (vx == vy && ix < iy);
}

JW_HD float nan_max(float a, float b) { return (a > b || isnan(a)) ? a : b; }

JW_HD void head_acc_push(HeadAcc& acc, float logit, float perturbed, int32_t j) {
  acc.max_logit = nan_max(acc.max_logit, logit);
  if (better(perturbed, j, acc.best, acc.best_i)) {
    acc.best = perturbed;
    acc.best_i = j;
  }
}

JW_HD void head_acc_merge(HeadAcc& acc, const HeadAcc& o) {
  acc.max_logit = nan_max(acc.max_logit, o.max_logit);
  if (better(o.best, o.best_i, acc.best, acc.best_i)) {
    acc.best = o.best;
    acc.best_i = o.best_i;
  }
}

// log_softmax(logits)[a] from the head's max and sum_j exp(logits_j - max).
JW_HD float head_log_prob(float logit_a, float max_logit, float sum_exp) {
  return (logit_a - max_logit) - logf(sum_exp);
}

struct HeadSample {
  int32_t action;
  float log_prob;
};

// One head of one row, sequentially (the XLA:CPU path). x: f32[n], this row's
// logits of the head; `first` = flat index of x[0] in the head's draw
// (global_row * n), `size` = draw_rows * n.
JW_HD HeadSample sample_head(const float* x, int32_t n, uint32_t k0, uint32_t k1,
                             uint64_t first, uint64_t size, bool partitionable) {
  HeadAcc acc = head_acc_init();
  for (int32_t j = 0; j < n; ++j) {
    const float g = gumbel_from_bits(categorical_bits(k0, k1, first + j, size, partitionable));
    head_acc_push(acc, x[j], x[j] + g, j);
  }
  float sum = 0.0f;
  for (int32_t j = 0; j < n; ++j) sum += expf(x[j] - acc.max_logit);
  return {acc.best_i, head_log_prob(x[acc.best_i], acc.max_logit, sum)};
}

}  // namespace sampler
}  // namespace jaxwarp
