#include <catch2/catch.hpp>
#include <ember/ember.h>

using namespace ember;

TEST_CASE("smoke: add and backward", "[core]") {
  Tensor a = from_vector<double>({1, 2, 3}, {.dtype = DType::f64, .requires_grad = true});
  Tensor b = from_vector<double>({4, 5, 6}, {.dtype = DType::f64, .requires_grad = true});
  Tensor y = (a * b + a).sum();
  CHECK(y.item() == Approx(1 * 4 + 2 * 5 + 3 * 6 + 6));
  y.backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{5, 6, 7});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{1, 2, 3});
}
