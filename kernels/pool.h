#pragma once
// 2-D pooling: the contract both backends implement — kernels/cpu/pool.h and kernels/cuda/pool.h
// (kernels/cuda/cudnn.h computes average pooling with cuDNN). Max (with indices), average,
// adaptive average; forward and backward.
//
// Layout: every tensor is a stack of `planes` = N * C contiguous row-major (H, W) planes, so
// x is (planes, in_h, in_w) and the outputs are (planes, out_h, out_w). dtype: f32 or f64.
// Outputs are overwritten (the backward ones are zeroed first where they scatter).
//   max_pool2d_forward(g, x, out, indices)   out[p, oh, ow] = max of x over the window;
//                                           indices[p, oh, ow] = ih * in_w + iw of that max, of
//                                           index_dtype: i64, or i32 when the plane has at most
//                                           INT32_MAX elements (check_max_pool_indices)
//                                           (the first one on ties; a NaN wins and propagates, as
//                                           PyTorch). Padding never wins.
//   max_pool2d_backward(g, grad_out, indices, grad_in)
//                                           grad_in[p, indices[p, o]] += grad_out[p, o]
//   avg_pool2d_forward(g, count_include_pad, x, out)
//                                           sum over the window's in-bounds elements / divisor, where
//                                           the divisor counts the padded positions inside the window
//                                           (count_include_pad) or only the in-bounds ones. Windows
//                                           that ceil_mode lets run past the padding count only up to
//                                           in + pad. dilation must be 1.
//   avg_pool2d_backward(g, count_include_pad, grad_out, grad_in)
//   adaptive_avg_pool2d_forward(g, x, out)  output cell i covers input rows
//                                           [floor(i * in / out), ceil((i + 1) * in / out)), likewise
//                                           columns; uses only planes, in_h/in_w, out_h/out_w of g
//   adaptive_avg_pool2d_backward(g, grad_out, grad_in)
// Pointers are host memory for kernels::cpu, device memory of the current device for
// kernels::gpu (queued on cuda::current_stream()). Both backends are deterministic and use the
// same per-window order of operations; max pooling is bit-identical on both, average pooling
// sums in cpu_acc_t on the CPU and acc_t on CUDA (Note [Accumulation types] in core/dtype.h), so
// f32 averages may differ in the last bit.

#include <cstdint>
#include <limits>

#include "../core/dtype.h"
#include "../core/error.h"

namespace ember::kernels {

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
inline int64_t pool_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation,
                                bool ceil_mode) {
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  // Floor division: span may be negative (C++ '/' truncates toward zero).
  int64_t out = (span >= 0 ? span / stride : -((-span + stride - 1) / stride)) + 1;
  // The ceil-mode rule: a last window that would start in the right padding is dropped.
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// Whether max pooling's indices (positions within an in_h x in_w plane) fit index_dtype: int64
// always, int32 when the plane has at most INT32_MAX elements.
inline bool max_pool_indices_fit(DType index_dtype, const Pool2dGeometry& g) {
  if (index_dtype == DType::i64) return true;
  return index_dtype == DType::i32 && g.in_h * g.in_w <= std::numeric_limits<int32_t>::max();
}

// Throws unless index_dtype is int32 or int64 and fits g's planes.
inline void check_max_pool_indices(const char* op, DType index_dtype, const Pool2dGeometry& g) {
  EMBER_CHECK(index_dtype == DType::i32 || index_dtype == DType::i64, op, ": indices must be int32 or int64, got ",
              index_dtype);
  EMBER_CHECK(max_pool_indices_fit(index_dtype, g), op, ": a ", g.in_h, "x", g.in_w,
              " plane has more positions than int32 indices can address");
}

}  // namespace ember::kernels
