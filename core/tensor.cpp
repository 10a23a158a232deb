// Tensor metadata, copies, conversion and factories. Views are in views.cpp, printing in print.cpp.

#include "tensor.h"

#include <atomic>
#include <cmath>

#include "../kernels/cpu/elementwise.h"
#include "autograd.h"
#include "op_helpers.h"

#if EMBER_CUDA_BACKEND
#include "../kernels/cuda/elementwise.h"
#endif

namespace ember {

// ---- helpers for all ops ----------------------------------------------------------------------

namespace detail {

kernels::IterShape iter_shape(const Shape& shape) {
  kernels::IterShape s;
  s.ndim = shape.size();
  for (int i = 0; i < shape.size(); ++i) s.sizes[i] = shape[i];
  return s;
}

kernels::Operand operand(const Tensor& t, const Shape& shape) {
  kernels::Operand op;
  op.data = t.data();
  const int n = shape.size(), tn = t.dim();
  for (int i = 0; i < n; ++i) {
    const int ti = tn - n + i;
    op.strides[i] = (ti < 0 || t.shape()[ti] == 1) ? 0 : t.strides()[ti];
  }
  return op;
}

namespace {
// Channels-last memory order of the dims of a 4-D iteration, slowest first: N, H, W, C.
constexpr int kNhwc[4] = {0, 2, 3, 1};
bool reorders(const Shape& shape, MemoryFormat order) {
  return order == MemoryFormat::channels_last && shape.size() == 4;
}
}  // namespace

kernels::IterShape iter_shape(const Shape& shape, MemoryFormat order) {
  kernels::IterShape s = iter_shape(shape);
  if (!reorders(shape, order)) return s;
  for (int i = 0; i < 4; ++i) s.sizes[i] = shape[kNhwc[i]];
  return s;
}

kernels::Operand operand(const Tensor& t, const Shape& shape, MemoryFormat order) {
  kernels::Operand op = operand(t, shape);
  if (!reorders(shape, order)) return op;
  const kernels::Operand plain = op;
  for (int i = 0; i < 4; ++i) op.strides[i] = plain.strides[kNhwc[i]];
  return op;
}

Tensor to_format(const Tensor& t, MemoryFormat format) {
  if (!t.defined() || format != MemoryFormat::channels_last || t.dim() != 4) return t;
  NoGradGuard g;
  return t.contiguous(format);
}

bool is_channels_last(const Tensor& t) {
  return t.defined() && t.dim() == 4 && t.suggest_memory_format() == MemoryFormat::channels_last;
}

MemoryFormat elementwise_format(const Shape& shape, std::initializer_list<const Tensor*> inputs) {
  for (const Tensor* t : inputs)
    if (t->defined() && t->shape() == shape) return t->suggest_memory_format();
  return MemoryFormat::contiguous;
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.device() == b.device(), op, ": expected all tensors on one device, got ", a.device(), " and ",
              b.device());
}

void check_floating(const char* op, const Tensor& t) {
  EMBER_CHECK(is_floating(t.dtype()), op,
              ": expected a floating-point tensor (float32, float64, float16 or bfloat16), got ", describe(t));
}

[[noreturn]] void cuda_unavailable(const char* op) {
  EMBER_THROW(op, ": no CUDA kernel in this build (CUDA tensors need a build with -DEMBER_CUDA=ON)");
}

}  // namespace detail

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined tensor";
  std::ostringstream os;
  os << t.shape() << ' ' << t.dtype() << ' ' << t.device();
  return os.str();
}

// ---- metadata ---------------------------------------------------------------------------------

int64_t Tensor::size(int64_t dim) const { return shape()[normalize_dim(dim, this->dim(), "size")]; }
int64_t Tensor::stride(int64_t dim) const { return strides()[normalize_dim(dim, this->dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    if (shape()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

void* Tensor::data() const {
  return static_cast<char*>(impl().storage->data()) + impl().offset * dtype_size(impl().dtype);
}

Tensor make_tensor(std::shared_ptr<Storage> storage, const Shape& shape, const Strides& strides, int64_t offset,
                   DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

// ---- factories --------------------------------------------------------------------------------

Tensor empty(const Shape& shape, TensorOptions opt) {
  for (int64_t d : shape) EMBER_CHECK(d >= 0, "empty: negative dimension in shape ", shape);
  const int64_t n = numel_of(shape);
  std::shared_ptr<Storage> storage;
  try {
    storage = std::make_shared<Storage>(static_cast<size_t>(n * dtype_size(opt.dtype)), opt.device);
  } catch (const Error& e) {
    // Out of memory (or no such device): say which tensor could not be made.
    EMBER_THROW("cannot allocate a tensor of shape ", shape, " ", opt.dtype, " on ", opt.device, ": ", e.what());
  }
  Tensor t = make_tensor(std::move(storage), shape, contiguous_strides(shape), 0, opt.dtype);
  if (opt.requires_grad) t.requires_grad_(true);
  return t;
}

Tensor full(const Shape& shape, double value, TensorOptions opt) {
  const bool rg = opt.requires_grad;
  opt.requires_grad = false;
  Tensor t = empty(shape, opt);
  t.fill_(value);
  if (rg) t.requires_grad_(true);
  return t;
}
Tensor zeros(const Shape& shape, TensorOptions opt) { return full(shape, 0.0, opt); }
Tensor ones(const Shape& shape, TensorOptions opt) { return full(shape, 1.0, opt); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor full_like(const Tensor& t, double v) { return full(t.shape(), v, {.dtype = t.dtype(), .device = t.device()}); }
Tensor scalar_tensor(double value, TensorOptions opt) { return full(Shape{}, value, opt); }

// Factories that compute values fill a CPU tensor and move it to the target device.
namespace {
template <typename F>
Tensor fill_by_index(const Shape& shape, TensorOptions opt, F value_at) {
  const Device target = opt.device;
  const bool rg = opt.requires_grad;
  Tensor t = empty(shape, {.dtype = DType::f64});
  double* p = t.data_ptr<double>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = value_at(i);
  Tensor r = t.to(target, opt.dtype);
  if (rg) r.requires_grad_(true);
  return r;
}
}  // namespace

Tensor arange(double start, double end, double step, TensorOptions opt) {
  EMBER_CHECK(step != 0, "arange: step must be nonzero");
  EMBER_CHECK((end - start) / step >= 0 || start == end, "arange: the range [", start, ", ", end,
              ") is empty in the direction of step ", step);
  const auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  return fill_by_index({std::max<int64_t>(n, 0)}, opt, [=](int64_t i) { return start + step * static_cast<double>(i); });
}
Tensor arange(double end, TensorOptions opt) { return arange(0, end, 1, opt); }

Tensor linspace(double start, double end, int64_t steps, TensorOptions opt) {
  EMBER_CHECK(steps >= 0, "linspace: number of steps must be non-negative, got ", steps);
  const double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  // Like PyTorch: the first half counts up from start, the second half down from end, so both
  // endpoints are exact.
  return fill_by_index({steps}, opt, [=](int64_t i) {
    if (steps == 1) return start;
    return i < steps / 2 ? start + step * static_cast<double>(i) : end - step * static_cast<double>(steps - 1 - i);
  });
}

Tensor eye(int64_t n, TensorOptions opt) {
  EMBER_CHECK(n >= 0, "eye: n must be non-negative, got ", n);
  return fill_by_index({n, n}, opt, [=](int64_t i) { return i / n == i % n ? 1.0 : 0.0; });
}

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions opt) {
  EMBER_CHECK(static_cast<int64_t>(values.size()) == numel_of(shape), "from_vector: ", values.size(),
              " values do not fill shape ", shape, " (", numel_of(shape), " elements)");
  // Wrap the vector's memory, then convert/copy into a tensor of the requested dtype and device.
  auto* raw = const_cast<T*>(values.data());
  Tensor src = from_blob(raw, shape, dtype_of<T>::value);
  Tensor r = empty(shape, {.dtype = opt.dtype, .device = opt.device});
  r.copy_(src);
  if (opt.requires_grad) r.requires_grad_(true);
  return r;
}
template Tensor from_vector(const std::vector<float>&, const Shape&, TensorOptions);
template Tensor from_vector(const std::vector<double>&, const Shape&, TensorOptions);
template Tensor from_vector(const std::vector<int32_t>&, const Shape&, TensorOptions);
template Tensor from_vector(const std::vector<int64_t>&, const Shape&, TensorOptions);
template Tensor from_vector(const std::vector<uint8_t>&, const Shape&, TensorOptions);

// std::vector<bool> is bit-packed: go through bytes.
template <>
Tensor from_vector(const std::vector<bool>& values, const Shape& shape, TensorOptions opt) {
  std::vector<uint8_t> bytes(values.begin(), values.end());
  Tensor b = from_vector(bytes, shape, {.dtype = DType::u8});
  Tensor r = b.to(DType::boolean).to(opt.device, opt.dtype);
  if (opt.requires_grad) r.requires_grad_(true);
  return r;
}

Tensor from_blob(void* data, const Shape& shape, const Strides& strides, DType dtype, Device device,
                 std::function<void(void*)> deleter) {
  EMBER_CHECK(strides.size() == shape.size(), "from_blob: ", strides.size(), " strides for shape ", shape);
  int64_t extent = 1;
  for (int i = 0; i < shape.size(); ++i) {
    EMBER_CHECK(shape[i] >= 0 && strides[i] >= 0, "from_blob: negative size or stride");
    if (shape[i] == 0) extent = 0;
  }
  if (extent != 0)
    for (int i = 0; i < shape.size(); ++i) extent += (shape[i] - 1) * strides[i];
  auto storage = std::make_shared<Storage>(data, static_cast<size_t>(extent * dtype_size(dtype)), device,
                                           std::move(deleter));
  return make_tensor(std::move(storage), shape, strides, 0, dtype);
}

Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device, std::function<void(void*)> deleter) {
  return from_blob(data, shape, contiguous_strides(shape), dtype, device, std::move(deleter));
}

// ---- copies and conversion --------------------------------------------------------------------

namespace {
// Refuses an in-place write that autograd could not track.
void check_inplace(const char* op, const Tensor& self) {
  EMBER_CHECK(!(grad_mode_enabled() && self.requires_grad()), op, ": in-place operation on a tensor of shape ",
              self.shape(), " that requires grad; wrap it in NoGradGuard (optimizer updates) or use the "
              "out-of-place op");
}
}  // namespace

namespace {

// Note [Copies between devices]
// Bytes cross between the CPU and a CUDA device (or between two devices) as one contiguous block
// already in the destination's dtype and shape: a cast, a broadcast or a strided layout is done
// on the side that holds the data (where it is one kernel), never element by element across
// the bus. The transfer itself is synchronous from the host's point of view.
void copy_across_devices(Tensor& dst, const Tensor& src) {
#if EMBER_CUDA_BACKEND
  if (dst.device().is_cpu() || src.device().is_cpu()) {
    const Device gpu = dst.device().is_cuda() ? dst.device() : src.device();
    detail::check_not_capturing(gpu, "copy_ / to() between the CPU and a CUDA device",
                                "copies through host memory and waits for the device");
  }
  NoGradGuard g;
  // Two dense tensors with the same strides (both channels-last, say) hold the same bytes in the
  // same order: one transfer.
  if (src.dtype() == dst.dtype() && src.shape() == dst.shape() && src.strides() == dst.strides() &&
      dst.is_contiguous(MemoryFormat::channels_last)) {
    cuda::copy_bytes(dst.data(), dst.device(), src.data(), src.device(),
                     static_cast<size_t>(dst.numel() * dtype_size(dst.dtype())));
    return;
  }
  Tensor staged = src;
  if (src.dtype() != dst.dtype() || src.shape() != dst.shape() || !src.is_contiguous()) {
    staged = empty(dst.shape(), {.dtype = dst.dtype(), .device = src.device()});
    staged.copy_(src);
  }
  Tensor landing = dst.is_contiguous() ? dst : empty(dst.shape(), {.dtype = dst.dtype(), .device = dst.device()});
  cuda::copy_bytes(landing.data(), landing.device(), staged.data(), staged.device(),
                   static_cast<size_t>(dst.numel() * dtype_size(dst.dtype())));
  if (!dst.is_contiguous()) dst.copy_(landing);
#else
  (void)dst;
  (void)src;
  detail::cuda_unavailable("copy_");
#endif
}

}  // namespace

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace("copy_", *this);
  EMBER_CHECK(!(grad_mode_enabled() && src.requires_grad()), "copy_: source of shape ", src.shape(),
              " requires grad; copy_ is not differentiable (use clone() or to())");
  EMBER_CHECK(broadcast_shapes(src.shape(), shape(), "copy_") == shape(), "copy_: source of shape ", src.shape(),
              " cannot be broadcast to destination shape ", shape());
  // A source that shares memory with the destination in a different layout (x.copy_(x.t()))
  // would be overwritten while it is read: copy it out first.
  if (src.is_same_storage(*this) && (src.offset() != offset() || src.strides() != strides() ||
                                     src.shape() != shape() || src.dtype() != dtype())) {
    NoGradGuard g;
    return copy_(src.clone());
  }
  // Walk the elements in the destination's memory order, so the writes are sequential.
  const MemoryFormat order = suggest_memory_format();
  if (device().is_cpu() && src.device().is_cpu()) {
    kernels::cpu::copy(detail::iter_shape(shape(), order), dtype(), detail::operand(*this, shape(), order),
                       src.dtype(), detail::operand(src, shape(), order));
  } else if (device() == src.device()) {
    EMBER_CUDA_CALL(device(), "copy_",
                    kernels::gpu::copy(detail::iter_shape(shape(), order), dtype(),
                                       detail::operand(*this, shape(), order), src.dtype(),
                                       detail::operand(src, shape(), order)));
  } else {
    copy_across_devices(*this, src);
  }
  bump_version();
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_inplace("fill_", *this);
  EMBER_KERNEL_CALL(device(), "fill_", fill, dtype(), detail::iter_shape(shape()), detail::operand(*this), value);
  bump_version();
  return *this;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone(MemoryFormat::contiguous);
}

// clone(MemoryFormat) is in memory_format.cpp.

Tensor Tensor::to(DType dt) const { return to(device(), dt); }
Tensor Tensor::to(Device d) const { return to(d, dtype()); }

Tensor Tensor::to(Device d, DType dt) const {
  if (d == device() && dt == dtype()) return *this;
  if (d.is_cuda()) allocator_for(d);  // throws a clear error in a CPU-only build
  Tensor out = empty(shape(), {.dtype = dt, .device = d}, suggest_memory_format());
  {
    NoGradGuard g;
    out.copy_(*this);
  }
  if (any_requires_grad({this})) {
    EMBER_CHECK(is_floating(dt), "to: a tensor that requires grad cannot be converted to ", dt);
    const DType src_dtype = dtype();
    const Device src_device = device();
    record("ToCopyBackward", {*this}, {out}, [src_dtype, src_device](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{g[0].to(src_device, src_dtype)};
    });
  }
  return out;
}

Tensor Tensor::to(Device d, bool non_blocking) const {
#if EMBER_CUDA_BACKEND
  const bool async_ok = non_blocking && d != device() && (d.is_cpu() != device().is_cpu()) && is_contiguous() &&
                        !(grad_mode_enabled() && requires_grad());
  if (async_ok && device().is_cpu() && is_pinned()) {
    Tensor out = empty(shape(), {.dtype = dtype(), .device = d});
    cuda::copy_bytes_async(out.data(), d, data(), device(), static_cast<size_t>(nbytes()));
    return out;
  }
  if (async_ok && d.is_cpu()) {
    Tensor out = empty(shape(), {.dtype = dtype()}).pin_memory();
    cuda::copy_bytes_async(out.data(), d, data(), device(), static_cast<size_t>(nbytes()));
    return out;
  }
#endif
  (void)non_blocking;
  return to(d);
}

bool Tensor::is_pinned() const {
#if EMBER_CUDA_BACKEND
  return defined() && device().is_cpu() && cuda::is_pinned(storage()->data());
#else
  return false;
#endif
}

Tensor Tensor::pin_memory() const {
  EMBER_CHECK(device().is_cpu(), "pin_memory: only CPU tensors can be pinned, got ", describe(*this));
#if EMBER_CUDA_BACKEND
  if (is_pinned()) return *this;
  const size_t bytes = static_cast<size_t>(numel() * dtype_size(dtype()));
  void* p = cuda::pinned_allocate(bytes);
  auto storage = std::make_shared<Storage>(p, bytes, Device::cpu(), [](void* q) { cuda::pinned_free(q); });
  Tensor out = make_tensor(std::move(storage), shape(), contiguous_strides(shape()), 0, dtype());
  {
    NoGradGuard g;
    out.copy_(*this);
  }
  return out;
#else
  EMBER_THROW("pin_memory: pinned host memory needs a build with a CUDA backend");
#endif
}

namespace {
std::atomic<int64_t> g_host_reads{0};
}  // namespace

int64_t host_read_count() { return g_host_reads.load(std::memory_order_relaxed); }

double Tensor::item() const {
  g_host_reads.fetch_add(1, std::memory_order_relaxed);
  EMBER_CHECK(numel() == 1, "item: a tensor with ", numel(), " elements cannot be converted to a scalar (shape ",
              shape(), ")");
  detail::check_not_capturing(device(), "Tensor::item", "reads a device value on the host (it waits for the device)");
  Tensor c = to(Device::cpu(), DType::f64);
  return *static_cast<const double*>(c.data());
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  g_host_reads.fetch_add(1, std::memory_order_relaxed);
  NoGradGuard g;
  detail::check_not_capturing(device(), "Tensor::to_vector", "reads device values on the host (it waits for the device)");
  Tensor c = to(Device::cpu(), dtype_of<T>::value).contiguous();
  const T* p = static_cast<const T*>(c.data());
  return std::vector<T>(p, p + c.numel());
}
template std::vector<float> Tensor::to_vector() const;
template std::vector<double> Tensor::to_vector() const;
template std::vector<int32_t> Tensor::to_vector() const;
template std::vector<int64_t> Tensor::to_vector() const;
template std::vector<uint8_t> Tensor::to_vector() const;

template <>
std::vector<bool> Tensor::to_vector() const {
  std::vector<uint8_t> b = to(DType::u8).to_vector<uint8_t>();
  return std::vector<bool>(b.begin(), b.end());
}

// ---- in-place arithmetic ------------------------------------------------------------------------

namespace {
// self = self bop other (Add: self + alpha * other).
Tensor& inplace_binary(const char* op, Tensor& self, const Tensor& other, kernels::BinaryOp bop, double alpha) {
  check_inplace(op, self);
  detail::check_same_device(op, self, other);
  detail::check_floating(op, self);
  EMBER_CHECK(broadcast_shapes(other.shape(), self.shape(), op) == self.shape(), op, ": operand of shape ",
              other.shape(), " cannot be broadcast to shape ", self.shape());
  Tensor o = other.dtype() == self.dtype() ? other : other.to(self.dtype());
  EMBER_KERNEL_CALL(self.device(), op, binary, bop, self.dtype(), detail::iter_shape(self.shape()),
                    detail::operand(self), detail::operand(self), detail::operand(o, self.shape()), alpha);
  self.bump_version();
  return self;
}
}  // namespace

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  return inplace_binary("add_", *this, other, kernels::BinaryOp::Add, alpha);
}
Tensor& Tensor::mul_(const Tensor& other) { return inplace_binary("mul_", *this, other, kernels::BinaryOp::Mul, 1.0); }
Tensor& Tensor::div_(const Tensor& other) { return inplace_binary("div_", *this, other, kernels::BinaryOp::Div, 1.0); }

namespace {
Tensor& inplace_unary(const char* op, Tensor& self, kernels::UnaryOp k, double alpha) {
  check_inplace(op, self);
  detail::check_floating(op, self);
  EMBER_KERNEL_CALL(self.device(), op, unary, k, self.dtype(), detail::iter_shape(self.shape()), detail::operand(self),
                    detail::operand(self), alpha);
  self.bump_version();
  return self;
}
}  // namespace

Tensor& Tensor::add_(double value) { return inplace_unary("add_", *this, kernels::UnaryOp::AddScalar, value); }
Tensor& Tensor::mul_(double value) { return inplace_unary("mul_", *this, kernels::UnaryOp::MulScalar, value); }

Tensor& Tensor::clamp_(std::optional<double> lo, std::optional<double> hi) {
  check_inplace("clamp_", *this);
  detail::check_floating("clamp_", *this);
  EMBER_KERNEL_CALL(device(), "clamp_", clamp, dtype(), detail::iter_shape(shape()), detail::operand(*this),
                    detail::operand(*this), lo.has_value(), lo.value_or(0), hi.has_value(), hi.value_or(0));
  bump_version();
  return *this;
}

}  // namespace ember
