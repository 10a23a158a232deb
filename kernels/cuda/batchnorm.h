#pragma once
// Batch normalization on a CUDA device: per-channel statistics, the normalization, its backward.
//
// Contracts: exactly those of kernels/cpu/batchnorm.h (x contiguous (N, C, S), per-channel
// vectors (C), outputs overwritten, weight/bias may be null, any of the backward outputs may be
// null, accumulation in double, f32 or f64). Pointers are device pointers of the current device;
// the work runs on cuda::current_stream() and is asynchronous. The reductions are block
// trees instead of the CPU's sequential loop, so sums may differ from the CPU in the last bits
// (deterministic run to run).

#include <cstdint>

#include "../../core/dtype.h"
#include "../cpu/batchnorm.h"

namespace ember::kernels::gpu {

using ::ember::kernels::cpu::BatchNormShape;

// mean[c] and the biased variance var[c] over the n * s elements of channel c (two passes).
void batch_norm_stats(DType dtype, const BatchNormShape& sh, const void* x, void* mean, void* var);

// y = (x - mean[c]) * invstd[c] * weight[c] + bias[c]; y (N, C, S) overwritten, may not alias x.
void batch_norm_apply(DType dtype, const BatchNormShape& sh, const void* x, const void* mean, const void* invstd,
                      const void* weight, const void* bias, void* y);

// grad_weight = sum(grad_y * xhat), grad_bias = sum(grad_y); grad_x as in kernels/cpu/batchnorm.h
// (training: batch statistics depend on x; eval: grad_y * weight * invstd).
void batch_norm_backward(DType dtype, const BatchNormShape& sh, bool training, const void* x, const void* grad_y,
                         const void* mean, const void* invstd, const void* weight, void* grad_x, void* grad_weight,
                         void* grad_bias);

}  // namespace ember::kernels::gpu
