#pragma once
// Tensor: a strided view (shape, strides, offset, dtype) onto a shared Storage, plus the
// autograd state (requires_grad, grad, grad_fn).
//
// Note [Tensor = handle]
// Tensor is a cheap handle (one shared_ptr) to a TensorImpl, like torch::Tensor: copying a Tensor
// shares the same data and autograd state; clone() copies the data. Views (view, permute,
// narrow, select, expand, ...) make a new TensorImpl over the same Storage, so a write through a
// view is seen by the base. An undefined Tensor (default-constructed) has no impl; most calls
// on it throw.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "device.h"
#include "dtype.h"
#include "error.h"
#include "memory_format.h"
#include "shape.h"
#include "storage.h"

namespace ember {

class Tensor;
struct Node;

// Options for factories: zeros({2, 3}, {.dtype = DType::f64, .requires_grad = true}).
struct TensorOptions {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  bool requires_grad = false;
};

// Autograd state of one tensor (created on first use).
struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<struct TensorImpl> grad;   // accumulated gradient (leaves, retain_grad)
  std::shared_ptr<Node> grad_fn;             // the node that produced this tensor (non-leaves)
  int output_nr = 0;                         // which output of grad_fn this tensor is
  std::weak_ptr<Node> grad_accumulator;      // leaves: the AccumulateGrad node, cached
  bool retains_grad = false;
  // Leaves only (for non-leaves hooks live on grad_fn): run on the incoming gradient before it
  // is accumulated; a hook may return a replacement gradient (or an undefined Tensor to keep it).
  std::vector<std::function<Tensor(const Tensor&)>> hooks;
  // Leaves only: run after the gradient was accumulated into .grad ("gradient ready").
  std::vector<std::function<void(Tensor&)>> post_accumulate_hooks;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;     // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  std::unique_ptr<AutogradMeta> autograd;

  AutogradMeta& meta() {
    if (!autograd) autograd = std::make_unique<AutogradMeta>();
    return *autograd;
  }
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata ----------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& sizes() const { return impl().shape; }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  const Strides& strides() const { return impl().strides; }
  int64_t stride(int64_t dim) const;
  int64_t offset() const { return impl().offset; }
  int dim() const { return impl().shape.size(); }
  int64_t numel() const { return numel_of(impl().shape); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  int64_t element_size() const { return dtype_size(dtype()); }
  int64_t nbytes() const { return numel() * element_size(); }
  bool is_contiguous() const;
  // Dense in `format`'s strides (Note [Memory formats] in core/memory_format.h).
  bool is_contiguous(MemoryFormat format) const;
  // channels_last for a tensor with exact channels-last strides, contiguous otherwise.
  MemoryFormat suggest_memory_format() const;
  bool is_floating_point() const { return is_floating(dtype()); }
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  // True when both tensors view the same Storage.
  bool is_same_storage(const Tensor& o) const { return storage() == o.storage(); }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // Pointer to the first element of this view (storage base + offset).
  void* data() const;
  template <typename T>
  T* data_ptr() const {
    EMBER_CHECK(dtype_of<T>::value == dtype(), "data_ptr: tensor has dtype ", dtype(),
                " but ", dtype_name(dtype_of<T>::value), " was requested");
    return static_cast<T*>(data());
  }

  // ---- views (share storage; differentiable) ------------------------------------------------
  Tensor view(const Shape& shape) const;     // one dim may be -1; needs compatible strides
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor permute(const Dims& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // transpose of a 2-D tensor
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor expand(const Shape& shape) const;  // -1 keeps a dim
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor unflatten(int64_t dim, const Shape& sizes) const;

  // ---- copies and conversion ---------------------------------------------------------------
  Tensor contiguous() const;  // self if already contiguous (row-major)
  // Self if already dense in `format` (contiguous or channels_last), else a differentiable copy.
  Tensor contiguous(MemoryFormat format) const;
  // A fresh copy (differentiable); preserve keeps a channels-last tensor channels-last and copies
  // every other one into row-major strides (Note [Memory formats]).
  Tensor clone(MemoryFormat format = MemoryFormat::preserve) const;
  Tensor& copy_(const Tensor& src);  // broadcasts src into self; converts dtype; in place
  // The conversions keep a channels-last tensor channels-last (MemoryFormat::preserve).
  Tensor to(DType dtype) const;      // self if the dtype already matches
  Tensor to(Device device) const;
  Tensor to(Device device, DType dtype) const;
  // With non_blocking, a copy between pinned host memory (pin_memory()) and a CUDA device is
  // only queued on the current stream: the host goes on at once, and the result may be used
  // by later work on that stream (read it on the host only after synchronizing). Otherwise, and
  // for pageable memory, the same as to(device).
  Tensor to(Device device, bool non_blocking) const;
  Tensor cpu() const { return to(Device::cpu()); }
  // A copy of this CPU tensor in pinned (page-locked) host memory; self if already pinned.
  // Needs a build with a CUDA backend.
  Tensor pin_memory() const;
  bool is_pinned() const;
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }

  // The value of a one-element tensor. item() and to_vector() are the host's reads of tensor
  // values: on a GPU each waits for the device, and host_read_count() counts them.
  double item() const;
  template <typename T>
  T item() const { return static_cast<T>(item()); }
  // All elements in row-major order, converted to T (copies to the CPU if needed).
  template <typename T>
  std::vector<T> to_vector() const;

  // ---- in-place arithmetic (optimizers; not differentiable) ----------------------------------
  Tensor& add_(const Tensor& other, double alpha = 1.0);  // self += alpha * other
  Tensor& add_(double value);
  Tensor& sub_(const Tensor& other) { return add_(other, -1.0); }
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);
  Tensor& div_(const Tensor& other);
  Tensor& div_(double value) { return mul_(1.0 / value); }
  Tensor& clamp_(std::optional<double> lo, std::optional<double> hi);

  // ---- autograd ----------------------------------------------------------------------------
  bool requires_grad() const { return impl().autograd && impl().autograd->requires_grad; }
  // Marks a leaf as requiring grad (error on a non-leaf or an integer tensor).
  Tensor& requires_grad_(bool value = true);
  Tensor& set_requires_grad(bool value) { return requires_grad_(value); }
  // The accumulated gradient (undefined until backward reaches this tensor).
  Tensor grad() const;
  void set_grad(const Tensor& g);
  const std::shared_ptr<Node>& grad_fn() const;
  int output_nr() const { return impl().autograd ? impl().autograd->output_nr : 0; }
  bool is_leaf() const { return !impl().autograd || !impl().autograd->grad_fn; }
  // Back-propagates from this tensor. Without `gradient` it must hold one element.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  // A tensor sharing the data but cut from the graph.
  Tensor detach() const;
  // Keeps .grad for a non-leaf after backward.
  void retain_grad() const;
  // Runs on the gradient w.r.t. this tensor during backward; may return a replacement.
  void register_hook(std::function<Tensor(const Tensor&)> hook) const;
  // Leaves: runs after the gradient has been accumulated into .grad (DDP's "grad ready").
  void register_post_accumulate_grad_hook(std::function<void(Tensor&)> hook) const;
  uint64_t version() const { return storage()->version(); }
  void bump_version() const { storage()->bump_version(); }

  // ---- operator and method sugar for the functions in layers/ -------------------------------
  Tensor operator-() const;
  Tensor sum() const;
  Tensor sum(const Dims& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const Dims& dims, bool keepdim = false) const;
  Tensor matmul(const Tensor& other) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor relu() const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor pow(double exponent) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;

  std::string str() const;  // PyTorch-style printing

  TensorImpl& impl() const {
    EMBER_CHECK(impl_ != nullptr, "operation on an undefined tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// "(2, 3) float32 cpu" — for error messages.
std::string describe(const Tensor& t);

// How many times this process has read tensor values with item() or to_vector() (any device).
// Tests bound a loop's reads with it (e.g. ember train's reads per epoch).
int64_t host_read_count();

// ---- factories ----------------------------------------------------------------------------
Tensor empty(const Shape& shape, TensorOptions opt = {});
// Uninitialized, with the strides of `format` (contiguous or channels_last; channels_last needs 4 dims).
Tensor empty(const Shape& shape, TensorOptions opt, MemoryFormat format);
Tensor zeros(const Shape& shape, TensorOptions opt = {});
Tensor ones(const Shape& shape, TensorOptions opt = {});
Tensor full(const Shape& shape, double value, TensorOptions opt = {});
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor scalar_tensor(double value, TensorOptions opt = {});
// [start, end) in steps of `step`; dtype i64 unless opt says otherwise... as PyTorch, the
// caller picks the dtype (default f32 here: pass {.dtype = DType::i64} for integer ranges).
Tensor arange(double start, double end, double step = 1.0, TensorOptions opt = {});
Tensor arange(double end, TensorOptions opt = {});
Tensor linspace(double start, double end, int64_t steps, TensorOptions opt = {});
Tensor eye(int64_t n, TensorOptions opt = {});
// Copies `values` (converted to opt.dtype; by default the dtype of T) into a new tensor of `shape`.
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions opt = {.dtype = dtype_of<T>::value});
template <typename T>
Tensor from_vector(const std::vector<T>& values, TensorOptions opt = {.dtype = dtype_of<T>::value}) {
  return from_vector(values, Shape{static_cast<int64_t>(values.size())}, opt);
}
// Wraps existing memory without copying. `deleter` (may be empty) runs when the last view dies.
Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device = Device::cpu(),
                 std::function<void(void*)> deleter = {});
Tensor from_blob(void* data, const Shape& shape, const Strides& strides, DType dtype,
                 Device device = Device::cpu(), std::function<void(void*)> deleter = {});

// A tensor over `storage` with explicit geometry (used by views and kernels).
Tensor make_tensor(std::shared_ptr<Storage> storage, const Shape& shape, const Strides& strides,
                   int64_t offset, DType dtype);

}  // namespace ember
