// 2-D pooling with autograd: max (with indices), average, adaptive average.
// Inputs are (N, C, H, W) or unbatched (C, H, W); the kernels see N * C contiguous planes.
// On a CUDA device, max_pool2d and avg_pool2d go through cuDNN where it computes the same windows
// (Note [cuDNN or the hand-written kernels] in kernels/cuda/cudnn.h), channels-last inputs in NHWC;
// its backward reads the input and the output, which are saved instead of max pooling's indices.

#include "../kernels/cpu/pool.h"

#include "../core/op_helpers.h"
#include "nn_functional.h"

#if EMBER_CUDA_BACKEND
#include "../kernels/cuda/cudnn.h"
#include "../kernels/cuda/pool.h"
#endif

namespace ember {

namespace {

using kernels::Pool2dGeometry;

// Checks x for a pooling op: 3-D or 4-D, float32/float64, non-empty planes.
void check_pool_input(const char* op, const Tensor& x) {
  EMBER_CHECK(x.dim() == 3 || x.dim() == 4, op, ": expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got ",
              describe(x));
  detail::check_floating(op, x);
  EMBER_CHECK(x.size(-1) > 0 && x.size(-2) > 0, op, ": expected non-empty spatial dims, got ", describe(x));
}

// The output shape: x's shape with the last two dims replaced.
Shape pooled_shape(const Tensor& x, int64_t out_h, int64_t out_w) {
  Shape s = x.shape();
  s[s.size() - 2] = out_h;
  s[s.size() - 1] = out_w;
  return s;
}

// Validates the options and computes the window geometry (PyTorch's pool2d_shape_check).
Pool2dGeometry pool_geometry(const char* op, const Tensor& x, const Pool2dOptions& opt, bool is_max) {
  check_pool_input(op, x);
  Pool2dGeometry g;
  g.in_h = x.size(-2);
  g.in_w = x.size(-1);
  g.planes = x.numel() / (g.in_h * g.in_w);
  g.kernel_h = opt.kernel.first;
  g.kernel_w = opt.kernel.second;
  g.stride_h = opt.stride.first == 0 ? g.kernel_h : opt.stride.first;
  g.stride_w = opt.stride.second == 0 ? g.kernel_w : opt.stride.second;
  g.pad_h = opt.padding.first;
  g.pad_w = opt.padding.second;
  g.dilation_h = opt.dilation.first;
  g.dilation_w = opt.dilation.second;
  EMBER_CHECK(g.kernel_h > 0 && g.kernel_w > 0, op, ": kernel size must be positive, got (", g.kernel_h, ", ",
              g.kernel_w, ")");
  EMBER_CHECK(g.stride_h > 0 && g.stride_w > 0, op, ": stride must be positive (0 means = kernel), got (",
              opt.stride.first, ", ", opt.stride.second, ")");
  EMBER_CHECK(g.dilation_h > 0 && g.dilation_w > 0, op, ": dilation must be positive, got (", g.dilation_h, ", ",
              g.dilation_w, ")");
  EMBER_CHECK(is_max || (g.dilation_h == 1 && g.dilation_w == 1), op, ": dilation is not supported (got (",
              g.dilation_h, ", ", g.dilation_w, "))");
  // Padding beyond half the kernel would allow windows that see nothing but padding.
  EMBER_CHECK(g.pad_h >= 0 && g.pad_w >= 0 && g.pad_h <= g.kernel_h / 2 && g.pad_w <= g.kernel_w / 2, op,
              ": padding should be non-negative and at most half of the kernel size, got padding (", g.pad_h, ", ",
              g.pad_w, ") for kernel (", g.kernel_h, ", ", g.kernel_w, ")");
  g.out_h = kernels::pool_output_size(g.in_h, g.kernel_h, g.pad_h, g.stride_h, g.dilation_h, opt.ceil_mode);
  g.out_w = kernels::pool_output_size(g.in_w, g.kernel_w, g.pad_w, g.stride_w, g.dilation_w, opt.ceil_mode);
  EMBER_CHECK(g.out_h > 0 && g.out_w > 0, op, ": input ", describe(x), " is too small for kernel (", g.kernel_h,
              ", ", g.kernel_w, ") with padding (", g.pad_h, ", ", g.pad_w, ") and dilation (", g.dilation_h, ", ",
              g.dilation_w, "): the output would be ", g.out_h, "x", g.out_w);
  return g;
}

// The incoming gradient as a contiguous tensor of dtype dt.
Tensor contiguous_grad(const Tensor& g, DType dt) { return g.to(dt).contiguous(); }

// Whether pooling x with geometry g goes through cuDNN (max pooling only when asked for: Note
// [cuDNN or the hand-written kernels] in kernels/cuda/cudnn.h).
bool via_cudnn(const Tensor& x, const Pool2dGeometry& g, bool is_max) {
#if EMBER_CUDA_BACKEND
  // f32, f64, and f16/bf16 computed in float (Note [16-bit pooling and activations] in cudnn.h).
  namespace cudnn = kernels::gpu::cudnn;
  return x.device().type == DeviceType::CUDA && (is_max ? cudnn::use_for_max_pool(g) : cudnn::use_for_pool(g));
#else
  (void)x, (void)g, (void)is_max;
  return false;
#endif
}

// max_pool2d or avg_pool2d through cuDNN: forward, and a backward node that keeps x and out. A
// channels-last input of f32, f16 or bf16 is pooled in NHWC as it lies (Note [Channels-last
// convolutions and pooling] in kernels/cuda/cudnn.h); float64 goes through NCHW (Note [Channels-last
// through the NCHW kernels] in core/op_helpers.h).
Tensor cudnn_pool(const char* op, const char* node, const Tensor& x0, const Pool2dGeometry& g, bool is_max,
                  bool include_pad) {
  const MemoryFormat fmt = x0.suggest_memory_format();
  const bool nhwc = fmt == MemoryFormat::channels_last && x0.dtype() != DType::f64;
  const MemoryFormat mem = nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous;
  const Tensor x = x0.contiguous(mem);
  const DType dt = x.dtype();
  const int64_t channels = x.size(-3);  // (N, C, H, W) or (C, H, W)
  Tensor out = empty(pooled_shape(x, g.out_h, g.out_w), {.dtype = dt, .device = x.device()}, mem);
  {
    const profiler::Scope scope(op);
    EMBER_CUDA_CALL(x.device(), op, {
      namespace cudnn = kernels::gpu::cudnn;
      const auto layout = nhwc ? cudnn::Layout::NHWC : cudnn::Layout::NCHW;
      if (is_max)
        cudnn::max_pool2d_forward(dt, layout, channels, g, x.data(), out.data());
      else
        cudnn::avg_pool2d_forward(dt, layout, channels, g, include_pad, x.data(), out.data());
    });
  }
  const Tensor result = nhwc ? out : detail::to_format(out, fmt);
  if (any_requires_grad({&x0})) {
    SavedTensor sx(x.detach(), node), so(out.detach(), node);
    const Shape in_shape = x0.shape();
    record(node, {x0}, {result}, [=](const std::vector<Tensor>& grads) {
      if (!grads[0].defined()) return std::vector<Tensor>{Tensor()};
      const Tensor go = grads[0].to(dt).contiguous(mem);
      Tensor gi = empty(in_shape, {.dtype = dt, .device = go.device()}, mem);
      const char* bwd = is_max ? "max_pool2d backward" : "avg_pool2d backward";
      const profiler::Scope scope(bwd);
      EMBER_CUDA_CALL(go.device(), bwd, {
        namespace cudnn = kernels::gpu::cudnn;
        const auto layout = nhwc ? cudnn::Layout::NHWC : cudnn::Layout::NCHW;
        const void* xs = sx.get().data();
        const void* os = so.get().data();
        if (is_max)
          cudnn::max_pool2d_backward(dt, layout, channels, g, xs, os, go.data(), gi.data());
        else
          cudnn::avg_pool2d_backward(dt, layout, channels, g, include_pad, xs, os, go.data(), gi.data());
      });
      return std::vector<Tensor>{nhwc ? gi : detail::to_format(gi, fmt)};
    });
  }
  return result;
}

}  // namespace

namespace {

// Whether max_pool2d_indexed pools x where it lies in channels-last: a 4-D channels-last x on a
// CUDA device (Note [Channels-last max pooling] in kernels/cuda/pool.cu). Elsewhere it goes
// through NCHW (Note [Channels-last through the NCHW kernels] in core/op_helpers.h).
bool nhwc_max_pool(const Tensor& x) {
#if EMBER_CUDA_BACKEND
  return x.device().type == DeviceType::CUDA && detail::is_channels_last(x);
#else
  (void)x;
  return false;
#endif
}

// max_pool2d with indices of index_dtype (int32 or int64; kernels/pool.h), and a backward node
// that keeps them.
std::pair<Tensor, Tensor> max_pool2d_indexed(const Tensor& x0, const Pool2dGeometry& g, DType index_dtype) {
  const MemoryFormat fmt = x0.suggest_memory_format();
  const bool nhwc = nhwc_max_pool(x0);
  const MemoryFormat mem = nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous;
  const Tensor x = x0.contiguous(mem);
  const int64_t channels = x.size(-3);
  const Shape out_shape = pooled_shape(x, g.out_h, g.out_w);
  Tensor out = empty(out_shape, {.dtype = x.dtype(), .device = x.device()}, mem);
  Tensor indices = empty(out_shape, {.dtype = index_dtype, .device = x.device()}, mem);
  if (nhwc) {
    const profiler::Scope scope("max_pool2d");
    EMBER_CUDA_CALL(x.device(), "max_pool2d", kernels::gpu::max_pool2d_forward_nhwc(x.dtype(), index_dtype, g, channels,
                                                                                      x.data(), out.data(),
                                                                                      indices.data()));
  } else {
    EMBER_KERNEL_CALL(x.device(), "max_pool2d", max_pool2d_forward, x.dtype(), index_dtype, g, x.data(), out.data(),
                      indices.data());
    out = detail::to_format(out, fmt);
  }
  if (any_requires_grad({&x0})) {
    SavedTensor si(indices, "MaxPool2dBackward");
    const Shape in_shape = x0.shape();
    const DType dt = x0.dtype();
    record("MaxPool2dBackward", {x0}, {out}, [=](const std::vector<Tensor>& grads) {
      if (!grads[0].defined()) return std::vector<Tensor>{Tensor()};
      const Tensor go = grads[0].to(dt).contiguous(mem);
      const Tensor idx = si.get().contiguous(mem);
      Tensor gi = empty(in_shape, {.dtype = dt, .device = go.device()}, mem);
      if (nhwc) {
        const profiler::Scope scope("max_pool2d backward");
        EMBER_CUDA_CALL(go.device(), "max_pool2d backward",
                        kernels::gpu::max_pool2d_backward_nhwc(dt, idx.dtype(), g, channels, go.data(), idx.data(),
                                                               gi.data()));
        return std::vector<Tensor>{gi};
      }
      EMBER_KERNEL_CALL(go.device(), "max_pool2d backward", max_pool2d_backward, dt, idx.dtype(), g, go.data(),
                        idx.data(), gi.data());
      return std::vector<Tensor>{detail::to_format(gi, fmt)};
    });
  }
  return {out, nhwc ? indices : detail::to_format(indices, fmt)};
}

}  // namespace

// The indices returned are int64, as PyTorch's max_pool2d_with_indices returns them (and as
// max_unpool2d-style consumers expect); max_pool2d keeps int32 ones for its backward.
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x0, const Pool2dOptions& opt) {
  return max_pool2d_indexed(x0, pool_geometry("max_pool2d", x0, opt, true), DType::i64);
}

// Note [Max-pool indices]
// Backward needs, per output, the position of its max within the input plane: less than
// in_h * in_w. max_pool2d keeps them as int32 whenever the plane has at most INT32_MAX positions
// (every image a CNN sees), int64 otherwise: half the bytes of int64, which for a 16-bit
// activation are twice its own size. max_pool2d_with_indices returns int64 (the public dtype,
// PyTorch's).
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& opt) {
  const Pool2dGeometry g = pool_geometry("max_pool2d", x, opt, true);
  if (via_cudnn(x, g, true)) return cudnn_pool("max_pool2d", "MaxPool2dBackward", x, g, true, false);
  const DType index_dtype = kernels::max_pool_indices_fit(DType::i32, g) ? DType::i32 : DType::i64;
  return max_pool2d_indexed(x, g, index_dtype).first;
}

Tensor avg_pool2d(const Tensor& x0, const Pool2dOptions& opt) {
  const Pool2dGeometry g = pool_geometry("avg_pool2d", x0, opt, false);
  const bool include_pad = opt.count_include_pad;
  if (via_cudnn(x0, g, false)) return cudnn_pool("avg_pool2d", "AvgPool2dBackward", x0, g, false, include_pad);
  const MemoryFormat fmt = x0.suggest_memory_format();  // Note [Channels-last through the NCHW kernels]
  const Tensor x = x0.contiguous();
  Tensor out = empty(pooled_shape(x, g.out_h, g.out_w), {.dtype = x.dtype(), .device = x.device()});
  EMBER_KERNEL_CALL(x.device(), "avg_pool2d", avg_pool2d_forward, x.dtype(), g, include_pad, x.data(), out.data());
  out = detail::to_format(out, fmt);
  if (any_requires_grad({&x0})) {
    const Shape in_shape = x0.shape();
    const DType dt = x0.dtype();
    record("AvgPool2dBackward", {x0}, {out}, [=](const std::vector<Tensor>& grads) {
      if (!grads[0].defined()) return std::vector<Tensor>{Tensor()};
      const Tensor go = contiguous_grad(grads[0], dt);
      Tensor gi = empty(in_shape, {.dtype = dt, .device = go.device()});
      EMBER_KERNEL_CALL(go.device(), "avg_pool2d backward", avg_pool2d_backward, dt, g, include_pad, go.data(),
                        gi.data());
      return std::vector<Tensor>{detail::to_format(gi, fmt)};
    });
  }
  return out;
}

Tensor adaptive_avg_pool2d(const Tensor& x0, std::pair<int64_t, int64_t> output_size) {
  check_pool_input("adaptive_avg_pool2d", x0);
  EMBER_CHECK(output_size.first > 0 && output_size.second > 0,
              "adaptive_avg_pool2d: output size must be positive, got (", output_size.first, ", ", output_size.second, ")");
  const MemoryFormat fmt = x0.suggest_memory_format();  // Note [Channels-last through the NCHW kernels]
  const Tensor x = x0.contiguous();
  Pool2dGeometry g;
  g.in_h = x.size(-2);
  g.in_w = x.size(-1);
  g.planes = x.numel() / (g.in_h * g.in_w);
  g.out_h = output_size.first;
  g.out_w = output_size.second;
  Tensor out = empty(pooled_shape(x, g.out_h, g.out_w), {.dtype = x.dtype(), .device = x.device()});
  EMBER_KERNEL_CALL(x.device(), "adaptive_avg_pool2d", adaptive_avg_pool2d_forward, x.dtype(), g, x.data(), out.data());
  out = detail::to_format(out, fmt);
  if (any_requires_grad({&x0})) {
    const Shape in_shape = x0.shape();
    const DType dt = x0.dtype();
    record("AdaptiveAvgPool2dBackward", {x0}, {out}, [=](const std::vector<Tensor>& grads) {
      if (!grads[0].defined()) return std::vector<Tensor>{Tensor()};
      const Tensor go = contiguous_grad(grads[0], dt);
      Tensor gi = empty(in_shape, {.dtype = dt, .device = go.device()});
      EMBER_KERNEL_CALL(go.device(), "adaptive_avg_pool2d backward", adaptive_avg_pool2d_backward, dt, g, go.data(),
                        gi.data());
      return std::vector<Tensor>{detail::to_format(gi, fmt)};
    });
  }
  return out;
}

}  // namespace ember
