#pragma once
// Winograd F(2x2, 3x3) convolution on the CPU, f32 and bf16, NCHW (Note [Winograd convolution] in
// conv_winograd.cpp). conv.cpp sends a convolution pass here when run_conv_pass (conv3x3_choice.h)
// chooses it — 3x3, stride 1, no dilation, one group, padding at most 2, enough channels on both
// sides, and faster than im2col; every other convolution (and f64) stays im2col + GEMM.
// The direct references in conv.h are what the tests hold both paths to.

#include <cstdint>
#include <string>

#include "../../../core/dtype.h"
#include "../../conv.h"
#include "conv3x3_choice.h"

namespace ember::kernels::cpu {

// How many convolutions (forward or input gradient) ran on the Winograd path so far: lets a test
// prove which path ran.
int64_t winograd_convolutions();

// The transforms run AVX-512 loops where the CPU has AVX-512F, portable loops elsewhere; both give
// the same bits. set_winograd_vectorized(true) returns false, changing nothing, on a CPU without
// AVX-512F (tests run both where they can).
bool winograd_vectorized();
bool set_winograd_vectorized(bool on);
// Whether bf16 convolutions may run step 2's products on bf16 pairs, f32 accumulation (Note [bf16
// Winograd products] in conv_winograd.cpp): on AMX tiles where amx_tiles() is not off, else
// VDPBF16PS. By default where the CPU has AVX512_BF16 (the pair layouts use it), the bf16 GEMM
// is not forced onto the f32 fallback and EMBER_CPU_WINOGRAD_BF16 is not off.
// set_winograd_bf16_products chooses for the whole process; it returns false, changing nothing,
// when asked for bf16 products on a CPU without AVX512_BF16. Not thread-safe with convolutions in flight.
bool winograd_bf16_products();
bool set_winograd_bf16_products(bool on);
// bf16_pairs where winograd_bf16_products(), else f32_planes.
WinogradProducts winograd_default_products();

// f32, and bf16 read and written as bf16: with f32_planes computed in float32 exactly as f32 is
// (widening is exact), each result rounded to bf16 once at the end (the contract of Note [bf16
// convolutions]); with bf16_pairs the transformed tiles rounded to bf16 pairs for the pair
// products (Note [bf16 Winograd products]; only where winograd_bf16_products() can be on).
//
// y (n, c_out, out_h, out_w) = conv2d(x, w) + bias (bias may be null), for a geometry that
// winograd_applies(g).
void winograd_forward(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y);
void winograd_forward(const Conv2dGeometry& g, const BFloat16* x, const BFloat16* w, const BFloat16* bias,
                      BFloat16* y, WinogradProducts products = winograd_default_products());
// gx (n, c_in, h, w) = the gradient of the input.
void winograd_backward_data(const Conv2dGeometry& g, const float* gy, const float* w, float* gx);
void winograd_backward_data(const Conv2dGeometry& g, const BFloat16* gy, const BFloat16* w, BFloat16* gx,
                            WinogradProducts products = winograd_default_products());
// gw (c_out, c_in, 3, 3) = the gradient of the weights (overwritten): the products in the
// transformed space, transformed back per filter.
void winograd_backward_weight(const Conv2dGeometry& g, const float* gy, const float* x, float* gw);
void winograd_backward_weight(const Conv2dGeometry& g, const BFloat16* gy, const BFloat16* x, BFloat16* gw,
                              WinogradProducts products = winograd_default_products());

}  // namespace ember::kernels::cpu
