// A downstream program: uses ember through its installed headers and library only.
// Computes a small function with autograd and checks the value and the gradient.

#include <cmath>
#include <cstdio>
#include <vector>

#include <ember/ember.h>

using namespace ember;

int main() {
  try {
    // x = [1, 2, 3], a leaf that requires grad.
    Tensor x = from_vector<double>({1, 2, 3}, {.dtype = DType::f64, .requires_grad = true});
    // A view and a broadcast: the column x.view({3, 1}) times the row [1, 2] gives (3, 2).
    Tensor w = from_vector<double>({1, 2}, {.dtype = DType::f64});
    Tensor outer = x.view({3, 1}) * w;                       // [[1, 2], [2, 4], [3, 6]]
    // y = sum(outer * x_col) - 2 * sum(x) = 3 * sum(x^2) - 2 * sum(x) = 42 - 12 = 30
    Tensor y = (outer * x.unsqueeze(1)).sum() - (x * 2.0).sum();
    y.backward();
    // dy/dx = 6x - 2 = [4, 10, 16]
    const double value = y.item();
    const std::vector<double> grad = x.grad().to_vector<double>();
    std::printf("downstream: y = %g, dy/dx = [%g, %g, %g]\n", value, grad[0], grad[1], grad[2]);

    const std::vector<double> expected{4, 10, 16};
    bool ok = std::abs(value - 30.0) < 1e-12;
    for (size_t i = 0; i < expected.size(); ++i) ok = ok && std::abs(grad[i] - expected[i]) < 1e-12;
    std::printf("downstream: %s\n", ok ? "PASS" : "FAIL (expected y = 30, dy/dx = [4, 10, 16])");
    return ok ? 0 : 1;
  } catch (const Error& e) {
    std::printf("downstream: FAIL: ember::Error: %s\n", e.what());
    return 1;
  }
}
