#pragma once
// The kernels' view of an operand: a raw pointer and element strides over a shared iteration
// shape. No Tensor type here — kernels/ is raw-pointer compute, the teaching surface.
// A broadcast dim has stride 0. Plain structs, so CUDA kernels can take them by value.

#include <cstdint>

#include "../core/shape.h"  // kMaxDims

namespace ember::kernels {

struct IterShape {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= sizes[i];
    return n;
  }
};

struct Operand {
  void* data = nullptr;
  int64_t strides[kMaxDims] = {};  // in elements
};

}  // namespace ember::kernels
