// Gradient clipping: per-gradient norms, the total and the coefficient, and the scaling, all as
// kernels that leave their results where the gradients live (kernels/optim.h), so that one path
// serves eager steps and CUDA graphs.

#include "clip.h"

#include <cmath>
#include <map>

#include "../core/autograd.h"
#include "../core/dispatch.h"
#include "../core/error.h"
#include "../kernels/cpu/optim.h"
#if EMBER_CUDA_BACKEND
#include "../kernels/cuda/optim.h"
#endif

namespace ember::optim {

namespace {

// The gradients of `params`, checked, and their total norm and clip coefficient on their device.
struct ClipPlan {
  std::vector<Tensor> grads;
  Tensor total_and_coef;  // float64 (2,) on the gradients' device; undefined without gradients
};

ClipPlan plan_clip(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  EMBER_CHECK(norm_type > 0, "clip_grad_norm_: norm_type must be positive or inf, got ", norm_type);
  ClipPlan plan;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    EMBER_CHECK(g.dtype() == DType::f32 || g.dtype() == DType::f64,
                "clip_grad_norm_: gradients must be float32 or float64, got ", describe(g));
    EMBER_CHECK(plan.grads.empty() || g.device() == plan.grads[0].device(), "clip_grad_norm_: gradients on ",
                plan.grads[0].device(), " and on ", g.device(), " (clip each device's parameters on their own)");
    plan.grads.push_back(g);
  }
  if (plan.grads.empty()) return plan;
  const Device device = plan.grads[0].device();
  // PyTorch stacks the per-parameter norms (type promotion: float64 if any gradient is) and takes
  // their norm; the coefficient is then computed in that dtype.
  DType norm_dtype = DType::f32;
  for (const Tensor& g : plan.grads)
    if (g.dtype() == DType::f64) norm_dtype = DType::f64;
  const auto count = static_cast<int64_t>(plan.grads.size());
  Tensor norms = empty({count}, {.dtype = DType::f64, .device = device});
  for (int64_t i = 0; i < count; ++i) {
    // Row-major, as torch.linalg.vector_norm of a channels-last gradient sums it.
    const Tensor c = plan.grads[static_cast<size_t>(i)].contiguous();
    EMBER_KERNEL_CALL(device, "clip_grad_norm_", grad_norm, c.dtype(), c.numel(), c.data(), norm_type,
                      norms.data_ptr<double>() + i);
  }
  plan.total_and_coef = empty({2}, {.dtype = DType::f64, .device = device});
  EMBER_KERNEL_CALL(device, "clip_grad_norm_", clip_coefficient, norms.data_ptr<double>(), count, norm_type, norm_dtype,
                    max_norm, plan.total_and_coef.data_ptr<double>());
  return plan;
}

// Every gradient times the coefficient: one kernel call per dtype for the dense gradients (any
// dense memory format: the kernel walks the storage), an elementwise product for any other.
void scale_by_coefficient(const ClipPlan& plan) {
  const Device device = plan.total_and_coef.device();
  const double* coef = plan.total_and_coef.data_ptr<double>() + 1;
  std::map<DType, std::vector<kernels::UnscaleTensor>> by_dtype;
  for (const Tensor& g : plan.grads) {
    if (g.is_contiguous() || g.is_contiguous(MemoryFormat::channels_last)) {
      by_dtype[g.dtype()].push_back({g.data(), g.numel()});
    } else {
      Tensor target = g;  // the same tensor: its storage, through its strides
      target.mul_(plan.total_and_coef.slice(0, 1, 2).to(g.dtype()));
    }
  }
  for (const auto& [dtype, list] : by_dtype)
    EMBER_KERNEL_CALL(device, "clip_grad_norm_", scale_grads, dtype, list.data(), static_cast<int64_t>(list.size()),
                      coef);
}

}  // namespace

Tensor clip_grad_norm_on_device_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  NoGradGuard no_grad;
  const ClipPlan plan = plan_clip(params, max_norm, norm_type);
  if (plan.grads.empty()) return Tensor();
  scale_by_coefficient(plan);
  return plan.total_and_coef.slice(0, 0, 1);
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  NoGradGuard no_grad;
  for (const Tensor& p : params)
    if (p.grad().defined())
      detail::check_not_capturing(p.grad().device(), "clip_grad_norm_", "returns the gradient norm on the host "
                                  "(clip_grad_norm_on_device_ leaves it on the device)");
  const ClipPlan plan = plan_clip(params, max_norm, norm_type);
  if (plan.grads.empty()) return 0.0;
  if (error_if_nonfinite) {
    const double total = plan.total_and_coef.slice(0, 0, 1).item();
    EMBER_CHECK(std::isfinite(total), "clip_grad_norm_: the total norm of order ", norm_type,
                " of the gradients is non-finite (", total, "), so they cannot be clipped");
  }
  scale_by_coefficient(plan);
  return plan.total_and_coef.slice(0, 0, 1).item();
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
