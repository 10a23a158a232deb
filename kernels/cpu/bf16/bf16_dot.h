#pragma once
// The VDPBF16PS micro-kernel that the CPU's bf16 products share — the bf16 GEMM (gemm_bf16.cpp)
// and the Winograd convolution's bf16 products (conv_winograd.cpp) — internal to kernels/cpu.
// Note [bf16 GEMM on the CPU] in gemm_bf16.cpp explains the instruction, the pairs along the sum
// and the register blocking. Callers run it only where cpu_features() reports AVX512_BF16 (with
// AVX-512 F, BW and VL).

#include <cstdint>

#include "../../../core/dtype.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define EMBER_BF16_DOT_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace ember::kernels::cpu {

constexpr int kDotRows = 8;  // rows of C per tile: one broadcast pair each

// C (kDotRows rows by 16 NV columns, row stride ldc) = alpha * sum over `steps` pairs p of
// a(r, p) . b(p, columns), or C += that with `add`. Each 32-bit word is a pair of bf16 values
// along the sum; a VDPBF16PS multiplies a broadcast pair of A with 16 pairs of B into 16 f32
// accumulators. b(p, ...) are the 16 NV words at bp + p * ldb. a(r, p) is ap[p * kDotRows + r]
// (kPackedA: slivers packed for the kernel) or ap[r * lda + p] (rows of pairs as they lie).
template <int NV, bool kPackedA>
EMBER_BF16_DOT_TARGET inline void bf16_dot_tile(int64_t steps, const uint32_t* ap, int64_t lda, const uint32_t* bp,
                                                int64_t ldb, float alpha, float* c, int64_t ldc, bool add) {
  __m512 acc[kDotRows][NV];
#pragma GCC unroll 8
  for (int r = 0; r < kDotRows; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) {
      acc[r][v] = _mm512_setzero_ps();
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + 16 * v), _MM_HINT_T0);
    }
  for (int64_t p = 0; p < steps; ++p) {
    __m512bh b[NV];
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) b[v] = (__m512bh)_mm512_loadu_si512(bp + p * ldb + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < kDotRows; ++r) {
      const uint32_t pair = kPackedA ? ap[p * kDotRows + r] : ap[r * lda + p];
      const __m512bh a = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, b[v]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < kDotRows; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) {
      float* cv = c + r * ldc + 16 * v;
      __m512 x = _mm512_mul_ps(acc[r][v], va);
      if (add) x = _mm512_add_ps(x, _mm512_loadu_ps(cv));
      _mm512_storeu_ps(cv, x);
    }
}

// Packs one sliver of W lines (W = 8: rows of A for bf16_dot_tile's kPackedA; 48: columns of B)
// into pairs along the sum: dst[kp * W + x] = (E(x, p0 + 2kp), E(x, p0 + 2kp + 1)) for x < xw
// and 2kp < kc, zeros elsewhere (lines past xw, the odd kc's missing partner). E(x, p) is
// src[x * ld + p] when the sum runs along the lines (k_contig), src[p * ld + x] otherwise. W is a
// multiple of 8. Defined in gemm_bf16.cpp; the Winograd path packs its weights with it too.
EMBER_BF16_DOT_TARGET void pack_pair_sliver(const BFloat16* src, int64_t ld, bool k_contig, int64_t xw, int64_t W,
                                            int64_t p0, int64_t kc, uint32_t* dst);

}  // namespace ember::kernels::cpu

#endif
