// CPU indexing kernels (Note [Index kernels] in index.h).

#include "index.h"

#include <array>
#include <atomic>
#include <cstring>

#include "../../core/error.h"
#include "loops.h"
#include "../../core/cpu/parallel.h"

namespace ember::kernels::cpu {

namespace {

constexpr int64_t kIndexGrain = 32768;

// Calls line(base) once per combination of the coordinates other than `dim`, with base[k] the
// offset of operand k at that combination and p[dim] = 0. The combinations are split across
// threads; the caller walks `dim` inside `line`.
template <int N, typename F>
void for_each_line(const IterShape& shape, int dim, const std::array<const int64_t*, N>& strides, const F& line) {
  int64_t outer = 1;
  for (int d = 0; d < shape.ndim; ++d)
    if (d != dim) outer *= shape.sizes[d];
  const int64_t len = shape.sizes[dim];
  if (outer == 0 || len == 0) return;
  parallel_for(0, outer, std::max<int64_t>(1, kIndexGrain / len), [&](int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; ++o) {
      std::array<int64_t, N> base{};
      int64_t rem = o;
      for (int d = shape.ndim - 1; d >= 0; --d) {
        if (d == dim) continue;
        const int64_t c = rem % shape.sizes[d];
        rem /= shape.sizes[d];
        for (int k = 0; k < N; ++k) base[k] += c * strides[k][d];
      }
      line(base);
    }
  });
}

}  // namespace

void gather(DType dtype, const IterShape& shape, int dim, Operand out, Operand x, DType index_dtype, Operand index) {
  EMBER_DISPATCH_INDEX(index_dtype, "gather", [&] {
    using index_t = scalar_t;
    EMBER_DISPATCH_BYTES(dtype, "gather", [&] {
      using T = scalar_t;
      T* o = static_cast<T*>(out.data);
      const T* xp = static_cast<const T*>(x.data);
      const index_t* ip = static_cast<const index_t*>(index.data);
      const int64_t so = out.strides[dim], sx = x.strides[dim], si = index.strides[dim], len = shape.sizes[dim];
      for_each_line<3>(shape, dim, {out.strides, x.strides, index.strides}, [&](const std::array<int64_t, 3>& b) {
        for (int64_t j = 0; j < len; ++j) {
          const int64_t v = static_cast<int64_t>(ip[b[2] + j * si]);
          o[b[0] + j * so] = xp[b[1] + v * sx];
        }
      });
    });
  });
}

void scatter_add(DType dtype, const IterShape& shape, int dim, Operand out, Operand src, DType index_dtype,
                 Operand index) {
  EMBER_DISPATCH_INDEX(index_dtype, "scatter_add", [&] {
    using index_t = scalar_t;
    EMBER_DISPATCH_ADDABLE(dtype, "scatter_add", [&] {
      using T = scalar_t;
      T* o = static_cast<T*>(out.data);
      const T* sp = static_cast<const T*>(src.data);
      const index_t* ip = static_cast<const index_t*>(index.data);
      const int64_t so = out.strides[dim], ss = src.strides[dim], si = index.strides[dim], len = shape.sizes[dim];
      for_each_line<3>(shape, dim, {out.strides, src.strides, index.strides}, [&](const std::array<int64_t, 3>& b) {
        for (int64_t j = 0; j < len; ++j) {
          const int64_t v = static_cast<int64_t>(ip[b[2] + j * si]);
          o[b[0] + v * so] += sp[b[1] + j * ss];
        }
      });
    });
  });
}

bool indices_in_range(DType index_dtype, const IterShape& shape, Operand index, int64_t size, int64_t* bad) {
  std::atomic<bool> found{false};
  std::atomic<int64_t> value{0};
  EMBER_DISPATCH_INDEX(index_dtype, "index", [&] {
    cpu_foreach<const scalar_t>(shape, {index}, [&](const scalar_t& v) {
      const auto i = static_cast<int64_t>(v);
      if (i < 0 || i >= size) {
        bool expected = false;
        if (found.compare_exchange_strong(expected, true)) value.store(i);
      }
    });
  });
  if (found.load()) *bad = value.load();
  return !found.load();
}

void one_hot(DType out_dtype, DType label_dtype, int64_t n, const void* labels, int64_t num_classes, void* out) {
  std::memset(out, 0, static_cast<size_t>(n * num_classes * dtype_size(out_dtype)));
  EMBER_DISPATCH_INDEX(label_dtype, "one_hot", [&] {
    const scalar_t* lp = static_cast<const scalar_t*>(labels);
    EMBER_DISPATCH_ALL(out_dtype, "one_hot", [&] {
      scalar_t* o = static_cast<scalar_t*>(out);
      const scalar_t one = static_cast<scalar_t>(1.0f);
      parallel_for(0, n, kIndexGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) o[i * num_classes + static_cast<int64_t>(lp[i])] = one;
      });
    });
  });
}

}  // namespace ember::kernels::cpu
