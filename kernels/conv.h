#pragma once
// 2-D convolution, NCHW: the contract both backends implement — kernels/cpu/conv.h (im2col +
// OpenBLAS GEMM, and the direct references) and kernels/cuda/conv.h (im2col + cuBLAS or the tiled
// GEMM); kernels/cuda/cudnn.h computes the same four passes with cuDNN.
//
// Note [im2col]
// For one image, output pixel (oy, ox) of output channel oc is a dot product of the filter
// w[oc] (C_in/groups * kh * kw values) with the input patch under it. im2col copies every patch
// into a column of `col` (C_in * kh * kw, out_h * out_w), with zeros where the patch hangs over
// the padding; then for each group g
//   y[g] (C_out/G, out_h*out_w) = w[g] (C_out/G, C_in/G*kh*kw) @ col[g] (C_in/G*kh*kw, out_h*out_w)
// is one GEMM. Backward mirrors it:
//   data:   dcol[g] = w[g]^T @ dy[g], then col2im adds every column back onto the pixels it was
//           copied from (overlapping patches sum);
//   weight: dw[g] = sum over images of dy[g] @ col[g]^T;
//   bias:   db[oc] = sum of dy[oc] over images and pixels.
// A 1x1 convolution with stride 1 and no padding needs no im2col: the image is its own col.
//
// The kernels, each `(DType dtype, const Conv2dGeometry& g, ...)` with dtype f32 or f64, all
// tensors contiguous, outputs overwritten (they must not overlap the inputs):
//   im2col(g, x, col)                      one image: x (c_in, h, w) -> col (c_in * kh * kw, out_h * out_w);
//                                          row (c, i, j), column (oy, ox) =
//                                          x[c, oy*stride_h - pad_h + i*dil_h, ox*stride_w - pad_w + j*dil_w], 0 outside
//   col2im(g, col, x)                      the adjoint: x (c_in, h, w) += every col entry at the pixel it
//                                          was read from (accumulates: zero x first for a plain scatter)
//   conv2d_forward(x, w, bias, y)          x (n, c_in, h, w); w (c_out, c_in / groups, kh, kw);
//                                          bias (c_out) or null; y (n, c_out, out_h, out_w)
//   conv2d_backward_data(gy, w, gx)        gx (n, c_in, h, w) = d(sum y * gy)/dx
//   conv2d_backward_weight(gy, x, gw)      gw (c_out, c_in / groups, kh, kw) = d(sum y * gy)/dw, over the batch
//   conv2d_backward_bias(gy, gb)           gb (c_out) = sum of gy over n, out_h, out_w (in cpu_acc_t / acc_t)
// Pointers are host memory for kernels::cpu, device memory of the current device for
// kernels::gpu (queued on cuda::current_stream(), asynchronous).

#include <cstdint>

namespace ember::kernels {

struct Conv2dGeometry {
  int64_t n = 0, c_in = 0, h = 0, w = 0;  // input (n, c_in, h, w)
  int64_t c_out = 0, kh = 0, kw = 0;      // weight (c_out, c_in / groups, kh, kw)
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dil_h = 1, dil_w = 1;
  int64_t groups = 1;
  int64_t out_h = 0, out_w = 0;  // conv2d_out_size of each spatial dim
};

// floor((in + 2 pad - dilation (k - 1) - 1) / stride) + 1; may be <= 0 for an input too small.
inline int64_t conv2d_out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dilation) {
  const int64_t span = in + 2 * pad - dilation * (k - 1) - 1;
  // Floor division (span may be negative for an input smaller than the dilated kernel).
  return (span >= 0 ? span / stride : -((-span + stride - 1) / stride)) + 1;
}

}  // namespace ember::kernels
