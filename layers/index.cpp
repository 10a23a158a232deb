// Joining, splitting and indexing with autograd.
//
// cat writes each input into a narrow() slice of the output (copy_ does strides and dtype
// conversion), and its backward hands each input the matching slice of the gradient. split and
// chunk are narrow() views, so autograd comes with the views. index_select, gather and
// scatter_add share the kernels in kernels/cpu/index.h: index_select is a gather whose index is
// broadcast along every dim but `dim`, and the backward of either is a scatter_add.

#include "index.h"

#include <algorithm>

#include "../core/autocast.h"
#include "../core/op_helpers.h"
#include "../kernels/cpu/index.h"

#if EMBER_CUDA_BACKEND
#include "../kernels/cuda/index.h"
#endif

namespace ember {

namespace {

// Throws "<op>: index tensor must be int64 or int32, got (2,) float32 cpu".
void check_index_dtype(const char* op, const Tensor& index) {
  EMBER_CHECK(index.dtype() == DType::i64 || index.dtype() == DType::i32, op,
              ": index tensor must be int64 or int32, got ", describe(index));
}

// Throws when some value of `index` (read over `shape` through `ind`) is outside [0, size).
void check_index_range(const char* op, const Tensor& index, const Shape& shape, const kernels::Operand& ind,
                       int dim, int64_t size) {
  int64_t bad = 0;
  bool ok = true;
  detail::check_not_capturing(index.device(), op, "checks on the host that every index is in range");
  EMBER_KERNEL_CALL_INTO(ok, index.device(), op, indices_in_range, index.dtype(), detail::iter_shape(shape), ind, size,
                         &bad);
  EMBER_CHECK(ok, op, ": index ", bad, " is out of bounds for dimension ", dim, " with size ", size);
}

// An operand over t with t's own strides (for the indexed operand, whose shape may differ from
// the iteration shape: see Note [Index kernels]).
kernels::Operand raw_operand(const Tensor& t) {
  kernels::Operand op;
  op.data = t.data();
  for (int d = 0; d < t.dim(); ++d) op.strides[d] = t.strides()[d];
  return op;
}

// A 1-D index (contiguous) read over `shape` as if it were broadcast along every dim but `dim`.
kernels::Operand broadcast_index(const Tensor& index1d, int dim) {
  kernels::Operand op;
  op.data = index1d.data();
  op.strides[dim] = 1;
  return op;
}

// Note [Low-precision scatter]
// The scatter_add kernels add with atomics in the element's own type, which f16/bf16 would round
// at every add; so a 16-bit scatter_add (the op, and the backward of index_select and gather)
// adds into a float32 tensor and rounds the result to the 16-bit dtype once.
DType accumulation_dtype(DType dt) { return is_low_precision(dt) ? DType::f32 : dt; }

// out[p with p[dim] := index[p]] += src[p] over `shape`; out is modified in place.
void scatter_add_into(const char* op, Tensor& out, int dim, const Shape& shape, const kernels::Operand& src,
                      const Tensor& index, const kernels::Operand& ind) {
  EMBER_KERNEL_CALL(out.device(), op, scatter_add, out.dtype(), detail::iter_shape(shape), dim, raw_operand(out), src,
                    index.dtype(), ind);
  out.bump_version();
}

// out[p] = x[p with p[dim] := index[p]] over `shape` (out is contiguous of that shape).
Tensor gather_kernel(const char* op, const Tensor& x, int dim, const Shape& shape, const Tensor& index,
                     const kernels::Operand& ind) {
  Tensor out = empty(shape, {.dtype = x.dtype(), .device = x.device()});
  EMBER_KERNEL_CALL(x.device(), op, gather, x.dtype(), detail::iter_shape(shape), dim, detail::operand(out),
                    raw_operand(x), index.dtype(), ind);
  return out;
}

}  // namespace

// ---- cat / stack ----------------------------------------------------------------------------------

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim0) {
  EMBER_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  const Tensor& first = tensors[0];
  EMBER_CHECK(first.defined(), "cat: tensor at position 0 is undefined");
  EMBER_CHECK(first.dim() > 0, "cat: zero-dimensional tensor (at position 0) cannot be concatenated");
  const int dim = normalize_dim(dim0, first.dim(), "cat");
  Shape shape = first.shape();
  shape[dim] = 0;
  DType dt = first.dtype();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    EMBER_CHECK(t.defined(), "cat: tensor at position ", i, " is undefined");
    EMBER_CHECK(t.dim() == first.dim(), "cat: tensors must have the same number of dimensions: got ", describe(first),
                " at position 0 and ", describe(t), " at position ", i);
    for (int d = 0; d < t.dim(); ++d)
      EMBER_CHECK(d == dim || t.shape()[d] == first.shape()[d], "cat: sizes of tensors must match except in dimension ",
                  dim, ": expected size ", first.shape()[d], " but got size ", t.shape()[d], " in dimension ", d,
                  " for the tensor at position ", i, " (", describe(first), " and ", describe(t), ")");
    detail::check_same_device("cat", first, t);
    dt = promote_types(dt, t.dtype());
    shape[dim] += t.shape()[dim];
  }
  Tensor out = empty(shape, {.dtype = dt, .device = first.device()});
  {
    NoGradGuard no_grad;
    int64_t offset = 0;
    for (const Tensor& t : tensors) {
      out.narrow(dim, offset, t.shape()[dim]).copy_(t);
      offset += t.shape()[dim];
    }
  }
  if (any_requires_grad(tensors)) {
    std::vector<int64_t> sizes;
    std::vector<DType> dtypes;
    std::vector<bool> need;
    for (const Tensor& t : tensors) {
      sizes.push_back(t.shape()[dim]);
      dtypes.push_back(t.dtype());
      need.push_back(t.requires_grad());
    }
    record("CatBackward", tensors, {out}, [=](const std::vector<Tensor>& g) {
      std::vector<Tensor> r(sizes.size());
      if (!g[0].defined()) return r;
      int64_t offset = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        if (need[i]) r[i] = g[0].narrow(dim, offset, sizes[i]).to(dtypes[i]);
        offset += sizes[i];
      }
      return r;
    });
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim0) {
  EMBER_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  EMBER_CHECK(tensors[0].defined(), "stack: tensor at position 0 is undefined");
  const int dim = normalize_dim(dim0, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    EMBER_CHECK(tensors[i].defined(), "stack: tensor at position ", i, " is undefined");
    EMBER_CHECK(tensors[i].shape() == tensors[0].shape(), "stack: expects each tensor to be equal size, but got ",
                describe(tensors[0]), " at position 0 and ", describe(tensors[i]), " at position ", i);
    parts.push_back(tensors[i].unsqueeze(dim));
  }
  return cat(parts, dim);
}

// ---- split / chunk --------------------------------------------------------------------------------

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim0) {
  EMBER_CHECK(x.dim() > 0, "split: cannot split a zero-dimensional tensor");
  const int dim = normalize_dim(dim0, x.dim(), "split");
  const int64_t n = x.shape()[dim];
  EMBER_CHECK(split_size > 0 || (split_size == 0 && n == 0), "split: split_size must be positive, got ", split_size,
              " for dimension ", dim, " of size ", n);
  if (n == 0) return {x.narrow(dim, 0, 0)};
  std::vector<Tensor> parts;
  for (int64_t start = 0; start < n; start += split_size)
    parts.push_back(x.narrow(dim, start, std::min(split_size, n - start)));
  return parts;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim0) {
  EMBER_CHECK(x.dim() > 0, "split: cannot split a zero-dimensional tensor");
  const int dim = normalize_dim(dim0, x.dim(), "split");
  const int64_t n = x.shape()[dim];
  int64_t total = 0;
  for (int64_t s : sizes) {
    EMBER_CHECK(s >= 0, "split: split sizes must be non-negative, got ", s);
    total += s;
  }
  EMBER_CHECK(total == n, "split: split sizes must sum to ", n, " (dimension ", dim, " of ", describe(x), "), got ",
              total);
  std::vector<Tensor> parts;
  int64_t start = 0;
  for (int64_t s : sizes) {
    parts.push_back(x.narrow(dim, start, s));
    start += s;
  }
  return parts;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim0) {
  EMBER_CHECK(chunks > 0, "chunk: number of chunks must be positive, got ", chunks);
  EMBER_CHECK(x.dim() > 0, "chunk: cannot chunk a zero-dimensional tensor");
  const int dim = normalize_dim(dim0, x.dim(), "chunk");
  const int64_t n = x.shape()[dim];
  // As PyTorch: pieces of ceil(n / chunks), so there may be fewer than `chunks` of them; an empty
  // dim gives `chunks` empty pieces.
  if (n == 0) return split(x, std::vector<int64_t>(static_cast<size_t>(chunks), 0), dim);
  return split(x, (n + chunks - 1) / chunks, dim);
}

// ---- index_select / gather / scatter_add ----------------------------------------------------------

Tensor index_select(const Tensor& x, int64_t dim0, const Tensor& index0) {
  EMBER_CHECK(x.dim() > 0, "index_select: expected an input with at least one dimension, got ", describe(x));
  check_index_dtype("index_select", index0);
  EMBER_CHECK(index0.dim() <= 1, "index_select: index must be a 1-D tensor, got ", describe(index0));
  detail::check_same_device("index_select", x, index0);
  const int dim = normalize_dim(dim0, x.dim(), "index_select");
  const Tensor index = index0.reshape({index0.numel()}).contiguous();
  Shape shape = x.shape();
  shape[dim] = index.numel();
  const kernels::Operand ind = broadcast_index(index, dim);
  check_index_range("index_select", index, index.shape(), detail::operand(index), dim, x.shape()[dim]);
  Tensor out = gather_kernel("index_select", x, dim, shape, index, ind);
  if (any_requires_grad({&x})) {
    SavedTensor si(index, "IndexSelectBackward");
    const Shape in_shape = x.shape();
    const DType dt = x.dtype();
    record("IndexSelectBackward", {x}, {out}, [=](const std::vector<Tensor>& g) {
      if (!g[0].defined()) return std::vector<Tensor>{Tensor()};
      const Tensor gv = g[0].to(accumulation_dtype(dt));
      const Tensor& idx = si.get();
      Tensor gx = zeros(in_shape, {.dtype = gv.dtype(), .device = gv.device()});
      scatter_add_into("index_select backward", gx, dim, shape, detail::operand(gv), idx, broadcast_index(idx, dim));
      return std::vector<Tensor>{gx.to(dt)};
    });
  }
  return out;
}

namespace {
// Checks index against `t` (named `what`) for gather/scatter_add: same ndim and index.size(d) <=
// t.size(d) for every d (except `dim` when skip_dim).
void check_index_fits(const char* op, const char* what, const Tensor& index, const Tensor& t, int dim, bool skip_dim) {
  EMBER_CHECK(index.dim() == t.dim(), op, ": index must have the same number of dimensions as ", what, ", got index ",
              describe(index), " and ", what, " ", describe(t));
  for (int d = 0; d < t.dim(); ++d)
    EMBER_CHECK((skip_dim && d == dim) || index.shape()[d] <= t.shape()[d], op, ": index size ", index.shape()[d],
                " exceeds the size ", t.shape()[d], " of ", what, " in dimension ", d, " (index ", describe(index),
                ", ", what, " ", describe(t), ")");
}
}  // namespace

Tensor gather(const Tensor& x, int64_t dim0, const Tensor& index) {
  EMBER_CHECK(x.dim() > 0, "gather: expected an input with at least one dimension, got ", describe(x));
  check_index_dtype("gather", index);
  detail::check_same_device("gather", x, index);
  const int dim = normalize_dim(dim0, x.dim(), "gather");
  check_index_fits("gather", "input", index, x, dim, true);
  const kernels::Operand ind = raw_operand(index);
  check_index_range("gather", index, index.shape(), ind, dim, x.shape()[dim]);
  Tensor out = gather_kernel("gather", x, dim, index.shape(), index, ind);
  if (any_requires_grad({&x})) {
    SavedTensor si(index, "GatherBackward");
    const Shape in_shape = x.shape();
    const DType dt = x.dtype();
    record("GatherBackward", {x}, {out}, [=](const std::vector<Tensor>& g) {
      if (!g[0].defined()) return std::vector<Tensor>{Tensor()};
      const Tensor gv = g[0].to(accumulation_dtype(dt));
      const Tensor& idx = si.get();
      Tensor gx = zeros(in_shape, {.dtype = gv.dtype(), .device = gv.device()});
      scatter_add_into("gather backward", gx, dim, idx.shape(), raw_operand(gv), idx, raw_operand(idx));
      return std::vector<Tensor>{gx.to(dt)};
    });
  }
  return out;
}

Tensor scatter_add(const Tensor& x, int64_t dim0, const Tensor& index, const Tensor& src) {
  // Under autocast x and src are promoted to the wider dtype (Note [Autocast] in core/autocast.h).
  if (const auto dt = autocast::op_dtype(autocast::CastPolicy::promote, {&x, &src}))
    return scatter_add(autocast::cast(x, *dt), dim0, index, autocast::cast(src, *dt));
  EMBER_CHECK(x.dim() > 0, "scatter_add: expected an input with at least one dimension, got ", describe(x));
  check_index_dtype("scatter_add", index);
  detail::check_same_device("scatter_add", x, index);
  detail::check_same_device("scatter_add", x, src);
  EMBER_CHECK(x.dtype() == src.dtype(), "scatter_add: expected src to have the input's dtype, got input ",
              describe(x), " and src ", describe(src));
  if (is_low_precision(x.dtype()))  // added in float32, rounded once (Note [Low-precision scatter])
    return scatter_add(x.to(DType::f32), dim0, index, src.to(DType::f32)).to(x.dtype());
  const int dim = normalize_dim(dim0, x.dim(), "scatter_add");
  check_index_fits("scatter_add", "src", index, src, dim, false);
  check_index_fits("scatter_add", "input", index, x, dim, true);
  const kernels::Operand ind = raw_operand(index);
  check_index_range("scatter_add", index, index.shape(), ind, dim, x.shape()[dim]);
  Tensor out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  {
    NoGradGuard no_grad;
    out.copy_(x);
  }
  scatter_add_into("scatter_add", out, dim, index.shape(), raw_operand(src), index, ind);
  if (any_requires_grad({&x, &src})) {
    const bool need_x = x.requires_grad(), need_src = src.requires_grad();
    const Shape src_shape = src.shape();
    const DType dt = x.dtype();
    SavedTensor si(need_src ? index : Tensor(), "ScatterAddBackward");
    record("ScatterAddBackward", {x, src}, {out}, [=](const std::vector<Tensor>& g) {
      if (!g[0].defined()) return std::vector<Tensor>(2);
      const Tensor gv = g[0].to(dt);
      Tensor gsrc;
      if (need_src) {
        const Tensor& idx = si.get();
        // src gets gather(g) at the positions the index covers; the rest of src (index may be
        // smaller than src) never reached the output.
        Tensor gathered = gather_kernel("scatter_add backward", gv, dim, idx.shape(), idx, raw_operand(idx));
        if (idx.shape() == src_shape) {
          gsrc = gathered;
        } else {
          gsrc = zeros(src_shape, {.dtype = dt, .device = gv.device()});
          Tensor region = gsrc;
          for (int d = 0; d < region.dim(); ++d) region = region.narrow(d, 0, idx.shape()[d]);
          region.copy_(gathered);
        }
      }
      return std::vector<Tensor>{need_x ? gv : Tensor(), gsrc};
    });
  }
  return out;
}

// ---- one_hot --------------------------------------------------------------------------------------

Tensor one_hot(const Tensor& labels0, int64_t num_classes, DType dtype) {
  EMBER_CHECK(labels0.dtype() == DType::i64 || labels0.dtype() == DType::i32,
              "one_hot: labels must be an int64 or int32 tensor, got ", describe(labels0));
  const Tensor labels = labels0.contiguous();
  if (num_classes == -1) {
    // As PyTorch: infer the class count from the largest label.
    EMBER_CHECK(labels.numel() > 0, "one_hot: cannot infer num_classes (-1) from empty labels ", describe(labels));
    const std::vector<int64_t> v = labels.to_vector<int64_t>();
    num_classes = *std::max_element(v.begin(), v.end()) + 1;
  }
  EMBER_CHECK(num_classes > 0, "one_hot: num_classes must be positive (or -1 to infer it), got ", num_classes);
  int64_t bad = 0;
  bool ok = true;
  detail::check_not_capturing(labels.device(), "one_hot", "checks on the host that every label is in range");
  EMBER_KERNEL_CALL_INTO(ok, labels.device(), "one_hot", indices_in_range, labels.dtype(),
                         detail::iter_shape(labels.shape()), detail::operand(labels), num_classes, &bad);
  EMBER_CHECK(ok, "one_hot: label ", bad, " is out of range for num_classes ", num_classes);
  Shape shape = labels.shape();
  shape.push_back(num_classes);
  Tensor out = empty(shape, {.dtype = dtype, .device = labels.device()});
  EMBER_KERNEL_CALL(labels.device(), "one_hot", one_hot, dtype, labels.dtype(), labels.numel(), labels.data(),
                    num_classes, out.data());
  return out;
}

}  // namespace ember
