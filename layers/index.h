#pragma once
// Joining, splitting and indexing, with autograd.

#include <vector>

#include "../core/tensor.h"

namespace ember {

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Pieces of `split_size` along dim (the last may be smaller); views of x.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

// x.index_select(dim, index): index is 1-D int64/int32.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// out[i][j][k] = x[i][index[i][j][k]][k] (dim = 1); index has x's ndim.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// out = x.clone(); out[i][index[i][j][k]][k] += src[i][j][k] (dim = 1). Differentiable in x and src.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// One-hot rows for int labels: (*,) -> (*, num_classes) in `dtype`. Labels out of range throw.
Tensor one_hot(const Tensor& labels, int64_t num_classes, DType dtype = DType::i64);

}  // namespace ember
