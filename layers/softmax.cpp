// softmax and log_softmax, with autograd. Declared in nn_functional.h.

#include "../core/autocast.h"
#include "../core/op_helpers.h"
#include "../kernels/cpu/softmax.h"
#include "nn_functional.h"

#if EMBER_CUDA_BACKEND
#include "../kernels/cuda/softmax.h"
#endif

namespace ember {

namespace {

using autocast::CastPolicy;
using kernels::SoftmaxKind;

// (outer, n, inner) sizes of x around dim d (a 0-d tensor is one line of one element).
struct LineShape {
  int64_t outer = 1, n = 1, inner = 1;
};

LineShape line_shape(const Tensor& x, int d) {
  LineShape l;
  if (x.dim() == 0) return l;
  for (int i = 0; i < d; ++i) l.outer *= x.shape()[i];
  l.n = x.shape()[d];
  for (int i = d + 1; i < x.dim(); ++i) l.inner *= x.shape()[i];
  return l;
}

Tensor softmax_op(SoftmaxKind kind, const char* op, const char* node, const Tensor& x0, int64_t dim) {
  detail::check_floating(op, x0);
  const int d = normalize_dim(dim, x0.dim(), op);
  const LineShape l = line_shape(x0, d);
  const Tensor x = x0.detach().contiguous();  // detached: the copy needs no graph of its own
  Tensor y = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  EMBER_KERNEL_CALL(x.device(), op, softmax_forward, kind, x.dtype(), l.outer, l.n, l.inner, x.data(), y.data());
  if (any_requires_grad({&x0})) {
    // The backward reads only the output; save a detached alias (saving y itself is a cycle).
    SavedTensor sy(y.detach(), node);
    record(node, {x0}, {y}, [=](const std::vector<Tensor>& g) {
      const Tensor& yv = sy.get();
      const Tensor gy = g[0].to(yv.dtype()).contiguous();
      Tensor gx = empty(yv.shape(), {.dtype = yv.dtype(), .device = yv.device()});
      EMBER_KERNEL_CALL(yv.device(), op, softmax_backward, kind, yv.dtype(), l.outer, l.n, l.inner, gx.data(),
                        gy.data(), yv.data());
      return std::vector<Tensor>{gx};
    });
  }
  return y;
}

}  // namespace

// softmax, log_softmax and the losses are on autocast's f32 list: under autocast, 16-bit inputs
// are computed in f32 and the result is f32 (Note [Autocast] in core/autocast.h).

Tensor softmax(const Tensor& x, int64_t dim) {
  if (const auto dt = autocast::op_dtype(CastPolicy::fp32, {&x})) return softmax(autocast::cast(x, *dt), dim);
  return softmax_op(SoftmaxKind::Softmax, "softmax", "SoftmaxBackward", x, dim);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  if (const auto dt = autocast::op_dtype(CastPolicy::fp32, {&x})) return log_softmax(autocast::cast(x, *dt), dim);
  return softmax_op(SoftmaxKind::LogSoftmax, "log_softmax", "LogSoftmaxBackward", x, dim);
}

}  // namespace ember
