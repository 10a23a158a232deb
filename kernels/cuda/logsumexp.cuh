#pragma once
// The logsumexp of a line (softmax, log_softmax, cross entropy), computed by a group of G
// threads with an online max/sum, with the CPU's results for NaN and infinities.
// Include after "launch.h" and "common.cuh". Private to kernels/cuda.
//
// Note [Online logsumexp]
// The CPU makes two passes over a line: m = max(x) (std::max, which skips NaN), then
// s = sum exp(x - m) in double. The online form makes one: each thread keeps (m, s) with
// s = sum exp(x - m) over the elements it has seen, rescaling s by exp(m_old - m_new) when a
// larger element arrives; two partial (m, s) combine the same way, so the group reduces them
// with shuffles like any other value. Then lse = m + log(s). The cases where the CPU's result
// is not the mathematical one are kept exactly:
//   - a NaN element: skipped by the max, poisons the sum (NaN line), as the CPU;
//   - m not finite (the line's max is +inf, or every element is -inf/NaN, or n == 0): the CPU
//     computes exp(inf - inf) = NaN or exp(-inf - -inf) = NaN terms; rather than reproduce that
//     inside the online update, the group redoes the sum with the final m exactly as the CPU
//     does (a second pass, only on such lines). With m finite, -inf elements contribute
//     exp(-inf) = 0 and are simply skipped by the online update.
// So m is bit-identical to the CPU's, and s differs from it only by the summation order.

#include <cmath>
#include <cstdint>

#include "common.cuh"

namespace ember::kernels::gpu::detail {

struct MaxSum {
  double m, s;
};

__device__ inline double rescale(const MaxSum& a, double m) { return a.m == m ? a.s : a.s * std::exp(a.m - m); }

__device__ inline MaxSum lse_push(MaxSum a, double x) {
  if (x != x) {
    a.s = x;  // NaN
  } else if (x == -INFINITY) {
    // contributes std::exp(-inf - m) = 0 when the line's max is finite (else the exact second pass)
  } else if (x > a.m) {
    a.s = rescale(a, x) + 1.0;  // std::exp(x - x) = 1
    a.m = x;
  } else {
    a.s += std::exp(x - a.m);
  }
  return a;
}

struct LseCombine {
  __device__ MaxSum operator()(const MaxSum& a, const MaxSum& b) const {
    const double m = a.m > b.m ? a.m : b.m;
    return MaxSum{m, rescale(a, m) + rescale(b, m)};
  }
};
struct LseShfl {
  __device__ MaxSum operator()(const MaxSum& a, int mask) const {
    return MaxSum{shfl_xor(a.m, mask), shfl_xor(a.s, mask)};
  }
};

// (m, s) of the n elements load(0..n) of a line (load(k) -> double), every group thread taking
// k = lane, lane + G, ...; every thread of the group gets the result.
template <int G, typename Load>
__device__ MaxSum line_max_sum(int64_t n, int lane, const Load& load) {
  MaxSum a{-INFINITY, 0.0};
  for (int64_t k = lane; k < n; k += G) a = lse_push(a, load(k));
  a = group_all_reduce<G>(a, LseCombine{}, LseShfl{});
  if (!(a.m > -INFINITY && a.m < INFINITY)) {  // the CPU's own sum (see the note)
    double s = 0;
    for (int64_t k = lane; k < n; k += G) s += std::exp(load(k) - a.m);
    a.s = group_sum<G>(s);
  }
  return a;
}

}  // namespace ember::kernels::gpu::detail
