// Gradient clipping: a norm from per-block partial sums (kernels/cpu/optim.cpp), then one scale.

#include "clip.h"

#include <algorithm>
#include <cmath>

#include "../core/autograd.h"
#include "../core/dispatch.h"
#include "../core/error.h"
#include "../kernels/cpu/optim.h"
#if EMBER_CUDA_BACKEND
#include "../kernels/cuda/optim.h"
#endif
#include "../core/op_helpers.h"

namespace ember::optim {

namespace {

// Rounds x to the dtype that PyTorch would hold it in (a 0-dim tensor of the gradients' dtype).
double round_to(DType dtype, double x) {
  return dtype == DType::f32 ? static_cast<double>(static_cast<float>(x)) : x;
}

// The norm of one gradient, rounded to its dtype (torch.linalg.vector_norm returns that dtype).
double grad_norm(const Tensor& g, double p) {
  const Tensor c = g.contiguous();
  double partial = 0;
  detail::check_not_capturing(g.device(), "clip_grad_norm_", "reads the gradient norm on the host");
  EMBER_KERNEL_CALL_INTO(partial, g.device(), "clip_grad_norm_", grad_norm_partial, c.dtype(), c.numel(), c.data(), p);
  if (std::isinf(p)) return round_to(g.dtype(), partial);
  return round_to(g.dtype(), p == 2 ? std::sqrt(partial) : std::pow(partial, 1.0 / p));
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  NoGradGuard no_grad;
  EMBER_CHECK(norm_type > 0, "clip_grad_norm_: norm_type must be positive or inf, got ", norm_type);
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    EMBER_CHECK(g.dtype() == DType::f32 || g.dtype() == DType::f64,
                "clip_grad_norm_: gradients must be float32 or float64, got ", describe(g));
    grads.push_back(g);
  }
  if (grads.empty()) return 0.0;

  // PyTorch stacks the per-parameter norms (type promotion: float64 if any gradient is) and
  // takes their norm; the coefficient is then computed in that dtype.
  DType dtype = DType::f32;
  for (const Tensor& g : grads)
    if (g.dtype() == DType::f64) dtype = DType::f64;
  double total = 0;
  if (std::isinf(norm_type)) {
    for (const Tensor& g : grads) {
      const double n = grad_norm(g, norm_type);
      total = (n != n || n > total) ? n : total;
    }
  } else {
    double sum = 0;
    for (const Tensor& g : grads) {
      const double n = grad_norm(g, norm_type);
      sum += norm_type == 2 ? n * n : std::pow(n, norm_type);
    }
    total = round_to(dtype, norm_type == 2 ? std::sqrt(sum) : std::pow(sum, 1.0 / norm_type));
  }
  EMBER_CHECK(!error_if_nonfinite || std::isfinite(total), "clip_grad_norm_: the total norm of order ", norm_type,
              " of the gradients is non-finite (", total, "), so they cannot be clipped");

  // clip_coef = max_norm / (total_norm + 1e-6), clamped to at most 1, in the norm's dtype. A
  // Python float divided by a tensor is tensor.reciprocal() * float in PyTorch (Tensor.__rtruediv__),
  // which rounds twice: do the same.
  double coef;
  if (dtype == DType::f32) {
    const float c = (1.0f / (static_cast<float>(total) + static_cast<float>(1e-6))) * static_cast<float>(max_norm);
    coef = c != c ? c : std::min(c, 1.0f);
  } else {
    const double c = (1.0 / (total + 1e-6)) * max_norm;
    coef = c != c ? c : std::min(c, 1.0);
  }
  // g * 1 == g exactly, so skipping coef == 1 changes nothing but the time.
  if (coef != 1.0)
    for (Tensor& g : grads) g.mul_(coef);
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  NoGradGuard no_grad;
  EMBER_CHECK(clip_value >= 0, "clip_grad_value_: clip_value must be >= 0, got ", clip_value);
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) g.clamp_(-clip_value, clip_value);
  }
}

}  // namespace ember::optim
