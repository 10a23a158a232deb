#pragma once
// 2-D pooling on a CUDA device: max (with int64 indices), average, adaptive average; forward and
// backward. Contracts: kernels/pool.h; the backward passes are gathers, not scatters (Note
// [Pooling backward as a gather] in pool.cu), so the results are bit-identical to the CPU.

#include <cstdint>

#include "../../core/dtype.h"
#include "../pool.h"

namespace ember::kernels::gpu {

void max_pool2d_forward(DType dtype, DType index_dtype, const Pool2dGeometry& g, const void* x, void* out,
                        void* indices);
void max_pool2d_backward(DType dtype, DType index_dtype, const Pool2dGeometry& g, const void* grad_out,
                         const void* indices, void* grad_in);
void avg_pool2d_forward(DType dtype, const Pool2dGeometry& g, bool count_include_pad, const void* x, void* out);
void avg_pool2d_backward(DType dtype, const Pool2dGeometry& g, bool count_include_pad, const void* grad_out,
                         void* grad_in);
void adaptive_avg_pool2d_forward(DType dtype, const Pool2dGeometry& g, const void* x, void* out);
void adaptive_avg_pool2d_backward(DType dtype, const Pool2dGeometry& g, const void* grad_out, void* grad_in);

}  // namespace ember::kernels::gpu
