#pragma once
// Matrix products with autograd, through OpenBLAS sgemm/dgemm on the CPU. Transposed views
// (a.t(), a.transpose(-1, -2)) are passed to BLAS as transposed operands, not copied.

#include "../core/tensor.h"

namespace ember {

// (n, k) @ (k, m) -> (n, m)
Tensor mm(const Tensor& a, const Tensor& b);
// (B, n, k) @ (B, k, m) -> (B, n, m)
Tensor bmm(const Tensor& a, const Tensor& b);
// NumPy/PyTorch matmul semantics: 1-D dot products, 2-D mm, batched with broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
// x @ weight^T + bias; x: (*, in), weight: (out, in), bias: (out) or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace ember
