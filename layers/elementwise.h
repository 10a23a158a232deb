#pragma once
// Elementwise ops with autograd: broadcasting binary arithmetic, unary math and activations,
// comparisons and where. Inputs may be strided views; results are new contiguous tensors.
// Binary ops compute in promote_types(a, b); arithmetic kernels exist for float32/float64
// (integer tensors are accepted by comparisons, where, neg/abs and copies).

#include <optional>

#include "../core/tensor.h"

namespace ember {

// ---- binary, broadcasting -------------------------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a + alpha * b
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a - alpha * b
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);  // NaN propagates
Tensor minimum(const Tensor& a, const Tensor& b);

// Tensor-scalar forms (the scalar takes the tensor's dtype).
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor pow(const Tensor& a, double exponent);
Tensor rsub(const Tensor& a, double b);  // b - a

// ---- unary ------------------------------------------------------------------------------------
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);  // gradient at 0 is 0 (sign(0) = 0), as PyTorch
Tensor relu(const Tensor& x);  // gradient at 0 is 0
// ReLU's backward from its output: grad where out > 0, else 0 (not differentiable; for fused layers).
Tensor relu_backward(const Tensor& grad, const Tensor& out);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
enum class GeluApproximation { None, Tanh };
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::None);
Tensor silu(const Tensor& x);
// Clamps to [lo, hi]; either bound may be absent. Gradient passes where lo <= x <= hi.
Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi);

// ---- comparisons (bool results, not differentiable) and selection ----------------------------
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
Tensor logical_not(const Tensor& x);
Tensor isnan(const Tensor& x);
// cond ? a : b, broadcasting all three; cond must be bool. Differentiable in a and b.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// Sums `grad` over broadcast dims so that it has `shape` (the backward of broadcasting/expand).
Tensor sum_to(const Tensor& grad, const Shape& shape);

// ---- operators --------------------------------------------------------------------------------
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, double b) { return div(a, b); }
inline Tensor operator+(double a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(double a, const Tensor& b) { return rsub(b, a); }
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
inline Tensor operator/(double a, const Tensor& b) { return mul(pow(b, -1.0), a); }

}  // namespace ember
