#pragma once
// 2-D convolution on a CUDA device, NCHW: the hand-written im2col + GEMM path (Note [im2col] in
// kernels/cpu/conv.h). It runs under the SIMT emulator and on a GPU without cuDNN; the cuDNN path
// is separate.
//
// Contracts: exactly those of kernels/cpu/conv.h (same geometry struct, same shapes, outputs
// overwritten, f32 or f64). Pointers are device pointers of the current device; the work runs on
// cuda::current_stream() and is asynchronous. Workspace (the im2col columns of a few
// images at a time) comes from cuda::Scratch. The GEMMs go through kernels/cuda/gemm.h
// (cuBLAS or the tiled kernel).

#include <cstdint>

#include "../../core/dtype.h"
#include "../cpu/conv.h"

namespace ember::kernels::gpu {

using ::ember::kernels::cpu::Conv2dGeometry;

// One image. x: (c_in, h, w) device; col: (c_in * kh * kw, out_h * out_w) device, overwritten.
void im2col(const Conv2dGeometry& g, const float* x, float* col);
void im2col(const Conv2dGeometry& g, const double* x, double* col);
// The adjoint: x (c_in, h, w) += every col entry at the pixel it was read from (accumulates, as
// on the CPU). One thread per pixel sums its contributions: no atomics, a fixed order.
void col2im(const Conv2dGeometry& g, const float* col, float* x);
void col2im(const Conv2dGeometry& g, const double* col, double* x);

// x: (n, c_in, h, w); w: (c_out, c_in / groups, kh, kw); bias: (c_out) or null; y: (n, c_out, out_h, out_w).
void conv2d_forward(DType dtype, const Conv2dGeometry& g, const void* x, const void* w, const void* bias, void* y);
// gx (n, c_in, h, w) = d(sum y * gy)/dx.
void conv2d_backward_data(DType dtype, const Conv2dGeometry& g, const void* gy, const void* w, void* gx);
// gw (c_out, c_in / groups, kh, kw) = d(sum y * gy)/dw, summed over the batch.
void conv2d_backward_weight(DType dtype, const Conv2dGeometry& g, const void* gy, const void* x, void* gw);
// gb (c_out) = sum of gy over n, out_h, out_w (accumulated in double, in a tree order).
void conv2d_backward_bias(DType dtype, const Conv2dGeometry& g, const void* gy, void* gb);

}  // namespace ember::kernels::gpu
