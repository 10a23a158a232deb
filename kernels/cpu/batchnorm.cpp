// CPU batch normalization: the readable reference. Per-channel reductions run parallel over
// channels (one thread reduces a channel, in a fixed order); the elementwise passes run parallel
// over the N * C rows of S elements, so a batch with few channels still uses every core. f16 and
// bf16 data are read and written in place (widened element by element), never copied to float.

#include "batchnorm.h"

#include <algorithm>
#include <vector>

#include "../../core/error.h"
#include "parallel.h"

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

// Templates over T, the dtype of x/y/grad_y/grad_x, and P, that of the per-channel vectors: P is T,
// or float for an f16/bf16 T (Note [Mixed-precision batch norm] in kernels/batchnorm.h). Sums
// accumulate in double (cpu_acc_t of float and double); the elementwise arithmetic runs in
// C = acc_t<P> (float, or double for f64), and a value is rounded to C before it is stored, so a
// 16-bit result is the float32 computation's, rounded once more.
template <typename T, typename C>
T round_to(double v) {
  return static_cast<T>(static_cast<C>(v));
}

template <typename T, typename P>
void stats_impl(const BatchNormShape& sh, const T* x, P* mean, P* var) {
  using C = acc_t<P>;
  const double count = static_cast<double>(sh.n * sh.s);
  parallel_for(0, sh.c, channel_grain(sh), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double sum = 0;
      for_rows(sh, x, c, [&](const T* row, int64_t) {
        for (int64_t j = 0; j < sh.s; ++j) sum += static_cast<double>(static_cast<C>(row[j]));
      });
      const double m = sum / count;
      // Two-pass variance: sum of squared deviations, no cancellation from E[x^2] - E[x]^2.
      double sq = 0;
      for_rows(sh, x, c, [&](const T* row, int64_t) {
        for (int64_t j = 0; j < sh.s; ++j) {
          const double d = static_cast<double>(static_cast<C>(row[j])) - m;
          sq += d * d;
        }
      });
      mean[c] = round_to<P, C>(m);
      var[c] = round_to<P, C>(sq / count);
    }
  });
}

template <typename T, typename P>
void apply_impl(const BatchNormShape& sh, const T* x, const P* mean, const P* invstd, const P* weight, const P* bias,
                T* y, const T* residual) {
  using C = acc_t<P>;
  parallel_for(0, sh.n * sh.c, row_grain(sh), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = r % sh.c;
      // Centre first: folding mean into the shift (x * scale + shift) loses float32 precision
      // when |mean| is large compared with the spread.
      const C scale = static_cast<C>(invstd[c]) * (weight ? static_cast<C>(weight[c]) : C(1));
      const C m = static_cast<C>(mean[c]), shift = bias ? static_cast<C>(bias[c]) : C(0);
      const T* xr = x + r * sh.s;
      T* yr = y + r * sh.s;
      if (!sh.relu) {
        for (int64_t j = 0; j < sh.s; ++j) yr[j] = static_cast<T>((static_cast<C>(xr[j]) - m) * scale + shift);
        continue;
      }
      const T* res = residual ? residual + r * sh.s : nullptr;  // Note [Batch norm with a fused ReLU]
      for (int64_t j = 0; j < sh.s; ++j)
        yr[j] = fused_epilogue<T>(static_cast<C>((static_cast<C>(xr[j]) - m) * scale + shift), res, j, true);
    }
  });
}

template <typename T, typename P>
void backward_impl(const BatchNormShape& sh, bool training, const T* x, const T* gy, const P* mean, const P* invstd,
                   const P* weight, T* gx, P* gw, P* gb, const T* y) {
  using C = acc_t<P>;
  auto load = [](auto v) { return static_cast<double>(static_cast<C>(v)); };
  const T* mask = sh.relu ? y : nullptr;  // Note [Batch norm with a fused ReLU]
  EMBER_CHECK(!sh.relu || y != nullptr, "batch_norm backward: a fused ReLU needs its output y");
  const double count = static_cast<double>(sh.n * sh.s);
  // Pass 1, per channel: sum(gy) and sum(gy * xhat).
  std::vector<double> sum_g(static_cast<size_t>(sh.c)), sum_gx(static_cast<size_t>(sh.c));
  parallel_for(0, sh.c, channel_grain(sh), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const double m = load(mean[c]), is = load(invstd[c]);
      double sg = 0, sgx = 0;
      for (int64_t i = 0; i < sh.n; ++i) {
        const int64_t row = (i * sh.c + c) * sh.s;
        const T* xr = x + row;
        for (int64_t j = 0; j < sh.s; ++j) {
          const double g = static_cast<double>(masked_grad<T>(gy, mask, row + j));
          sg += g;
          sgx += g * (load(xr[j]) - m) * is;
        }
      }
      sum_g[c] = sg;
      sum_gx[c] = sgx;
      if (gw) gw[c] = round_to<P, C>(sgx);
      if (gb) gb[c] = round_to<P, C>(sg);
    }
  });
  if (!gx) return;
  // Pass 2, per row: training: gx = w * is * (gy - mean(gy) - xhat * mean(gy * xhat));
  // eval (statistics are constants): gx = w * is * gy.
  parallel_for(0, sh.n * sh.c, row_grain(sh), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = r % sh.c;
      const double m = load(mean[c]), is = load(invstd[c]);
      const double w = weight ? load(weight[c]) : 1.0;
      const double mean_g = training ? sum_g[c] / count : 0.0;
      const double mean_gx = training ? sum_gx[c] / count : 0.0;
      const T* xr = x + r * sh.s;
      T* out = gx + r * sh.s;
      for (int64_t j = 0; j < sh.s; ++j) {
        const double xhat = (load(xr[j]) - m) * is;
        const double g = static_cast<double>(masked_grad<T>(gy, mask, r * sh.s + j));
        out[j] = round_to<T, C>(w * is * (g - mean_g - xhat * mean_gx));
      }
    }
  });
}

// The CPU kernels read (n, c, s) only (kernels/batchnorm.h); layers/norm.cpp copies a
// channels-last tensor to that order before it calls them.
void check_layout(const char* op, const BatchNormShape& sh) {
  EMBER_CHECK(!sh.channels_last, op, ": the CPU kernels take x in (N, C, S) order, not channels-last (N, S, C)",
              " (n=", sh.n, " c=", sh.c, " s=", sh.s, "); copy it with .contiguous() first");
}

}  // namespace

void batch_norm_stats(DType dtype, DType param_dtype, const BatchNormShape& sh, const void* x, void* mean, void* var) {
  check_layout("batch_norm", sh);
  dispatch_batch_norm("batch_norm", dtype, param_dtype, [&](auto t, auto p) {
    using T = decltype(t);
    using P = decltype(p);
    stats_impl<T, P>(sh, static_cast<const T*>(x), static_cast<P*>(mean), static_cast<P*>(var));
  });
}

void batch_norm_apply(DType dtype, DType param_dtype, const BatchNormShape& sh, const void* x, const void* mean,
                      const void* invstd, const void* weight, const void* bias, void* y, const void* residual) {
  check_layout("batch_norm", sh);
  dispatch_batch_norm("batch_norm", dtype, param_dtype, [&](auto t, auto p) {
    using T = decltype(t);
    using P = decltype(p);
    apply_impl<T, P>(sh, static_cast<const T*>(x), static_cast<const P*>(mean), static_cast<const P*>(invstd),
                     static_cast<const P*>(weight), static_cast<const P*>(bias), static_cast<T*>(y),
                     static_cast<const T*>(residual));
  });
}

void batch_norm_backward(DType dtype, DType param_dtype, const BatchNormShape& sh, bool training, const void* x,
                         const void* grad_y, const void* mean, const void* invstd, const void* weight, void* grad_x,
                         void* grad_weight, void* grad_bias, const void* y) {
  check_layout("batch_norm backward", sh);
  dispatch_batch_norm("batch_norm backward", dtype, param_dtype, [&](auto t, auto p) {
    using T = decltype(t);
    using P = decltype(p);
    backward_impl<T, P>(sh, training, static_cast<const T*>(x), static_cast<const T*>(grad_y),
                        static_cast<const P*>(mean), static_cast<const P*>(invstd), static_cast<const P*>(weight),
                        static_cast<T*>(grad_x), static_cast<P*>(grad_weight), static_cast<P*>(grad_bias),
                        static_cast<const T*>(y));
  });
}

}  // namespace ember::kernels::cpu
