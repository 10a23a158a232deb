#pragma once
// The logsumexp of a line (softmax, log_softmax, cross entropy), computed by a group of G
// threads with an online max/sum, with the CPU's results for NaN and infinities.
// Include after "launch.h" and "common.cuh". Private to kernels/cuda.
//
// Note [Online logsumexp]
// The CPU makes two passes over a line: m = max(x) (std::max, which skips NaN), then
// s = sum exp(x - m) (in cpu_acc_t: double for f32). Here (m, s) are acc_t<T> (float for
// f16/bf16/f32, double for f64: Note [Accumulation types] in core/dtype.h), and the online form
// makes one pass: each thread keeps (m, s) with s = sum exp(x - m) over the elements it has
// seen, rescaling s by exp(m_old - m_new) when a larger element arrives; two partial (m, s)
// combine the same way, so the group reduces them with shuffles like any other value. Then
// lse = m + log(s). The cases where the CPU's result is not the mathematical one are kept
// exactly:
//   - a NaN element: skipped by the max, poisons the sum (NaN line), as the CPU;
//   - m not finite (the line's max is +inf, or every element is -inf/NaN, or n == 0): the CPU
//     computes exp(inf - inf) = NaN or exp(-inf - -inf) = NaN terms; rather than reproduce that
//     inside the online update, the group redoes the sum with the final m exactly as the CPU
//     does (a second pass, only on such lines). With m finite, -inf elements contribute
//     exp(-inf) = 0 and are simply skipped by the online update.
// So m is the CPU's value of max(x), and s differs from it by the summation order and, for f32,
// by the float accumulator and float exp (a relative error of a few ulp of float per term's
// share, about log2(n) ulp in all).

#include <cmath>
#include <cstdint>

#include "common.cuh"

namespace ember::kernels::gpu::detail {

// A is the accumulation type (acc_t of the element type).
template <typename A>
struct MaxSum {
  A m, s;
};

template <typename A>
__device__ inline A rescale(const MaxSum<A>& a, A m) {
  return a.m == m ? a.s : a.s * std::exp(a.m - m);
}

template <typename A>
__device__ inline MaxSum<A> lse_push(MaxSum<A> a, A x) {
  if (x != x) {
    a.s = x;  // NaN
  } else if (x == -INFINITY) {
    // contributes std::exp(-inf - m) = 0 when the line's max is finite (else the exact second pass)
  } else if (x > a.m) {
    a.s = rescale(a, x) + A(1);  // std::exp(x - x) = 1
    a.m = x;
  } else {
    a.s += std::exp(x - a.m);
  }
  return a;
}

struct LseCombine {
  template <typename A>
  __device__ MaxSum<A> operator()(const MaxSum<A>& a, const MaxSum<A>& b) const {
    const A m = a.m > b.m ? a.m : b.m;
    return MaxSum<A>{m, rescale(a, m) + rescale(b, m)};
  }
};
struct LseShfl {
  template <typename A>
  __device__ MaxSum<A> operator()(const MaxSum<A>& a, int mask) const {
    return MaxSum<A>{shfl_xor(a.m, mask), shfl_xor(a.s, mask)};
  }
};

// (m, s) of the n elements load(0..n) of a line (load(k) -> A), every group thread taking
// k = lane, lane + G, ...; every thread of the group gets the result.
template <int G, typename A, typename Load>
__device__ MaxSum<A> line_max_sum(int64_t n, int lane, const Load& load) {
  MaxSum<A> a{static_cast<A>(-INFINITY), A(0)};
  for (int64_t k = lane; k < n; k += G) a = lse_push(a, static_cast<A>(load(k)));
  a = group_all_reduce<G>(a, LseCombine{}, LseShfl{});
  if (!(a.m > -INFINITY && a.m < INFINITY)) {  // the CPU's own sum (see the note)
    A s = 0;
    for (int64_t k = lane; k < n; k += G) s += std::exp(load(k) - a.m);
    a.s = group_sum<G>(s);
  }
  return a;
}

}  // namespace ember::kernels::gpu::detail
