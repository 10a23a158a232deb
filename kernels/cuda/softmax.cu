// CUDA softmax and log-softmax along the middle dim of (outer, n, inner) (contracts in
// softmax.h; the CPU reference is kernels/cpu/softmax.cpp).
//
// Parallel decomposition: one *line* x[o, 0..n, i] per group of G threads.
//   inner == 1 (softmax over the last dim, the classifier case): a line is a contiguous row, so
//     a warp (rows up to 1024) or a whole block (longer rows) owns it and its lanes read
//     consecutive elements (coalesced). One pass computes the max and the sum of exponentials
//     together (Note [Online logsumexp] in logsumexp.cuh), shuffles combine the lanes, and a
//     second pass writes the outputs.
//   inner > 1 (softmax over a middle dim, e.g. channels of (N, C, H, W)): a line's elements are
//     `inner` apart, but neighbouring lines are neighbours in memory, so one thread owns a line
//     (G = 1) and a warp's 32 threads read 32 consecutive addresses at every step k.
// Sums and exponentials are in acc_t<T> (float for f16/bf16/f32, double for f64; Note
// [Accumulation types] in core/dtype.h); the CPU reference sums f32 in double.

#include "launch.h"

#include "softmax.h"

#include <cmath>
#include <cstdint>

#include "../../core/error.h"
#include "common.cuh"
#include "logsumexp.cuh"
#include "../../core/cuda/runtime.h"

namespace ember::kernels::gpu {

namespace {

using detail::group_sum;
using detail::kThreads;

// Group size for lines of n elements `inner` apart.
int line_group(int64_t n, int64_t inner) {
  if (inner > 1 || n <= 8) return 1;
  return n <= 1024 ? detail::kWarp : kThreads;
}

template <int G, typename T, SoftmaxKind kKind>
__global__ void softmax_forward_kernel(int64_t lines, int64_t n, int64_t inner, const T* x, T* y) {
  EMBER_GROUP_LOOP(G, lines, line, lane) {
    const int64_t base = (line / inner) * n * inner + line % inner;
    const T* xl = x + base;
    T* yl = y + base;
    using A = acc_t<T>;
    const auto load = [xl, inner](int64_t k) { return static_cast<A>(xl[k * inner]); };
    const detail::MaxSum<A> ms = detail::line_max_sum<G, A>(n, lane, load);
    if constexpr (kKind == SoftmaxKind::Softmax) {
      for (int64_t k = lane; k < n; k += G) yl[k * inner] = static_cast<T>(std::exp(load(k) - ms.m) / ms.s);
    } else {
      const A shift = ms.m + std::log(ms.s);  // the line's logsumexp
      for (int64_t k = lane; k < n; k += G) yl[k * inner] = static_cast<T>(load(k) - shift);
    }
  }
}

// softmax: grad_x = y * (grad_y - sum(grad_y * y)); log_softmax: grad_x = grad_y - exp(y) * sum(grad_y).
template <int G, typename T, SoftmaxKind kKind>
__global__ void softmax_backward_kernel(int64_t lines, int64_t n, int64_t inner, T* grad_x, const T* grad_y,
                                        const T* y) {
  EMBER_GROUP_LOOP(G, lines, line, lane) {
    using A = acc_t<T>;
    const int64_t base = (line / inner) * n * inner + line % inner;
    A dot = 0;
    for (int64_t k = lane; k < n; k += G) {
      const int64_t e = base + k * inner;
      if constexpr (kKind == SoftmaxKind::Softmax) dot += static_cast<A>(grad_y[e]) * static_cast<A>(y[e]);
      else dot += static_cast<A>(grad_y[e]);
    }
    dot = group_sum<G>(dot);
    for (int64_t k = lane; k < n; k += G) {
      const int64_t e = base + k * inner;
      const A yv = static_cast<A>(y[e]), g = static_cast<A>(grad_y[e]);
      if constexpr (kKind == SoftmaxKind::Softmax) grad_x[e] = static_cast<T>(yv * (g - dot));
      else grad_x[e] = static_cast<T>(g - std::exp(yv) * dot);
    }
  }
}

}  // namespace

void softmax_forward(SoftmaxKind kind, DType dtype, int64_t outer, int64_t n, int64_t inner, const void* x, void* y) {
  const char* op = kind == SoftmaxKind::Softmax ? "softmax" : "log_softmax";
  EMBER_DISPATCH_FLOATING(dtype, op, [&] {
    using T = scalar_t;
    const int64_t lines = outer * inner;
    if (lines == 0 || n == 0) return;
    const auto* xs = static_cast<const T*>(x);
    auto* ys = static_cast<T*>(y);
    // Declared (Note [Launch ledger]): x read once, y written once, ~4 operations per element.
    const double bytes = static_cast<double>(lines) * static_cast<double>(n) * sizeof(T);
    auto declared = [&] { return cuda::cost(bytes, bytes, 4 * bytes / sizeof(T)); };
    detail::with_group(line_group(n, inner), [&]<int G>() {
      const unsigned grid = detail::grid_for_groups<G>(lines);
      const cudaStream_t stream = cuda::current_stream();
      if (kind == SoftmaxKind::Softmax)
        EMBER_LAUNCH((softmax_forward_kernel<G, T, SoftmaxKind::Softmax>), grid, kThreads, 0, stream, declared(), lines, n, inner,
                     xs, ys);
      else
        EMBER_LAUNCH((softmax_forward_kernel<G, T, SoftmaxKind::LogSoftmax>), grid, kThreads, 0, stream, declared(), lines, n,
                     inner, xs, ys);
    });
    cuda::check_launch(op);
  });
}

void softmax_backward(SoftmaxKind kind, DType dtype, int64_t outer, int64_t n, int64_t inner, void* grad_x,
                      const void* grad_y, const void* y) {
  const char* op = kind == SoftmaxKind::Softmax ? "softmax backward" : "log_softmax backward";
  EMBER_DISPATCH_FLOATING(dtype, op, [&] {
    using T = scalar_t;
    const int64_t lines = outer * inner;
    if (lines == 0 || n == 0) return;
    auto* gx = static_cast<T*>(grad_x);
    const auto* gy = static_cast<const T*>(grad_y);
    const auto* ys = static_cast<const T*>(y);
    // Declared (Note [Launch ledger]): grad_y and y read once, grad_x written once.
    const double bytes = static_cast<double>(lines) * static_cast<double>(n) * sizeof(T);
    auto declared = [&] { return cuda::cost(2 * bytes, bytes, 3 * bytes / sizeof(T)); };
    detail::with_group(line_group(n, inner), [&]<int G>() {
      const unsigned grid = detail::grid_for_groups<G>(lines);
      const cudaStream_t stream = cuda::current_stream();
      if (kind == SoftmaxKind::Softmax)
        EMBER_LAUNCH((softmax_backward_kernel<G, T, SoftmaxKind::Softmax>), grid, kThreads, 0, stream, declared(), lines, n, inner,
                     gx, gy, ys);
      else
        EMBER_LAUNCH((softmax_backward_kernel<G, T, SoftmaxKind::LogSoftmax>), grid, kThreads, 0, stream, declared(), lines, n,
                     inner, gx, gy, ys);
    });
    cuda::check_launch(op);
  });
}

}  // namespace ember::kernels::gpu
