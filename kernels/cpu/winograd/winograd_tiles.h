#pragma once
// The Winograd convolution's data transforms, internal to kernels/cpu (Note [Winograd
// convolution] in conv_winograd.cpp): step 1, a block of tiles of x (or of dy, for the weight
// gradient) into 16 transformed planes, and step 3, the 16 product planes back into y's 2x2
// output tiles. conv_winograd.cpp runs the steps, the products between them and the filter
// transforms; winograd_tiles.cpp holds the tile walks and the transforms of one tile row,
// portable and AVX-512 (they agree bit for bit).
//
// A block's planes: plane xi (0..15) holds one row of row_ld(count) floats per channel (C rows
// for V, K for W and M), one column per tile of the block; the 16 planes lie `rows * ld +
// kPlanePad` floats apart.

#include <atomic>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#define EMBER_WINOGRAD_X86 1
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12's _mm512_undefined_*() (as in bf16_simd.h)
#endif
#include "../bf16/bf16_simd.h"
#define EMBER_AVX512_TARGET EMBER_BF16_SIMD_TARGET
#else
#define EMBER_WINOGRAD_X86 0
#endif

namespace ember::kernels::cpu::winograd {

// One Winograd convolution: y (n, K, oh, ow) from x (n, C, h, w) padded by (pad_h, pad_w), with
// oh = h + 2 pad_h - 2 and ow = w + 2 pad_w - 2, and the weights already transformed: u[xi][k][c].
struct Problem {
  int64_t n, C, h, w, K, pad_h, pad_w, oh, ow;
  int64_t tiles_h, tiles_w, tiles;  // per image: ceil(oh / 2) x ceil(ow / 2)
};

inline Problem make_problem(int64_t n, int64_t C, int64_t h, int64_t w, int64_t K, int64_t pad_h, int64_t pad_w) {
  Problem p{n, C, h, w, K, pad_h, pad_w, h + 2 * pad_h - 2, w + 2 * pad_w - 2, 0, 0, 0};
  p.tiles_h = (p.oh + 1) / 2;
  p.tiles_w = (p.ow + 1) / 2;
  p.tiles = p.tiles_h * p.tiles_w;
  return p;
}

// The 16 planes of V and of M lie this many floats more than their size apart. The transforms
// read or write all 16 at once, and with a power-of-two plane (C count floats: 32 x 512 x 4
// bytes) the 16 streams would share the same cache sets and evict one another.
constexpr int64_t kPlanePad = 16;
// Each row of a V, W or M plane (one channel's tiles of the block) has this many floats of room
// past its `count` tiles: the AVX-512 transforms store whole vectors of 8 tiles, and the lanes
// past a tile row's last tile land in the slots of the next tile row, written later, or here.
// (Masked stores cost several times an ordinary one on Zen 4.)
constexpr int64_t kRowSlack = 16;
inline int64_t row_ld(int64_t count) { return count + kRowSlack; }

#if EMBER_WINOGRAD_X86
// 16 values as floats (lanes outside `m` are not read and are 0): f32 as they are, bf16 widened
// (exact). And the lanes in `m` stored: f32 as they are, bf16 rounded as BFloat16(float) does.
EMBER_AVX512_TARGET inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
EMBER_AVX512_TARGET inline __m512 load16(const BFloat16* p, __mmask16 m) { return widen16(p, m); }
EMBER_AVX512_TARGET inline void store16(float* p, __mmask16 m, __m512 v) { _mm512_mask_storeu_ps(p, m, v); }
EMBER_AVX512_TARGET inline void store16(BFloat16* p, __mmask16 m, __m512 v) { narrow16(v, p, m); }
#endif

// Whether the AVX-512 row transforms run (the CPU has AVX-512 F, BW and VL, unless switched off
// by set_winograd_vectorized, which tests use to compare the two).
std::atomic<bool>& use_avx512();

// Step 1: v[xi][c][q] = (B^T d B)[xi] for every channel c of x and tile q of the block of `count`
// tiles from `first_tile` (tiles counted across the batch, image-major). T: float or BFloat16.
template <typename T>
void input_transform(const Problem& p, const T* x, int64_t first_tile, int64_t count, float* v);

// Step 3: y's 2x2 output tiles from m[xi][k][q] (A^T m A), plus bias (may be null). Each plane of
// m has m_rows >= K rows of row_ld(count) floats (the rows past K are not read).
template <typename T>
void output_transform(const Problem& p, const float* m, int64_t m_rows, const float* bias, int64_t first_tile,
                      int64_t count, T* y);

// The weight gradient's step 1 for dy: w[xi][k][q] = (A dy A^T)[xi] for every output channel k
// and tile q of the block.
template <typename T>
void grad_transform(const Problem& p, const T* gy, int64_t first_tile, int64_t count, float* w);

}  // namespace ember::kernels::cpu::winograd
