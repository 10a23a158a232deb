// The autograd tape: recording nodes and running backward. See Note [The tape] in autograd.h.

#include "autograd.h"

#include <algorithm>
#include <atomic>
#include <queue>
#include <unordered_map>

#include "../layers/elementwise.h"
#include "../layers/reduce.h"
#include "autocast.h"
#include "profiler.h"

namespace ember {

namespace {
thread_local bool t_grad_mode = true;
std::atomic<uint64_t> g_sequence{0};
// Nesting depth of execute() on this thread, and the callbacks to run when the outermost ends.
thread_local int t_backward_depth = 0;
thread_local std::vector<std::function<void()>> t_backward_callbacks;
}  // namespace

bool grad_mode_enabled() { return t_grad_mode; }

void queue_backward_callback(std::function<void()> callback) {
  EMBER_CHECK(t_backward_depth > 0, "queue_backward_callback: no backward pass is running on this thread");
  t_backward_callbacks.push_back(std::move(callback));
}

bool in_backward() { return t_backward_depth > 0; }
void set_grad_mode(bool enabled) { t_grad_mode = enabled; }

SavedTensor::SavedTensor(const Tensor& t, const char* op) : tensor_(t), op_(op) {
  if (t.defined()) version_ = t.version();
}

const Tensor& SavedTensor::get() const {
  if (tensor_.defined() && tensor_.version() != version_) {
    EMBER_THROW(op_, ": a tensor of shape ", tensor_.shape(), " saved for the backward pass was modified by an "
                "in-place operation (its version is ", tensor_.version(), ", expected ", version_,
                "); clone it before modifying it in place");
  }
  return tensor_;
}

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!t_grad_mode) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!t_grad_mode) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  AutogradMeta& m = t.impl().meta();
  if (m.grad_fn) return {m.grad_fn, m.output_nr};
  // A leaf: its AccumulateGrad node is created once and cached weakly, so the graph (not the
  // leaf) owns it and it dies with the graph.
  std::shared_ptr<Node> acc = m.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<Node>();
    acc->name = "AccumulateGrad";
    acc->leaf = t.impl_ptr();
    acc->output_hooks.resize(1);
    acc->sequence_nr = g_sequence.fetch_add(1);
    m.grad_accumulator = acc;
  }
  return {acc, 0};
}

void record(const char* name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            BackwardFn backward) {
  auto node = std::make_shared<Node>();
  node->name = name;
  node->num_outputs = static_cast<int>(outputs.size());
  node->output_hooks.resize(outputs.size());
  node->next.reserve(inputs.size());
  for (const Tensor& in : inputs) node->next.push_back(gradient_edge(in));
  node->backward = std::move(backward);
  node->sequence_nr = g_sequence.fetch_add(1);
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined()) continue;
    AutogradMeta& m = outputs[i].impl().meta();
    m.requires_grad = true;
    m.grad_fn = node;
    m.output_nr = static_cast<int>(i);
  }
}

namespace {

// Adds b into the slot a (a may be undefined).
void accumulate(Tensor& a, const Tensor& b) {
  if (!b.defined()) return;
  a = a.defined() ? add(a, b) : b;
}

struct NodeGrads {
  std::vector<Tensor> grads;
};

// Calls the output hooks of `node` on its incoming gradients.
void run_output_hooks(Node& node, std::vector<Tensor>& grads) {
  for (size_t i = 0; i < node.output_hooks.size() && i < grads.size(); ++i) {
    for (auto& hook : node.output_hooks[i]) {
      if (!grads[i].defined()) continue;
      Tensor r = hook(grads[i]);
      if (r.defined()) grads[i] = r;
    }
  }
}

// Note [A leaf's gradient]
// The first gradient a leaf receives in a pass becomes its .grad, in the leaf's dtype and memory
// format: a channels-last weight gets a channels-last gradient (PyTorch's AccumulateGrad lays
// gradients out as their parameters are), so that an optimizer reads parameter, gradient and state
// as flat arrays in one order, without a copy (Note [Updates in the parameter's layout] in
// optim/optimizer.h). The incoming tensor is adopted as it is when nothing else can see it: this
// is its only handle, no view shares its storage, and it fills that storage densely in the right
// format, as a backward kernel's fresh output (or the cast of one under autocast) does. Otherwise
// the leaf gets a copy of its own, so that a later in-place accumulation never writes into a
// tensor that a backward closure also handed elsewhere (AddBackward's one gradient for two inputs).
Tensor leaf_gradient(const Tensor& leaf, Tensor g) {
  const MemoryFormat format = leaf.suggest_memory_format();
  if (g.dtype() != leaf.dtype()) g = g.to(leaf.dtype());
  const bool adoptable = g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && !g.requires_grad() &&
                         g.is_contiguous(format) && g.offset() == 0 &&
                         g.storage()->nbytes() == static_cast<size_t>(g.nbytes());
  if (adoptable) return g;
  Tensor owned = empty(leaf.shape(), {.dtype = leaf.dtype(), .device = g.device()}, format);
  owned.copy_(g);
  return owned;
}

// Accumulates a gradient into a leaf and fires its hooks.
void accumulate_into_leaf(Node& acc, Tensor g) {
  std::shared_ptr<TensorImpl> leaf_impl = acc.leaf.lock();
  if (!leaf_impl || !g.defined()) return;
  Tensor leaf(leaf_impl);
  AutogradMeta& m = leaf_impl->meta();
  for (auto& hook : m.hooks) {
    Tensor r = hook(g);
    if (r.defined()) g = r;
  }
  if (m.grad) {
    Tensor(m.grad).add_(g);
  } else {
    m.grad = leaf_gradient(leaf, std::move(g)).impl_ptr();  // Note [A leaf's gradient]
  }
  for (auto& hook : m.post_accumulate_hooks) hook(leaf);
}

}  // namespace

// The engine. `capture` (for grad()) maps the edges of the requested inputs to result slots;
// when it is non-null nothing is accumulated into leaves.
static void execute(const std::vector<Tensor>& roots, const std::vector<Tensor>& root_grads, bool retain_graph,
                    const std::vector<Edge>* capture, std::vector<Tensor>* captured) {
  NoGradGuard no_grad;  // backward closures compute with plain ops: no graph of the graph
  autocast::SuspendGuard no_autocast;  // ... in the dtypes their forward chose (Note [Autocast])
  // Depth of nested passes (grad() inside a hook); the outermost runs the queued callbacks, or
  // drops them when the pass throws.
  struct DepthGuard {
    DepthGuard() { ++t_backward_depth; }
    ~DepthGuard() {
      if (--t_backward_depth == 0) t_backward_callbacks.clear();
    }
  } depth_guard;

  // 1. Collect the graph and count, for each node, the edges that lead into it.
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> stack;
  std::unordered_map<Node*, bool> seen;
  for (const Tensor& r : roots) {
    Edge e = gradient_edge(r);
    if (e.fn && !seen[e.fn.get()]) {
      seen[e.fn.get()] = true;
      stack.push_back(e.fn.get());
    }
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (!e.fn) continue;
      dependencies[e.fn.get()] += 1;
      if (!seen[e.fn.get()]) {
        seen[e.fn.get()] = true;
        stack.push_back(e.fn.get());
      }
    }
  }

  // 2. Seed the root gradients.
  std::unordered_map<Node*, NodeGrads> pending;
  std::vector<std::shared_ptr<Node>> keep_alive;  // roots' nodes stay alive while we run
  auto slot = [&](Node* n) -> std::vector<Tensor>& {
    NodeGrads& ng = pending[n];
    if (ng.grads.empty()) ng.grads.resize(std::max(n->num_outputs, 1));
    return ng.grads;
  };
  for (size_t i = 0; i < roots.size(); ++i) {
    Edge e = gradient_edge(roots[i]);
    if (!e.fn) continue;
    keep_alive.push_back(e.fn);
    accumulate(slot(e.fn.get())[e.input_nr], root_grads[i]);
  }

  // 3. Run ready nodes, newest first (a node is ready when all of its consumers have run).
  auto later_first = [](Node* a, Node* b) { return a->sequence_nr < b->sequence_nr; };
  std::priority_queue<Node*, std::vector<Node*>, decltype(later_first)> ready(later_first);
  for (auto& kv : pending)
    if (dependencies[kv.first] == 0) ready.push(kv.first);

  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(slot(node));
    pending.erase(node);
    run_output_hooks(*node, grads);

    if (capture != nullptr) {
      for (size_t k = 0; k < capture->size(); ++k) {
        const Edge& c = (*capture)[k];
        if (c.fn.get() == node) accumulate((*captured)[k], grads[c.input_nr]);
      }
    }

    if (node->is_accumulate_grad()) {
      const profiler::Scope scope("AccumulateGrad");
      if (capture == nullptr) accumulate_into_leaf(*node, std::move(grads[0]));
      continue;
    }
    if (node->released) {
      EMBER_THROW("backward: trying to backward through the graph a second time (", node->name,
                  " was already freed); pass retain_graph=true to the first backward if you need to");
    }

    std::vector<Tensor> input_grads;
    {
      const profiler::Scope scope(node->name);  // the node's kernels nest inside (Note [Profiler])
      input_grads = node->backward(grads);
    }
    EMBER_CHECK(input_grads.size() == node->next.size(), node->name, ": backward returned ",
                input_grads.size(), " gradients for ", node->next.size(), " inputs");
    if (!retain_graph) node->release();

    for (size_t i = 0; i < node->next.size(); ++i) {
      const Edge& e = node->next[i];
      if (!e.fn) continue;
      accumulate(slot(e.fn.get())[e.input_nr], input_grads[i]);
      if (--dependencies[e.fn.get()] == 0) ready.push(e.fn.get());
    }
  }

  if (t_backward_depth == 1) {
    for (size_t i = 0; i < t_backward_callbacks.size(); ++i) {
      std::function<void()> cb = std::move(t_backward_callbacks[i]);
      cb();  // may queue more (index-based loop: the vector may grow)
    }
    t_backward_callbacks.clear();
  }
}

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  execute(roots, grads, retain_graph, nullptr, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph) {
  std::vector<Tensor> seeds;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (i < grad_outputs.size() && grad_outputs[i].defined()) {
      seeds.push_back(grad_outputs[i]);
    } else {
      EMBER_CHECK(outputs[i].numel() == 1, "grad: output ", i, " has shape ", outputs[i].shape(),
                  "; a gradient must be given for a non-scalar output");
      seeds.push_back(ones_like(outputs[i]));
    }
  }
  std::vector<Edge> edges;
  for (const Tensor& in : inputs) {
    EMBER_CHECK(in.requires_grad(), "grad: an input of shape ", in.shape(), " does not require grad");
    edges.push_back(gradient_edge(in));
  }
  std::vector<Tensor> result(inputs.size());
  execute(outputs, seeds, retain_graph, &edges, &result);
  return result;
}

// ---- Tensor's autograd methods ----------------------------------------------------------------

Tensor& Tensor::requires_grad_(bool value) {
  EMBER_CHECK(is_leaf(), "requires_grad_: only leaf tensors can change requires_grad (this one was made by ",
              grad_fn()->name, "); use detach() to get a leaf");
  EMBER_CHECK(!value || is_floating(dtype()), "requires_grad_: only floating-point tensors can require "
              "gradients, this one is ", dtype());
  impl().meta().requires_grad = value;
  return *this;
}

Tensor Tensor::grad() const {
  if (!impl().autograd || !impl().autograd->grad) return Tensor();
  return Tensor(impl().autograd->grad);
}

void Tensor::set_grad(const Tensor& g) {
  if (!g.defined()) {
    if (impl().autograd) impl().autograd->grad.reset();
    return;
  }
  EMBER_CHECK(g.shape() == shape(), "set_grad: gradient shape ", g.shape(), " does not match tensor shape ", shape());
  impl().meta().grad = g.impl_ptr();
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> none;
  return impl().autograd ? impl().autograd->grad_fn : none;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  EMBER_CHECK(requires_grad(), "backward: tensor of shape ", shape(), " does not require grad and has no grad_fn");
  Tensor g = gradient;
  if (!g.defined()) {
    EMBER_CHECK(numel() == 1, "backward: grad can be implicitly created only for scalar outputs, this tensor "
                "has shape ", shape(), "; pass a gradient of that shape");
    g = ones_like(*this);
  } else {
    EMBER_CHECK(g.shape() == shape(), "backward: gradient has shape ", g.shape(), " but the tensor has shape ", shape());
  }
  run_backward({*this}, {g}, retain_graph);
}

Tensor Tensor::detach() const {
  auto impl2 = std::make_shared<TensorImpl>();
  impl2->storage = impl().storage;
  impl2->shape = impl().shape;
  impl2->strides = impl().strides;
  impl2->offset = impl().offset;
  impl2->dtype = impl().dtype;
  return Tensor(std::move(impl2));
}

void Tensor::retain_grad() const {
  EMBER_CHECK(requires_grad(), "retain_grad: tensor of shape ", shape(), " does not require grad");
  if (is_leaf()) return;  // leaves keep their grad anyway
  AutogradMeta& m = impl().meta();
  if (m.retains_grad) return;
  m.retains_grad = true;
  std::weak_ptr<TensorImpl> weak = impl_ptr();
  m.grad_fn->output_hooks[m.output_nr].push_back([weak](const Tensor& g) {
    if (auto p = weak.lock()) {
      AutogradMeta& mm = p->meta();
      if (mm.grad) {
        Tensor(mm.grad).add_(g);
      } else {
        mm.grad = g.clone().impl_ptr();
      }
    }
    return Tensor();
  });
}

void Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  EMBER_CHECK(requires_grad(), "register_hook: tensor of shape ", shape(), " does not require grad");
  AutogradMeta& m = impl().meta();
  if (m.grad_fn) {
    m.grad_fn->output_hooks[m.output_nr].push_back(std::move(hook));
  } else {
    m.hooks.push_back(std::move(hook));
  }
}

void Tensor::register_post_accumulate_grad_hook(std::function<void(Tensor&)> hook) const {
  EMBER_CHECK(requires_grad() && is_leaf(), "register_post_accumulate_grad_hook: only leaf tensors that require "
              "grad accumulate gradients");
  impl().meta().post_accumulate_hooks.push_back(std::move(hook));
}

}  // namespace ember
