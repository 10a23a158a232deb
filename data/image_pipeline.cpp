// The fused per-sample image pipeline (Note [Fused image pipeline] in image_pipeline.h).

#include "image_pipeline.h"

#include <algorithm>
#include <cstring>

#include "resample.h"

namespace ember::data {

namespace {

void flatten(const Transform& t, std::vector<const Transform*>& out) {
  if (const auto* c = dynamic_cast<const Compose*>(&t)) {
    for (const AnyTransform& inner : c->transforms()) flatten(*inner, out);
    return;
  }
  out.push_back(&t);
}

// Tries to read the fused form from chain[start..]; fills p's suffix fields on success.
bool match_suffix(const std::vector<const Transform*>& chain, size_t start, ImagePipeline& p) {
  ImagePipeline q;
  size_t i = start;
  auto next_is = [&]<typename T>(const T*& slot) {
    if (i < chain.size())
      if (const auto* t = dynamic_cast<const T*>(chain[i])) {
        slot = t;
        ++i;
        return true;
      }
    return false;
  };
  if (!next_is(q.random_resized_crop)) {
    next_is(q.resize);
    next_is(q.center_crop);
  }
  next_is(q.flip);
  const ToTensor* to_tensor = nullptr;
  if (!next_is(to_tensor)) return false;
  next_is(q.normalize);
  if (i != chain.size()) return false;
  p.resize = q.resize;
  p.center_crop = q.center_crop;
  p.random_resized_crop = q.random_resized_crop;
  p.flip = q.flip;
  p.normalize = q.normalize;
  p.fused = true;
  return true;
}

// One axis of the geometry: the source span [src0, src0 + src_len) is resampled to `resized`
// samples, of which the output keeps [out0, out0 + out_len) (out0 may be negative and the span
// may pass `resized`: those samples are zero).
struct Axis {
  int64_t src0 = 0, src_len = 0, resized = 0, out0 = 0, out_len = 0;
  bool resample() const { return src_len != resized; }
  // The kept samples that lie inside [0, resized).
  int64_t lo() const { return std::max<int64_t>(0, out0); }
  int64_t hi() const { return std::min(resized, out0 + out_len); }
};

// torchvision's center_crop offset along one axis of size n for a window of `len`.
int64_t center_offset(int64_t n, int64_t len) {
  const int64_t pad_before = len > n ? (len - n) / 2 : 0;
  const int64_t padded = std::max(n, len);
  return detail::round_half_even(static_cast<double>(padded - len) / 2.0) - pad_before;
}


// PIL's taps recast with one trip count: output i reads in[start[i] .. start[i] + k) with weights
// w[i * k + t]. Each window is PIL's shifted left where it would pass the end of the input, with
// zero weights on the extra taps, so the integer sums (and so the bytes) are PIL's exactly while
// the inner loop no longer depends on i. Only outputs [lo, hi) are kept (i counts from lo).
struct FixedTaps {
  int64_t k = 0;
  std::vector<int32_t> start;
  std::vector<int32_t> w;
};

FixedTaps fixed_taps(const detail::AxisCoeffs& c, int64_t in_size, int64_t lo, int64_t hi) {
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

// PIL accumulates in a C int: sum of weights is 2^22 (+ rounding), times 255, plus the half, stays
// far below 2^31, so int32 gives PIL's sums; clip8 is PIL's on them.
constexpr int32_t kHalf = int32_t{1} << (detail::kPrecisionBits - 1);

// Samples of one channel along a row are `ps` bytes apart (1 for CHW planes, C for HWC pixels).
template <int K, int PS>
void horizontal_fixed(const uint8_t* row, uint8_t* dst, const FixedTaps& t) {
  const auto n = static_cast<int64_t>(t.start.size());
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* p = row + static_cast<int64_t>(t.start[static_cast<size_t>(i)]) * PS;
    const int32_t* k = t.w.data() + i * K;
    int32_t a = kHalf;
    for (int q = 0; q < K; ++q) a += int32_t{p[q * PS]} * k[q];
    dst[i] = detail::clip8(a);
  }
}

template <int PS>
void horizontal_any(const uint8_t* row, uint8_t* dst, const FixedTaps& t) {
  switch (t.k) {
    case 3: return horizontal_fixed<3, PS>(row, dst, t);
    case 5: return horizontal_fixed<5, PS>(row, dst, t);
    case 7: return horizontal_fixed<7, PS>(row, dst, t);
    case 9: return horizontal_fixed<9, PS>(row, dst, t);
    default: break;
  }
  const auto n = static_cast<int64_t>(t.start.size());
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* p = row + static_cast<int64_t>(t.start[static_cast<size_t>(i)]) * PS;
    const int32_t* k = t.w.data() + i * t.k;
    int32_t a = kHalf;
    for (int64_t q = 0; q < t.k; ++q) a += int32_t{p[q * PS]} * k[q];
    dst[i] = detail::clip8(a);
  }
}

// One row of the horizontal pass: the common tap counts and strides get loops the compiler
// unrolls.
void horizontal_row(const uint8_t* row, int64_t ps, uint8_t* dst, const FixedTaps& t) {
  switch (ps) {
    case 1: return horizontal_any<1>(row, dst, t);
    case 3: return horizontal_any<3>(row, dst, t);
    default: break;
  }
  const auto n = static_cast<int64_t>(t.start.size());
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* p = row + t.start[static_cast<size_t>(i)] * ps;
    const int32_t* k = t.w.data() + i * t.k;
    int32_t a = kHalf;
    for (int64_t q = 0; q < t.k; ++q) a += int32_t{p[q * ps]} * k[q];
    dst[i] = detail::clip8(a);
  }
}

// One row of the vertical pass: k consecutive rows of `first` (row stride n) weighted and summed,
// column by column (the loops vectorize).
__attribute__((always_inline)) inline void vertical_row_body(const uint8_t* first, int64_t n, const int32_t* k,
                                                             int64_t taps, int32_t* acc, uint8_t* out) {
  for (int64_t x = 0; x < n; ++x) acc[x] = kHalf;
  for (int64_t q = 0; q < taps; ++q) {
    const uint8_t* r = first + q * n;
    const int32_t kq = k[q];
    if (kq == 0) continue;
    for (int64_t x = 0; x < n; ++x) acc[x] += int32_t{r[x]} * kq;
  }
  for (int64_t x = 0; x < n; ++x) out[x] = detail::clip8(acc[x]);
}

__attribute__((target("avx2"))) void vertical_row_avx2(const uint8_t* first, int64_t n, const int32_t* k, int64_t taps,
                                                       int32_t* acc, uint8_t* out) {
  vertical_row_body(first, n, k, taps, acc, out);
}

void vertical_row_baseline(const uint8_t* first, int64_t n, const int32_t* k, int64_t taps, int32_t* acc,
                           uint8_t* out) {
  vertical_row_body(first, n, k, taps, acc, out);
}

// The AVX2 version where the CPU has it. A plain run-time check, not an ifunc (target_clones): an
// ifunc resolver runs before the sanitizer runtimes start, and crashed every TSan binary.
void vertical_row(const uint8_t* first, int64_t n, const int32_t* k, int64_t taps, int32_t* acc, uint8_t* out) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2)
    vertical_row_avx2(first, n, k, taps, acc, out);
  else
    vertical_row_baseline(first, n, k, taps, acc, out);
}

// Table lookup of one output row: output column ox shows value ox + shift (zero outside
// [0, n)), stored at ox or, mirrored, at ow - 1 - ox.
void store_row(const uint8_t* vals, const float* table, float zero, int64_t shift, int64_t n, float* orow, int64_t ow,
               bool mirror) {
  for (int64_t ox = 0; ox < ow; ++ox) {
    const int64_t x = ox + shift;
    const float v = (x < 0 || x >= n) ? zero : table[vals[x]];
    orow[mirror ? ow - 1 - ox : ox] = v;
  }
}

}  // namespace

ImagePipeline plan_image_pipeline(const AnyTransform& transform) {
  ImagePipeline p;
  if (!transform) return p;
  std::vector<const Transform*> chain;
  flatten(*transform, chain);
  // The longest fusable suffix: try every start, the earliest that matches wins.
  size_t start = 0;
  for (; start < chain.size(); ++start)
    if (match_suffix(chain, start, p)) break;
  if (!p.fused) {
    p.prefix = chain;
    return p;
  }
  p.prefix.assign(chain.begin(), chain.begin() + static_cast<std::ptrdiff_t>(start));
  if (p.center_crop) {
    p.output_size = std::array<int64_t, 2>{p.center_crop->height(), p.center_crop->width()};
  } else if (p.random_resized_crop) {
    p.output_size = std::array<int64_t, 2>{p.random_resized_crop->height(), p.random_resized_crop->width()};
  } else if (p.resize && p.resize->shorter() == 0) {
    p.output_size = std::array<int64_t, 2>{p.resize->height(), p.resize->width()};
  }
  if (p.prefix.empty() && p.resize) {
    if (p.resize->shorter() > 0)
      p.hint = {p.resize->shorter(), p.resize->shorter()};  // both sides >= the shorter one's target
    else
      p.hint = {p.resize->height(), p.resize->width()};
  }
  return p;
}

std::array<int64_t, 2> fused_output_size(const ImagePipeline& p, int64_t height, int64_t width) {
  if (p.output_size) return *p.output_size;
  if (p.resize) return p.resize->output_size(height, width);
  return {height, width};
}

// Decomposition: one sample, one thread (the loader spreads samples over threads). The work is
// the output window only: horizontal taps for the kept columns over the source rows that the
// kept rows' vertical taps touch (a u8 scratch of rows x kept columns per channel), then the
// vertical taps, the table lookup and the store.
void run_fused_pipeline(const ImagePipeline& p, const Tensor& image, SampleRng& rng, const std::vector<float>& lut,
                        float* out, ImageLayout layout) {
  EMBER_CHECK(p.fused, "run_fused_pipeline: the pipeline has no fused part");
  EMBER_CHECK(image.defined() && image.dim() == 3 && image.dtype() == DType::u8 && image.is_contiguous() &&
                  image.device().is_cpu(),
              "run_fused_pipeline: expected a contiguous u8 ", layout == ImageLayout::HWC ? "(H, W, C)" : "(C, H, W)",
              " CPU image, got ", describe(image));
  const bool hwc = layout == ImageLayout::HWC;
  const int64_t c = hwc ? image.size(2) : image.size(0), h = hwc ? image.size(0) : image.size(1),
                w = hwc ? image.size(1) : image.size(2);
  // Where sample (ch, y, x) lives: base(ch, y) + x * ps.
  const int64_t ps = hwc ? c : 1;
  auto base = [&](int64_t ch, int64_t y) { return hwc ? (y * w) * c + ch : (ch * h + y) * w; };
  EMBER_CHECK(h > 0 && w > 0, "run_fused_pipeline: empty image ", describe(image));
  EMBER_CHECK(static_cast<int64_t>(lut.size()) == c * 256, "run_fused_pipeline: table for ", lut.size() / 256,
              " channels, image has ", c);
  Axis ax{0, w, w, 0, w}, ay{0, h, h, 0, h};
  if (p.random_resized_crop) {
    const CropBox b = random_resized_crop_params(h, w, p.random_resized_crop->scale(), p.random_resized_crop->ratio(), rng);
    ay = {b.top, b.height, p.random_resized_crop->height(), 0, p.random_resized_crop->height()};
    ax = {b.left, b.width, p.random_resized_crop->width(), 0, p.random_resized_crop->width()};
  } else {
    if (p.resize) {
      const auto [rh, rw] = p.resize->output_size(h, w);
      ay = {0, h, rh, 0, rh};
      ax = {0, w, rw, 0, rw};
    }
    if (p.center_crop) {
      ay.out_len = p.center_crop->height();
      ax.out_len = p.center_crop->width();
      ay.out0 = center_offset(ay.resized, ay.out_len);
      ax.out0 = center_offset(ax.resized, ax.out_len);
    }
  }
  const bool mirror = p.flip && rng.uniform() < p.flip->p();
  const int64_t oh = ay.out_len, ow = ax.out_len;

  // Taps for the kept span of each resampled axis (coefficients of the whole axis, as PIL).
  const int64_t x_lo = ax.lo(), x_hi = ax.hi(), y_lo = ay.lo(), y_hi = ay.hi();
  const int64_t kept_w = std::max<int64_t>(0, x_hi - x_lo);
  FixedTaps tx, ty;
  if (ax.resample()) tx = fixed_taps(detail::precompute_coeffs(ax.src_len, ax.resized), ax.src_len, x_lo, x_hi);
  if (ay.resample()) ty = fixed_taps(detail::precompute_coeffs(ay.src_len, ay.resized), ay.src_len, y_lo, y_hi);
  // Source rows (relative to the window) that the kept output rows read.
  int64_t r_lo = 0, r_hi = 0;
  if (y_lo < y_hi) {
    if (ay.resample()) {
      r_lo = ty.start.front();
      r_hi = ty.start.back() + ty.k;  // starts never decrease along an axis
      for (int32_t st : ty.start) r_lo = std::min<int64_t>(r_lo, st);
    } else {
      r_lo = y_lo;
      r_hi = y_hi;
    }
  }
  const int64_t rows = r_hi - r_lo;
  std::vector<uint8_t> mid(static_cast<size_t>(rows * kept_w));  // one channel's horizontal pass
  std::vector<int32_t> acc(static_cast<size_t>(kept_w));
  std::vector<uint8_t> line(static_cast<size_t>(kept_w));  // one output row after the vertical pass
  const uint8_t* src = image.data_ptr<uint8_t>();

  for (int64_t ch = 0; ch < c; ++ch) {
    const float* table = lut.data() + ch * 256;
    float* plane = out + ch * oh * ow;
    const float zero = table[0];
    // Horizontal pass over the needed rows (or a plain copy when the width does not change).
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = src + base(ch, ay.src0 + r_lo + r) + ax.src0 * ps;
      uint8_t* dst = mid.data() + r * kept_w;
      if (ax.resample()) {
        horizontal_row(row, ps, dst, tx);
      } else if (ps == 1) {
        std::memcpy(dst, row + x_lo, static_cast<size_t>(kept_w));
      } else {
        for (int64_t x = 0; x < kept_w; ++x) dst[x] = row[(x_lo + x) * ps];
      }
    }
    // Vertical pass, lookup and store; rows and columns outside the resized image are zero.
    for (int64_t oy = 0; oy < oh; ++oy) {
      float* orow = plane + oy * ow;
      const int64_t y = ay.out0 + oy;
      if (y < y_lo || y >= y_hi) {
        std::fill(orow, orow + ow, zero);
        continue;
      }
      const uint8_t* vals = nullptr;
      if (ay.resample()) {
        const auto i = static_cast<size_t>(y - y_lo);
        vertical_row(mid.data() + (ty.start[i] - r_lo) * kept_w, kept_w, ty.w.data() + i * static_cast<size_t>(ty.k),
                     ty.k, acc.data(), line.data());
        vals = line.data();
      } else {
        vals = mid.data() + (y - r_lo) * kept_w;
      }
      store_row(vals, table, zero, ax.out0 - x_lo, kept_w, orow, ow, mirror);
    }
  }
}

}  // namespace ember::data
