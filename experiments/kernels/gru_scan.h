// The GRU cell's scan in one kernel launch a direction (forward, backward), for
// experiments/bench_gru_scan.py: the same maths as jaxwarp.models.recurrent's
// `gru_scan` (flax.linen.GRUCell, gates r, z, n; the carry zeroed where reset),
// whose lax.scan launches a matmul and a fusion per step each way.
//
// A block owns `rows` (<= kMaxRows) of the batch and one thread per hidden unit
// i (blockDim.x == H): thread i computes gates r, z, n of unit i for its rows,
// so the cell's elementwise maths needs no exchange; the carry (forward) or the
// recurrent input's gradient (backward) is shared through shared memory, double
// buffered: one barrier a step. The recurrent kernels sit in shared memory
// (forward: w [H][3H]; backward: transposed, [3H][H], so that thread i reads
// consecutive words), 12 H^2 bytes: H <= 128.
//
// The per-unit step functions are __host__ __device__: the CPU handler runs
// them in loops (threads in turn), so the CPU check tests the kernel's maths.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define GRU_HD __host__ __device__ __forceinline__
#else
#define GRU_HD inline
#endif

namespace gru_scan {

constexpr int kMaxRows = 8;

GRU_HD float sigmoid(float v) { return 1.f / (1.f + expf(-v)); }

// The cell at one (row, unit): the gates r, z, n from the input projections
// (xr, xz, xn) and the recurrent ones (ar, az, an), b_hn the recurrent n gate's
// bias; returns the new carry and writes what the backward reads (r, z, n,
// hnb = an + b_hn). Both GPU kernels and the CPU build run it.
GRU_HD float cell(float xr, float xz, float xn, float ar, float az, float an, float b_hn,
                  float h_in, float* r, float* z, float* n, float* hnb) {
  *r = sigmoid(xr + ar);
  *z = sigmoid(xz + az);
  *hnb = an + b_hn;
  *n = tanhf(xn + *r * *hnb);
  return (1.f - *z) * *n + *z * h_in;
}

// Forward, unit i, rows [0, rows), step t. h_in [rows][H] (the carry after the
// reset) in shared memory; w [H][3H]; x this step's input projections [B][3H]
// from row0. Writes y and the saved values of (t, rows) and returns nothing;
// h_next[b] receives unit i of the carry the next step starts from (before its
// reset, which the caller applies).
GRU_HD void forward_unit(int i, int rows, int H, const float* h_in, const float* w,
                         const float* x, float b_hn, float* y, float* s_r, float* s_z,
                         float* s_n, float* s_hnb, float* h_next) {
  float ar[kMaxRows], az[kMaxRows], an[kMaxRows];
  for (int b = 0; b < kMaxRows; ++b) ar[b] = az[b] = an[b] = 0.f;
  for (int k = 0; k < H; ++k) {
    const float wr = w[k * 3 * H + i], wz = w[k * 3 * H + H + i], wn = w[k * 3 * H + 2 * H + i];
    for (int b = 0; b < kMaxRows; ++b) {
      if (b < rows) {
        const float hk = h_in[b * H + k];
        ar[b] += hk * wr;
        az[b] += hk * wz;
        an[b] += hk * wn;
      }
    }
  }
  for (int b = 0; b < rows; ++b) {
    const float* xb = x + b * 3 * H;
    const int o = b * H + i;
    const float h = cell(xb[i], xb[H + i], xb[2 * H + i], ar[b], az[b], an[b], b_hn,
                         h_in[o], s_r + o, s_z + o, s_n + o, s_hnb + o);
    y[o] = h;
    h_next[b] = h;
  }
}

// Backward, unit i, step t, first half: from the carry's gradient dh[b] (unit
// i, the ys' gradient added) the gates' gradients; writes dxs (r, z, n at i,
// H + i, 2H + i) and d_rec (r, z, n * r) of (t, rows) and d_rec into the
// shared buffer drec [rows][3H].
GRU_HD void backward_gates(int i, int rows, int H, const float* dh, const float* h_in,
                           const float* s_r, const float* s_z, const float* s_n,
                           const float* s_hnb, float* dxs, float* d_rec, float* drec) {
  for (int b = 0; b < rows; ++b) {
    const int o = b * H + i;
    const float r = s_r[o], z = s_z[o], n = s_n[o];
    const float dn = dh[b] * (1.f - z) * (1.f - n * n);
    const float dz = dh[b] * (h_in[o] - n) * z * (1.f - z);
    const float dr = dn * s_hnb[o] * r * (1.f - r);
    float* dx = dxs + b * 3 * H;
    float* dr3 = d_rec + b * 3 * H;
    dx[i] = dr;
    dx[H + i] = dz;
    dx[2 * H + i] = dn;
    dr3[i] = dr;
    dr3[H + i] = dz;
    dr3[2 * H + i] = dn * r;
    drec[b * 3 * H + i] = dr;
    drec[b * 3 * H + H + i] = dz;
    drec[b * 3 * H + 2 * H + i] = dn * r;
  }
}

// Backward, unit i, second half: the gradient of h_in (unit i): dh * z through
// the update gate plus d_rec @ w^T (wt [3H][H]); zeroed where this step reset.
GRU_HD void backward_carry(int i, int rows, int H, float* dh, const float* s_z,
                           const float* drec, const float* wt, const bool* reset) {
  float acc[kMaxRows];
  for (int b = 0; b < kMaxRows; ++b) acc[b] = 0.f;
  for (int j = 0; j < 3 * H; ++j) {
    const float wji = wt[j * H + i];
    for (int b = 0; b < kMaxRows; ++b) {
      if (b < rows) acc[b] += drec[b * 3 * H + j] * wji;
    }
  }
  for (int b = 0; b < rows; ++b) {
    const float d = dh[b] * s_z[b * H + i] + acc[b];
    dh[b] = reset[b] ? 0.f : d;
  }
}

}  // namespace gru_scan
