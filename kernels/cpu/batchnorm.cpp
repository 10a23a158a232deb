// CPU batch normalization: the readable reference. Per-channel reductions run parallel over
// channels (one thread reduces a channel, in a fixed order); the elementwise passes run parallel
// over the N * C rows of S elements, so a batch with few channels still uses every core.

#include "batchnorm.h"

#include <algorithm>
#include <vector>

#include "../../core/error.h"
#include "parallel.h"
#include "widen.h"

namespace ember::kernels::cpu {

namespace {

// Channels per task: enough that a task is worth waking a thread for.
int64_t channel_grain(const BatchNormShape& sh) {
  const int64_t per_channel = std::max<int64_t>(1, sh.n * sh.s);
  return std::max<int64_t>(1, 16384 / per_channel);
}

// Rows of s elements per task for the elementwise passes.
int64_t row_grain(const BatchNormShape& sh) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, sh.s)); }

// Calls f(row) for the n contiguous rows of s elements that make up channel c.
template <typename T, typename F>
void for_rows(const BatchNormShape& sh, const T* base, int64_t c, const F& f) {
  for (int64_t i = 0; i < sh.n; ++i) f(base + (i * sh.c + c) * sh.s, i);
}

template <typename T>
void stats_impl(const BatchNormShape& sh, const T* x, T* mean, T* var) {
  const double count = static_cast<double>(sh.n * sh.s);
  parallel_for(0, sh.c, channel_grain(sh), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double sum = 0;
      for_rows(sh, x, c, [&](const T* row, int64_t) {
        for (int64_t j = 0; j < sh.s; ++j) sum += static_cast<double>(row[j]);
      });
      const double m = sum / count;
      // Two-pass variance: sum of squared deviations, no cancellation from E[x^2] - E[x]^2.
      double sq = 0;
      for_rows(sh, x, c, [&](const T* row, int64_t) {
        for (int64_t j = 0; j < sh.s; ++j) {
          const double d = static_cast<double>(row[j]) - m;
          sq += d * d;
        }
      });
      mean[c] = static_cast<T>(m);
      var[c] = static_cast<T>(sq / count);
    }
  });
}

template <typename T>
void apply_impl(const BatchNormShape& sh, const T* x, const T* mean, const T* invstd, const T* weight, const T* bias,
                T* y) {
  parallel_for(0, sh.n * sh.c, row_grain(sh), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = r % sh.c;
      // Centre first: folding mean into the shift (x * scale + shift) loses float32 precision
      // when |mean| is large compared with the spread.
      const T scale = invstd[c] * (weight ? weight[c] : T(1));
      const T m = mean[c], shift = bias ? bias[c] : T(0);
      const T* xr = x + r * sh.s;
      T* yr = y + r * sh.s;
      for (int64_t j = 0; j < sh.s; ++j) yr[j] = (xr[j] - m) * scale + shift;
    }
  });
}

template <typename T>
void backward_impl(const BatchNormShape& sh, bool training, const T* x, const T* gy, const T* mean, const T* invstd,
                   const T* weight, T* gx, T* gw, T* gb) {
  const double count = static_cast<double>(sh.n * sh.s);
  // Pass 1, per channel: sum(gy) and sum(gy * xhat).
  std::vector<double> sum_g(static_cast<size_t>(sh.c)), sum_gx(static_cast<size_t>(sh.c));
  parallel_for(0, sh.c, channel_grain(sh), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const double m = mean[c], is = invstd[c];
      double sg = 0, sgx = 0;
      for (int64_t i = 0; i < sh.n; ++i) {
        const T* xr = x + (i * sh.c + c) * sh.s;
        const T* gr = gy + (i * sh.c + c) * sh.s;
        for (int64_t j = 0; j < sh.s; ++j) {
          const double g = gr[j];
          sg += g;
          sgx += g * (static_cast<double>(xr[j]) - m) * is;
        }
      }
      sum_g[c] = sg;
      sum_gx[c] = sgx;
      if (gw) gw[c] = static_cast<T>(sgx);
      if (gb) gb[c] = static_cast<T>(sg);
    }
  });
  if (!gx) return;
  // Pass 2, per row: training: gx = w * is * (gy - mean(gy) - xhat * mean(gy * xhat));
  // eval (statistics are constants): gx = w * is * gy.
  parallel_for(0, sh.n * sh.c, row_grain(sh), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = r % sh.c;
      const double m = mean[c], is = invstd[c];
      const double w = weight ? static_cast<double>(weight[c]) : 1.0;
      const double mean_g = training ? sum_g[c] / count : 0.0;
      const double mean_gx = training ? sum_gx[c] / count : 0.0;
      const T* xr = x + r * sh.s;
      const T* gr = gy + r * sh.s;
      T* out = gx + r * sh.s;
      for (int64_t j = 0; j < sh.s; ++j) {
        const double xhat = (static_cast<double>(xr[j]) - m) * is;
        out[j] = static_cast<T>(w * is * (static_cast<double>(gr[j]) - mean_g - xhat * mean_gx));
      }
    }
  });
}

}  // namespace

void batch_norm_stats(DType dtype, const BatchNormShape& sh, const void* x, void* mean, void* var) {
  if (is_low_precision(dtype)) {  // Note [Low-precision CPU kernels through f32] in widen.h
    const Widened xf(dtype, x, sh.n * sh.c * sh.s);
    Widened mf(dtype, nullptr, sh.c), vf(dtype, nullptr, sh.c);
    batch_norm_stats(DType::f32, sh, xf.data(), mf.data(), vf.data());
    mf.store(mean);
    vf.store(var);
    return;
  }
  EMBER_DISPATCH_FLOAT(dtype, "batch_norm", [&] {
    stats_impl<scalar_t>(sh, static_cast<const scalar_t*>(x), static_cast<scalar_t*>(mean),
                         static_cast<scalar_t*>(var));
  });
}

void batch_norm_apply(DType dtype, const BatchNormShape& sh, const void* x, const void* mean, const void* invstd,
                      const void* weight, const void* bias, void* y) {
  if (is_low_precision(dtype)) {  // Note [Low-precision CPU kernels through f32] in widen.h
    const Widened xf(dtype, x, sh.n * sh.c * sh.s), mf(dtype, mean, sh.c), isf(dtype, invstd, sh.c);
    const Widened wf(dtype, weight, weight ? sh.c : 0), bf(dtype, bias, bias ? sh.c : 0);
    Widened yf(dtype, nullptr, sh.n * sh.c * sh.s);
    batch_norm_apply(DType::f32, sh, xf.data(), mf.data(), isf.data(), widened_or_null(wf, weight),
                     widened_or_null(bf, bias), yf.data());
    yf.store(y);
    return;
  }
  EMBER_DISPATCH_FLOAT(dtype, "batch_norm", [&] {
    apply_impl<scalar_t>(sh, static_cast<const scalar_t*>(x), static_cast<const scalar_t*>(mean),
                         static_cast<const scalar_t*>(invstd), static_cast<const scalar_t*>(weight),
                         static_cast<const scalar_t*>(bias), static_cast<scalar_t*>(y));
  });
}

void batch_norm_backward(DType dtype, const BatchNormShape& sh, bool training, const void* x, const void* grad_y,
                         const void* mean, const void* invstd, const void* weight, void* grad_x, void* grad_weight,
                         void* grad_bias) {
  if (is_low_precision(dtype)) {  // Note [Low-precision CPU kernels through f32] in widen.h
    const int64_t total = sh.n * sh.c * sh.s;
    const Widened xf(dtype, x, total), gyf(dtype, grad_y, total), mf(dtype, mean, sh.c), isf(dtype, invstd, sh.c);
    const Widened wf(dtype, weight, weight ? sh.c : 0);
    Widened gxf(dtype, nullptr, grad_x ? total : 0), gwf(dtype, nullptr, grad_weight ? sh.c : 0),
        gbf(dtype, nullptr, grad_bias ? sh.c : 0);
    batch_norm_backward(DType::f32, sh, training, xf.data(), gyf.data(), mf.data(), isf.data(),
                        widened_or_null(wf, weight), gxf.data(), gwf.data(), gbf.data());
    if (grad_x) gxf.store(grad_x);
    if (grad_weight) gwf.store(grad_weight);
    if (grad_bias) gbf.store(grad_bias);
    return;
  }
  EMBER_DISPATCH_FLOAT(dtype, "batch_norm backward", [&] {
    backward_impl<scalar_t>(sh, training, static_cast<const scalar_t*>(x), static_cast<const scalar_t*>(grad_y),
                            static_cast<const scalar_t*>(mean), static_cast<const scalar_t*>(invstd),
                            static_cast<const scalar_t*>(weight), static_cast<scalar_t*>(grad_x),
                            static_cast<scalar_t*>(grad_weight), static_cast<scalar_t*>(grad_bias));
  });
}

}  // namespace ember::kernels::cpu
