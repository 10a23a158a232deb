#pragma once
// The CPU elementwise loop: applies f to every position of an N-operand strided iteration.
//
// cpu_foreach<Ts...>(shape, ops, f) calls f(x0, x1, ..., xN-1) with references to the elements
// (typed Ts...) of each operand at the same logical position. Steps:
//   1. coalesce: merge adjacent dims that are contiguous with each other in every operand, so a
//      contiguous tensor becomes one long dim;
//   2. split the flattened range across threads (parallel_for);
//   3. cut each chunk into runs along the innermost dim (an odometer over the outer dims; a
//      single coalesced dim, as for every contiguous operand set, is one run per chunk) and call
//      f on each element of a run in a tight loop; when every operand has stride 1 innermost,
//      that loop is a plain indexed loop the compiler vectorizes.
// Steps 1-3 are for_each_run (loops.cpp), compiled once per operand count; only the loop over one
// run is compiled per f and element types (Note [Elementwise loops compiled once]).

#include <array>
#include <cstdint>
#include <tuple>
#include <utility>

#include "../strided.h"

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

// One run of the walk: n elements; operand k's first one at data[k], the next strides[k] elements
// further on; contiguous when every stride is 1.
template <int N>
struct Run {
  void* data[N];
  int64_t strides[N];
  int64_t n;
  bool contiguous;
};

// The loop over one run, for f and the element types Ts (f is passed as a pointer to it).
template <int N>
using RunLoop = void (*)(const void* f, const Run<N>& run);

// Steps 1-3 of the header: calls loop(f, run) for each run of the iteration, from the threads of
// parallel_for (chunks of at least `grain` elements). elem_bytes[k]: operand k's element size.
template <int N>
void for_each_run(const IterShape& shape, const std::array<Operand, N>& ops, const std::array<int, N>& elem_bytes,
                  int64_t grain, RunLoop<N> loop, const void* f);
extern template void for_each_run<1>(const IterShape&, const std::array<Operand, 1>&, const std::array<int, 1>&,
                                     int64_t, RunLoop<1>, const void*);
extern template void for_each_run<2>(const IterShape&, const std::array<Operand, 2>&, const std::array<int, 2>&,
                                     int64_t, RunLoop<2>, const void*);
extern template void for_each_run<3>(const IterShape&, const std::array<Operand, 3>&, const std::array<int, 3>&,
                                     int64_t, RunLoop<3>, const void*);
extern template void for_each_run<4>(const IterShape&, const std::array<Operand, 4>&, const std::array<int, 4>&,
                                     int64_t, RunLoop<4>, const void*);
extern template void for_each_run<5>(const IterShape&, const std::array<Operand, 5>&, const std::array<int, 5>&,
                                     int64_t, RunLoop<5>, const void*);

// The RunLoop of f over elements typed Ts: f(x0[j], x1[j], ...) for j in [0, run.n).
template <typename F, typename... Ts>
void run_loop(const void* fp, const Run<sizeof...(Ts)>& run) {
  // A copy of f on the stack: its captured values (a scale, the clamp bounds) stay in registers,
  // since no store through the operand pointers can reach a local whose address is not taken.
  const F f = *static_cast<const F*>(fp);
  [&]<size_t... I>(std::index_sequence<I...>) {
    const std::tuple<Ts*...> p{static_cast<Ts*>(run.data[I])...};
    const int64_t n = run.n;
    if (run.contiguous) {
      for (int64_t j = 0; j < n; ++j) f(std::get<I>(p)[j]...);
    } else {
      for (int64_t j = 0; j < n; ++j) f(std::get<I>(p)[j * run.strides[I]]...);
    }
  }(std::index_sequence_for<Ts...>{});
}

// Ts: the element type of each operand, in order.
template <typename... Ts, typename F>
void cpu_foreach(const IterShape& shape, const std::array<Operand, sizeof...(Ts)>& ops, const F& f,
                 int64_t grain = kElementwiseGrain) {
  for_each_run<sizeof...(Ts)>(shape, ops, {static_cast<int>(sizeof(Ts))...}, grain, &run_loop<F, Ts...>, &f);
}

}  // namespace ember::kernels::cpu
