#pragma once
// CUDA classification losses over class indices. Contracts: kernels/loss.h (device pointers,
// queued on cuda::current_stream()). No CUDA header. find_invalid_target returns a host value:
// it copies the answer back and waits for the current stream (a sync).

#include <cstdint>

#include "../../core/dtype.h"
#include "../loss.h"

namespace ember::kernels::gpu {

int64_t find_invalid_target(const int64_t* target, int64_t count, int64_t num_classes, int64_t ignore_index);
void cross_entropy_forward(DType dtype, const ClassLayout& layout, const void* logits, const int64_t* target,
                           const void* weight, int64_t ignore_index, double label_smoothing, double* loss,
                           double* target_weight, double* lse);
void cross_entropy_backward(DType dtype, const ClassLayout& layout, void* grad_logits, const void* logits,
                            const int64_t* target, const void* weight, int64_t ignore_index, double label_smoothing,
                            const double* lse, const void* grad_loss, int64_t grad_stride, double grad_factor);
void nll_loss_forward(DType dtype, const ClassLayout& layout, const void* log_probs, const int64_t* target,
                      const void* weight, int64_t ignore_index, double* loss, double* target_weight);
void nll_loss_backward(DType dtype, const ClassLayout& layout, void* grad_input, const int64_t* target,
                       const void* weight, int64_t ignore_index, const void* grad_loss, int64_t grad_stride,
                       double grad_factor);

}  // namespace ember::kernels::gpu
