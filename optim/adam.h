#pragma once
// Adam and AdamW, matching torch.optim.Adam / torch.optim.AdamW (single-tensor path, PyTorch >= 2.1):
//
//   t += 1
//   g = -grad if maximize else grad
//   AdamW: p *= 1 - lr * weight_decay            Adam: g += weight_decay * p  (if weight_decay != 0)
//   m = lerp(m, g, 1 - beta1)                    (m = beta1 m + (1 - beta1) g)
//   v = beta2 v + (1 - beta2) g^2
//   amsgrad: vmax = max(vmax, v), and vmax replaces v below
//   p += -lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//
// The update is one fused pass per parameter (kernels/cpu/optim.cpp) that rounds exactly like
// the op-by-op PyTorch code (Note [Matching torch.optim bit for bit] in kernels/optim.h).
// State per parameter: tensors exp_avg, exp_avg_sq (and max_exp_avg_sq with amsgrad), scalar step.
//
//   optim::Adam opt(model.parameters(), {.lr = 1e-3});
//   optim::AdamW opt(model.parameters(), {.lr = 1e-3, .betas = {0.9, 0.95}, .weight_decay = 0.1});

#include <utility>
#include <vector>

#include "../kernels/optim.h"
#include "optimizer.h"

namespace ember::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas{0.9, 0.999};  // each in [0, 1)
  double eps = 1e-8;
  double weight_decay = 0;  // L2: added to the gradient
  bool amsgrad = false;
  bool maximize = false;
};

// AdamW's defaults differ from Adam's only in weight_decay (decoupled: shrinks the parameter).
struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  bool maximize = false;
};

class Adam : public Optimizer {
 public:
  explicit Adam(const std::vector<Tensor>& params, const AdamOptions& options = {});
  explicit Adam(const std::vector<ParamGroup>& groups, const AdamOptions& options = {});

  void step() override;
  // The optimizer-wide options (lr and weight_decay here are the defaults; groups may override).
  const AdamOptions& options() const { return options_; }

 protected:
  Adam(std::string name, const std::vector<ParamGroup>& groups, const AdamOptions& options,
       kernels::WeightDecayMode decay);

  std::vector<std::string> state_tensor_names() const override;
  std::vector<std::string> state_scalar_names() const override { return {"step"}; }

 private:
  // The hyperparameters of one parameter's update at step count `step` in group `group`.
  kernels::AdamHyper hyper(const Group& group, double step) const;
  // step() of parameter `index` (group `group`) while a CUDA graph captures (Note [CUDA graphs in
  // ember] in core/cuda/graph.h): the kernel reads its scalars from a device buffer that a
  // before-replay hook fills, and the hook advances the step count. Inside step_unless_found_inf
  // the hook uploads the hyperparameters and a kernel in the graph computes the scalars with the
  // steps cancelled on the device left out (Note [Steps cancelled on the device] in optimizer.h).
  void step_captured(size_t group, size_t index, Tensor& p, const Tensor& grad);

  AdamOptions options_;
  bool decoupled_;  // AdamW
};

class AdamW : public Adam {
 public:
  explicit AdamW(const std::vector<Tensor>& params, const AdamWOptions& options = {});
  explicit AdamW(const std::vector<ParamGroup>& groups, const AdamWOptions& options = {});
};

}  // namespace ember::optim
