// kernels/cuda/loss vs the kernels/cpu reference: cross entropy (fused softmax) and nll,
// forward and backward, with and without class weights, label smoothing, ignore_index, spatial
// samples (S > 1), per-sample and broadcast incoming gradients; find_invalid_target.

#include <algorithm>
#include <cmath>
#include <limits>

#include <ember/kernels/cpu/loss.h>
#include <ember/kernels/cuda/loss.h>

#include "kernel_check.h"

using namespace ember;
using namespace ember::kernels;
using namespace ember::testing;

namespace {

constexpr int64_t kIgnore = -100;

const ClassLayout kLayouts[] = {
    {37, 10, 1},   // classifier: a warp per sample
    {3, 2000, 1},  // many classes: a block per sample
    {9, 5, 1},     // few classes: a thread per sample
    {4, 6, 7},     // spatial: a thread per sample
    {1, 1, 1},     {0, 10, 1},
};

std::vector<int64_t> targets(const ClassLayout& l, uint64_t seed) {
  auto u = random_values<double>(static_cast<size_t>(l.samples()), seed, 0, static_cast<double>(l.c));
  std::vector<int64_t> t(u.size());
  for (size_t i = 0; i < t.size(); ++i) t[i] = i % 5 == 3 ? kIgnore : static_cast<int64_t>(u[i]);
  return t;
}

// Per-sample losses are sums over the classes in another order (logsumexp online, the smoothing
// sum by a group). f64: both sides in double, a few double ulp relative to the terms. f32: the
// CPU computes in double, the CUDA kernel in float (Note [Accumulation types] in core/dtype.h):
// lse = m + log(s) with s a float sum of C positive terms, within (log2 C + 8) ulp relative, at a
// magnitude of at most 32 here (logits in [-5, 5], C <= 2000, weights <= 2): an absolute
// tolerance of (log2 C + 8) ulp of 32.
template <typename T>
Tol loss_tol(int64_t c) {
  if constexpr (std::is_same_v<T, float>) {
    const double ulps = 8.0 + std::log2(static_cast<double>(std::max<int64_t>(c, 1)));
    return {ulps * 32 * std::numeric_limits<float>::epsilon(), 0};
  } else {
    return {1e-12, 1e-12};
  }
}

}  // namespace

TEMPLATE_TEST_CASE("cuda cross_entropy forward/backward matches the CPU", "[cuda][loss]", float, double) {
  using T = TestType;
  const DType dt = dtype_of<T>::value;
  for (const ClassLayout& l : kLayouts) {
    for (const bool weighted : {false, true}) {
      for (const double eps : {0.0, 0.1}) {
        INFO("layout " << l.n << "x" << l.c << "x" << l.s << (weighted ? " weighted" : "") << " eps " << eps);
        const auto ns = static_cast<size_t>(l.samples()), total = static_cast<size_t>(l.samples() * l.c);
        const auto x = random_values<T>(total, 1, -5, 5);
        const auto t = targets(l, 2);
        const auto w = random_values<T>(static_cast<size_t>(l.c), 3, 0.5, 2);
        const T* wp = weighted ? w.data() : nullptr;
        std::vector<double> loss(ns), tw(ns), lse(ns);
        cpu::cross_entropy_forward(dt, l, x.data(), t.data(), wp, kIgnore, eps, loss.data(), tw.data(), lse.data());
        DeviceBuffer<T> dx(x), dw(w);
        DeviceBuffer<int64_t> dt_(t);
        DeviceBuffer<double> dloss(ns), dtw(ns), dlse(ns);
        gpu::cross_entropy_forward(dt, l, dx.data(), dt_.data(), weighted ? dw.data() : nullptr, kIgnore, eps,
                                    dloss.data(), dtw.data(), dlse.data());
        dloss.check_guards();
        dtw.check_guards();
        dlse.check_guards();
        const Tol lt = loss_tol<T>(l.c);
        require_close(dloss.download(), loss, lt.atol, lt.rtol, "loss");
        require_same_bits(dtw.download(), tw, "target weight");  // a copied weight: exact
        require_close(dlse.download(), lse, lt.atol, lt.rtol, "lse");

        // Backward from the CPU's lse; a per-sample gradient (stride 1) and a broadcast one (0).
        for (const int64_t stride : {int64_t{1}, int64_t{0}}) {
          const auto gl = random_values<T>(stride ? ns : 1, 4);
          std::vector<T> gx(total);
          cpu::cross_entropy_backward(dt, l, gx.data(), x.data(), t.data(), wp, kIgnore, eps, lse.data(), gl.data(),
                                      stride, 0.25);
          DeviceBuffer<T> dgl(gl), dgx(total);
          DeviceBuffer<double> dlse_cpu(lse);
          gpu::cross_entropy_backward(dt, l, dgx.data(), dx.data(), dt_.data(), weighted ? dw.data() : nullptr,
                                       kIgnore, eps, dlse_cpu.data(), dgl.data(), stride, 0.25);
          dgx.check_guards();
          // The CPU's per-element formula; W (the weight total, with smoothing) is summed in
          // another order. f64 grads agree to ~1e-15 (a GPU adds FMA/exp ulps). f32: the CUDA
          // kernel computes p = exp(x - lse) in float with lse rounded to float, so exp's argument
          // (|x - lse| <= 18 here) is off by up to 18 ulp of 1 and p by as much relative, plus an
          // ulp or two for exp and the products: 24 ulp relative, and absolute where p - 1 cancels.
          const double f = 24 * std::numeric_limits<float>::epsilon();
          const Tol tol = std::is_same_v<T, float> ? Tol{f, f} : Tol{1e-15, 1e-13};
          require_close(dgx.download(), gx, tol.atol, tol.rtol, "cross_entropy backward");
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("cuda nll_loss forward/backward matches the CPU", "[cuda][loss]", float, double) {
  using T = TestType;
  const DType dt = dtype_of<T>::value;
  for (const ClassLayout& l : kLayouts) {
    for (const bool weighted : {false, true}) {
      INFO("layout " << l.n << "x" << l.c << "x" << l.s << (weighted ? " weighted" : ""));
      const auto ns = static_cast<size_t>(l.samples()), total = static_cast<size_t>(l.samples() * l.c);
      const auto x = random_values<T>(total, 5, -5, 0);
      const auto t = targets(l, 6);
      const auto w = random_values<T>(static_cast<size_t>(l.c), 7, 0.5, 2);
      const T* wp = weighted ? w.data() : nullptr;
      std::vector<double> loss(ns), tw(ns);
      cpu::nll_loss_forward(dt, l, x.data(), t.data(), wp, kIgnore, loss.data(), tw.data());
      DeviceBuffer<T> dx(x), dw(w);
      DeviceBuffer<int64_t> dt_(t);
      DeviceBuffer<double> dloss(ns), dtw(ns);
      gpu::nll_loss_forward(dt, l, dx.data(), dt_.data(), weighted ? dw.data() : nullptr, kIgnore, dloss.data(),
                             dtw.data());
      dloss.check_guards();
      // One product: exact in double (f64, and the CPU's f32 product of two floats); the CUDA
      // f32 product is rounded to float, half an ulp.
      if (std::is_same_v<T, float>)
        require_close(dloss.download(), loss, 0, std::numeric_limits<float>::epsilon() / 2, "nll loss");
      else
        require_same_bits(dloss.download(), loss, "nll loss");
      require_same_bits(dtw.download(), tw, "nll target weight");
      for (const int64_t stride : {int64_t{1}, int64_t{0}}) {
        const auto gl = random_values<T>(stride ? ns : 1, 8);
        std::vector<T> gx(total);
        cpu::nll_loss_backward(dt, l, gx.data(), t.data(), wp, kIgnore, gl.data(), stride, 0.5);
        DeviceBuffer<T> dgl(gl), dgx(total);
        gpu::nll_loss_backward(dt, l, dgx.data(), dt_.data(), weighted ? dw.data() : nullptr, kIgnore, dgl.data(),
                                stride, 0.5);
        dgx.check_guards();
        require_same_bits(dgx.download(), gx, "nll backward");
      }
    }
  }
}

TEST_CASE("cuda find_invalid_target returns the first bad position like the CPU", "[cuda][loss]") {
  std::vector<int64_t> t(3001, 2);
  DeviceBuffer<int64_t> empty(0);
  CHECK(gpu::find_invalid_target(empty.data(), 0, 10, kIgnore) == -1);
  {
    DeviceBuffer<int64_t> d(t);
    CHECK(gpu::find_invalid_target(d.data(), 3001, 10, kIgnore) == -1);
  }
  t[100] = kIgnore;  // ignored: fine
  t[2999] = 10;
  t[1500] = -1;
  t[2000] = 11;
  DeviceBuffer<int64_t> d(t);
  CHECK(cpu::find_invalid_target(t.data(), 3001, 10, kIgnore) == 1500);
  CHECK(gpu::find_invalid_target(d.data(), 3001, 10, kIgnore) == 1500);
  // Valid, with an ignored target among them: told apart from all valid (a 'mean' reads its weight).
  CHECK(gpu::find_invalid_target(d.data(), 1500, 10, kIgnore) == ember::kernels::kTargetsValidSomeIgnored);
  CHECK(cpu::find_invalid_target(t.data(), 1500, 10, kIgnore) == ember::kernels::kTargetsValidSomeIgnored);
  CHECK(gpu::find_invalid_target(d.data(), 100, 10, kIgnore) == ember::kernels::kTargetsValid);
  CHECK(cpu::find_invalid_target(t.data(), 100, 10, kIgnore) == ember::kernels::kTargetsValid);
}
