// conv2d with autograd (declared in nn_functional.h). The CPU kernels are im2col + GEMM
// (kernels/cpu/conv.h, Note [im2col]).

#include "../kernels/cpu/conv.h"

#include "../core/autocast.h"
#include "../core/op_helpers.h"
#include "nn_functional.h"

#if EMBER_CUDA_BACKEND
#include "../kernels/cuda/conv.h"
#include "../kernels/cuda/cudnn.h"
#endif

namespace ember {

namespace {

std::string conv_config(const Conv2dOptions& o) {
  return detail::format_message("stride (", o.stride.first, ", ", o.stride.second, "), padding (", o.padding.first,
                                ", ", o.padding.second, "), dilation (", o.dilation.first, ", ", o.dilation.second,
                                "), groups ", o.groups);
}

// Checks the arguments and returns the geometry (everything but the batch-independent checks
// names the shapes involved).
kernels::Conv2dGeometry conv2d_geometry(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                             const Conv2dOptions& o) {
  EMBER_CHECK(x.defined() && weight.defined(), "conv2d: got an undefined input or weight");
  EMBER_CHECK(x.dim() == 4, "conv2d: expected input (N, C_in, H, W), got ", describe(x));
  EMBER_CHECK(weight.dim() == 4, "conv2d: expected weight (C_out, C_in / groups, kH, kW), got ", describe(weight));
  detail::check_same_device("conv2d", x, weight);
  EMBER_CHECK(is_floating(x.dtype()) && weight.dtype() == x.dtype(),
              "conv2d: expected floating-point input and weight of one dtype, got ", describe(x), " and ",
              describe(weight));
  EMBER_CHECK(o.stride.first >= 1 && o.stride.second >= 1 && o.dilation.first >= 1 && o.dilation.second >= 1 &&
                  o.padding.first >= 0 && o.padding.second >= 0 && o.groups >= 1,
              "conv2d: invalid options: ", conv_config(o),
              " (stride, dilation and groups must be >= 1, padding >= 0)");
  const int64_t c_out = weight.size(0);
  EMBER_CHECK(c_out % o.groups == 0, "conv2d: weight ", weight.shape(), " has ", c_out,
              " output channels, not divisible by groups ", o.groups);
  EMBER_CHECK(x.size(1) == weight.size(1) * o.groups, "conv2d: input ", x.shape(), " has ", x.size(1),
              " channels but weight ", weight.shape(), " with groups ", o.groups, " expects ",
              weight.size(1) * o.groups, " (weight.size(1) * groups)");
  if (bias.defined()) {
    detail::check_same_device("conv2d", x, bias);
    EMBER_CHECK(bias.dtype() == x.dtype() && bias.dim() == 1 && bias.size(0) == c_out, "conv2d: expected bias (",
                c_out, ") ", x.dtype(), ", got ", describe(bias));
  }
  kernels::Conv2dGeometry g;
  g.n = x.size(0);
  g.c_in = x.size(1);
  g.h = x.size(2);
  g.w = x.size(3);
  g.c_out = c_out;
  g.kh = weight.size(2);
  g.kw = weight.size(3);
  g.stride_h = o.stride.first;
  g.stride_w = o.stride.second;
  g.pad_h = o.padding.first;
  g.pad_w = o.padding.second;
  g.dil_h = o.dilation.first;
  g.dil_w = o.dilation.second;
  g.groups = o.groups;
  g.out_h = kernels::conv2d_out_size(g.h, g.kh, g.stride_h, g.pad_h, g.dil_h);
  g.out_w = kernels::conv2d_out_size(g.w, g.kw, g.stride_w, g.pad_w, g.dil_w);
  EMBER_CHECK(g.out_h > 0 && g.out_w > 0, "conv2d: input ", x.shape(), " is too small for weight ", weight.shape(),
              " with ", conv_config(o), ": the output would be ", g.out_h, " x ", g.out_w);
  return g;
}

// Whether a 16-bit conv2d of x runs natively: bf16 on the CPU through im2col + gemm_bf16 (Note
// [bf16 convolutions] in kernels/cpu/conv.cpp); on a CUDA device through cuDNN, f16/bf16 data with
// float compute (Note [16-bit convolutions] in kernels/cuda/cudnn.h). f16 on the CPU and the
// hand-written CUDA kernels (EMBER_CUDNN=0) widen to f32 instead (Note [Low-precision products]).
bool native_16bit(const Tensor& x) {
  if (x.device().is_cpu()) return x.dtype() == DType::bf16;
#if EMBER_CUDA_BACKEND
  return x.device().type == DeviceType::CUDA && kernels::gpu::cudnn::use_for_conv();
#else
  (void)x;
  return false;
#endif
}

// Whether a channels-last conv2d computes in NHWC without copies: on a CUDA device through cuDNN,
// for f32, f16 and bf16 (Note [Channels-last convolutions and pooling] in kernels/cuda/cudnn.h).
// Everywhere else a channels-last convolution goes through NCHW (Note [Channels-last through the
// NCHW kernels] in core/op_helpers.h).
bool native_nhwc(const Tensor& x, MemoryFormat fmt) {
#if EMBER_CUDA_BACKEND
  return fmt == MemoryFormat::channels_last && x.device().type == DeviceType::CUDA &&
         kernels::gpu::cudnn::use_for_conv() && x.dtype() != DType::f64;
#else
  (void)x, (void)fmt;
  return false;
#endif
}

// Multiply-adds x 2 of one pass (forward, backward-data or backward-weight): the profiler's FLOPs.
double conv2d_flops(const kernels::Conv2dGeometry& g) {
  return 2.0 * static_cast<double>(g.n * g.c_out * g.out_h * g.out_w) *
         static_cast<double>(g.c_in / g.groups * g.kh * g.kw);
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& opt) {
  // Under autocast: in the region's 16-bit dtype (Note [Autocast] in core/autocast.h).
  if (const auto dt = autocast::op_dtype(autocast::CastPolicy::lower_precision, {&x, &weight, &bias}))
    return conv2d(autocast::cast(x, *dt), autocast::cast(weight, *dt), autocast::cast(bias, *dt), opt);
  const kernels::Conv2dGeometry g = conv2d_geometry(x, weight, bias, opt);
  if (is_low_precision(x.dtype()) && !native_16bit(x)) {  // Note [Low-precision products] in layers/gemm.cpp
    const autocast::SuspendGuard f32_inside;  // autocast would cast the f32 operands back
    const Tensor b32 = bias.defined() ? bias.to(DType::f32) : Tensor();
    return conv2d(x.to(DType::f32), weight.to(DType::f32), b32, opt).to(x.dtype());
  }
  const profiler::Scope scope("conv2d", conv2d_flops(g));
  const DType dt = x.dtype();
  // Channels-last when the input or the weight is, as PyTorch's convolutions decide (Note
  // [Channels-last through the NCHW kernels] in core/op_helpers.h).
  const MemoryFormat fmt = detail::is_channels_last(x) || detail::is_channels_last(weight)
                               ? MemoryFormat::channels_last
                               : MemoryFormat::contiguous;
  // The memory order the kernels read and write: NHWC where native, else NCHW.
  const bool nhwc = native_nhwc(x, fmt);
  const MemoryFormat mem = nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous;
  const Tensor xc = x.detach().contiguous(mem), wc = weight.detach().contiguous(mem);
  const Tensor bc = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor y = empty({g.n, g.c_out, g.out_h, g.out_w}, {.dtype = dt, .device = x.device()}, mem);
  switch (x.device().type) {
    case DeviceType::CPU:
      kernels::cpu::conv2d_forward(dt, g, xc.data(), wc.data(), bc.defined() ? bc.data() : nullptr, y.data());
      break;
    case DeviceType::CUDA:
      EMBER_CUDA_CALL(x.device(), "conv2d", {
        const void* b = bc.defined() ? bc.data() : nullptr;
        namespace cudnn = kernels::gpu::cudnn;
        if (cudnn::use_for_conv())
          cudnn::conv2d_forward(dt, nhwc ? cudnn::Layout::NHWC : cudnn::Layout::NCHW, g, xc.data(), wc.data(), b,
                                y.data());
        else
          kernels::gpu::conv2d_forward(dt, g, xc.data(), wc.data(), b, y.data());
      });
      break;
  }
  if (!nhwc) y = detail::to_format(y, fmt);
  if (!any_requires_grad({&x, &weight, &bias})) return y;

  const bool need_x = x.requires_grad(), need_w = weight.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad();
  // The contiguous operands are saved (a detached view shares the version counter of x's
  // storage when no copy was made, so in-place changes to x are still caught).
  SavedTensor sx(need_w ? xc : Tensor(), "Conv2dBackward"), sw(need_x ? wc : Tensor(), "Conv2dBackward");
  const Shape x_shape = x.shape(), w_shape = weight.shape();
  record("Conv2dBackward", {x, weight, bias}, {y}, [=](const std::vector<Tensor>& grads) {
    if (!grads[0].defined()) return std::vector<Tensor>{Tensor(), Tensor(), Tensor()};
    const Tensor gy = grads[0].to(dt).contiguous(mem);
    const TensorOptions to{.dtype = dt, .device = gy.device()};
    Tensor gx = need_x ? empty(x_shape, to, mem) : Tensor();
    Tensor gw = need_w ? empty(w_shape, to, mem) : Tensor();
    Tensor gb = need_b ? empty({g.c_out}, to) : Tensor();
    const profiler::Scope scope("conv2d backward", conv2d_flops(g) * ((need_x ? 1 : 0) + (need_w ? 1 : 0)));
    switch (gy.device().type) {
      case DeviceType::CPU:
        if (need_x) kernels::cpu::conv2d_backward_data(dt, g, gy.data(), sw.get().data(), gx.data());
        if (need_w) kernels::cpu::conv2d_backward_weight(dt, g, gy.data(), sx.get().data(), gw.data());
        if (need_b) kernels::cpu::conv2d_backward_bias(dt, g, gy.data(), gb.data());
        break;
      case DeviceType::CUDA:
        EMBER_CUDA_CALL(gy.device(), "conv2d backward", {
          namespace kc = kernels::gpu;
          if (kc::cudnn::use_for_conv()) {
            const auto layout = nhwc ? kc::cudnn::Layout::NHWC : kc::cudnn::Layout::NCHW;
            if (need_x) kc::cudnn::conv2d_backward_data(dt, layout, g, gy.data(), sw.get().data(), gx.data());
            if (need_w) kc::cudnn::conv2d_backward_weight(dt, layout, g, gy.data(), sx.get().data(), gw.data());
            if (need_b) kc::cudnn::conv2d_backward_bias(dt, layout, g, gy.data(), gb.data());
          } else {
            if (need_x) kc::conv2d_backward_data(dt, g, gy.data(), sw.get().data(), gx.data());
            if (need_w) kc::conv2d_backward_weight(dt, g, gy.data(), sx.get().data(), gw.data());
            if (need_b) kc::conv2d_backward_bias(dt, g, gy.data(), gb.data());
          }
        });
        break;
    }
    return std::vector<Tensor>{nhwc ? gx : detail::to_format(gx, fmt), gw, gb};
  });
  return y;
}

}  // namespace ember
