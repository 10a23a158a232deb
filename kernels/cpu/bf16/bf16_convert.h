#pragma once
// bf16 <-> f32 and f16 <-> f32 conversion of contiguous arrays, and the contiguous ReLU loops of
// bf16 and f16 (built on them) and f32 (internal to kernels/cpu).
//
// Note [Vectorized bf16 conversion on the CPU]
// Widening a bf16 is a 16-bit shift; narrowing rounds to nearest even exactly as
// BFloat16::from_float (core/dtype.h) does: add 0x7fff plus the lowest kept bit, keep the top 16
// bits, and a NaN keeps its top bits with the quiet bit (0x0040) set. The AVX-512 path (F, BW and
// VL, compiled per function with __attribute__((target)) and chosen at run time from
// cpu_features(); never required of the whole build) does the same integer steps on 16 lanes at
// once (a masked load and store for the last, partial 16), so its
// results equal the scalar conversion's bit for bit on every input — ties, subnormals, infinities,
// NaN payloads included. It does not use VCVTNEPS2BF16 (AVX512_BF16): that instruction treats
// subnormal inputs as zero, which the scalar conversion does not. f16 (Half::from_float and
// to_float) takes VCVTPS2PH / VCVTPH2PS (AVX-512F), which round to nearest even and handle
// subnormals and infinities exactly as the scalar code does; only NaN differs (the instructions
// keep payload bits and quiet a signalling NaN, the scalar code gives sign | 0x7e00 on narrowing and
// keeps the payload as it is on widening), so the NaN lanes are rebuilt from their bits.
// Other CPUs run the scalar loops.
// The ReLU loops compute what the generic elementwise loop computes for bf16 and f16 — widen, the f32
// functor (ops::Relu in kernels/elementwise.h), one rounding — 16 elements at a time; the f32 ReLU
// loops the functor itself with a compare mask (x <= 0 gives +0, NaN passes; y > 0 keeps g).

#include <cstdint>

#include "../../../core/dtype.h"

namespace ember::kernels::cpu {

// Whether the AVX-512 conversion paths (bf16 and f16) run on this CPU (AVX-512 F, BW and VL
// present, and not switched off by EMBER_CPU_BF16_CONVERT=scalar, read once).
bool bf16_convert_vectorized();

// n contiguous elements; src and dst do not overlap (relu_bf16 may run in place: y == x).
void bf16_to_f32(const BFloat16* src, float* dst, int64_t n);
void f32_to_bf16(const float* src, BFloat16* dst, int64_t n);
// y = bf16(relu(float(x))): the elementwise unary Relu.
void relu_bf16(const BFloat16* x, BFloat16* y, int64_t n);
// gi = bf16(y > 0 ? float(g) : 0): the elementwise unary Relu's backward (it reads y only).
void relu_backward_bf16(const BFloat16* g, const BFloat16* y, BFloat16* gi, int64_t n);
// The same four for f16 (IEEE binary16).
void f16_to_f32(const Half* src, float* dst, int64_t n);
void f32_to_f16(const float* src, Half* dst, int64_t n);
void relu_f16(const Half* x, Half* y, int64_t n);
void relu_backward_f16(const Half* g, const Half* y, Half* gi, int64_t n);
// By type, for code templated on the 16-bit type.
inline void to_f32(const BFloat16* src, float* dst, int64_t n) { bf16_to_f32(src, dst, n); }
inline void to_f32(const Half* src, float* dst, int64_t n) { f16_to_f32(src, dst, n); }
inline void from_f32(const float* src, BFloat16* dst, int64_t n) { f32_to_bf16(src, dst, n); }
inline void from_f32(const float* src, Half* dst, int64_t n) { f32_to_f16(src, dst, n); }
// The same two in f32 (the AVX-512 path needs only AVX-512F; the scalar loops vectorize as the
// build's baseline allows).
void relu_f32(const float* x, float* y, int64_t n);
void relu_backward_f32(const float* g, const float* y, float* gi, int64_t n);

// The scalar loops (what every path must equal; the tests compare against them).
void bf16_to_f32_scalar(const BFloat16* src, float* dst, int64_t n);
void f32_to_bf16_scalar(const float* src, BFloat16* dst, int64_t n);
void relu_bf16_scalar(const BFloat16* x, BFloat16* y, int64_t n);
void relu_backward_bf16_scalar(const BFloat16* g, const BFloat16* y, BFloat16* gi, int64_t n);
void f16_to_f32_scalar(const Half* src, float* dst, int64_t n);
void f32_to_f16_scalar(const float* src, Half* dst, int64_t n);
void relu_f16_scalar(const Half* x, Half* y, int64_t n);
void relu_backward_f16_scalar(const Half* g, const Half* y, Half* gi, int64_t n);
void relu_f32_scalar(const float* x, float* y, int64_t n);
void relu_backward_f32_scalar(const float* g, const float* y, float* gi, int64_t n);

}  // namespace ember::kernels::cpu
