#pragma once
// 2-D convolution on the CPU, NCHW: im2col + GEMM (the fast path), and direct seven-loop
// references that the tests hold it to.
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
// Threading: with at least as many images as threads, images are spread over threads (each with
// its own col buffer and a single-threaded BLAS); otherwise images run in turn and BLAS threads
// each GEMM. dw is summed per thread in fixed image ranges, then added up in a fixed order, so
// results are reproducible for a given thread count.

#include <cstdint>

#include "../../core/dtype.h"

namespace ember::kernels::cpu {

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
int64_t conv2d_out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dilation);

// One image. x: (c_in, h, w) contiguous; col: (c_in * kh * kw, out_h * out_w), overwritten;
// row (c, i, j), column (oy, ox) = x[c, oy*stride_h - pad_h + i*dil_h, ox*stride_w - pad_w + j*dil_w], 0 outside.
void im2col(const Conv2dGeometry& g, const float* x, float* col);
void im2col(const Conv2dGeometry& g, const double* x, double* col);
// The adjoint of im2col: x (c_in, h, w) += every col entry at the pixel it was read from.
// Accumulates: zero x first for a plain scatter.
void col2im(const Conv2dGeometry& g, const float* col, float* x);
void col2im(const Conv2dGeometry& g, const double* col, double* x);

// All tensors contiguous, of dtype (f32 or f64); outputs are overwritten and must not overlap inputs.
// x: (n, c_in, h, w); w: (c_out, c_in / groups, kh, kw); bias: (c_out) or null; y: (n, c_out, out_h, out_w).
void conv2d_forward(DType dtype, const Conv2dGeometry& g, const void* x, const void* w, const void* bias, void* y);
// gx (n, c_in, h, w) = d(sum y * gy)/dx.
void conv2d_backward_data(DType dtype, const Conv2dGeometry& g, const void* gy, const void* w, void* gx);
// gw (c_out, c_in / groups, kh, kw) = d(sum y * gy)/dw.
void conv2d_backward_weight(DType dtype, const Conv2dGeometry& g, const void* gy, const void* x, void* gw);
// gb (c_out) = sum of gy over n, out_h, out_w (accumulated in double).
void conv2d_backward_bias(DType dtype, const Conv2dGeometry& g, const void* gy, void* gb);

// Direct references: the seven loops (n, oc, oy, ox, ic, i, j) written out, accumulating in
// double. Same contracts as above; slow, single-threaded, for tests.
void conv2d_forward_reference(DType dtype, const Conv2dGeometry& g, const void* x, const void* w, const void* bias,
                              void* y);
void conv2d_backward_data_reference(DType dtype, const Conv2dGeometry& g, const void* gy, const void* w, void* gx);
void conv2d_backward_weight_reference(DType dtype, const Conv2dGeometry& g, const void* gy, const void* x, void* gw);

}  // namespace ember::kernels::cpu
