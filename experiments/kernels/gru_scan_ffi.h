// The two XLA FFI bindings of gru_scan.h's handlers, written once for the CPU
// (gru_scan_cpu.cc) and CUDA (gru_scan.cu) builds: GRU_CTX is the platform's
// context (nothing on the CPU, the stream on CUDA).
// Forward: xs f32[T, B, 3H], w f32[H, 3H], b_hn f32[H], h0 f32[B, H],
//   reset pred[T, B] -> h_T [B, H], ys, h_in, r, z, n, hnb (each [T, B, H]).
// Backward: d_hT [B, H], d_ys [T, B, H], h_in, r, z, n, hnb, w [H, 3H],
//   reset [T, B] -> dh0 [B, H], dxs [T, B, 3H], d_rec [T, B, 3H].
#pragma once

#define GRU_F32 ::xla::ffi::Buffer<::xla::ffi::F32>
#define GRU_OUT ::xla::ffi::ResultBuffer<::xla::ffi::F32>

#define GRU_BIND_FORWARD(name, impl, ctx)                                              \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(name, impl,                                           \
                                ::xla::ffi::Ffi::Bind() ctx                           \
                                    .Arg<GRU_F32>()   /* xs */                        \
                                    .Arg<GRU_F32>()   /* w */                         \
                                    .Arg<GRU_F32>()   /* b_hn */                      \
                                    .Arg<GRU_F32>()   /* h0 */                        \
                                    .Arg<::xla::ffi::Buffer<::xla::ffi::PRED>>()      \
                                    .Ret<GRU_F32>()   /* h_T */                       \
                                    .Ret<GRU_F32>()   /* ys */                        \
                                    .Ret<GRU_F32>()   /* h_in */                      \
                                    .Ret<GRU_F32>()   /* r */                         \
                                    .Ret<GRU_F32>()   /* z */                         \
                                    .Ret<GRU_F32>()   /* n */                         \
                                    .Ret<GRU_F32>())  /* hnb */

#define GRU_BIND_BACKWARD(name, impl, ctx)                                             \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(name, impl,                                           \
                                ::xla::ffi::Ffi::Bind() ctx                           \
                                    .Arg<GRU_F32>()   /* d_hT */                      \
                                    .Arg<GRU_F32>()   /* d_ys */                      \
                                    .Arg<GRU_F32>()   /* h_in */                      \
                                    .Arg<GRU_F32>()   /* r */                         \
                                    .Arg<GRU_F32>()   /* z */                         \
                                    .Arg<GRU_F32>()   /* n */                         \
                                    .Arg<GRU_F32>()   /* hnb */                       \
                                    .Arg<GRU_F32>()   /* w */                         \
                                    .Arg<::xla::ffi::Buffer<::xla::ffi::PRED>>()      \
                                    .Ret<GRU_F32>()   /* dh0 */                       \
                                    .Ret<GRU_F32>()   /* dxs */                       \
                                    .Ret<GRU_F32>())  /* d_rec */

#define GRU_FWD_PARAMS                                                                  \
  GRU_F32 xs, GRU_F32 w, GRU_F32 b_hn, GRU_F32 h0, ::xla::ffi::Buffer<::xla::ffi::PRED> reset, \
      GRU_OUT h_t, GRU_OUT ys, GRU_OUT s_hin, GRU_OUT s_r, GRU_OUT s_z, GRU_OUT s_n,     \
      GRU_OUT s_hnb
#define GRU_BWD_PARAMS                                                                  \
  GRU_F32 d_ht, GRU_F32 d_ys, GRU_F32 s_hin, GRU_F32 s_r, GRU_F32 s_z, GRU_F32 s_n,     \
      GRU_F32 s_hnb, GRU_F32 w, ::xla::ffi::Buffer<::xla::ffi::PRED> reset, GRU_OUT dh0, \
      GRU_OUT dxs, GRU_OUT d_rec
