#pragma once
// Batch normalization on a CUDA device. Contracts: kernels/batchnorm.h. The reductions are block
// trees (Note [Split channel reductions] in batchnorm.cu) instead of the CPU's sequential loop, so
// sums may differ from the CPU in the last bits (deterministic run to run).

#include <cstdint>

#include "../../core/dtype.h"
#include "../batchnorm.h"

namespace ember::kernels::gpu {

#include "../batchnorm_decls.h"

// out[c] = the sum of channel c's n * s values of x ((n, c, s), or (n, s, c) when
// sh.channels_last), summed in acc_t<T> and rounded to the dtype once: batch_norm_stats' first
// pass on its own (split over slices and blocks, 16-byte packs of channels where they fit). The
// bias gradient of a convolution (kernels/cuda/conv.cu). Any floating dtype; sh.relu is ignored.
void channel_sums(DType dtype, const BatchNormShape& sh, const void* x, void* out);

}  // namespace ember::kernels::gpu
