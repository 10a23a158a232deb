// CPU batch normalization: the readable reference. Per-channel reductions run parallel over
// channels (one thread reduces a channel, in a fixed order); the elementwise passes run parallel
// over the N * C rows of S elements, so a batch with few channels still uses every core. f16 and
// bf16 data are read and written in place (widened element by element), never copied to float.

#include "batchnorm.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <vector>

#include "../../core/error.h"
#include "../../core/cpu/cpu_features.h"
#include "../../core/cpu/parallel.h"

#if defined(__x86_64__)
#define EMBER_BN_X86 1
#else
#define EMBER_BN_X86 0
#endif

namespace ember::kernels::cpu {

namespace {

// Channels per task: enough that a task is worth waking a thread for.
int64_t channel_grain(const BatchNormShape& sh) {
  const int64_t per_channel = std::max<int64_t>(1, sh.n * sh.s);
  return std::max<int64_t>(1, 16384 / per_channel);
}

// Rows of s elements per task for the elementwise passes.
int64_t row_grain(const BatchNormShape& sh) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, sh.s)); }

// Templates over T, the dtype of x/y/grad_y/grad_x, and P, that of the per-channel vectors: P is T,
// or float for an f16/bf16 T (Note [Mixed-precision batch norm] in kernels/batchnorm.h). Sums
// accumulate in double (cpu_acc_t of float and double); the elementwise arithmetic runs in
// C = acc_t<P> (float, or double for f64), and a value is rounded to C before it is stored, so a
// 16-bit result is the float32 computation's, rounded once more.
template <typename T, typename C>
T round_to(double v) {
  return static_cast<T>(static_cast<C>(v));
}

// Note [Batch norm's sums on the CPU]
// A channel's sums run in kLanes interleaved partial sums — element j of each of its rows goes to
// lane j % kLanes — which are added in lane order at the end. That is one fixed order whatever the
// thread count (a channel is still one thread's), and kLanes independent chains of additions that
// the compiler keeps in one vector register, where a single running sum waits for each addition
// to finish before the next (about 4 cycles per element: batch norm's backward was a fifth of a
// bf16 ResNet-18 step on the CPU).
constexpr int kLanes = 8;

// sums[k] = sum over the channel's elements e of term(row, j, k) for each of K sums, by lanes.
template <int K, typename T, typename F>
[[gnu::always_inline]] inline std::array<double, K> channel_sums(const BatchNormShape& sh, const T* base, int64_t c, const F& term) {
  double lanes[K][kLanes] = {};
  for (int64_t i = 0; i < sh.n; ++i) {  // the channel's n rows of s elements
    const int64_t row = (i * sh.c + c) * sh.s;
    int64_t j = 0;
    if constexpr (K == 1) {
      // One sum: the whole groups of kLanes go through a local copy that never has a variable
      // index, which GCC 12 keeps in registers and vectorizes (on `lanes` itself it added the
      // lanes one at a time). Two sums vectorize as they are below, and the copy slowed them.
      std::array<double, kLanes> acc;
      for (int l = 0; l < kLanes; ++l) acc[l] = lanes[0][l];
      for (; j + kLanes <= sh.s; j += kLanes)
        for (int l = 0; l < kLanes; ++l) acc[l] += term(row + j + l)[0];
      for (int l = 0; l < kLanes; ++l) lanes[0][l] = acc[l];
    } else {
      for (; j + kLanes <= sh.s; j += kLanes)
        for (int l = 0; l < kLanes; ++l) {
          const std::array<double, K> t = term(row + j + l);
          for (int k = 0; k < K; ++k) lanes[k][l] += t[k];
        }
    }
    for (; j < sh.s; ++j) {
      const std::array<double, K> t = term(row + j);
      for (int k = 0; k < K; ++k) lanes[k][j % kLanes] += t[k];
    }
  }
  std::array<double, K> out{};
  for (int k = 0; k < K; ++k)
    for (int l = 0; l < kLanes; ++l) out[k] += lanes[k][l];
  return out;
}

// Note [Batch norm's loops with AVX-512]
// ember's library is built for baseline x86-64, so the loops the compiler vectorizes on its own
// use SSE2's 128-bit registers: two doubles at a time for batch norm's sums, with its 16-bit loads
// widened through shuffles (batch norm was a seventh of a bf16 ResNet-18 step). Its four loops —
// the statistics' sums, the apply, the backward's sums and its elementwise pass — are therefore
// each written once, as an always-inline function over a range of channels or rows, and compiled
// twice: into a plain function and into one marked for AVX-512 (F, BW, VL, DQ), where GCC turns
// the loops into 512-bit (or 256-bit) vector code — all of them except the 16-bit statistics'
// sums, which GCC 12 leaves mostly scalar. The second runs where cpu_features() reports those
// extensions (set_batch_norm_avx512 turns it off). Both compile the same operations in the same
// order — lane l of the sums is still lane l, and nothing is contracted into an FMA (the library
// builds with -ffp-contract=off, CMakeLists.txt) — so they give the same bits
// (tests/test_batchnorm.cpp).

// Statistics of channels [c0, c1), finished as `out` asks (kernels/batchnorm.h). The P* argument
// is out.mean with its type: it names P for the two compilations below, which deduce it.
template <typename T, typename P>
[[gnu::always_inline]] inline void stats_channels(const BatchNormShape& sh, const T* x, P*, const BatchNormStats& out,
                                                  int64_t c0, int64_t c1) {
  using C = acc_t<P>;
  const double count = static_cast<double>(sh.n * sh.s);
  for (int64_t c = c0; c < c1; ++c) {
    const double sum = channel_sums<1>(sh, x, c, [&](int64_t e) {
      return std::array<double, 1>{static_cast<double>(static_cast<C>(x[e]))};
    })[0];
    const double m = sum / count;
    // Two-pass variance: sum of squared deviations, no cancellation from E[x^2] - E[x]^2.
    const double sq = channel_sums<1>(sh, x, c, [&](int64_t e) {
      const double d = static_cast<double>(static_cast<C>(x[e])) - m;
      return std::array<double, 1>{d * d};
    })[0];
    finish_channel_stats<double, P>(out, c, m, sq / count, count);
  }
}

// y for rows [r0, r1) of the n * c rows.
template <typename T, typename P>
[[gnu::always_inline]] inline void apply_rows(const BatchNormShape& sh, const T* x, const P* mean, const P* invstd,
                                              const P* weight, const P* bias, T* y, const T* residual, int64_t r0,
                                              int64_t r1) {
  using C = acc_t<P>;
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
}

// grad_y as the backward reads it, as a double: masked by the fused ReLU's output y (kMasked),
// y > 0 ? grad_y : +0. The mask is applied to the bits (all ones or all zeros) rather than by a
// conditional, which GCC compiles to a branch: ReLU's mask is a coin toss per element, so that
// branch was mispredicted half the time (ten times slower than the unmasked loop) and kept the
// loop from being vectorized.
template <bool kMasked, typename C, typename T>
[[gnu::always_inline]] inline double backward_grad(const T* gy, const T* y, int64_t e) {
  double g = static_cast<double>(static_cast<C>(gy[e]));
  if constexpr (kMasked) {
    uint64_t bits;
    std::memcpy(&bits, &g, sizeof bits);
    bits &= uint64_t{0} - static_cast<uint64_t>(static_cast<C>(y[e]) > C(0));
    std::memcpy(&g, &bits, sizeof g);
  }
  return g;
}

// The backward's pass 1 for channels [c0, c1): sum(gy) and sum(gy * xhat) (Note [Batch norm's
// sums on the CPU]), and the parameters' gradients.
template <bool kMasked, typename T, typename P>
[[gnu::always_inline]] inline void backward_sums(const BatchNormShape& sh, const T* x, const T* gy, const P* mean,
                                                 const P* invstd, const T* y, double* sum_g, double* sum_gx, P* gw,
                                                 P* gb, int64_t c0, int64_t c1) {
  using C = acc_t<P>;
  for (int64_t c = c0; c < c1; ++c) {
    const double m = static_cast<double>(static_cast<C>(mean[c])), is = static_cast<double>(static_cast<C>(invstd[c]));
    const std::array<double, 2> sums = channel_sums<2>(sh, x, c, [&](int64_t e) {
      const double g = backward_grad<kMasked, C>(gy, y, e);
      return std::array<double, 2>{g, g * (static_cast<double>(static_cast<C>(x[e])) - m) * is};
    });
    sum_g[c] = sums[0];
    sum_gx[c] = sums[1];
    if (gw) gw[c] = round_to<P, C>(sums[1]);
    if (gb) gb[c] = round_to<P, C>(sums[0]);
  }
}

// The backward's pass 2 for rows [r0, r1): training: gx = w * is * (gy - mean(gy) - xhat *
// mean(gy * xhat)); eval (statistics are constants): gx = w * is * gy.
template <bool kMasked, typename T, typename P>
[[gnu::always_inline]] inline void backward_rows(const BatchNormShape& sh, bool training, const T* x, const T* gy,
                                                 const P* mean, const P* invstd, const P* weight, const T* y,
                                                 const double* sum_g, const double* sum_gx, T* gx, int64_t r0,
                                                 int64_t r1) {
  using C = acc_t<P>;
  const double count = static_cast<double>(sh.n * sh.s);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t c = r % sh.c;
    const double m = static_cast<double>(static_cast<C>(mean[c])), is = static_cast<double>(static_cast<C>(invstd[c]));
    const double w = weight ? static_cast<double>(static_cast<C>(weight[c])) : 1.0;
    const double mean_g = training ? sum_g[c] / count : 0.0;
    const double mean_gx = training ? sum_gx[c] / count : 0.0;
    for (int64_t e = r * sh.s; e < (r + 1) * sh.s; ++e) {
      const double xhat = (static_cast<double>(static_cast<C>(x[e])) - m) * is;
      gx[e] = round_to<T, C>(w * is * (backward_grad<kMasked, C>(gy, y, e) - mean_g - xhat * mean_gx));
    }
  }
}

// Each loop's two compilations: name##_plain and name##_avx512, called with the loop's arguments
// and, for the backward's loops, kMasked (which no argument carries) as the one explicit
// template argument: backward_sums_avx512<kMasked>(...).
#define EMBER_BN_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,prefer-vector-width=512")))
#define EMBER_BN_COMPILE_TWICE(name)                                                                        \
  template <bool... kFlags, typename... Args>                                                               \
  [[gnu::noinline]] void name##_plain(Args... args) {                                                       \
    name<kFlags...>(args...);                                                                               \
  }                                                                                                         \
  template <bool... kFlags, typename... Args>                                                               \
  [[gnu::noinline]] EMBER_BN_AVX512 void name##_avx512(Args... args) {                                      \
    name<kFlags...>(args...);                                                                               \
  }
EMBER_BN_COMPILE_TWICE(stats_channels)
EMBER_BN_COMPILE_TWICE(apply_rows)
EMBER_BN_COMPILE_TWICE(backward_sums)
EMBER_BN_COMPILE_TWICE(backward_rows)
#undef EMBER_BN_COMPILE_TWICE

bool bn_avx512_available() {
  const CpuFeatures& f = cpu_features();
  return EMBER_BN_X86 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
}

std::atomic<bool>& bn_avx512_flag() {
  static std::atomic<bool> on{bn_avx512_available()};
  return on;
}

bool bn_avx512() { return bn_avx512_flag().load(std::memory_order_relaxed); }

template <typename T, typename P>
void stats_impl(const BatchNormShape& sh, const T* x, const BatchNormStats& out) {
  const bool wide = bn_avx512();
  parallel_for(0, sh.c, channel_grain(sh), [&](int64_t c0, int64_t c1) {
    if (wide) stats_channels_avx512(sh, x, static_cast<P*>(out.mean), out, c0, c1);
    else stats_channels_plain(sh, x, static_cast<P*>(out.mean), out, c0, c1);
  });
}

template <typename T, typename P>
void apply_impl(const BatchNormShape& sh, const T* x, const P* mean, const P* invstd, const P* weight, const P* bias,
                T* y, const T* residual) {
  const bool wide = bn_avx512();
  parallel_for(0, sh.n * sh.c, row_grain(sh), [&](int64_t r0, int64_t r1) {
    if (wide) apply_rows_avx512(sh, x, mean, invstd, weight, bias, y, residual, r0, r1);
    else apply_rows_plain(sh, x, mean, invstd, weight, bias, y, residual, r0, r1);
  });
}

// kMasked: grad_y is read through the fused ReLU's mask (Note [Batch norm with a fused ReLU]), a
// template argument so that each loop is one straight line the compiler can vectorize.
template <bool kMasked, typename T, typename P>
void backward_passes(const BatchNormShape& sh, bool training, const T* x, const T* gy, const P* mean,
                     const P* invstd, const P* weight, T* gx, P* gw, P* gb, const T* y) {
  const bool wide = bn_avx512();
  std::vector<double> sum_g(static_cast<size_t>(sh.c)), sum_gx(static_cast<size_t>(sh.c));
  double* const sg = sum_g.data();
  double* const sgx = sum_gx.data();
  parallel_for(0, sh.c, channel_grain(sh), [&](int64_t c0, int64_t c1) {
    if (wide) backward_sums_avx512<kMasked>(sh, x, gy, mean, invstd, y, sg, sgx, gw, gb, c0, c1);
    else backward_sums_plain<kMasked>(sh, x, gy, mean, invstd, y, sg, sgx, gw, gb, c0, c1);
  });
  if (!gx) return;
  const double* const csg = sg;
  const double* const csgx = sgx;
  parallel_for(0, sh.n * sh.c, row_grain(sh), [&](int64_t r0, int64_t r1) {
    if (wide) backward_rows_avx512<kMasked>(sh, training, x, gy, mean, invstd, weight, y, csg, csgx, gx, r0, r1);
    else backward_rows_plain<kMasked>(sh, training, x, gy, mean, invstd, weight, y, csg, csgx, gx, r0, r1);
  });
}

template <typename T, typename P>
void backward_impl(const BatchNormShape& sh, bool training, const T* x, const T* gy, const P* mean, const P* invstd,
                   const P* weight, T* gx, P* gw, P* gb, const T* y) {
  EMBER_CHECK(!sh.relu || y != nullptr, "batch_norm backward: a fused ReLU needs its output y");
  if (sh.relu)
    backward_passes<true>(sh, training, x, gy, mean, invstd, weight, gx, gw, gb, y);
  else
    backward_passes<false>(sh, training, x, gy, mean, invstd, weight, gx, gw, gb, y);
}

// The CPU kernels read (n, c, s) only (kernels/batchnorm.h); layers/batchnorm.cpp copies a
// channels-last tensor to that order before it calls them.
void check_layout(const char* op, const BatchNormShape& sh) {
  EMBER_CHECK(!sh.channels_last, op, ": the CPU kernels take x in (N, C, S) order, not channels-last (N, S, C)",
              " (n=", sh.n, " c=", sh.c, " s=", sh.s, "); copy it with .contiguous() first");
}

}  // namespace

bool set_batch_norm_avx512(bool on) {
  if (on && !bn_avx512_available()) return false;
  bn_avx512_flag().store(on, std::memory_order_relaxed);
  return true;
}

void batch_norm_stats(DType dtype, DType param_dtype, const BatchNormShape& sh, const void* x,
                      const BatchNormStats& out) {
  check_layout("batch_norm", sh);
  dispatch_batch_norm("batch_norm", dtype, param_dtype, [&](auto t, auto p) {
    using T = decltype(t);
    using P = decltype(p);
    stats_impl<T, P>(sh, static_cast<const T*>(x), out);
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
                         void* grad_weight, void* grad_bias, const void* y, const void* /*bias: the mask is y's*/,
                         void* grad_y_masked) {
  check_layout("batch_norm backward", sh);
  EMBER_CHECK(grad_y_masked == nullptr, "batch_norm backward: the CPU kernels do not write the masked grad_y");
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
