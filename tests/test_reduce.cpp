// Known-value, edge-case and error tests for the reductions (layers/reduce.h). Expected numbers
// are worked out by hand in the comments, or by a plain reference loop in the test.

#include <catch2/catch.hpp>
#include <ember/ember.h>

#include <cmath>
#include <limits>

#include "test_util.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;

TEST_CASE("var: known values", "[reduce]") {
  // {1, 2, 3, 4}: mean 2.5, squared deviations 2.25 + 0.25 + 0.25 + 2.25 = 5.
  Tensor x = f64({1, 2, 3, 4}, {4});
  CHECK(var(x).item() == Approx(5.0 / 3.0));                 // unbiased: 5 / (4 - 1)
  CHECK(var(x, {}, 0).item() == Approx(1.25));                // population: 5 / 4
  CHECK(var(x, {0}, 2).item() == Approx(2.5));                // 5 / (4 - 2)
  CHECK(var(x.to(DType::f32)).item() == Approx(5.0 / 3.0));
  CHECK(var(x.to(DType::f32)).dtype() == DType::f32);

  // Rows {1, 2, 3} (var 1) and {4, 6, 8} (var 4); columns (1, 4), (2, 6), (3, 8): var = d^2 / 2.
  Tensor m = f64({1, 2, 3, 4, 6, 8}, {2, 3});
  check_close_rel9(vec(var(m, {1})), {1, 4});
  CHECK(var(m, {1}, 1, true).shape() == Shape{2, 1});
  check_close_rel9(vec(var(m, {-2})), {4.5, 8, 12.5});
  // Over both dims: mean 4, squared deviations 9 + 4 + 1 + 0 + 4 + 16 = 34, / 5.
  CHECK(var(m, {0, 1}).item() == Approx(34.0 / 5.0));
  CHECK(var(m, {-1, 0}, 1, true).shape() == Shape{1, 1});
}

TEST_CASE("var: float32 accumulates in double and is two-pass", "[reduce]") {
  // A large offset: the one-pass formula E[x^2] - E[x]^2 would lose everything in float32.
  Tensor x = from_vector<float>({10001, 10002, 10003, 10004}, {4});
  CHECK(var(x).item() == Approx(5.0 / 3.0).epsilon(1e-6));
  // 10^6 copies of 0.1f: a float32 accumulator drifts by ~1%, a double one does not.
  Tensor big = full({1000, 1000}, 0.1, {.dtype = DType::f32});
  CHECK(sum(big).item() == Approx(1e6 * static_cast<double>(0.1f)).epsilon(1e-7));
  CHECK(var(big).item() == Approx(0.0).margin(1e-9));
}

TEST_CASE("var: gradient is 2 (x - mean) / (n - correction)", "[reduce]") {
  Tensor x = f64({1, 2, 3, 4}, {4}, true);
  var(x).backward();
  check_close_rel9(vec(x.grad()), {-1, -1.0 / 3, 1.0 / 3, 1});  // 2 * (-1.5, -0.5, 0.5, 1.5) / 3
}

TEST_CASE("var: degenerate sizes give NaN like PyTorch", "[reduce]") {
  CHECK(std::isnan(var(f64({5}, {1})).item()));       // one element, correction 1: 0 / 0
  CHECK(var(f64({5}, {1}), {}, 0).item() == 0.0);
  CHECK(std::isnan(var(zeros({0}, {.dtype = DType::f64})).item()));
  Tensor v = var(zeros({0, 3}, {.dtype = DType::f64}), {0});
  CHECK(v.shape() == Shape{3});
  for (double e : vec(v)) CHECK(std::isnan(e));
}

TEST_CASE("amax/amin: values, dims, keepdim", "[reduce]") {
  Tensor x = f64({1, 5, 5, -2, -7, 0}, {2, 3});
  check_close_rel9(vec(amax(x, {1})), {5, 0});
  check_close_rel9(vec(amin(x, {1})), {1, -7});
  check_close_rel9(vec(amax(x, {-2})), {1, 5, 5});
  check_close_rel9(vec(amin(x, {0})), {-2, -7, 0});
  CHECK(amax(x).item() == 5);
  CHECK(amin(x).item() == -7);
  CHECK(amax(x, {0, 1}, true).shape() == Shape{1, 1});
  CHECK(amax(x, {1}, true).shape() == Shape{2, 1});
  CHECK(amax(x).shape() == Shape{});
  // Integer tensors keep their dtype.
  Tensor xi = from_vector<int64_t>({3, -4, 9, 2}, {2, 2});
  CHECK(amax(xi, {1}).to_vector<int64_t>() == std::vector<int64_t>{3, 9});
  CHECK(amin(xi).dtype() == DType::i64);
  CHECK(amin(xi).item() == -4);
}

TEST_CASE("amax/amin: the gradient is split evenly between ties", "[reduce]") {
  Tensor x = f64({1, 5, 5, -2, -7, 0}, {2, 3}, true);
  amax(x, {1}).sum().backward();
  check_close_rel9(vec(x.grad()), {0, 0.5, 0.5, 0, 0, 1});

  Tensor y = f64({3, 3, 1, 3}, {4}, true);
  amax(y).backward();
  check_close_rel9(vec(y.grad()), {1.0 / 3, 1.0 / 3, 0, 1.0 / 3});

  Tensor z = f64({2, -1, -1, 4}, {2, 2}, true);
  amin(z, {0, 1}).backward(f64({6}, {}));
  check_close_rel9(vec(z.grad()), {0, 3, 3, 0});
}

TEST_CASE("max/min of all elements: values, gradient, NaN", "[reduce]") {
  Tensor x = f64({3, -1, 7, 2}, {2, 2}, true);
  CHECK(max(x).item() == 7);
  CHECK(min(x).item() == -1);
  max(x).backward();
  check_close_rel9(vec(x.grad()), {0, 0, 1, 0});

  // NaN propagates, and its gradient goes to the NaN (as PyTorch's evenly_distribute_backward).
  Tensor n = f64({1, kNaN, 3}, {3}, true);
  CHECK(std::isnan(max(n).item()));
  CHECK(std::isnan(min(n).item()));
  CHECK(std::isnan(amax(n).item()));
  max(n).backward();
  check_close_rel9(vec(n.grad()), {0, 1, 0});
  // A NaN first or last in the line is found too.
  CHECK(std::isnan(max(f64({kNaN, 1, 2}, {3})).item()));
  CHECK(std::isnan(amin(f64({1, 2, kNaN}, {3})).item()));
  // Along a dim, only the rows that hold a NaN become NaN.
  std::vector<double> rows = vec(amax(f64({1, 2, kNaN, 4, 5, 6}, {2, 3}), {1}));
  CHECK(std::isnan(rows[0]));
  CHECK(rows[1] == 6);
}

TEST_CASE("max/min along a dim: values, first-occurrence indices, gradient", "[reduce]") {
  Tensor x = f64({1, 3, 3, 4, 0, -1}, {2, 3}, true);
  auto [v, i] = max(x, 1);
  check_close_rel9(vec(v), {3, 4});
  CHECK(i.dtype() == DType::i64);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, 0});  // the first of the tied 3s
  auto [vn, in] = min(x, -1, true);
  CHECK(vn.shape() == Shape{2, 1});
  check_close_rel9(vec(vn), {1, -1});
  CHECK(in.to_vector<int64_t>() == std::vector<int64_t>{0, 2});
  auto [v0, i0] = max(x, -2);
  check_close_rel9(vec(v0), {4, 3, 3});
  CHECK(i0.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0});
  CHECK_FALSE(i0.requires_grad());

  // The gradient goes to the chosen (first) index only.
  max(x, 1).first.sum().backward();
  check_close_rel9(vec(x.grad()), {0, 1, 0, 1, 0, 0});

  // NaN: the value is NaN and the index points at the (first) NaN.
  auto [vnan, inan] = max(f64({1, kNaN, 5, kNaN}, {1, 4}), 1);
  CHECK(std::isnan(vnan.item()));
  CHECK(inan.item() == 1);
  CHECK(min(f64({1, kNaN, -5}, {3}), 0).second.item() == 1);
}

TEST_CASE("argmax/argmin: with a dim and flattened", "[reduce]") {
  Tensor x = f64({1, 3, 3, 4, 0, -1}, {2, 3});
  CHECK(argmax(x, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  CHECK(argmin(x, 0).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 1});
  CHECK(argmax(x, -1, true).shape() == Shape{2, 1});
  CHECK(argmax(x).item() == 3);  // the 4, at flat index 3
  CHECK(argmax(x).shape() == Shape{});
  CHECK(x.argmax(1).to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  // Flattened index of a non-contiguous view counts in the view's row-major order.
  CHECK(argmax(x.t()).item() == 1);  // x.t() = {{1, 4}, {3, 0}, {3, -1}}
  CHECK(argmax(f64({1, kNaN, 7}, {3})).item() == 1);
  // A 0-d tensor: dim 0 / -1 is allowed and the answer is 0.
  CHECK(argmax(f64({5}, {})).item() == 0);
  CHECK(argmax(f64({5}, {}), -1).item() == 0);
  // Integer input.
  CHECK(argmax(from_vector<int32_t>({2, 9, 9, 1}, {4}), 0).item() == 1);
}

TEST_CASE("reductions: parallel, strided and large inputs match a reference loop", "[reduce]") {
  // 300 x 1000 doubles: big enough to be split across threads.
  const int64_t R = 300, C = 1000;
  std::vector<double> v(R * C);
  for (int64_t k = 0; k < R * C; ++k) v[k] = std::sin(0.37 * static_cast<double>(k)) * 100.0;
  Tensor x = f64(v, {R, C});
  std::vector<double> col_max(C, -INFINITY), row_var(R);
  std::vector<int64_t> col_arg(C, 0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c)
      if (v[r * C + c] > col_max[c]) col_max[c] = v[r * C + c], col_arg[c] = r;
  for (int64_t r = 0; r < R; ++r) {
    long double mean = 0, ss = 0;
    for (int64_t c = 0; c < C; ++c) mean += v[r * C + c];
    mean /= C;
    for (int64_t c = 0; c < C; ++c) ss += (v[r * C + c] - mean) * (v[r * C + c] - mean);
    row_var[r] = static_cast<double>(ss / (C - 1));
  }
  check_close_rel9(vec(amax(x, {0})), col_max);
  CHECK(argmax(x, 0).to_vector<int64_t>() == col_arg);
  check_close_rel9(vec(var(x, {1})), row_var, 1e-9);
  // The same through a transposed (non-contiguous) view.
  Tensor xt = x.t();
  REQUIRE_FALSE(xt.is_contiguous());
  check_close_rel9(vec(amax(xt, {1})), col_max);
  CHECK(max(xt, 1).second.to_vector<int64_t>() == col_arg);
  check_close_rel9(vec(var(xt, {0})), row_var, 1e-9);
}

TEST_CASE("reductions: zero-size dims", "[reduce]") {
  const TensorOptions o{.dtype = DType::f64};
  // sum -> 0, mean -> NaN.
  check_close_rel9(vec(sum(zeros({0, 3}, o), {0})), {0, 0, 0});
  CHECK(sum(zeros({0}, o)).item() == 0);
  check_close_rel9(vec(sum(zeros({2, 0}, o), {1})), {0, 0});
  CHECK(std::isnan(mean(zeros({0}, o)).item()));
  for (double e : vec(mean(zeros({0, 3}, o), {0}))) CHECK(std::isnan(e));
  // Reducing a non-empty dim of an empty tensor is fine and gives an empty result.
  CHECK(amax(zeros({0, 3}, o), {1}).shape() == Shape{0});
  CHECK(argmax(zeros({0, 3}, o), 1).shape() == Shape{0});
  CHECK(max(zeros({0, 3}, o), -1).first.shape() == Shape{0});
  // max/min/argmax over an empty dim have no answer.
  CHECK_THAT(error_of([&] { amax(zeros({0, 3}, o), {0}); }), Contains("amax") && Contains("size 0"));
  CHECK_THAT(error_of([&] { amin(zeros({2, 0}, o)); }), Contains("amin"));
  CHECK_THAT(error_of([&] { max(zeros({0}, o)); }), Contains("max"));
  CHECK_THAT(error_of([&] { min(zeros({3, 0}, o)); }), Contains("min"));
  CHECK_THAT(error_of([&] { max(zeros({2, 0}, o), 1); }), Contains("max"));
  CHECK_THAT(error_of([&] { argmax(zeros({2, 0}, o), 1); }), Contains("argmax"));
  CHECK_THAT(error_of([&] { argmin(zeros({0, 2}, o), 0); }), Contains("argmin"));
  CHECK_THAT(error_of([&] { argmax(zeros({0}, o)); }), Contains("argmax") && Contains("empty"));
}

TEST_CASE("reductions: bad arguments throw ember::Error naming the op", "[reduce]") {
  Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK_THAT(error_of([&] { var(x, {2}); }), Contains("var") && Contains("dim 2"));
  CHECK_THAT(error_of([&] { var(x, {1, -1}); }), Contains("var") && Contains("more than once"));
  CHECK_THAT(error_of([&] { amax(x, {-3}); }), Contains("amax"));
  CHECK_THAT(error_of([&] { amin(x, {5}); }), Contains("amin"));
  CHECK_THAT(error_of([&] { max(x, 2); }), Contains("max"));
  CHECK_THAT(error_of([&] { min(x, -3); }), Contains("min"));
  CHECK_THAT(error_of([&] { argmax(x, 2); }), Contains("argmax"));
  CHECK_THAT(error_of([&] { argmin(x, -3); }), Contains("argmin"));
  CHECK_THAT(error_of([&] { var(from_vector<int64_t>({1, 2}, {2})); }), Contains("var") && Contains("int64"));
  CHECK_THAT(error_of([&] { amax(ones({2}, {.dtype = DType::boolean})); }), Contains("amax") && Contains("bool"));
}
