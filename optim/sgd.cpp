// SGD: argument checks, the momentum buffer's life cycle, and the call into the fused kernel.

#include "sgd.h"

#include "../core/profiler.h"
#include "multi_tensor.h"

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

const std::vector<ParamGroup>& checked(const std::vector<ParamGroup>& groups, const SGDOptions& o) {
  EMBER_CHECK(o.lr >= 0, "SGD: invalid learning rate ", o.lr, " (must be >= 0)");
  EMBER_CHECK(o.momentum >= 0, "SGD: invalid momentum ", o.momentum, " (must be >= 0)");
  EMBER_CHECK(o.weight_decay >= 0, "SGD: invalid weight_decay ", o.weight_decay, " (must be >= 0)");
  EMBER_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
              "SGD: Nesterov momentum requires a momentum and zero dampening (got momentum ", o.momentum,
              ", dampening ", o.dampening, ")");
  return groups;
}

}  // namespace

SGD::SGD(const std::vector<Tensor>& params, const SGDOptions& options)
    : SGD(std::vector<ParamGroup>{ParamGroup{.params = params}}, options) {}

SGD::SGD(const std::vector<ParamGroup>& groups, const SGDOptions& options)
    : Optimizer("SGD", checked(groups, options), options.lr, options.weight_decay), options_(options) {}

std::vector<std::string> SGD::state_tensor_names() const {
  if (options_.momentum != 0) return {"momentum_buffer"};
  return {};
}

kernels::SgdHyper SGD::hyper(const Group& group) const {
  kernels::SgdHyper h;
  h.lr = group.lr;
  h.momentum = options_.momentum;
  h.dampening = options_.dampening;
  h.weight_decay = group.weight_decay;
  h.nesterov = options_.nesterov;
  h.maximize = options_.maximize;
  h.skip = skip_ptr();
  return h;
}

void SGD::step_captured(size_t group, size_t index, Tensor& p, const Tensor& grad) {
#if EMBER_CUDA_BACKEND
  ParamState& s = state_[index];
  Tensor* buf = nullptr;
  if (options_.momentum != 0) {
    EMBER_CHECK(s.tensors.count("momentum_buffer"), "SGD.step: parameter ", index, " has no momentum buffer yet, "
                "and a CUDA graph cannot create it (it must exist before the first replay): run one step eagerly "
                "before capturing");
    buf = &s.tensors.at("momentum_buffer");
  }
  const DType dtype = p.dtype();
  const Tensor coeffs = cuda::replay_input(p.device().index, [&] {
    return empty({static_cast<int64_t>(kernels::gpu::sgd_coeffs_bytes(dtype))}, {.dtype = DType::u8, .device = p.device()});
  });
  const float* skip = skip_ptr();  // the flag of this capture (step_unless_found_inf swaps in its own)
  cuda::before_each_replay([this, group, dtype, coeffs, skip] {
    kernels::SgdHyper h = hyper(groups_[group]);
    h.skip = skip;
    EMBER_CUDA_CALL(coeffs.device(), "SGD.step", kernels::gpu::upload_sgd_coeffs(dtype, h, coeffs.data()));
  });
  const kernels::SgdHyper h = hyper(groups_[group]);  // picks the kernel; the values come from coeffs
  update_in_place(p, [&](Tensor& q) {
    void* b = buf ? buf->data() : nullptr;
    EMBER_CUDA_CALL(q.device(), "SGD.step",
                    kernels::gpu::sgd_step_device_coeffs(q.dtype(), q.numel(), q.data(), grad.data(), b, h,
                                                         coeffs.data()));
  });
  if (buf) buf->bump_version();
#else
  (void)group, (void)index, (void)p, (void)grad;
  EMBER_THROW("SGD.step: no CUDA graphs in a build without a CUDA backend");
#endif
}

#if EMBER_CUDA_BACKEND
namespace {
// A batch's SGD update: the hyperparameters, and whether it initializes the momentum buffers.
struct SgdUpdate {
  kernels::SgdHyper h;
  bool first = false;
};
// Whether two parameters' SGD updates are the same (Note [One launch per optimizer step] in
// optim/multi_tensor.h).
bool same_sgd_update(const SgdUpdate& a, const SgdUpdate& b) {
  return a.first == b.first && a.h.lr == b.h.lr && a.h.momentum == b.h.momentum && a.h.dampening == b.h.dampening &&
         a.h.weight_decay == b.h.weight_decay && a.h.nesterov == b.h.nesterov && a.h.maximize == b.h.maximize &&
         a.h.skip == b.h.skip;
}
}  // namespace
#endif

void SGD::step() {
  NoGradGuard no_grad;
  const bool use_momentum = options_.momentum != 0;
  const auto captured = [this](size_t g, size_t i, Tensor& p, const Tensor& grad) { step_captured(g, i, p, grad); };
#if EMBER_CUDA_BACKEND
  detail::MultiTensorBatches<kernels::gpu::SgdTensor, SgdUpdate> batches(same_sgd_update);
#endif
  for_each_update(
      [&](const Group& group, ParamState& s, Tensor& p, const Tensor& grad) {
        // torch clones d_p into a new buffer on the first step; the kernel writes it in place.
        const bool first = use_momentum && !s.tensors.count("momentum_buffer");
        if (first) s.tensors["momentum_buffer"] = zeros_like_param(p);
        Tensor* buf = use_momentum ? &s.tensors.at("momentum_buffer") : nullptr;

        const kernels::SgdHyper h = hyper(group);
        void* b = buf ? buf->data() : nullptr;
#if EMBER_CUDA_BACKEND
        if (p.device().is_cuda() && p.is_contiguous(update_format(p))) {
          batches.add(p.device(), p.dtype(), SgdUpdate{h, first},
                      kernels::gpu::SgdTensor{p.data(), grad.data(), b, p.numel()}, {grad});
          p.bump_version();
        } else
#endif
          update_in_place(p, [&](Tensor& q) {
            EMBER_KERNEL_CALL(q.device(), "SGD.step", sgd_step, q.dtype(), q.numel(), q.data(), grad.data(), b, first,
                              h);
          });
        if (buf) buf->bump_version();
      },
      captured);
#if EMBER_CUDA_BACKEND
  batches.launch_all([](Device device, DType dtype, const SgdUpdate& u,
                        const std::vector<kernels::gpu::SgdTensor>& tensors) {
    const profiler::Scope scope("SGD.step");
    EMBER_CUDA_CALL(device, "SGD.step",
                    kernels::gpu::sgd_step_multi(dtype, tensors.data(), static_cast<int64_t>(tensors.size()), u.first,
                                                 u.h));
  });
#endif
}

}  // namespace ember::optim
