// Known-value, edge-case and error tests for softmax and log_softmax (layers/nn_functional.h,
// layers/softmax.cpp). Expected numbers are worked out by hand in the comments (e = exp(1)).

#include <catch2/catch.hpp>
#include <ember/ember.h>

#include <cmath>
#include <limits>

#include "softmax_answers.h"
#include "test_util.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;

TEST_CASE("softmax/log_softmax: known values", "[softmax]") {
  // softmax(1, 2, 3) = (e, e^2, e^3) / (e + e^2 + e^3)
  Tensor x = f64({1, 2, 3}, {3});
  check_close_rel9(vec(softmax(x, 0)), {0.09003057317038046, 0.24472847105479767, 0.6652409557748219});
  check_close_rel9(vec(log_softmax(x, -1)), {1 - kLse123, 2 - kLse123, 3 - kLse123});
  // Along dim 0 of a (3, 2): columns (1, 2, 3) and (0, 0, 0).
  Tensor m = f64({1, 0, 2, 0, 3, 0}, {3, 2});
  check_close_rel9(vec(softmax(m, 0)), {0.09003057317038046, 1.0 / 3, 0.24472847105479767, 1.0 / 3, 0.6652409557748219, 1.0 / 3});
  check_close_rel9(vec(log_softmax(m, -2)), {1 - kLse123, -kLog3, 2 - kLse123, -kLog3, 3 - kLse123, -kLog3});
  // float32 agrees.
  check_close_rel9(vec(softmax(x.to(DType::f32), 0)), vec(softmax(x, 0)), 1e-7);
  CHECK(softmax(x.to(DType::f32), 0).dtype() == DType::f32);
}

TEST_CASE("softmax: sums to one along the chosen dim of a 4-D tensor", "[softmax]") {
  Tensor x = f64({0.3, -1, 2, 0.5, 1, 1, -2, 0.25, 4, 0, 0, 1, 3, -3, 0.1, 0.7, 2, 2, 1, 0, -1, 0.5, 0.5, 1.5},
                 {2, 3, 2, 2});
  for (int64_t d : {0, 1, 2, 3, -1, -3}) {
    INFO("dim " << d);
    std::vector<double> s = vec(sum(softmax(x, d), {d}));
    for (double e : s) CHECK(e == Approx(1.0).epsilon(1e-14));
    // log_softmax is log(softmax).
    check_close_rel9(vec(log_softmax(x, d)), vec(log(softmax(x, d))), 1e-12);
  }
}

TEST_CASE("softmax/log_softmax: gradient known values", "[softmax]") {
  // d/dx sum(log_softmax(x)) = 1 - n * softmax(x)
  Tensor x = f64({1, 2, 3}, {3}, true);
  log_softmax(x, 0).sum().backward();
  check_close_rel9(vec(x.grad()), {0.7299082804888587, 0.2658145868356072, -0.9957228673244649});
  // d/dx softmax(x)[2] = p2 * (e_2 - p)
  Tensor y = f64({1, 2, 3}, {3}, true);
  softmax(y, 0).backward(f64({0, 0, 1}, {3}));
  const double p0 = 0.09003057317038046, p1 = 0.24472847105479767, p2 = 0.6652409557748219;
  check_close_rel9(vec(y.grad()), {-p2 * p0, -p2 * p1, p2 * (1 - p2)});
}

TEST_CASE("softmax/log_softmax: large logits stay finite, NaN propagates, 0-d and empty", "[softmax]") {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor big = f64({1e4, 0, -1e4}, {3}).to(dt);
    check_close_rel9(vec(softmax(big, 0)), {1, 0, 0});
    check_close_rel9(vec(log_softmax(big, 0)), {0, -1e4, -2e4});
    Tensor big2 = f64({1e4, 1e4}, {2}).to(dt);
    check_close_rel9(vec(softmax(big2, 0)), {0.5, 0.5});
  }
  std::vector<double> r = vec(softmax(f64({1, kNaN, 1, 2}, {2, 2}), 1));
  CHECK(std::isnan(r[0]));
  CHECK(std::isnan(r[1]));
  CHECK(r[2] == Approx(1 / (1 + std::exp(1.0))));
  CHECK(softmax(f64({7}, {}), 0).item() == 1);
  CHECK(log_softmax(f64({7}, {}), -1).item() == 0);
  CHECK(softmax(zeros({2, 0}, {.dtype = DType::f64}), 1).shape() == Shape{2, 0});
  CHECK(log_softmax(zeros({0, 3}, {.dtype = DType::f64}), 1).shape() == Shape{0, 3});
  CHECK_THAT(error_of([] { softmax(zeros({2, 3}), 2); }), Contains("softmax") && Contains("dim 2"));
  CHECK_THAT(error_of([] { log_softmax(zeros({2, 3}), -3); }), Contains("log_softmax"));
  CHECK_THAT(error_of([] { softmax(zeros({2}, {.dtype = DType::i64}), 0); }), Contains("softmax") && Contains("int64"));
}
