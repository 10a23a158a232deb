// Adam and AdamW: argument checks, state creation, and the call into the fused kernel.

#include "adam.h"

#include "../core/autograd.h"
#include "../core/dispatch.h"
#include "../core/error.h"
#include "../core/profiler.h"
#include "../kernels/cpu/optim.h"
#include "multi_tensor.h"
#if EMBER_CUDA_BACKEND
#include "../core/cuda/graph.h"
#include "../kernels/cuda/optim.h"
#endif

namespace ember::optim {

namespace {

void check_adam_options(const char* name, const AdamOptions& o) {
  EMBER_CHECK(o.lr >= 0, name, ": invalid learning rate ", o.lr, " (must be >= 0)");
  EMBER_CHECK(o.eps >= 0, name, ": invalid epsilon ", o.eps, " (must be >= 0)");
  EMBER_CHECK(o.betas.first >= 0 && o.betas.first < 1, name, ": invalid beta parameter at index 0: ",
              o.betas.first, " (must be in [0, 1))");
  EMBER_CHECK(o.betas.second >= 0 && o.betas.second < 1, name, ": invalid beta parameter at index 1: ",
              o.betas.second, " (must be in [0, 1))");
  EMBER_CHECK(o.weight_decay >= 0, name, ": invalid weight_decay ", o.weight_decay, " (must be >= 0)");
}

// Checks before the base constructor runs, so that option errors are reported first.
const std::vector<ParamGroup>& checked(const char* name, const std::vector<ParamGroup>& groups, const AdamOptions& o) {
  check_adam_options(name, o);
  return groups;
}

AdamOptions from_adamw(const AdamWOptions& o) {
  return {.lr = o.lr, .betas = o.betas, .eps = o.eps, .weight_decay = o.weight_decay, .amsgrad = o.amsgrad,
          .maximize = o.maximize};
}

}  // namespace

Adam::Adam(const std::vector<Tensor>& params, const AdamOptions& options)
    : Adam("Adam", {ParamGroup{.params = params}}, options, kernels::WeightDecayMode::L2) {}

Adam::Adam(const std::vector<ParamGroup>& groups, const AdamOptions& options)
    : Adam("Adam", groups, options, kernels::WeightDecayMode::L2) {}

Adam::Adam(std::string name, const std::vector<ParamGroup>& groups, const AdamOptions& options,
           kernels::WeightDecayMode decay)
    : Optimizer(name, checked(name.c_str(), groups, options), options.lr, options.weight_decay),
      options_(options),
      decoupled_(decay == kernels::WeightDecayMode::Decoupled) {}

AdamW::AdamW(const std::vector<Tensor>& params, const AdamWOptions& options)
    : Adam("AdamW", {ParamGroup{.params = params}}, from_adamw(options), kernels::WeightDecayMode::Decoupled) {}

AdamW::AdamW(const std::vector<ParamGroup>& groups, const AdamWOptions& options)
    : Adam("AdamW", groups, from_adamw(options), kernels::WeightDecayMode::Decoupled) {}

std::vector<std::string> Adam::state_tensor_names() const {
  if (options_.amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

kernels::AdamHyper Adam::hyper(const Group& group, double step) const {
  kernels::AdamHyper h;
  h.lr = group.lr;
  h.beta1 = options_.betas.first;
  h.beta2 = options_.betas.second;
  h.eps = options_.eps;
  h.weight_decay = group.weight_decay;
  h.step = static_cast<int64_t>(step);
  h.amsgrad = options_.amsgrad;
  h.maximize = options_.maximize;
  h.skip = skip_ptr();
  // Adam adds the L2 term only when weight_decay != 0 (torch skips the add: 0 * inf = NaN);
  // AdamW always multiplies by 1 - lr * weight_decay.
  h.decay = decoupled_ ? kernels::WeightDecayMode::Decoupled
                       : (group.weight_decay != 0 ? kernels::WeightDecayMode::L2 : kernels::WeightDecayMode::None);
  return h;
}

void Adam::step_captured(size_t group, size_t index, Tensor& p, const Tensor& grad) {
#if EMBER_CUDA_BACKEND
  ParamState& s = state_[index];
  EMBER_CHECK(!s.empty(), name(), ".step: parameter ", index, " has no state yet, and a CUDA graph cannot create "
              "it (it must exist before the first replay): run one step eagerly before capturing");
  const DType dtype = p.dtype();
  const Device device = p.device();
  const float* skip = skip_ptr();  // the flag of this capture, kept for every replay
  // Buffers the before-replay hook writes: outside the graph's memory (Note [CUDA graphs in ember]).
  const auto hook_buffer = [&](size_t bytes) {
    return cuda::replay_input(device.index, [&] {
      return empty({static_cast<int64_t>(bytes)}, {.dtype = DType::u8, .device = device});
    });
  };
  // Each replay advances the host's count and takes the group's lr as it is then.
  const auto next_hyper = [this, group, index, skip] {
    double& step = state_[index].scalars.at("step");
    step += 1;
    kernels::AdamHyper h = hyper(groups_[group], step);
    h.skip = skip;
    return h;
  };
  Tensor coeffs;
  if (const double* skipped = device_skips_ptr()) {
    // Loss scaling: the coefficients are computed in the graph from the host's count less the
    // steps cancelled on the device (Note [Steps cancelled on the device] in optimizer.h).
    count_device_skips(index);
    const Tensor hyper_buffer = hook_buffer(sizeof(kernels::AdamHyper));
    cuda::before_each_replay([next_hyper, hyper_buffer] {
      EMBER_CUDA_CALL(hyper_buffer.device(), "Adam.step", kernels::gpu::upload_adam_hyper(next_hyper(), hyper_buffer.data()));
    });
    coeffs = empty({static_cast<int64_t>(kernels::gpu::adam_coeffs_bytes(dtype))}, {.dtype = DType::u8, .device = device});
    EMBER_CUDA_CALL(device, "Adam.step",
                    kernels::gpu::adam_coeffs_on_device(dtype, hyper_buffer.data(), skipped, coeffs.data()));
  } else {
    coeffs = hook_buffer(kernels::gpu::adam_coeffs_bytes(dtype));
    cuda::before_each_replay([next_hyper, dtype, coeffs] {
      EMBER_CUDA_CALL(coeffs.device(), "Adam.step", kernels::gpu::upload_adam_coeffs(dtype, next_hyper(), coeffs.data()));
    });
  }
  const kernels::AdamHyper h = hyper(groups_[group], 1);  // picks the kernel; the values come from coeffs
  Tensor& m = s.tensors.at("exp_avg");
  Tensor& v = s.tensors.at("exp_avg_sq");
  Tensor* vmax = options_.amsgrad ? &s.tensors.at("max_exp_avg_sq") : nullptr;
  update_in_place(p, [&](Tensor& q) {
    void* vm = vmax ? vmax->data() : nullptr;
    EMBER_CUDA_CALL(q.device(), "Adam.step",
                    kernels::gpu::adam_step_device_coeffs(q.dtype(), q.numel(), q.data(), grad.data(), m.data(),
                                                          v.data(), vm, h, coeffs.data()));
  });
  m.bump_version();
  v.bump_version();
  if (vmax) vmax->bump_version();
#else
  (void)group, (void)index, (void)p, (void)grad;
  EMBER_THROW(name(), ".step: no CUDA graphs in a build without a CUDA backend");
#endif
}

#if EMBER_CUDA_BACKEND
namespace {
// Whether two parameters' Adam updates use the same coefficients (Note [One launch per optimizer step]).
bool same_adam_update(const kernels::AdamHyper& a, const kernels::AdamHyper& b) {
  return a.lr == b.lr && a.beta1 == b.beta1 && a.beta2 == b.beta2 && a.eps == b.eps &&
         a.weight_decay == b.weight_decay && a.step == b.step && a.decay == b.decay && a.amsgrad == b.amsgrad &&
         a.maximize == b.maximize && a.skip == b.skip;
}
}  // namespace
#endif

void Adam::step() {
  NoGradGuard no_grad;
  fold_device_skips();  // after replays with loss scaling: continue from the true counts
  const auto captured = [this](size_t g, size_t i, Tensor& p, const Tensor& grad) { step_captured(g, i, p, grad); };
#if EMBER_CUDA_BACKEND
  detail::MultiTensorBatches<kernels::gpu::AdamTensor, kernels::AdamHyper> batches(same_adam_update);
#endif
  for_each_update(
      [&](const Group& group, ParamState& s, Tensor& p, const Tensor& grad) {
        if (s.empty()) {
          s.scalars["step"] = 0;
          s.tensors["exp_avg"] = zeros_like_param(p);
          s.tensors["exp_avg_sq"] = zeros_like_param(p);
          if (options_.amsgrad) s.tensors["max_exp_avg_sq"] = zeros_like_param(p);
        }
        double& step = s.scalars.at("step");
        step += 1;
        const kernels::AdamHyper h = hyper(group, step);

        Tensor& m = s.tensors.at("exp_avg");
        Tensor& v = s.tensors.at("exp_avg_sq");
        Tensor* vmax = options_.amsgrad ? &s.tensors.at("max_exp_avg_sq") : nullptr;
        void* vm = vmax ? vmax->data() : nullptr;
#if EMBER_CUDA_BACKEND
        if (p.device().is_cuda() && p.is_contiguous(update_format(p))) {
          batches.add(p.device(), p.dtype(), h,
                      kernels::gpu::AdamTensor{p.data(), grad.data(), m.data(), v.data(), vm, p.numel()}, {grad});
          p.bump_version();
        } else
#endif
          update_in_place(p, [&](Tensor& q) {
            EMBER_KERNEL_CALL(q.device(), "Adam.step", adam_step, q.dtype(), q.numel(), q.data(), grad.data(),
                              m.data(), v.data(), vm, h);
          });
        m.bump_version();
        v.bump_version();
        if (vmax) vmax->bump_version();
      },
      captured);
#if EMBER_CUDA_BACKEND
  batches.launch_all([](Device device, DType dtype, const kernels::AdamHyper& h,
                        const std::vector<kernels::gpu::AdamTensor>& tensors) {
    const profiler::Scope scope("Adam.step");
    EMBER_CUDA_CALL(device, "Adam.step",
                    kernels::gpu::adam_step_multi(dtype, tensors.data(), static_cast<int64_t>(tensors.size()), h));
  });
#endif
}

}  // namespace ember::optim
