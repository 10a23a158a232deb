#pragma once
// The bf16 pair layouts that the Winograd convolution's bf16 products run on (Note [bf16 Winograd
// products] in conv_winograd.cpp), internal to kernels/cpu: each 32-bit word holds two bf16
// values that lie next to each other along a product's sum, which is what VDPBF16PS multiplies
// (bf16_dot.h). x86-64 only; callers run them only where cpu_features() reports AVX512_BF16.
// A plane holds rows of `ld` elements, one row per channel, one column per tile.

#include <cstdint>

#if defined(__x86_64__)
#define EMBER_WINOGRAD_PAIRS 1
#else
#define EMBER_WINOGRAD_PAIRS 0
#endif

#if EMBER_WINOGRAD_PAIRS

#include "../bf16/bf16_dot.h"
#include "../scratch.h"

namespace ember::kernels::cpu {

constexpr int64_t kPairRows = kDotRows;  // rows of a product per micro-tile: one broadcast pair each

// K rounded up to a whole number of micro-tile rows.
int64_t pair_rows_padded(int64_t K);

// The transformed weights u[xi][k][c] (16 planes of K x C floats) as the micro-kernel broadcasts
// them: up[xi][s][cp][r] = (U[xi][8 s + r][2 cp], U[xi][8 s + r][2 cp + 1]) rounded to bf16
// (BFloat16(float)), zeros past K and C.
Scratch<uint32_t> pack_u_pairs(int64_t K, int64_t C, const float* u);

// Forward and input gradient (the sum over channels). One plane of V (C rows, `cols` columns used,
// a multiple of 16 and at most ld) as channel pairs: vp[cp * ld + q] = (V[2 cp][q], V[2 cp + 1][q]),
// rounded by VCVTNE2PS2BF16 (to nearest even, float32 denormals to zero); no partner: 0.
EMBER_BF16_DOT_TARGET void pair_channels(const float* v, int64_t C, int64_t ld, int64_t cols, uint32_t* vp);

// Weight gradient (the sum over tiles). One plane of W (K rows, `count` tiles) in tile order:
// wn[k * np + qp] = (W[k][2 qp], W[k][2 qp + 1]), zeros past count; np pairs per row, a multiple of 16.
EMBER_BF16_DOT_TARGET void pair_tiles(const float* w, int64_t K, int64_t ld, int64_t count, int64_t np, uint32_t* wn);
// One plane of V (C rows, `count` tiles) transposed into pairs of tiles: vt[qp * cpad + c] =
// (V[c][2 qp], V[c][2 qp + 1]), zeros past count and C; cpad and np multiples of 16.
EMBER_BF16_DOT_TARGET void pair_tiles_transposed(const float* v, int64_t C, int64_t ld, int64_t count, int64_t np,
                                                 int64_t cpad, uint32_t* vt);

// C (slivers of 8 rows, `cols` columns, a multiple of 16, row stride ldc) = (or += with add) the
// sum over `steps` pairs of A's pairs times B's (bp[p * ldb + column]), on the bf16 GEMM's
// micro-kernel: one sliver of A against 48 columns of B at a time, the last 16 or 32 after them
// (the sliver's pairs stay in L1 while B's columns pass; each sliver of A is read once). Sliver s
// of A starts at ap + s * sliver_stride; within it the pair of row r and step p is
// ap[p * 8 + r] (packed: pack_u_pairs) or ap[r * lda + p] (rows as they lie: pair_tiles).
void pair_product_packed(int64_t slivers, int64_t steps, const uint32_t* ap, int64_t sliver_stride, int64_t lda,
                         const uint32_t* bp, int64_t ldb, int64_t cols, float* c, int64_t ldc, bool add);
void pair_product_rows(int64_t slivers, int64_t steps, const uint32_t* ap, int64_t sliver_stride, int64_t lda,
                       const uint32_t* bp, int64_t ldb, int64_t cols, float* c, int64_t ldc, bool add);

}  // namespace ember::kernels::cpu

#endif
