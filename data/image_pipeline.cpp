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
                        float* out) {
  EMBER_CHECK(p.fused, "run_fused_pipeline: the pipeline has no fused part");
  EMBER_CHECK(image.defined() && image.dim() == 3 && image.dtype() == DType::u8 && image.is_contiguous() &&
                  image.device().is_cpu(),
              "run_fused_pipeline: expected a contiguous u8 (C, H, W) CPU image, got ", describe(image));
  const int64_t c = image.size(0), h = image.size(1), w = image.size(2);
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
  detail::AxisCoeffs cx, cy;
  if (ax.resample()) cx = detail::precompute_coeffs(ax.src_len, ax.resized);
  if (ay.resample()) cy = detail::precompute_coeffs(ay.src_len, ay.resized);
  const int64_t x_lo = ax.lo(), x_hi = ax.hi(), y_lo = ay.lo(), y_hi = ay.hi();
  const int64_t kept_w = std::max<int64_t>(0, x_hi - x_lo);
  // Source rows (relative to the window) that the kept output rows read.
  int64_t r_lo = 0, r_hi = 0;
  if (y_lo < y_hi) {
    if (ay.resample()) {
      r_lo = cy.first[static_cast<size_t>(y_lo)];
      r_hi = r_lo;
      for (int64_t y = y_lo; y < y_hi; ++y)
        r_hi = std::max(r_hi, cy.first[static_cast<size_t>(y)] + cy.count[static_cast<size_t>(y)]);
    } else {
      r_lo = y_lo;
      r_hi = y_hi;
    }
  }
  const int64_t rows = r_hi - r_lo;
  std::vector<uint8_t> mid(static_cast<size_t>(rows * kept_w));  // one channel's horizontal pass
  std::vector<int64_t> acc(static_cast<size_t>(kept_w));
  std::vector<uint8_t> line(static_cast<size_t>(kept_w));  // one output row after the vertical pass
  const uint8_t* src = image.data_ptr<uint8_t>();
  constexpr int64_t kHalf = int64_t{1} << (detail::kPrecisionBits - 1);

  for (int64_t ch = 0; ch < c; ++ch) {
    const float* table = lut.data() + ch * 256;
    float* plane = out + ch * oh * ow;
    const float zero = table[0];
    // Horizontal pass over the needed rows (or a plain copy when the width does not change).
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = src + (ch * h + ay.src0 + r_lo + r) * w + ax.src0;
      uint8_t* dst = mid.data() + r * kept_w;
      if (!ax.resample()) {
        std::memcpy(dst, row + x_lo, static_cast<size_t>(kept_w));
        continue;
      }
      for (int64_t x = x_lo; x < x_hi; ++x) {
        const int32_t* k = cx.k.data() + x * cx.ksize;
        const uint8_t* s = row + cx.first[static_cast<size_t>(x)];
        int64_t a = kHalf;
        for (int64_t t = 0; t < cx.count[static_cast<size_t>(x)]; ++t) a += int64_t{s[t]} * k[t];
        dst[x - x_lo] = detail::clip8(a);
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
        std::fill(acc.begin(), acc.end(), kHalf);
        const int32_t* k = cy.k.data() + y * cy.ksize;
        const int64_t first = cy.first[static_cast<size_t>(y)] - r_lo;
        for (int64_t t = 0; t < cy.count[static_cast<size_t>(y)]; ++t) {
          const uint8_t* m = mid.data() + (first + t) * kept_w;
          const int64_t kt = k[t];
          for (int64_t x = 0; x < kept_w; ++x) acc[static_cast<size_t>(x)] += int64_t{m[x]} * kt;
        }
        for (int64_t x = 0; x < kept_w; ++x) line[static_cast<size_t>(x)] = detail::clip8(acc[static_cast<size_t>(x)]);
        vals = line.data();
      } else {
        vals = mid.data() + (y - r_lo) * kept_w;
      }
      for (int64_t ox = 0; ox < ow; ++ox) {
        const int64_t x = ax.out0 + ox;
        const float v = (x < x_lo || x >= x_hi) ? zero : table[vals[x - x_lo]];
        orow[mirror ? ow - 1 - ox : ox] = v;
      }
    }
  }
}

}  // namespace ember::data
