#pragma once
// optim::Optimizer: the base of Adam, AdamW and SGD — parameter groups, zero_grad, per-parameter
// state and its save/load, after torch.optim.Optimizer.
//
// Note [Optimizer parameters and state]
// An optimizer holds Tensor handles to the parameters (Note [Tensor = handle]): step() updates
// the very tensors a Module owns, in place, under NoGradGuard. Parameters are split into groups;
// each group has its own lr and weight_decay (the options give the defaults), which schedulers
// read and write through get_lr/set_lr. A parameter whose .grad is undefined at step() is
// skipped and its state is left alone, as in PyTorch.
//
// Per-parameter state (Adam's exp_avg, SGD's momentum_buffer, ...) is created on a parameter's
// first step. Parameters are numbered 0..N-1 across the groups in order, and the saved state
// uses PyTorch's state_dict layout flattened to names:
//   tensors  "state.<i>.<name>"          e.g. "state.0.exp_avg", "state.3.momentum_buffer"
//   scalars  "state.<i>.<name>"          e.g. "state.0.step"
//            "param_groups.<g>.lr", ".weight_decay", ".num_params", ".initial_lr" (if set)
// load_state_dict() checks everything (group count and sizes, parameter indices, state names,
// shapes) before it changes anything, and throws ember::Error naming the first mismatch.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "../core/tensor.h"

namespace ember::optim {

// A group of parameters with optional overrides of the optimizer's lr and weight_decay:
//   optim::SGD opt({{.params = backbone, .lr = 1e-4}, {.params = head}}, {.lr = 1e-2});
struct ParamGroup {
  std::vector<Tensor> params{};
  std::optional<double> lr = std::nullopt;
  std::optional<double> weight_decay = std::nullopt;
};

// An optimizer's saved state (see the Note for the names). Tensors are copies, not views of the
// live state, so a saved state does not change as training goes on.
struct OptimizerState {
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, double> scalars;
};

// Note [Steps cancelled on the device]
// With float16 loss scaling, a step whose scaled gradients overflowed is skipped: no parameter or
// state changes, and Adam's step count stays where it was (PyTorch's GradScaler does not call
// optimizer.step(); its capturable Adam increments state_steps and subtracts found_inf on the
// device). Eagerly GradScaler::step reads the overflow flag on the host and calls step() or not.
// A step captured in a CUDA graph cannot read it: GradScaler::step calls step_unless_found_inf,
// which records, inside the graph, (1) the flag the update kernels read, the maximum of the skip
// flag (the divergence guard's) and found_inf, and (2) a device count of the steps found_inf
// cancelled, `skipped_steps_` += (found_inf != 0). The host still advances Adam's step count at
// every replay (the before_each_replay hook of step_captured), and the captured Adam kernels get
// their coefficients from a one-thread kernel that evaluates make_adam_coeffs with the host's
// count less the device's (kernels/cuda/optim.h, adam_coeffs_on_device): a cancelled step's
// coefficients are never used, and the next one sees the true count. The host count is made true
// again when the state is read — state_dict() (so a checkpoint holds the true count) and the
// first eager step after replays (the epoch's last, partial batch) subtract the device count,
// which costs one host read only after replays with loss scaling.
//
// make_adam_coeffs computes the bias corrections 1 - beta^t with pow in double. On the emulator
// the device code is the host's code, so a replayed run's weights, moments and step counts equal
// the eager run's bit for bit (tests/cli/train_cuda_graphs.sh, tests/cuda/test_graph_step.cpp).
// On a GPU, CUDA's double pow is accurate to 2 units in the last place, where glibc's is correctly
// rounded in practice: a bias correction 1 - beta^t may differ from the host's in its last bits.
// The coefficients the kernels use are rounded to float32 (29 bits fewer), so they change only
// when that double lies within a few units of a float32 rounding boundary — a chance of the order
// of 2^-26 per coefficient and step — and then by one float32 unit: a relative change of 6e-8 in
// one step's size, far below the rounding the float16 forward and backward passes carry, so the
// run trains the same; only bit-for-bit equality with the eager run is lost, from that step on.
// Steps without loss scaling keep the host's coefficients (upload_adam_coeffs), bit for bit on any
// device.
class Optimizer {
 public:
  // A group as the optimizer holds it: overrides resolved against the defaults.
  struct Group {
    std::vector<Tensor> params;
    double lr = 0;
    double weight_decay = 0;
    // The lr a scheduler started from (PyTorch's group['initial_lr']); set by the first
    // scheduler attached to this optimizer, kept by the ones after it.
    std::optional<double> initial_lr;
  };

  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient. Runs under NoGradGuard.
  virtual void step() = 0;
  // Sets every parameter's gradient to undefined (PyTorch's zero_grad(set_to_none=True)): the
  // next backward writes fresh gradients instead of adding to old ones.
  void zero_grad();

  // Adds a group, e.g. for layers unfrozen during fine-tuning. Same checks as the constructor.
  void add_param_group(const ParamGroup& group);

  size_t num_param_groups() const { return groups_.size(); }
  const Group& param_group(size_t g) const;
  // All parameters, in the order the state numbers them.
  std::vector<Tensor> parameters() const;
  size_t num_parameters() const;

  double get_lr(size_t group) const { return param_group(group).lr; }
  void set_lr(size_t group, double lr);
  double get_weight_decay(size_t group) const { return param_group(group).weight_decay; }
  void set_weight_decay(size_t group, double weight_decay);
  std::optional<double> get_initial_lr(size_t group) const { return param_group(group).initial_lr; }
  void set_initial_lr(size_t group, double lr);

  // A device flag that cancels steps without a host read (torch's found_inf of its fused
  // optimizers; AdamHyper::skip in kernels/optim.h): while it holds a nonzero value when a step's
  // kernels run, they change no parameter and no state tensor. float32, one element, on the
  // parameters' device; an undefined tensor removes it. The host's own counts still advance (Adam's
  // step count, SGD's first-step flag): a cancelled step is for a run that stops after it
  // (Note [Divergence guard] in train/step_guard.h), not for one that goes on.
  void set_skip_flag(Tensor flag);
  const Tensor& skip_flag() const { return skip_flag_; }

  // step() for a step being captured into a CUDA graph, cancelled on the device when `found_inf`
  // (GradScaler's flag: float32, one element, on the parameters' device) is nonzero at replay,
  // or when the skip flag is; a step cancelled by found_inf also leaves Adam's step count as it
  // was, as torch's capturable Adam does (Note [Steps cancelled on the device]). Only while the
  // parameters' device captures (ember::Error otherwise): an eager step reads the flag instead, as
  // GradScaler::step does, and calls step() or not.
  void step_unless_found_inf(const Tensor& found_inf);

  // "Adam", "AdamW", "SGD": used in error messages.
  const std::string& name() const { return name_; }

  // A copy of the state (see Note [Optimizer parameters and state]).
  OptimizerState state_dict() const;
  // Replaces the group hyperparameters and the per-parameter state with `state`, which must come
  // from an optimizer of the same kind and configuration over parameters of the same shapes.
  // Tensors are copied and converted to each parameter's dtype and device.
  void load_state_dict(const OptimizerState& state);

 protected:
  // State of one parameter; empty until its first step.
  struct ParamState {
    std::map<std::string, Tensor> tensors;
    std::map<std::string, double> scalars;
    bool empty() const { return tensors.empty() && scalars.empty(); }
  };

  // Checks and resolves the groups. Throws for an empty parameter list, a parameter in two
  // groups, a non-leaf or non-floating parameter, or a negative lr / weight_decay.
  Optimizer(std::string name, const std::vector<ParamGroup>& groups, double default_lr,
            double default_weight_decay);

  // The names of the tensors and scalars a stepped parameter's state holds (load checks them).
  virtual std::vector<std::string> state_tensor_names() const = 0;
  virtual std::vector<std::string> state_scalar_names() const = 0;

  // Note [Updates in the parameter's layout]
  // The update kernels walk a parameter, its gradient and its state as flat arrays of numel()
  // elements, so all of them must lie in one memory order: update_format(p). That is the
  // parameter's own order when it is dense in it (row-major, or channels-last for a channels-last
  // convolution weight), and then a step copies nothing: the kernel updates the parameter in place,
  // its gradient arrives in that format (Note [A leaf's gradient] in core/autograd.cpp) and the
  // state is created (or loaded from a checkpoint) in it; a tensor's strides never change, so the
  // three stay in one order. A parameter that is not dense (a view) is updated through a row-major
  // copy that is written back.
  static MemoryFormat update_format(const Tensor& p);
  // The gradient of `p` ready for a kernel (p's dtype, dense in update_format(p)), or undefined
  // when p has none.
  Tensor prepared_grad(const Tensor& p) const;
  // Runs `update(q)` on a tensor q holding p's values densely in update_format(p) — p itself when
  // it is dense in that format, else a row-major copy written back to p; bumps p's version (saved
  // tensors notice).
  template <typename F>
  void update_in_place(Tensor& p, const F& update) const {
    if (p.is_contiguous(update_format(p))) {
      update(p);
    } else {
      Tensor q = p.contiguous();
      update(q);
      p.copy_(q);
    }
    p.bump_version();
  }
  // One step's walk over the parameters, in group order: for each one that has a gradient
  // (prepared_grad; the others are skipped, as in PyTorch), eager(its group, its state, p, grad),
  // or captured(group index, parameter index, p, grad) when p's device is capturing a CUDA graph.
  using EagerUpdate = std::function<void(const Group& group, ParamState& state, Tensor& p, const Tensor& grad)>;
  using CapturedUpdate = std::function<void(size_t group, size_t index, Tensor& p, const Tensor& grad)>;
  void for_each_update(const EagerUpdate& eager, const CapturedUpdate& captured);
  // A zero-filled tensor like `p`, dense in update_format(p) (for new state).
  static Tensor zeros_like_param(const Tensor& p);
  // The skip flag's address for AdamHyper::skip / SgdHyper::skip (null without one). A captured
  // step takes it at capture: step_unless_found_inf swaps in a flag of its own for the capture.
  const float* skip_ptr() const { return skip_flag_.defined() ? skip_flag_.data_ptr<float>() : nullptr; }

  // Inside step_unless_found_inf: the device's count of steps it cancelled (float64, one element),
  // which a captured step subtracts from its step count on the device; null otherwise.
  const double* device_skips_ptr() const { return counting_skips_ ? skipped_steps_.data_ptr<double>() : nullptr; }
  // Parameter `index`'s scalar "step" counts every replay of a step captured with
  // device_skips_ptr(): the device's count is subtracted from it when the state is read.
  void count_device_skips(size_t index) { counted_.insert(index); }
  // Subtracts the device's count of cancelled steps from the counted "step" scalars and zeroes it
  // (one host read, when there is a count; nothing while a graph captures). Eager steps call it
  // first, so that they continue from the true count.
  void fold_device_skips();

  std::vector<Group> groups_;
  std::vector<ParamState> state_;  // by parameter index
  double default_lr_;
  double default_weight_decay_;

 private:
  // The device's count of steps cancelled since the last fold (steps not taken), or 0.
  double device_skips() const;

  std::string name_;
  Tensor skip_flag_;
  Tensor skipped_steps_;         // float64 (1,) on the device: step_unless_found_inf's count
  bool counting_skips_ = false;  // inside step_unless_found_inf
  std::set<size_t> counted_;     // parameters whose "step" scalar the count applies to
};

}  // namespace ember::optim
