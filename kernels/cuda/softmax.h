#pragma once
// CUDA softmax and log-softmax along one dim. Contracts: kernels/softmax.h (device pointers,
// queued on cuda::current_stream()). No CUDA header.

#include <cstdint>

#include "../../core/dtype.h"
#include "../softmax.h"

namespace ember::kernels::gpu {

void softmax_forward(SoftmaxKind kind, DType dtype, int64_t outer, int64_t n, int64_t inner, const void* x, void* y);
void softmax_backward(SoftmaxKind kind, DType dtype, int64_t outer, int64_t n, int64_t inner, void* grad_x,
                      const void* grad_y, const void* y);

}  // namespace ember::kernels::gpu
