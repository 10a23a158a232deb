// The AMX bf16 GEMM (amx_product and amx_pair_product in gemm_bf16_kernels.h).
//
// Note [bf16 GEMM on AMX tiles]
// The same Goto/BLIS structure as the VDPBF16PS kernel (Note [bf16 GEMM on the CPU] in
// gemm_bf16.cpp), with AMX tiles as the micro-kernel (Note [AMX tiles and their emulator]):
//
//   Micro-tile: C is 32 x 32 floats in four accumulator tiles (0..3: rows 0-15 / 16-31 by
//     columns 0-15 / 16-31), with two A tiles (4, 5: 16 rows by 32 k) and two B tiles (6, 7: 16
//     k-pairs by 16 columns). Each step along k (32 values, 16 pairs) loads the four operand tiles
//     and runs four TDPBF16PS: each operand tile serves two products, 4 KB loaded per 32768
//     multiply-adds. One tile configuration serves every shape — all eight tiles 16 rows of 64
//     bytes — because packing pads each operand to whole tiles with zeros: a 17 x 33 product
//     runs on whole tiles, and only the C values inside the product are written. A last row or
//     column of tiles with 16 or fewer lines runs on one A (or B) tile and two accumulators.
//   Packed A (kMC rows by kc of op(A)): slivers of 16 rows; in a sliver, k block kb is one 1 KB
//     tile, row r's 32 values (16 pairs) at words [(kb 16 + r) 16, +16). Where op(A) has k along
//     its rows (A not transposed) that is a copy of 64 bytes per row and block; transposed, 16
//     pairs of lines are built as VDPBF16PS's B slivers are (pack_pair_sliver's lane layout) and
//     turned by a 16 x 16 transpose of 32-bit words.
//   Packed B (kc by kNC of op(B)): slivers of 16 columns; k-pair kp of column j is word
//     [kp 16 + j] — pack_pair_sliver with W = 16 — so k block kb is again one contiguous 1 KB
//     tile, rows past kc zero.
//   C: a whole 32 x 32 block with alpha = 1 is loaded into the accumulators (or zeroed, the first
//     k block with beta = 0), multiplied into and stored back: the sum of each k block is added to
//     C inside the tiles, by TDPBF16PS's own rounding. An edge block (fewer rows or columns) or
//     alpha != 1 runs into a local 32 x 32 tile from zero, and alpha times it is added to (or
//     stored in) the valid part of C. beta other than 0 and 1 scales C first, as the VDPBF16PS
//     kernel does.
//
// Blocking (jc over n by kNC, pc over k by kc, ic over m by kMC, jr by 32, ir by 32):
//   kc: k in equal blocks of at most kKC = 256, each rounded up to whole tiles of 32 (k = 392 is
//     224 + 168: 13 tile steps, as few as 392 needs); a micro-tile's two B slivers are then 16 KB,
//     which stay in L1 (48 KB on Sapphire Rapids) while the A slivers of an ic block stream past
//     from L2 (2 MB per core).
//   kMC = 128 rows: a packed A block of 64 KB; kNC = 2048 columns: a packed B block of 1 MB.
// The tile configuration is loaded once per call and the tiles released at its end (TILERELEASE
// returns the thread's tile state to its initial, unsaved state).
//
// Packing on hardware tiles uses AVX-512 (every CPU with AMX has it: 64-byte masked loads for A's
// rows, pack_pair_sliver for B, transpose16 for a transposed A); on the emulator it is plain C++
// (it runs on any CPU), and the tests compare the two bit for bit where there is AMX.

#include "gemm_bf16_kernels.h"

#include <algorithm>
#include <type_traits>

#include "../../../core/error.h"

#if defined(__x86_64__)
#include "bf16_dot.h"
#include "bf16_simd.h"
#endif

namespace ember::kernels::cpu {

namespace {

constexpr int64_t kKC = 256;   // k per packed block, at most (a multiple of 32)
constexpr int64_t kMC = 128;   // rows of op(A) per packed block (a multiple of 32)
constexpr int64_t kNC = 2048;  // columns of op(B) per packed block (a multiple of 32)
constexpr int64_t kTileK = 32;               // k per tile step
constexpr int64_t kTileWordsAll = 16 * 16;   // 32-bit words in one 16 x 64-byte tile

// Every tile 16 rows of 64 bytes.
TileConfig full_tiles() {
  TileConfig config;
  for (TileShape& t : config.tile) t = {kTileRows, kTileRowBytes};
  return config;
}

// Where a micro-tile's operand tiles lie: tile (second, kb) at base + second * `second` + kb *
// `step` words, its rows `stride` bytes apart.
struct TileWalk {
  const uint32_t* base;
  int64_t second, step, stride;
};

// C (16 MT x 16 NT floats, row stride ldc) = (with load_c: C +) the sum over kbs k blocks.
// Accumulators 0..3 are (mt, nt) -> 2 mt + nt; A tiles 4, 5; B tiles 6, 7.
template <class Tiles, int MT, int NT>
void micro_kernel(int64_t kbs, TileWalk a, TileWalk b, float* c, int64_t ldc, bool load_c) {
  // Scalars in registers: the tile instructions' "memory" clobbers would reload struct fields.
  const uint32_t *a0 = a.base, *a1 = a.base + a.second, *b0 = b.base, *b1 = b.base + b.second;
  const int64_t as = a.stride, bs = b.stride, a_step = a.step, b_step = b.step;
  const int64_t cs = ldc * static_cast<int64_t>(sizeof(float));
  float* c1 = c + 16;
  float* c2 = c + 16 * ldc;
  float* c3 = c2 + 16;
  if (load_c) {
    Tiles::template load<0>(c, cs);
    if constexpr (NT == 2) Tiles::template load<1>(c1, cs);
    if constexpr (MT == 2) Tiles::template load<2>(c2, cs);
    if constexpr (MT == 2 && NT == 2) Tiles::template load<3>(c3, cs);
  } else {
    Tiles::template zero<0>();
    if constexpr (NT == 2) Tiles::template zero<1>();
    if constexpr (MT == 2) Tiles::template zero<2>();
    if constexpr (MT == 2 && NT == 2) Tiles::template zero<3>();
  }
  for (int64_t kb = 0; kb < kbs; ++kb) {
    Tiles::template load<4>(a0 + kb * a_step, as);
    Tiles::template load<6>(b0 + kb * b_step, bs);
    Tiles::template dot<0, 4, 6>();
    if constexpr (NT == 2) {
      Tiles::template load<7>(b1 + kb * b_step, bs);
      Tiles::template dot<1, 4, 7>();
    }
    if constexpr (MT == 2) {
      Tiles::template load<5>(a1 + kb * a_step, as);
      Tiles::template dot<2, 5, 6>();
      if constexpr (NT == 2) Tiles::template dot<3, 5, 7>();
    }
  }
  Tiles::template store<0>(c, cs);
  if constexpr (NT == 2) Tiles::template store<1>(c1, cs);
  if constexpr (MT == 2) Tiles::template store<2>(c2, cs);
  if constexpr (MT == 2 && NT == 2) Tiles::template store<3>(c3, cs);
}

// The micro-kernel for `rows` (1..32) and `cols` (1..32) of C: one or two tiles each way.
template <class Tiles>
void micro_any(int64_t rows, int64_t cols, int64_t kbs, const TileWalk& a, const TileWalk& b, float* c, int64_t ldc,
               bool load_c) {
  if (rows > 16) {
    if (cols > 16) return micro_kernel<Tiles, 2, 2>(kbs, a, b, c, ldc, load_c);
    return micro_kernel<Tiles, 2, 1>(kbs, a, b, c, ldc, load_c);
  }
  if (cols > 16) return micro_kernel<Tiles, 1, 2>(kbs, a, b, c, ldc, load_c);
  micro_kernel<Tiles, 1, 1>(kbs, a, b, c, ldc, load_c);
}

// ---- packing -------------------------------------------------------------------------------------

uint32_t pair_of(uint16_t lo, uint16_t hi) { return static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16; }

// Element (i, p) of op(A) and (p, j) of op(B) as bits.
uint16_t a_at(const Bf16Operands& o, int64_t i, int64_t p) {
  return (o.ta == Transpose::No ? o.a[i * o.lda + p] : o.a[p * o.lda + i]).bits;
}
uint16_t b_at(const Bf16Operands& o, int64_t p, int64_t j) {
  return (o.tb == Transpose::No ? o.b[p * o.ldb + j] : o.b[j * o.ldb + p]).bits;
}

// A sliver of op(A): rows [i, i + rows) (rows <= 16), k [p0, p0 + kc), as kbs tiles of 16 rows by
// 16 pairs: dst[(kb 16 + r) 16 + kp] = (A(i + r, p0 + 2 q), A(i + r, p0 + 2 q + 1)), q = kb 16 + kp,
// zero outside the sliver.
void pack_a_plain(const Bf16Operands& o, int64_t i, int64_t rows, int64_t p0, int64_t kc, int64_t kbs, uint32_t* dst) {
  for (int64_t kb = 0; kb < kbs; ++kb)
    for (int64_t r = 0; r < 16; ++r)
      for (int64_t kp = 0; kp < 16; ++kp) {
        const int64_t p = 2 * (kb * 16 + kp);
        const uint16_t lo = r < rows && p < kc ? a_at(o, i + r, p0 + p) : 0;
        const uint16_t hi = r < rows && p + 1 < kc ? a_at(o, i + r, p0 + p + 1) : 0;
        dst[(kb * 16 + r) * 16 + kp] = pair_of(lo, hi);
      }
}

// A sliver of op(B): columns [j, j + cols) (cols <= 16), k [p0, p0 + kc), as pair rows:
// dst[kp 16 + x] = (B(p0 + 2 kp, j + x), B(p0 + 2 kp + 1, j + x)) for kp < 16 kbs, zeros outside.
void pack_b_plain(const Bf16Operands& o, int64_t j, int64_t cols, int64_t p0, int64_t kc, int64_t kbs, uint32_t* dst) {
  for (int64_t kp = 0; kp < 16 * kbs; ++kp)
    for (int64_t x = 0; x < 16; ++x) {
      const int64_t p = 2 * kp;
      const uint16_t lo = x < cols && p < kc ? b_at(o, p0 + p, j + x) : 0;
      const uint16_t hi = x < cols && p + 1 < kc ? b_at(o, p0 + p + 1, j + x) : 0;
      dst[kp * 16 + x] = pair_of(lo, hi);
    }
}

#if EMBER_AMX_TILES
// pack_a_plain with AVX-512. Not transposed: row r of block kb is 32 consecutive bf16 of A's row,
// one masked 64-byte load. Transposed: the 16 pairs of lines (p, p + 1) of block kb hold 16 rows
// each, built as words (VPMOVZXWD, the second line shifted into the high half), then transposed.
EMBER_BF16_DOT_TARGET void pack_a_avx512(const Bf16Operands& o, int64_t i, int64_t rows, int64_t p0, int64_t kc,
                                         int64_t kbs, uint32_t* dst) {
  if (o.ta == Transpose::No) {
    for (int64_t kb = 0; kb < kbs; ++kb) {
      const int64_t left = std::clamp<int64_t>(kc - kb * kTileK, 0, 32);
      const __mmask32 mask = left >= 32 ? ~__mmask32{0} : (__mmask32{1} << left) - 1;
      for (int64_t r = 0; r < 16; ++r) {
        const __m512i v = r < rows ? _mm512_maskz_loadu_epi16(mask, o.a + (i + r) * o.lda + p0 + kb * kTileK)
                                   : _mm512_setzero_si512();
        _mm512_storeu_si512(dst + (kb * 16 + r) * 16, v);
      }
    }
    return;
  }
  const __mmask16 in_rows = static_cast<__mmask16>((1u << rows) - 1u);
  for (int64_t kb = 0; kb < kbs; ++kb) {
    __m512i w[16];
    for (int64_t kp = 0; kp < 16; ++kp) {
      const int64_t p = kb * kTileK + 2 * kp;
      const BFloat16* line = o.a + (p0 + p) * o.lda + i;
      const __m512i lo = p < kc ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(in_rows, line)) : _mm512_setzero_si512();
      const __m512i hi =
          p + 1 < kc ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(in_rows, line + o.lda)) : _mm512_setzero_si512();
      w[kp] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
    }
    transpose16(w);  // w[r]: row r's 16 pairs
    for (int64_t r = 0; r < 16; ++r) _mm512_storeu_si512(dst + (kb * 16 + r) * 16, w[r]);
  }
}

// pack_b_plain with pack_pair_sliver (Note [Packing with AVX-512] in gemm_bf16.cpp), then the
// pair rows past kc zeroed up to the last tile's end.
EMBER_BF16_DOT_TARGET void pack_b_avx512(const Bf16Operands& o, int64_t j, int64_t cols, int64_t p0, int64_t kc,
                                         int64_t kbs, uint32_t* dst) {
  const bool k_contig = o.tb == Transpose::Yes;
  const BFloat16* line = k_contig ? o.b + j * o.ldb : o.b + j;
  pack_pair_sliver(line, o.ldb, k_contig, cols, 16, p0, kc, dst);
  const int64_t kcp = (kc + 1) / 2;
  std::fill(dst + kcp * 16, dst + kbs * kTileWordsAll, 0u);
}
#endif

#if EMBER_AMX_TILES
// The B block's slivers at once where op(B) is not transposed (k along B's rows): pair row kp of
// 32 columns is two full 64-byte loads of B's rows p0 + 2 kp and p0 + 2 kp + 1, interleaved into
// pairs by two VPERMT2W — reading B front to back, row after row (the 16-column slivers one at a
// time read each row in 32-byte halves, far apart: half the time of a conv product went there).
// dst: ceil(nc / 16) slivers of `sliver` words, as pack_b_plain lays each out.
EMBER_BF16_DOT_TARGET void pack_b_rows_avx512(const Bf16Operands& o, int64_t j0, int64_t nc, int64_t p0, int64_t kc,
                                              int64_t kbs, uint32_t* dst, int64_t sliver) {
  alignas(64) uint16_t lo_idx[32], hi_idx[32];
  for (int x = 0; x < 16; ++x) {
    lo_idx[2 * x] = static_cast<uint16_t>(x), lo_idx[2 * x + 1] = static_cast<uint16_t>(32 + x);
    hi_idx[2 * x] = static_cast<uint16_t>(16 + x), hi_idx[2 * x + 1] = static_cast<uint16_t>(48 + x);
  }
  const __m512i lo = _mm512_load_si512(lo_idx), hi = _mm512_load_si512(hi_idx);
  const int64_t slivers = (nc + 15) / 16;
  for (int64_t kp = 0; kp < 16 * kbs; ++kp) {
    const int64_t p = 2 * kp;
    const BFloat16* r0 = p < kc ? o.b + (p0 + p) * o.ldb + j0 : nullptr;
    const BFloat16* r1 = p + 1 < kc ? o.b + (p0 + p + 1) * o.ldb + j0 : nullptr;
    for (int64_t j = 0; j < nc; j += 32) {
      const int64_t left = std::min<int64_t>(32, nc - j);
      const __mmask32 m = left >= 32 ? ~__mmask32{0} : (__mmask32{1} << left) - 1;
      const __m512i a = r0 ? _mm512_maskz_loadu_epi16(m, r0 + j) : _mm512_setzero_si512();
      const __m512i b = r1 ? _mm512_maskz_loadu_epi16(m, r1 + j) : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + (j / 16) * sliver + kp * 16, _mm512_permutex2var_epi16(a, lo, b));
      if (j / 16 + 1 < slivers)
        _mm512_storeu_si512(dst + (j / 16 + 1) * sliver + kp * 16, _mm512_permutex2var_epi16(a, hi, b));
    }
  }
}
#endif

template <class Tiles>
void pack_a(const Bf16Operands& o, int64_t i, int64_t rows, int64_t p0, int64_t kc, int64_t kbs, uint32_t* dst) {
#if EMBER_AMX_TILES
  if constexpr (std::is_same_v<Tiles, HardwareTiles>) return pack_a_avx512(o, i, rows, p0, kc, kbs, dst);
#endif
  pack_a_plain(o, i, rows, p0, kc, kbs, dst);
}

template <class Tiles>
void pack_b(const Bf16Operands& o, int64_t j, int64_t cols, int64_t p0, int64_t kc, int64_t kbs, uint32_t* dst) {
#if EMBER_AMX_TILES
  if constexpr (std::is_same_v<Tiles, HardwareTiles>) return pack_b_avx512(o, j, cols, p0, kc, kbs, dst);
#endif
  pack_b_plain(o, j, cols, p0, kc, kbs, dst);
}

// The packed B block: columns [j0, j0 + nc) of op(B), k [p0, p0 + kc), as ceil(nc / 16) slivers.
template <class Tiles>
void pack_b_block(const Bf16Operands& o, int64_t j0, int64_t nc, int64_t p0, int64_t kc, int64_t kbs, uint32_t* dst) {
  const int64_t sliver = kbs * kTileWordsAll;
#if EMBER_AMX_TILES
  if constexpr (std::is_same_v<Tiles, HardwareTiles>)
    if (o.tb == Transpose::No) return pack_b_rows_avx512(o, j0, nc, p0, kc, kbs, dst, sliver);
#endif
  for (int64_t js = 0; js < nc; js += 16)
    pack_b<Tiles>(o, j0 + js, std::min<int64_t>(16, nc - js), p0, kc, kbs, dst + js / 16 * sliver);
}

// ---- the blocked product ----------------------------------------------------------------------

// One micro-tile of C (rows, cols <= 32) at cp: straight into C when it is whole and alpha is 1,
// else through a local tile.
template <class Tiles>
void c_block(int64_t rows, int64_t cols, int64_t kbs, const TileWalk& a, const TileWalk& b, float alpha,
             bool overwrite, float* cp, int64_t ldc) {
  const bool whole = rows == (rows > 16 ? 32 : 16) && cols == (cols > 16 ? 32 : 16);
  if (whole && alpha == 1.0f) return micro_any<Tiles>(rows, cols, kbs, a, b, cp, ldc, !overwrite);
  alignas(64) float tile[32 * 32];
  micro_any<Tiles>(rows, cols, kbs, a, b, tile, 32, false);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      const float v = alpha * tile[r * 32 + j];
      cp[r * ldc + j] = overwrite ? v : cp[r * ldc + j] + v;
    }
}

template <class Tiles>
void product_on(const Bf16Operands& o, int64_t i0, int64_t j0, int64_t m, int64_t n, int64_t k, float alpha,
                float beta, float* c, int64_t ldc, AmxPackBuffers& buf) {
  if (beta != 0.0f && beta != 1.0f)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] *= beta;
  const int64_t k_blocks = (k + kKC - 1) / kKC;
  const int64_t kc_step = ((k + k_blocks - 1) / k_blocks + kTileK - 1) / kTileK * kTileK;
  Tiles::configure(full_tiles());
  for (int64_t jc = 0; jc < n; jc += kNC) {
    const int64_t nc = std::min(kNC, n - jc);
    for (int64_t pc = 0; pc < k; pc += kc_step) {
      const int64_t kc = std::min(kc_step, k - pc), kbs = (kc + kTileK - 1) / kTileK;
      const int64_t sliver = kbs * kTileWordsAll;  // words per packed sliver
      pack_b_block<Tiles>(o, j0 + jc, nc, pc, kc, kbs, buf.b.get());
      const bool overwrite = beta == 0.0f && pc == 0;
      for (int64_t ic = 0; ic < m; ic += kMC) {
        const int64_t mc = std::min(kMC, m - ic);
        for (int64_t is = 0; is < mc; is += 16)
          pack_a<Tiles>(o, i0 + ic + is, std::min<int64_t>(16, mc - is), pc, kc, kbs, buf.a.get() + is / 16 * sliver);
        for (int64_t jr = 0; jr < nc; jr += 32) {
          const TileWalk bw{buf.b.get() + jr / 16 * sliver, sliver, kTileWordsAll, 64};
          for (int64_t ir = 0; ir < mc; ir += 32) {
            const TileWalk aw{buf.a.get() + ir / 16 * sliver, sliver, kTileWordsAll, 64};
            float* cp = c + (ic + ir) * ldc + jc + jr;
            // The next block's C, on its way into the cache while this one multiplies: C is
            // megabytes whose tiles' rows lie far apart, and a tile load that misses stalls the tiles.
            if (ir + 32 < mc)
              for (int64_t r = 0; r < std::min<int64_t>(32, mc - ir - 32); ++r) {
                __builtin_prefetch(cp + (32 + r) * ldc, 1);
                __builtin_prefetch(cp + (32 + r) * ldc + 16, 1);
              }
            c_block<Tiles>(std::min<int64_t>(32, mc - ir), std::min<int64_t>(32, nc - jr), kbs, aw, bw, alpha,
                           overwrite, cp, ldc);
          }
        }
      }
    }
  }
  Tiles::release();
}

template <class Tiles>
void pair_product_on(int64_t rows, int64_t cols, int64_t steps, const uint32_t* a, int64_t lda, const uint32_t* b,
                     int64_t ldb, float* c, int64_t ldc, bool add) {
  const int64_t kbs = steps / 16;
  Tiles::configure(full_tiles());
  for (int64_t j = 0; j < cols; j += 32) {
    const TileWalk bw{b + j, 16, 16 * ldb, ldb * 4};
    for (int64_t r = 0; r < rows; r += 32) {
      const TileWalk aw{a + r * lda, 16 * lda, 16, lda * 4};
      micro_any<Tiles>(std::min<int64_t>(32, rows - r), std::min<int64_t>(32, cols - j), kbs, aw, bw,
                       c + r * ldc + j, ldc, add);
    }
  }
  Tiles::release();
}

}  // namespace

AmxPackBuffers::AmxPackBuffers() : a(scratch<uint32_t>(kMC * kKC / 2)), b(scratch<uint32_t>(kNC * kKC / 2)) {}

void amx_product(AmxTiles tiles, const Bf16Operands& o, int64_t i0, int64_t j0, int64_t m, int64_t n, int64_t k,
                 float alpha, float beta, float* c, int64_t ldc, AmxPackBuffers& buf) {
  if (tiles == AmxTiles::emulated) return product_on<EmulatedTiles>(o, i0, j0, m, n, k, alpha, beta, c, ldc, buf);
#if EMBER_AMX_TILES
  if (tiles == AmxTiles::hardware) return product_on<HardwareTiles>(o, i0, j0, m, n, k, alpha, beta, c, ldc, buf);
#endif
  EMBER_THROW("gemm_bf16: the AMX kernel was called with tiles ", amx_tiles_name(tiles));
}

void amx_pair_product(AmxTiles tiles, int64_t rows, int64_t cols, int64_t steps, const uint32_t* a, int64_t lda,
                      const uint32_t* b, int64_t ldb, float* c, int64_t ldc, bool add) {
  EMBER_CHECK(rows % 16 == 0 && cols % 16 == 0 && steps % 16 == 0, "amx_pair_product: ", rows, " x ", cols,
              " over ", steps, " pairs (multiples of 16)");
  if (tiles == AmxTiles::emulated) return pair_product_on<EmulatedTiles>(rows, cols, steps, a, lda, b, ldb, c, ldc, add);
#if EMBER_AMX_TILES
  if (tiles == AmxTiles::hardware) return pair_product_on<HardwareTiles>(rows, cols, steps, a, lda, b, ldb, c, ldc, add);
#endif
  EMBER_THROW("amx_pair_product: called with tiles ", amx_tiles_name(tiles));
}

}  // namespace ember::kernels::cpu
