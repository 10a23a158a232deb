// Reductions with autograd.

#include "reduce.h"

#include "../kernels/cpu/reduce.h"
#include "elementwise.h"
#include "op_helpers.h"

namespace ember {

namespace {

// Normalized, sorted, de-duplicated reduction dims; empty `dims` means all dims.
Dims reduction_dims(const Tensor& x, const Dims& dims, const char* op) {
  Dims out;
  bool flag[kMaxDims] = {};
  if (dims.empty()) {
    for (int i = 0; i < x.dim(); ++i) flag[i] = true;
  } else {
    for (int64_t d : dims) {
      const int n = normalize_dim(d, x.dim(), op);
      EMBER_CHECK(x.dim() == 0 || !flag[n], op, ": dim ", d, " appears more than once in ", dims);
      if (x.dim() > 0) flag[n] = true;
    }
  }
  for (int i = 0; i < x.dim(); ++i)
    if (flag[i]) out.push_back(i);
  return out;
}

// The shape with reduced dims set to 1 (keepdim) or removed.
Shape reduced_shape(const Shape& s, const Dims& dims, bool keepdim) {
  Shape out;
  int k = 0;
  for (int i = 0; i < s.size(); ++i) {
    const bool reduced = k < dims.size() && dims[k] == i;
    if (reduced) ++k;
    if (!reduced) out.push_back(s[i]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// Sum over `dims` into a new tensor of shape reduced_shape(keepdim = true).
Tensor sum_kernel(const Tensor& x, const Dims& dims) {
  const Shape kept = reduced_shape(x.shape(), dims, true);
  Tensor out = empty(kept, {.dtype = x.dtype(), .device = x.device()});
  switch (x.device().type) {
    case DeviceType::CPU:
      kernels::cpu::sum(x.dtype(), detail::iter_shape(x.shape()), detail::operand(x), detail::operand(out, x.shape()),
                        detail::iter_shape(kept));
      break;
    case DeviceType::CUDA: detail::cuda_unavailable("sum");
  }
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, const Dims& dims0, bool keepdim) {
  detail::check_floating("sum", x);
  const Dims dims = reduction_dims(x, dims0, "sum");
  Tensor out = sum_kernel(x, dims).reshape(reduced_shape(x.shape(), dims, keepdim));
  if (any_requires_grad({&x})) {
    const Shape in_shape = x.shape(), kept = reduced_shape(x.shape(), dims, true);
    record("SumBackward", {x}, {out}, [=](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{g[0].reshape(kept).expand(in_shape).contiguous()};
    });
  }
  return out;
}

Tensor mean(const Tensor& x, const Dims& dims0, bool keepdim) {
  detail::check_floating("mean", x);
  const Dims dims = reduction_dims(x, dims0, "mean");
  int64_t count = 1;
  for (int64_t d : dims) count *= x.shape()[static_cast<int>(d)];
  return div(sum(x, dims, keepdim), static_cast<double>(count));
}

}  // namespace ember

namespace ember {
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) { EMBER_THROW("argmax: not implemented yet"); }
}  // namespace ember
