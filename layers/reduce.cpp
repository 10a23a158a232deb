// Reductions with autograd.

#include "reduce.h"

#include <algorithm>
#include <optional>

#include "../core/autocast.h"
#include "../core/op_helpers.h"
#include "../kernels/cpu/reduce.h"
#include "elementwise.h"

#if EMBER_CUDA_BACKEND
#include "../kernels/cuda/reduce.h"
#endif

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
  EMBER_KERNEL_CALL(x.device(), "sum", sum, x.dtype(), detail::iter_shape(x.shape()), detail::operand(x),
                    detail::operand(out, x.shape()), detail::iter_shape(kept));
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, const Dims& dims0, bool keepdim) {
  // On autocast's f32 list (Note [Autocast] in core/autocast.h), and mean with it.
  if (const auto dt = autocast::op_dtype(autocast::CastPolicy::fp32, {&x}))
    return sum(autocast::cast(x, *dt), dims0, keepdim);
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

// ---- var ----------------------------------------------------------------------------------------

Tensor var(const Tensor& x, const Dims& dims0, int64_t correction, bool keepdim) {
  detail::check_floating("var", x);
  const Dims dims = reduction_dims(x, dims0, "var");
  const Shape kept = reduced_shape(x.shape(), dims, true);
  Tensor out = empty(kept, {.dtype = x.dtype(), .device = x.device()});
  EMBER_KERNEL_CALL(x.device(), "var", var, x.dtype(), detail::iter_shape(x.shape()), detail::operand(x),
                    detail::operand(out, x.shape()), detail::iter_shape(kept), correction);
  out = out.reshape(reduced_shape(x.shape(), dims, keepdim));
  if (any_requires_grad({&x})) {
    int64_t count = 1;
    for (int64_t d : dims) count *= x.shape()[static_cast<int>(d)];
    // d var / d x_i = 2 (x_i - mean) / (n - correction); a zero divisor gives inf, as the forward.
    const double scale = 2.0 / static_cast<double>(std::max<int64_t>(0, count - correction));
    SavedTensor sx(x, "VarBackward");
    record("VarBackward", {x}, {out}, [=](const std::vector<Tensor>& g) {
      const Tensor& xv = sx.get();
      Tensor centered = sub(xv, mean(xv, dims, true));
      return std::vector<Tensor>{mul(mul(centered, g[0].to(xv.dtype()).reshape(kept)), scale)};
    });
  }
  return out;
}

// ---- max / min / amax / amin / argmax / argmin ----------------------------------------------------

namespace {

using kernels::Extremum;

// The dtypes with an ordering kernel.
void check_ordered(const char* op, const Tensor& x) {
  const DType t = x.dtype();
  EMBER_CHECK(is_floating(t) || t == DType::i32 || t == DType::i64 || t == DType::u8, op,
              ": expected a floating-point, int32, int64 or uint8 tensor, got ", describe(x));
}

// max/min have no identity: reducing over a zero-size dim is an error (as PyTorch).
void check_nonempty(const char* op, const Tensor& x, const Dims& dims) {
  for (int64_t d : dims)
    EMBER_CHECK(x.shape()[static_cast<int>(d)] != 0, op, ": cannot reduce over dim ", d, " of size 0 (input ",
                describe(x), "); ", op, " of an empty set is undefined");
}

// amax/amin (and max/min of all elements): the extreme value over `dims`, gradient split evenly
// between ties.
Tensor extremum_reduce(Extremum kind, const char* op, const char* node, const Tensor& x, const Dims& dims0,
                       bool keepdim) {
  check_ordered(op, x);
  const Dims dims = reduction_dims(x, dims0, op);
  check_nonempty(op, x, dims);
  const Shape kept = reduced_shape(x.shape(), dims, true);
  Tensor out = empty(kept, {.dtype = x.dtype(), .device = x.device()});
  EMBER_KERNEL_CALL(x.device(), op, extremum, kind, x.dtype(), detail::iter_shape(x.shape()), detail::operand(x),
                    detail::operand(out, x.shape()), detail::iter_shape(kept));
  Tensor value = out;  // kept shape, for the backward
  out = out.reshape(reduced_shape(x.shape(), dims, keepdim));
  if (any_requires_grad({&x})) {
    // Save a detached alias of the result: saving `out` itself would make a cycle out -> node -> out.
    SavedTensor sx(x, node), sv(value.detach(), node);
    record(node, {x}, {out}, [=](const std::vector<Tensor>& g) {
      const Tensor& xv = sx.get();
      const Tensor gk = g[0].to(xv.dtype()).reshape(kept);
      Tensor gi = empty(xv.shape(), {.dtype = xv.dtype(), .device = xv.device()});
      EMBER_KERNEL_CALL(xv.device(), op, extremum_backward, xv.dtype(), detail::iter_shape(xv.shape()),
                        detail::operand(gi), detail::operand(xv), detail::operand(sv.get(), xv.shape()),
                        detail::operand(gk, xv.shape()), detail::iter_shape(kept));
      return std::vector<Tensor>{gi};
    });
  }
  return out;
}

// (values, indices) of the first extreme element along `dim`, or over all elements when
// `all_dims` (indices then count row-major over the whole tensor). Values are skipped (undefined)
// unless `want_values`; when they are returned they carry the gradient to the chosen element.
std::pair<Tensor, Tensor> arg_extremum_op(Extremum kind, const char* op, const char* node, const Tensor& x,
                                          std::optional<int64_t> dim, bool keepdim, bool want_values) {
  check_ordered(op, x);
  const Dims dims = dim ? reduction_dims(x, {*dim}, op) : reduction_dims(x, {}, op);
  EMBER_CHECK(dim || x.numel() > 0, op, ": cannot take the ", op, " of an empty tensor ", describe(x));
  check_nonempty(op, x, dims);
  const Shape kept = reduced_shape(x.shape(), dims, true);
  Tensor values = want_values ? empty(kept, {.dtype = x.dtype(), .device = x.device()}) : Tensor();
  Tensor indices = empty(kept, {.dtype = DType::i64, .device = x.device()});
  EMBER_KERNEL_CALL(x.device(), op, arg_extremum, kind, x.dtype(), detail::iter_shape(x.shape()), detail::operand(x),
                    want_values ? detail::operand(values, x.shape()) : kernels::Operand{},
                    detail::operand(indices, x.shape()), detail::iter_shape(kept));
  const Shape out_shape = reduced_shape(x.shape(), dims, keepdim);
  Tensor saved_indices = indices;  // kept shape
  indices = indices.reshape(out_shape);
  if (!want_values) return {Tensor(), indices};
  values = values.reshape(out_shape);
  if (any_requires_grad({&x})) {
    const Shape in_shape = x.shape();
    const DType dtype = x.dtype();
    SavedTensor si(saved_indices, node);
    record(node, {x}, {values}, [=](const std::vector<Tensor>& g) {
      const Tensor& iv = si.get();
      const Tensor gk = g[0].to(dtype).reshape(kept);
      Tensor gi = empty(in_shape, {.dtype = gk.dtype(), .device = gk.device()});
      EMBER_KERNEL_CALL(gk.device(), op, index_backward, gk.dtype(), detail::iter_shape(in_shape), detail::operand(gi),
                        detail::operand(gk, in_shape), detail::operand(iv, in_shape), detail::iter_shape(kept));
      return std::vector<Tensor>{gi};
    });
  }
  return {values, indices};
}

}  // namespace

Tensor amax(const Tensor& x, const Dims& dims, bool keepdim) {
  return extremum_reduce(Extremum::Max, "amax", "AmaxBackward", x, dims, keepdim);
}
Tensor amin(const Tensor& x, const Dims& dims, bool keepdim) {
  return extremum_reduce(Extremum::Min, "amin", "AminBackward", x, dims, keepdim);
}
Tensor max(const Tensor& x) { return extremum_reduce(Extremum::Max, "max", "MaxBackward", x, {}, false); }
Tensor min(const Tensor& x) { return extremum_reduce(Extremum::Min, "min", "MinBackward", x, {}, false); }

std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_extremum_op(Extremum::Max, "max", "MaxBackward", x, dim, keepdim, true);
}
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_extremum_op(Extremum::Min, "min", "MinBackward", x, dim, keepdim, true);
}
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_extremum_op(Extremum::Max, "argmax", "", x, dim, keepdim, false).second;
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_extremum_op(Extremum::Min, "argmin", "", x, dim, keepdim, false).second;
}
Tensor argmax(const Tensor& x) {
  return arg_extremum_op(Extremum::Max, "argmax", "", x, std::nullopt, false, false).second;
}

}  // namespace ember
