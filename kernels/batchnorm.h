#pragma once
// Batch normalization: the contract both backends implement (kernels/cpu/batchnorm.h,
// kernels/cuda/batchnorm.h) — per-channel statistics, the normalization itself, its backward.
//
// Layout: x is contiguous (N, C, S) where S is the product of the dims after C (1 for (N, C)
// input); per-channel vectors (mean, var, invstd, weight, bias, their grads) are contiguous (C).
// With sh.channels_last, x, y, grad_y and grad_x are contiguous (N, S, C) instead — channel
// fastest, a channels-last (NHWC) 4-D tensor's memory order with S = H * W — so the data is an
// (N * S) x C row-major matrix with one channel per column. Only kernels::gpu takes that order
// (Note [Channels-last batch norm] in kernels/cuda/batchnorm.cu); kernels::cpu refuses it and its
// callers copy a channels-last tensor to (N, C, S) first.
// dtypes: x, y, grad_y and grad_x have `dtype` (f32, f64, f16 or bf16); the per-channel vectors
// have `param_dtype`, which is dtype itself or, for an f16/bf16 x, f32 (Note [Mixed-precision
// batch norm]). Sums accumulate in cpu_acc_t on the CPU, acc_t on CUDA (Note [Accumulation types]
// in core/dtype.h). Outputs are overwritten.
//   batch_norm_stats(dtype, param_dtype, sh, x, out)
//       the mean and biased variance of the n * s elements of each channel c, and what `out`
//       (BatchNormStats below) asks for besides: mean[c]; var[c], invstd[c] = 1 / sqrt(var[c] +
//       eps), the running statistics' update (Note [Batch norm running statistics] in
//       layers/batchnorm.cpp) and num_batches_tracked += 1, each when its pointer is given. The
//       CPU sums twice (the mean, then the centred squares), the GPU once (Note [One-pass batch
//       norm statistics] in kernels/cuda/batchnorm.cu); both finish a channel with
//       finish_channel_stats below
//   batch_norm_apply(dtype, param_dtype, sh, x, mean, invstd, weight, bias, y, residual = null)
//       y = (x - mean[c]) * invstd[c] * weight[c] + bias[c]; weight and bias may be null (1 and 0);
//       y may not alias x. With sh.relu, y = relu(that [+ residual]), residual (x's layout and
//       dtype) may be null (Note [Batch norm with a fused ReLU])
//   batch_norm_backward(dtype, param_dtype, sh, training, x, grad_y, mean, invstd, weight, grad_x,
//                       grad_weight, grad_bias, y = null, bias = null, grad_y_masked = null)
//       with sh.relu, grad_y is the gradient of the fused ReLU's output y (x's layout), read
//       through ReLU's backward (Note [Batch norm with a fused ReLU]): its mask is y > 0, read
//       from y when y is given; kernels::gpu recomputes it from x when y is null, with bias (or 0)
//       as apply's shift (Note [The ReLU mask recomputed from x]); kernels::cpu requires y.
//       kernels::gpu, with sh.relu and a reduction pass to run (grad_weight, grad_bias, or grad_x
//       in training), writes grad_y read through the mask to grad_y_masked when it is given (x's
//       layout): the residual's gradient under a fused add and ReLU, made by the pass that reads
//       grad_y anyway, which the input pass then reads in its place (kernels::cpu refuses it);
//       with xhat = (x - mean) * invstd:
//         grad_weight[c] = sum(grad_y * xhat),  grad_bias[c] = sum(grad_y)
//         training (mean/invstd are the batch statistics, so they depend on x), M = n * s:
//           grad_x = weight * invstd / M * (M * grad_y - sum(grad_y) - xhat * sum(grad_y * xhat))
//         eval (fixed running statistics): grad_x = grad_y * weight * invstd
//       any of grad_x, grad_weight, grad_bias may be null (not wanted)
//
// Note [Mixed-precision batch norm]
// Under autocast batch norm computes in float32 but its input is 16-bit (a convolution's output).
// Casting that input to float32 first would make the float32 copy what backward keeps: twice the
// bytes of the 16-bit tensor, for every batch norm of the network. Instead the kernels take the
// 16-bit x and grad_y as they are, with float32 per-channel vectors (param_dtype = f32): each
// element is widened when it is read (exact: every f16/bf16 value is a float), all arithmetic is
// the float32 kernel's, and only y and grad_x are rounded to 16 bits, once, when stored. So the
// numbers are those of "cast x to float32, run the float32 kernel, round y", and backward keeps
// the 16-bit x and two float32 vectors of C. cuDNN's batch norm and PyTorch's batch_norm on a
// bf16 input with float32 weights do the same.
// Pointers are host memory for kernels::cpu, device memory of the current device for
// kernels::gpu (queued on cuda::current_stream()).

#include <cmath>
#include <cstdint>

#include "../core/dtype.h"
#include "../core/error.h"

namespace ember::kernels {

struct BatchNormShape {
  int64_t n = 0, c = 0, s = 1;  // x: (n, c, s), or (n, s, c) when channels_last
  bool channels_last = false;   // the memory order of x, y, grad_y, grad_x (CUDA kernels only)
  bool relu = false;            // a ReLU fused after the normalization (and the residual add)
};

// Where batch_norm_stats writes. Every vector has C elements of param_dtype; mean is required, the
// rest optional (null: not wanted). running_mean and running_var are read and updated in place,
// both or neither, and need n * s > 1 (the unbiased variance divides by n * s - 1);
// batches_tracked is one int64 on the same device, counted up by one.
struct BatchNormStats {
  void* mean = nullptr;
  void* var = nullptr;     // the biased variance
  void* invstd = nullptr;  // 1 / sqrt(var + eps)
  double eps = 0;
  void* running_mean = nullptr;
  void* running_var = nullptr;
  double momentum = 0;
  int64_t* batches_tracked = nullptr;
};

// The last step of batch_norm_stats for channel c, shared by both backends: the channel's mean
// and biased variance in A (acc_t on CUDA, double on the CPU) over `count` elements -> the wanted
// outputs, each rounded to P once. Channel 0 also counts num_batches_tracked.
template <typename A, typename P>
EMBER_HD inline void finish_channel_stats(const BatchNormStats& out, int64_t c, A mean, A var, A count) {
  static_cast<P*>(out.mean)[c] = static_cast<P>(mean);
  if (out.var) static_cast<P*>(out.var)[c] = static_cast<P>(var);
  if (out.invstd) static_cast<P*>(out.invstd)[c] = static_cast<P>(A(1) / std::sqrt(var + static_cast<A>(out.eps)));
  if (out.running_mean) {
    const A m = static_cast<A>(out.momentum), keep = A(1) - m;
    P* rm = static_cast<P*>(out.running_mean);
    P* rv = static_cast<P*>(out.running_var);
    rm[c] = static_cast<P>(keep * static_cast<A>(rm[c]) + m * mean);
    rv[c] = static_cast<P>(keep * static_cast<A>(rv[c]) + m * (var * count / (count - A(1))));
  }
  if (out.batches_tracked && c == 0) *out.batches_tracked += 1;
}

// Note [Batch norm with a fused ReLU]
// Most batch norms of a ResNet are followed by a ReLU, and the last of each block by a residual
// add and a ReLU. Run separately, each of those ops reads the whole activation and writes it
// again; fused, they happen while the normalized value is still in a register:
//   apply, sh.relu:    y = relu(round(norm(x)) [+ residual]), each step rounded to T where the
//                      separate ops round it (the add computed in acc_t<T>, as add() does), so y
//                      equals relu(add(batch_norm(x), residual)) bit for bit;
//   backward, sh.relu: each grad_y element is read through ReLU's backward, y > 0 ? grad_y : 0,
//                      with y the fused output: the values ReLU's backward would have written,
//                      without writing them.
// Forward that saves a write and a read of the activation per fused ReLU (two of each with a
// residual), backward one write and one read (the layer, layers/batchnorm.cpp, still materializes the
// masked gradient when there is a residual: the residual's own gradient is that tensor). The two
// helpers below are the only arithmetic the fusion adds, shared by the CPU and CUDA kernels.
template <typename T>
EMBER_HD inline T fused_epilogue(acc_t<T> v, const T* residual, int64_t i, bool relu) {
  using A = acc_t<T>;
  T t = static_cast<T>(v);
  if (residual != nullptr) t = static_cast<T>(static_cast<A>(t) + static_cast<A>(residual[i]));
  if (relu && static_cast<A>(t) <= A(0)) t = T(0);  // ReLU's forward: NaN stays NaN
  return t;
}
// Note [The ReLU mask recomputed from x]
// A fused ReLU's backward needs its mask, y > 0. Reading y costs a read of the activation in each
// of the backward's two passes, and saving y for backward keeps it alive (unless a later op saves
// it anyway, as the convolution after it in a ResNet does).
// Without a residual, y = relu(round(v)) with v = (x - mean) * scale + shift the normalization
// apply computed, so y > 0 exactly when round(v) > 0: the CUDA backward recomputes v from x,
// which it reads anyway, with the same expression (batch_norm_affine below, shared with apply),
// and reads no y. The layer then saves no y (layers/batchnorm.cpp). With a residual the mask
// depends on the residual too, so it is read from y; the masked gradient is then the residual's
// gradient, which the reduction pass writes (grad_y_masked in batch_norm_backward's contract).
// NaN: round(NaN) > 0 is false, as NaN > 0 is, so a NaN output's gradient is masked either way.

// The normalization apply computes, before rounding: (x - mean) * scale + shift with scale =
// invstd * weight. One expression for apply and for the mask's recomputation, so both round alike.
template <typename A>
EMBER_HD inline A batch_norm_affine(A x, A mean, A scale, A shift) {
  return (x - mean) * scale + shift;
}
template <typename T>
EMBER_HD inline bool relu_passes(acc_t<T> v) {
  return static_cast<acc_t<T>>(static_cast<T>(v)) > acc_t<T>(0);
}

// grad_y[i] as the batch norm sees it: masked by the fused ReLU's output y when y is given.
template <typename T>
EMBER_HD inline acc_t<T> masked_grad(const T* grad_y, const T* y, int64_t i) {
  using A = acc_t<T>;
  return (y != nullptr && !(static_cast<A>(y[i]) > A(0))) ? A(0) : static_cast<A>(grad_y[i]);
}

// Calls f(T{}, P{}) with T the C++ type of dtype and P that of param_dtype, for the pairs the
// kernels take: the same floating type, or f16/bf16 with float (Note [Mixed-precision batch norm]).
template <typename F>
void dispatch_batch_norm(const char* op, DType dtype, DType param_dtype, const F& f) {
  if (param_dtype == dtype) {
    EMBER_DISPATCH_FLOATING(dtype, op, [&] { f(scalar_t{}, scalar_t{}); });
    return;
  }
  EMBER_CHECK(param_dtype == DType::f32 && is_low_precision(dtype), op,
              ": the per-channel vectors must have the input's dtype or, for a float16/bfloat16 input, float32; got ",
              param_dtype, " for input dtype ", dtype);
  if (dtype == DType::f16) f(Half{}, float{});
  else f(BFloat16{}, float{});
}

}  // namespace ember::kernels
