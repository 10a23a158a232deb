#pragma once
// The autograd tape.
//
// Note [The tape]
// Every differentiable op that sees an input with requires_grad records a Node: the op's name,
// one edge per input (to the input's own grad_fn, or to the AccumulateGrad node of a leaf), and
// a backward closure that maps the gradients of the op's outputs to the gradients of its inputs.
// The outputs point back at the node (TensorImpl::autograd->grad_fn), so the graph is owned by
// the tensors that can still reach it and dies with them.
//
// backward() (run_backward in autograd.cpp) walks the graph from the root: it counts, for every node, how many
// edges lead into it, then runs nodes in an order where a node runs only after every node that
// feeds it a gradient has run (reverse topological order), summing gradients that arrive along
// several edges. AccumulateGrad nodes add into the leaf's .grad and fire its hooks.
// Without retain_graph, each node's closure and saved tensors are released once it ran; a second
// backward through it is an error, as in PyTorch.
//
// Saved tensors remember the storage version at save time (SavedTensor); if an in-place op
// changed the tensor before backward used it, backward throws instead of computing a wrong
// gradient.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensor.h"

namespace ember {

// Grad mode: when false (inside NoGradGuard), ops record nothing.
bool grad_mode_enabled();
void set_grad_mode(bool enabled);

class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_mode_enabled()) { set_grad_mode(false); }
  ~NoGradGuard() { set_grad_mode(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(grad_mode_enabled()) { set_grad_mode(true); }
  ~EnableGradGuard() { set_grad_mode(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

// A tensor kept for backward, with the version it had when saved.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, const char* op);
  // Returns the tensor; throws if it was modified in place since it was saved.
  const Tensor& get() const;
  bool defined() const { return tensor_.defined(); }

 private:
  Tensor tensor_;
  uint64_t version_ = 0;
  const char* op_ = "";
};

struct Edge {
  std::shared_ptr<Node> fn;  // null: this input needs no gradient
  int input_nr = 0;          // which output of `fn` the gradient belongs to
};

using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;

struct Node {
  std::string name;              // "MulBackward", "AccumulateGrad", ...
  std::vector<Edge> next;        // one per input of the forward op
  int num_outputs = 1;
  BackwardFn backward;           // empty once released
  bool released = false;
  uint64_t sequence_nr = 0;      // creation order; later nodes run first among ready ones
  // Hooks on the gradient of output i (Tensor::register_hook, retain_grad on non-leaves).
  std::vector<std::vector<std::function<Tensor(const Tensor&)>>> output_hooks;
  // AccumulateGrad only: the leaf it accumulates into.
  std::weak_ptr<TensorImpl> leaf;

  bool is_accumulate_grad() const { return !leaf.expired() || name == "AccumulateGrad"; }
  void release() {
    backward = nullptr;
    released = true;
  }
};

// True when grad mode is on and any input requires grad.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Records a node for an op with the given inputs and outputs: sets requires_grad and grad_fn on
// each output. Call only when any_requires_grad(inputs). The closure receives one gradient per
// output (an undefined Tensor for an output that got none: treat it as zeros) and returns one
// gradient per input (undefined for inputs that need none); each returned gradient must have
// its input's shape.
void record(const char* name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            BackwardFn backward);

// The node that receives gradients for tensor `t` (its grad_fn, or its leaf accumulator);
// null when t does not require grad.
Edge gradient_edge(const Tensor& t);

// Runs `callback` once the backward pass running on this thread has finished (after every node
// ran, before backward() returns), like PyTorch's Engine::queue_callback. DistributedDataParallel
// uses it to wait for its last gradient all-reduce. Callbacks run in the order queued and may
// queue more; an exception from one propagates out of backward() and drops the rest. Throws
// ember::Error when no backward pass is running on this thread.
void queue_backward_callback(std::function<void()> callback);
// Whether a backward pass is running on this thread (inside a hook or a backward closure).
bool in_backward();

// Runs backward from `roots` with the given gradients (autograd.cpp).
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph);

// The gradients of `outputs` w.r.t. `inputs` (like torch.autograd.grad, without create_graph):
// nothing is accumulated into .grad. Inputs that are not reached get an undefined Tensor.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false);

}  // namespace ember
