#pragma once
// 2-D pooling on a CUDA device: max (with int64 indices), average, adaptive average; forward and
// backward.
//
// Contracts: exactly those of kernels/cpu/pool.h (same geometry struct, layout of `planes`
// = N * C contiguous (H, W) planes, outputs overwritten, f32 or f64). Pointers are device
// pointers of the current device; the work runs on cuda::current_stream() and is
// asynchronous. Every kernel here is deterministic, and the results are bit-identical to the CPU
// reference (same per-window order of operations, accumulation in double where the CPU does).

#include <cstdint>

#include "../../core/dtype.h"
#include "../cpu/pool.h"

namespace ember::kernels::gpu {

using ::ember::kernels::cpu::Pool2dGeometry;

// out[p, oh, ow] = max of x over the window; indices[p, oh, ow] = ih * in_w + iw of that max
// (first on ties; NaN wins and propagates). x: (planes, in_h, in_w); out, indices: (planes, out_h, out_w).
void max_pool2d_forward(DType dtype, const Pool2dGeometry& g, const void* x, void* out, int64_t* indices);
// grad_in[p, indices[p, o]] += grad_out[p, o]; grad_in (planes, in_h, in_w) overwritten.
void max_pool2d_backward(DType dtype, const Pool2dGeometry& g, const void* grad_out, const int64_t* indices,
                         void* grad_in);

// Average over the window's in-bounds elements / divisor (count_include_pad counts padded
// positions). dilation must be 1.
void avg_pool2d_forward(DType dtype, const Pool2dGeometry& g, bool count_include_pad, const void* x, void* out);
void avg_pool2d_backward(DType dtype, const Pool2dGeometry& g, bool count_include_pad, const void* grad_out,
                         void* grad_in);

// Adaptive average: cell i covers [floor(i * in / out), ceil((i + 1) * in / out)).
void adaptive_avg_pool2d_forward(DType dtype, const Pool2dGeometry& g, const void* x, void* out);
void adaptive_avg_pool2d_backward(DType dtype, const Pool2dGeometry& g, const void* grad_out, void* grad_in);

}  // namespace ember::kernels::gpu
