#pragma once
// 2-D convolution on a CUDA device, NCHW: the hand-written im2col + GEMM path. It runs under the
// SIMT emulator and on a GPU without cuDNN; the cuDNN path is kernels/cuda/cudnn.h. Contracts:
// kernels/conv.h (Note [im2col]). Workspace (the im2col columns of a few images at a time) comes
// from cuda::Scratch; the GEMMs go through kernels/cuda/gemm.h (cuBLAS or the tiled kernel).
// col2im runs one thread per pixel that sums its contributions: no atomics, a fixed order.

#include <cstdint>

#include "../../core/dtype.h"
#include "../conv.h"

namespace ember::kernels::gpu {

#include "../conv_decls.h"

// The bias gradient of a channels-last gy ((n, out_h, out_w, c_out) in memory), any floating dtype:
// the same sums as conv2d_backward_bias, added in another order (column sums; cuDNN's bf16 bias
// gradient comes here for NHWC layers).
void conv2d_backward_bias_nhwc(DType dtype, const Conv2dGeometry& g, const void* gy, void* gb);

}  // namespace ember::kernels::gpu
