// Elementwise ops: known values, broadcasting, strided inputs, edge cases.

#include <catch2/catch.hpp>
#include <cmath>
#include <ember/ember.h>

#include "test_util.h"

using namespace ember;
using namespace ember::testing;

using VD = std::vector<double>;

namespace {
Tensor d(const VD& v) { return from_vector<double>(v); }
}  // namespace

TEST_CASE("binary ops: known values with broadcasting", "[elementwise]") {
  Tensor a = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = d({10, 20, 30});
  check_close(add(a, b), {11, 22, 33, 14, 25, 36});
  check_close(add(a, b, 0.5), {6, 12, 18, 9, 15, 21});
  check_close(sub(a, b), {-9, -18, -27, -6, -15, -24});
  check_close(mul(a, from_vector<double>({2, 3}, {2, 1})), {2, 4, 6, 12, 15, 18});
  check_close(div(b, d({4})), {2.5, 5, 7.5});
  check_close(pow(d({2, 3, 4}), d({3, 0.5, -1})), {8, std::sqrt(3.0), 0.25});
  check_close(maximum(d({1, 5, NAN}), d({3, 2, 1})), {3, 5, NAN});
  check_close(minimum(d({1, 5, 0}), d({3, NAN, -1})), {1, NAN, -1});
  // scalar forms and operators
  check_close(a * 2.0 + 1.0, {3, 5, 7, 9, 11, 13});
  check_close(10.0 - b, {0, -10, -20});
  check_close(1.0 / d({4, 0.5}), {0.25, 2});
  check_close(pow(d({-2, 3}), 2.0), {4, 9});
  // mixed dtypes promote
  Tensor f = from_vector<float>({1.5f});
  CHECK(add(f, d({1})).dtype() == DType::f64);
  // size-0 and size-1 broadcasting
  CHECK(add(zeros({0, 3}), ones({3})).shape() == Shape{0, 3});
  CHECK(mul(ones({4, 1}), ones({1, 5})).shape() == Shape{4, 5});
  CHECK_THROWS_WITH(mul(ones({2, 3}), ones({3, 2})), Catch::Contains("mul: shapes (2, 3) and (3, 2)"));
  CHECK_THROWS_WITH(add(ones({2}, {.dtype = DType::i64}), ones({2}, {.dtype = DType::i64})),
                    Catch::Contains("add: expected floating-point tensors"));
}

TEST_CASE("binary ops: strided inputs give the same results as contiguous ones", "[elementwise]") {
  Tensor base = arange(24, {.dtype = DType::f64}).reshape({4, 6});
  Tensor nc = base.t().slice(0, 0, 6, 2);  // (3, 4), strides (2, 6)
  Tensor cc = nc.contiguous();
  CHECK(!nc.is_contiguous());
  Tensor other = arange(4, {.dtype = DType::f64});
  CHECK(mul(nc, other).to_vector<double>() == mul(cc, other).to_vector<double>());
  CHECK(exp(nc).to_vector<double>() == exp(cc).to_vector<double>());
  Tensor bc = other.expand({3, 4});
  CHECK(add(bc, nc).to_vector<double>() == add(other, cc).to_vector<double>());
  // A large tensor goes through the threaded path; compare against a single element check.
  Tensor big = arange(300000, {.dtype = DType::f64}).reshape({600, 500}).t();
  Tensor r = mul(big, 2.0);
  CHECK(r.to_vector<double>()[1] == 1000.0);  // r[0][1] = 2 * big_base[1][0] = 2 * 500
  CHECK(r.sum().item() == Approx(299999.0 * 300000.0));
}

TEST_CASE("unary ops: known values", "[elementwise]") {
  Tensor x = d({-2, -0.5, 0, 0.5, 2});
  check_close(neg(x), {2, 0.5, 0, -0.5, -2});
  check_close(abs(x), {2, 0.5, 0, 0.5, 2});
  check_close(relu(x), {0, 0, 0, 0.5, 2});
  check_close(leaky_relu(x, 0.1), {-0.2, -0.05, 0, 0.5, 2});
  check_close(exp(d({0, 1, -1})), {1, M_E, 1 / M_E});
  check_close(log(d({1, M_E, 0.5})), {0, 1, -M_LN2});
  check_close(sqrt(d({4, 2})), {2, M_SQRT2});
  check_close(rsqrt(d({4, 0.25})), {0.5, 2});
  check_close(sigmoid(d({0, 2})), {0.5, 1 / (1 + std::exp(-2.0))});
  check_close(tanh(d({0, 1})), {0, 0.76159415595576488812});
  // GELU(1) = Phi(1) = 0.841344746068542948..., GELU(-1) = -0.158655253931457
  check_close(gelu(d({1, -1, 0})), {0.84134474606854293, -0.15865525393145707, 0});
  // tanh approximation: 0.5 (1 + tanh(sqrt(2/pi) * 1.044715))
  check_close(gelu(d({1}), GeluApproximation::Tanh), {0.5 * (1 + std::tanh(std::sqrt(2 / M_PI) * 1.044715))});
  check_close(silu(d({1, -1})), {0.73105857863000487925, -0.26894142136999512075});
  check_close(clamp(d({-3, 0.2, 5}), -1.0, 1.0), {-1, 0.2, 1});
  check_close(clamp(d({-3, 5}), std::nullopt, 0.0), {-3, 0});
}

TEST_CASE("unary ops: extreme values and NaN propagation", "[elementwise]") {
  check_close(sigmoid(d({-1000, 1000})), {0, 1});  // no overflow to NaN
  check_close(tanh(d({-1000, 1000})), {-1, 1});
  check_close(exp(d({1000, -1000})), {INFINITY, 0});
  check_close(log(d({0, -1})), {-INFINITY, NAN});
  check_close(sqrt(d({-1})), {NAN});
  check_close(silu(d({-1000})), {-0.0});
  for (auto fn : {+[](const Tensor& t) { return relu(t); }, +[](const Tensor& t) { return sigmoid(t); },
                  +[](const Tensor& t) { return exp(t); }, +[](const Tensor& t) { return abs(t); },
                  +[](const Tensor& t) { return gelu(t); }, +[](const Tensor& t) { return clamp(t, 0.0, 1.0); }}) {
    CHECK(std::isnan(fn(d({NAN})).item()));
  }
  check_close(add(d({NAN, 1}), d({1, INFINITY})), {NAN, INFINITY});
  check_close(mul(d({0}), d({INFINITY})), {NAN});
  // float32 tiny values stay representable
  Tensor tiny = from_vector<float>({1e-38f, 1e38f});
  CHECK(mul(tiny, 0.5).to_vector<float>()[0] == 5e-39f);
  CHECK(std::isinf(mul(tiny, 10.0).to_vector<float>()[1]));
}

TEST_CASE("comparisons and where", "[elementwise]") {
  Tensor a = d({1, 2, 3}), b = d({3, 2, 1});
  CHECK(eq(a, b).to_vector<bool>() == std::vector<bool>{false, true, false});
  CHECK(ne(a, b).to_vector<bool>() == std::vector<bool>{true, false, true});
  CHECK(lt(a, b).to_vector<bool>() == std::vector<bool>{true, false, false});
  CHECK(le(a, b).to_vector<bool>() == std::vector<bool>{true, true, false});
  CHECK(gt(a, 2.0).to_vector<bool>() == std::vector<bool>{false, false, true});
  CHECK(ge(a, 2.0).to_vector<bool>() == std::vector<bool>{false, true, true});
  CHECK(eq(d({NAN}), d({NAN})).to_vector<bool>() == std::vector<bool>{false});
  CHECK(isnan(d({NAN, 1})).to_vector<bool>() == std::vector<bool>{true, false});
  Tensor labels = from_vector<int64_t>({0, 2, 1});
  CHECK(eq(labels, from_vector<int64_t>({0, 1, 1})).to_vector<bool>() == std::vector<bool>{true, false, true});
  CHECK(eq(labels, 2.0).to_vector<bool>() == std::vector<bool>{false, true, false});
  CHECK(lt(labels, 1.5).to_vector<bool>() == std::vector<bool>{true, false, true});
  CHECK(logical_not(eq(a, b)).to_vector<bool>() == std::vector<bool>{true, false, true});
  Tensor w = where(gt(a, 1.5), a, zeros({}, {.dtype = DType::f64}));
  CHECK(w.to_vector<double>() == VD{0, 2, 3});
  Tensor wb = where(from_vector<bool>({true, false}, {2, 1}), d({1, 2, 3}), d({-1}));
  CHECK(wb.to_vector<double>() == VD{1, 2, 3, -1, -1, -1});
  CHECK_THROWS_WITH(where(a, a, b), Catch::Contains("where: condition must be a bool tensor"));
  CHECK_THROWS_WITH(logical_not(a), Catch::Contains("logical_not: expected a bool tensor"));
}

TEST_CASE("gradients at kinks follow PyTorch's conventions", "[elementwise]") {
  Tensor x = from_vector<double>({0, 0, 0}, {.dtype = DType::f64, .requires_grad = true});
  (relu(x) + abs(x)).sum().backward();
  CHECK(x.grad().to_vector<double>() == VD{0, 0, 0});
  Tensor a = from_vector<double>({1, 2}, {.dtype = DType::f64, .requires_grad = true});
  Tensor b = from_vector<double>({1, 3}, {.dtype = DType::f64, .requires_grad = true});
  maximum(a, b).sum().backward();
  CHECK(a.grad().to_vector<double>() == VD{0.5, 0});  // tie splits the gradient
  CHECK(b.grad().to_vector<double>() == VD{0.5, 1});
  Tensor c = from_vector<double>({-1, 0.5, 1}, {.dtype = DType::f64, .requires_grad = true});
  clamp(c, -1.0, 1.0).sum().backward();
  CHECK(c.grad().to_vector<double>() == VD{1, 1, 1});  // bounds are inclusive
  Tensor z = from_vector<double>({0, 2}, {.dtype = DType::f64, .requires_grad = true});
  pow(z, 2.0).sum().backward();
  CHECK(z.grad().to_vector<double>() == VD{0, 4});
}
