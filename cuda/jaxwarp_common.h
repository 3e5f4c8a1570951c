// Shared device/host helpers for jaxwarp environments.
//
// Everything here is `__host__ __device__` so the same source compiles with
// g++ (XLA:CPU handlers) and nvcc (CUDA kernels). Floating-point code is
// written so that both compilers produce the same bits as the pure-JAX
// reference: the C++ is built without implicit contraction
// (-ffp-contract=off / --fmad=false) and every multiply-add that XLA fuses
// into an FMA is written here as an explicit `fmaf`.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define JW_HD __host__ __device__ __forceinline__
#else
#define JW_HD inline
#endif

namespace jaxwarp {

// ---------------------------------------------------------------------------
// Counter-based RNG: Threefry-2x32 with 20 rounds (Salmon et al., 2011), the
// same function as JAX's `threefry2x32_p`, so the pure-JAX reference can draw
// the same bits. Counters come from (env, agent, draw) indices, never from
// thread ids, so results do not depend on the launch configuration.
// ---------------------------------------------------------------------------
JW_HD uint32_t rotl32(uint32_t v, int r) { return (v << r) | (v >> (32 - r)); }

struct U32x2 {
  uint32_t a, b;
};

JW_HD U32x2 threefry2x32(uint32_t k0, uint32_t k1, uint32_t x0, uint32_t x1) {
  const uint32_t ks[3] = {k0, k1, k0 ^ k1 ^ 0x1BD11BDAu};
  const int rot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  x0 += ks[0];
  x1 += ks[1];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int g = 0; g < 5; ++g) {
    const int base = (g & 1) * 4;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int r = 0; r < 4; ++r) {
      x0 += x1;
      x1 = rotl32(x1, rot[base + r]);
      x1 ^= x0;
    }
    x0 += ks[(g + 1) % 3];
    x1 += ks[(g + 2) % 3] + static_cast<uint32_t>(g + 1);
  }
  return {x0, x1};
}

// The bits of float32 v rounded to bfloat16, to nearest even, NaN kept a
// (quiet) NaN: what XLA's f32 -> bf16 convert gives (obs_dtype="bfloat16").
JW_HD uint16_t bf16_bits(float v) {
#if defined(__CUDA_ARCH__)
  uint32_t b = __float_as_uint(v);
#else
  uint32_t b;
  memcpy(&b, &v, 4);
#endif
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((b >> 16) | 0x0040u);
  b += 0x7FFFu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

// Uniform float in [0, 1) from the top 24 bits: exact in float32 on every
// backend (integer -> float conversion of a 24-bit value, times 2^-24).
JW_HD float uniform01(uint32_t bits) {
  return static_cast<float>(bits >> 8) * 5.9604644775390625e-08f;
}

// ---------------------------------------------------------------------------
// sin/cos with a fixed evaluation order (Cody-Waite reduction by pi/2, then
// minimax polynomials on [-pi/4, pi/4]; coefficients from Cephes' sinf/cosf).
// libm, CUDA's sinf and XLA's sin differ in the last bits; this one is
// evaluated identically everywhere. Max error ~1e-7 for |a| < 100.
// ---------------------------------------------------------------------------
constexpr float kTwoOverPi = 0.636619772367581343f;
constexpr float kPiO2Hi = 1.5703125f;
constexpr float kPiO2Mid = 4.837512969970703125e-4f;
constexpr float kPiO2Lo = 7.54978995489188216e-8f;
constexpr float kSin0 = -1.9515295891e-4f;
constexpr float kSin1 = 8.3321608736e-3f;
constexpr float kSin2 = -1.6666654611e-1f;
constexpr float kCos0 = 2.443315711809948e-5f;
constexpr float kCos1 = -1.388731625493765e-3f;
constexpr float kCos2 = 4.166664568298827e-2f;

JW_HD void sincos_fixed(float a, float* s, float* c) {
  const float q = floorf(fmaf(a, kTwoOverPi, 0.5f));
  float r = fmaf(-q, kPiO2Hi, a);
  r = fmaf(-q, kPiO2Mid, r);
  r = fmaf(-q, kPiO2Lo, r);
  const float z = r * r;
  float ps = fmaf(kSin0, z, kSin1);
  ps = fmaf(ps, z, kSin2);
  const float sr = fmaf(ps * z, r, r);
  float pc = fmaf(kCos0, z, kCos1);
  pc = fmaf(pc, z, kCos2);
  pc = fmaf(pc, z, -0.5f);
  const float cr = fmaf(pc, z, 1.0f);
  const int quadrant = static_cast<int>(q) & 3;
  // (sin, cos) of r + quadrant*pi/2.
  const float ss = (quadrant & 1) ? cr : sr;
  const float cc = (quadrant & 1) ? sr : cr;
  *s = (quadrant == 2 || quadrant == 3) ? -ss : ss;
  *c = (quadrant == 1 || quadrant == 2) ? -cc : cc;
}

}  // namespace jaxwarp
