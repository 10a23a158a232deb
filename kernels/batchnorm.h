#pragma once
// Batch normalization: the contract both backends implement (kernels/cpu/batchnorm.h,
// kernels/cuda/batchnorm.h) — per-channel statistics, the normalization itself, its backward.
//
// Layout: x is contiguous (N, C, S) where S is the product of the dims after C (1 for (N, C)
// input); per-channel vectors (mean, var, invstd, weight, bias, their grads) are contiguous (C).
// dtype: f32 or f64; sums accumulate in cpu_acc_t on the CPU, acc_t on CUDA (Note [Accumulation
// types] in core/dtype.h). Outputs are overwritten.
//   batch_norm_stats(dtype, sh, x, mean, var)
//       mean[c] and the biased variance var[c] over the n * s elements of channel c (two passes:
//       the mean first, then the centred squares)
//   batch_norm_apply(dtype, sh, x, mean, invstd, weight, bias, y)
//       y = (x - mean[c]) * invstd[c] * weight[c] + bias[c]; weight and bias may be null (1 and 0);
//       y may not alias x
//   batch_norm_backward(dtype, sh, training, x, grad_y, mean, invstd, weight, grad_x, grad_weight, grad_bias)
//       with xhat = (x - mean) * invstd:
//         grad_weight[c] = sum(grad_y * xhat),  grad_bias[c] = sum(grad_y)
//         training (mean/invstd are the batch statistics, so they depend on x), M = n * s:
//           grad_x = weight * invstd / M * (M * grad_y - sum(grad_y) - xhat * sum(grad_y * xhat))
//         eval (fixed running statistics): grad_x = grad_y * weight * invstd
//       any of grad_x, grad_weight, grad_bias may be null (not wanted)
// Pointers are host memory for kernels::cpu, device memory of the current device for
// kernels::gpu (queued on cuda::current_stream()).

#include <cstdint>

namespace ember::kernels {

struct BatchNormShape {
  int64_t n = 0, c = 0, s = 1;  // x: (n, c, s)
};

}  // namespace ember::kernels
