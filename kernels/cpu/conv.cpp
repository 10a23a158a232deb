// CPU 2-D convolution: im2col + GEMM, and the direct references. See Note [im2col] in conv.h.

#include "conv.h"

#include <algorithm>
#include <climits>
#include <memory>
#include <type_traits>
#include <vector>

#include "../../core/error.h"
#include "gemm.h"
#include "conv_parts.h"
#include "winograd/conv_winograd.h"
#include "bf16/amx_tiles.h"
#include "bf16/conv_amx.h"
#include "bf16/gemm_bf16.h"
#include "bf16/bf16_convert.h"
#include "../../core/cpu/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define EMBER_CONV_X86 1
#else
#define EMBER_CONV_X86 0
#endif

namespace ember::kernels::cpu {

namespace {

using conv_detail::ImageSplit;
using conv_detail::run_parts;
using conv_detail::scratch;
using conv_detail::Scratch;
using conv_detail::split_images;

// ---- im2col / col2im ---------------------------------------------------------------------------

// The output columns ox whose input column ox*stride + x_off lies inside [0, w).
struct ValidRange {
  int64_t lo, hi;
};
ValidRange valid_range(int64_t x_off, int64_t stride, int64_t w, int64_t out_w) {
  const int64_t lo = x_off >= 0 ? 0 : (-x_off + stride - 1) / stride;
  const int64_t last = w - 1 - x_off;  // ox * stride <= last
  const int64_t hi = last < 0 ? 0 : std::min(out_w, last / stride + 1);
  return {std::min(lo, hi), hi};
}

// dst[i] = src[2 i] for i < n: a row of a stride-2 convolution's im2col (ResNet's stem and its
// strided layers). With AVX-512 16 outputs at a time: 16-bit values load as 16 32-bit pairs
// (src[2i], src[2i + 1]) and VPMOVDW keeps each pair's low half, src[2i]; floats load as two
// vectors and a permute keeps the even ones. Masked loads read nothing past src[2 (n - 1)].
#if EMBER_CONV_X86
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's _mm512_undefined_*() (as in pool.cpp)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
template <typename T>
__attribute__((target("avx512f,avx512bw"))) void copy_stride2_avx512(const T* src, T* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t m = std::min<int64_t>(16, n - i), span = 2 * m - 1;  // elements read
    if constexpr (sizeof(T) == 2) {
      const __m512i v = _mm512_maskz_loadu_epi16(span >= 32 ? ~__mmask32{0} : (__mmask32{1} << span) - 1, src + 2 * i);
      _mm512_mask_cvtepi32_storeu_epi16(dst + i, static_cast<__mmask16>((1u << m) - 1u), v);
    } else {
      static_assert(std::is_same_v<T, float>);
      const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
      const __mmask16 lo = static_cast<__mmask16>(span >= 16 ? 0xffff : (1u << span) - 1u);
      const __mmask16 hi = static_cast<__mmask16>(span <= 16 ? 0 : (1u << (span - 16)) - 1u);
      const __m512 a = _mm512_maskz_loadu_ps(lo, src + 2 * i), b = _mm512_maskz_loadu_ps(hi, src + 2 * i + 16);
      _mm512_mask_storeu_ps(dst + i, static_cast<__mmask16>((1u << m) - 1u), _mm512_permutex2var_ps(a, even, b));
    }
  }
}
#endif

// Whether the row loops below take their AVX-512 versions (F and BW, read once).
bool rows_avx512() {
  static const bool on = cpu_features().avx512f && cpu_features().avx512bw;
  return on;
}

template <typename T>
void copy_stride2(const T* src, T* dst, int64_t n) {
#if EMBER_CONV_X86
  if constexpr (sizeof(T) == 2 || std::is_same_v<T, float>)
    if (rows_avx512()) return copy_stride2_avx512(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = src[2 * i];
}

// A stride-1 row of im2col and col2im. Deep layers have rows of a few elements (7 at ResNet's
// layer4), where a fill, a copy and a fill per row cost more than the data: with AVX-512 a row
// is masked loads and stores, 16 floats or 32 16-bit values at a time. Lanes outside the mask
// are neither read nor written, so `src` may point before the start of the input row.
//   copy_row: dst[i] = lo <= i < hi ? src[i] : 0 for i < n.
//   add_row<1>: dst[i] += src[i] for lo <= i < hi (the same one add per element as the plain loop);
//   add_row<2>: dst[2 i] += src[i], the rows of a stride-2 convolution's col2im.
#if EMBER_CONV_X86
// Lanes [lo, hi) of a V-lane chunk starting at i0 (as a mask of V bits).
inline uint64_t lanes_in(int64_t i0, int64_t V, int64_t lo, int64_t hi) {
  const int64_t a = std::clamp<int64_t>(lo - i0, 0, V), b = std::clamp<int64_t>(hi - i0, 0, V);
  const uint64_t below_b = b >= 64 ? ~uint64_t{0} : (uint64_t{1} << b) - 1, below_a = (uint64_t{1} << a) - 1;
  return below_b & ~below_a;
}

template <typename T>
__attribute__((target("avx512f,avx512bw"))) void copy_row_avx512(const T* src, T* dst, int64_t n, int64_t lo,
                                                                 int64_t hi) {
  constexpr int64_t V = 64 / sizeof(T);
  for (int64_t i = 0; i < n; i += V) {
    const uint64_t in = lanes_in(i, V, lo, hi), all = lanes_in(i, V, 0, n);
    if constexpr (sizeof(T) == 2)
      _mm512_mask_storeu_epi16(dst + i, static_cast<__mmask32>(all), _mm512_maskz_loadu_epi16(static_cast<__mmask32>(in), src + i));
    else
      _mm512_mask_storeu_ps(dst + i, static_cast<__mmask16>(all), _mm512_maskz_loadu_ps(static_cast<__mmask16>(in), src + i));
  }
}

__attribute__((target("avx512f"))) void add_row_avx512(const float* src, float* dst, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i += 16) {
    const __mmask16 m = static_cast<__mmask16>(lanes_in(i, 16, lo, hi));
    _mm512_mask_storeu_ps(dst + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, dst + i), _mm512_maskz_loadu_ps(m, src + i)));
  }
}

// dst[2 i] += src[i] for lo <= i < hi: 16 sources spread over the even lanes of two vectors
// (VEXPANDPS), added and stored through an even-lane mask, so the odd elements are not touched
// (adding a zero would turn a -0 into +0).
__attribute__((target("avx512f"))) void add_row_stride2_avx512(const float* src, float* dst, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i += 16) {
    const int64_t n = std::min<int64_t>(16, hi - i);
    const __m512 v = _mm512_maskz_loadu_ps(static_cast<__mmask16>(lanes_in(0, 16, 0, n)), src + i);
    const __m512 halves[2] = {_mm512_maskz_expand_ps(0x5555, v),
                              _mm512_maskz_expand_ps(0x5555, _mm512_shuffle_f32x4(v, v, 0x0e))};  // v[8..15] down
    for (int h = 0; h < 2; ++h) {
      const int64_t in_half = std::clamp<int64_t>(n - 8 * h, 0, 8);  // sources in this half
      const __mmask16 m = static_cast<__mmask16>(0x5555u & ((1u << (2 * in_half)) - 1u));
      float* d = dst + 2 * i + 16 * h;
      _mm512_mask_storeu_ps(d, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, d), halves[h]));
    }
  }
}
#endif

template <typename T>
void copy_row(const T* src, T* dst, int64_t n, int64_t lo, int64_t hi) {
#if EMBER_CONV_X86
  if constexpr (sizeof(T) == 2 || std::is_same_v<T, float>)
    if (rows_avx512()) return copy_row_avx512(src, dst, n, lo, hi);
#endif
  std::fill(dst, dst + lo, T(0));
  if (lo < hi) std::copy(src + lo, src + hi, dst + lo);
  std::fill(dst + hi, dst + n, T(0));
}

// dst[kStride i] += src[i] for lo <= i < hi (with AVX-512: add_row_avx512, add_row_stride2_avx512).
template <int kStride, typename T>
void add_row(const T* src, T* dst, int64_t lo, int64_t hi) {
#if EMBER_CONV_X86
  if constexpr (std::is_same_v<T, float>) {
    if (rows_avx512()) {
      if constexpr (kStride == 1) return add_row_avx512(src, dst, lo, hi);
      if constexpr (kStride == 2) return add_row_stride2_avx512(src, dst, lo, hi);
    }
  }
#endif
  for (int64_t i = lo; i < hi; ++i) dst[kStride * i] += src[i];
}

// im2col of a "same" convolution (stride 1, no dilation, out_w == w: 3x3 with padding 1): col row
// (c, i, j) is channel c's plane shifted by (i - pad_h, j - pad_w), so its valid output rows are
// one contiguous copy of the plane, then the columns that wrapped into the neighbouring row (the
// padding) zeroed. Deep layers' rows are a few elements (7 at ResNet's layer4, 14 in the cnn
// model), where a masked copy per row cost as much as the AMX product that follows.
template <typename T>
void im2col_same_width(const Conv2dGeometry& g, const T* x, T* col, int64_t ld) {
  const int64_t w = g.w, ohw = g.out_h * w, plane = g.h * w;
  for (int64_t c = 0; c < g.c_in; ++c) {
    const T* xc = x + c * plane;
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        T* row = col + ((c * g.kh + i) * g.kw + j) * ld;
        const int64_t dy = i - g.pad_h, dx = j - g.pad_w;
        const int64_t oy0 = std::clamp<int64_t>(-dy, 0, g.out_h), oy1 = std::clamp<int64_t>(g.h - dy, oy0, g.out_h);
        std::fill(row, row + oy0 * w, T(0));
        std::fill(row + oy1 * w, row + ohw, T(0));
        if (oy0 == oy1) continue;
        // dst [oy0 w, oy1 w) from the plane at + dy w + dx, the ends clipped to the plane.
        const int64_t lo = oy0 * w, hi = oy1 * w, shift = dy * w + dx;
        const int64_t src_lo = std::max<int64_t>(lo + shift, 0), src_hi = std::min<int64_t>(hi + shift, plane);
        std::fill(row + lo, row + (src_lo - shift), T(0));
        std::copy(xc + src_lo, xc + src_hi, row + (src_lo - shift));
        std::fill(row + (src_hi - shift), row + hi, T(0));
        for (int64_t oy = oy0; oy < oy1 && dx != 0; ++oy) {  // the columns past the row's ends
          T* r = row + oy * w;
          if (dx < 0) std::fill(r, r + std::min<int64_t>(-dx, w), T(0));
          else std::fill(r + std::max<int64_t>(w - dx, 0), r + w, T(0));
        }
      }
  }
}

// col's rows are `ld` apart: ld = out_h * out_w for one image's col, B * out_h * out_w for an
// image's columns inside a chunk of B images (Note [Chunks of images]).
template <typename T>
void im2col_impl(const Conv2dGeometry& g, const T* x, T* col, int64_t ld) {
  if (g.stride_h == 1 && g.stride_w == 1 && g.dil_h == 1 && g.dil_w == 1 && g.out_w == g.w)
    return im2col_same_width(g, x, col, ld);
  for (int64_t c = 0; c < g.c_in; ++c) {
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        T* row = col + ((c * g.kh + i) * g.kw + j) * ld;
        const int64_t x_off = j * g.dil_w - g.pad_w;
        const ValidRange r = valid_range(x_off, g.stride_w, g.w, g.out_w);
        for (int64_t oy = 0; oy < g.out_h; ++oy) {
          T* dst = row + oy * g.out_w;
          const int64_t iy = oy * g.stride_h - g.pad_h + i * g.dil_h;
          if (iy < 0 || iy >= g.h) {
            std::fill(dst, dst + g.out_w, T(0));
            continue;
          }
          // Input column of output column ox: ox * stride_w + x_off (in range for ox in [lo, hi)).
          const T* src = x + (c * g.h + iy) * g.w;
          if (g.stride_w == 1) {
            copy_row(src + x_off, dst, g.out_w, r.lo, r.hi);
            continue;
          }
          std::fill(dst, dst + r.lo, T(0));
          if (g.stride_w == 2) {
            if (r.lo < r.hi) copy_stride2(src + 2 * r.lo + x_off, dst + r.lo, r.hi - r.lo);
          } else {
            for (int64_t ox = r.lo; ox < r.hi; ++ox) dst[ox] = src[ox * g.stride_w + x_off];
          }
          std::fill(dst + r.hi, dst + g.out_w, T(0));
        }
      }
    }
  }
}

template <typename T>
void col2im_impl(const Conv2dGeometry& g, const T* col, T* x, int64_t ld) {
  for (int64_t c = 0; c < g.c_in; ++c) {
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        const T* row = col + ((c * g.kh + i) * g.kw + j) * ld;
        const int64_t x_off = j * g.dil_w - g.pad_w;
        const ValidRange r = valid_range(x_off, g.stride_w, g.w, g.out_w);
        for (int64_t oy = 0; oy < g.out_h; ++oy) {
          const int64_t iy = oy * g.stride_h - g.pad_h + i * g.dil_h;
          if (iy < 0 || iy >= g.h) continue;
          const T* src = row + oy * g.out_w;
          T* dst = x + (c * g.h + iy) * g.w;
          if (g.stride_w == 1) {
            add_row<1>(src, dst + x_off, r.lo, r.hi);
            continue;
          }
          if (g.stride_w == 2) {
            add_row<2>(src, dst + x_off, r.lo, r.hi);
            continue;
          }
          for (int64_t ox = r.lo; ox < r.hi; ++ox) dst[ox * g.stride_w + x_off] += src[ox];
        }
      }
    }
  }
}

// ---- the per-image driver ----------------------------------------------------------------------

// A 1x1, stride-1, unpadded convolution reads the image itself as its col matrix.
bool is_pointwise(const Conv2dGeometry& g) {
  return g.kh == 1 && g.kw == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 && g.pad_w == 0;
}

// GEMM dimensions must fit BLAS's int; check before any parallel region (an exception thrown
// inside one cannot leave it).
void check_sizes(const Conv2dGeometry& g) {
  const int64_t ohw = g.out_h * g.out_w, kk = g.c_in / g.groups * g.kh * g.kw;
  for (int64_t v : {ohw, kk, g.c_out, g.c_in * g.kh * g.kw})
    EMBER_CHECK(v <= INT_MAX, "conv2d: a GEMM dimension (", v, ") does not fit BLAS's 32-bit int");
}

// ---- im2col + GEMM, a chunk of images per GEMM ------------------------------------------------
//
// Note [Chunks of images]
// One image's GEMMs are small: the cnn model's second layer multiplies (64, 288) by (288, 196)
// per image, and its weight gradient sums 64 products of K = 196. OpenBLAS packs both operands
// for every call and its kernels want long dimensions, so per-image GEMMs ran at about half the
// speed of a large sgemm. The images of a part are therefore taken B at a time: im2col writes
// image b's columns at column offset b * out_h * out_w of one (C_in kh kw, B out_h out_w) col,
// so the chunk is one GEMM with B times the columns:
//   forward:  ybuf (C_out, B ohw) = w @ col,            then each image's slice is copied to y;
//   data:     dcol (C_in kh kw, B ohw) = w^T @ gybuf,   gybuf holding the B images' dy side by side;
//   weight:   dw += gybuf (C_out, B ohw) @ col^T        one GEMM with K = B ohw instead of B with K = ohw.
// The copies move C_out * ohw values per image against C_out * ohw * C_in kh kw multiply-adds,
// so they are cheap where the GEMM is large; B is chosen so a chunk has about kChunkColumns
// columns and its buffers stay within kChunkBytes. With B = 1 no copy is made (the GEMMs read and
// write y and dy in place), as for 1x1 convolutions, which read the image as their col.

constexpr int64_t kChunkColumns = 2048;
constexpr int64_t kChunkBytes = int64_t{8} << 20;

// Images per chunk for a part of `images` images.
int64_t chunk_images(const Conv2dGeometry& g, int64_t images, size_t elem) {
  const int64_t ohw = g.out_h * g.out_w;
  if (is_pointwise(g) || images <= 1 || ohw >= kChunkColumns) return 1;
  const int64_t per_image = (g.c_in * g.kh * g.kw + g.c_out) * ohw * static_cast<int64_t>(elem);
  const int64_t by_columns = (kChunkColumns + ohw - 1) / ohw;
  const int64_t by_bytes = std::max<int64_t>(1, kChunkBytes / std::max<int64_t>(1, per_image));
  return std::max<int64_t>(1, std::min({images, by_columns, by_bytes}));
}

// The largest chunk any part of the split uses (for sizing scratch before the parallel region).
int64_t max_chunk(const Conv2dGeometry& g, const ImageSplit& s, size_t elem) {
  int64_t most = 1;
  for (int64_t p = 0; p < s.parts; ++p)
    most = std::max(most, chunk_images(g, (p + 1) * g.n / s.parts - p * g.n / s.parts, elem));
  return most;
}

// Scratch per part for chunks of up to `b` images: the chunk's col (of C) and a (C_out, b ohw)
// buffer (of B; also for one image when `buf_for_one`).
template <typename C, typename B = C>
struct ChunkScratch {
  int64_t col_elems = 0, buf_elems = 0;
  Scratch<C> col;
  Scratch<B> buf;
  ChunkScratch(const Conv2dGeometry& g, const ImageSplit& s, int64_t b, bool need_col, bool need_buf,
               bool buf_for_one = false) {
    const int64_t ohw = g.out_h * g.out_w;
    col_elems = need_col ? g.c_in * g.kh * g.kw * ohw * b : 0;
    buf_elems = need_buf && (b > 1 || buf_for_one) ? g.c_out * ohw * b : 0;
    col = scratch<C>(s.parts * col_elems);
    buf = scratch<B>(s.parts * buf_elems);
  }
  C* col_of(int64_t part) const { return col_elems ? col.get() + part * col_elems : nullptr; }
  B* buf_of(int64_t part) const { return buf_elems ? buf.get() + part * buf_elems : nullptr; }
};

// Note [bf16 convolutions]
// bf16 convolutions run the same im2col + GEMM code with T = BFloat16 and an accumulation type
// A = float: im2col and the gathers copy bf16 values (exact), the GEMMs are gemm_bf16.h's (bf16
// operands, f32 C), and everything summed — the GEMM outputs, col2im's overlapping columns, dw
// across chunks and parts — stays f32 until one final rounding to bf16 per output element. So
// y = round(bias + sum), dx = round(col2im(sum)), dw = round(sum over all images). For f32 and
// f64, A = T and nothing changes. The GEMMs' kernel (AMX tiles, VDPBF16PS or the f32 fallback)
// is measured per shape (Note [Kernels chosen by measurement] in measured_choice.cpp); all sum in
// f32. The 3x3 stride-1 convolutions that the Winograd path takes (below) keep the same contract
// on float32 planes (the only planes without AVX512_BF16, or with EMBER_CPU_WINOGRAD_BF16=off):
// bf16 widened as it is read, float32 products and sums, one rounding as each result is stored.
// On bf16 pairs (VDPBF16PS or AMX tiles) they also round the transformed tiles: Note [bf16
// Winograd products] in conv_winograd.cpp. Which algorithm each layer's pass takes is measured
// too: Note [When bf16 Winograd pays] in conv3x3_choice.cpp.
template <typename T>
using conv_acc_t = std::conditional_t<std::is_same_v<T, BFloat16>, float, T>;

// A chunk's GEMM: C (m, n) = op(A) op(B) + beta C (alpha = 1).
void conv_gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}
void conv_gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
               const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  gemm(ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
}
void conv_gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda,
               const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_bf16(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

// dst = src rounded to T: for bf16 from f32 the vectorized conversion (bf16_convert.h: the bits of
// BFloat16(float), 16 at a time where the CPU has AVX-512), otherwise element by element.
template <typename A, typename T>
void store_rounded(const A* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<A, float> && std::is_same_v<T, BFloat16>)
    f32_to_bf16(src, dst, n);
  else
    for (int64_t i = 0; i < n; ++i) dst[i] = T(src[i]);
}

// Copies images [first, first + b) of t (n, C_out, ohw) side by side into buf (C_out, b ohw), or back.
template <typename T>
void gather_images(const T* t, int64_t first, int64_t b, int64_t c_out, int64_t ohw, T* buf) {
  for (int64_t k = 0; k < b; ++k)
    for (int64_t oc = 0; oc < c_out; ++oc) {
      const T* src = t + ((first + k) * c_out + oc) * ohw;
      std::copy(src, src + ohw, buf + oc * b * ohw + k * ohw);
    }
}

// The Winograd path (Note [Winograd convolution] in conv_winograd.cpp) may take f32 and bf16 3x3
// stride-1 convolutions (bf16: Note [bf16 convolutions] above; 2.25 times fewer products than
// im2col and the bf16 GEMM); f64 stays on im2col + GEMM, the exact path.
template <typename T>
constexpr bool kWinogradType = std::is_same_v<T, float> || std::is_same_v<T, BFloat16>;

template <typename T>
void forward_im2col(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y) {
  using A = conv_acc_t<T>;
  constexpr bool narrow = !std::is_same_v<T, A>;  // bf16: the GEMM writes f32 (Note [bf16 convolutions])
  check_sizes(g);
  const int64_t G = g.groups, cout_g = g.c_out / G, kk = g.c_in / G * g.kh * g.kw;
  const int64_t ohw = g.out_h * g.out_w, x_img = g.c_in * g.h * g.w;
  const bool pointwise = is_pointwise(g);
  const ImageSplit s = split_images(g.n);
  const ChunkScratch<T, A> sc(g, s, max_chunk(g, s, sizeof(A)), !pointwise, true, narrow);
  run_parts(s, g.n, [&](int64_t part, int64_t lo, int64_t hi) {
    const int64_t chunk = chunk_images(g, hi - lo, sizeof(A));
    T* col = sc.col_of(part);
    for (int64_t first = lo; first < hi; first += chunk) {
      const int64_t b = std::min(chunk, hi - first), ld = b * ohw;
      for (int64_t k = 0; k < b && !pointwise; ++k) im2col_impl(g, x + (first + k) * x_img, col + k * ohw, ld);
      const T* c = pointwise ? x + first * x_img : col;
      // b == 1 (f32, f64): the GEMM writes y in place, starting from the bias (beta = 1); else into buf.
      const bool direct = !narrow && b == 1;
      A* out = sc.buf_of(part);
      if constexpr (!narrow)
        if (direct) out = y + first * g.c_out * ohw;
      if (direct && bias)
        for (int64_t oc = 0; oc < g.c_out; ++oc) std::fill(out + oc * ohw, out + (oc + 1) * ohw, A(bias[oc]));
      for (int64_t gr = 0; gr < G; ++gr)
        conv_gemm(Transpose::No, Transpose::No, cout_g, ld, kk, w + gr * cout_g * kk, kk, c + gr * kk * ld, ld,
                  direct && bias ? A(1) : A(0), out + gr * cout_g * ld, ld);
      if (direct) continue;
      for (int64_t k = 0; k < b; ++k)
        for (int64_t oc = 0; oc < g.c_out; ++oc) {
          A* src = out + oc * ld + k * ohw;  // the chunk's scratch: the bias is added in place
          T* dst = y + ((first + k) * g.c_out + oc) * ohw;
          if (bias) {
            const A add = A(bias[oc]);
            for (int64_t p = 0; p < ohw; ++p) src[p] += add;
          }
          store_rounded(src, dst, ohw);
        }
    }
  });
}

template <typename T>
void backward_data_im2col(const Conv2dGeometry& g, const T* gy, const T* w, T* gx) {
  using A = conv_acc_t<T>;
  constexpr bool narrow = !std::is_same_v<T, A>;  // bf16: dcol and col2im in f32 (Note [bf16 convolutions])
  check_sizes(g);
  const int64_t G = g.groups, cout_g = g.c_out / G, kk = g.c_in / G * g.kh * g.kw;
  const int64_t ohw = g.out_h * g.out_w, x_img = g.c_in * g.h * g.w;
  const bool pointwise = is_pointwise(g);
  const ImageSplit s = split_images(g.n);
  const ChunkScratch<A, T> sc(g, s, max_chunk(g, s, sizeof(A)), !pointwise || narrow, true);
  auto image_acc = scratch<A>(narrow ? s.parts * x_img : 0);  // one image's f32 gradient per part
  run_parts(s, g.n, [&](int64_t part, int64_t lo, int64_t hi) {
    const int64_t chunk = chunk_images(g, hi - lo, sizeof(A));
    A* col = sc.col_of(part);
    for (int64_t first = lo; first < hi; first += chunk) {
      const int64_t b = std::min(chunk, hi - first), ld = b * ohw;
      const T* gyb = gy + first * g.c_out * ohw;
      if (b > 1) {
        gather_images(gy, first, b, g.c_out, ohw, sc.buf_of(part));
        gyb = sc.buf_of(part);
      }
      A* dcol = col;  // pointwise (b == 1), f32 and f64: the image gradient itself
      if constexpr (!narrow)
        if (pointwise) dcol = gx + first * x_img;
      // dcol[g] (kk, b ohw) = w[g]^T (kk, cout_g) @ gy[g] (cout_g, b ohw); w[g] is stored (cout_g, kk).
      for (int64_t gr = 0; gr < G; ++gr)
        conv_gemm(Transpose::Yes, Transpose::No, kk, ld, cout_g, w + gr * cout_g * kk, kk, gyb + gr * cout_g * ld, ld,
                  A(0), dcol + gr * kk * ld, ld);
      if (pointwise) {
        if constexpr (narrow)  // dcol is the image's gradient (C_in, h w) in f32
          store_rounded(dcol, gx + first * x_img, x_img);
        continue;
      }
      for (int64_t k = 0; k < b; ++k) {
        T* gxi = gx + (first + k) * x_img;
        if constexpr (narrow) {
          A* acc = image_acc.get() + part * x_img;
          std::fill(acc, acc + x_img, A(0));
          col2im_impl(g, col + k * ohw, acc, ld);
          store_rounded(acc, gxi, x_img);
        } else {
          std::fill(gxi, gxi + x_img, T(0));
          col2im_impl(g, col + k * ohw, gxi, ld);
        }
      }
    }
  });
}

template <typename T>
void backward_weight_im2col(const Conv2dGeometry& g, const T* gy, const T* x, T* gw) {
  using A = conv_acc_t<T>;
  constexpr bool narrow = !std::is_same_v<T, A>;  // bf16: every part sums in f32 (Note [bf16 convolutions])
  check_sizes(g);
  const int64_t G = g.groups, cout_g = g.c_out / G, kk = g.c_in / G * g.kh * g.kw;
  const int64_t ohw = g.out_h * g.out_w, x_img = g.c_in * g.h * g.w;
  const int64_t w_elems = g.c_out * kk;
  const bool pointwise = is_pointwise(g);
  if (g.n == 0) {
    std::fill(gw, gw + w_elems, T(0));
    return;
  }
  const ImageSplit s = split_images(g.n);
  const ChunkScratch<T> sc(g, s, max_chunk(g, s, sizeof(T)), !pointwise, true);
  // Part 0 sums into gw (f32, f64; bf16: into a buffer too); every other part into its own buffer,
  // added in part order below.
  auto partial = scratch<A>((narrow ? s.parts : s.parts - 1) * w_elems);
  run_parts(s, g.n, [&](int64_t part, int64_t lo, int64_t hi) {
    const int64_t chunk = chunk_images(g, hi - lo, sizeof(T));
    T* col = sc.col_of(part);
    A* acc = partial.get() + (narrow ? part : part - 1) * w_elems;
    if constexpr (!narrow)
      if (part == 0) acc = gw;
    if (lo == hi) std::fill(acc, acc + w_elems, A(0));
    for (int64_t first = lo; first < hi; first += chunk) {
      const int64_t b = std::min(chunk, hi - first), ld = b * ohw;
      for (int64_t k = 0; k < b && !pointwise; ++k) im2col_impl(g, x + (first + k) * x_img, col + k * ohw, ld);
      const T* c = pointwise ? x + first * x_img : col;
      const T* gyb = gy + first * g.c_out * ohw;
      if (b > 1) {
        gather_images(gy, first, b, g.c_out, ohw, sc.buf_of(part));
        gyb = sc.buf_of(part);
      }
      // gw[g] (cout_g, kk) (+)= gy[g] (cout_g, b ohw) @ col[g]^T (b ohw, kk)
      for (int64_t gr = 0; gr < G; ++gr)
        conv_gemm(Transpose::No, Transpose::Yes, cout_g, kk, ld, gyb + gr * cout_g * ld, ld, c + gr * kk * ld, ld,
                  first == lo ? A(0) : A(1), acc + gr * cout_g * kk, kk);
    }
  });
  // The parts added in part order for every element; parallel over the elements (the same sums
  // for any thread count): a deep layer's weight gradient is millions of elements per part.
  parallel_for(0, w_elems, 65536, [&](int64_t i0, int64_t i1) {
    if constexpr (narrow) {  // summed into part 0's buffer, then rounded 16 at a time
      A* sum = partial.get();
      for (int64_t p = 1; p < s.parts; ++p) {
        const A* src = partial.get() + p * w_elems;
        for (int64_t i = i0; i < i1; ++i) sum[i] += src[i];
      }
      store_rounded(sum + i0, gw + i0, i1 - i0);
    } else {
      for (int64_t p = 1; p < s.parts; ++p) {
        const T* src = partial.get() + (p - 1) * w_elems;
        for (int64_t i = i0; i < i1; ++i) gw[i] += src[i];
      }
    }
  });
}

// The three passes: f32 and bf16 through run_conv_pass (conv3x3_choice.h: Winograd, the direct
// AMX convolution or im2col, measured per layer and pass where several apply), f64 on im2col.
template <typename T>
void forward_impl(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y) {
  if constexpr (kWinogradType<T>)
    return run_conv_pass(g, ConvPass::forward, dtype_of<T>::value, [&](ConvAlgo a) {
      if (a.kind == ConvAlgoKind::im2col) return forward_im2col(g, x, w, bias, y);
      if constexpr (std::is_same_v<T, BFloat16>) {
        if (a.kind == ConvAlgoKind::direct_amx) return amx_conv_forward(amx_tiles(), g, x, w, bias, y);
        winograd_forward(g, x, w, bias, y, a.products);
      } else {
        winograd_forward(g, x, w, bias, y);
      }
    });
  forward_im2col(g, x, w, bias, y);
}

template <typename T>
void backward_data_impl(const Conv2dGeometry& g, const T* gy, const T* w, T* gx) {
  if constexpr (kWinogradType<T>)
    return run_conv_pass(g, ConvPass::backward_data, dtype_of<T>::value, [&](ConvAlgo a) {
      if (a.kind == ConvAlgoKind::im2col) return backward_data_im2col(g, gy, w, gx);
      if constexpr (std::is_same_v<T, BFloat16>) {
        if (a.kind == ConvAlgoKind::direct_amx) return amx_conv_backward_data(amx_tiles(), g, gy, w, gx);
        winograd_backward_data(g, gy, w, gx, a.products);
      } else {
        winograd_backward_data(g, gy, w, gx);
      }
    });
  backward_data_im2col(g, gy, w, gx);
}

template <typename T>
void backward_weight_impl(const Conv2dGeometry& g, const T* gy, const T* x, T* gw) {
  if constexpr (kWinogradType<T>)
    return run_conv_pass(g, ConvPass::backward_weight, dtype_of<T>::value, [&](ConvAlgo a) {
      if constexpr (std::is_same_v<T, BFloat16>)
        if (a.kind == ConvAlgoKind::direct_amx) return amx_conv_backward_weight(amx_tiles(), g, gy, x, gw);
      if (a.kind != ConvAlgoKind::winograd) return backward_weight_im2col(g, gy, x, gw);
      if constexpr (std::is_same_v<T, BFloat16>) winograd_backward_weight(g, gy, x, gw, a.products);
      else winograd_backward_weight(g, gy, x, gw);
    });
  backward_weight_im2col(g, gy, x, gw);
}

template <typename T>
void backward_bias_impl(const Conv2dGeometry& g, const T* gy, T* gb) {
  const int64_t ohw = g.out_h * g.out_w;
  parallel_for(0, g.c_out, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, g.n * ohw)), [&](int64_t lo, int64_t hi) {
    for (int64_t oc = lo; oc < hi; ++oc) {
      double acc = 0;
      for (int64_t img = 0; img < g.n; ++img) {
        const T* p = gy + (img * g.c_out + oc) * ohw;
        if constexpr (!std::is_same_v<T, double>) {
          // bf16 and f32: one plane in 16 float lanes (a loop that vectorizes into independent
          // sums, where one double sum waits on each add; a plane is a short sum), planes
          // added in double, rounded once.
          float lanes[16] = {};
          int64_t i = 0;
          for (; i + 16 <= ohw; i += 16)
            for (int l = 0; l < 16; ++l) lanes[l] += static_cast<float>(p[i + l]);
          for (; i < ohw; ++i) lanes[0] += static_cast<float>(p[i]);
          for (float v : lanes) acc += v;
        } else {
          for (int64_t i = 0; i < ohw; ++i) acc += static_cast<double>(p[i]);
        }
      }
      gb[oc] = static_cast<T>(acc);
    }
  });
}

// ---- direct references -------------------------------------------------------------------------

// Calls f(img, oc, oy, ox, c, ic, i, j, iy, ix) for every term of the convolution sum whose
// input position lies inside the image (c: input channel, ic: its index within the group).
template <typename F>
void for_each_term(const Conv2dGeometry& g, const F& f) {
  const int64_t cin_g = g.c_in / g.groups, cout_g = g.c_out / g.groups;
  for (int64_t img = 0; img < g.n; ++img)
    for (int64_t oc = 0; oc < g.c_out; ++oc)
      for (int64_t oy = 0; oy < g.out_h; ++oy)
        for (int64_t ox = 0; ox < g.out_w; ++ox)
          for (int64_t ic = 0; ic < cin_g; ++ic)
            for (int64_t i = 0; i < g.kh; ++i)
              for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t iy = oy * g.stride_h - g.pad_h + i * g.dil_h;
                const int64_t ix = ox * g.stride_w - g.pad_w + j * g.dil_w;
                if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                f(img, oc, oy, ox, (oc / cout_g) * cin_g + ic, ic, i, j, iy, ix);
              }
}

template <typename T>
void forward_reference_impl(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y) {
  const int64_t cin_g = g.c_in / g.groups;
  std::vector<double> acc(g.n * g.c_out * g.out_h * g.out_w, 0.0);
  for_each_term(g, [&](int64_t img, int64_t oc, int64_t oy, int64_t ox, int64_t c, int64_t ic, int64_t i, int64_t j,
                       int64_t iy, int64_t ix) {
    const double xv = x[((img * g.c_in + c) * g.h + iy) * g.w + ix];
    const double wv = w[((oc * cin_g + ic) * g.kh + i) * g.kw + j];
    acc[((img * g.c_out + oc) * g.out_h + oy) * g.out_w + ox] += xv * wv;
  });
  const int64_t ohw = g.out_h * g.out_w;
  for (size_t p = 0; p < acc.size(); ++p)
    y[p] = static_cast<T>(acc[p] + (bias ? static_cast<double>(bias[(p / ohw) % g.c_out]) : 0.0));
}

template <typename T>
void backward_data_reference_impl(const Conv2dGeometry& g, const T* gy, const T* w, T* gx) {
  const int64_t cin_g = g.c_in / g.groups;
  std::vector<double> acc(g.n * g.c_in * g.h * g.w, 0.0);
  for_each_term(g, [&](int64_t img, int64_t oc, int64_t oy, int64_t ox, int64_t c, int64_t ic, int64_t i, int64_t j,
                       int64_t iy, int64_t ix) {
    const double gv = gy[((img * g.c_out + oc) * g.out_h + oy) * g.out_w + ox];
    const double wv = w[((oc * cin_g + ic) * g.kh + i) * g.kw + j];
    acc[((img * g.c_in + c) * g.h + iy) * g.w + ix] += gv * wv;
  });
  for (size_t p = 0; p < acc.size(); ++p) gx[p] = static_cast<T>(acc[p]);
}

template <typename T>
void backward_weight_reference_impl(const Conv2dGeometry& g, const T* gy, const T* x, T* gw) {
  const int64_t cin_g = g.c_in / g.groups;
  std::vector<double> acc(g.c_out * cin_g * g.kh * g.kw, 0.0);
  for_each_term(g, [&](int64_t img, int64_t oc, int64_t oy, int64_t ox, int64_t c, int64_t ic, int64_t i, int64_t j,
                       int64_t iy, int64_t ix) {
    const double gv = gy[((img * g.c_out + oc) * g.out_h + oy) * g.out_w + ox];
    const double xv = x[((img * g.c_in + c) * g.h + iy) * g.w + ix];
    acc[((oc * cin_g + ic) * g.kh + i) * g.kw + j] += gv * xv;
  });
  for (size_t p = 0; p < acc.size(); ++p) gw[p] = static_cast<T>(acc[p]);
}

}  // namespace

void im2col(const Conv2dGeometry& g, const float* x, float* col) { im2col_impl(g, x, col, g.out_h * g.out_w); }
void im2col(const Conv2dGeometry& g, const double* x, double* col) { im2col_impl(g, x, col, g.out_h * g.out_w); }
void col2im(const Conv2dGeometry& g, const float* col, float* x) { col2im_impl(g, col, x, g.out_h * g.out_w); }
void col2im(const Conv2dGeometry& g, const double* col, double* x) { col2im_impl(g, col, x, g.out_h * g.out_w); }

// f32 and f64, and bf16 (Note [bf16 convolutions]): f(value of the element type).
template <typename F>
void dispatch_conv(DType dtype, const char* op, const F& f) {
  if (dtype == DType::bf16) return f(BFloat16{});
  EMBER_DISPATCH_FLOAT(dtype, op, [&] { f(scalar_t{}); });
}

void conv2d_forward(DType dtype, const Conv2dGeometry& g, const void* x, const void* w, const void* bias, void* y) {
  dispatch_conv(dtype, "conv2d", [&](auto zero) {
    using T = decltype(zero);
    forward_impl(g, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias), static_cast<T*>(y));
  });
}

void conv2d_backward_data(DType dtype, const Conv2dGeometry& g, const void* gy, const void* w, void* gx) {
  dispatch_conv(dtype, "conv2d backward", [&](auto zero) {
    using T = decltype(zero);
    backward_data_impl(g, static_cast<const T*>(gy), static_cast<const T*>(w), static_cast<T*>(gx));
  });
}

void conv2d_backward_weight(DType dtype, const Conv2dGeometry& g, const void* gy, const void* x, void* gw) {
  dispatch_conv(dtype, "conv2d backward", [&](auto zero) {
    using T = decltype(zero);
    backward_weight_impl(g, static_cast<const T*>(gy), static_cast<const T*>(x), static_cast<T*>(gw));
  });
}

void conv2d_backward_bias(DType dtype, const Conv2dGeometry& g, const void* gy, void* gb) {
  dispatch_conv(dtype, "conv2d backward", [&](auto zero) {
    using T = decltype(zero);
    backward_bias_impl(g, static_cast<const T*>(gy), static_cast<T*>(gb));
  });
}

void conv2d_forward_reference(DType dtype, const Conv2dGeometry& g, const void* x, const void* w, const void* bias,
                              void* y) {
  dispatch_conv(dtype, "conv2d reference", [&](auto zero) {
    using T = decltype(zero);
    forward_reference_impl(g, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias),
                           static_cast<T*>(y));
  });
}

void conv2d_backward_data_reference(DType dtype, const Conv2dGeometry& g, const void* gy, const void* w, void* gx) {
  dispatch_conv(dtype, "conv2d reference", [&](auto zero) {
    using T = decltype(zero);
    backward_data_reference_impl(g, static_cast<const T*>(gy), static_cast<const T*>(w), static_cast<T*>(gx));
  });
}

void conv2d_backward_weight_reference(DType dtype, const Conv2dGeometry& g, const void* gy, const void* x, void* gw) {
  dispatch_conv(dtype, "conv2d reference", [&](auto zero) {
    using T = decltype(zero);
    backward_weight_reference_impl(g, static_cast<const T*>(gy), static_cast<const T*>(x), static_cast<T*>(gw));
  });
}

}  // namespace ember::kernels::cpu
