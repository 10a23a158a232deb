// kernels/cuda/softmax vs the kernels/cpu reference: both kinds, forward and backward, f32 and
// f64, layouts that select each group size (thread per strided line, warp or block per row),
// large logits, and lines with NaN, +inf and all -inf (the CPU's NaN results, exactly).

#include <ember/kernels/cpu/softmax.h>
#include <ember/kernels/cuda/softmax.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernel_check.h"

using namespace ember;
using namespace ember::kernels;
using namespace ember::testing;

namespace {

struct Layout {
  int64_t outer, n, inner;
};

const Layout kLayouts[] = {
    {5, 10, 1},    // a warp per row
    {3, 2000, 1},  // a block per row
    {4, 7, 1},     // a thread per (short) row
    {2, 9, 33},    // a thread per strided line
    {1, 1, 1},     {3, 1, 5}, {0, 4, 1}, {2, 0, 3},
};

// Tolerance: the online max/sum adds the same exponentials in another order and rescales
// partial sums by exp(m_old - m_new). In f64 (both sides double) s differs from the CPU's by a
// few ulp: outputs within ~1e-14 relative (more for log_softmax values near zero: the absolute
// floor). In f32 the CPU sums in double and the CUDA kernel in float (Note [Accumulation types]
// in core/dtype.h): a float sum of n positive terms over a thread's stride and a reduction tree
// is within about (log2 n + 8) ulp relative, and exp and log add an ulp each; the same bound
// serves as the absolute floor (log_softmax values near zero, of terms of order 1).
template <typename T>
Tol softmax_tol(int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    const double ulps = 8.0 + std::log2(static_cast<double>(std::max<int64_t>(n, 1)));
    const double t = ulps * std::numeric_limits<float>::epsilon();
    return {t, t};
  } else {
    return {1e-13, 1e-13};
  }
}

template <typename T>
std::vector<T> logits(const Layout& l, uint64_t seed, bool specials) {
  const auto total = static_cast<size_t>(l.outer * l.n * l.inner);
  auto x = random_values<T>(total, seed, -6, 6);
  if (specials && l.n >= 7 && l.inner == 1 && l.outer >= 4) {
    const T inf = std::numeric_limits<T>::infinity();
    x[0 * l.n + 2] = std::numeric_limits<T>::quiet_NaN();          // row 0: NaN -> all NaN
    x[1 * l.n + 3] = inf;                                           // row 1: +inf -> NaN (CPU)
    for (int64_t k = 0; k < l.n; ++k) x[2 * l.n + k] = -inf;        // row 2: all -inf -> NaN
    x[3 * l.n + 1] = -inf;                                          // row 3: one -inf -> 0 prob
    x[3 * l.n + 4] = T(1e4);                                        // and a huge logit
  }
  return x;
}

}  // namespace

TEMPLATE_TEST_CASE("cuda softmax and log_softmax forward/backward match the CPU", "[cuda][softmax]", float, double) {
  using T = TestType;
  const DType dt = dtype_of<T>::value;
  for (const Layout& l : kLayouts) {
    for (const SoftmaxKind kind : {SoftmaxKind::Softmax, SoftmaxKind::LogSoftmax}) {
      for (const bool specials : {false, true}) {
        INFO("layout " << l.outer << "x" << l.n << "x" << l.inner << (kind == SoftmaxKind::Softmax ? " softmax" : " log_softmax")
                       << (specials ? " specials" : ""));
        const auto total = static_cast<size_t>(l.outer * l.n * l.inner);
        const auto x = logits<T>(l, 3, specials);
        std::vector<T> y(total);
        cpu::softmax_forward(kind, dt, l.outer, l.n, l.inner, x.data(), y.data());
        DeviceBuffer<T> dx(x), dy(total);
        gpu::softmax_forward(kind, dt, l.outer, l.n, l.inner, dx.data(), dy.data());
        dy.check_guards();
        const Tol t = softmax_tol<T>(l.n);
        require_close(dy.download(), y, t.atol, t.rtol, "softmax forward");

        // Backward from the CPU's y (so both sides see the same inputs).
        const auto gy = random_values<T>(total, 4);
        std::vector<T> gx(total);
        cpu::softmax_backward(kind, dt, l.outer, l.n, l.inner, gx.data(), gy.data(), y.data());
        DeviceBuffer<T> dgy(gy), dyc(y), dgx(total);
        gpu::softmax_backward(kind, dt, l.outer, l.n, l.inner, dgx.data(), dgy.data(), dyc.data());
        dgx.check_guards();
        // The dot product is a reordered sum (float on CUDA for f32); grad = y * (g - dot) can
        // cancel, hence the absolute floor relative to |g| ~ 3.
        require_close(dgx.download(), gx, std::is_same_v<T, float> ? 3 * t.atol : 1e-13, t.rtol, "softmax backward");
      }
    }
  }
}
