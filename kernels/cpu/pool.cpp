// CPU pooling. The general loops walk each output cell's window directly, one loop nest per op,
// parallel over planes (windows are small, so no sliding-window tricks); they are the reference.
// Max pooling adds fast paths with the same comparisons in the same order, bit for bit: a window
// size known at compile time when every window lies inside the input, and the 2x2 stride-2
// "tournament" on four outputs at a time with SSE2 and sixteen with AVX-512 (tests/test_pool.cpp
// holds each to the rule on ties and NaNs).

#include "pool.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "../../core/error.h"
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__)
#include <immintrin.h>
#define EMBER_POOL_X86 1
#else
#define EMBER_POOL_X86 0
#endif
#include "bf16/bf16_convert.h"
#include "../../core/cpu/cpu_features.h"
#include "../../core/cpu/parallel.h"
#include "widen.h"

namespace ember::kernels::cpu {

namespace {

// The AVX-512 2x2 max pool rows: where the CPU has AVX-512F, unless set_max_pool_avx512(false).
std::atomic<bool>& max_pool_avx512_flag() {
  static std::atomic<bool> on{EMBER_POOL_X86 && cpu_features().avx512f};
  return on;
}

bool max_pool_avx512() { return max_pool_avx512_flag().load(std::memory_order_relaxed); }

// A plane is at least a few hundred operations; let small batches still split across threads.
int64_t plane_grain(const Pool2dGeometry& g) {
  const int64_t work = std::max<int64_t>(1, g.in_h * g.in_w + g.out_h * g.out_w);
  return std::max<int64_t>(1, 32768 / work);
}

}  // namespace

bool set_max_pool_avx512(bool on) {
  if (on && !(EMBER_POOL_X86 && cpu_features().avx512f)) return false;
  max_pool_avx512_flag().store(on, std::memory_order_relaxed);
  return true;
}

// ---- max -----------------------------------------------------------------------------------------

namespace {

// a if take else b, without a branch.
inline int64_t take_bits(bool take, int64_t a, int64_t b) {
  const int64_t mask = -static_cast<int64_t>(take);
  return (a & mask) | (b & ~mask);
}
template <typename T>
T take_value(bool take, T a, T b) {
  using U = std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;
  U ua, ub;
  std::memcpy(&ua, &a, sizeof(T));
  std::memcpy(&ub, &b, sizeof(T));
  const U mask = static_cast<U>(0) - static_cast<U>(take);
  const U r = (ua & mask) | (ub & ~mask);
  T out;
  std::memcpy(static_cast<void*>(&out), &r, sizeof(T));
  return out;
}

// The common case — every window inside the input (no padding, dilation 1, no partial ceil_mode
// window) — with the kernel size known at compile time: per output cell only the window's loads
// and compares remain (the general loop below spends more on window bounds than on the max).
// One output cell whose K x K window starts at input position `base` and lies inside the input.
template <typename T, int K, typename I>
inline void max_cell_inside(const Pool2dGeometry& g, const T* xp, int64_t base, T* o, I* oi) {
  int64_t best = base;
  T best_v = -std::numeric_limits<T>::infinity();
  for (int i = 0; i < K; ++i) {
    for (int j = 0; j < K; ++j) {
      const int64_t idx = base + i * g.in_w + j;
      const T v = xp[idx];
      // The same rule as the general loop, as bit masks: the winner is data-dependent, and a
      // compiler-chosen branch here mispredicts on about every other element.
      const bool take = (v > best_v) | (v != v);
      best = take_bits(take, idx, best);
      best_v = take_value(take, v, best_v);
    }
  }
  *o = best_v;
  *oi = static_cast<I>(best);
}

// kCells neighbouring cells of one output row (window starts `step` apart) at once: each cell's
// running max is a chain of dependent compare-and-selects, and interleaving independent chains
// lets the core overlap them. The same comparisons in the same order per cell as max_cell_inside.
template <typename T, int K, int kCells, typename I>
inline void max_cells_inside(const Pool2dGeometry& g, const T* xp, int64_t base, int64_t step, T* o, I* oi) {
  int64_t best[kCells];
  T best_v[kCells];
  for (int c = 0; c < kCells; ++c) {
    best[c] = base + c * step;
    best_v[c] = -std::numeric_limits<T>::infinity();
  }
  for (int i = 0; i < K; ++i) {
    for (int j = 0; j < K; ++j) {
      for (int c = 0; c < kCells; ++c) {
        const int64_t idx = base + c * step + i * g.in_w + j;
        const T v = xp[idx];
        const bool take = (v > best_v[c]) | (v != v);
        best[c] = take_bits(take, idx, best[c]);
        best_v[c] = take_value(take, v, best_v[c]);
      }
    }
  }
  for (int c = 0; c < kCells; ++c) {
    o[c] = best_v[c];
    oi[c] = static_cast<I>(best[c]);
  }
}

#ifdef __SSE2__
// The 2x2 tournament below on four outputs at a time with SSE2 (in every x86-64 CPU): even and
// odd columns are split with shuffles, "later wins if greater or NaN" is a compare mask, and the
// winner is picked with and/andnot/or. Returns how many outputs of the row it wrote (a multiple
// of 4); the scalar loop does the rest. Same results as the scalar code, bit for bit.
template <typename I>
int64_t max_2x2_row_sse(const float* row0, const float* row1, int64_t r0, int64_t in_w, int64_t out_w, float* out,
                        I* idx) {
  auto beats = [](__m128 later, __m128 earlier) {
    return _mm_or_ps(_mm_cmpgt_ps(later, earlier), _mm_cmpunord_ps(later, later));
  };
  auto pick = [](__m128 mask, __m128 a, __m128 b) { return _mm_or_ps(_mm_and_ps(mask, a), _mm_andnot_ps(mask, b)); };
  int64_t ow = 0;
  for (; ow + 4 <= out_w; ow += 4) {
    const __m128 x0 = _mm_loadu_ps(row0 + 2 * ow), x1 = _mm_loadu_ps(row0 + 2 * ow + 4);
    const __m128 y0 = _mm_loadu_ps(row1 + 2 * ow), y1 = _mm_loadu_ps(row1 + 2 * ow + 4);
    const __m128 a0 = _mm_shuffle_ps(x0, x1, _MM_SHUFFLE(2, 0, 2, 0)), a1 = _mm_shuffle_ps(x0, x1, _MM_SHUFFLE(3, 1, 3, 1));
    const __m128 b0 = _mm_shuffle_ps(y0, y1, _MM_SHUFFLE(2, 0, 2, 0)), b1 = _mm_shuffle_ps(y0, y1, _MM_SHUFFLE(3, 1, 3, 1));
    const __m128 ta = beats(a1, a0), tb = beats(b1, b0);
    const __m128 a = pick(ta, a1, a0), b = pick(tb, b1, b0);
    const __m128 t = beats(b, a);
    _mm_storeu_ps(out + ow, pick(t, b, a));
    const int ma = _mm_movemask_ps(ta), mb = _mm_movemask_ps(tb), mt = _mm_movemask_ps(t);
    for (int l = 0; l < 4; ++l) {
      const int64_t c = r0 + 2 * (ow + l);
      idx[ow + l] = static_cast<I>((mt >> l & 1) ? c + in_w + (mb >> l & 1) : c + (ma >> l & 1));
    }
  }
  return ow;
}
#endif

#if EMBER_POOL_X86
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's _mm512_undefined_*() (as in bf16_convert.cpp)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
// The 32-bit lanes of `winner` that `outs` selects, stored as the index type I (int32 or int64).
template <typename I>
__attribute__((target("avx512f"))) inline void store_indices16(I* idx, __mmask16 outs, __m512i winner) {
  if constexpr (sizeof(I) == 4) {
    _mm512_mask_storeu_epi32(idx, outs, winner);
  } else {
    _mm512_mask_storeu_epi64(idx, static_cast<__mmask8>(outs & 0xff), _mm512_cvtepi32_epi64(_mm512_castsi512_si256(winner)));
    _mm512_mask_storeu_epi64(idx + 8, static_cast<__mmask8>(outs >> 8),
                             _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(winner, 1)));
  }
}

// The same tournament on 16 outputs at a time with AVX-512: the 32 columns under them are loaded
// as two vectors (through a mask past the row's end), split into even and odd columns by one
// permute each, the "beats" tests are compare masks and the picks are blends; the indices are
// computed in 32-bit lanes (the caller checks that the plane fits) from the same masks. A row of
// 14 outputs (the cnn model's first pool) is one masked step. Same results as the scalar code,
// bit for bit.
template <typename I>
__attribute__((target("avx512f"))) void max_2x2_row_avx512(const float* row0, const float* row1, int64_t r0,
                                                            int64_t in_w, int64_t out_w, float* out, I* idx) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i one = _mm512_set1_epi32(1);
  auto beats = [](__m512 later, __m512 earlier) __attribute__((target("avx512f"))) {
    return static_cast<__mmask16>(_mm512_cmp_ps_mask(later, earlier, _CMP_GT_OQ) |
                                  _mm512_cmp_ps_mask(later, later, _CMP_UNORD_Q));
  };
  for (int64_t ow = 0; ow < out_w; ow += 16) {
    const int64_t n = std::min<int64_t>(16, out_w - ow);
    const __mmask16 lo = static_cast<__mmask16>(n >= 8 ? 0xffff : (1u << (2 * n)) - 1u);
    const __mmask16 hi = static_cast<__mmask16>(n <= 8 ? 0 : (1u << (2 * n - 16)) - 1u);
    const __mmask16 outs = static_cast<__mmask16>(n == 16 ? 0xffff : (1u << n) - 1u);
    const __m512 x0 = _mm512_maskz_loadu_ps(lo, row0 + 2 * ow), x1 = _mm512_maskz_loadu_ps(hi, row0 + 2 * ow + 16);
    const __m512 y0 = _mm512_maskz_loadu_ps(lo, row1 + 2 * ow), y1 = _mm512_maskz_loadu_ps(hi, row1 + 2 * ow + 16);
    const __m512 a0 = _mm512_permutex2var_ps(x0, even, x1), a1 = _mm512_permutex2var_ps(x0, odd, x1);
    const __m512 b0 = _mm512_permutex2var_ps(y0, even, y1), b1 = _mm512_permutex2var_ps(y0, odd, y1);
    const __mmask16 ta = beats(a1, a0), tb = beats(b1, b0);
    const __m512 a = _mm512_mask_blend_ps(ta, a0, a1), b = _mm512_mask_blend_ps(tb, b0, b1);
    const __mmask16 t = beats(b, a);
    _mm512_mask_storeu_ps(out + ow, outs, _mm512_mask_blend_ps(t, a, b));
    // Column of output lane l: r0 + 2 (ow + l); + 1 where the odd column won; + in_w in row 1.
    const __m512i c = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(r0 + 2 * ow)), _mm512_slli_epi32(
                                                                                              _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 1));
    const __m512i ia = _mm512_mask_add_epi32(c, ta, c, one);
    const __m512i ib = _mm512_add_epi32(_mm512_mask_add_epi32(c, tb, c, one), _mm512_set1_epi32(static_cast<int>(in_w)));
    const __m512i winner = _mm512_mask_blend_epi32(t, ia, ib);
    store_indices16(idx + ow, outs, winner);
  }
}
#endif

bool is_2x2_stride_2_inside(const Pool2dGeometry& g) {
  return g.kernel_h == 2 && g.kernel_w == 2 && g.stride_h == 2 && g.stride_w == 2 && g.pad_h == 0 && g.pad_w == 0 &&
         g.dilation_h == 1 && g.dilation_w == 1 && 2 * g.out_h <= g.in_h && 2 * g.out_w <= g.in_w;
}

// The most common pool of all (2x2, stride 2, inside): a two-level tournament. "The later element
// wins when strictly greater or NaN" gives the same winner in any bracketing as in row-major
// order, and the two first-round matches are independent, which halves the dependency chain.
template <typename T, typename I>
void max_forward_2x2(const Pool2dGeometry& g, const T* xp, T* op, I* ip) {
  auto beats = [](T later, T earlier) { return (later > earlier) | (later != later); };
  // AVX-512 where the CPU has it and the plane's indices fit the 32-bit lanes.
  [[maybe_unused]] const bool wide = max_pool_avx512() && g.in_h * g.in_w <= INT32_MAX;
  for (int64_t oh = 0; oh < g.out_h; ++oh) {
    const int64_t r0 = 2 * oh * g.in_w, r1 = r0 + g.in_w;
    T* orow = op + oh * g.out_w;
    I* irow = ip + oh * g.out_w;
    int64_t ow = 0;
#if EMBER_POOL_X86
    if constexpr (std::is_same_v<T, float>)
      if (wide) {
        max_2x2_row_avx512(xp + r0, xp + r1, r0, g.in_w, g.out_w, orow, irow);
        continue;
      }
#endif
#ifdef __SSE2__
    if constexpr (std::is_same_v<T, float>) ow = max_2x2_row_sse(xp + r0, xp + r1, r0, g.in_w, g.out_w, orow, irow);
#endif
    for (; ow < g.out_w; ++ow) {
      const int64_t c = 2 * ow;
      const T a0 = xp[r0 + c], a1 = xp[r0 + c + 1], b0 = xp[r1 + c], b1 = xp[r1 + c + 1];
      const bool ta = beats(a1, a0), tb = beats(b1, b0);
      const T a = take_value(ta, a1, a0), b = take_value(tb, b1, b0);
      const int64_t ia = r0 + c + ta, ib = r1 + c + tb;
      const bool t = beats(b, a);
      orow[ow] = take_value(t, b, a);
      irow[ow] = static_cast<I>(take_bits(t, ib, ia));
    }
  }
}

#if EMBER_POOL_X86
// n neighbouring output cells of one row, 16 at a time with AVX-512: output c's window covers rows
// top .. top + K - 1 and columns left0 + stride c .. + K - 1, all inside the plane (stride 1 or 2).
// Each of the K x K taps is one vector of 16 cells' values — a masked load (stride 1), or two and
// a permute that keeps the even columns (stride 2) — and "a later tap wins when strictly greater
// or NaN" is a compare mask applied with blends, in max_cell_inside's order: the same winners and
// indices, bit for bit. Indices are 32-bit lanes (the caller checks that the plane fits).
template <int K, typename I>
__attribute__((target("avx512f"))) void max_row_avx512(const float* xp, int64_t in_w, int64_t top, int64_t left0,
                                                        int64_t stride, int64_t n, float* out, I* idx) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i even = _mm512_slli_epi32(lane, 1);
  auto first = [](int64_t count) {  // a mask of the first `count` lanes (0..16)
    return static_cast<__mmask16>(count >= 16 ? 0xffff : count <= 0 ? 0 : (1u << count) - 1u);
  };
  for (int64_t c0 = 0; c0 < n; c0 += 16) {
    const int64_t m = std::min<int64_t>(16, n - c0), left = left0 + stride * c0;
    const int64_t span = stride * (m - 1) + 1;  // the columns one tap reads: at most 31
    const __mmask16 lo = first(span), hi = first(span - 16), outs = first(m);
    // The first tap's position of each cell: where a window of -inf values keeps its index.
    const __m512i base = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(top * in_w + left)),
                                          _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int>(stride))));
    __m512 best = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    __m512i best_i = base;
    for (int i = 0; i < K; ++i) {
      const float* row = xp + (top + i) * in_w + left;
      for (int j = 0; j < K; ++j) {
        __m512 v;
        if (stride == 1) {
          v = _mm512_maskz_loadu_ps(lo, row + j);
        } else {
          const __m512 a = _mm512_maskz_loadu_ps(lo, row + j), b = _mm512_maskz_loadu_ps(hi, row + j + 16);
          v = _mm512_permutex2var_ps(a, even, b);
        }
        const __mmask16 take = static_cast<__mmask16>(_mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) |
                                                      _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
        best = _mm512_mask_blend_ps(take, best, v);
        best_i = _mm512_mask_blend_epi32(take, best_i,
                                         _mm512_add_epi32(base, _mm512_set1_epi32(static_cast<int>(i * in_w + j))));
      }
    }
    _mm512_mask_storeu_ps(out + c0, outs, best);
    store_indices16(idx + c0, outs, best_i);
  }
}
#endif

// One plane of max pooling, any geometry. The 2x2 stride-2 pool without padding is the
// tournament above. Otherwise each output row splits into the cells whose window lies inside the
// input and the border cells around them (padding, a partial ceil_mode window): square 2x2 and 3x3
// windows with dilation 1 take the fixed-size loops for the inside cells — 16 cells at a time with
// AVX-512 for strides 1 and 2 (ResNet's 3x3 / 2, pad 1), else four at a time — and every other
// cell the general loop.
template <typename T, typename I>
void max_forward_plane(const Pool2dGeometry& g, const T* xp, T* op, I* ip) {
  if (g.pad_h == 0 && g.pad_w == 0 && is_2x2_stride_2_inside(g)) return max_forward_2x2<T, I>(g, xp, op, ip);
  const int64_t K = g.kernel_h;
  const bool fixed = g.dilation_h == 1 && g.dilation_w == 1 && g.kernel_w == K && (K == 2 || K == 3);
  [[maybe_unused]] const bool wide = fixed && max_pool_avx512() && std::is_same_v<T, float> &&
                                     g.stride_w <= 2 && g.in_h * g.in_w <= INT32_MAX;
  // Output columns [ow_lo, ow_hi) have windows inside the input's columns.
  const int64_t ow_lo = std::min(g.out_w, (g.pad_w + g.stride_w - 1) / g.stride_w);
  const int64_t last = g.in_w - g.kernel_w + g.pad_w;  // the largest inside window start + pad
  const int64_t ow_hi = last < 0 ? ow_lo : std::clamp(last / g.stride_w + 1, ow_lo, g.out_w);
  auto general_cell = [&](int64_t oh, int64_t ow) {
    int64_t h0 = oh * g.stride_h - g.pad_h, w0 = ow * g.stride_w - g.pad_w;
    const int64_t h1 = std::min(h0 + (g.kernel_h - 1) * g.dilation_h + 1, g.in_h);
    const int64_t w1 = std::min(w0 + (g.kernel_w - 1) * g.dilation_w + 1, g.in_w);
    while (h0 < 0) h0 += g.dilation_h;  // first tap that is not padding
    while (w0 < 0) w0 += g.dilation_w;
    // PyTorch's rule: start from -inf at the first tap; a strictly larger value or a NaN takes
    // over, so ties keep the first position in row-major order (and NaN propagates).
    int64_t best = h0 * g.in_w + w0;
    T best_v = -std::numeric_limits<T>::infinity();
    for (int64_t ih = h0; ih < h1; ih += g.dilation_h) {
      for (int64_t iw = w0; iw < w1; iw += g.dilation_w) {
        const int64_t i = ih * g.in_w + iw;
        const T v = xp[i];
        // Branch-free: which element wins is data-dependent, so a branch mispredicts often.
        const bool take = (v > best_v) | (v != v);
        best_v = take_value(take, v, best_v);
        best = take_bits(take, i, best);
      }
    }
    op[oh * g.out_w + ow] = best_v;
    ip[oh * g.out_w + ow] = static_cast<I>(best);
  };
  for (int64_t oh = 0; oh < g.out_h; ++oh) {
    const int64_t top = oh * g.stride_h - g.pad_h;
    if (!fixed || top < 0 || top + K > g.in_h) {
      for (int64_t ow = 0; ow < g.out_w; ++ow) general_cell(oh, ow);
      continue;
    }
    for (int64_t ow = 0; ow < ow_lo; ++ow) general_cell(oh, ow);
    T* orow = op + oh * g.out_w;
    I* irow = ip + oh * g.out_w;
    auto base = [&](int64_t ow) { return top * g.in_w + ow * g.stride_w - g.pad_w; };
    int64_t ow = ow_lo;
#if EMBER_POOL_X86
    if constexpr (std::is_same_v<T, float>)
      if (wide && ow < ow_hi) {
        const int64_t left = ow * g.stride_w - g.pad_w;
        if (K == 3) max_row_avx512<3, I>(xp, g.in_w, top, left, g.stride_w, ow_hi - ow, orow + ow, irow + ow);
        else max_row_avx512<2, I>(xp, g.in_w, top, left, g.stride_w, ow_hi - ow, orow + ow, irow + ow);
        ow = ow_hi;
      }
#endif
    if (K == 3)
      for (; ow + 4 <= ow_hi; ow += 4) max_cells_inside<T, 3, 4, I>(g, xp, base(ow), g.stride_w, orow + ow, irow + ow);
    for (; ow < ow_hi; ++ow) {
      if (K == 3) max_cell_inside<T, 3, I>(g, xp, base(ow), orow + ow, irow + ow);
      else max_cell_inside<T, 2, I>(g, xp, base(ow), orow + ow, irow + ow);
    }
    for (; ow < g.out_w; ++ow) general_cell(oh, ow);
  }
}

template <typename T, typename I>
void max_forward_impl(const Pool2dGeometry& g, const T* x, T* out, I* indices) {
  const int64_t in_plane = g.in_h * g.in_w, out_plane = g.out_h * g.out_w;
  parallel_for(0, g.planes, plane_grain(g), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) max_forward_plane<T, I>(g, x + p * in_plane, out + p * out_plane, indices + p * out_plane);
  });
}

// Each output's gradient goes to the input its window picked. Overlapping windows (stride <
// kernel) can pick the same input: accumulate. Windows that do not overlap (Disjoint) send each
// input at most one gradient: a copy, exact in any dtype. The range test guards against a window
// with no tap inside the input (impossible with the checked padding <= kernel / 2, but a bad index
// must not write out of bounds).
template <bool Disjoint, typename T, typename I>
void max_backward_plane(const Pool2dGeometry& g, const T* go, const I* ip, T* gi) {
  const int64_t in_plane = g.in_h * g.in_w, out_plane = g.out_h * g.out_w;
  std::fill(gi, gi + in_plane, T(0));
  for (int64_t o = 0; o < out_plane; ++o) {
    if (ip[o] < 0 || ip[o] >= in_plane) continue;
    if constexpr (Disjoint)
      gi[ip[o]] = go[o];
    else
      gi[ip[o]] += go[o];
  }
}

template <bool Disjoint, typename T, typename I>
void max_backward_impl(const Pool2dGeometry& g, const T* grad_out, const I* indices, T* grad_in) {
  const int64_t in_plane = g.in_h * g.in_w, out_plane = g.out_h * g.out_w;
  parallel_for(0, g.planes, plane_grain(g), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      max_backward_plane<Disjoint>(g, grad_out + p * out_plane, indices + p * out_plane, grad_in + p * in_plane);
  });
}

// 16-bit gradients of overlapping windows (an input can collect several): per plane, the output
// gradients widened and summed in a per-thread f32 plane, each input's sum rounded once — the
// f32 kernel's sums, without tensor-sized f32 copies.
template <typename T, typename I>
void max_backward_16bit_overlapping(const Pool2dGeometry& g, const T* grad_out, const I* indices, T* grad_in) {
  const int64_t in_plane = g.in_h * g.in_w, out_plane = g.out_h * g.out_w;
  parallel_for(0, g.planes, plane_grain(g), [&](int64_t p0, int64_t p1) {
    thread_local std::vector<float> go_buf, gi_buf;
    if (static_cast<int64_t>(go_buf.size()) < out_plane) go_buf.resize(static_cast<size_t>(out_plane));
    if (static_cast<int64_t>(gi_buf.size()) < in_plane) gi_buf.resize(static_cast<size_t>(in_plane));
    for (int64_t p = p0; p < p1; ++p) {
      to_f32(grad_out + p * out_plane, go_buf.data(), out_plane);
      max_backward_plane<false>(g, go_buf.data(), indices + p * out_plane, gi_buf.data());
      from_f32(gi_buf.data(), grad_in + p * in_plane, in_plane);
    }
  });
}

// 16-bit (bf16, f16) max pooling of one plane: the plane is widened to float in a per-thread
// buffer (exact), the f32 code picks the winners (the vector rows where built), and the output
// plane is narrowed back (exact: a winner is one of the inputs; a NaN is quieted, as the scalar
// conversion does). Both conversions run 16 elements at a time where the CPU can
// (bf16_convert.h), a whole plane at a time, so short rows leave no scalar tails and no
// tensor-sized f32 copy is made. Same winners and indices as f32.
template <typename T, typename I>
void max_forward_16bit_plane(const Pool2dGeometry& g, const T* xp, T* op, I* ip) {
  thread_local std::vector<float> in_buf, out_buf;
  const int64_t in_plane = g.in_h * g.in_w, out_plane = g.out_h * g.out_w;
  if (static_cast<int64_t>(in_buf.size()) < in_plane) in_buf.resize(static_cast<size_t>(in_plane));
  if (static_cast<int64_t>(out_buf.size()) < out_plane) out_buf.resize(static_cast<size_t>(out_plane));
  to_f32(xp, in_buf.data(), in_plane);
  max_forward_plane<float, I>(g, in_buf.data(), out_buf.data(), ip);
  from_f32(out_buf.data(), op, out_plane);
}

bool windows_disjoint(const Pool2dGeometry& g) {
  return g.stride_h >= (g.kernel_h - 1) * g.dilation_h + 1 && g.stride_w >= (g.kernel_w - 1) * g.dilation_w + 1;
}

}  // namespace

// Max pooling picks values without arithmetic, so bf16 and f16 never make tensor-sized f32 copies:
// the forward widens a plane at a time into the f32 code, the backward of non-overlapping windows
// copies 16-bit gradients directly, and that of overlapping windows sums a plane at a time in f32
// — the same winners, indices and sums as f32.
void max_pool2d_forward(DType dtype, DType index_dtype, const Pool2dGeometry& g, const void* x, void* out,
                        void* indices) {
  check_max_pool_indices("max_pool2d", index_dtype, g);
  EMBER_DISPATCH_INDEX(index_dtype, "max_pool2d", [&] {
    using I = scalar_t;
    I* const ind = static_cast<I*>(indices);
    if (is_low_precision(dtype)) {
      const int64_t in_plane = g.in_h * g.in_w, out_plane = g.out_h * g.out_w;
      auto planes = [&]<typename T>(const T* xb, T* ob) {
        parallel_for(0, g.planes, plane_grain(g), [&](int64_t p0, int64_t p1) {
          for (int64_t p = p0; p < p1; ++p)
            max_forward_16bit_plane<T, I>(g, xb + p * in_plane, ob + p * out_plane, ind + p * out_plane);
        });
      };
      if (dtype == DType::bf16) planes(static_cast<const BFloat16*>(x), static_cast<BFloat16*>(out));
      else planes(static_cast<const Half*>(x), static_cast<Half*>(out));
      return;
    }
    EMBER_DISPATCH_FLOAT(dtype, "max_pool2d", [&] {
      max_forward_impl<scalar_t, I>(g, static_cast<const scalar_t*>(x), static_cast<scalar_t*>(out), ind);
    });
  });
}

void max_pool2d_backward(DType dtype, DType index_dtype, const Pool2dGeometry& g, const void* grad_out,
                         const void* indices, void* grad_in) {
  check_max_pool_indices("max_pool2d backward", index_dtype, g);
  EMBER_DISPATCH_INDEX(index_dtype, "max_pool2d backward", [&] {
    using I = scalar_t;
    const I* const ind = static_cast<const I*>(indices);
    if (dtype == DType::bf16 && windows_disjoint(g))
      return max_backward_impl<true>(g, static_cast<const BFloat16*>(grad_out), ind, static_cast<BFloat16*>(grad_in));
    if (dtype == DType::f16 && windows_disjoint(g))
      return max_backward_impl<true>(g, static_cast<const Half*>(grad_out), ind, static_cast<Half*>(grad_in));
    if (dtype == DType::bf16)
      return max_backward_16bit_overlapping(g, static_cast<const BFloat16*>(grad_out), ind,
                                            static_cast<BFloat16*>(grad_in));
    if (dtype == DType::f16)
      return max_backward_16bit_overlapping(g, static_cast<const Half*>(grad_out), ind, static_cast<Half*>(grad_in));
    EMBER_DISPATCH_FLOAT(dtype, "max_pool2d backward", [&] {
      max_backward_impl<false, scalar_t>(g, static_cast<const scalar_t*>(grad_out), ind,
                                         static_cast<scalar_t*>(grad_in));
    });
  });
}

// ---- average -------------------------------------------------------------------------------------

namespace {

// The in-bounds part of one average window and its divisor.
struct AvgWindow {
  int64_t h0, h1, w0, w1;
  int64_t divisor;
};

AvgWindow avg_window(const Pool2dGeometry& g, bool count_include_pad, int64_t oh, int64_t ow) {
  int64_t h0 = oh * g.stride_h - g.pad_h, w0 = ow * g.stride_w - g.pad_w;
  // A ceil_mode window may reach past the right padding; those positions never count.
  int64_t h1 = std::min(h0 + g.kernel_h, g.in_h + g.pad_h), w1 = std::min(w0 + g.kernel_w, g.in_w + g.pad_w);
  const int64_t padded_size = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, g.in_h);
  w1 = std::min(w1, g.in_w);
  const int64_t inside = std::max<int64_t>(0, h1 - h0) * std::max<int64_t>(0, w1 - w0);
  return {h0, h1, w0, w1, count_include_pad ? padded_size : inside};
}

template <typename T>
void avg_forward_impl(const Pool2dGeometry& g, bool count_include_pad, const T* x, T* out) {
  const int64_t in_plane = g.in_h * g.in_w, out_plane = g.out_h * g.out_w;
  parallel_for(0, g.planes, plane_grain(g), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const T* xp = x + p * in_plane;
      T* op = out + p * out_plane;
      for (int64_t oh = 0; oh < g.out_h; ++oh) {
        for (int64_t ow = 0; ow < g.out_w; ++ow) {
          const AvgWindow w = avg_window(g, count_include_pad, oh, ow);
          double acc = 0;  // double even for float32: windows are summed exactly enough
          for (int64_t ih = w.h0; ih < w.h1; ++ih)
            for (int64_t iw = w.w0; iw < w.w1; ++iw) acc += static_cast<double>(xp[ih * g.in_w + iw]);
          // An empty window (only possible with padding) averages to 0, as PyTorch.
          op[oh * g.out_w + ow] = w.divisor > 0 && w.h0 < w.h1 && w.w0 < w.w1 ? static_cast<T>(acc / w.divisor) : T(0);
        }
      }
    }
  });
}

template <typename T>
void avg_backward_impl(const Pool2dGeometry& g, bool count_include_pad, const T* grad_out, T* grad_in) {
  const int64_t in_plane = g.in_h * g.in_w, out_plane = g.out_h * g.out_w;
  parallel_for(0, g.planes, plane_grain(g), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      T* gi = grad_in + p * in_plane;
      const T* go = grad_out + p * out_plane;
      std::fill(gi, gi + in_plane, T(0));
      for (int64_t oh = 0; oh < g.out_h; ++oh) {
        for (int64_t ow = 0; ow < g.out_w; ++ow) {
          const AvgWindow w = avg_window(g, count_include_pad, oh, ow);
          if (w.divisor <= 0) continue;
          const T share = go[oh * g.out_w + ow] / static_cast<T>(w.divisor);
          for (int64_t ih = w.h0; ih < w.h1; ++ih)
            for (int64_t iw = w.w0; iw < w.w1; ++iw) gi[ih * g.in_w + iw] += share;
        }
      }
    }
  });
}

}  // namespace

void avg_pool2d_forward(DType dtype, const Pool2dGeometry& g, bool count_include_pad, const void* x, void* out) {
  if (is_low_precision(dtype)) {  // Note [Low-precision CPU kernels through f32] in widen.h
    const Widened xf(dtype, x, g.planes * g.in_h * g.in_w);
    Widened of(dtype, nullptr, g.planes * g.out_h * g.out_w);
    avg_pool2d_forward(DType::f32, g, count_include_pad, xf.data(), of.data());
    of.store(out);
    return;
  }
  EMBER_DISPATCH_FLOAT(dtype, "avg_pool2d", [&] {
    avg_forward_impl<scalar_t>(g, count_include_pad, static_cast<const scalar_t*>(x), static_cast<scalar_t*>(out));
  });
}

void avg_pool2d_backward(DType dtype, const Pool2dGeometry& g, bool count_include_pad, const void* grad_out,
                         void* grad_in) {
  if (is_low_precision(dtype)) {  // Note [Low-precision CPU kernels through f32] in widen.h
    const Widened gof(dtype, grad_out, g.planes * g.out_h * g.out_w);
    Widened gif(dtype, nullptr, g.planes * g.in_h * g.in_w);
    avg_pool2d_backward(DType::f32, g, count_include_pad, gof.data(), gif.data());
    gif.store(grad_in);
    return;
  }
  EMBER_DISPATCH_FLOAT(dtype, "avg_pool2d backward", [&] {
    avg_backward_impl<scalar_t>(g, count_include_pad, static_cast<const scalar_t*>(grad_out),
                                static_cast<scalar_t*>(grad_in));
  });
}

// ---- adaptive average ----------------------------------------------------------------------------

namespace {

// [floor(i * in / out), ceil((i + 1) * in / out)): neighbouring cells may overlap by one.
int64_t adaptive_start(int64_t i, int64_t out, int64_t in) { return (i * in) / out; }
int64_t adaptive_end(int64_t i, int64_t out, int64_t in) { return ((i + 1) * in + out - 1) / out; }

template <typename T>
void adaptive_forward_impl(const Pool2dGeometry& g, const T* x, T* out) {
  const int64_t in_plane = g.in_h * g.in_w, out_plane = g.out_h * g.out_w;
  parallel_for(0, g.planes, plane_grain(g), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const T* xp = x + p * in_plane;
      T* op = out + p * out_plane;
      for (int64_t oh = 0; oh < g.out_h; ++oh) {
        const int64_t h0 = adaptive_start(oh, g.out_h, g.in_h), h1 = adaptive_end(oh, g.out_h, g.in_h);
        for (int64_t ow = 0; ow < g.out_w; ++ow) {
          const int64_t w0 = adaptive_start(ow, g.out_w, g.in_w), w1 = adaptive_end(ow, g.out_w, g.in_w);
          double acc = 0;
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) acc += static_cast<double>(xp[ih * g.in_w + iw]);
          op[oh * g.out_w + ow] = static_cast<T>(acc / static_cast<double>((h1 - h0) * (w1 - w0)));
        }
      }
    }
  });
}

template <typename T>
void adaptive_backward_impl(const Pool2dGeometry& g, const T* grad_out, T* grad_in) {
  const int64_t in_plane = g.in_h * g.in_w, out_plane = g.out_h * g.out_w;
  parallel_for(0, g.planes, plane_grain(g), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      T* gi = grad_in + p * in_plane;
      const T* go = grad_out + p * out_plane;
      std::fill(gi, gi + in_plane, T(0));
      for (int64_t oh = 0; oh < g.out_h; ++oh) {
        const int64_t h0 = adaptive_start(oh, g.out_h, g.in_h), h1 = adaptive_end(oh, g.out_h, g.in_h);
        for (int64_t ow = 0; ow < g.out_w; ++ow) {
          const int64_t w0 = adaptive_start(ow, g.out_w, g.in_w), w1 = adaptive_end(ow, g.out_w, g.in_w);
          const T share = go[oh * g.out_w + ow] / static_cast<T>((h1 - h0) * (w1 - w0));
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) gi[ih * g.in_w + iw] += share;
        }
      }
    }
  });
}

}  // namespace

void adaptive_avg_pool2d_forward(DType dtype, const Pool2dGeometry& g, const void* x, void* out) {
  if (is_low_precision(dtype)) {  // Note [Low-precision CPU kernels through f32] in widen.h
    const Widened xf(dtype, x, g.planes * g.in_h * g.in_w);
    Widened of(dtype, nullptr, g.planes * g.out_h * g.out_w);
    adaptive_avg_pool2d_forward(DType::f32, g, xf.data(), of.data());
    of.store(out);
    return;
  }
  EMBER_DISPATCH_FLOAT(dtype, "adaptive_avg_pool2d", [&] {
    adaptive_forward_impl<scalar_t>(g, static_cast<const scalar_t*>(x), static_cast<scalar_t*>(out));
  });
}

void adaptive_avg_pool2d_backward(DType dtype, const Pool2dGeometry& g, const void* grad_out, void* grad_in) {
  if (is_low_precision(dtype)) {  // Note [Low-precision CPU kernels through f32] in widen.h
    const Widened gof(dtype, grad_out, g.planes * g.out_h * g.out_w);
    Widened gif(dtype, nullptr, g.planes * g.in_h * g.in_w);
    adaptive_avg_pool2d_backward(DType::f32, g, gof.data(), gif.data());
    gif.store(grad_in);
    return;
  }
  EMBER_DISPATCH_FLOAT(dtype, "adaptive_avg_pool2d backward", [&] {
    adaptive_backward_impl<scalar_t>(g, static_cast<const scalar_t*>(grad_out), static_cast<scalar_t*>(grad_in));
  });
}

}  // namespace ember::kernels::cpu
