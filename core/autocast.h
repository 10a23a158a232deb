#pragma once
// Autocast: mixed precision chosen op by op, with torch.autocast's semantics.
//
//   {
//     AutocastGuard amp(DeviceType::CUDA, DType::f16);   // on for ops on CUDA tensors, this thread
//     Tensor logits = model.forward(images);             // convolutions and linear layers in f16
//     loss = cross_entropy(logits, labels);              // softmax and the loss in f32
//   }                                                    // the region ends: its weight casts are dropped
//   loss.backward();                                     // gradients of the f32 parameters are f32
//
// Note [Autocast]
// Training in float16 or bfloat16 is fast where the hardware multiplies 16-bit numbers fast (tensor
// cores) and halves the bytes moved, but not every op survives 16 bits: a sum of many small
// numbers, an exp, a softmax or a loss loses the digits that matter. Autocast keeps the model's
// parameters in f32 and, inside a region, casts each op's inputs to the dtype that op is safe and
// fast in. Every op is in one of these lists (PyTorch's autocast lists, cut to ember's ops; one
// list for the CPU and CUDA alike):
//
//   lower precision (CastPolicy::lower_precision): mm, bmm, matmul, linear, conv2d
//       f32 inputs are cast to the region's dtype (f16 or bf16); the result is 16-bit.
//   f32 (CastPolicy::fp32): softmax, log_softmax, cross_entropy, nll_loss, mse_loss, sum (and so
//       mean, which is sum / count), exp, log, pow, rsqrt, batch_norm and sync_batch_norm
//       16-bit inputs are cast to f32; the result is f32 — except the batch norms, whose weight
//       and bias are cast to f32 but whose 16-bit input is not: their kernels widen it as they read
//       it, run statistics and normalization in f32 and round the output to the input's dtype, as
//       cuDNN's mixed-precision batch norm does (the next convolution wants 16 bits anyway), so
//       backward keeps the 16-bit input (Note [Mixed-precision batch norm] in kernels/batchnorm.h).
//   promote (CastPolicy::promote): scatter_add
//       every floating input is cast to the widest of their dtypes (f16 with bf16 gives f32).
//       The other multi-input ops — add, sub, mul, div, maximum, minimum, where, cat, stack —
//       promote by themselves (promote_types in core/dtype.h), with or without autocast.
//   everything else runs in its input's dtype: relu and the other activations, pooling, dropout,
//       views, var, amax, ... (a 16-bit activation stays 16-bit from one product to the next).
//
// Only eligible tensors are cast: floating, on the region's device type, not f64 (gradcheck's
// dtype is left alone, as PyTorch does). Each op applies its policy at its entry point:
//
//   if (const auto dt = autocast::op_dtype(CastPolicy::lower_precision, {&x, &weight, &bias}))
//     return linear(autocast::cast(x, *dt), autocast::cast(weight, *dt), autocast::cast(bias, *dt));
//
// op_dtype is empty when autocast is off for the arguments' device type or every eligible argument
// already has the dtype, so the second call runs the op itself. The casts are Tensor::to, which
// autograd records (ToCopyBackward), so gradients flow back through them: a parameter cast to f16
// receives its gradient cast back to f32. Backward runs with autocast off on every device type
// (autocast::SuspendGuard in the autograd engine): each backward closure computes in the dtypes
// its forward chose.
//
// The cast cache. A parameter used by several ops of a region (a weight shared between layers,
// a model called twice) would be cast once per use. Within a region, the lower-precision cast of
// an f32 leaf that requires grad — a parameter — is kept and handed out again: one cast, one
// ToCopyBackward node, one gradient per weight per region. The cache belongs to the thread and
// is cleared when the thread's outermost AutocastGuard exits (an optimizer step between two
// regions changes the weights). A kept cast is used again only while it still describes its
// weight: the same live tensor, the same storage version (no in-place update since), and, in grad
// mode, a cast made in grad mode whose ToCopyBackward has not been released by a backward pass.

#include <initializer_list>
#include <optional>
#include <vector>

#include "device.h"
#include "dtype.h"
#include "tensor.h"

namespace ember {

enum class AutocastMode { on, off };

// Turns autocast on (with a 16-bit dtype) or off for ops on tensors of `device` type, on this
// thread, until the guard is destroyed; the previous state comes back then. Guards nest; when the
// thread's outermost guard exits, the cast cache is cleared (Note [Autocast]).
//   AutocastGuard amp(DeviceType::CUDA, DType::bf16);   // on, computing in bf16
//   AutocastGuard f32(DeviceType::CUDA, AutocastMode::off);   // a region inside it in f32
class AutocastGuard {
 public:
  // On, with `dtype` (f16 or bf16; anything else is an ember::Error).
  AutocastGuard(DeviceType device, DType dtype);
  // On with the dtype autocast_dtype(device) has now, or off.
  AutocastGuard(DeviceType device, AutocastMode mode);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType device_;
  bool prev_enabled_;
  DType prev_dtype_;
};

// Whether autocast is on for ops on `device` type, on this thread.
bool autocast_enabled(DeviceType device);
// The dtype lower-precision ops compute in when it is on: the innermost guard's, or by default
// f16 on CUDA and bf16 on the CPU (PyTorch's defaults).
DType autocast_dtype(DeviceType device);

namespace autocast {

enum class CastPolicy {
  lower_precision,  // eligible inputs to the region's 16-bit dtype
  fp32,             // eligible inputs to f32
  promote,          // eligible inputs to the widest of their dtypes
};

// The dtype an op with `policy` runs in under autocast, given its tensor arguments (undefined and
// non-floating ones are skipped); empty when autocast leaves the op alone: it is off for the
// arguments' device type, or every eligible argument already has that dtype.
std::optional<DType> op_dtype(CastPolicy policy, std::initializer_list<const Tensor*> args);
std::optional<DType> op_dtype(CastPolicy policy, const std::vector<Tensor>& args);

// `t` cast to `dtype` when it is eligible (floating, not f64, on a device type autocast is on
// for) and has another dtype; otherwise t itself (an undefined t too). Differentiable.
// Lower-precision casts of parameters come from the region's cache (Note [Autocast]).
Tensor cast(const Tensor& t, DType dtype);

// The number of casts the cache holds on this thread (for tests: one per weight per region).
size_t cache_size();

// Autocast off on every device type for a scope, without ending the region (the cache stays).
// The autograd engine runs backward under it.
class SuspendGuard {
 public:
  SuspendGuard();
  ~SuspendGuard();
  SuspendGuard(const SuspendGuard&) = delete;
  SuspendGuard& operator=(const SuspendGuard&) = delete;

 private:
  bool prev_cpu_, prev_cuda_;
};

}  // namespace autocast

}  // namespace ember
