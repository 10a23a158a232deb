#pragma once
// CPU batch normalization: per-channel statistics, the normalization itself, and its backward.
//
// Layout: x is contiguous (N, C, S) where S is the product of the dims after C (1 for (N, C)
// input); per-channel vectors (mean, invstd, weight, bias, grads) are contiguous (C). Every
// channel is reduced by one thread in a fixed order, so the results do not depend on the thread
// count. Accumulation is in double.
// Pointers are to elements of `dtype` (float32 or float64).

#include <cstdint>

#include "../../core/dtype.h"

namespace ember::kernels::cpu {

struct BatchNormShape {
  int64_t n = 0, c = 0, s = 1;  // x: (n, c, s)
};

// Batch statistics: mean[c] and the biased variance var[c] over the n * s elements of channel c
// (two passes: mean first, then the centred squares). mean, var: (C), overwritten.
void batch_norm_stats(DType dtype, const BatchNormShape& sh, const void* x, void* mean, void* var);

// y = (x - mean[c]) * invstd[c] * weight[c] + bias[c]; weight and bias may be null (1 and 0).
// y: (N, C, S), overwritten; y may not alias x.
void batch_norm_apply(DType dtype, const BatchNormShape& sh, const void* x, const void* mean, const void* invstd,
                      const void* weight, const void* bias, void* y);

// Gradients of batch_norm_apply given grad_y (N, C, S), with xhat = (x - mean) * invstd:
//   grad_weight[c] = sum(grad_y * xhat),  grad_bias[c] = sum(grad_y)
//   training (mean/invstd are the batch statistics, so they depend on x), M = n * s:
//     grad_x = weight * invstd / M * (M * grad_y - sum(grad_y) - xhat * sum(grad_y * xhat))
//   eval (fixed running statistics): grad_x = grad_y * weight * invstd
// Any of grad_x, grad_weight, grad_bias may be null (not wanted); all are overwritten.
void batch_norm_backward(DType dtype, const BatchNormShape& sh, bool training, const void* x, const void* grad_y,
                         const void* mean, const void* invstd, const void* weight, void* grad_x, void* grad_weight,
                         void* grad_bias);

}  // namespace ember::kernels::cpu
