// The fused per-sample image pipeline (Note [Fused image pipeline] in image_pipeline.h).

#include "image_pipeline.h"

#include <algorithm>
#include <cstring>

#include "resample.h"
#include "resample_rows.h"

namespace ember::data {

namespace {

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


// Table lookup of one output row: output column ox shows value ox + shift (zero outside
// [0, n)), read at vals[(ox + shift) * stride] and stored at ox or, mirrored, at ow - 1 - ox. The
// borders are filled apart, so the lookup loop has no branch.
template <int Stride>
void store_row(const uint8_t* vals, int64_t stride, const float* table, float zero, int64_t shift, int64_t n,
               float* orow, int64_t ow, bool mirror) {
  if constexpr (Stride > 0) stride = Stride;
  const int64_t lo = std::clamp<int64_t>(-shift, 0, ow), hi = std::clamp<int64_t>(n - shift, lo, ow);
  // Columns [0, lo) and [hi, ow) are zero; mirrored, they are the stored columns [ow - lo, ow) and [0, ow - hi).
  const int64_t z0 = mirror ? ow - hi : lo, z1 = mirror ? ow - lo : hi;
  std::fill(orow, orow + z0, zero);
  std::fill(orow + z1, orow + ow, zero);
  const uint8_t* v = vals + (lo + shift) * stride;
  if (mirror) {
    float* o = orow + ow - 1 - lo;
    for (int64_t x = 0; x < hi - lo; ++x) o[-x] = table[v[x * stride]];
  } else {
    float* o = orow + lo;
    for (int64_t x = 0; x < hi - lo; ++x) o[x] = table[v[x * stride]];
  }
}

void store_row(const uint8_t* vals, int64_t stride, const float* table, float zero, int64_t shift, int64_t n,
               float* orow, int64_t ow, bool mirror) {
  switch (stride) {
    case 1: return store_row<1>(vals, stride, table, zero, shift, n, orow, ow, mirror);
    case 3: return store_row<3>(vals, stride, table, zero, shift, n, orow, ow, mirror);
    default: return store_row<0>(vals, stride, table, zero, shift, n, orow, ow, mirror);
  }
}

}  // namespace

ImagePipeline plan_image_pipeline(const AnyTransform& transform) {
  ImagePipeline p;
  if (!transform) return p;
  const std::vector<const Transform*> chain = detail::flatten(*transform);
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
  // The channels one buffer holds: all of them, interleaved, for HWC (one pass over each source
  // row); one plane at a time for CHW. Every buffer below keeps the input's interleaving.
  const int64_t groups = hwc ? 1 : c, gc = hwc ? c : 1;
  detail::HorizontalPass hx;
  detail::FixedTaps ty;
  if (ax.resample())
    hx = detail::HorizontalPass(detail::fixed_taps(detail::precompute_coeffs(ax.src_len, ax.resized), ax.src_len, x_lo, x_hi),
                                gc, ax.src_len);
  if (ay.resample()) ty = detail::fixed_taps(detail::precompute_coeffs(ay.src_len, ay.resized), ay.src_len, y_lo, y_hi);
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
  const int64_t rows = r_hi - r_lo, row_len = kept_w * gc;
  // The horizontal pass of one buffer, and its slack for the last row's whole-word stores.
  std::vector<uint8_t> mid(static_cast<size_t>(rows * row_len + detail::HorizontalPass::kDstSlack));
  std::vector<int32_t> acc(static_cast<size_t>(row_len));
  std::vector<uint8_t> line(static_cast<size_t>(row_len));  // one output row after the vertical pass
  const uint8_t* src = image.data_ptr<uint8_t>();

  for (int64_t g = 0; g < groups; ++g) {
    // Horizontal pass over the needed rows (or a plain copy when the width does not change).
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = src + base(g, ay.src0 + r_lo + r) + ax.src0 * ps;
      uint8_t* dst = mid.data() + r * row_len;
      if (ax.resample())
        hx.run(row, dst);
      else
        std::memcpy(dst, row + x_lo * ps, static_cast<size_t>(row_len));
    }
    // Vertical pass, lookup and store; rows and columns outside the resized image are zero.
    for (int64_t oy = 0; oy < oh; ++oy) {
      const int64_t y = ay.out0 + oy;
      const uint8_t* vals = nullptr;
      if (y >= y_lo && y < y_hi) {
        if (ay.resample()) {
          const auto i = static_cast<size_t>(y - y_lo);
          detail::vertical_row(mid.data() + (ty.start[i] - r_lo) * row_len, row_len,
                               ty.w.data() + i * static_cast<size_t>(ty.k), ty.k, acc.data(), line.data());
          vals = line.data();
        } else {
          vals = mid.data() + (y - r_lo) * row_len;
        }
      }
      for (int64_t j = 0; j < gc; ++j) {
        const int64_t ch = g * gc + j;
        const float* table = lut.data() + ch * 256;
        float* orow = out + (ch * oh + oy) * ow;
        if (vals == nullptr)
          std::fill(orow, orow + ow, table[0]);
        else
          store_row(vals + j, gc, table, table[0], ax.out0 - x_lo, kept_w, orow, ow, mirror);
      }
    }
  }
}

}  // namespace ember::data
