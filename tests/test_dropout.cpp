// Known-value, edge-case and error tests for dropout (layers/nn_functional.h, layers/dropout.cpp).

#include <catch2/catch.hpp>
#include <ember/ember.h>

#include <cmath>
#include <limits>

#include "test_util.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;

// ---- dropout ----------------------------------------------------------------------------------------

TEST_CASE("dropout: keeps about 1 - p, scales kept values, reproducible per seed", "[dropout]") {
  const int64_t n = 100000;
  const double p = 0.3;
  Tensor x = ones({n}, {.dtype = DType::f64});
  Generator g1(1234);
  Tensor y = dropout(x, p, true, g1);
  const std::vector<double> v = vec(y);
  int64_t kept = 0;
  bool values_ok = true;
  for (double e : v) {
    if (e != 0) {
      ++kept;
      values_ok = values_ok && std::abs(e - 1 / (1 - p)) < 1e-12;
    }
  }
  CHECK(values_ok);
  // Binomial std of the kept fraction is sqrt(0.21 / 1e5) ~ 0.0014: 0.01 is 7 sigma.
  CHECK(static_cast<double>(kept) / n == Approx(1 - p).margin(0.01));

  Generator g2(1234);
  CHECK(vec(dropout(x, p, true, g2)) == v);
  Generator g3(999);
  CHECK(vec(dropout(x, p, true, g3)) != v);
  // Consecutive calls on one generator draw new masks.
  CHECK(vec(dropout(x, p, true, g1)) != v);
}

TEST_CASE("dropout: the mask is the documented Philox uniform below 1 - p", "[dropout]") {
  Tensor x = ones({1000});
  Generator g(77), ref(77);
  const std::vector<double> y = vec(dropout(x, 0.4, true, g));
  const std::vector<double> u = vec(rand({1000}, {}, ref));
  for (size_t i = 0; i < y.size(); ++i) {
    INFO("element " << i);
    CHECK((y[i] != 0) == (u[i] < static_cast<float>(0.6)));
  }
  CHECK(g.offset() == ref.offset());
}

TEST_CASE("dropout: backward multiplies by the same scaled mask", "[dropout]") {
  Tensor x = f64({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4}, true);
  Generator g(5);
  Tensor y = dropout(x, 0.5, true, g);
  sum(y).backward();
  const std::vector<double> yv = vec(y), xv = vec(x.detach()), gv = vec(x.grad());
  for (size_t i = 0; i < yv.size(); ++i) CHECK(gv[i] == Approx(yv[i] / xv[i]));
}

TEST_CASE("dropout: identity in eval or with p = 0, p = 1 drops everything, p is checked", "[dropout]") {
  Tensor x = rand({3, 4});
  CHECK(dropout(x, 0.5, false).is_same(x));
  CHECK(dropout(x, 0.0, true).is_same(x));
  Tensor leaf = rand({3, 4}, {.requires_grad = true});
  Tensor z = dropout(leaf, 1.0, true);
  CHECK(vec(z) == std::vector<double>(12, 0.0));
  sum(z).backward();
  CHECK(vec(leaf.grad()) == std::vector<double>(12, 0.0));
  CHECK_THAT(error_of([&] { dropout(x, 1.5, true); }), Contains("dropout") && Contains("1.5"));
  CHECK_THAT(error_of([&] { dropout(x, -0.1, false); }), Contains("dropout"));
  CHECK_THAT(error_of([] { dropout(zeros({2}, {.dtype = DType::i64}), 0.5, true); }), Contains("dropout"));
}
