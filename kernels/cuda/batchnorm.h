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

// out[c] = the sum of channel c's n * s values of x ((n, c, s), or (n, s, c) when
// sh.channels_last), summed in acc_t<T> and rounded to the dtype once: batch_norm_stats' first
// pass on its own (split over slices and blocks, 16-byte packs of channels where they fit). The
// bias gradient of a convolution (kernels/cuda/conv.cu). Any floating dtype; sh.relu is ignored.
void channel_sums(DType dtype, const BatchNormShape& sh, const void* x, void* out);

}  // namespace ember::kernels::gpu
