// Known-value, edge-case and error tests for batch norm (layers/nn_functional.h,
// layers/batchnorm.cpp). Expected numbers are worked out by hand in the comments.

#include <catch2/catch.hpp>
#include <ember/ember.h>
#include <ember/kernels/cpu/batchnorm.h>

#include <cmath>
#include <limits>

#include "test_util.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;

// ---- batch norm -------------------------------------------------------------------------------------

TEST_CASE("batch_norm: training on a tiny batch, running stats by hand", "[batchnorm]") {
  // x (3, 2): channel 0 = {1, 2, 3}: mean 2, biased var 2/3, unbiased 1
  //           channel 1 = {4, 4, 10}: mean 6, biased var 8, unbiased 12
  Tensor x = f64({1, 4, 2, 4, 3, 10}, {3, 2});
  Tensor rm = zeros({2}, {.dtype = DType::f64}), rv = ones({2}, {.dtype = DType::f64});
  Tensor w = f64({2, 0.5}, {2}), b = f64({1, -1}, {2});
  const double eps = 1e-5;
  Tensor y = batch_norm(x, rm, rv, w, b, true, 0.1, eps);
  const double s0 = std::sqrt(2.0 / 3 + eps), s1 = std::sqrt(8 + eps);
  check_close_margin(vec(y), {2 * (1 - 2) / s0 + 1, 0.5 * (4 - 6) / s1 - 1, 2 * (2 - 2) / s0 + 1, 0.5 * (4 - 6) / s1 - 1,
                       2 * (3 - 2) / s0 + 1, 0.5 * (10 - 6) / s1 - 1});
  // running = 0.9 running + 0.1 stat: mean (0.2, 0.6), var 0.9 + 0.1 * (1, 12) = (1.0, 2.1)
  check_close_margin(vec(rm), {0.2, 0.6});
  check_close_margin(vec(rv), {1.0, 2.1});
  // A second step moves them again: 0.9 * 0.2 + 0.1 * 2 = 0.38, 0.9 * 1.0 + 0.1 * 1 = 1.0
  batch_norm(x, rm, rv, w, b, true, 0.1, eps);
  check_close_margin(vec(rm), {0.38, 0.9 * 0.6 + 0.6});
  check_close_margin(vec(rv), {1.0, 0.9 * 2.1 + 1.2});
}

TEST_CASE("batch_norm: eval uses the running stats", "[batchnorm]") {
  Tensor x = f64({3, 5, -1, 0.6}, {2, 2});
  Tensor rm = f64({0.2, 0.6}, {2}), rv = f64({1.0, 2.1}, {2});
  Tensor w = f64({2, 0.5}, {2}), b = f64({1, -1}, {2});
  Tensor y = batch_norm(x, rm, rv, w, b, false, 0.1, 1e-5);
  const double s0 = std::sqrt(1.0 + 1e-5), s1 = std::sqrt(2.1 + 1e-5);
  check_close_margin(vec(y), {2 * 2.8 / s0 + 1, 0.5 * 4.4 / s1 - 1, 2 * -1.2 / s0 + 1, -1});
  check_close_margin(vec(rm), {0.2, 0.6});  // untouched in eval
  check_close_margin(vec(rv), {1.0, 2.1});
  // Eval with one sample per channel is fine (training would refuse it).
  CHECK(batch_norm(f64({1, 2}, {1, 2}), rm, rv, Tensor(), Tensor(), false).shape() == Shape{1, 2});
}

TEST_CASE("batch_norm: 4-D input matches the per-channel formula, float32 too", "[batchnorm]") {
  Tensor x = rand({3, 2, 4, 5}, {.dtype = DType::f64});
  Tensor y = batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true);
  Tensor m = mean(x, {0, 2, 3}, true);
  Tensor v = mean(pow(x - m, 2.0), {0, 2, 3}, true);
  check_close_margin(vec(y), vec((x - m) / sqrt(v + 1e-5)), 1e-10);
  // The normalized output of each channel has mean 0 and biased variance ~1.
  check_close_margin(vec(mean(y, {0, 2, 3})), {0, 0}, 1e-12);
  Tensor y32 = batch_norm(x.to(DType::f32), Tensor(), Tensor(), Tensor(), Tensor(), true);
  CHECK(y32.dtype() == DType::f32);
  check_close_margin(vec(y32), vec(y), 1e-5);
}

TEST_CASE("batch_norm: backward of sum(y) without affine is zero, grads for weight and bias", "[batchnorm]") {
  Tensor x = f64({1, 4, 2, 4, 3, 10, 0, 1}, {4, 2}, true);
  Tensor w = f64({2, 0.5}, {2}, true), b = f64({1, -1}, {2}, true);
  Tensor rm = zeros({2}, {.dtype = DType::f64}), rv = ones({2}, {.dtype = DType::f64});
  Tensor y = batch_norm(x, rm, rv, w, b, true);
  sum(y).backward();
  // sum over a channel of xhat is 0, so d sum(y) / dx = 0 and d / dweight = 0; d / dbias = N.
  check_close_margin(vec(x.grad()), std::vector<double>(8, 0.0), 1e-10);
  check_close_margin(vec(w.grad()), {0, 0}, 1e-10);
  check_close_margin(vec(b.grad()), {4, 4});
  CHECK_FALSE(rm.requires_grad());
  CHECK_FALSE(rv.requires_grad());
  // The buffers were updated in place.
  CHECK(vec(rm)[0] == Approx(0.1 * 1.5));
}

TEST_CASE("batch_norm: errors name the op", "[batchnorm]") {
  CHECK_THAT(error_of([] { batch_norm(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true); }),
             Contains("batch_norm") && Contains("more than 1 value per channel"));
  CHECK_THAT(error_of([] { batch_norm(zeros({4, 3}), Tensor(), Tensor(), Tensor(), Tensor(), false); }),
             Contains("batch_norm") && Contains("eval"));
  CHECK_THAT(error_of([] { batch_norm(zeros({4, 3}), Tensor(), Tensor(), ones({2}), Tensor(), true); }),
             Contains("batch_norm") && Contains("weight") && Contains("(3,)"));
  CHECK_THAT(error_of([] { batch_norm(zeros({4}), Tensor(), Tensor(), Tensor(), Tensor(), true); }),
             Contains("batch_norm") && Contains("(N, C, ...)"));
}

TEST_CASE("batch_norm: the AVX-512 build of the CPU loops gives the plain build's bits", "[batchnorm]") {
  // Note [Batch norm's loops with AVX-512]: the statistics, the apply (plain, with the fused ReLU,
  // with a residual) and the backward (training and eval, masked by the ReLU or not) called at the
  // kernel level with each build, every dtype pairing, rows whose length leaves tails after 8 and
  // 16 lanes, (N, C) input (s = 1), and a NaN; the outputs compared byte for byte. Where the CPU
  // lacks AVX-512 only the plain build runs (and is compared with itself).
  const bool has_avx512 = kernels::cpu::set_batch_norm_avx512(true);
  struct Pairing {
    DType t, p;
  };
  for (const Pairing pr : {Pairing{DType::f32, DType::f32}, Pairing{DType::f64, DType::f64},
                           Pairing{DType::bf16, DType::f32}, Pairing{DType::f16, DType::f32},
                           Pairing{DType::bf16, DType::bf16}})
    for (const int64_t s : {int64_t{1}, int64_t{37}, int64_t{64}})
      for (const bool relu : {false, true})
        for (const bool residual : {false, true}) {
          if (residual && !relu) continue;
          INFO(dtype_name(pr.t) << " with " << dtype_name(pr.p) << " s=" << s << " relu " << relu << " residual "
                                << residual);
          kernels::BatchNormShape sh{.n = 3, .c = 5, .s = s, .relu = relu};
          const int64_t count = sh.n * sh.c * sh.s;
          Generator gen(40 + s);
          std::vector<double> xv = (randn({count}, {}, gen) * 3.0 + 1.0).to_vector<double>();
          if (s > 1) xv[static_cast<size_t>(s + 3)] = std::numeric_limits<double>::quiet_NaN();  // channel 1
          const Tensor x = from_vector<double>(xv).to(pr.t);
          const Tensor gy = randn({count}, {}, gen).to(pr.t), res = randn({count}, {}, gen).to(pr.t);
          const Tensor w = (rand({sh.c}, {}, gen) + 0.5).to(pr.p), b = randn({sh.c}, {}, gen).to(pr.p);
          auto run = [&](bool avx512) {
            REQUIRE(kernels::cpu::set_batch_norm_avx512(avx512));
            Tensor mean = empty({sh.c}, {.dtype = pr.p}), var = empty({sh.c}, {.dtype = pr.p});
            kernels::cpu::batch_norm_stats(pr.t, pr.p, sh, x.data(), {.mean = mean.data(), .var = var.data()});
            const Tensor invstd = rsqrt(var.to(DType::f64) + 1e-5).to(pr.p);
            Tensor y = empty({count}, {.dtype = pr.t});
            kernels::cpu::batch_norm_apply(pr.t, pr.p, sh, x.data(), mean.data(), invstd.data(), w.data(), b.data(),
                                           y.data(), residual ? res.data() : nullptr);
            std::vector<Tensor> out = {mean, var, y};
            for (const bool training : {true, false}) {
              Tensor gx = empty({count}, {.dtype = pr.t}), gw = empty({sh.c}, {.dtype = pr.p}),
                     gb = empty({sh.c}, {.dtype = pr.p});
              kernels::cpu::batch_norm_backward(pr.t, pr.p, sh, training, x.data(), gy.data(), mean.data(),
                                                invstd.data(), w.data(), gx.data(), gw.data(), gb.data(),
                                                relu ? y.data() : nullptr);
              out.insert(out.end(), {gx, gw, gb});
            }
            return out;
          };
          const std::vector<Tensor> plain = run(false), wide = run(has_avx512);
          REQUIRE(plain.size() == wide.size());
          for (size_t i = 0; i < plain.size(); ++i) {
            INFO("output " << i);
            const auto* a = static_cast<const unsigned char*>(plain[i].data());
            const auto* b2 = static_cast<const unsigned char*>(wide[i].data());
            CHECK(std::vector<unsigned char>(a, a + plain[i].nbytes()) ==
                  std::vector<unsigned char>(b2, b2 + wide[i].nbytes()));
          }
        }
  kernels::cpu::set_batch_norm_avx512(has_avx512);
}
