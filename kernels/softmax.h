#pragma once
// Softmax and log-softmax along one dim: the contract both backends implement
// (kernels/cpu/softmax.h, kernels/cuda/softmax.h).
//
// Layout: x, y, grad_x, grad_y are (outer, n, inner) contiguous arrays of `dtype` (f32, f64),
// and the softmax runs along the middle dim: for every (o, i), the line x[o, 0..n, i]
// (stride `inner`). Outputs are overwritten; y may not alias x.
//   softmax_forward(kind, dtype, outer, n, inner, x, y)
//       numerically stable: with m = max of the line and s = sum exp(x - m) (in cpu_acc_t / acc_t),
//         softmax:     y = exp(x - m) / s
//         log_softmax: y = x - m - log(s)
//       so large logits (1e4) never overflow. A NaN anywhere in a line makes the whole line NaN.
//   softmax_backward(kind, dtype, outer, n, inner, grad_x, grad_y, y)
//       grad_x from grad_y and the forward's output y, with the sums along the line:
//         softmax:     grad_x = y * (grad_y - sum(grad_y * y))
//         log_softmax: grad_x = grad_y - exp(y) * sum(grad_y)
// Pointers are host memory for kernels::cpu, device memory of the current device for
// kernels::gpu (queued on cuda::current_stream()).

namespace ember::kernels {

enum class SoftmaxKind { Softmax, LogSoftmax };

}  // namespace ember::kernels
