#pragma once
// The CPU elementwise loop: applies f to every position of an N-operand strided iteration.
//
// cpu_foreach<N>(shape, ops, f) calls f(p0, p1, ..., pN-1) with typed pointers to the elements
// of each operand at the same logical position. Steps:
//   1. coalesce: merge adjacent dims that are contiguous with each other in every operand, so a
//      contiguous tensor becomes one long dim;
//   2. split the flattened range across threads (parallel_for);
//   3. walk each chunk with an odometer over the outer dims and a tight inner loop; when every
//      operand has stride 1 innermost, the inner loop is a plain indexed loop the compiler vectorizes.
//      A single coalesced dim (every contiguous operand set) needs no odometer: the chunk is one run.

#include <array>
#include <cstdint>
#include <tuple>
#include <utility>

#include "../strided.h"
#include "../../core/cpu/parallel.h"

namespace ember::kernels::cpu {

inline constexpr int64_t kElementwiseGrain = 32768;

template <int N>
struct Coalesced {
  int ndim;
  int64_t sizes[kMaxDims];
  int64_t strides[N][kMaxDims];
};

template <int N>
Coalesced<N> coalesce(const IterShape& shape, const std::array<const int64_t*, N>& strides) {
  Coalesced<N> c;  // only the first c.ndim entries are written and read
  c.ndim = 0;
  for (int d = 0; d < shape.ndim; ++d) {
    if (shape.sizes[d] == 1) continue;  // size-1 dims never move the pointer
    if (c.ndim > 0) {
      bool merge = true;
      const int last = c.ndim - 1;
      for (int k = 0; k < N; ++k)
        if (c.strides[k][last] != strides[k][d] * shape.sizes[d]) merge = false;
      if (merge) {
        c.sizes[last] *= shape.sizes[d];
        for (int k = 0; k < N; ++k) c.strides[k][last] = strides[k][d];
        continue;
      }
    }
    c.sizes[c.ndim] = shape.sizes[d];
    for (int k = 0; k < N; ++k) c.strides[k][c.ndim] = strides[k][d];
    ++c.ndim;
  }
  if (c.ndim == 0) {  // a scalar, or all size-1 dims: one element
    c.ndim = 1;
    c.sizes[0] = 1;
    for (int k = 0; k < N; ++k) c.strides[k][0] = 1;
  }
  return c;
}

// Ts: the element type of each operand, in order.
template <typename... Ts, typename F>
void cpu_foreach(const IterShape& shape, const std::array<Operand, sizeof...(Ts)>& ops, const F& f,
                 int64_t grain = kElementwiseGrain) {
  constexpr int N = sizeof...(Ts);
  std::array<const int64_t*, N> st;
  for (int k = 0; k < N; ++k) st[k] = ops[k].strides;
  const Coalesced<N> c = coalesce<N>(shape, st);
  int64_t total = 1;
  for (int d = 0; d < c.ndim; ++d) total *= c.sizes[d];
  if (total == 0) return;
  const int inner = c.ndim - 1;
  const int64_t inner_size = c.sizes[inner];
  bool inner_contiguous = true;
  for (int k = 0; k < N; ++k)
    if (c.strides[k][inner] != 1) inner_contiguous = false;

  if (c.ndim == 1) {
    // One run per chunk, at lo: no odometer (its divisions cost more than a small op's loop).
    parallel_for(0, total, grain, [&](int64_t lo, int64_t hi) {
      [&]<size_t... I>(std::index_sequence<I...>) {
        auto ptrs = std::make_tuple((static_cast<Ts*>(ops[I].data) + lo * c.strides[I][0])...);
        if (inner_contiguous) {
          for (int64_t j = 0; j < hi - lo; ++j) f(std::get<I>(ptrs)[j]...);
        } else {
          for (int64_t j = 0; j < hi - lo; ++j) f(std::get<I>(ptrs)[j * c.strides[I][0]]...);
        }
      }(std::make_index_sequence<N>{});
    });
    return;
  }
  parallel_for(0, total, grain, [&](int64_t lo, int64_t hi) {
    // Odometer position of `lo`.
    int64_t idx[kMaxDims];
    int64_t rem = lo;
    for (int d = c.ndim - 1; d >= 0; --d) {
      idx[d] = rem % c.sizes[d];
      rem /= c.sizes[d];
    }
    int64_t pos = lo;
    while (pos < hi) {
      std::array<int64_t, N> off{};
      for (int k = 0; k < N; ++k)
        for (int d = 0; d < c.ndim; ++d) off[k] += idx[d] * c.strides[k][d];
      const int64_t run = std::min(inner_size - idx[inner], hi - pos);
      [&]<size_t... I>(std::index_sequence<I...>) {
        auto ptrs = std::make_tuple((static_cast<Ts*>(ops[I].data) + off[I])...);
        if (inner_contiguous) {
          for (int64_t j = 0; j < run; ++j) f(std::get<I>(ptrs)[j]...);
        } else {
          for (int64_t j = 0; j < run; ++j) f(std::get<I>(ptrs)[j * c.strides[I][inner]]...);
        }
      }(std::make_index_sequence<N>{});
      pos += run;
      idx[inner] += run;
      for (int d = inner; d > 0 && idx[d] >= c.sizes[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
      }
    }
  });
}

}  // namespace ember::kernels::cpu
