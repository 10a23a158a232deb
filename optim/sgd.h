#pragma once
// SGD with momentum, dampening, Nesterov momentum and L2 weight decay, matching torch.optim.SGD
// (single-tensor path):
//
//   d_p = -grad if maximize else grad
//   d_p += weight_decay * p                         (if weight_decay != 0)
//   momentum != 0:  buf = d_p                        on the parameter's first step
//                   buf = momentum * buf + (1 - dampening) * d_p   after that
//                   d_p = d_p + momentum * buf if nesterov else buf
//   p += -lr * d_p
//
// One fused pass per parameter (kernels/cpu/optim.cpp). State: tensor momentum_buffer, only
// when momentum != 0. lr defaults to 1e-3 as in PyTorch >= 2.2 (older versions require it).
//
//   optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9, .nesterov = true});

#include <vector>

#include "../kernels/optim.h"
#include "optimizer.h"

namespace ember::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;  // requires momentum > 0 and dampening == 0
  bool maximize = false;
};

class SGD : public Optimizer {
 public:
  explicit SGD(const std::vector<Tensor>& params, const SGDOptions& options = {});
  explicit SGD(const std::vector<ParamGroup>& groups, const SGDOptions& options = {});

  void step() override;
  const SGDOptions& options() const { return options_; }

 protected:
  std::vector<std::string> state_tensor_names() const override;
  std::vector<std::string> state_scalar_names() const override { return {}; }

 private:
  kernels::SgdHyper hyper(const Group& group) const;
  // step() of parameter `index` (group `group`) while a CUDA graph captures: as
  // Adam::step_captured, the scalars come from a device buffer that a before-replay hook fills.
  void step_captured(size_t group, size_t index, Tensor& p, const Tensor& grad);

  SGDOptions options_;
};

}  // namespace ember::optim
