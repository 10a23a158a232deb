#pragma once
// Gradient clipping, matching torch.nn.utils.clip_grad_norm_ / clip_grad_value_. Parameters
// without a gradient are ignored. Gradients are modified in place.

#include <vector>

#include "../core/tensor.h"

namespace ember::optim {

// Scales all gradients together so that their total norm is at most max_norm:
//   total = norm of the per-parameter norms (= the norm of all gradients concatenated)
//   coef  = min(max_norm / (total + 1e-6), 1);  every grad *= coef
// norm_type: any p > 0, or INFINITY for the max-abs norm. As in PyTorch, the norm and the
// coefficient are rounded to the gradients' dtype (float32 gradients: float32 arithmetic; the
// sums themselves are accumulated in double). Returns the total norm before clipping (0 when
// no parameter has a gradient). With error_if_nonfinite, a NaN/inf total throws ember::Error
// and leaves the gradients unchanged; without it, NaN propagates into the gradients like PyTorch.
// Every step runs as kernels on the gradients' device (kernels/optim.h: grad_norm per gradient,
// clip_coefficient, scale_grads), so a GPU waits only for the one read of the returned total; the
// gradients must all be on one device. Refused while a CUDA graph captures (it returns a host
// value): use clip_grad_norm_on_device_ there.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// The same clipping, bit for bit, with the total norm left on the gradients' device: a float64
// (1,) tensor holding the norm rounded to its dtype (torch.nn.utils.clip_grad_norm_ returns a
// tensor too), or an undefined tensor when no parameter has a gradient. Nothing waits for the
// device, so a CUDA graph can capture it (ember train --cuda-graphs --clip-grad-norm).
// error_if_nonfinite has no equivalent here: checking the norm is a host read.
Tensor clip_grad_norm_on_device_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

// Clamps every gradient element to [-clip_value, clip_value] (clip_value >= 0; NaN stays NaN).
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace ember::optim
