#pragma once
// 2-D pooling on a CUDA device: max (with int32/int64 indices; NCHW or channels-last), average, adaptive average; forward and
// backward. Contracts: kernels/pool.h; the backward passes are gathers, not scatters (Note
// [Pooling backward as a gather] in pool.cu), so the results are bit-identical to the CPU.

#include <cstdint>

#include "../../core/dtype.h"
#include "../pool.h"

namespace ember::kernels::gpu {

#include "../pool_decls.h"

// Max pooling of channels-last images (Note [Channels-last max pooling] in pool.cu): x, out,
// indices, grad_out and grad_in are (N, H, W, C) in memory with C = channels and N = g.planes / C;
// the values and indices are those of the (N, C, H, W) kernels above, bit for bit.
void max_pool2d_forward_nhwc(DType dtype, DType index_dtype, const Pool2dGeometry& g, int64_t channels, const void* x,
                             void* out, void* indices);
void max_pool2d_backward_nhwc(DType dtype, DType index_dtype, const Pool2dGeometry& g, int64_t channels,
                              const void* grad_out, const void* indices, void* grad_in);

}  // namespace ember::kernels::gpu
