// CPU softmax and log-softmax: one line at a time, lines in parallel. Max, sums and exponentials
// in A = cpu_acc_t<T> (double for f32/f64, float for f16/bf16: Note [Accumulation types] in
// core/dtype.h).

#include "softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "../../core/error.h"
#include "../../core/cpu/parallel.h"

namespace ember::kernels::cpu {

namespace {
// Lines per parallel_for chunk: about 32K elements per chunk.
int64_t line_grain(int64_t n) { return n > 0 ? (32768 + n - 1) / n : 32768; }
}  // namespace

void softmax_forward(SoftmaxKind kind, DType dtype, int64_t outer, int64_t n, int64_t inner, const void* x,
                     void* y) {
  EMBER_DISPATCH_FLOATING(dtype, kind == SoftmaxKind::Softmax ? "softmax" : "log_softmax", [&] {
    using T = scalar_t;
    using A = cpu_acc_t<T>;
    const T* src = static_cast<const T*>(x);
    T* dst = static_cast<T*>(y);
    parallel_for(0, outer * inner, line_grain(n), [&](int64_t lo, int64_t hi) {
      for (int64_t line = lo; line < hi; ++line) {
        const int64_t o = line / inner, i = line % inner;
        const T* xl = src + o * n * inner + i;
        T* yl = dst + o * n * inner + i;
        // The max only shifts the exponent (softmax is shift-invariant); NaNs are skipped here
        // and poison the sum below.
        A m = -std::numeric_limits<A>::infinity();
        for (int64_t k = 0; k < n; ++k) m = std::max(m, static_cast<A>(xl[k * inner]));
        A s = 0;
        for (int64_t k = 0; k < n; ++k) s += std::exp(static_cast<A>(xl[k * inner]) - m);
        if (kind == SoftmaxKind::Softmax) {
          for (int64_t k = 0; k < n; ++k)
            yl[k * inner] = static_cast<T>(std::exp(static_cast<A>(xl[k * inner]) - m) / s);
        } else {
          const A shift = m + std::log(s);  // the logsumexp of the line
          for (int64_t k = 0; k < n; ++k) yl[k * inner] = static_cast<T>(static_cast<A>(xl[k * inner]) - shift);
        }
      }
    });
  });
}

void softmax_backward(SoftmaxKind kind, DType dtype, int64_t outer, int64_t n, int64_t inner, void* grad_x,
                      const void* grad_y, const void* y) {
  EMBER_DISPATCH_FLOATING(dtype, kind == SoftmaxKind::Softmax ? "softmax backward" : "log_softmax backward", [&] {
    using T = scalar_t;
    using A = cpu_acc_t<T>;
    T* gx = static_cast<T*>(grad_x);
    const T* gy = static_cast<const T*>(grad_y);
    const T* ys = static_cast<const T*>(y);
    parallel_for(0, outer * inner, line_grain(n), [&](int64_t lo, int64_t hi) {
      for (int64_t line = lo; line < hi; ++line) {
        const int64_t base = (line / inner) * n * inner + line % inner;
        A dot = 0;  // softmax: sum(gy * y); log_softmax: sum(gy)
        for (int64_t k = 0; k < n; ++k) {
          const int64_t e = base + k * inner;
          dot += kind == SoftmaxKind::Softmax ? static_cast<A>(gy[e]) * static_cast<A>(ys[e])
                                              : static_cast<A>(gy[e]);
        }
        for (int64_t k = 0; k < n; ++k) {
          const int64_t e = base + k * inner;
          const A yv = static_cast<A>(ys[e]), g = static_cast<A>(gy[e]);
          gx[e] = static_cast<T>(kind == SoftmaxKind::Softmax ? yv * (g - dot) : g - std::exp(yv) * dot);
        }
      }
    });
  });
}

}  // namespace ember::kernels::cpu
