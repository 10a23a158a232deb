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

// What step 2's pair products run on: the VDPBF16PS register tiles (bf16_dot.h), or AMX tiles
// (amx_pair_product in gemm_bf16_kernels.h, on amx_tiles(): the hardware's or the emulator's).
enum class PairEngine { dot, amx };

// The pair layouts' sizes for one problem (K output channels, C input channels) and engine, and
// where U's pairs lie. dot: U in 8-row slivers, up[xi][s][cp][r] (the words the micro-kernel
// broadcasts); amx: U in rows, up[xi][k][cp] (AMX's A tiles), with the pairs padded to whole
// tiles of 16. Rows past K and pairs past C are zeros.
struct PairLayout {
  PairEngine engine = PairEngine::dot;
  int64_t k_rows = 0;  // K rounded up to 8 rows (dot) or 16 (amx): the rows of M and dU planes
  int64_t c2 = 0;      // channel pairs, (C + 1) / 2
  int64_t steps = 0;   // pairs along the forward sum: c2 (dot), rounded up to 16 (amx)
  int64_t plane_words() const { return k_rows * steps; }  // one plane xi of U's pairs
  int64_t u_at(int64_t xi, int64_t k, int64_t cp) const {
    if (engine == PairEngine::amx) return (xi * k_rows + k) * steps + cp;
    return ((xi * (k_rows / kPairRows) + k / kPairRows) * c2 + cp) * kPairRows + k % kPairRows;
  }
};
PairLayout pair_layout(int64_t K, int64_t C, PairEngine engine);

// The transformed weights u[xi][k][c] (16 planes of K x C floats) rounded to bf16 (BFloat16(float))
// and paired along C in layout L: U's pair (xi, k, cp) = (U[xi][k][2 cp], U[xi][k][2 cp + 1]) at
// L.u_at(xi, k, cp), zeros past K and C.
Scratch<uint32_t> pack_u_pairs(const PairLayout& L, int64_t K, int64_t C, const float* u);

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

// The forward product of one plane: M (L.k_rows x cols, row stride ldm) = U[xi] @ V[xi] on the
// pairs, with up the plane's U pairs (layout L) and vp V's channel pairs (pair_channels: L.steps
// rows of ldv words; the rows past c2 zeros). cols is a multiple of 16.
void pair_product_u(const PairLayout& L, const uint32_t* up, const uint32_t* vp, int64_t ldv, int64_t cols, float* m,
                    int64_t ldm);
// The weight gradient's product of one plane: dU (L.k_rows x cpad, row stride cpad) = (or += with
// add) W @ V^T over np pairs of tiles, with wn W's rows of pairs (pair_tiles: L.k_rows rows of np
// words, the rows past K zeros) and vt V's pairs transposed (pair_tiles_transposed: np rows of
// cpad words). np and cpad are multiples of 16.
void pair_product_w(const PairLayout& L, const uint32_t* wn, int64_t np, const uint32_t* vt, int64_t cpad, float* du,
                    bool add);

}  // namespace ember::kernels::cpu

#endif
