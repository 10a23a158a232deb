// The walk of cpu_foreach (kernels/cpu/loops.h): coalesce, split across threads, cut into runs.
//
// Note [Elementwise loops compiled once]
// cpu_foreach runs for every (op, dtype) pair of the elementwise kernels: some 330 of them in
// kernels/cpu/elementwise.cpp (17 unary ops and their gradients in four dtypes, 8 x 8 copies,
// comparisons in every dtype, ...). Written as one template, each pair compiled its own copy of the
// whole walk — the coalescing, two OpenMP regions, the odometer, and four loops (one dim or
// odometer, times contiguous or strided) — and elementwise.cpp took 93 CPU seconds to compile, a
// tenth of the library. The walk does not depend on f or the element types, only on the operand
// count, so it lives here, compiled once for 1 to 5 operands, and calls back through a function
// pointer once per run (a whole chunk for a coalesced shape; an inner row otherwise). What is
// left per pair is run_loop: the two loops over one run (contiguous, which the compiler
// vectorizes, and strided). The elements see the same arithmetic in the same order, so the
// results are the same bits; the indirect call costs a few nanoseconds per run, not per element.

#include "loops.h"

#include <algorithm>

#include "../../core/cpu/parallel.h"

namespace ember::kernels::cpu {

template <int N>
void for_each_run(const IterShape& shape, const std::array<Operand, N>& ops, const std::array<int, N>& elem_bytes,
                  int64_t grain, RunLoop<N> loop, const void* f) {
  std::array<const int64_t*, N> st;
  for (int k = 0; k < N; ++k) st[k] = ops[k].strides;
  const Coalesced<N> c = coalesce<N>(shape, st);
  int64_t total = 1;
  for (int d = 0; d < c.ndim; ++d) total *= c.sizes[d];
  if (total == 0) return;
  const int inner = c.ndim - 1;
  const int64_t inner_size = c.sizes[inner];
  Run<N> proto;
  proto.contiguous = true;
  for (int k = 0; k < N; ++k) {
    proto.strides[k] = c.strides[k][inner];
    if (proto.strides[k] != 1) proto.contiguous = false;
  }
  // The run of `n` elements starting at element offsets off[k].
  auto run_at = [&](const int64_t* off, int64_t n) {
    Run<N> r = proto;
    r.n = n;
    for (int k = 0; k < N; ++k) r.data[k] = static_cast<char*>(ops[k].data) + off[k] * elem_bytes[k];
    loop(f, r);
  };

  if (c.ndim == 1) {
    // One run per chunk, at lo: no odometer (its divisions cost more than a small op's loop).
    parallel_for(0, total, grain, [&](int64_t lo, int64_t hi) {
      int64_t off[N];
      for (int k = 0; k < N; ++k) off[k] = lo * c.strides[k][0];
      run_at(off, hi - lo);
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
      int64_t off[N] = {};
      for (int k = 0; k < N; ++k)
        for (int d = 0; d < c.ndim; ++d) off[k] += idx[d] * c.strides[k][d];
      const int64_t run = std::min(inner_size - idx[inner], hi - pos);
      run_at(off, run);
      pos += run;
      idx[inner] += run;
      for (int d = inner; d > 0 && idx[d] >= c.sizes[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
      }
    }
  });
}

template void for_each_run<1>(const IterShape&, const std::array<Operand, 1>&, const std::array<int, 1>&, int64_t,
                              RunLoop<1>, const void*);
template void for_each_run<2>(const IterShape&, const std::array<Operand, 2>&, const std::array<int, 2>&, int64_t,
                              RunLoop<2>, const void*);
template void for_each_run<3>(const IterShape&, const std::array<Operand, 3>&, const std::array<int, 3>&, int64_t,
                              RunLoop<3>, const void*);
template void for_each_run<4>(const IterShape&, const std::array<Operand, 4>&, const std::array<int, 4>&, int64_t,
                              RunLoop<4>, const void*);
template void for_each_run<5>(const IterShape&, const std::array<Operand, 5>&, const std::array<int, 5>&, int64_t,
                              RunLoop<5>, const void*);

}  // namespace ember::kernels::cpu
