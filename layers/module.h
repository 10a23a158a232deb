#pragma once
// nn::Module: the base of every layer and model.
//
// Note [Modules own tensors, register pointers]
// A module keeps its parameters and buffers as ordinary Tensor members and registers their
// addresses under PyTorch-style names ("weight", "running_mean"); children register the same way
// ("conv1", "layer1.0.bn1" when nested). Because the registry holds addresses, a Module can be
// neither copied nor moved: build models in place (members, or std::make_shared for Sequential).
// to(device) and load_state_dict() reassign or overwrite the registered tensors, so a model's
// member tensors always are its parameters.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../core/tensor.h"

namespace ember::nn {

// Ordered (name, tensor) pairs: parameters then buffers, in registration order, depth first —
// the order PyTorch's state_dict() uses.
using StateDict = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The computation. Modules with one input override this; the default throws.
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  // ---- registration ----
  // `t` must outlive the module (it is normally a member). Parameters get requires_grad.
  Tensor& register_parameter(const std::string& name, Tensor& t, bool requires_grad = true);
  Tensor& register_buffer(const std::string& name, Tensor& t);
  // A child that is a member (not owned) or owned through a shared_ptr (Sequential, ModuleList).
  Module& register_module(const std::string& name, Module& child);
  Module& register_module(const std::string& name, std::shared_ptr<Module> child);

  // ---- traversal ----
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Module*>> named_children() const;
  // Every module in the tree with its dotted name ("" for this one), depth first.
  std::vector<std::pair<std::string, Module*>> named_modules();
  int64_t num_parameters(bool trainable_only = false) const;

  // ---- modes and placement ----
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves/casts every parameter and buffer (floating-point ones only for dtype). Parameters stay
  // leaves that require grad; gradients are dropped.
  void to(Device device);
  void to(DType dtype);
  // Copies every 4-D floating-point parameter and buffer into `format` (contiguous or
  // channels_last), as PyTorch's module.to(memory_format=...): the same values, new tensors (so
  // call it before an optimizer takes the parameters). Others are left as they are.
  void to(MemoryFormat format);
  void zero_grad();

  // ---- state ----
  StateDict state_dict() const;
  // Strict: every key must match a parameter or buffer with the same shape and dtype, and every
  // parameter/buffer must be present. Errors name the missing, unexpected and mismatched keys.
  void load_state_dict(const StateDict& state, bool strict = true);

  // One line per module, like printing a PyTorch model.
  std::string str() const;
  // A short description of this module's configuration, e.g. "3, 32, kernel_size=(3, 3)".
  virtual std::string extra_repr() const { return ""; }
  virtual std::string type_name() const { return "Module"; }

 protected:
  bool training_ = true;

 private:
  struct Slot {
    std::string name;
    Tensor* tensor;
  };
  std::vector<Slot> params_, buffers_;
  std::vector<std::pair<std::string, Module*>> children_;
  std::vector<std::shared_ptr<Module>> owned_;
  void collect(const std::string& prefix, bool params, bool buffers,
               std::vector<std::pair<std::string, Tensor*>>& out) const;
  void str_into(std::ostringstream& os, const std::string& name, int indent) const;
};

std::ostream& operator<<(std::ostream& os, const Module& m);

}  // namespace ember::nn
