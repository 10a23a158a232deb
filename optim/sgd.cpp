// SGD: argument checks, the momentum buffer's life cycle, and the call into the fused kernel.

#include "sgd.h"

#include "../core/autograd.h"
#include "../core/dispatch.h"
#include "../core/error.h"
#include "../kernels/cpu/optim.h"
#if EMBER_CUDA_BACKEND
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

void SGD::step() {
  NoGradGuard no_grad;
  const bool use_momentum = options_.momentum != 0;
  size_t index = 0;
  for (Group& group : groups_) {
    for (Tensor& p : group.params) {
      ParamState& s = state_[index++];
      const Tensor grad = prepared_grad(p);
      if (!grad.defined()) continue;
      // torch clones d_p into a new buffer on the first step; the kernel writes it in place.
      const bool first = use_momentum && !s.tensors.count("momentum_buffer");
      if (first) s.tensors["momentum_buffer"] = zeros_like_param(p);
      Tensor* buf = use_momentum ? &s.tensors.at("momentum_buffer") : nullptr;

      kernels::SgdHyper h;
      h.lr = group.lr;
      h.momentum = options_.momentum;
      h.dampening = options_.dampening;
      h.weight_decay = group.weight_decay;
      h.nesterov = options_.nesterov;
      h.maximize = options_.maximize;
      update_in_place(p, [&](Tensor& q) {
        void* b = buf ? buf->data() : nullptr;
        EMBER_KERNEL_CALL(q.device(), "SGD.step", sgd_step, q.dtype(), q.numel(), q.data(), grad.data(), b, first, h);
      });
      if (buf) buf->bump_version();
    }
  }
}

}  // namespace ember::optim
