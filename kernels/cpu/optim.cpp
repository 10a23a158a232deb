// CPU optimizer steps: a parallel loop over elements around the shared per-element math.
//
// Contraction is switched off for this file: a compiler allowed to fuse p + c * m / d or
// a + w * (b - a) into FMAs (any -march with FMA) would round differently from torch.optim's
// scalar path (Note [Matching torch.optim bit for bit] in kernels/optim.h). The pragmas come
// before the includes so that every function in this translation unit has the same options.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "optim.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "../../core/error.h"
#include "../../core/cpu/parallel.h"

namespace ember::kernels::cpu {

namespace {

// Elements per parallel chunk: an optimizer step reads and writes ~5 arrays per element, so a
// chunk of 32K elements is ~1 MB of traffic, far above the cost of waking a thread.
constexpr int64_t kOptimGrain = 32768;

// The flags that change the per-element work are template parameters, so that each loop body is
// straight-line code (the compiler vectorizes it; with -ftrapping-math it would not if-convert
// floating-point branches). __restrict: the arrays never alias (the header's contract).
template <WeightDecayMode Decay, bool Amsgrad, typename T>
void adam_loop(int64_t n, T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
               T* __restrict vmax, const AdamCoeffs<T>& coeffs) {
  parallel_for(0, n, kOptimGrain, [=](int64_t lo, int64_t hi) {
    const AdamCoeffs<T> c = coeffs;  // a local copy: provably not written by the stores below
    for (int64_t i = lo; i < hi; ++i) {
      if constexpr (Amsgrad) {
        adam_update<Decay, true>(p[i], g[i], m[i], v[i], vmax + i, c);
      } else {
        adam_update<Decay, false>(p[i], g[i], m[i], v[i], static_cast<T*>(nullptr), c);
      }
    }
  });
}

template <WeightDecayMode Decay, typename T>
void adam_dispatch_amsgrad(int64_t n, T* p, const T* g, T* m, T* v, T* vmax, const AdamHyper& h) {
  const AdamCoeffs<T> c = make_adam_coeffs<T>(h);
  if (h.amsgrad) {
    adam_loop<Decay, true>(n, p, g, m, v, vmax, c);
  } else {
    adam_loop<Decay, false>(n, p, g, m, v, static_cast<T*>(nullptr), c);
  }
}

template <bool L2, bool Momentum, bool Nesterov, bool First, typename T>
void sgd_loop(int64_t n, T* __restrict p, const T* __restrict g, T* __restrict buf, const SgdCoeffs<T>& coeffs) {
  parallel_for(0, n, kOptimGrain, [=](int64_t lo, int64_t hi) {
    const SgdCoeffs<T> c = coeffs;
    for (int64_t i = lo; i < hi; ++i) {
      if constexpr (Momentum) {
        sgd_update<L2, true, Nesterov, First>(p[i], g[i], buf + i, c);
      } else {
        sgd_update<L2, false, false, false>(p[i], g[i], static_cast<T*>(nullptr), c);
      }
    }
  });
}

template <bool L2, typename T>
void sgd_dispatch_momentum(int64_t n, T* p, const T* g, T* buf, bool first, const SgdHyper& h) {
  const SgdCoeffs<T> c = make_sgd_coeffs<T>(h);
  if (h.momentum == 0) {
    sgd_loop<L2, false, false, false>(n, p, g, static_cast<T*>(nullptr), c);
  } else if (h.nesterov) {
    first ? sgd_loop<L2, true, true, true>(n, p, g, buf, c) : sgd_loop<L2, true, true, false>(n, p, g, buf, c);
  } else {
    first ? sgd_loop<L2, true, false, true>(n, p, g, buf, c) : sgd_loop<L2, true, false, false>(n, p, g, buf, c);
  }
}

}  // namespace

void adam_step(DType dtype, int64_t n, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
               void* max_exp_avg_sq, const AdamHyper& h) {
  EMBER_CHECK(!h.amsgrad || max_exp_avg_sq != nullptr, "adam_step: amsgrad needs max_exp_avg_sq");
  if (n == 0 || step_skipped(h.skip)) return;
  EMBER_DISPATCH_FLOAT(dtype, "adam_step", [&] {
    using T = scalar_t;
    T* p = static_cast<T*>(param);
    const T* g = static_cast<const T*>(grad);
    T* m = static_cast<T*>(exp_avg);
    T* v = static_cast<T*>(exp_avg_sq);
    T* vmax = static_cast<T*>(max_exp_avg_sq);
    switch (h.decay) {
      case WeightDecayMode::None: adam_dispatch_amsgrad<WeightDecayMode::None>(n, p, g, m, v, vmax, h); break;
      case WeightDecayMode::L2: adam_dispatch_amsgrad<WeightDecayMode::L2>(n, p, g, m, v, vmax, h); break;
      case WeightDecayMode::Decoupled:
        adam_dispatch_amsgrad<WeightDecayMode::Decoupled>(n, p, g, m, v, vmax, h);
        break;
    }
  });
}

void sgd_step(DType dtype, int64_t n, void* param, const void* grad, void* momentum_buffer, bool init_buffer,
              const SgdHyper& h) {
  EMBER_CHECK(h.momentum == 0 || momentum_buffer != nullptr, "sgd_step: momentum needs a momentum buffer");
  if (n == 0 || step_skipped(h.skip)) return;
  EMBER_DISPATCH_FLOAT(dtype, "sgd_step", [&] {
    using T = scalar_t;
    T* p = static_cast<T*>(param);
    const T* g = static_cast<const T*>(grad);
    T* buf = static_cast<T*>(momentum_buffer);
    // torch.optim.SGD skips the weight-decay add entirely when weight_decay == 0 (0 * inf = NaN).
    if (h.weight_decay != 0) {
      sgd_dispatch_momentum<true>(n, p, g, buf, init_buffer, h);
    } else {
      sgd_dispatch_momentum<false>(n, p, g, buf, init_buffer, h);
    }
  });
}

void grad_norm(DType dtype, int64_t n, const void* grad, double p, double* norm) {
  EMBER_CHECK(n >= 0 && norm != nullptr, "grad_norm: n = ", n, ", norm = ", static_cast<void*>(norm));
  constexpr int64_t kBlock = 4096;
  const bool is_inf = std::isinf(p);
  EMBER_DISPATCH_FLOAT(dtype, "grad_norm", [&] {
    using T = scalar_t;
    const T* g = static_cast<const T*>(grad);
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
    parallel_for(0, blocks, 8, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        const int64_t begin = b * kBlock, end = std::min(n, begin + kBlock);
        double acc = 0;
        for (int64_t i = begin; i < end; ++i) {
          const double x = std::abs(static_cast<double>(g[i]));
          if (is_inf) {
            acc = (x != x || x > acc) ? x : acc;  // NaN sticks: x > acc is false once acc is NaN
            if (acc != acc) break;
          } else {
            acc += p == 2 ? x * x : (p == 1 ? x : std::pow(x, p));
          }
        }
        partial[static_cast<size_t>(b)] = acc;
      }
    });
    double result = 0;
    for (double v : partial) result = is_inf ? ((v != v || v > result) ? v : result) : result + v;
    *norm = grad_norm_from_partial<T>(result, p, is_inf);
  });
}

void clip_coefficient(const double* norms, int64_t count, double p, DType norm_dtype, double max_norm,
                      double* total_and_coef) {
  EMBER_CHECK(count >= 0 && (count == 0 || norms != nullptr) && total_and_coef != nullptr,
              "clip_coefficient: bad arguments");
  clip_total_and_coefficient(norms, count, p, std::isinf(p), norm_dtype == DType::f32, max_norm, &total_and_coef[0],
                             &total_and_coef[1]);
}

void scale_grads(DType dtype, const UnscaleTensor* tensors, int64_t count, const double* coef) {
  EMBER_CHECK(count >= 0 && (count == 0 || tensors != nullptr) && coef != nullptr, "scale_grads: bad arguments");
  if (*coef == 1.0) return;
  EMBER_DISPATCH_FLOAT(dtype, "scale_grads", [&] {
    using T = scalar_t;
    const T c = static_cast<T>(*coef);
    for (int64_t t = 0; t < count; ++t) {
      EMBER_CHECK(tensors[t].n >= 0, "scale_grads: tensor ", t, " has n = ", tensors[t].n);
      T* g = static_cast<T*>(tensors[t].grad);
      parallel_for(0, tensors[t].n, kOptimGrain, [=](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) g[i] = g[i] * c;
      });
    }
  });
}

void non_finite_check_and_unscale(DType dtype, const UnscaleTensor* tensors, int64_t count, float* found_inf,
                                  const float* inv_scale) {
  EMBER_CHECK(count >= 0 && (count == 0 || tensors != nullptr), "non_finite_check_and_unscale: bad tensor list");
  EMBER_CHECK(found_inf != nullptr && inv_scale != nullptr, "non_finite_check_and_unscale: found_inf and inv_scale "
              "are required");
  const float s = *inv_scale;
  std::atomic<bool> any_non_finite{false};
  EMBER_DISPATCH_FLOAT(dtype, "non_finite_check_and_unscale", [&] {
    using T = scalar_t;
    for (int64_t t = 0; t < count; ++t) {
      EMBER_CHECK(tensors[t].n >= 0, "non_finite_check_and_unscale: tensor ", t, " has n = ", tensors[t].n);
      T* g = static_cast<T*>(tensors[t].grad);
      parallel_for(0, tensors[t].n, kOptimGrain, [&](int64_t lo, int64_t hi) {
        bool seen = false;
        for (int64_t i = lo; i < hi; ++i) {
          bool non_finite;
          g[i] = unscale_element(g[i], s, non_finite);
          seen |= non_finite;
        }
        if (seen) any_non_finite.store(true, std::memory_order_relaxed);
      });
    }
  });
  if (any_non_finite.load()) *found_inf = 1.0f;
}

void update_scale(float* scale, int32_t* growth_tracker, const float* found_inf, double growth_factor,
                  double backoff_factor, int64_t growth_interval) {
  EMBER_CHECK(scale != nullptr && growth_tracker != nullptr && found_inf != nullptr, "update_scale: null pointer");
  amp_update_scale(*scale, *growth_tracker, *found_inf, growth_factor, backoff_factor, growth_interval);
}

}  // namespace ember::kernels::cpu
