#pragma once
// Batch normalization on a CUDA device. Contracts: kernels/batchnorm.h. The reductions are block
// trees (Note [Split channel reductions] in batchnorm.cu) instead of the CPU's sequential loop, so
// sums may differ from the CPU in the last bits (deterministic run to run).

#include <cstdint>

#include "../../core/dtype.h"
#include "../batchnorm.h"

namespace ember::kernels::gpu {

void batch_norm_stats(DType dtype, DType param_dtype, const BatchNormShape& sh, const void* x, void* mean, void* var);
void batch_norm_apply(DType dtype, DType param_dtype, const BatchNormShape& sh, const void* x, const void* mean,
                      const void* invstd, const void* weight, const void* bias, void* y,
                      const void* residual = nullptr);
void batch_norm_backward(DType dtype, DType param_dtype, const BatchNormShape& sh, bool training, const void* x,
                         const void* grad_y, const void* mean, const void* invstd, const void* weight, void* grad_x,
                         void* grad_weight, void* grad_bias, const void* y = nullptr);

}  // namespace ember::kernels::gpu
