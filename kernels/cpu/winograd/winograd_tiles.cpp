// The Winograd convolution's data transforms (winograd_tiles.h): the walks over a block's tiles
// and the transforms of one tile row, portable and AVX-512.

#include "winograd_tiles.h"

#include <algorithm>
#include <vector>

#include "../../../core/dtype.h"
#include "../../../core/cpu/cpu_features.h"

namespace ember::kernels::cpu::winograd {

namespace {

// The tiles [q0, q0 + count) of a part, walked one tile row at a time: f(image, ty, tx0, tx1, q)
// for the tiles tx0 <= tx < tx1 of row ty of an image, the first of which is block column q.
template <typename F>
void for_each_tile_row(const Problem& p, int64_t first_tile, int64_t count, const F& f) {
  int64_t t = first_tile, q = 0;
  while (q < count) {
    const int64_t image = t / p.tiles, ty = (t % p.tiles) / p.tiles_w, tx0 = t % p.tiles_w;
    const int64_t tx1 = std::min(p.tiles_w, tx0 + (count - q));
    f(image, ty, tx0, tx1, q);
    q += tx1 - tx0;
    t += tx1 - tx0;
  }
}

// The tile rows of for_each_tile_row as a list, so that a transform can walk them once per
// channel: a channel plane is then read (or written) front to back, where walking all channels
// for each tile row jumps between planes and misses the caches on every row (measured: most of
// the transforms' time went to those misses).
struct TileRow {
  int64_t image, ty, tx0, tx1, q;
};
std::vector<TileRow> tile_rows(const Problem& p, int64_t first_tile, int64_t count) {
  std::vector<TileRow> rows;
  for_each_tile_row(p, first_tile, count, [&](int64_t image, int64_t ty, int64_t tx0, int64_t tx1, int64_t q) {
    rows.push_back({image, ty, tx0, tx1, q});
  });
  return rows;
}

// ---- the transforms of one tile row: portable, and AVX-512 -----------------------------------------
//
// Both compute the same sums in the same order, so they agree bit for bit (tests run both). The
// portable loops take one tile at a time; the AVX-512 ones take 8 tiles (input) or 16 (output)
// per instruction, reading the input and writing the output through masks that stand for the
// padding and the image's edges — a tile row of a small image (the cnn model's 14 x 14 has 7
// tiles per row) is too short for the compiler's own vectorization, and a copy into padded rows
// cost more than the arithmetic.

// Step 1 for the tiles tx0 <= tx < tx1 of tile row ty of one channel plane xc (h, w):
// v[(4 i + j) plane + tx] = (B^T d B)[i][j] of tile tx, d its 4 x 4 input (zero outside the image).
template <typename T>
void input_row_portable(const Problem& p, const T* xc, int64_t ty, int64_t tx0, int64_t tx1, float* v, int64_t plane) {
  for (int64_t tx = tx0; tx < tx1; ++tx) {
    float d[4][4];
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 4; ++c) {
        const int64_t iy = 2 * ty - p.pad_h + r, ix = 2 * tx - p.pad_w + c;
        d[r][c] = iy >= 0 && iy < p.h && ix >= 0 && ix < p.w ? static_cast<float>(xc[iy * p.w + ix]) : 0.0f;
      }
    float t[4][4];  // B^T d, down the columns
    for (int c = 0; c < 4; ++c) {
      t[0][c] = d[0][c] - d[2][c];
      t[1][c] = d[1][c] + d[2][c];
      t[2][c] = d[2][c] - d[1][c];
      t[3][c] = d[1][c] - d[3][c];
    }
    for (int i = 0; i < 4; ++i) {  // (B^T d) B, along the rows
      v[(i * 4 + 0) * plane + tx] = t[i][0] - t[i][2];
      v[(i * 4 + 1) * plane + tx] = t[i][1] + t[i][2];
      v[(i * 4 + 2) * plane + tx] = t[i][2] - t[i][1];
      v[(i * 4 + 3) * plane + tx] = t[i][1] - t[i][3];
    }
  }
}

// Step 3 for the tiles tx0 <= tx < tx1 of tile row ty of one output plane yk (oh, ow):
// mi[4 i + j][tx] is m[i][j] of tile tx; the tile's 2 x 2 outputs A^T m A + add, cut to the plane.
template <typename T>
void output_row_portable(const Problem& p, const float* const mi[16], int64_t ty, int64_t tx0, int64_t tx1, float add,
                         T* yk) {
  for (int64_t tx = tx0; tx < tx1; ++tx) {
    float s0[4], s1[4];  // A^T m: 2 rows of 4
    for (int j = 0; j < 4; ++j) {
      const float m0 = mi[j][tx], m1 = mi[4 + j][tx], m2 = mi[8 + j][tx], m3 = mi[12 + j][tx];
      s0[j] = m0 + m1 + m2;
      s1[j] = m1 - m2 - m3;
    }
    const float out[2][2] = {{s0[0] + s0[1] + s0[2], s0[1] - s0[2] - s0[3]},
                             {s1[0] + s1[1] + s1[2], s1[1] - s1[2] - s1[3]}};
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 2; ++c) {
        const int64_t oy = 2 * ty + r, ox = 2 * tx + c;
        if (oy < p.oh && ox < p.ow) yk[oy * p.ow + ox] = T(out[r][c] + add);
      }
  }
}

// The weight gradient's step 1 for dy: w[(4 i + j) plane + tx] = (A dy A^T)[i][j] of tile tx of
// tile row ty of one output-gradient plane gk (oh, ow), dy the tile's 2 x 2 (zero past the plane).
template <typename T>
void grad_row_portable(const Problem& p, const T* gk, int64_t ty, int64_t tx0, int64_t tx1, float* w, int64_t plane) {
  for (int64_t tx = tx0; tx < tx1; ++tx) {
    float dy[2][2];
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 2; ++c) {
        const int64_t oy = 2 * ty + r, ox = 2 * tx + c;
        dy[r][c] = oy < p.oh && ox < p.ow ? static_cast<float>(gk[oy * p.ow + ox]) : 0.0f;
      }
    float t[4][2];  // A dy, down the columns: rows dy0, dy0 + dy1, dy0 - dy1, -dy1
    for (int c = 0; c < 2; ++c) {
      t[0][c] = dy[0][c];
      t[1][c] = dy[0][c] + dy[1][c];
      t[2][c] = dy[0][c] - dy[1][c];
      t[3][c] = -dy[1][c];
    }
    for (int i = 0; i < 4; ++i) {  // (A dy) A^T, along the rows
      const float t0 = t[i][0], t1 = t[i][1];
      w[(i * 4 + 0) * plane + tx] = t0;
      w[(i * 4 + 1) * plane + tx] = t0 + t1;
      w[(i * 4 + 2) * plane + tx] = t0 - t1;
      w[(i * 4 + 3) * plane + tx] = -t1;
    }
  }
}

#if EMBER_WINOGRAD_X86

// The lanes [a, b) of a 16-lane vector (clipped to 0..16).
inline __mmask16 lanes_between(int64_t a, int64_t b) {
  a = std::max<int64_t>(a, 0), b = std::min<int64_t>(b, 16);
  return b <= a ? 0 : static_cast<__mmask16>(((1u << b) - 1u) & ~((1u << a) - 1u));
}

// The lanes l of a 16-float access at column c0 + l whose column lies in [0, w).
inline __mmask16 columns_inside(int64_t c0, int64_t w) { return lanes_between(-c0, w - c0); }

// The low 8 lanes.
EMBER_AVX512_TARGET inline __m256 low8(__m512 v) { return _mm512_castps512_ps256(v); }

// 8 tiles at a time. The 16 columns from 2 tx - pad_w + s (s = 0..3) hold input column s of
// tile tx + l at lane 2l, so vector arithmetic on the four shifted vectors computes every tile's
// transform in the even lanes, which are then packed into 8 consecutive floats and stored. The
// shifts are made in registers from two loads per row.
template <typename T>
EMBER_AVX512_TARGET void input_row_avx512(const Problem& p, const T* xc, int64_t ty, int64_t tx0, int64_t tx1, float* v,
                                          int64_t plane) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
  const T* rows[4];
  bool inside[4];
  for (int r = 0; r < 4; ++r) {
    const int64_t iy = 2 * ty - p.pad_h + r;
    inside[r] = iy >= 0 && iy < p.h;
    rows[r] = xc + (inside[r] ? iy : 0) * p.w;
  }
  for (int64_t tx = tx0; tx < tx1; tx += 8) {
    // Input row r at columns c0 + lane (lo) and c0 + 16 + lane (hi), c0 = 2 tx - pad_w, zero
    // outside the image (masked-off lanes are not read, so the pointer may lie before the row).
    const int64_t c0 = 2 * tx - p.pad_w;
    const __mmask16 m_lo = columns_inside(c0, p.w), m_hi = columns_inside(c0 + 16, p.w);
    __m512 lo[4], hi[4];
    for (int r = 0; r < 4; ++r) {
      lo[r] = inside[r] ? load16(rows[r] + c0, m_lo) : _mm512_setzero_ps();
      hi[r] = inside[r] ? load16(rows[r] + c0 + 16, m_hi) : _mm512_setzero_ps();
    }
    // B^T d down the columns, on both halves; then t[i][s] = those columns shifted left by s
    // lanes (valignd across the two halves): lane 2l of t[i][s] is column s of tile tx + l.
    __m512 t[4][4];
    const __m512 tl[4] = {_mm512_sub_ps(lo[0], lo[2]), _mm512_add_ps(lo[1], lo[2]), _mm512_sub_ps(lo[2], lo[1]),
                          _mm512_sub_ps(lo[1], lo[3])};
    const __m512 th[4] = {_mm512_sub_ps(hi[0], hi[2]), _mm512_add_ps(hi[1], hi[2]), _mm512_sub_ps(hi[2], hi[1]),
                          _mm512_sub_ps(hi[1], hi[3])};
    for (int i = 0; i < 4; ++i) {
      const __m512i l = _mm512_castps_si512(tl[i]), h = _mm512_castps_si512(th[i]);
      t[i][0] = tl[i];
      t[i][1] = _mm512_castsi512_ps(_mm512_alignr_epi32(h, l, 1));
      t[i][2] = _mm512_castsi512_ps(_mm512_alignr_epi32(h, l, 2));
      t[i][3] = _mm512_castsi512_ps(_mm512_alignr_epi32(h, l, 3));
    }
    for (int i = 0; i < 4; ++i) {  // (B^T d) B, along the rows
      float* vi = v + i * 4 * plane + tx;  // 8 lanes stored whatever tx1 is: kRowSlack
      _mm256_storeu_ps(vi, low8(_mm512_permutexvar_ps(even, _mm512_sub_ps(t[i][0], t[i][2]))));
      _mm256_storeu_ps(vi + plane, low8(_mm512_permutexvar_ps(even, _mm512_add_ps(t[i][1], t[i][2]))));
      _mm256_storeu_ps(vi + 2 * plane, low8(_mm512_permutexvar_ps(even, _mm512_sub_ps(t[i][2], t[i][1]))));
      _mm256_storeu_ps(vi + 3 * plane, low8(_mm512_permutexvar_ps(even, _mm512_sub_ps(t[i][1], t[i][3]))));
    }
  }
}

// A run of tiles of one tile row inside a group of 16 consecutive tiles of a block: lanes
// [lane0, lane1) of the group are tiles tx0, tx0 + 1, ... of row ty of `image`.
struct Segment {
  int64_t image, ty, tx0, lane0, lane1;
};

// 16 consecutive tiles of the block at a time (lane l: tile q0 + l), whatever rows and images
// they belong to, so that a short tile row (7 tiles at 14 x 14) does not leave most lanes idle:
// m[xi] is loaded from 16 consecutive columns of each plane, the (r, 0) and (r, 1) outputs of
// tile l are interleaved into lanes 2l and 2l + 1 of 32, and each segment of the group is stored
// into its own output row through a mask. `segments` lists the group's segments (at most 16).
template <typename T>
EMBER_AVX512_TARGET void output_group_avx512(const Problem& p, const float* const mi[16], int64_t lanes,
                                             const Segment* segments, int64_t nseg, float add, T* yk_image0,
                                             int64_t image_stride) {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512 bias = _mm512_set1_ps(add);
  const __mmask16 load = lanes_between(0, lanes);
  __m512 s0[4], s1[4];
  for (int j = 0; j < 4; ++j) {
    const __m512 m0 = _mm512_maskz_loadu_ps(load, mi[j]), m1 = _mm512_maskz_loadu_ps(load, mi[4 + j]);
    const __m512 m2 = _mm512_maskz_loadu_ps(load, mi[8 + j]), m3 = _mm512_maskz_loadu_ps(load, mi[12 + j]);
    s0[j] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
    s1[j] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
  }
  const __m512 out0[2] = {_mm512_add_ps(_mm512_add_ps(s0[0], s0[1]), s0[2]),
                          _mm512_sub_ps(_mm512_sub_ps(s0[1], s0[2]), s0[3])};
  const __m512 out1[2] = {_mm512_add_ps(_mm512_add_ps(s1[0], s1[1]), s1[2]),
                          _mm512_sub_ps(_mm512_sub_ps(s1[1], s1[2]), s1[3])};
  // Output columns in lane order: lane e of `cols[r][h]` is output (r, e % 2) of tile (16 h + e) / 2.
  const __m512 cols[2][2] = {
      {_mm512_add_ps(_mm512_permutex2var_ps(out0[0], lo, out0[1]), bias),
       _mm512_add_ps(_mm512_permutex2var_ps(out0[0], hi, out0[1]), bias)},
      {_mm512_add_ps(_mm512_permutex2var_ps(out1[0], lo, out1[1]), bias),
       _mm512_add_ps(_mm512_permutex2var_ps(out1[0], hi, out1[1]), bias)}};
  for (int64_t si = 0; si < nseg; ++si) {
    const Segment& sg = segments[si];
    // Lane e (of 32) holds output column 2 tx0 - 2 lane0 + e of the segment's rows.
    const int64_t shift = 2 * sg.tx0 - 2 * sg.lane0;
    const int64_t e0 = 2 * sg.lane0, e1 = std::min(2 * sg.lane1, p.ow - shift);  // lanes inside the plane
    T* plane = yk_image0 + sg.image * image_stride;
    for (int r = 0; r < 2; ++r) {
      const int64_t oy = 2 * sg.ty + r;
      if (oy >= p.oh) break;
      T* dst = plane + oy * p.ow + shift;  // masked-off lanes are not written: may point before the row
      store16(dst, lanes_between(e0, e1), cols[r][0]);
      store16(dst + 16, lanes_between(e0 - 16, e1 - 16), cols[r][1]);
    }
  }
}

// -v, by its sign bit (as the portable loop's unary minus).
EMBER_AVX512_TARGET inline __m512 negate(__m512 v) {
  return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32(static_cast<int>(0x80000000u))));
}

// 8 tiles at a time: the 16 columns from 2 tx of the tile row's two output rows, split into
// their even (left) and odd (right) columns, one tile per lane.
template <typename T>
EMBER_AVX512_TARGET void grad_row_avx512(const Problem& p, const T* gk, int64_t ty, int64_t tx0, int64_t tx1, float* w,
                                         int64_t plane) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 0, 0, 0, 0, 0, 0, 0, 0);
  const bool second_row = 2 * ty + 1 < p.oh;
  for (int64_t tx = tx0; tx < tx1; tx += 8) {
    const __mmask16 m = columns_inside(2 * tx, p.ow);
    const T* r0 = gk + 2 * ty * p.ow + 2 * tx;
    const __m512 row0 = load16(r0, m);
    const __m512 row1 = second_row ? load16(r0 + p.ow, m) : _mm512_setzero_ps();
    const __m512 dy[2][2] = {{_mm512_permutexvar_ps(even, row0), _mm512_permutexvar_ps(odd, row0)},
                             {_mm512_permutexvar_ps(even, row1), _mm512_permutexvar_ps(odd, row1)}};
    __m512 t[4][2];  // A dy, down the columns
    for (int c = 0; c < 2; ++c) {
      t[0][c] = dy[0][c];
      t[1][c] = _mm512_add_ps(dy[0][c], dy[1][c]);
      t[2][c] = _mm512_sub_ps(dy[0][c], dy[1][c]);
      t[3][c] = negate(dy[1][c]);
    }
    for (int i = 0; i < 4; ++i) {  // (A dy) A^T, along the rows
      float* wi = w + i * 4 * plane + tx;  // 8 lanes stored whatever tx1 is: kRowSlack
      _mm256_storeu_ps(wi, low8(t[i][0]));
      _mm256_storeu_ps(wi + plane, low8(_mm512_add_ps(t[i][0], t[i][1])));
      _mm256_storeu_ps(wi + 2 * plane, low8(_mm512_sub_ps(t[i][0], t[i][1])));
      _mm256_storeu_ps(wi + 3 * plane, low8(negate(t[i][1])));
    }
  }
}
#endif

// The step-1 transforms' walk: row(src_plane, tile_row, dst, plane) for every channel plane of
// src (`channels` planes of `plane_elems` per image) and every tile row of the block, the
// channel's planes in order (front to back in memory); dst points at the channel's row of the 16
// transformed planes (row_ld(count) apart, `plane` apart).
template <typename T, typename Row>
void transform_planes(const Problem& p, const T* src, int64_t channels, int64_t plane_elems, int64_t first_tile,
                      int64_t count, float* dst, const Row& row) {
  const int64_t ld = row_ld(count), plane = channels * ld + kPlanePad;
  const std::vector<TileRow> rows = tile_rows(p, first_tile, count);
  for (int64_t c = 0; c < channels; ++c)
    for (const TileRow& r : rows) row(src + (r.image * channels + c) * plane_elems, r, dst + c * ld + r.q - r.tx0, plane);
}

}  // namespace

std::atomic<bool>& use_avx512() {
  static std::atomic<bool> on{[] {
#if EMBER_WINOGRAD_X86
    const CpuFeatures& f = cpu_features();
    return f.avx512f && f.avx512bw && f.avx512vl;
#else
    return false;
#endif
  }()};
  return on;
}

// A step-1 transform of one tile row (input_row_* or grad_row_*).
template <typename T>
using RowTransform = void (*)(const Problem&, const T*, int64_t, int64_t, int64_t, float*, int64_t);

// Step 1 over `channels` planes of src: every tile row through `wide` where the AVX-512
// transforms run (and exist: null elsewhere), through `portable` otherwise.
template <typename T>
void transform_rows(const Problem& p, const T* src, int64_t channels, int64_t plane_elems, int64_t first_tile,
                    int64_t count, float* dst, RowTransform<T> portable, RowTransform<T> wide) {
  const RowTransform<T> row = wide != nullptr && use_avx512().load(std::memory_order_relaxed) ? wide : portable;
  transform_planes(p, src, channels, plane_elems, first_tile, count, dst,
                   [&](const T* s, const TileRow& r, float* d, int64_t plane) {
                     row(p, s, r.ty, r.tx0, r.tx1, d, plane);
                   });
}

#if EMBER_WINOGRAD_X86
#define EMBER_WINOGRAD_WIDE(f) (&f)
#else
#define EMBER_WINOGRAD_WIDE(f) nullptr
#endif

// Step 1: v[xi][c][q] = (B^T d B)[xi] for every channel c and tile q of the block.
template <typename T>
void input_transform(const Problem& p, const T* x, int64_t first_tile, int64_t count, float* v) {
  transform_rows<T>(p, x, p.C, p.h * p.w, first_tile, count, v, &input_row_portable<T>,
                    EMBER_WINOGRAD_WIDE(input_row_avx512<T>));
}

// Step 3: y's 2x2 output tiles from m[xi][k][q] (A^T m A), plus bias. Each plane of m has
// m_rows >= K rows of row_ld(count) floats (the rows past K are not read).
template <typename T>
void output_transform(const Problem& p, const float* m, int64_t m_rows, const float* bias, int64_t first_tile,
                      int64_t count, T* y) {
  const int64_t ld = row_ld(count), plane = m_rows * ld + kPlanePad;
#if EMBER_WINOGRAD_X86
  if (use_avx512().load(std::memory_order_relaxed)) {
    // The segments of every group of 16 tiles, found once for all K output channels.
    const int64_t groups = (count + 15) / 16;
    std::vector<Segment> segments;
    std::vector<int64_t> first(groups + 1);
    for (int64_t gi = 0; gi < groups; ++gi) {
      first[gi] = static_cast<int64_t>(segments.size());
      const int64_t q0 = gi * 16;
      for_each_tile_row(p, first_tile + q0, std::min<int64_t>(16, count - q0),
                        [&](int64_t image, int64_t ty, int64_t tx0, int64_t tx1, int64_t q) {
                          segments.push_back({image, ty, tx0, q, q + (tx1 - tx0)});
                        });
    }
    first[groups] = static_cast<int64_t>(segments.size());
    const int64_t image_stride = p.K * p.oh * p.ow;
    for (int64_t k = 0; k < p.K; ++k) {
      const float add = bias ? bias[k] : 0.0f;
      for (int64_t gi = 0; gi < groups; ++gi) {
        const float* mi[16];
        for (int xi = 0; xi < 16; ++xi) mi[xi] = m + xi * plane + k * ld + gi * 16;
        output_group_avx512(p, mi, std::min<int64_t>(16, count - gi * 16), segments.data() + first[gi],
                            first[gi + 1] - first[gi], add, y + k * p.oh * p.ow, image_stride);
      }
    }
    return;
  }
#endif
  const std::vector<TileRow> rows = tile_rows(p, first_tile, count);
  for (int64_t k = 0; k < p.K; ++k)
    for (const TileRow& r : rows) {
      const float* mi[16];
      for (int xi = 0; xi < 16; ++xi) mi[xi] = m + xi * plane + k * ld + r.q - r.tx0;
      output_row_portable(p, mi, r.ty, r.tx0, r.tx1, bias ? bias[k] : 0.0f, y + (r.image * p.K + k) * p.oh * p.ow);
    }
}

// The weight gradient's step 1 for dy: w[xi][k][q] = (A dy A^T)[xi] for every output channel k
// and tile q of the block.
template <typename T>
void grad_transform(const Problem& p, const T* gy, int64_t first_tile, int64_t count, float* w) {
  transform_rows<T>(p, gy, p.K, p.oh * p.ow, first_tile, count, w, &grad_row_portable<T>,
                    EMBER_WINOGRAD_WIDE(grad_row_avx512<T>));
}

#undef EMBER_WINOGRAD_WIDE

template void input_transform<float>(const Problem&, const float*, int64_t, int64_t, float*);
template void input_transform<BFloat16>(const Problem&, const BFloat16*, int64_t, int64_t, float*);
template void output_transform<float>(const Problem&, const float*, int64_t, const float*, int64_t, int64_t, float*);
template void output_transform<BFloat16>(const Problem&, const float*, int64_t, const float*, int64_t, int64_t,
                                         BFloat16*);
template void grad_transform<float>(const Problem&, const float*, int64_t, int64_t, float*);
template void grad_transform<BFloat16>(const Problem&, const BFloat16*, int64_t, int64_t, float*);

}  // namespace ember::kernels::cpu::winograd
