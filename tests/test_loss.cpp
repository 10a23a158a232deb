// Known-value, edge-case and error tests for cross_entropy, nll_loss and mse_loss
// (layers/nn_functional.h, layers/loss.cpp). Expected numbers are worked out by hand in the comments
// (e = exp(1)), or computed by an independent long-double reference loop in the test.

#include <catch2/catch.hpp>
#include <ember/ember.h>

#include <cmath>
#include <limits>

#include "softmax_answers.h"
#include "test_util.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;

namespace {

// PyTorch's cross entropy written out directly in long double: logits (N, C, S) contiguous,
// target (N, S). Returns the per-sample losses and the per-sample target weights.
struct RefLoss {
  std::vector<long double> loss, weight;
};
RefLoss reference_cross_entropy(const std::vector<double>& x, const std::vector<int64_t>& t, int64_t N, int64_t C,
                                int64_t S, const std::vector<double>& w, int64_t ignore, long double eps) {
  RefLoss r;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t s = 0; s < S; ++s) {
      auto at = [&](int64_t c) { return static_cast<long double>(x[(n * C + c) * S + s]); };
      long double z = 0;
      for (int64_t c = 0; c < C; ++c) z += std::exp(at(c));  // small logits: no shift needed here
      const long double log_z = std::log(z);
      const int64_t target = t[n * S + s];
      if (target == ignore) {
        r.loss.push_back(0);
        r.weight.push_back(0);
        continue;
      }
      auto wc = [&](int64_t c) { return w.empty() ? 1.0L : static_cast<long double>(w[c]); };
      long double smooth = 0;
      for (int64_t c = 0; c < C; ++c) smooth += -wc(c) * (at(c) - log_z);
      r.loss.push_back((1 - eps) * -wc(target) * (at(target) - log_z) + eps / C * smooth);
      r.weight.push_back(wc(target));
    }
  return r;
}

}  // namespace

// ---- cross_entropy ------------------------------------------------------------------------------

TEST_CASE("cross_entropy: known values for every reduction", "[loss]") {
  // Row 0: logits (1, 2, 3), target 2: loss = lse - 3 = log(1 + e^-1 + e^-2) = 0.40760596...
  // Row 1: logits (1, 1, 1), target 0: loss = log 3 = 1.09861228...
  Tensor x = f64({1, 2, 3, 1, 1, 1}, {2, 3});
  Tensor t = i64({2, 0}, {2});
  const double l0 = kLse123 - 3, l1 = kLog3;
  CHECK(cross_entropy(x, t).item() == Approx((l0 + l1) / 2));
  CHECK(cross_entropy(x, t, {.reduction = Reduction::Sum}).item() == Approx(l0 + l1));
  Tensor none = cross_entropy(x, t, {.reduction = Reduction::None});
  CHECK(none.shape() == Shape{2});
  check_close_rel9(vec(none), {l0, l1});
  // Weights (1, 2, 3): mean = (3 * l0 + 1 * l1) / (3 + 1) — divided by the targets' weights.
  Tensor w = f64({1, 2, 3}, {3});
  CHECK(cross_entropy(x, t, {.weight = w}).item() == Approx(0.5803575455003129));
  CHECK(cross_entropy(x, t, {.weight = w, .reduction = Reduction::Sum}).item() == Approx(3 * l0 + l1));
  check_close_rel9(vec(cross_entropy(x, t, {.weight = w, .reduction = Reduction::None})), {3 * l0, l1});
  // float32.
  CHECK(cross_entropy(x.to(DType::f32), t).item() == Approx((l0 + l1) / 2).epsilon(1e-6));
  CHECK(cross_entropy(x.to(DType::f32), t).dtype() == DType::f32);
}

TEST_CASE("cross_entropy: ignore_index", "[loss]") {
  Tensor x = f64({1, 2, 3, 1, 1, 1}, {2, 3});
  const double l0 = kLse123 - 3;
  // The ignored row adds nothing to the sum nor to the mean's denominator.
  CHECK(cross_entropy(x, i64({2, -100}, {2})).item() == Approx(l0));
  check_close_rel9(vec(cross_entropy(x, i64({2, -100}, {2}), {.reduction = Reduction::None})), {l0, 0});
  // An ignore_index inside [0, C) ignores that class.
  CHECK(cross_entropy(x, i64({2, 0}, {2}), {.ignore_index = 0}).item() == Approx(l0));
  CHECK(cross_entropy(x, i64({2, 0}, {2}), {.weight = f64({1, 2, 3}, {3}), .ignore_index = 0}).item() ==
        Approx(l0));
  // Everything ignored: mean is 0 / 0 = NaN (as PyTorch), sum is 0, and the gradient is 0.
  Tensor xg = f64({1, 2, 3, 1, 1, 1}, {2, 3}, true);
  CHECK(std::isnan(cross_entropy(xg, i64({-100, -100}, {2})).item()));
  Tensor s = cross_entropy(xg, i64({-100, -100}, {2}), {.reduction = Reduction::Sum});
  CHECK(s.item() == 0);
  s.backward();
  check_close_rel9(vec(xg.grad()), {0, 0, 0, 0, 0, 0});
}

TEST_CASE("cross_entropy: label smoothing, with and without weights", "[loss]") {
  Tensor x = f64({1, 2, 3, 1, 1, 1}, {2, 3});
  Tensor t = i64({2, 0}, {2});
  // eps = 0.1, C = 3, logp0 = (1, 2, 3) - lse, logp1 = -log 3 (each):
  //   row 0: 0.9 * 0.40760596 + 0.1 / 3 * (2.40760596 + 1.40760596 + 0.40760596) = 0.50760596
  //   row 1: 0.9 * log 3 + 0.1 / 3 * 3 log 3 = log 3
  CHECK(cross_entropy(x, t, {.label_smoothing = 0.1}).item() == Approx(0.8031091265562452));
  check_close_rel9(vec(cross_entropy(x, t, {.reduction = Reduction::None, .label_smoothing = 0.1})),
              {0.5076059644443807, kLog3});
  // With weights (1, 2, 3), each class of the smoothing term carries its own weight:
  //   row 0: 0.9 * 3 * 0.40760596 + 0.1 / 3 * (1 * 2.40760596 + 2 * 1.40760596 + 3 * 0.40760596) = 1.31539063
  //   row 1: 0.9 * 1 * log 3 + 0.1 / 3 * (1 + 2 + 3) log 3 = 1.20847352
  // and 'mean' divides by the targets' weights 3 + 1.
  Tensor w = f64({1, 2, 3}, {3});
  CHECK(cross_entropy(x, t, {.weight = w, .label_smoothing = 0.1}).item() == Approx(0.6309660369392395));
  check_close_rel9(vec(cross_entropy(x, t, {.weight = w, .reduction = Reduction::None, .label_smoothing = 0.1})),
              {1.315390630222037, 1.2084735175349208});
  // eps = 1: only the uniform target remains.
  CHECK(cross_entropy(x, t, {.label_smoothing = 1.0}).item() ==
        Approx(((3 * kLse123 - 6) / 3 + kLog3) / 2));
}

TEST_CASE("cross_entropy: gradient is softmax minus the (smoothed) one-hot", "[loss]") {
  Tensor x = f64({1, 2, 3, 1, 1, 1}, {2, 3}, true);
  cross_entropy(x, i64({2, 0}, {2})).backward();
  // (p - onehot) / N with p0 = softmax(1, 2, 3), p1 = 1/3 each.
  check_close_rel9(vec(x.grad()), {0.04501528658519023, 0.12236423552739884, -0.16737952211258906, -1.0 / 3, 1.0 / 6,
                              1.0 / 6});
  // Smoothing eps: the target becomes (1 - eps) onehot + eps / C.
  Tensor y = f64({1, 1, 1}, {1, 3}, true);
  cross_entropy(y, i64({1}, {1}), {.reduction = Reduction::Sum, .label_smoothing = 0.3}).backward();
  check_close_rel9(vec(y.grad()), {1.0 / 3 - 0.1, 1.0 / 3 - 0.8, 1.0 / 3 - 0.1});
}

TEST_CASE("cross_entropy: class-probability targets (Mixup/CutMix), smoothing and weights as PyTorch", "[loss]") {
  Tensor x = f64({1, 2, 3, 1, 1, 1}, {2, 3});
  // A one-hot probability target is the class-index loss, with and without smoothing and weights.
  Tensor onehot = f64({0, 0, 1, 1, 0, 0}, {2, 3});
  Tensor idx = i64({2, 0}, {2});
  for (double eps : {0.0, 0.1}) {
    CHECK(cross_entropy(x, onehot, {.label_smoothing = eps}).item() ==
          Approx(cross_entropy(x, idx, {.label_smoothing = eps}).item()).epsilon(1e-12));
    check_close_rel9(vec(cross_entropy(x, onehot, {.reduction = Reduction::None, .label_smoothing = eps})),
                     vec(cross_entropy(x, idx, {.reduction = Reduction::None, .label_smoothing = eps})));
  }
  // A mixed target 0.7 / 0.3 with eps = 0.1: q = 0.9 p + 0.1 / 3.
  //   row 0: p = (0, 0.3, 0.7): q = (1/30, 0.3033.., 0.6633..), loss = -sum q (logp) with logp = (1, 2, 3) - lse
  Tensor mixed = f64({0, 0.3, 0.7, 0.7, 0, 0.3}, {2, 3});
  const double q0[3] = {0.1 / 3, 0.9 * 0.3 + 0.1 / 3, 0.9 * 0.7 + 0.1 / 3};
  const double row0 = -(q0[0] * (1 - kLse123) + q0[1] * (2 - kLse123) + q0[2] * (3 - kLse123));
  const double row1 = kLog3;  // uniform logits: -sum q * (-log 3) = log 3 whatever q
  check_close_rel9(vec(cross_entropy(x, mixed, {.reduction = Reduction::None, .label_smoothing = 0.1})), {row0, row1});
  CHECK(cross_entropy(x, mixed, {.label_smoothing = 0.1}).item() == Approx((row0 + row1) / 2));
  CHECK(cross_entropy(x, mixed, {.reduction = Reduction::Sum, .label_smoothing = 0.1}).item() == Approx(row0 + row1));
  // Weights weigh each class's term; 'mean' still divides by N (PyTorch's rule for probabilities).
  Tensor w = f64({1, 2, 3}, {3});
  const double row0w = -(1 * q0[0] * (1 - kLse123) + 2 * q0[1] * (2 - kLse123) + 3 * q0[2] * (3 - kLse123));
  const double q1[3] = {0.9 * 0.7 + 0.1 / 3, 0.1 / 3, 0.9 * 0.3 + 0.1 / 3};
  const double row1w = kLog3 * (1 * q1[0] + 2 * q1[1] + 3 * q1[2]);
  CHECK(cross_entropy(x, mixed, {.weight = w, .label_smoothing = 0.1}).item() == Approx((row0w + row1w) / 2));
  // f32 logits with f32 probabilities.
  CHECK(cross_entropy(x.to(DType::f32), mixed.to(DType::f32), {.label_smoothing = 0.1}).item() ==
        Approx((row0 + row1) / 2).epsilon(1e-6));
  // Gradient: (softmax(x) * sum(q) - q) / N.
  Tensor xg = f64({1, 2, 3, 1, 1, 1}, {2, 3}, true);
  cross_entropy(xg, mixed).backward();
  const double p0[3] = {0.09003057317038046, 0.24472847105479767, 0.6652409557748219};
  check_close_rel9(vec(xg.grad()), {p0[0] / 2, (p0[1] - 0.3) / 2, (p0[2] - 0.7) / 2, (1.0 / 3 - 0.7) / 2, 1.0 / 6,
                                    (1.0 / 3 - 0.3) / 2});
  // Shapes must match.
  CHECK_THAT(error_of([&] { cross_entropy(x, f64({0.5, 0.5}, {1, 2})); }), Contains("same shape as (N, C) logits"));
}

TEST_CASE("cross_entropy: 4-D logits with weights, ignore_index and smoothing match a reference", "[loss]") {
  // (N, C, H, W) = (2, 3, 2, 2), targets (2, 2, 2).
  const int64_t N = 2, C = 3, S = 4;
  std::vector<double> xv(N * C * S);
  for (size_t k = 0; k < xv.size(); ++k) xv[k] = std::cos(1.3 * static_cast<double>(k)) * 2;
  const std::vector<int64_t> tv = {0, 2, -100, 1, 2, 2, 0, -100};
  const std::vector<double> wv = {0.5, 2.0, 1.25};
  Tensor x = f64(xv, {N, C, 2, 2});
  Tensor t = i64(tv, {N, 2, 2});
  for (double eps : {0.0, 0.2}) {
    for (bool weighted : {false, true}) {
      INFO("eps " << eps << " weighted " << weighted);
      const RefLoss r = reference_cross_entropy(xv, tv, N, C, S, weighted ? wv : std::vector<double>{}, -100, eps);
      long double total = 0, total_w = 0;
      for (size_t i = 0; i < r.loss.size(); ++i) total += r.loss[i], total_w += r.weight[i];
      CrossEntropyOptions opt{.weight = weighted ? f64(wv, {C}) : Tensor(), .label_smoothing = eps};
      CHECK(cross_entropy(x, t, opt).item() == Approx(static_cast<double>(total / total_w)).epsilon(1e-12));
      opt.reduction = Reduction::Sum;
      CHECK(cross_entropy(x, t, opt).item() == Approx(static_cast<double>(total)).epsilon(1e-12));
      opt.reduction = Reduction::None;
      Tensor none = cross_entropy(x, t, opt);
      CHECK(none.shape() == Shape{N, 2, 2});
      std::vector<double> expected;
      for (long double l : r.loss) expected.push_back(static_cast<double>(l));
      check_close_rel9(vec(none), expected);
      // The fused kernel equals nll_loss(log_softmax) when there is no smoothing.
      if (eps == 0) {
        NllLossOptions nopt{.weight = opt.weight, .reduction = Reduction::Mean};
        CHECK(nll_loss(log_softmax(x, 1), t, nopt).item() == Approx(static_cast<double>(total / total_w)));
      }
    }
  }
  // (N, C, L) logits: the class dim is always dim 1.
  Tensor x3 = f64(xv, {N, C, S});
  const RefLoss r3 = reference_cross_entropy(xv, tv, N, C, S, {}, -100, 0);
  check_close_rel9(vec(cross_entropy(x3, t.reshape({N, S}), {.reduction = Reduction::None})),
              {static_cast<double>(r3.loss[0]), static_cast<double>(r3.loss[1]), 0, static_cast<double>(r3.loss[3]),
               static_cast<double>(r3.loss[4]), static_cast<double>(r3.loss[5]), static_cast<double>(r3.loss[6]), 0});
}

TEST_CASE("cross_entropy: very large logits stay finite", "[loss]") {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = f64({1e4, 0, -1e4, 0, 1e4, 1e4}, {2, 3}).to(dt);
    x.requires_grad_(true);
    Tensor l = cross_entropy(x, i64({0, 1}, {2}), {.reduction = Reduction::None});
    // Row 0: the target has the max logit: loss 0. Row 1: 1e4 - (1e4 + log 2) ... = log 2 exactly.
    check_close_rel9(vec(l), {0, std::log(2.0)}, 1e-6);
    l.sum().backward();
    for (double g : vec(x.grad())) CHECK(std::isfinite(g));
    check_close_rel9(vec(x.grad()), {0, 0, 0, 0, -0.5, 0.5}, 1e-6);
    CHECK(cross_entropy(x.detach(), i64({2, 0}, {2})).item() == Approx((2e4 + 1e4 + std::log(2.0)) / 2));
  }
}

TEST_CASE("cross_entropy: unbatched (C) logits and zero-size batches", "[loss]") {
  // (C) logits with a 0-d target.
  CHECK(cross_entropy(f64({1, 2, 3}, {3}), i64({2}, {})).item() == Approx(kLse123 - 3));
  CHECK(cross_entropy(f64({1, 2, 3}, {3}), i64({2}, {}), {.reduction = Reduction::None}).shape() == Shape{});
  // N = 0: mean is NaN (0 / 0, as PyTorch), sum 0, none empty.
  Tensor x = zeros({0, 4}, {.dtype = DType::f64});
  Tensor t = zeros({0}, {.dtype = DType::i64});
  CHECK(std::isnan(cross_entropy(x, t).item()));
  CHECK(cross_entropy(x, t, {.reduction = Reduction::Sum}).item() == 0);
  CHECK(cross_entropy(x, t, {.reduction = Reduction::None}).shape() == Shape{0});
}

TEST_CASE("cross_entropy/nll_loss: bad arguments throw ember::Error", "[loss]") {
  Tensor x = f64({1, 2, 3, 1, 1, 1}, {2, 3});
  // Out-of-range targets name the value and C.
  CHECK_THAT(error_of([&] { cross_entropy(x, i64({2, 3}, {2})); }),
             Contains("cross_entropy") && Contains("target 3") && Contains("3 classes"));
  CHECK_THAT(error_of([&] { cross_entropy(x, i64({-5, 0}, {2})); }), Contains("target -5"));
  CHECK_THAT(error_of([&] { cross_entropy(x, i64({-100, 0}, {2}), {.ignore_index = 1}); }), Contains("target -100"));
  CHECK_THAT(error_of([&] { nll_loss(x, i64({0, 7}, {2})); }), Contains("nll_loss") && Contains("target 7"));
  // Float or int32 targets are not class indices.
  CHECK_THAT(error_of([&] { cross_entropy(x, f64({2, 0}, {2})); }), Contains("expected int64 class indices"));
  CHECK_THAT(error_of([&] { cross_entropy(x, from_vector<int32_t>({2, 0}, {2})); }),
             Contains("expected int64 class indices"));
  CHECK_THAT(error_of([&] { nll_loss(x, f64({2, 0}, {2})); }), Contains("expected int64 class indices"));
  // Shapes.
  CHECK_THAT(error_of([&] { cross_entropy(x, i64({2, 0, 1}, {3})); }), Contains("cross_entropy") && Contains("(3,)"));
  CHECK_THAT(error_of([&] { cross_entropy(x, i64({2, 0}, {2, 1})); }), Contains("target of shape"));
  CHECK_THAT(error_of([&] { cross_entropy(f64({1}, {}), i64({0}, {})); }), Contains("cross_entropy"));
  CHECK_THAT(error_of([&] { cross_entropy(x, i64({2, 0}, {2}), {.weight = f64({1, 2}, {2})}); }),
             Contains("weight"));
  CHECK_THAT(error_of([&] { cross_entropy(x, i64({2, 0}, {2}), {.label_smoothing = 1.5}); }),
             Contains("label_smoothing"));
  CHECK_THAT(error_of([&] { cross_entropy(i64({1, 2}, {1, 2}), i64({0}, {1})); }), Contains("cross_entropy"));
}

// ---- nll_loss -----------------------------------------------------------------------------------

TEST_CASE("nll_loss: known values and gradient", "[loss]") {
  Tensor x = f64({-1, -2, -3, -0.5, -1.5, -2.5}, {2, 3}, true);
  Tensor t = i64({1, 2}, {2});
  check_close_rel9(vec(nll_loss(x, t, {.reduction = Reduction::None})), {2, 2.5});
  CHECK(nll_loss(x, t).item() == Approx(2.25));
  // Weights (1, 2, 4): sum = 2 * 2 + 4 * 2.5 = 14, mean = 14 / (2 + 4).
  Tensor w = f64({1, 2, 4}, {3});
  CHECK(nll_loss(x, t, {.weight = w, .reduction = Reduction::Sum}).item() == Approx(14));
  Tensor l = nll_loss(x, t, {.weight = w});
  CHECK(l.item() == Approx(14.0 / 6.0));
  l.backward();
  check_close_rel9(vec(x.grad()), {0, -2.0 / 6, 0, 0, 0, -4.0 / 6});
  CHECK(nll_loss(x.detach(), i64({1, -100}, {2})).item() == Approx(2));
  CHECK(std::isnan(nll_loss(x.detach(), i64({-100, -100}, {2})).item()));
}

// ---- mse_loss -----------------------------------------------------------------------------------

TEST_CASE("mse_loss: known values, gradient, errors", "[loss]") {
  // differences (0, -2, 3): squares (0, 4, 9)
  Tensor a = f64({1, 2, 3}, {3}, true);
  Tensor b = f64({1, 4, 0}, {3}, true);
  CHECK(mse_loss(a, b).item() == Approx(13.0 / 3));
  CHECK(mse_loss(a, b, Reduction::Sum).item() == Approx(13));
  check_close_rel9(vec(mse_loss(a, b, Reduction::None)), {0, 4, 9});
  mse_loss(a, b).backward();
  check_close_rel9(vec(a.grad()), {0, -4.0 / 3, 2});  // 2 d / n
  check_close_rel9(vec(b.grad()), {0, 4.0 / 3, -2});
  CHECK(std::isnan(mse_loss(zeros({0}), zeros({0})).item()));
  CHECK_THAT(error_of([] { mse_loss(zeros({3, 1}), zeros({3})); }), Contains("mse_loss") && Contains("same shape"));
  CHECK_THAT(error_of([] { mse_loss(zeros({3}), zeros({3}, {.dtype = DType::i64})); }), Contains("mse_loss"));
}
