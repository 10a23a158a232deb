#pragma once
// CPU 2-D pooling: max (with indices), average, adaptive average; forward and backward.
//
// Layout: every tensor is a stack of `planes` = N * C contiguous row-major (H, W) planes, so
// x is (planes, in_h, in_w) and the outputs are (planes, out_h, out_w). Work is split across
// planes, so no two threads ever write the same plane (the backward scatters need no atomics).
// Pointers are to elements of `dtype` (float32 or float64).

#include <cstdint>

#include "../../core/dtype.h"

namespace ember::kernels::cpu {

// The window geometry of one pooling call (PyTorch's meaning of every field).
struct Pool2dGeometry {
  int64_t planes = 0;
  int64_t in_h = 0, in_w = 0;
  int64_t out_h = 0, out_w = 0;
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
};

// PyTorch's pooling_output_shape: floor (or ceil) of (in + 2 pad - dilation (k - 1) - 1) / stride,
// plus one. With ceil_mode the last window must still start inside the input or the left
// padding, otherwise it is dropped. May return <= 0 (the caller reports that).
int64_t pool_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode);

// out[p, oh, ow] = max of x over the window; indices[p, oh, ow] = ih * in_w + iw of that max
// (the first one on ties; a NaN wins and propagates, as PyTorch). Padding never wins.
// x: (planes, in_h, in_w); out, indices: (planes, out_h, out_w); all contiguous, overwritten.
void max_pool2d_forward(DType dtype, const Pool2dGeometry& g, const void* x, void* out, int64_t* indices);
// grad_in[p, indices[p, o]] += grad_out[p, o]. grad_out, indices: (planes, out_h, out_w);
// grad_in: (planes, in_h, in_w), overwritten (zeroed first).
void max_pool2d_backward(DType dtype, const Pool2dGeometry& g, const void* grad_out, const int64_t* indices,
                         void* grad_in);

// out = sum over the window's in-bounds elements / divisor, where the divisor counts the padded
// positions inside the window (count_include_pad) or only the in-bounds ones. Windows that
// ceil_mode lets run past the padding count only up to in + pad. dilation must be 1.
void avg_pool2d_forward(DType dtype, const Pool2dGeometry& g, bool count_include_pad, const void* x, void* out);
// grad_in: (planes, in_h, in_w), overwritten.
void avg_pool2d_backward(DType dtype, const Pool2dGeometry& g, bool count_include_pad, const void* grad_out,
                         void* grad_in);

// Adaptive average: output cell i covers input rows [floor(i * in / out), ceil((i + 1) * in / out)),
// likewise for columns. Uses only planes, in_h/in_w, out_h/out_w of `g`.
void adaptive_avg_pool2d_forward(DType dtype, const Pool2dGeometry& g, const void* x, void* out);
// grad_in: (planes, in_h, in_w), overwritten.
void adaptive_avg_pool2d_backward(DType dtype, const Pool2dGeometry& g, const void* grad_out, void* grad_in);

}  // namespace ember::kernels::cpu
