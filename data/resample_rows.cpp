// The row kernels of the fused image pipeline (resample_rows.h).

#include "resample_rows.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "../core/cpu/cpu_features.h"
#if defined(__x86_64__)
#include <immintrin.h>
#define EMBER_RESAMPLE_X86 1
#else
#define EMBER_RESAMPLE_X86 0
#endif

namespace ember::data::detail {

FixedTaps fixed_taps(const AxisCoeffs& c, int64_t in_size, int64_t lo, int64_t hi) {
  FixedTaps t;
  t.k = std::min(c.ksize, in_size);
  t.start.resize(static_cast<size_t>(std::max<int64_t>(0, hi - lo)));
  t.w.assign(t.start.size() * static_cast<size_t>(t.k), 0);
  for (int64_t i = lo; i < hi; ++i) {
    const int64_t first = c.first[static_cast<size_t>(i)], count = c.count[static_cast<size_t>(i)];
    const int64_t start = std::min(first, in_size - t.k);
    const auto j = static_cast<size_t>(i - lo);
    t.start[j] = static_cast<int32_t>(start);
    for (int64_t q = 0; q < count; ++q)
      t.w[j * static_cast<size_t>(t.k) + static_cast<size_t>(first - start + q)] = c.k[static_cast<size_t>(i * c.ksize + q)];
  }
  return t;
}

namespace {

// PIL accumulates in a C int: sum of weights is 2^22 (+ rounding), times 255, plus the half, stays
// far below 2^31, so int32 gives PIL's sums; clip8 is PIL's on them.
constexpr int32_t kHalf = int32_t{1} << (kPrecisionBits - 1);

// ---- scalar: the reference -------------------------------------------------------------------

// Outputs [i0, i1) of one channel. Samples of the channel are PS bytes apart in the row and in dst
// (1 for CHW planes, C for HWC pixels).
template <int K, int PS>
void horizontal_fixed(const uint8_t* row, uint8_t* dst, const FixedTaps& t, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) {
    const uint8_t* p = row + static_cast<int64_t>(t.start[static_cast<size_t>(i)]) * PS;
    const int32_t* k = t.w.data() + i * K;
    int32_t a = kHalf;
    for (int q = 0; q < K; ++q) a += int32_t{p[q * PS]} * k[q];
    dst[i * PS] = clip8(a);
  }
}

template <int PS>
void horizontal_any(const uint8_t* row, uint8_t* dst, const FixedTaps& t, int64_t i0, int64_t i1) {
  switch (t.k) {
    case 3: return horizontal_fixed<3, PS>(row, dst, t, i0, i1);
    case 5: return horizontal_fixed<5, PS>(row, dst, t, i0, i1);
    case 7: return horizontal_fixed<7, PS>(row, dst, t, i0, i1);
    case 9: return horizontal_fixed<9, PS>(row, dst, t, i0, i1);
    default: break;
  }
  for (int64_t i = i0; i < i1; ++i) {
    const uint8_t* p = row + static_cast<int64_t>(t.start[static_cast<size_t>(i)]) * PS;
    const int32_t* k = t.w.data() + i * t.k;
    int32_t a = kHalf;
    for (int64_t q = 0; q < t.k; ++q) a += int32_t{p[q * PS]} * k[q];
    dst[i * PS] = clip8(a);
  }
}

// One channel of one row: the common tap counts and strides get loops the compiler unrolls.
void horizontal_scalar(const uint8_t* row, int64_t ps, uint8_t* dst, const FixedTaps& t, int64_t i0, int64_t i1) {
  switch (ps) {
    case 1: return horizontal_any<1>(row, dst, t, i0, i1);
    case 3: return horizontal_any<3>(row, dst, t, i0, i1);
    default: break;
  }
  for (int64_t i = i0; i < i1; ++i) {
    const uint8_t* p = row + t.start[static_cast<size_t>(i)] * ps;
    const int32_t* k = t.w.data() + i * t.k;
    int32_t a = kHalf;
    for (int64_t q = 0; q < t.k; ++q) a += int32_t{p[q * ps]} * k[q];
    dst[i * ps] = clip8(a);
  }
}

// ---- AVX2: RGB, 4 output pixels per step ------------------------------------------------------

// Note [Horizontal pass in AVX2]
// The scalar pass spends its time on one multiply-add per tap, channel and output, with a byte load
// and a clip each: for Resize(256) of a 500x375 RGB image, 5 taps x 3 channels x 341 outputs per row.
// The AVX2 pass computes 4 output pixels x 3 channels at once and two taps per instruction.
//
// Multiply-adds: VPMADDWD multiplies 16 pairs of int16 and adds each pair into an int32, exactly
// the "pixel a * weight a + pixel b * weight b" of two consecutive taps. But PIL's weights have 22
// fractional bits, too wide for int16, so each weight w is split as w = hi * 2^11 + lo with
// lo = w & 2047 and hi = w >> 11 (both fit int16 for |w| < 2^26; PIL's are at most 2^22), and the
// pass keeps two int32 sums per sample: H = sum(p * hi) and L = 2^21 + sum(p * lo). H * 2^11 + L is
// the scalar pass's int32 sum exactly (integer arithmetic, no rounding anywhere), so the bytes are
// the same; the tests compare the two paths byte for byte.
//
// Data layout: each 128-bit half of a register holds one output pixel, its 3 channels in int32
// lanes 0-2 (lane 3 is zero weight work). Output i reads the 3 * k bytes at row + 3 * start[i]; a
// 16-byte load takes taps 0-3 (bytes 0-11, 12-15 unused), and a byte shuffle (VPSHUFB, which works
// within each half) turns bytes (3a + c, 3b + c) into the int16 pair of lane c for taps (a, b) =
// (0, 1) or (2, 3); the next 4 taps come from a load 12 bytes further on. Two registers carry the
// outputs (i, i + 2) and (i + 1, i + 3), so that packing their results to bytes (VPACKSSDW, then
// VPACKUSWB) leaves outputs i, i + 1 in the low half and i + 2, i + 3 in the high one, each 3 bytes
// plus a zero: one more shuffle compacts each half to 6 bytes, stored as two overlapping 8-byte
// words (hence HorizontalPass::kDstSlack).
//
// The weights depend on the output, not on the row: built once per image (HorizontalPass's
// constructor) as ready-made registers, (hi, hi') and (lo, lo') int16 pairs broadcast over the 4
// lanes of each half, so the inner loop has no gathers and no broadcasts, only loads. Rounding
// and clipping: the sum shifted right by 22 (arithmetic), then the two saturating packs clamp it
// to [0, 255], which is clip8 (a sum >= 2^30 shifts to >= 256, a sum <= 0 to <= 0).
// The last outputs of a row, whose 16-byte loads would pass the row's end, and a k with no AVX2
// case, take the scalar loop.

constexpr int kSplitBits = 11;

bool cpu_has_avx2() { return EMBER_RESAMPLE_X86 && ember::cpu_features().avx2; }

std::atomic<HorizontalPath>& path_flag() {
  static std::atomic<HorizontalPath> p{cpu_has_avx2() ? HorizontalPath::avx2 : HorizontalPath::scalar};
  return p;
}

// Bytes one AVX2 output reads from row + 3 * start: 16-byte loads 12 bytes apart, one per 2 pairs.
int64_t avx2_read_extent(int64_t pairs) { return 12 * ((pairs + 1) / 2 - 1) + 16; }

#if EMBER_RESAMPLE_X86

__attribute__((target("avx2"))) inline __m256i load_two(const uint8_t* low, const uint8_t* high) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(low));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(high));
  return _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
}

// One tap pair for both registers: shuffle the pixel bytes into int16 pairs and multiply-add them
// with the hi and lo weights (w: the pair's 4 weight registers).
__attribute__((target("avx2"))) inline void tap_pair(__m256i v02, __m256i v13, __m256i shuffle, const __m256i* w,
                                                     __m256i& hi02, __m256i& lo02, __m256i& hi13, __m256i& lo13) {
  const __m256i x02 = _mm256_shuffle_epi8(v02, shuffle);
  const __m256i x13 = _mm256_shuffle_epi8(v13, shuffle);
  hi02 = _mm256_add_epi32(hi02, _mm256_madd_epi16(x02, _mm256_loadu_si256(w + 0)));
  lo02 = _mm256_add_epi32(lo02, _mm256_madd_epi16(x02, _mm256_loadu_si256(w + 1)));
  hi13 = _mm256_add_epi32(hi13, _mm256_madd_epi16(x13, _mm256_loadu_si256(w + 2)));
  lo13 = _mm256_add_epi32(lo13, _mm256_madd_epi16(x13, _mm256_loadu_si256(w + 3)));
}

// Outputs [0, 4 * groups) of one RGB row. Pairs > 0: the tap-pair count, fixed at compile time so
// the loop unrolls; Pairs == 0: `pairs` at run time.
template <int Pairs>
__attribute__((target("avx2"))) void horizontal_rgb_avx2(const uint8_t* row, uint8_t* dst, const int32_t* start,
                                                        int64_t groups, const int32_t* packed, int64_t pairs) {
  if constexpr (Pairs > 0) pairs = Pairs;
  // Taps (a, b) at bytes 0-5 (even pairs) or 6-11 (odd pairs) of each half: lane c gets the int16
  // pair (byte 3a + c, byte 3b + c); -1 writes a zero byte.
  const __m256i even = _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1,  //
                                        0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
  const __m256i odd = _mm256_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1,  //
                                       6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
  // Each half: bytes (R, G, B, 0, R', G', B', 0, ...) -> (R, G, B, R', G', B').
  const __m256i compact = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                           0, 1, 2, 4, 5, 6, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i half = _mm256_set1_epi32(kHalf);
  const auto* w = reinterpret_cast<const __m256i*>(packed);
  for (int64_t g = 0; g < groups; ++g, w += 4 * pairs) {
    const int32_t* s = start + 4 * g;
    const uint8_t* p0 = row + 3 * static_cast<int64_t>(s[0]);
    const uint8_t* p1 = row + 3 * static_cast<int64_t>(s[1]);
    const uint8_t* p2 = row + 3 * static_cast<int64_t>(s[2]);
    const uint8_t* p3 = row + 3 * static_cast<int64_t>(s[3]);
    __m256i hi02 = _mm256_setzero_si256(), hi13 = _mm256_setzero_si256(), lo02 = half, lo13 = half;
    for (int64_t j = 0; j < pairs; j += 2) {
      const int64_t off = 6 * j;  // 12 bytes per 2 pairs
      const __m256i v02 = load_two(p0 + off, p2 + off);
      const __m256i v13 = load_two(p1 + off, p3 + off);
      tap_pair(v02, v13, even, w + 4 * j, hi02, lo02, hi13, lo13);
      if (j + 1 < pairs) tap_pair(v02, v13, odd, w + 4 * (j + 1), hi02, lo02, hi13, lo13);
    }
    const __m256i q02 = _mm256_srai_epi32(_mm256_add_epi32(_mm256_slli_epi32(hi02, kSplitBits), lo02), kPrecisionBits);
    const __m256i q13 = _mm256_srai_epi32(_mm256_add_epi32(_mm256_slli_epi32(hi13, kSplitBits), lo13), kPrecisionBits);
    const __m256i words = _mm256_packs_epi32(q02, q13);       // halves: (i, i + 1), (i + 2, i + 3)
    const __m256i bytes = _mm256_packus_epi16(words, words);  // clamped to [0, 255]
    const __m256i rgb = _mm256_shuffle_epi8(bytes, compact);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + 12 * g), _mm256_castsi256_si128(rgb));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + 12 * g + 6), _mm256_extracti128_si256(rgb, 1));
  }
}

void horizontal_rgb(const uint8_t* row, uint8_t* dst, const int32_t* start, int64_t groups, const int32_t* packed,
                    int64_t pairs) {
  switch (pairs) {
    case 2: return horizontal_rgb_avx2<2>(row, dst, start, groups, packed, pairs);  // 3 taps (and 4)
    case 3: return horizontal_rgb_avx2<3>(row, dst, start, groups, packed, pairs);  // 5
    case 4: return horizontal_rgb_avx2<4>(row, dst, start, groups, packed, pairs);  // 7
    case 5: return horizontal_rgb_avx2<5>(row, dst, start, groups, packed, pairs);  // 9
    default: return horizontal_rgb_avx2<0>(row, dst, start, groups, packed, pairs);
  }
}

#endif  // EMBER_RESAMPLE_X86

}  // namespace

HorizontalPath horizontal_path() { return path_flag().load(std::memory_order_relaxed); }

const char* horizontal_path_name(HorizontalPath path) { return path == HorizontalPath::avx2 ? "avx2" : "scalar"; }

bool set_horizontal_path(HorizontalPath path) {
  if (path == HorizontalPath::avx2 && !cpu_has_avx2()) return false;
  path_flag().store(path, std::memory_order_relaxed);
  return true;
}

HorizontalPass::HorizontalPass(FixedTaps taps, int64_t channels, int64_t in_size)
    : taps_(std::move(taps)), channels_(channels), pairs_((taps_.k + 1) / 2) {
  if (horizontal_path() != HorizontalPath::avx2 || channels_ != 3 || taps_.k < 1) return;
  // Every weight must split into two int16 halves (Note [Horizontal pass in AVX2]).
  for (int32_t v : taps_.w)
    if ((v >> kSplitBits) < -32768 || (v >> kSplitBits) > 32767) return;
  // The leading outputs whose loads stay inside the row (starts never decrease), in groups of 4.
  const int64_t n = outputs(), extent = avx2_read_extent(pairs_);
  int64_t inside = 0;
  while (inside < n && 3 * static_cast<int64_t>(taps_.start[static_cast<size_t>(inside)]) + extent <= 3 * in_size)
    ++inside;
  vector_outputs_ = inside / 4 * 4;
  // Register (g, j, r), r = hi(i, i + 2), lo(i, i + 2), hi(i + 1, i + 3), lo(i + 1, i + 3) for the
  // outputs i = 4g.. of group g and tap pair j: 8 int32, lanes 0-3 for the first output, 4-7 for
  // the second, each (weight of tap 2j, weight of tap 2j + 1) as int16 (low, high).
  const int64_t groups = vector_outputs_ / 4;
  packed_.assign(static_cast<size_t>(groups * pairs_ * 4 * 8), 0);
  auto pair_of = [&](int64_t i, int64_t j, bool hi) {
    auto part = [&](int64_t tap) -> uint32_t {
      if (tap >= taps_.k) return 0;
      const int32_t v = taps_.w[static_cast<size_t>(i * taps_.k + tap)];
      return static_cast<uint16_t>(hi ? v >> kSplitBits : v & ((1 << kSplitBits) - 1));
    };
    return static_cast<int32_t>(part(2 * j) | part(2 * j + 1) << 16);
  };
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t j = 0; j < pairs_; ++j)
      for (int64_t r = 0; r < 4; ++r) {
        const int64_t first = 4 * g + r / 2, second = first + 2;  // r / 2: registers (i, i + 2), (i + 1, i + 3)
        const bool hi = r % 2 == 0;
        int32_t* reg = packed_.data() + ((g * pairs_ + j) * 4 + r) * 8;
        std::fill(reg, reg + 4, pair_of(first, j, hi));
        std::fill(reg + 4, reg + 8, pair_of(second, j, hi));
      }
}

void HorizontalPass::run(const uint8_t* row, uint8_t* dst) const {
  int64_t done = 0;
#if EMBER_RESAMPLE_X86
  if (vector_outputs_ > 0) {
    horizontal_rgb(row, dst, taps_.start.data(), vector_outputs_ / 4, packed_.data(), pairs_);
    done = vector_outputs_;
  }
#endif
  for (int64_t ch = 0; ch < channels_; ++ch) horizontal_scalar(row + ch, channels_, dst + ch, taps_, done, outputs());
}

// ---- vertical ------------------------------------------------------------------------------------

namespace {

// k consecutive rows of `first` (row stride n) weighted and summed, column by column (the loops
// vectorize).
__attribute__((always_inline)) inline void vertical_row_body(const uint8_t* first, int64_t n, const int32_t* k,
                                                             int64_t taps, int32_t* acc, uint8_t* out) {
  for (int64_t x = 0; x < n; ++x) acc[x] = kHalf;
  for (int64_t q = 0; q < taps; ++q) {
    const uint8_t* r = first + q * n;
    const int32_t kq = k[q];
    if (kq == 0) continue;
    for (int64_t x = 0; x < n; ++x) acc[x] += int32_t{r[x]} * kq;
  }
  for (int64_t x = 0; x < n; ++x) out[x] = clip8(acc[x]);
}

// The same with K taps known at compile time: the tap loop unrolls inside the column loop, so each
// column's sum stays in a register instead of going through acc once per tap.
template <int K>
__attribute__((always_inline)) inline void vertical_fixed_body(const uint8_t* first, int64_t n, const int32_t* k,
                                                               uint8_t* out) {
  int32_t kk[K];
  for (int q = 0; q < K; ++q) kk[q] = k[q];
  for (int64_t x = 0; x < n; ++x) {
    int32_t a = kHalf;
    for (int q = 0; q < K; ++q) a += int32_t{first[q * n + x]} * kk[q];
    // clip8 as a shift and a clamp, which vectorize to a shift, a max and a min: a sum >= 2^30
    // shifts to >= 256, a sum <= 0 to <= 0 (the shift is arithmetic).
    out[x] = static_cast<uint8_t>(std::clamp(a >> kPrecisionBits, 0, 255));
  }
}

__attribute__((always_inline)) inline void vertical_any(const uint8_t* first, int64_t n, const int32_t* k, int64_t taps,
                                                        int32_t* acc, uint8_t* out) {
  switch (taps) {
    case 3: return vertical_fixed_body<3>(first, n, k, out);
    case 5: return vertical_fixed_body<5>(first, n, k, out);
    case 7: return vertical_fixed_body<7>(first, n, k, out);
    case 9: return vertical_fixed_body<9>(first, n, k, out);
    default: return vertical_row_body(first, n, k, taps, acc, out);
  }
}

__attribute__((target("avx2"))) void vertical_row_avx2(const uint8_t* first, int64_t n, const int32_t* k, int64_t taps,
                                                       int32_t* acc, uint8_t* out) {
  vertical_any(first, n, k, taps, acc, out);
}

void vertical_row_baseline(const uint8_t* first, int64_t n, const int32_t* k, int64_t taps, int32_t* acc,
                           uint8_t* out) {
  vertical_any(first, n, k, taps, acc, out);
}

}  // namespace

// The AVX2 version where the CPU has it. A plain run-time check, not an ifunc (target_clones): an
// ifunc resolver runs before the sanitizer runtimes start, and crashed every TSan binary.
void vertical_row(const uint8_t* first, int64_t n, const int32_t* k, int64_t taps, int32_t* acc, uint8_t* out) {
  static const bool avx2 = cpu_has_avx2();
  if (avx2)
    vertical_row_avx2(first, n, k, taps, acc, out);
  else
    vertical_row_baseline(first, n, k, taps, acc, out);
}

}  // namespace ember::data::detail
