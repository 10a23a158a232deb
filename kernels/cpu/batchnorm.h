#pragma once
// CPU batch normalization. Contracts: kernels/batchnorm.h, in (N, C, S) order only (a
// channels-last BatchNormShape is refused with an error). Every channel is reduced by one thread
// in a fixed order, so the results do not depend on the thread count.

#include <cstdint>

#include "../../core/dtype.h"
#include "../batchnorm.h"

namespace ember::kernels::cpu {

void batch_norm_stats(DType dtype, DType param_dtype, const BatchNormShape& sh, const void* x, void* mean, void* var);
void batch_norm_apply(DType dtype, DType param_dtype, const BatchNormShape& sh, const void* x, const void* mean,
                      const void* invstd, const void* weight, const void* bias, void* y,
                      const void* residual = nullptr);
void batch_norm_backward(DType dtype, DType param_dtype, const BatchNormShape& sh, bool training, const void* x,
                         const void* grad_y, const void* mean, const void* invstd, const void* weight, void* grad_x,
                         void* grad_weight, void* grad_bias, const void* y = nullptr);

}  // namespace ember::kernels::cpu
