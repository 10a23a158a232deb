// The bf16 pair layouts of the Winograd convolution's products (winograd_pairs.h; Note [bf16
// Winograd products] in conv_winograd.cpp).

#include "winograd_pairs.h"

#if EMBER_WINOGRAD_PAIRS

#include <algorithm>

#include "../../../core/dtype.h"
#include "../bf16/bf16_convert.h"
#include "../bf16/bf16_simd.h"
#include "../bf16/gemm_bf16_kernels.h"
#include "../../../core/cpu/parallel.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which its -Wmaybe-uninitialized
// reports (falsely) once they inline into a target("avx512f") function (as in bf16_simd.h).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace ember::kernels::cpu {

namespace {

// 32 floats (lo: the first 16) -> 32 bf16 in order, as VCVTNE2PS2BF16 rounds: to nearest even,
// float32 denormals to zero (the planes' one rounding, Note [bf16 Winograd products]).
EMBER_BF16_DOT_TARGET inline __m512i bf16x32(__m512 lo, __m512 hi) { return (__m512i)_mm512_cvtne2ps_pbh(hi, lo); }

// The first n lanes of 16 (none for n <= 0, all for n >= 16).
inline __mmask16 first_lanes(int64_t n) {
  return n <= 0 ? 0 : n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}

// C (slivers of 8 rows, `cols` columns, a multiple of 16, row stride ldc) = (or += with add) the
// sum over `steps` pairs of A's pairs times B's (bp[p * ldb + column]), on the bf16 GEMM's
// micro-kernel: one sliver of A against 48 columns of B at a time, the last 16 or 32 after them
// (the sliver's pairs stay in L1 while B's columns pass; each sliver of A is read once). Sliver s
// of A starts at ap + s * sliver_stride; within it the pair of row r and step p is
// ap[p * 8 + r] (kPackedA: pack_u_pairs) or ap[r * lda + p] (rows as they lie: pair_tiles).
template <bool kPackedA>
EMBER_BF16_DOT_TARGET void pair_product(int64_t slivers, int64_t steps, const uint32_t* ap, int64_t sliver_stride,
                                        int64_t lda, const uint32_t* bp, int64_t ldb, int64_t cols, float* c,
                                        int64_t ldc, bool add) {
  for (int64_t s = 0; s < slivers; ++s) {
    const uint32_t* a = ap + s * sliver_stride;
    for (int64_t j = 0; j < cols; j += 48) {
      const int64_t nv = std::min<int64_t>(3, (cols - j) / 16);
      float* cs = c + s * kPairRows * ldc + j;
      if (nv == 3)
        bf16_dot_tile<3, kPackedA>(steps, a, lda, bp + j, ldb, 1.0f, cs, ldc, add);
      else if (nv == 2)
        bf16_dot_tile<2, kPackedA>(steps, a, lda, bp + j, ldb, 1.0f, cs, ldc, add);
      else
        bf16_dot_tile<1, kPackedA>(steps, a, lda, bp + j, ldb, 1.0f, cs, ldc, add);
    }
  }
}

}  // namespace

PairLayout pair_layout(int64_t K, int64_t C, PairEngine engine) {
  const int64_t rows = engine == PairEngine::amx ? 16 : kPairRows, c2 = (C + 1) / 2;
  return {engine, (K + rows - 1) / rows * rows, c2, engine == PairEngine::amx ? (c2 + 15) / 16 * 16 : c2};
}

Scratch<uint32_t> pack_u_pairs(const PairLayout& L, int64_t K, int64_t C, const float* u) {
  Scratch<uint32_t> up = scratch<uint32_t>(16 * L.plane_words());
  Scratch<BFloat16> ub = scratch<BFloat16>(16 * K * C);
  // The 16 planes are independent: one task each (the same words for any thread count). A plane
  // is rounded to bf16 16 values at a time (BFloat16(float)'s bits), then paired: into 8-row
  // slivers of channel pairs as the bf16 GEMM packs its A (pack_pair_sliver, zeros past K and C),
  // or into rows.
  parallel_for(0, 16, 1, [&](int64_t x0, int64_t x1) {
    for (int64_t xi = x0; xi < x1; ++xi) {
      const BFloat16* plane = ub.get() + xi * K * C;
      f32_to_bf16(u + xi * K * C, ub.get() + xi * K * C, K * C);
      if (L.engine == PairEngine::dot) {
        for (int64_t s = 0; s < L.k_rows / kPairRows; ++s)
          pack_pair_sliver(plane + s * kPairRows * C, C, true, std::min(kPairRows, K - s * kPairRows), kPairRows, 0,
                           C, up.get() + L.u_at(xi, s * kPairRows, 0));
        continue;
      }
      for (int64_t k = 0; k < L.k_rows; ++k)
        for (int64_t cp = 0; cp < L.steps; ++cp) {
          const uint32_t lo = k < K && 2 * cp < C ? plane[k * C + 2 * cp].bits : 0;
          const uint32_t hi = k < K && 2 * cp + 1 < C ? plane[k * C + 2 * cp + 1].bits : 0;
          up[L.u_at(xi, k, cp)] = lo | hi << 16;
        }
    }
  });
  return up;
}

EMBER_BF16_DOT_TARGET void pair_channels(const float* v, int64_t C, int64_t ld, int64_t cols, uint32_t* vp) {
  // bf16x32(row 2cp, row 2cp + 1) holds the two rows' 16 values one after the other; this
  // interleaves them into 16 pairs.
  const __m512i interleave = _mm512_setr_epi32(0x00100000, 0x00110001, 0x00120002, 0x00130003, 0x00140004, 0x00150005,
                                               0x00160006, 0x00170007, 0x00180008, 0x00190009, 0x001a000a, 0x001b000b,
                                               0x001c000c, 0x001d000d, 0x001e000e, 0x001f000f);
  for (int64_t cp = 0; cp < (C + 1) / 2; ++cp) {
    const float* r0 = v + 2 * cp * ld;
    const bool odd_last = 2 * cp + 1 == C;  // no partner: the high halves are 0
    for (int64_t j = 0; j < cols; j += 16) {
      const __m512 hi = odd_last ? _mm512_setzero_ps() : _mm512_loadu_ps(r0 + ld + j);
      _mm512_storeu_si512(vp + cp * ld + j, _mm512_permutexvar_epi16(interleave, bf16x32(_mm512_loadu_ps(r0 + j), hi)));
    }
  }
}

EMBER_BF16_DOT_TARGET void pair_tiles(const float* w, int64_t K, int64_t ld, int64_t count, int64_t np, uint32_t* wn) {
  for (int64_t k = 0; k < K; ++k)
    for (int64_t q = 0; q < 2 * np; q += 32) {
      const __m512 lo = _mm512_maskz_loadu_ps(first_lanes(count - q), w + k * ld + q);
      const __m512 hi = _mm512_maskz_loadu_ps(first_lanes(count - q - 16), w + k * ld + q + 16);
      _mm512_storeu_si512(wn + k * np + q / 2, bf16x32(lo, hi));
    }
}

EMBER_BF16_DOT_TARGET void pair_tiles_transposed(const float* v, int64_t C, int64_t ld, int64_t count, int64_t np,
                                             int64_t cpad, uint32_t* vt) {
  for (int64_t c0 = 0; c0 < cpad; c0 += 16)
    for (int64_t q = 0; q < 2 * np; q += 32) {
      const __mmask16 m_lo = first_lanes(count - q), m_hi = first_lanes(count - q - 16);
      __m512i r[16];
      for (int i = 0; i < 16; ++i) {
        const float* row = v + (c0 + i) * ld + q;
        r[i] = c0 + i < C ? bf16x32(_mm512_maskz_loadu_ps(m_lo, row), _mm512_maskz_loadu_ps(m_hi, row + 16))
                          : _mm512_setzero_si512();
      }
      transpose16(r);
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(vt + (q / 2 + i) * cpad + c0, r[i]);
    }
}

void pair_product_u(const PairLayout& L, const uint32_t* up, const uint32_t* vp, int64_t ldv, int64_t cols, float* m,
                    int64_t ldm) {
  if (L.engine == PairEngine::amx)
    return amx_pair_product(amx_tiles(), L.k_rows, cols, L.steps, up, L.steps, vp, ldv, m, ldm, false);
  pair_product<true>(L.k_rows / kPairRows, L.c2, up, L.c2 * kPairRows, 0, vp, ldv, cols, m, ldm, false);
}

void pair_product_w(const PairLayout& L, const uint32_t* wn, int64_t np, const uint32_t* vt, int64_t cpad, float* du,
                    bool add) {
  if (L.engine == PairEngine::amx) return amx_pair_product(amx_tiles(), L.k_rows, cpad, np, wn, np, vt, cpad, du, cpad, add);
  pair_product<false>(L.k_rows / kPairRows, np, wn, kPairRows * np, np, vt, cpad, cpad, du, cpad, add);
}

}  // namespace ember::kernels::cpu

#endif
