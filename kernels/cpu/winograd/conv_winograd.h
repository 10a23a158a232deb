#pragma once
// Winograd F(2x2, 3x3) convolution on the CPU, f32 and bf16, NCHW (Note [Winograd convolution] in
// conv_winograd.cpp). conv.cpp sends a convolution here when winograd_applies() says so — 3x3,
// stride 1, no dilation, one group, padding at most 2, enough channels on both sides — for the
// forward pass and both gradients; every other convolution (and f64) stays im2col + GEMM.
// The direct references in conv.h are what the tests hold both paths to.

#include <cstdint>
#include <string>

#include "../../../core/dtype.h"
#include "../../conv.h"

namespace ember::kernels::cpu {

// automatic: Winograd where it applies and pays (Note [When bf16 Winograd pays] in
// conv_winograd.cpp), im2col + GEMM elsewhere; winograd: wherever it applies; im2col: never.
enum class Conv3x3Path { automatic, winograd, im2col };

// The path that f32 and bf16 3x3 convolutions take: automatic unless the environment says
// EMBER_CPU_CONV=winograd or EMBER_CPU_CONV=im2col. set_conv3x3_path chooses it for the whole
// process (tests and benchmarks compare them); not thread-safe with convolutions in flight.
Conv3x3Path conv3x3_path();
void set_conv3x3_path(Conv3x3Path path);
// "winograd F(2x2,3x3)", "im2col + GEMM", or for automatic "winograd F(2x2,3x3) where it pays".
const char* conv3x3_path_name(Conv3x3Path path);
// What `ember info` and the benchmarks print: the path, and for winograd the transforms' loops
// and the cases it covers, e.g. "winograd F(2x2,3x3) (AVX-512 transforms; f32 and bf16, stride 1, >= 16
// channels; bf16 products on bf16 pairs (VDPBF16PS); im2col + GEMM otherwise)".
std::string conv3x3_description();

// Whether this geometry's forward pass and weight gradient (backward_data = false) or input
// gradient (true) run on the Winograd path under the current conv3x3_path(), for float32 data or,
// with bf16 = true, bfloat16 data (whose products can make im2col the faster path: Note [When
// bf16 Winograd pays] in conv_winograd.cpp).
bool winograd_applies(const Conv2dGeometry& g, bool backward_data, bool bf16 = false);

// How many convolutions (forward or input gradient) ran on the Winograd path so far: lets a test
// prove which path ran.
int64_t winograd_convolutions();

// The transforms run AVX-512 loops where the CPU has AVX-512F, portable loops elsewhere; both give
// the same bits. set_winograd_vectorized(true) returns false, changing nothing, on a CPU without
// AVX-512F (tests run both where they can).
bool winograd_vectorized();
bool set_winograd_vectorized(bool on);
// Whether bf16 convolutions run step 2's products (forward and input gradient) on bf16 pairs
// with VDPBF16PS, f32 accumulation (Note [bf16 Winograd products] in conv_winograd.cpp): by
// default where the bf16 GEMM takes its avx512_bf16 path and EMBER_CPU_WINOGRAD_BF16 is not off.
// set_winograd_bf16_products chooses for the whole process; it returns false, changing nothing,
// when asked for bf16 products on a CPU without AVX512_BF16. Not thread-safe with convolutions in flight.
bool winograd_bf16_products();
bool set_winograd_bf16_products(bool on);

// f32, and bf16 read and written as bf16: computed in float32 exactly as f32 is (widening is
// exact), each result rounded to bf16 once at the end (the contract of Note [bf16 convolutions]),
// or, with winograd_bf16_products(), with the transformed tiles rounded to bf16 pairs for
// VDPBF16PS (Note [bf16 Winograd products]).
//
// y (n, c_out, out_h, out_w) = conv2d(x, w) + bias (bias may be null), for a geometry that
// winograd_applies(g, false).
void winograd_forward(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y);
void winograd_forward(const Conv2dGeometry& g, const BFloat16* x, const BFloat16* w, const BFloat16* bias,
                      BFloat16* y);
// gx (n, c_in, h, w) = the gradient of the input, for a geometry that winograd_applies(g, true).
void winograd_backward_data(const Conv2dGeometry& g, const float* gy, const float* w, float* gx);
void winograd_backward_data(const Conv2dGeometry& g, const BFloat16* gy, const BFloat16* w, BFloat16* gx);
// gw (c_out, c_in, 3, 3) = the gradient of the weights (overwritten), for a geometry that
// winograd_applies(g): the products in the transformed space, transformed back per filter.
void winograd_backward_weight(const Conv2dGeometry& g, const float* gy, const float* x, float* gw);
void winograd_backward_weight(const Conv2dGeometry& g, const BFloat16* gy, const BFloat16* x, BFloat16* gw);

}  // namespace ember::kernels::cpu
