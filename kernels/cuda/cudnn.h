#pragma once
// cuDNN 9 for convolution (forward, backward data, backward filter), pooling and activations.
//
// Same raw-pointer contracts as the hand-written kernels (kernels/conv.h, kernels/pool.h,
// kernels/elementwise.h), so a layer picks one or the other per call: cuDNN when available() and the
// problem is supported, the hand-written kernel otherwise. available() is false in the SIMT
// flavour (there is no cuDNN on a machine without a GPU) and in a GPU build without cuDNN.
//
// Note [cuDNN algorithm choice]
// A cuDNN convolution can be computed by several algorithms (implicit GEMM, FFT, Winograd, ...)
// with different speed and workspace needs. By default ember asks cuDNN's heuristics for a ranked
// list (cudnnGet*Algorithm_v7); in benchmark mode (set_benchmark(true), or EMBER_CUDNN_BENCHMARK=1)
// it times them on the real problem (cudnnFind*AlgorithmEx), like torch.backends.cudnn.benchmark.
// Either way the answer is cached under the full problem key — shapes, strides (NCHW contiguous),
// padding, stride, dilation, groups, dtype, math type, device and which of the three passes — so
// it is computed once per layer shape. All convolutions of a device share one workspace buffer
// from the caching allocator that grows to the largest need; when it cannot grow (out of
// memory), the next algorithm in the ranking that needs less workspace is used.
// TF32 is off unless set_allow_tf32(true): float32 results then match the CPU to float32
// rounding, not to TF32's 10-bit mantissa.

#include <cstdint>

#include "../../core/dtype.h"
#include "../conv.h"
#include "../pool.h"

namespace ember::kernels::gpu::cudnn {

bool available();
// Whether convolutions go through cuDNN: available() and not disabled with EMBER_CUDNN=0 (which
// selects the hand-written im2col + GEMM kernels, e.g. to compare them).
bool use_for_conv();
void set_benchmark(bool on);
bool benchmark();
void set_allow_tf32(bool on);
bool allow_tf32();
// Number of algorithm choices cached so far (all devices; for tests and diagnostics).
int64_t cached_algorithm_count();

// The contracts of kernels/conv.h; f32 or f64; device pointers; current stream.
void conv2d_forward(DType dtype, const Conv2dGeometry& g, const void* x, const void* w, const void* bias, void* y);
void conv2d_backward_data(DType dtype, const Conv2dGeometry& g, const void* gy, const void* w, void* gx);
void conv2d_backward_weight(DType dtype, const Conv2dGeometry& g, const void* gy, const void* x, void* gw);
void conv2d_backward_bias(DType dtype, const Conv2dGeometry& g, const void* gy, void* gb);

// Average pooling with PyTorch's meaning of count_include_pad (no dilation); x/out as in
// kernels/pool.h (planes of (h, w)).
void avg_pool2d_forward(DType dtype, const Pool2dGeometry& g, bool count_include_pad, const void* x, void* out);
void avg_pool2d_backward(DType dtype, const Pool2dGeometry& g, bool count_include_pad, const void* x,
                         const void* out, const void* grad_out, void* grad_in);

enum class Activation { Relu, Sigmoid, Tanh };
// y = act(x) over n contiguous elements; grad_x = act'(x) * grad_y (needs x and y).
void activation_forward(Activation a, DType dtype, int64_t n, const void* x, void* y);
void activation_backward(Activation a, DType dtype, int64_t n, const void* x, const void* y, const void* grad_y,
                         void* grad_x);

}  // namespace ember::kernels::gpu::cudnn
