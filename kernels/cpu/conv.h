#pragma once
// 2-D convolution on the CPU, NCHW: Winograd F(2x2, 3x3) for f32 and bf16 3x3 stride-1 layers
// with enough channels, bf16 stride-1 layers directly on AMX tiles (bf16/conv_amx.h), each where it
// measures faster than im2col (conv_winograd.h, conv3x3_choice.h), im2col + GEMM for every other
// one, and direct seven-loop references that the tests hold them to. Contracts: kernels/conv.h (Note [im2col]).
// dtypes: f32 and f64 (OpenBLAS), and bf16 (gemm_bf16.h, f32 sums rounded once: Note [bf16
// convolutions] in conv.cpp).
//
// Threading: with at least as many images as threads, images are spread over threads (each with
// its own col buffer and a single-threaded BLAS); otherwise images run in turn and BLAS threads
// each GEMM. dw is summed per thread in fixed image ranges, then added up in a fixed order, so
// results are reproducible for a given thread count.

#include <cstdint>

#include "../../core/dtype.h"
#include "../conv.h"

namespace ember::kernels::cpu {

#include "../conv_decls.h"

// Direct references: the seven loops (n, oc, oy, ox, ic, i, j) written out, accumulating in
// double. Same contracts; slow, single-threaded, for tests.
void conv2d_forward_reference(DType dtype, const Conv2dGeometry& g, const void* x, const void* w, const void* bias,
                              void* y);
void conv2d_backward_data_reference(DType dtype, const Conv2dGeometry& g, const void* gy, const void* w, void* gx);
void conv2d_backward_weight_reference(DType dtype, const Conv2dGeometry& g, const void* gy, const void* x, void* gw);

}  // namespace ember::kernels::cpu
