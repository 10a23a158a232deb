#pragma once
// Classification losses over class indices (cross entropy, negative log-likelihood): the
// contract both backends implement (kernels/cpu/loss.h, kernels/cuda/loss.h).
//
// Layout: scores (logits or log-probabilities) are (N, C, S) contiguous arrays of `dtype` (f32,
// f64) with the class dim in the middle — S = d1 * d2 * ... for (N, C, d1, d2, ...) inputs, 1 for
// (N, C). Targets are (N, S) contiguous int64; sample i = n * S + s. weight is (C) of `dtype`,
// or null for all ones. A sample whose target equals ignore_index contributes 0 loss, 0 weight
// and 0 gradient. Targets must have been validated (find_invalid_target) before the other kernels
// run. Per-sample results are double, so a 'mean' over many float32 samples loses nothing before
// it is divided. Outputs are overwritten.
//   find_invalid_target(target, count, num_classes, ignore_index)
//       the position of the first target that is neither ignore_index nor in [0, num_classes); when
//       every target is valid, kTargetsValid, or kTargetsValidSomeIgnored when some equal ignore_index
//       (a 'mean' then needs the total weight; without, it is the number of targets)
//   cross_entropy_forward(dtype, layout, logits, target, weight, ignore_index, eps, loss, target_weight, lse)
//       from logits with label smoothing eps, per sample i with target t and logp = log_softmax
//       over the classes (PyTorch's formula: the smoothing term weighs each class by its own weight):
//         loss[i]          = (1 - eps) * (-w[t] * logp[t]) + eps / C * (-sum_c w[c] * logp[c])
//         target_weight[i] = w[t]
//         lse[i]           = logsumexp of the sample's logits (saved for the backward)
//   cross_entropy_backward(dtype, layout, grad_logits, logits, target, weight, ignore_index, eps, lse,
//                          grad_loss, grad_stride, grad_factor)
//       grad[n, c, s] = scale_i * ((1 - eps) * w[t] * (p_c - [c == t]) + eps / C * (W * p_c - w[c]))
//       with p = exp(logits - lse[i]), W = sum_c w[c], scale_i = grad_loss[i * grad_stride] * grad_factor
//       (grad_loss of `dtype`; stride 0 broadcasts one gradient for 'sum'/'mean')
//   nll_loss_forward(dtype, layout, log_probs, target, weight, ignore_index, loss, target_weight)
//       loss[i] = -w[t] * log_probs[n, t, s], target_weight[i] = w[t]
//   nll_loss_backward(dtype, layout, grad_input, target, weight, ignore_index, grad_loss, grad_stride, grad_factor)
//       grad[n, c, s] = -w[t] * scale_i where c == t, else 0 (scale_i as above)
// Pointers are host memory for kernels::cpu; for kernels::gpu every array (logits, targets,
// weight, the per-sample double outputs, grad_loss) is device memory of the current device, and
// the work is queued on cuda::current_stream().

#include <cstdint>

namespace ember::kernels {

// find_invalid_target's answers when no target is invalid.
inline constexpr int64_t kTargetsValid = -1;
inline constexpr int64_t kTargetsValidSomeIgnored = -2;

struct ClassLayout {
  int64_t n = 0, c = 0, s = 1;
  int64_t samples() const { return n * s; }
};

}  // namespace ember::kernels
