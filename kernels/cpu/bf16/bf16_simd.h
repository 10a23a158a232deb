#pragma once
// The AVX-512 bf16 <-> float and f16 <-> float conversions of 16 lanes that the vectorized CPU loops share
// (bf16_convert.cpp, conv_winograd.cpp) and a 16 x 16 transpose of 32-bit words (the pair packings of
// winograd_pairs.cpp and gemm_amx.cpp), internal to kernels/cpu: Note [Vectorized bf16
// conversion on the CPU] in bf16_convert.h says why they give BFloat16's scalar bits. Callers are
// functions compiled with EMBER_BF16_SIMD_TARGET and run only where cpu_features() reports AVX-512
// F, BW and VL.

#include "../../../core/dtype.h"

#if defined(__x86_64__)
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which its -Wmaybe-uninitialized
// reports (falsely) once they inline into a target("avx512f") function.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define EMBER_BF16_SIMD_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))

namespace ember::kernels::cpu {

// 16 bf16 -> 16 floats: zero-extend to 32 bits, shift into the high half. The lanes outside
// `mask` are not read (and are 0).
EMBER_BF16_SIMD_TARGET inline __m512 widen16(const BFloat16* src, __mmask16 mask = 0xffff) {
  const __m256i h = _mm256_maskz_loadu_epi16(mask, src);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// 16 floats -> their 16 bf16 bit patterns (in the low half of each 32-bit lane, the high half
// 0), the steps of BFloat16::from_float on each lane.
EMBER_BF16_SIMD_TARGET inline __m512i bf16_bits16(__m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i hi = _mm512_srli_epi32(x, 16);
  const __m512i rounding = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1)));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, rounding), 16);
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(hi, _mm512_set1_epi32(0x0040));
  return _mm512_mask_blend_epi32(nan, rounded, quiet);
}

// 16 floats -> 16 bf16; only the lanes in `mask` are stored.
EMBER_BF16_SIMD_TARGET inline void narrow16(__m512 v, BFloat16* dst, __mmask16 mask = 0xffff) {
  _mm512_mask_cvtepi32_storeu_epi16(dst, mask, bf16_bits16(v));
}

// 16 f16 -> 16 floats by VCVTPH2PS, exact like Half::to_float, except that the instruction quiets a
// signalling NaN where the scalar conversion keeps the payload as it is: NaN lanes are rebuilt
// from their bits (sign, all-ones exponent, the 10 payload bits shifted up). The lanes outside
// `mask` are not read (and are 0).
EMBER_BF16_SIMD_TARGET inline __m512 widen16(const Half* src, __mmask16 mask = 0xffff) {
  const __m256i h = _mm256_maskz_loadu_epi16(mask, src);
  const __m512i w = _mm512_cvtepu16_epi32(h);
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(w, _mm512_set1_epi32(0x7fff)), _mm512_set1_epi32(0x7c00));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x8000)), 16);
  const __m512i payload = _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x3ff)), 13);
  const __m512i nan_bits = _mm512_or_si512(_mm512_or_si512(sign, _mm512_set1_epi32(0x7f800000)), payload);
  return _mm512_mask_blend_ps(nan, _mm512_cvtph_ps(h), _mm512_castsi512_ps(nan_bits));
}

// 16 floats -> 16 f16 by VCVTPS2PH, rounding to nearest even like Half::from_float (subnormal
// results, overflow to infinity), except NaN: the scalar conversion gives sign | 0x7e00, the
// instruction keeps payload bits, so NaN lanes are replaced. Only the lanes in `mask` are stored.
EMBER_BF16_SIMD_TARGET inline void narrow16(__m512 v, Half* dst, __mmask16 mask = 0xffff) {
  const __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  const __m256i sign = _mm512_cvtepi32_epi16(_mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(v), 16),
                                                              _mm512_set1_epi32(0x8000)));
  const __m256i canonical = _mm256_or_si256(sign, _mm256_set1_epi16(0x7e00));
  _mm256_mask_storeu_epi16(dst, mask, _mm256_mask_blend_epi16(nan, h, canonical));
}

// A 16 x 16 transpose of 32-bit elements: r[i] row i in, column i out.
EMBER_BF16_SIMD_TARGET inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {  // within 128-bit lanes: (a0 b0 a1 b1), (a2 b2 a3 b3) of rows 2i, 2i + 1
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // r[4i + j], lane L: rows 4i..4i+3 of column 4L + j
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  __m512i u[16];
  for (int j = 0; j < 4; ++j) {  // column 4L + j = lane L of r[j], r[4 + j], r[8 + j], r[12 + j]
    const __m512i x0 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x88), y0 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xdd);
    const __m512i x1 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x88);
    const __m512i y1 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xdd);
    u[j] = _mm512_shuffle_i32x4(x0, x1, 0x88);
    u[8 + j] = _mm512_shuffle_i32x4(x0, x1, 0xdd);
    u[4 + j] = _mm512_shuffle_i32x4(y0, y1, 0x88);
    u[12 + j] = _mm512_shuffle_i32x4(y0, y1, 0xdd);
  }
  for (int i = 0; i < 16; ++i) r[i] = u[i];
}

}  // namespace ember::kernels::cpu
#endif
