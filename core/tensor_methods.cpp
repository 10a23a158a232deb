// Tensor's method sugar: each forwards to the free function in layers/.

#include "../layers/elementwise.h"
#include "../layers/gemm.h"
#include "../layers/reduce.h"
#include "tensor.h"

namespace ember {

Tensor Tensor::operator-() const { return neg(*this); }
Tensor Tensor::sum() const { return ember::sum(*this); }
Tensor Tensor::sum(const Dims& dims, bool keepdim) const { return ember::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return ember::mean(*this); }
Tensor Tensor::mean(const Dims& dims, bool keepdim) const { return ember::mean(*this, dims, keepdim); }
Tensor Tensor::matmul(const Tensor& other) const { return ember::matmul(*this, other); }
Tensor Tensor::exp() const { return ember::exp(*this); }
Tensor Tensor::log() const { return ember::log(*this); }
Tensor Tensor::sqrt() const { return ember::sqrt(*this); }
Tensor Tensor::abs() const { return ember::abs(*this); }
Tensor Tensor::relu() const { return ember::relu(*this); }
Tensor Tensor::sigmoid() const { return ember::sigmoid(*this); }
Tensor Tensor::tanh() const { return ember::tanh(*this); }
Tensor Tensor::pow(double exponent) const { return ember::pow(*this, exponent); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return ember::argmax(*this, dim, keepdim); }

}  // namespace ember
