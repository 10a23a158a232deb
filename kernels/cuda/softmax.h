#pragma once
// CUDA softmax and log-softmax along one dim: the entry points and contracts of
// kernels/cpu/softmax.h on device pointers, queued on cuda::current_stream(). No CUDA header.
//
// Layout: x, y, grad_x, grad_y are (outer, n, inner) contiguous arrays of `dtype` (f32, f64),
// and the softmax runs along the middle dim: for every (o, i), the line
// x[o, 0..n, i] (stride `inner`). Outputs are overwritten; y may not alias x.

#include <cstdint>

#include "../../core/dtype.h"
#include "../cpu/softmax.h"  // SoftmaxKind

namespace ember::kernels::gpu {

using cpu::SoftmaxKind;  // Softmax, LogSoftmax: the CPU kernels' type

// Numerically stable: with m = max of the line and s = sum exp(x - m) (in double),
//   softmax:     y = exp(x - m) / s
//   log_softmax: y = x - m - log(s)
// so large logits (1e4) never overflow. A NaN anywhere in a line makes the whole line NaN.
void softmax_forward(SoftmaxKind kind, DType dtype, int64_t outer, int64_t n, int64_t inner, const void* x, void* y);

// grad_x from grad_y and the forward's output y:
//   softmax:     grad_x = y * (grad_y - sum(grad_y * y))
//   log_softmax: grad_x = grad_y - exp(y) * sum(grad_y)
// with the sums along the line.
void softmax_backward(SoftmaxKind kind, DType dtype, int64_t outer, int64_t n, int64_t inner, void* grad_x,
                      const void* grad_y, const void* y);

}  // namespace ember::kernels::gpu
