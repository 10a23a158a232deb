// The AVX512_BF16 (VDPBF16PS) bf16 GEMM kernel: dot_block in gemm_bf16_kernels.h; the entry points
// of gemm_bf16.h, the path choice and the threading are in gemm_bf16_paths.cpp.
//
// Note [bf16 GEMM on the CPU]
// VDPBF16PS (_mm512_dpbf16_ps(acc, a, b)) treats each 32-bit lane of its 512-bit operands as a
// PAIR of bf16 values and does, in each of its 16 f32 lanes,
//     acc[l] += a[2l] * b[2l] + a[2l+1] * b[2l+1]
// with the products exact and the sum in f32. So one instruction is 32 multiply-adds, provided
// the two values of a pair are consecutive along k. The kernel is the classic Goto/BLIS one,
// with that pairing built into the packed layouts:
//
//   C micro-tile: kMR = 8 rows by kNR = 48 columns, held in 24 zmm accumulators (three per row:
//     columns 0..15, 16..31, 32..47). Each step along k consumes one k-pair:
//       b0, b1, b2 = the 48 columns' pairs (B(p, j), B(p+1, j)), three 64-byte loads
//       for each of the 8 rows: a = (A(i, p), A(i, p+1)) broadcast to all 16 lanes
//                               acc[i][v] += a . b_v  for v = 0, 1, 2
//     24 VDPBF16PS per 3 + 8 loads: 24 independent accumulators cover the instruction's latency
//     (~5-6 cycles) times its throughput (1-2 per cycle), with loads to spare; 24 + 3 + 1 of the
//     32 zmm registers are in use. 8 x 48 fits the convolutions' shapes: C_out = 32 or 64 rows
//     and C_in kh kw = 288 columns are whole tiles (a 12 x 32 tile measured 9-20% slower on the
//     cnn model's conv2, where 64 = 5 x 12 + 4 leaves a mostly empty edge tile).
//   Packed B (a kKC x kNC block of op(B)): slivers of kNR columns; in a sliver, k-pair kp of
//     column j is the 32-bit word [kp * kNR + j], low half B(p0 + 2kp, j), high half
//     B(p0 + 2kp + 1, j) — exactly the three zmm registers the micro-kernel loads per step, read
//     front to back. Columns past n and the odd k's missing partner are zeros.
//   Packed A (a kMC x kKC block of op(A)): slivers of kMR rows; word [kp * kMR + i] holds
//     (A(i, p0 + 2kp), A(i, p0 + 2kp + 1)), the 32-bit value the micro-kernel broadcasts.
//   Packing reads the source along its contiguous direction, with AVX-512 (Note [Packing with
//     AVX-512]). Transposes cost nothing beyond choosing the loop.
//
// Blocking (loops from the outside in: jc over n by kNC, pc over k by kKC, ic over m by kMC,
// jr by kNR, ir by kMR):
//   kKC = 256: a B sliver is 256 x 48 bf16 = 24 KiB, which stays in a 32 KiB L1 (Zen 4; 48 KiB
//     on recent Intel) beside the A sliver streaming past (8 x 256 bf16 = 4 KiB) while the
//     micro-kernel walks down all of A's slivers. k is cut into equal even blocks (288 = 2 x 144,
//     392 = 2 x 196). 256 measured 3-8% faster than 192 on layer4's products (Zen 4), mostly
//     from fewer passes over C when k is a few hundred.
//   kMC = 144 (18 slivers): the packed A block is 144 x 256 bf16 = 72 KiB, well inside L2
//     (1-2 MiB), with room for the B panel's slivers streaming through.
//   kNC = 2064 (43 slivers): the packed B block is 256 x 2064 bf16 = 1 MiB, L2/L3 territory;
//     the im2col GEMMs of a chunk of images (Note [Chunks of images] in conv.cpp) have about
//     2048 columns, so a chunk's B is packed once.
//   C is f32 throughout: the first k block stores alpha * acc (beta == 0) or adds it to C, later
//     blocks add. A bf16 C is computed into an f32 buffer and rounded once at the end, so the
//     result is the f32-accumulated sum rounded once, whatever the blocking.
//   The micro-kernel prefetches its C tile before the k loop: C is megabytes (a weight gradient's
//     512 x 4608 floats), its tile's rows are far apart, and the loads and stores at the end
//     otherwise wait on cache misses (+9% on a 2048^3 product, Zen 4).
// Edge tiles (fewer than 8 rows or 48 columns left) run the micro-kernel into a local 8 x 48 tile
// (the packed zeros make the extra rows harmless) and copy the valid part; a last sliver of at
// most 16 or 32 columns multiplies only that many (one or two of B's three vectors): ResNet's
// layer4 products have 392 or 196 columns, 8 or 4 past the last whole sliver.
//
// Threading (gemm_bf16_paths.cpp): a product above ~2 MFLOP is cut into blocks of C's columns (or
// rows, whichever is longer), whole slivers each, one block per thread of ember's pool (Note [One
// thread pool] in parallel.cpp), each with its own packing buffers. A thread packs the A blocks its
// columns need, so A is packed once per thread: cheap next to the product when n is long.
//
// The fallback (a CPU without AVX512_BF16, or EMBER_CPU_BF16=f32) widens op(A) and op(B) to
// contiguous f32 (exact) and calls the f32 gemm (OpenBLAS); same accumulation type, same single
// rounding of a bf16 C, so results agree with the native path to f32 rounding of the sums. Where
// the CPU has AMX tiles a third kernel runs on them (Note [bf16 GEMM on AMX tiles] in
// gemm_amx.cpp), and each product shape takes whichever of the three measured fastest (Note
// [Kernels chosen by measurement] in measured_choice.cpp).

#include "gemm_bf16_kernels.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../../../core/error.h"
#include "bf16_dot.h"
#include "../../../core/cpu/cpu_features.h"
#include "../gemm.h"
#include "../../../core/cpu/parallel.h"
#include "../scratch.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define EMBER_BF16_X86 1
#else
#define EMBER_BF16_X86 0
#endif

namespace ember::kernels::cpu {

// ---- packing (shared with the Winograd path: bf16_dot.h) ---------------------------------

// pack_pair_sliver (bf16_dot.h): the loops use AVX-512 (Note [Packing with AVX-512]); the plain
// loops take what they leave.
//
// Note [Packing with AVX-512]
// Packing is pure data movement, ~14% of a layer4 product when it ran one pair at a time.
//   k contiguous: a line's pairs are consecutive 32-bit words, and the sliver wants them
//     transposed (line x's pair kp at word kp * W + x). Eight lines by eight pairs are loaded as
//     eight ymm rows and transposed with the classic 8 x 8 shuffle network (32-bit unpacks, then
//     64-bit unpacks, then 128-bit lane swaps): 24 shuffles for 64 words.
//   k across lines: pair kp is (line p, line p + 1) at the same column: 16 values of each line
//     are widened to 32 bits (VPMOVZXWD), the second shifted into the high half and OR-ed; masked
//     loads give the zeros past xw, masked stores stop at W.
#if EMBER_BF16_X86
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's _mm512_undefined_*() (as in pool.cpp)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
// dst[j * W + i] = pair j of line i (at src + i * ld), for i, j < 8.
EMBER_BF16_DOT_TARGET static void transpose8x8_pairs(const BFloat16* src, int64_t ld, uint32_t* dst, int64_t W) {
  __m256i r[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i * ld));
  __m256i t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);      // pairs 0 1 | 4 5 of lines 2i, 2i+1
    t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);  // pairs 2 3 | 6 7
  }
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {  // lines 4h .. 4h + 3
    u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);      // pair 0 | pair 4
    u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);      // pair 1 | pair 5
    u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);  // pair 2 | pair 6
    u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);  // pair 3 | pair 7
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j * W), _mm256_permute2x128_si256(u[j], u[4 + j], 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (j + 4) * W),
                        _mm256_permute2x128_si256(u[j], u[4 + j], 0x31));
  }
}

EMBER_BF16_DOT_TARGET void pack_pair_sliver(const BFloat16* src, int64_t ld, bool k_contig, int64_t xw, int64_t W,
                                            int64_t p0, int64_t kc, uint32_t* dst) {
  const int64_t kcp = (kc + 1) / 2, full = kc / 2;
  if (k_contig) {
    // Blocks of 8 lines by 8 pairs, then the lines' remaining pairs and the lines past the blocks.
    const int64_t x8 = xw / 8 * 8, kp8 = full / 8 * 8;
    for (int64_t x = 0; x < x8; x += 8)
      for (int64_t kp = 0; kp < kp8; kp += 8) transpose8x8_pairs(src + x * ld + p0 + 2 * kp, ld, dst + kp * W + x, W);
    for (int64_t x = 0; x < xw; ++x) {
      const BFloat16* row = src + x * ld + p0;
      for (int64_t kp = x < x8 ? kp8 : 0; kp < full; ++kp) {
        uint32_t pair;
        std::memcpy(&pair, row + 2 * kp, sizeof pair);  // two consecutive bf16: one pair
        dst[kp * W + x] = pair;
      }
      if (full < kcp) dst[full * W + x] = row[kc - 1].bits;
    }
    for (int64_t kp = 0; kp < kcp; ++kp)
      for (int64_t x = xw; x < W; ++x) dst[kp * W + x] = 0;
    return;
  }
  for (int64_t kp = 0; kp < kcp; ++kp) {
    const BFloat16* r0 = src + (p0 + 2 * kp) * ld;
    const BFloat16* r1 = 2 * kp + 1 < kc ? r0 + ld : nullptr;  // the odd k's partner is zero
    uint32_t* d = dst + kp * W;
    for (int64_t x = 0; x < W; x += 16) {
      const int64_t valid = std::clamp<int64_t>(xw - x, 0, 16);
      const __mmask16 load = static_cast<__mmask16>((1u << valid) - 1u);
      const __mmask16 store = static_cast<__mmask16>((1u << std::min<int64_t>(16, W - x)) - 1u);
      const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(load, r0 + x));
      const __m512i hi = r1 ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(load, r1 + x)) : _mm512_setzero_si512();
      _mm512_mask_storeu_epi32(d + x, store, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
  }
}
#else
void pack_pair_sliver(const BFloat16*, int64_t, bool, int64_t, int64_t, int64_t, int64_t, uint32_t*) {
  EMBER_THROW("gemm_bf16: the AVX512_BF16 kernel is not built for this architecture");
}
#endif

namespace {

constexpr int64_t kMR = kDotTileRows;  // rows of a C micro-tile
constexpr int64_t kNV = 3;             // zmm registers (16 floats each) per row of a C micro-tile
constexpr int64_t kNR = 16 * kNV;      // columns of a C micro-tile
static_assert(kNR == kDotTileCols);
constexpr int64_t kKC = 256;   // k per packed block (even: k-pairs never straddle blocks)
constexpr int64_t kMC = 144;   // rows of op(A) per packed block (a multiple of kMR)
constexpr int64_t kNC = 2064;  // columns of op(B) per packed block (a multiple of kNR)

// ---- the micro-kernel -------------------------------------------------------------------------

#if EMBER_BF16_X86
// c (kMR x 16 NV, row stride ldc) = alpha * Apack . Bpack (overwrite) or c += that, over kcp
// k-pairs: the first NV of a B sliver's kNV vectors (NV < kNV for a narrow last sliver).
static_assert(kMR == kDotRows, "the shared micro-kernel's tile has kDotRows rows");
template <int NV = kNV>
EMBER_BF16_DOT_TARGET void micro_kernel(int64_t kcp, const uint32_t* ap, const uint32_t* bp, float alpha, float* c,
                                        int64_t ldc, bool overwrite) {
  bf16_dot_tile<NV, true>(kcp, ap, 0, bp, kNR, alpha, c, ldc, !overwrite);
}
#else
template <int NV = kNV>
void micro_kernel(int64_t, const uint32_t*, const uint32_t*, float, float*, int64_t, bool) {
  EMBER_THROW("gemm_bf16: the AVX512_BF16 kernel is not built for this architecture");
}
#endif

// ---- the blocked product, one thread ----------------------------------------------------------

// C (m, n) f32 = alpha op(A) op(B) + beta C for rows [i0, i0 + m) and columns [j0, j0 + n) of the
// product (c points at C(i0, j0)). k > 0.
void native_block(const Bf16Operands& o, int64_t i0, int64_t j0, int64_t m, int64_t n, int64_t k, float alpha,
                  float beta, float* c, int64_t ldc, DotPackBuffers& buf) {
  if (beta != 0.0f && beta != 1.0f)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] *= beta;
  // Sliver x of op(A) starts at row i; of op(B) at column j.
  const bool a_kc = o.ta == Transpose::No, b_kc = o.tb == Transpose::Yes;
  auto a_line = [&](int64_t i) { return a_kc ? o.a + i * o.lda : o.a + i; };
  auto b_line = [&](int64_t j) { return b_kc ? o.b + j * o.ldb : o.b + j; };
  alignas(64) float tile[kMR * kNR];
  // k in equal even blocks of at most kKC: 288 = 2 x 144, not 256 + 32 (a short block pays the
  // C loads and stores of a long one).
  const int64_t k_blocks = (k + kKC - 1) / kKC;
  const int64_t kc_even = ((k + k_blocks - 1) / k_blocks + 1) / 2 * 2;
  for (int64_t jc = 0; jc < n; jc += kNC) {
    const int64_t nc = std::min(kNC, n - jc);
    for (int64_t pc = 0; pc < k; pc += kc_even) {
      const int64_t kc = std::min(kc_even, k - pc), kcp = (kc + 1) / 2;
      for (int64_t jr = 0; jr < nc; jr += kNR)
        pack_pair_sliver(b_line(j0 + jc + jr), o.ldb, b_kc, std::min(kNR, nc - jr), kNR, pc, kc, buf.b.get() + jr * kcp);
      const bool overwrite = beta == 0.0f && pc == 0;
      for (int64_t ic = 0; ic < m; ic += kMC) {
        const int64_t mc = std::min(kMC, m - ic);
        for (int64_t ir = 0; ir < mc; ir += kMR)
          pack_pair_sliver(a_line(i0 + ic + ir), o.lda, a_kc, std::min(kMR, mc - ir), kMR, pc, kc, buf.a.get() + ir * kcp);
        for (int64_t jr = 0; jr < nc; jr += kNR) {
          const uint32_t* bp = buf.b.get() + jr * kcp;
          const int64_t nr = std::min(kNR, nc - jr);
          for (int64_t ir = 0; ir < mc; ir += kMR) {
            const uint32_t* ap = buf.a.get() + ir * kcp;
            const int64_t mr = std::min(kMR, mc - ir);
            float* cp = c + (ic + ir) * ldc + jc + jr;
            if (mr == kMR && nr == kNR) {
              micro_kernel(kcp, ap, bp, alpha, cp, ldc, overwrite);
              continue;
            }
            // An edge tile: into the local tile, as few of B's vectors as its columns need.
            if (nr <= 16)
              micro_kernel<1>(kcp, ap, bp, alpha, tile, kNR, true);
            else if (nr <= 32)
              micro_kernel<2>(kcp, ap, bp, alpha, tile, kNR, true);
            else
              micro_kernel(kcp, ap, bp, alpha, tile, kNR, true);
            for (int64_t r = 0; r < mr; ++r)
              for (int64_t j = 0; j < nr; ++j)
                cp[r * ldc + j] = overwrite ? tile[r * kNR + j] : cp[r * ldc + j] + tile[r * kNR + j];
          }
        }
      }
    }
  }
}

}  // namespace

DotPackBuffers::DotPackBuffers() : a(scratch<uint32_t>(kKC / 2 * kMC)), b(scratch<uint32_t>(kKC / 2 * kNC)) {}

void dot_block(const Bf16Operands& o, int64_t i0, int64_t j0, int64_t m, int64_t n, int64_t k, float alpha,
               float beta, float* c, int64_t ldc, DotPackBuffers& buf) {
  native_block(o, i0, j0, m, n, k, alpha, beta, c, ldc, buf);
}

}  // namespace ember::kernels::cpu
