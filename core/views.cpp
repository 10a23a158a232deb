// View ops: new geometry over the same Storage. Each is differentiable; its backward maps the
// view's gradient back to the base's shape.

#include "../layers/elementwise.h"
#include "autograd.h"
#include "tensor.h"

namespace ember {

namespace {

// A view of `self` with new geometry; records `backward` when self requires grad.
Tensor make_view(const Tensor& self, const Shape& shape, const Strides& strides, int64_t offset, const char* name,
                 BackwardFn backward) {
  Tensor v = make_tensor(self.storage(), shape, strides, offset, self.dtype());
  if (any_requires_grad({&self})) record(name, {self}, {v}, std::move(backward));
  return v;
}

// Resolves one -1 in a requested shape against numel.
Shape infer_shape(const Shape& requested, int64_t numel, const char* op) {
  Shape s = requested;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      EMBER_CHECK(infer < 0, op, ": only one dimension can be -1 in ", requested);
      infer = i;
    } else {
      EMBER_CHECK(s[i] >= 0, op, ": invalid size ", s[i], " in shape ", requested);
      known *= s[i];
    }
  }
  if (infer >= 0) {
    EMBER_CHECK(known != 0 && numel % known == 0, op, ": shape ", requested, " is invalid for input of size ", numel);
    s[infer] = numel / known;
  }
  EMBER_CHECK(numel_of(s) == numel, op, ": shape ", requested, " is invalid for input of size ", numel);
  return s;
}

// Strides that let `shape` view memory laid out as (old_shape, old_strides), or false when the
// layout cannot be expressed without a copy (PyTorch's computeStride).
bool view_strides(const Shape& old_shape, const Strides& old_strides, const Shape& shape, Strides& out) {
  out = Strides(shape.size(), 1);
  if (numel_of(old_shape) == 0 || old_shape.empty() || shape.empty()) {
    // Empty tensors, scalars, and views to a scalar (numel 1): any layout works.
    out = contiguous_strides(shape);
    return true;
  }
  int view_d = shape.size() - 1;
  int64_t chunk_base_stride = old_strides.size() ? old_strides.back() : 1;
  int64_t tensor_numel = 1, view_numel = 1;
  for (int d = old_shape.size() - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

}  // namespace

Tensor Tensor::view(const Shape& requested) const {
  const Shape s = infer_shape(requested, numel(), "view");
  Strides st;
  EMBER_CHECK(view_strides(shape(), strides(), s, st), "view: size ", s, " is not compatible with the input's size ",
              shape(), " and strides ", strides(), "; use reshape() instead");
  const Shape in_shape = shape();
  return make_view(*this, s, st, offset(), "ViewBackward",
                   [in_shape](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0].reshape(in_shape)}; });
}

Tensor Tensor::reshape(const Shape& requested) const {
  const Shape s = infer_shape(requested, numel(), "reshape");
  Strides st;
  if (view_strides(shape(), strides(), s, st)) return view(s);
  return contiguous().view(s);
}

Tensor Tensor::permute(const Dims& dims) const {
  EMBER_CHECK(dims.size() == dim(), "permute: ", dims.size(), " dims given for a tensor of shape ", shape());
  Shape s(dim(), 0);
  Strides st(dim(), 0);
  Dims inverse(dim(), -1);
  for (int i = 0; i < dim(); ++i) {
    const int d = normalize_dim(dims[i], dim(), "permute");
    EMBER_CHECK(inverse[d] == -1, "permute: dim ", dims[i], " repeats in ", dims);
    inverse[d] = i;
    s[i] = shape()[d];
    st[i] = strides()[d];
  }
  return make_view(*this, s, st, offset(), "PermuteBackward",
                   [inverse](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0].permute(inverse)}; });
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (dim() == 0) return *this;
  const int a = normalize_dim(d0, dim(), "transpose"), b = normalize_dim(d1, dim(), "transpose");
  Dims p(dim(), 0);
  for (int i = 0; i < dim(); ++i) p[i] = i;
  std::swap(p[a], p[b]);
  return permute(p);
}

Tensor Tensor::t() const {
  EMBER_CHECK(dim() <= 2, "t: expects a tensor with <= 2 dimensions, got shape ", shape());
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::slice(int64_t dim_, int64_t start, int64_t end, int64_t step) const {
  const int d = normalize_dim(dim_, dim(), "slice");
  EMBER_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = shape();
  Strides st = strides();
  s[d] = (end - start + step - 1) / step;
  st[d] = strides()[d] * step;
  const Shape in_shape = shape();
  const DType dt = dtype();
  const Device dev = device();
  return make_view(*this, s, st, offset() + start * strides()[d], "SliceBackward",
                   [=](const std::vector<Tensor>& g) {
                     Tensor gi = zeros(in_shape, {.dtype = dt, .device = dev});
                     gi.slice(d, start, end, step).copy_(g[0]);
                     return std::vector<Tensor>{gi};
                   });
}

Tensor Tensor::narrow(int64_t dim_, int64_t start, int64_t length) const {
  const int d = normalize_dim(dim_, dim(), "narrow");
  const int64_t n = shape()[d];
  if (start < 0) start += n;
  EMBER_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow: start ", start, " + length ", length,
              " exceeds dimension ", d, " of size ", n, " (shape ", shape(), ")");
  return slice(d, start, start + length, 1);
}

Tensor Tensor::select(int64_t dim_, int64_t index) const {
  const int d = normalize_dim(dim_, dim(), "select");
  EMBER_CHECK(dim() > 0, "select: cannot select from a 0-dim tensor");
  const int64_t n = shape()[d];
  EMBER_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dimension ", d, " of size ",
              n, " (shape ", shape(), ")");
  if (index < 0) index += n;
  Shape s = shape();
  Strides st = strides();
  const int64_t off = offset() + index * strides()[d];
  s.erase(d);
  st.erase(d);
  const Shape in_shape = shape();
  const DType dt = dtype();
  const Device dev = device();
  return make_view(*this, s, st, off, "SelectBackward", [=](const std::vector<Tensor>& g) {
    Tensor gi = zeros(in_shape, {.dtype = dt, .device = dev});
    gi.select(d, index).copy_(g[0]);
    return std::vector<Tensor>{gi};
  });
}

Tensor Tensor::expand(const Shape& target) const {
  EMBER_CHECK(target.size() >= dim(), "expand: the target shape ", target, " has fewer dimensions than ", shape());
  Shape s(target.size(), 0);
  Strides st(target.size(), 0);
  const int lead = target.size() - dim();
  for (int i = 0; i < target.size(); ++i) {
    const int j = i - lead;
    const int64_t want = target[i];
    if (j < 0) {
      EMBER_CHECK(want >= 0, "expand: -1 is not allowed for a new leading dimension in ", target);
      s[i] = want;
      st[i] = 0;
      continue;
    }
    const int64_t have = shape()[j];
    if (want == -1 || want == have) {
      s[i] = have;
      st[i] = strides()[j];
    } else {
      EMBER_CHECK(have == 1, "expand: the expanded size ", want, " must match the existing size ", have,
                  " at dimension ", i, " (shape ", shape(), " to ", target, ")");
      s[i] = want;
      st[i] = 0;
    }
  }
  const Shape in_shape = shape();
  return make_view(*this, s, st, offset(), "ExpandBackward",
                   [in_shape](const std::vector<Tensor>& g) { return std::vector<Tensor>{sum_to(g[0], in_shape)}; });
}

Tensor Tensor::squeeze() const {
  Shape s;
  for (int64_t d : shape())
    if (d != 1) s.push_back(d);
  return view(s);  // removing size-1 dims is always a valid view
}

Tensor Tensor::squeeze(int64_t dim_) const {
  if (dim() == 0) return *this;
  const int d = normalize_dim(dim_, dim(), "squeeze");
  if (shape()[d] != 1) return *this;
  Shape s = shape();
  s.erase(d);
  return view(s);
}

Tensor Tensor::unsqueeze(int64_t dim_) const {
  const int d = normalize_dim(dim_, dim() + 1, "unsqueeze");
  Shape s = shape();
  s.insert(d, 1);
  return view(s);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  const int a = normalize_dim(start_dim, dim(), "flatten"), b = normalize_dim(end_dim, dim(), "flatten");
  EMBER_CHECK(a <= b, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim);
  Shape s;
  for (int i = 0; i < a; ++i) s.push_back(shape()[i]);
  int64_t m = 1;
  for (int i = a; i <= b; ++i) m *= shape()[i];
  s.push_back(m);
  for (int i = b + 1; i < dim(); ++i) s.push_back(shape()[i]);
  return reshape(s);
}

Tensor Tensor::unflatten(int64_t dim_, const Shape& sizes) const {
  const int d = normalize_dim(dim_, dim(), "unflatten");
  const Shape inner = infer_shape(sizes, shape()[d], "unflatten");
  Shape s;
  for (int i = 0; i < d; ++i) s.push_back(shape()[i]);
  for (int64_t v : inner) s.push_back(v);
  for (int i = d + 1; i < dim(); ++i) s.push_back(shape()[i]);
  return view(s);
}

}  // namespace ember
