// CUDA FFI handlers for Tag (continuous): decode buffers and attributes, then
// enqueue cuda/tag_continuous_kernels.cu on XLA's stream. They never
// synchronise, allocate nothing and never read device memory on the host, so
// they are marked command-buffer (CUDA graph) compatible.
#include <string>

#include "tag_continuous_ffi.h"
#include "tag_continuous_kernels.h"

namespace jaxwarp {
namespace tag {
namespace {

ffi::Error CudaStatus(cudaError_t err) {
  if (err == cudaSuccess) return ffi::Error::Success();
  return ffi::Error::Internal(std::string("jaxwarp tag_continuous kernel: ") +
                              cudaGetErrorString(err));
}

ffi::Error TagResetCuda(cudaStream_t stream, ffi::Buffer<ffi::U32> key,
                        ffi::ResultBuffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> y,
                        ffi::ResultBuffer<ffi::F32> speed, ffi::ResultBuffer<ffi::F32> dir,
                        ffi::ResultBuffer<ffi::F32> acc, ffi::ResultBuffer<ffi::S32> still,
                        ffi::ResultBuffer<ffi::S32> timestep, ffi::ResultBuffer<ffi::S32> left,
                        ffi::ResultBuffer<ffi::F32> ret, ffi::ResultBuffer<ffi::F32> obs,
                        TagAttrs attrs) {
  Params p;
  if (auto err = MakeParams(attrs, &p); !err.success()) return err;
  Layout lay;
  if (auto err = MakeLayout(p, x->element_count(), key.element_count(), &lay);
      !err.success())
    return err;
  TagBuffers b{};
  b.key = key.typed_data();
  b.x = x->typed_data();
  b.y = y->typed_data();
  b.speed = speed->typed_data();
  b.dir = dir->typed_data();
  b.acc = acc->typed_data();
  b.ret = ret->typed_data();
  b.still = still->typed_data();
  b.t = timestep->typed_data();
  b.left = left->typed_data();
  b.obs = obs->typed_data();
  b.envs_per_key = lay.envs_per_key;
  return CudaStatus(LaunchTag(p, b, lay.total_envs, stream));
}

ffi::Error TagStepCuda(
    cudaStream_t stream, ffi::Buffer<ffi::U32> key, ffi::Buffer<ffi::S32> actions,
    ffi::Buffer<ffi::F32> x_in, ffi::Buffer<ffi::F32> y_in, ffi::Buffer<ffi::F32> speed_in,
    ffi::Buffer<ffi::F32> dir_in, ffi::Buffer<ffi::F32> acc_in, ffi::Buffer<ffi::S32> still_in,
    ffi::Buffer<ffi::S32> timestep_in, ffi::Buffer<ffi::S32> left_in,
    ffi::Buffer<ffi::F32> ret_in, ffi::ResultBuffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> y,
    ffi::ResultBuffer<ffi::F32> speed, ffi::ResultBuffer<ffi::F32> dir,
    ffi::ResultBuffer<ffi::F32> acc, ffi::ResultBuffer<ffi::S32> still,
    ffi::ResultBuffer<ffi::S32> timestep, ffi::ResultBuffer<ffi::S32> left,
    ffi::ResultBuffer<ffi::F32> ret, ffi::ResultBuffer<ffi::F32> obs,
    ffi::ResultBuffer<ffi::F32> reward, ffi::ResultBuffer<ffi::PRED> done, TagAttrs attrs) {
  Params p;
  if (auto err = MakeParams(attrs, &p); !err.success()) return err;
  Layout lay;
  if (auto err = MakeLayout(p, x_in.element_count(), key.element_count(), &lay);
      !err.success())
    return err;
  if (actions.element_count() != 2 * x_in.element_count())
    return ffi::Error::InvalidArgument("actions must be [envs, agents, 2]");
  TagBuffers b{};
  b.key = key.typed_data();
  b.actions = actions.typed_data();
  b.x_in = x_in.typed_data();
  b.y_in = y_in.typed_data();
  b.speed_in = speed_in.typed_data();
  b.dir_in = dir_in.typed_data();
  b.acc_in = acc_in.typed_data();
  b.ret_in = ret_in.typed_data();
  b.still_in = still_in.typed_data();
  b.t_in = timestep_in.typed_data();
  b.left_in = left_in.typed_data();
  b.x = x->typed_data();
  b.y = y->typed_data();
  b.speed = speed->typed_data();
  b.dir = dir->typed_data();
  b.acc = acc->typed_data();
  b.ret = ret->typed_data();
  b.still = still->typed_data();
  b.t = timestep->typed_data();
  b.left = left->typed_data();
  b.obs = obs->typed_data();
  b.reward = reward->typed_data();
  b.done = done->typed_data();
  b.envs_per_key = lay.envs_per_key;
  return CudaStatus(LaunchTag(p, b, lay.total_envs, stream));
}

}  // namespace
}  // namespace tag
}  // namespace jaxwarp

namespace xffi = xla::ffi;

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxwarpTagResetCuda, jaxwarp::tag::TagResetCuda,
                              xffi::Ffi::Bind()
                                  .Ctx<xffi::PlatformStream<cudaStream_t>>()
                                  .Arg<xffi::Buffer<xffi::U32>>()
                                  .Ret<xffi::Buffer<xffi::F32>>()
                                  .Ret<xffi::Buffer<xffi::F32>>()
                                  .Ret<xffi::Buffer<xffi::F32>>()
                                  .Ret<xffi::Buffer<xffi::F32>>()
                                  .Ret<xffi::Buffer<xffi::F32>>()
                                  .Ret<xffi::Buffer<xffi::S32>>()
                                  .Ret<xffi::Buffer<xffi::S32>>()
                                  .Ret<xffi::Buffer<xffi::S32>>()
                                  .Ret<xffi::Buffer<xffi::F32>>()
                                  .Ret<xffi::Buffer<xffi::F32>>()
                                  .Attrs<jaxwarp::tag::TagAttrs>(),
                              {xffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxwarpTagStepCuda, jaxwarp::tag::TagStepCuda,
                              xffi::Ffi::Bind()
                                  .Ctx<xffi::PlatformStream<cudaStream_t>>()
                                  .Arg<xffi::Buffer<xffi::U32>>()
                                  .Arg<xffi::Buffer<xffi::S32>>()
                                  .Arg<xffi::Buffer<xffi::F32>>()
                                  .Arg<xffi::Buffer<xffi::F32>>()
                                  .Arg<xffi::Buffer<xffi::F32>>()
                                  .Arg<xffi::Buffer<xffi::F32>>()
                                  .Arg<xffi::Buffer<xffi::F32>>()
                                  .Arg<xffi::Buffer<xffi::S32>>()
                                  .Arg<xffi::Buffer<xffi::S32>>()
                                  .Arg<xffi::Buffer<xffi::S32>>()
                                  .Arg<xffi::Buffer<xffi::F32>>()
                                  .Ret<xffi::Buffer<xffi::F32>>()
                                  .Ret<xffi::Buffer<xffi::F32>>()
                                  .Ret<xffi::Buffer<xffi::F32>>()
                                  .Ret<xffi::Buffer<xffi::F32>>()
                                  .Ret<xffi::Buffer<xffi::F32>>()
                                  .Ret<xffi::Buffer<xffi::S32>>()
                                  .Ret<xffi::Buffer<xffi::S32>>()
                                  .Ret<xffi::Buffer<xffi::S32>>()
                                  .Ret<xffi::Buffer<xffi::F32>>()
                                  .Ret<xffi::Buffer<xffi::F32>>()
                                  .Ret<xffi::Buffer<xffi::F32>>()
                                  .Ret<xffi::Buffer<xffi::PRED>>()
                                  .Attrs<jaxwarp::tag::TagAttrs>(),
                              {xffi::Traits::kCmdBufferCompatible});
