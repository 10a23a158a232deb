// kernels/cuda/batchnorm against kernels/cpu/batchnorm; and on both, the mixed-precision kernels
// (f16/bf16 x, float32 per-channel vectors) against the float32 kernels. The channels-last (N, S, C)
// kernels and layer: test_batchnorm_channels_last.cpp.
//
// Tolerances. The CPU accumulates the statistics and the backward sums in double (cpu_acc_t) and
// rounds to T once; the CUDA kernels accumulate in acc_t<T> (Note [Accumulation types] in
// core/dtype.h). f64: both in double, only the summation order differs (a block tree vs a loop),
// which moves a double sum of M terms by at most ~M * 2^-53 relative — below 1e-12 relative for
// M <= 10^4 (atol covers results near 0 from cancelling sums). f32: a float sum of M terms, each
// thread adding about M / 256 of them before a reduction tree of 13 levels (and at most 3 split
// partials), is within K eps sum|terms| of the exact sum, K = M / 256 + 16 (Higham's bound for
// recursive summation, per level); the backward's grad_x combines those sums (see
// require_backward_f32). apply: the same T operations in the same order, except that nvcc may
// fuse (x - m) * scale + shift into an FMA (one rounding instead of two): within 2 ulp of the
// result's magnitude terms.

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../../kernels/cpu/batchnorm.h"
#include "../../kernels/cuda/batchnorm.h"
#include "device_buffer.h"
#include "random_data.h"

namespace {

using ember::DType;
using ember::kernels::BatchNormShape;
using ember::testing::DeviceBuffer;
using ember::testing::random_vector;

template <typename T>
double sum_rtol() {
  return std::is_same_v<T, float> ? static_cast<double>(std::numeric_limits<float>::epsilon()) : 1e-12;
}
template <typename T>
double sum_atol() {
  return std::is_same_v<T, float> ? 1e-6 : 1e-12;
}

const BatchNormShape kShapes[] = {
    {4, 3, 37},     // images with odd spatial size
    {33, 5, 1},     // (N, C) input: channel stride 1 between rows of one element
    {2, 2, 1030},   // long rows: many elements per thread, 1000+
    {1, 1, 1},      // one element: variance 0
    {3, 70, 4},     // more channels than a warp
    {8, 3, 2000},   // few channels, many elements: split reductions (3 slices per channel on 132 SMs)
    {300, 2, 5},    // short rows, many images: each thread's walk steps 51 rows and 1 element at a time
};

template <typename T>
struct Inputs {
  std::vector<T> x, gy, mean, invstd, weight, bias;
  Inputs(const BatchNormShape& sh, uint64_t seed) {
    const size_t n = static_cast<size_t>(sh.n * sh.c * sh.s), c = static_cast<size_t>(sh.c);
    x = random_vector<T>(n, seed, -2.0, 3.0);  // off-centre: mean != 0
    gy = random_vector<T>(n, seed + 1);
    mean = random_vector<T>(c, seed + 2);
    invstd = random_vector<T>(c, seed + 3, 0.5, 2.0);
    weight = random_vector<T>(c, seed + 4);
    bias = random_vector<T>(c, seed + 5);
  }
};

// The f32 backward against the CPU's (double) result, with the bounds of the note above: per
// channel, Sb = sum |g| and Sw = sum |g| |xhat| bound the float sums' errors eb = K eps Sb and
// ew = (K + 2) eps Sw (2 more roundings per term: the centring and the product); grad_x =
// w is (g - sb / M - xhat sw / M) then errs by |w is| (eb + |xhat| ew) / M, plus 4 roundings of
// its terms. Every result also gets eps |want| for the CPU's own final rounding.
void require_backward_f32(const BatchNormShape& sh, const Inputs<float>& in, bool training, bool affine,
                          const std::vector<float>& got_x, const std::vector<float>& want_x,
                          const std::vector<float>& got_w, const std::vector<float>& want_w,
                          const std::vector<float>& got_b, const std::vector<float>& want_b) {
  const double eps = std::numeric_limits<float>::epsilon();
  const int64_t M = sh.n * sh.s;
  const double K = static_cast<double>(M) / 256.0 + 16.0;
  for (int64_t c = 0; c < sh.c; ++c) {
    const double m = in.mean[c], is = in.invstd[c], w = affine ? in.weight[c] : 1.0;
    double Sb = 0, Sw = 0, sb = 0, sw = 0;
    for (int64_t i = 0; i < sh.n; ++i)
      for (int64_t j = 0; j < sh.s; ++j) {
        const size_t e = static_cast<size_t>((i * sh.c + c) * sh.s + j);
        const double g = in.gy[e], xhat = (in.x[e] - m) * is;
        Sb += std::fabs(g), Sw += std::fabs(g * xhat), sb += g, sw += g * xhat;
      }
    const double eb = K * eps * Sb, ew = (K + 2) * eps * Sw;
    INFO("channel " << c);
    REQUIRE(std::fabs(got_b[c] - want_b[c]) <= eb + eps * std::fabs(want_b[c]));
    REQUIRE(std::fabs(got_w[c] - want_w[c]) <= ew + eps * std::fabs(want_w[c]));
    for (int64_t i = 0; i < sh.n; ++i)
      for (int64_t j = 0; j < sh.s; ++j) {
        const size_t e = static_cast<size_t>((i * sh.c + c) * sh.s + j);
        const double g = in.gy[e], xhat = (in.x[e] - m) * is, scale = std::fabs(w * is);
        const double sums = training ? scale * (eb + std::fabs(xhat) * ew) / static_cast<double>(M) : 0.0;
        const double terms = training ? std::fabs(g) + std::fabs(sb) / M + std::fabs(xhat * sw) / M : std::fabs(g);
        INFO("grad_x element " << e << ": got " << got_x[e] << ", want " << want_x[e]);
        REQUIRE(std::fabs(got_x[e] - want_x[e]) <= sums + 4 * eps * scale * terms + eps * std::fabs(want_x[e]));
      }
  }
}

// The GPU's one-pass statistics (Note [One-pass batch norm statistics] in kernels/cuda/
// batchnorm.cu) against the CPU's two-pass ones, per channel. With k the channel's first element
// and d = x - k (one rounding), the sums s1 = sum d and s2 = sum d^2 err by at most K eps sum |d|
// and (K + 2) eps sum d^2 (K as in require_backward_f32); mean = k + s1 / M errs by the first over
// M, var = s2 / M - (s1 / M)^2 by the second over M plus 2 |s1 / M| times the first over M. Each
// result also gets 4 eps of its own magnitude for the last roundings (and the CPU's).
template <typename T>
void require_stats(const BatchNormShape& sh, const std::vector<T>& x, const std::vector<T>& got_mean,
                   const std::vector<T>& got_var, const std::vector<T>& want_mean, const std::vector<T>& want_var) {
  const double eps = std::numeric_limits<T>::epsilon();
  const int64_t M = sh.n * sh.s;
  const double K = static_cast<double>(M) / 256.0 + 16.0;
  for (int64_t c = 0; c < sh.c; ++c) {
    if (std::isnan(want_mean[c])) continue;  // a NaN channel: its callers check it
    const double k = x[static_cast<size_t>(c * sh.s)];
    double abs_d = 0, sq_d = 0, s1 = 0;
    for (int64_t i = 0; i < sh.n; ++i)
      for (int64_t j = 0; j < sh.s; ++j) {
        const double d = x[static_cast<size_t>((i * sh.c + c) * sh.s + j)] - k;
        abs_d += std::fabs(d), sq_d += d * d, s1 += d;
      }
    const double e1 = K * eps * abs_d / M, e2 = (K + 2) * eps * sq_d / M;
    INFO("channel " << c << ": mean " << got_mean[c] << " vs " << want_mean[c] << ", var " << got_var[c] << " vs "
                    << want_var[c]);
    REQUIRE(std::fabs(got_mean[c] - want_mean[c]) <= e1 + 4 * eps * std::fabs(want_mean[c]) + 1e-300);
    REQUIRE(std::fabs(got_var[c] - want_var[c]) <= e2 + 2 * std::fabs(s1 / M) * e1 + 4 * eps * want_var[c] + 1e-300);
  }
}

}  // namespace

TEMPLATE_TEST_CASE("cuda batch_norm_stats matches the CPU (one-pass shifted sums against two passes)",
                   "[cuda][batchnorm]", float, double) {
  using T = TestType;
  const DType dt = ember::dtype_of<T>::value;
  uint64_t seed = 1;
  for (const BatchNormShape& sh : kShapes) {
    INFO("n=" << sh.n << " c=" << sh.c << " s=" << sh.s);
    const Inputs<T> in(sh, seed += 10);
    DeviceBuffer<T> dx(in.x), dmean(static_cast<size_t>(sh.c)), dvar(static_cast<size_t>(sh.c));
    ember::kernels::gpu::batch_norm_stats(dt, dt, sh, dx.data(), {.mean = dmean.data(), .var = dvar.data()});
    std::vector<T> mean(static_cast<size_t>(sh.c)), var(static_cast<size_t>(sh.c));
    ember::kernels::cpu::batch_norm_stats(dt, dt, sh, in.x.data(), {.mean = mean.data(), .var = var.data()});
    require_stats(sh, in.x, checked(dmean), checked(dvar), mean, var);
  }
}

TEMPLATE_TEST_CASE("cuda batch_norm_apply matches the CPU, with and without affine parameters", "[cuda][batchnorm]",
                   float, double) {
  using T = TestType;
  const DType dt = ember::dtype_of<T>::value;
  const double eps = std::numeric_limits<T>::epsilon();
  uint64_t seed = 100;
  for (const BatchNormShape& sh : kShapes) {
    const Inputs<T> in(sh, seed += 10);
    DeviceBuffer<T> dx(in.x), dm(in.mean), dis(in.invstd), dw(in.weight), db(in.bias);
    DeviceBuffer<T> dy(in.x.size());
    for (bool affine : {true, false}) {
      INFO("n=" << sh.n << " c=" << sh.c << " s=" << sh.s << " affine=" << affine);
      ember::kernels::gpu::batch_norm_apply(dt, dt, sh, dx.data(), dm.data(), dis.data(), affine ? dw.data() : nullptr,
                                             affine ? db.data() : nullptr, dy.data());
      std::vector<T> want(in.x.size());
      ember::kernels::cpu::batch_norm_apply(dt, dt, sh, in.x.data(), in.mean.data(), in.invstd.data(),
                                            affine ? in.weight.data() : nullptr, affine ? in.bias.data() : nullptr,
                                            want.data());
      // |x - m| * |scale| <= 5 * 2 * 1 and |shift| <= 1: 2 ulp of 11.
      ember::testing::require_close(checked(dy), want, 2 * 11 * eps, 0, "apply");
    }
  }
}

TEMPLATE_TEST_CASE("cuda batch_norm_backward matches the CPU (training and eval, any outputs null)",
                   "[cuda][batchnorm]", float, double) {
  using T = TestType;
  const DType dt = ember::dtype_of<T>::value;
  uint64_t seed = 200;
  for (const BatchNormShape& sh : kShapes) {
    const Inputs<T> in(sh, seed += 10);
    const size_t n = in.x.size(), c = static_cast<size_t>(sh.c);
    DeviceBuffer<T> dx(in.x), dgy(in.gy), dm(in.mean), dis(in.invstd), dw(in.weight);
    DeviceBuffer<T> dgx(n), dgw(c), dgb(c);
    for (bool training : {true, false}) {
      for (int mask = 1; mask < 8; ++mask) {  // which of grad_x, grad_weight, grad_bias are wanted
        const bool want_x = mask & 1, want_w = mask & 2, want_b = mask & 4;
        const bool affine = mask != 3;  // also once without weight
        INFO("n=" << sh.n << " c=" << sh.c << " s=" << sh.s << " training=" << training << " mask=" << mask);
        ember::kernels::gpu::batch_norm_backward(dt, dt, sh, training, dx.data(), dgy.data(), dm.data(), dis.data(),
                                                  affine ? dw.data() : nullptr, want_x ? dgx.data() : nullptr,
                                                  want_w ? dgw.data() : nullptr, want_b ? dgb.data() : nullptr);
        std::vector<T> gx(n), gw(c), gb(c);
        ember::kernels::cpu::batch_norm_backward(dt, dt, sh, training, in.x.data(), in.gy.data(), in.mean.data(),
                                                 in.invstd.data(), affine ? in.weight.data() : nullptr, gx.data(),
                                                 gw.data(), gb.data());
        // grad_x is a double expression of the (double) sums, rounded once; the sums' order
        // differences are scaled by |xhat| * |weight * invstd| / M <= 10: same bound, x10.
        if constexpr (std::is_same_v<T, float>) {
          require_backward_f32(sh, in, training, affine, want_x ? checked(dgx) : gx, gx, want_w ? checked(dgw) : gw,
                               gw, want_b ? checked(dgb) : gb, gb);
        } else {
          if (want_x) ember::testing::require_close(checked(dgx), gx, 10 * sum_atol<T>(), 2 * sum_rtol<T>(), "grad_x");
          if (want_w) ember::testing::require_close(checked(dgw), gw, sum_atol<T>(), sum_rtol<T>(), "grad_weight");
          if (want_b) ember::testing::require_close(checked(dgb), gb, sum_atol<T>(), sum_rtol<T>(), "grad_bias");
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("cuda batch norm: NaN in a channel stays in that channel, and empty shapes", "[cuda][batchnorm]", float,
                   double) {
  using T = TestType;
  const DType dt = ember::dtype_of<T>::value;
  const BatchNormShape sh{3, 4, 5};
  Inputs<T> in(sh, 7);
  in.x[static_cast<size_t>((1 * sh.c + 2) * sh.s + 3)] = std::numeric_limits<T>::quiet_NaN();  // channel 2
  DeviceBuffer<T> dx(in.x), dmean(4), dvar(4);
  ember::kernels::gpu::batch_norm_stats(dt, dt, sh, dx.data(), {.mean = dmean.data(), .var = dvar.data()});
  std::vector<T> mean(4), var(4);
  ember::kernels::cpu::batch_norm_stats(dt, dt, sh, in.x.data(), {.mean = mean.data(), .var = var.data()});
  REQUIRE(std::isnan(mean[2]));
  const std::vector<T> gmean = checked(dmean), gvar = checked(dvar);
  for (size_t c = 0; c < 4; ++c) {
    INFO("channel " << c);
    CHECK(std::isnan(gmean[c]) == (c == 2));
    CHECK(std::isnan(gvar[c]) == (c == 2));
  }
  require_stats(sh, in.x, gmean, gvar, mean, var);

  // No channels / no elements: nothing is written (no channels) or statistics are NaN (0 / 0).
  DeviceBuffer<T> one(1), m1(1), v1(1);
  ember::kernels::gpu::batch_norm_stats(dt, dt, {0, 0, 1}, one.data(), {.mean = m1.data(), .var = v1.data()});
  ember::kernels::gpu::batch_norm_apply(dt, dt, {0, 3, 4}, one.data(), m1.data(), v1.data(), nullptr, nullptr, m1.data());
  ember::kernels::gpu::batch_norm_stats(dt, dt, {0, 1, 1}, one.data(), {.mean = m1.data(), .var = v1.data()});
  REQUIRE(std::isnan(checked(m1)[0]));
  one.check_guards();
}

namespace {

// x as floats (exact: every f16/bf16 value is a float), and floats rounded to T.
template <typename T>
std::vector<float> widened(const std::vector<T>& x) {
  return std::vector<float>(x.begin(), x.end());
}
template <typename T>
std::vector<T> rounded(const std::vector<float>& x) {
  std::vector<T> r;
  for (float v : x) r.push_back(T(v));
  return r;
}

// Runs the mixed-precision kernels (16-bit x, float per-channel vectors) and the float32 kernels on
// the widened x on one backend (Note [Mixed-precision batch norm] in kernels/batchnorm.h), and requires
// the same results: y and grad x equal to the float32 results rounded to T, the statistics and
// grad weight / grad bias equal to the float32 ones, bit for bit.
template <typename T, typename Backend>
void require_mixed_equals_f32(const BatchNormShape& sh, uint64_t seed, const Backend& backend) {
  const DType dt = std::is_same_v<T, ember::Half> ? DType::f16 : DType::bf16;
  const size_t n = static_cast<size_t>(sh.n * sh.c * sh.s), c = static_cast<size_t>(sh.c);
  const std::vector<T> x = rounded<T>(random_vector<float>(n, seed, -2.0, 3.0));
  const std::vector<T> gy = rounded<T>(random_vector<float>(n, seed + 1));
  const std::vector<float> xf = widened(x), gyf = widened(gy);
  const std::vector<float> w = random_vector<float>(c, seed + 4), b = random_vector<float>(c, seed + 5);
  for (bool training : {true, false}) {
    INFO("n=" << sh.n << " c=" << sh.c << " s=" << sh.s << " training=" << training);
    std::vector<float> mean(c), var(c), mean32(c), var32(c), gw(c), gb(c), gw32(c), gb32(c), y32(n), gx32(n);
    std::vector<T> y(n), gx(n);
    backend.run(dt, x, gy, w, b, training, mean, var, y, gx, gw, gb);
    backend.run(DType::f32, xf, gyf, w, b, training, mean32, var32, y32, gx32, gw32, gb32);
    CHECK(mean == mean32);
    CHECK(var == var32);
    CHECK(widened(y) == widened(rounded<T>(y32)));
    CHECK(widened(gx) == widened(rounded<T>(gx32)));
    CHECK(gw == gw32);
    CHECK(gb == gb32);
  }
}

// One backend's stats, apply (with the batch statistics' invstd) and backward, on host vectors.
struct CpuBackend {
  template <typename T>
  void run(DType dt, const std::vector<T>& x, const std::vector<T>& gy, const std::vector<float>& w,
           const std::vector<float>& b, bool training, std::vector<float>& mean, std::vector<float>& var,
           std::vector<T>& y, std::vector<T>& gx, std::vector<float>& gw, std::vector<float>& gb) const {
    namespace k = ember::kernels::cpu;
    const BatchNormShape sh = shape;
    k::batch_norm_stats(dt, DType::f32, sh, x.data(), {.mean = mean.data(), .var = var.data()});
    std::vector<float> invstd(var.size());
    for (size_t i = 0; i < var.size(); ++i) invstd[i] = 1.0f / std::sqrt(var[i] + 1e-5f);
    k::batch_norm_apply(dt, DType::f32, sh, x.data(), mean.data(), invstd.data(), w.data(), b.data(), y.data());
    k::batch_norm_backward(dt, DType::f32, sh, training, x.data(), gy.data(), mean.data(), invstd.data(), w.data(),
                           gx.data(), gw.data(), gb.data());
  }
  BatchNormShape shape;
};

struct CudaBackend {
  template <typename T>
  void run(DType dt, const std::vector<T>& x, const std::vector<T>& gy, const std::vector<float>& w,
           const std::vector<float>& b, bool training, std::vector<float>& mean, std::vector<float>& var,
           std::vector<T>& y, std::vector<T>& gx, std::vector<float>& gw, std::vector<float>& gb) const {
    namespace k = ember::kernels::gpu;
    const BatchNormShape sh = shape;
    DeviceBuffer<T> dx(x), dgy(gy), dy(x.size()), dgx(x.size());
    DeviceBuffer<float> dw(w), db(b), dmean(w.size()), dvar(w.size()), dgw(w.size()), dgb(w.size());
    k::batch_norm_stats(dt, DType::f32, sh, dx.data(), {.mean = dmean.data(), .var = dvar.data()});
    mean = checked(dmean);
    var = checked(dvar);
    std::vector<float> invstd(var.size());
    for (size_t i = 0; i < var.size(); ++i) invstd[i] = 1.0f / std::sqrt(var[i] + 1e-5f);
    DeviceBuffer<float> dis(invstd);
    k::batch_norm_apply(dt, DType::f32, sh, dx.data(), dmean.data(), dis.data(), dw.data(), db.data(), dy.data());
    k::batch_norm_backward(dt, DType::f32, sh, training, dx.data(), dgy.data(), dmean.data(), dis.data(), dw.data(),
                           dgx.data(), dgw.data(), dgb.data());
    y = checked(dy);
    gx = checked(dgx);
    gw = checked(dgw);
    gb = checked(dgb);
  }
  BatchNormShape shape;
};

}  // namespace

TEMPLATE_TEST_CASE("batch norm kernels on f16/bf16 x with float32 per-channel vectors are the float32 kernels on "
                   "the widened x, rounded once (CPU and cuda)",
                   "[cuda][batchnorm]", ember::Half, ember::BFloat16) {
  using T = TestType;
  uint64_t seed = 300;
  for (const BatchNormShape& sh : kShapes) {
    {
      INFO("CPU");
      require_mixed_equals_f32<T>(sh, seed += 10, CpuBackend{sh});
    }
    {
      INFO("cuda");
      require_mixed_equals_f32<T>(sh, seed += 10, CudaBackend{sh});
    }
  }
}

TEST_CASE("batch norm kernels refuse per-channel vectors of another dtype than x's or float32", "[cuda][batchnorm]") {
  const BatchNormShape sh{2, 1, 2};
  std::vector<float> x(4, 1.0f), m(1), v(1);
  DeviceBuffer<float> dx(x), dm(1), dv(1);
  // float32 x with bf16 statistics; f64 x with float32 statistics: neither is a supported pair.
  CHECK_THROWS_WITH(
      ember::kernels::cpu::batch_norm_stats(DType::f32, DType::bf16, sh, x.data(), {.mean = m.data(), .var = v.data()}),
      Catch::Contains("per-channel vectors") && Catch::Contains("bfloat16"));
  CHECK_THROWS_WITH(ember::kernels::gpu::batch_norm_stats(DType::f64, DType::f32, sh, dx.data(),
                                                          {.mean = dm.data(), .var = dv.data()}),
                    Catch::Contains("per-channel vectors") && Catch::Contains("float64"));
}

TEMPLATE_TEST_CASE("cuda batch_norm_stats finishes like the CPU: invstd, the running statistics, the batch count",
                   "[cuda][batchnorm]", float, double) {
  using T = TestType;
  const DType dt = ember::dtype_of<T>::value;
  const double eps = std::numeric_limits<T>::epsilon(), bn_eps = 1e-5, momentum = 0.1;
  uint64_t seed = 900;
  for (const BatchNormShape& sh : kShapes) {
    if (sh.n * sh.s < 2) continue;  // the unbiased variance needs two values
    INFO("n=" << sh.n << " c=" << sh.c << " s=" << sh.s);
    const size_t c = static_cast<size_t>(sh.c);
    const Inputs<T> in(sh, seed += 10);
    const std::vector<T> rm0 = random_vector<T>(c, seed + 7), rv0 = random_vector<T>(c, seed + 8, 0.5, 2.0);
    DeviceBuffer<T> dx(in.x), dmean(c), dvar(c), dinv(c), drm(rm0), drv(rv0);
    DeviceBuffer<int64_t> dcount(std::vector<int64_t>{41});
    // Every output asked for, on either backend's memory.
    const auto every_output = [&](T* mean, T* var, T* inv, T* rm, T* rv, int64_t* count) {
      return ember::kernels::BatchNormStats{.mean = mean, .var = var, .invstd = inv, .eps = bn_eps,
                                            .running_mean = rm, .running_var = rv, .momentum = momentum,
                                            .batches_tracked = count};
    };
    ember::kernels::gpu::batch_norm_stats(
        dt, dt, sh, dx.data(),
        every_output(dmean.data(), dvar.data(), dinv.data(), drm.data(), drv.data(), dcount.data()));
    std::vector<T> mean(c), var(c), inv(c), rm = rm0, rv = rv0;
    int64_t count = 41;
    ember::kernels::cpu::batch_norm_stats(
        dt, dt, sh, in.x.data(), every_output(mean.data(), var.data(), inv.data(), rm.data(), rv.data(), &count));
    const std::vector<T> gmean = checked(dmean), gvar = checked(dvar), ginv = checked(dinv), grm = checked(drm),
                         grv = checked(drv);
    require_stats(sh, in.x, gmean, gvar, mean, var);
    CHECK(count == 42);
    CHECK(checked(dcount)[0] == 42);
    const double M = static_cast<double>(sh.n * sh.s);
    for (size_t i = 0; i < c; ++i) {
      INFO("channel " << i);
      // Each finished value from the GPU's own mean and variance, within a few roundings: the
      // finish is the same code on both backends (finish_channel_stats in kernels/batchnorm.h).
      const double want_inv = 1.0 / std::sqrt(static_cast<double>(gvar[i]) + bn_eps);
      const double want_rm = (1 - momentum) * rm0[i] + momentum * gmean[i];
      const double want_rv = (1 - momentum) * rv0[i] + momentum * gvar[i] * M / (M - 1);
      CHECK(std::fabs(ginv[i] - want_inv) <= 4 * eps * want_inv);
      CHECK(std::fabs(grm[i] - want_rm) <= 4 * eps * (std::fabs(rm0[i]) + std::fabs(gmean[i])));
      CHECK(std::fabs(grv[i] - want_rv) <= 4 * eps * (rv0[i] + gvar[i] * M / (M - 1)));
      // And the CPU's, from its own statistics.
      CHECK(std::fabs(inv[i] - 1.0 / std::sqrt(static_cast<double>(var[i]) + bn_eps)) <= 2 * eps * inv[i]);
      CHECK(std::fabs(rm[i] - ((1 - momentum) * rm0[i] + momentum * mean[i])) <=
            2 * eps * (std::fabs(rm0[i]) + std::fabs(mean[i])));
      CHECK(std::fabs(rv[i] - ((1 - momentum) * rv0[i] + momentum * var[i] * M / (M - 1))) <=
            2 * eps * (rv0[i] + var[i] * M / (M - 1)));
    }
  }
}

TEST_CASE("cuda batch_norm_stats keeps the variance of a channel far from zero (shifted sums)", "[cuda][batchnorm]") {
  // Values 1000 + 0.01 u, u uniform in [-1, 1]: E[x^2] - E[x]^2 in float cancels every digit of a
  // variance of 3.3e-5 (x^2 ~ 1e6 has an ulp of 0.06). Shifted by the channel's first element the
  // sums hold the spread only. Both layouts, the split path (64 000 values per channel).
  for (const bool channels_last : {false, true}) {
    INFO("channels_last " << channels_last);
    const BatchNormShape sh{.n = 64, .c = 8, .s = 1000, .channels_last = channels_last};
    const size_t total = static_cast<size_t>(sh.n * sh.c * sh.s);
    const std::vector<double> u = random_vector<double>(total, 4242, -1.0, 1.0);
    std::vector<float> x(total);
    for (size_t i = 0; i < total; ++i) x[i] = static_cast<float>(1000.0 + 0.01 * u[i]);
    DeviceBuffer<float> dx(x), dmean(8), dvar(8);
    ember::kernels::gpu::batch_norm_stats(DType::f32, DType::f32, sh, dx.data(),
                                          {.mean = dmean.data(), .var = dvar.data()});
    const std::vector<float> mean = checked(dmean), var = checked(dvar);
    for (int64_t c = 0; c < sh.c; ++c) {
      double m = 0, v = 0;
      const auto at = [&](int64_t i, int64_t j) {
        return x[static_cast<size_t>(channels_last ? (i * sh.s + j) * sh.c + c : (i * sh.c + c) * sh.s + j)];
      };
      for (int64_t i = 0; i < sh.n; ++i)
        for (int64_t j = 0; j < sh.s; ++j) m += at(i, j);
      m /= static_cast<double>(sh.n * sh.s);
      for (int64_t i = 0; i < sh.n; ++i)
        for (int64_t j = 0; j < sh.s; ++j) v += (at(i, j) - m) * (at(i, j) - m);
      v /= static_cast<double>(sh.n * sh.s);
      INFO("channel " << c << ": var " << var[c] << ", exact " << v);
      CHECK(std::fabs(mean[c] - m) <= 1e-4);
      CHECK(std::fabs(var[c] - v) <= 1e-3 * v);
    }
  }
}
