#pragma once
// Helpers shared by the op implementations (core/tensor.cpp, layers/, optim/, parallel/;
// internal, not part of the public API): turning tensors into kernel operands, the common
// argument checks, and the device dispatch of core/dispatch.h (Note [Device dispatch]).

#include "autograd.h"
#include "dispatch.h"
#include "tensor.h"
#include "../kernels/strided.h"

namespace ember::detail {

// The iteration shape for kernels.
kernels::IterShape iter_shape(const Shape& shape);
// An operand reading `t` broadcast to `shape` (stride 0 along broadcast dims). t's shape must
// broadcast to `shape` (checked by the caller).
kernels::Operand operand(const Tensor& t, const Shape& shape);
// An operand over t in its own shape.
inline kernels::Operand operand(const Tensor& t) { return operand(t, t.shape()); }

// Throws: "<op>: expected all tensors on one device, got cpu and cuda:0".
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
// Throws: "<op>: expected a floating-point tensor (float32 or float64), got int64 ...".
void check_floating(const char* op, const Tensor& t);
// The argument checks batch_norm and parallel::sync_batch_norm share (layers/norm.cpp): x is
// (N, C, ...) and floating-point; weight, bias, running_mean and running_var are each undefined or
// C floating-point values on x's device; the running statistics come together; eps >= 0.
void check_batch_norm_args(const char* op, const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                           const Tensor& weight, const Tensor& bias, double eps);

}  // namespace ember::detail
