#pragma once
// cuDNN 9 for convolution (forward, backward data, backward filter), pooling and activations.
//
// Same raw-pointer contracts as the hand-written kernels (kernels/conv.h, kernels/pool.h,
// kernels/elementwise.h), so a layer picks one or the other per call: cuDNN when enabled() and the
// problem is supported, the hand-written kernel otherwise. available() is true in a GPU build
// linked with cuDNN and in the SIMT flavour built against the real <cudnn.h>, where the calls run
// over the emulator's cuDNN shim (kernels/simt/cudnn_shim.cpp, docs/simt.md).
//
// Note [cuDNN or the hand-written kernels]
// Where ember has both, a layer on a CUDA device uses cuDNN for convolutions (layers/conv.cpp) and
// for average pooling whose output size is cuDNN's floor formula (layers/pool.cpp; ceil_mode
// windows stay hand-written), in f32, f64, f16 and bf16 (Note [16-bit pooling and activations]).
// Max pooling is hand-written unless asked for through cuDNN (set_max_pool(true) or
// EMBER_CUDNN_MAX_POOL=1; then for the same geometries as average pooling): on an H200
// (2026-12-04) cuDNN's max-pooling backward took 4.8 ms of a ResNet-18 AMP step for the stem's
// one layer, where reading x, y and dy and writing dx is about 0.3 ms; the hand-written kernels
// keep int32 window indices (Note [Max-pool indices] in layers/pool.cpp), gather the gradient
// (Note [Pooling backward as a gather] in pool.cu) and move channels-last data in 16-byte packs
// (Note [Channels-last max pooling]), and PyTorch's max pooling is its own kernels, not cuDNN's.
// bench_cuda's stem_layers times both at the stem's shape. ReLU, sigmoid and tanh use the
// hand-written elementwise kernels: on an H200 (2026-12-04) the kernel moved 3,947 GB/s through
// a 2^26-float ReLU and cuDNN's activation 2,787 (the copy: 3,778). cuDNN's activation entry
// points below stay, tested against the kernels. EMBER_CUDNN=0 in the environment selects the
// hand-written kernels for everything (to compare the two, or to rule cuDNN out); ctest runs the
// CUDA parity tests both ways.
//
// Note [cuDNN algorithm choice]
// A cuDNN convolution can be computed by several algorithms (implicit GEMM, FFT, Winograd, ...)
// with different speed and workspace needs. By default ember asks cuDNN's heuristics for a ranked
// list (cudnnGet*Algorithm_v7); in benchmark mode (set_benchmark(true), or EMBER_CUDNN_BENCHMARK=1)
// it times them on the real problem (cudnnFind*AlgorithmEx), like torch.backends.cudnn.benchmark.
// Either way the answer is cached under the full problem key — shapes, strides (the layout: NCHW
// or NHWC, each dense), padding, stride, dilation, groups, dtype, math type, device and which of
// the three passes — so it is computed once per layer shape and layout. Algorithms cuDNN reports
// as unsupported for the problem are dropped from the ranking. All convolutions of a device share one workspace buffer from the
// caching allocator that grows to the largest need; when it cannot grow (out of memory), the next
// algorithm in the ranking that needs less workspace is used.
// TF32 is off unless set_allow_tf32(true): float32 results then match the CPU to float32
// rounding, not to TF32's 10-bit mantissa.
//
// Note [16-bit convolutions]
// f16 and bf16 convolutions run natively: x, w and y (and dy, dx, dw) are described as
// CUDNN_DATA_HALF / CUDNN_DATA_BFLOAT16 with a CUDNN_DATA_FLOAT compute type (cuDNN's
// PSEUDO_HALF_CONFIG and PSEUDO_BFLOAT16_CONFIG) and CUDNN_TENSOR_OP_MATH: each product of two
// 16-bit values is exact in float, the sums are in float, and each output element is rounded to
// 16 bits once, as the 16-bit GEMMs are (Note [16-bit GEMM on CUDA] in gemm.cu). The algorithm
// cache is keyed by dtype, so a layer's f16, bf16 and f32 problems are ranked separately. The bias
// is broadcast into y (cudnnAddTensor with beta = 0: a copy of 16-bit values, exact) and the
// convolution then accumulates onto it with beta = 1, its float result blended in float before the
// one rounding: y = round(conv + bias). (Adding the bias after the convolution would round twice,
// once for the convolution and again for the sum.) The bias gradient is cudnnConvolutionBackwardBias
// on f16 dy (the emulator's shim sums it in float and rounds once); cuDNN 9 refuses bf16 there
// (CUDNN_STATUS_NOT_SUPPORTED, on an H200 and in the shim), so a bf16 bias gradient is the
// hand-written reduction of kernels/cuda/conv.cu, with the same float sum and one rounding. cuDNN refuses 16-bit data
// with a double compute type and operands of different data types; ember asks for neither. The
// tests' bound (tests/cuda/test_cudnn.cpp) is float summation plus one rounding; an FFT or
// Winograd algorithm a GPU may pick for 16-bit data transforms in its own precision instead.
//
// Note [16-bit pooling and activations]
// Pooling and activations of f16 and bf16 data follow the convolutions: x, y (and dy, dx) are
// described as CUDNN_DATA_HALF / CUDNN_DATA_BFLOAT16, alpha and beta are floats, and cuDNN computes
// in float and rounds each output once. Max pooling and ReLU only select or zero values, so they
// equal the hand-written kernels bit for bit; so do sigmoid and tanh on the emulator (its shim runs
// the same float functors as ember's kernels), while a GPU's cuDNN may differ from them by an ulp.
// Average pooling rounds the window mean once; a max-pooling backward sums the gradients of
// overlapping windows in float and rounds once, as the hand-written kernels do
// (tests/cuda/test_cudnn_16bit_pool.cpp compares both with double references and the hand-written
// kernels).
// The shim counts the 16-bit calls by dtype (kernels/simt/cudnn_shim.h), so tests see that a
// 16-bit layer reached cuDNN natively, without a conversion to f32 around it.
//
// Note [Channels-last convolutions and pooling]
// Every convolution and pooling entry point takes the Layout of its 4-D operands. NHWC describes
// x, y, dy and dx as CUDNN_TENSOR_NHWC tensors (dense, strides (H*W*C, 1, W*C, C)) and the filter
// as a CUDNN_TENSOR_NHWC filter: w and dw are (C_out, kh, kw, C_in / groups) in memory, a
// channels-last (C_out, C_in / groups, kh, kw) tensor. One layout holds for all operands of a call.
// cuDNN then computes on channels-last data directly (the tensor-core kernels read NHWC without a
// transpose), so a channels-last layer needs no copy to NCHW and back (Note [Channels-last through
// the NCHW kernels] in core/op_helpers.h). The bias (C values) is the same memory in either layout.
// The values equal those of NCHW up to the algorithm cuDNN picks; on the emulator, whose shim
// computes NHWC by moving the operands to NCHW and back, they are equal bit for bit. NHWC is for
// f32, f16 and bf16: float64 is refused (PyTorch never sends double channels-last data to cuDNN
// either; layers copy it through NCHW).

#include <cstdint>

#include "../../core/dtype.h"
#include "../conv.h"
#include "../pool.h"

namespace ember::kernels::gpu::cudnn {

bool available();
// Whether layers use cuDNN where they can: available() and not EMBER_CUDNN=0 (Note [cuDNN or the
// hand-written kernels]). Any other value of EMBER_CUDNN than 0 or 1 is an error.
bool enabled();
// Convolutions through cuDNN: enabled().
bool use_for_conv();
// Pooling of geometry g through cuDNN: enabled(), no dilation, and the output size is the floor
// one cuDNN computes (no extra ceil_mode window).
bool use_for_pool(const Pool2dGeometry& g);
// Max pooling through cuDNN: use_for_pool(g) and max_pool() — off unless set_max_pool(true) or
// EMBER_CUDNN_MAX_POOL=1 (Note [cuDNN or the hand-written kernels]).
bool use_for_max_pool(const Pool2dGeometry& g);
void set_max_pool(bool on);
bool max_pool();
void set_benchmark(bool on);
bool benchmark();
void set_allow_tf32(bool on);
bool allow_tf32();
// Number of algorithm choices cached so far (all devices; for tests and diagnostics).
int64_t cached_algorithm_count();

// The memory order of the 4-D operands of a call (Note [Channels-last convolutions and pooling]):
// NCHW is row-major (N, C, H, W); NHWC is channels-last, (N, H, W, C) in memory, the filter
// (C_out, kh, kw, C_in / groups).
enum class Layout { NCHW, NHWC };
const char* layout_name(Layout layout);

// The contracts of kernels/conv.h with every 4-D operand (x, w, y, gy, gx, gw) in `layout`; f32,
// f64 (NCHW only), or f16 / bf16 computed in float and rounded once (Note [16-bit convolutions]);
// device pointers; current stream.
void conv2d_forward(DType dtype, Layout layout, const Conv2dGeometry& g, const void* x, const void* w,
                    const void* bias, void* y);
void conv2d_backward_data(DType dtype, Layout layout, const Conv2dGeometry& g, const void* gy, const void* w,
                          void* gx);
void conv2d_backward_weight(DType dtype, Layout layout, const Conv2dGeometry& g, const void* gy, const void* x,
                            void* gw);
void conv2d_backward_bias(DType dtype, Layout layout, const Conv2dGeometry& g, const void* gy, void* gb);

// Pooling for a geometry use_for_pool() accepts; f32, f64 (NCHW only), or f16 / bf16 computed in
// float (Note [16-bit pooling and activations]). x/out hold g.planes / channels images of
// `channels` channels in `layout`: NCHW is kernels/pool.h's stack of (h, w) planes (any divisor
// of g.planes serves as channels there: the planes are independent), NHWC is channels-last
// (N, h, w, channels) with N = g.planes / channels.
// Average pooling with PyTorch's meaning of count_include_pad; max pooling with NaN winning, like
// the hand-written kernel, but without indices: its backward reads x and out instead.
void avg_pool2d_forward(DType dtype, Layout layout, int64_t channels, const Pool2dGeometry& g, bool count_include_pad,
                        const void* x, void* out);
void avg_pool2d_backward(DType dtype, Layout layout, int64_t channels, const Pool2dGeometry& g,
                         bool count_include_pad, const void* x, const void* out, const void* grad_out, void* grad_in);
void max_pool2d_forward(DType dtype, Layout layout, int64_t channels, const Pool2dGeometry& g, const void* x,
                        void* out);
void max_pool2d_backward(DType dtype, Layout layout, int64_t channels, const Pool2dGeometry& g, const void* x,
                         const void* out, const void* grad_out, void* grad_in);

enum class Activation { Relu, Sigmoid, Tanh };
// y = act(x) over n contiguous elements; grad_x = act'(x) * grad_y, where act' is computed from the
// output y alone (ReLU: y > 0; sigmoid: y (1 - y); tanh: 1 - y^2), as ember's kernels do. cuDNN
// also takes x; a caller that kept only y may pass y for x. Dtypes as for pooling.
void activation_forward(Activation a, DType dtype, int64_t n, const void* x, void* y);
void activation_backward(Activation a, DType dtype, int64_t n, const void* x, const void* y, const void* grad_y,
                         void* grad_x);

}  // namespace ember::kernels::gpu::cudnn
