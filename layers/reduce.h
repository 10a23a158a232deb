#pragma once
// Reductions with autograd. `dims` may be negative and may be empty (= all dims);
// keepdim keeps reduced dims as size 1. Reducing over a zero-size dim: sum gives 0, mean NaN,
// max/min/argmax throw (as PyTorch).

#include <utility>

#include "../core/tensor.h"

namespace ember {

Tensor sum(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
// Variance with Bessel's correction by default (correction = 1, PyTorch's unbiased).
Tensor var(const Tensor& x, const Dims& dims = {}, int64_t correction = 1, bool keepdim = false);
// amax/amin: maximum over dims; the gradient is split evenly between tied maxima (as PyTorch).
Tensor amax(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
// max/min of all elements (NaN if any element is NaN).
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
// max/min along one dim: (values, indices as int64). The gradient flows to the index chosen
// (the first occurrence of the max).
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
// int64 index of the first max/min along dim; over all elements (flattened) without a dim.
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x);

}  // namespace ember
