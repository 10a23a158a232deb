#pragma once
// CUDA classification losses (cross entropy, negative log-likelihood) over class indices: the
// entry points and contracts of kernels/cpu/loss.h on device pointers (logits, targets, weight,
// the per-sample double outputs and grad_loss all live on the device), queued on
// cuda::current_stream(). No CUDA header.
//
// Layout shared by these kernels: scores (logits or log-probabilities) are (N, C, S) contiguous
// arrays of `dtype` (f32, f64) with the class dim in the middle — S = d1 * d2 * ... for
// (N, C, d1, d2, ...) inputs, 1 for (N, C). Targets are (N, S) contiguous int64; sample
// i = n * S + s. weight is (C) of `dtype`, or null for all ones. A sample whose target equals
// ignore_index contributes 0 loss, 0 weight and 0 gradient. Targets must have been validated
// (find_invalid_target) before the kernels run. Per-sample results are double, so a 'mean' over
// many float32 samples loses nothing before it is divided.

#include <cstdint>

#include "../../core/dtype.h"
#include "../cpu/loss.h"  // ClassLayout

namespace ember::kernels::gpu {

using cpu::ClassLayout;  // (n, c, s): the CPU kernels' type

// The position of the first target that is neither ignore_index nor in [0, num_classes), or -1.
// Returns a host value: it copies the answer back and waits for the current stream (a sync).
int64_t find_invalid_target(const int64_t* target, int64_t count, int64_t num_classes, int64_t ignore_index);

// Cross entropy from logits with label smoothing eps, per sample i with target t and
// logp = log_softmax over the classes:
//   loss[i]          = (1 - eps) * (-w[t] * logp[t]) + eps / C * (-sum_c w[c] * logp[c])
//   target_weight[i] = w[t]
//   lse[i]           = logsumexp of the sample's logits (saved for the backward)
// (PyTorch's formula: the smoothing term weighs each class by its own weight.)
void cross_entropy_forward(DType dtype, const ClassLayout& layout, const void* logits, const int64_t* target,
                           const void* weight, int64_t ignore_index, double label_smoothing, double* loss,
                           double* target_weight, double* lse);

// The gradient of the above, overwriting grad_logits (N, C, S):
//   grad[n, c, s] = scale_i * ((1 - eps) * w[t] * (p_c - [c == t]) + eps / C * (W * p_c - w[c]))
// with p = exp(logits - lse[i]), W = sum_c w[c], scale_i = grad_loss[i * grad_stride] * grad_factor
// (grad_loss of `dtype`; stride 0 broadcasts one gradient for 'sum'/'mean').
void cross_entropy_backward(DType dtype, const ClassLayout& layout, void* grad_logits, const void* logits,
                            const int64_t* target, const void* weight, int64_t ignore_index, double label_smoothing,
                            const double* lse, const void* grad_loss, int64_t grad_stride, double grad_factor);

// Negative log-likelihood: loss[i] = -w[t] * log_probs[n, t, s], target_weight[i] = w[t].
void nll_loss_forward(DType dtype, const ClassLayout& layout, const void* log_probs, const int64_t* target,
                      const void* weight, int64_t ignore_index, double* loss, double* target_weight);

// grad[n, c, s] = -w[t] * scale_i where c == t, else 0 (scale_i as in cross_entropy_backward).
void nll_loss_backward(DType dtype, const ClassLayout& layout, void* grad_input, const int64_t* target,
                       const void* weight, int64_t ignore_index, const void* grad_loss, int64_t grad_stride,
                       double grad_factor);

}  // namespace ember::kernels::gpu
