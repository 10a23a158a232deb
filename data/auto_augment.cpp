// TrivialAugmentWide, RandAugment, RandomErasing and their image ops (data/auto_augment.h).

#include "auto_augment.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <numbers>
#include <sstream>

#include "resample.h"

namespace ember::data {

namespace {

// A contiguous u8 (1 or 3, H, W) CPU image, after checking it.
Tensor u8_image(const Tensor& image, const std::string& op) {
  EMBER_CHECK(image.defined() && image.dim() == 3 && image.device().is_cpu() && image.dtype() == DType::u8, op,
              ": expected a uint8 (C, H, W) CPU image, got ",
              image.defined() ? describe(image) : std::string("an undefined tensor"));
  EMBER_CHECK(image.size(0) == 1 || image.size(0) == 3, op, ": expected 1 or 3 channels, got ", describe(image));
  return image.contiguous();
}

// A new u8 image of `image`'s shape whose every channel plane is f(in, out, plane): `in` points to
// that plane of the checked image (u8_image), `out` to the same plane of the result, each of
// `plane` = H * W values.
template <typename F>
Tensor map_planes(const Tensor& image, const std::string& op, F&& f) {
  const Tensor in = u8_image(image, op);
  const int64_t c = in.size(0), plane = in.size(1) * in.size(2);
  Tensor out = empty(in.shape(), {.dtype = DType::u8});
  const uint8_t* src = in.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  for (int64_t ch = 0; ch < c; ++ch) f(src + ch * plane, dst + ch * plane, plane);
  return out;
}

// torchvision's _blend on u8: trunc(clamp(f * a + (1 - f) * b, 0, 255)), each product and the
// sum in float32 (the same operations as adjust_brightness & co. in image_transforms.cpp).
uint8_t blend(float f, float g, float a, float b) {
  volatile float pa = f * a;  // volatile: keep the compiler from contracting into an FMA
  volatile float pb = g * b;
  const float s = pa + pb;
  return static_cast<uint8_t>(std::clamp(s, 0.0f, 255.0f));
}

// CPython's math.degrees / math.radians.
double degrees(double x) { return x * (180.0 / std::numbers::pi); }
double radians(double x) { return x * (std::numbers::pi / 180.0); }

// torch.linspace(start, end, steps) in float32, value for value as torch 1.13's CPU kernel
// (ATen's linspace kernel, built for AVX2, x86's default) computes it: step = (end - start) /
// (steps - 1) in float32; the elements run through a loop over pairs of 8-lane vectors, then a
// scalar tail. A vector starting at element b holds base + k * step in its lanes k, base being
// start + step * b before the halfway point (steps / 2) and end - step * (steps - 1 - b) after it
// (chosen by b alone); a tail element i is the same formula at i, which that build contracts into
// a fused multiply-add (one rounding). The roundings differ in the last bit, torchvision's
// magnitude tables carry that pattern, and it is reproduced here (the ctest
// data:torchvision_augment compares the tables exactly).
std::vector<float> linspace_f32(double start, double end, int64_t steps) {
  std::vector<float> v(static_cast<size_t>(steps));
  const auto s = static_cast<float>(start), e = static_cast<float>(end);
  if (steps == 1) {
    v[0] = s;
    return v;
  }
  const float step = (e - s) / static_cast<float>(steps - 1);
  const int64_t halfway = steps / 2;
  constexpr int64_t kLanes = 8;
  const int64_t vectorized = (steps / (2 * kLanes)) * (2 * kLanes);
  for (int64_t b = 0; b < vectorized; b += kLanes) {
    volatile float p = step * static_cast<float>(b < halfway ? b : steps - b - 1);
    const float base = b < halfway ? s + p : e - p;
    for (int64_t k = 0; k < kLanes; ++k) {
      volatile float q = static_cast<float>(k) * step;
      v[static_cast<size_t>(b + k)] = base + q;
    }
  }
  for (int64_t i = vectorized; i < steps; ++i)
    v[static_cast<size_t>(i)] = i < halfway ? std::fma(step, static_cast<float>(i), s)
                                            : std::fma(-step, static_cast<float>(steps - i - 1), e);
  return v;
}

}  // namespace

// ---- affine ------------------------------------------------------------------------------------

Tensor affine_nearest(const Tensor& image, double angle, std::array<double, 2> translate, std::array<double, 2> shear,
                      std::optional<std::array<double, 2>> center) {
  const Tensor in = u8_image(image, "affine");
  const int64_t c = in.size(0), h = in.size(1), w = in.size(2);
  // F.affine: the centre in pixels relative to the image centre.
  double cx = 0.0, cy = 0.0;
  if (center) {
    cx = 1.0 * ((*center)[0] - static_cast<double>(w) * 0.5);
    cy = 1.0 * ((*center)[1] - static_cast<double>(h) * 0.5);
  }
  // _get_inverse_affine_matrix (scale 1), in double as Python computes it.
  const double rot = radians(angle), sx = radians(shear[0]), sy = radians(shear[1]);
  const double tx = translate[0], ty = translate[1];
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double cc = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  double m[6] = {d, -b, 0.0, -cc, a, 0.0};
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
  // _gen_affine_grid in float32: theta rescaled by (0.5 w, 0.5 h), applied to the centred grid.
  const float half_w = 0.5f * static_cast<float>(w), half_h = 0.5f * static_cast<float>(h);
  const float r[6] = {static_cast<float>(m[0]) / half_w, static_cast<float>(m[1]) / half_w,
                      static_cast<float>(m[2]) / half_w, static_cast<float>(m[3]) / half_h,
                      static_cast<float>(m[4]) / half_h, static_cast<float>(m[5]) / half_h};
  Tensor out = zeros({c, h, w}, {.dtype = DType::u8});
  const uint8_t* src = in.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  for (int64_t y = 0; y < h; ++y) {
    const float by = static_cast<float>(y) - 0.5f * static_cast<float>(h - 1);
    for (int64_t x = 0; x < w; ++x) {
      const float bx = static_cast<float>(x) - 0.5f * static_cast<float>(w - 1);
      volatile float gx0 = bx * r[0], gx1 = by * r[1], gy0 = bx * r[3], gy1 = by * r[4];
      const float gx = (gx0 + gx1) + r[2], gy = (gy0 + gy1) + r[5];
      // grid_sample, align_corners=False: (g + 1) * size / 2 - 0.5, nearest with ties to even.
      volatile float ux = (gx + 1.0f) * half_w, uy = (gy + 1.0f) * half_h;
      const float ix = std::nearbyint(ux - 0.5f), iy = std::nearbyint(uy - 0.5f);
      if (!(ix >= 0.0f && ix < static_cast<float>(w) && iy >= 0.0f && iy < static_cast<float>(h))) continue;
      const auto sx_i = static_cast<int64_t>(ix), sy_i = static_cast<int64_t>(iy);
      for (int64_t ch = 0; ch < c; ++ch) dst[(ch * h + y) * w + x] = src[(ch * h + sy_i) * w + sx_i];
    }
  }
  return out;
}

Tensor rotate_nearest(const Tensor& image, double degrees_ccw) {
  // F.rotate passes -angle to the matrix (its rotation direction differs from affine's).
  return affine_nearest(image, -degrees_ccw, {0.0, 0.0}, {0.0, 0.0});
}

// ---- colour ops --------------------------------------------------------------------------------

Tensor adjust_sharpness(const Tensor& image, double factor) {
  const Tensor in = u8_image(image, "adjust_sharpness");
  EMBER_CHECK(std::isfinite(factor) && factor >= 0.0, "adjust_sharpness: factor ", factor,
              " must be finite and non-negative");
  const int64_t c = in.size(0), h = in.size(1), w = in.size(2);
  if (h <= 2 || w <= 2) return image;
  const uint8_t* src = in.data_ptr<uint8_t>();
  // _blurred_degenerate_image: a float32 3x3 convolution, rounded (half to even) back to u8, on
  // the interior; the border keeps the image's pixels.
  std::vector<uint8_t> blurred(src, src + in.numel());
  const float k_side = 1.0f / 13.0f, k_mid = 5.0f / 13.0f;
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t y = 1; y < h - 1; ++y)
      for (int64_t x = 1; x < w - 1; ++x) {
        float s = 0.0f;
        for (int64_t dy = -1; dy <= 1; ++dy)
          for (int64_t dx = -1; dx <= 1; ++dx) {
            volatile float p = static_cast<float>(src[(ch * h + y + dy) * w + x + dx]) * (dy == 0 && dx == 0 ? k_mid : k_side);
            s += p;
          }
        blurred[static_cast<size_t>((ch * h + y) * w + x)] = static_cast<uint8_t>(std::clamp(std::nearbyint(s), 0.0f, 255.0f));
      }
  Tensor out = empty(in.shape(), {.dtype = DType::u8});
  uint8_t* dst = out.data_ptr<uint8_t>();
  const auto f = static_cast<float>(factor), g = static_cast<float>(1.0 - factor);
  for (int64_t i = 0; i < in.numel(); ++i)
    dst[i] = blend(f, g, static_cast<float>(src[i]), static_cast<float>(blurred[static_cast<size_t>(i)]));
  return out;
}

Tensor adjust_hue(const Tensor& image, double hue_factor) {
  const Tensor in = u8_image(image, "adjust_hue");
  EMBER_CHECK(hue_factor >= -0.5 && hue_factor <= 0.5, "adjust_hue: hue_factor ", hue_factor,
              " must lie in [-0.5, 0.5]");
  if (in.size(0) == 1) return image;
  const int64_t plane = in.size(1) * in.size(2);
  const uint8_t* src = in.data_ptr<uint8_t>();
  Tensor out = empty(in.shape(), {.dtype = DType::u8});
  uint8_t* dst = out.data_ptr<uint8_t>();
  const auto hf = static_cast<float>(hue_factor);
  for (int64_t i = 0; i < plane; ++i) {
    const float r = static_cast<float>(src[i]) / 255.0f, g = static_cast<float>(src[plane + i]) / 255.0f,
                b = static_cast<float>(src[2 * plane + i]) / 255.0f;
    // _rgb2hsv
    const float maxc = std::max({r, g, b}), minc = std::min({r, g, b});
    const bool eqc = maxc == minc;
    const float cr = maxc - minc;
    const float s = cr / (eqc ? 1.0f : maxc);
    const float crd = eqc ? 1.0f : cr;
    const float rc = (maxc - r) / crd, gc = (maxc - g) / crd, bc = (maxc - b) / crd;
    const float hr = maxc == r ? bc - gc : 0.0f;
    const float hg = (maxc == g && maxc != r) ? (2.0f + rc) - bc : 0.0f;
    const float hb = (maxc != g && maxc != r) ? (4.0f + gc) - rc : 0.0f;
    float hue = std::fmod((hr + hg + hb) / 6.0f + 1.0f, 1.0f);
    // (h + hue_factor) % 1.0: Python's modulo, the sign of the divisor.
    hue = hue + hf;
    if (const float m = std::fmod(hue, 1.0f); m != 0.0f && m < 0.0f) hue = m + 1.0f; else hue = m;
    // _hsv2rgb
    const float v = maxc;
    volatile float h6 = hue * 6.0f;
    const float fi = std::floor(h6);
    const float f = h6 - fi;
    const int sector = ((static_cast<int>(fi) % 6) + 6) % 6;
    volatile float sf = s * f, s1f = s * (1.0f - f);
    const float p = std::clamp(v * (1.0f - s), 0.0f, 1.0f);
    const float q = std::clamp(v * (1.0f - sf), 0.0f, 1.0f);
    const float t = std::clamp(v * (1.0f - s1f), 0.0f, 1.0f);
    float rgb[3];
    switch (sector) {
      case 0: rgb[0] = v, rgb[1] = t, rgb[2] = p; break;
      case 1: rgb[0] = q, rgb[1] = v, rgb[2] = p; break;
      case 2: rgb[0] = p, rgb[1] = v, rgb[2] = t; break;
      case 3: rgb[0] = p, rgb[1] = q, rgb[2] = v; break;
      case 4: rgb[0] = t, rgb[1] = p, rgb[2] = v; break;
      default: rgb[0] = v, rgb[1] = p, rgb[2] = q; break;
    }
    for (int k = 0; k < 3; ++k) dst[k * plane + i] = static_cast<uint8_t>(rgb[k] * 255.0f);
  }
  return out;
}

Tensor posterize(const Tensor& image, int bits) {
  const Tensor in = u8_image(image, "posterize");
  EMBER_CHECK(bits >= 0 && bits <= 8, "posterize: bits ", bits, " must lie in [0, 8]");
  const auto mask = static_cast<uint8_t>(~((1u << (8 - bits)) - 1u));
  Tensor out = empty(in.shape(), {.dtype = DType::u8});
  const uint8_t* src = in.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  for (int64_t i = 0; i < in.numel(); ++i) dst[i] = src[i] & mask;
  return out;
}

Tensor solarize(const Tensor& image, double threshold) {
  // img >= threshold compares in float32 (a u8 tensor against a Python float).
  const auto t = static_cast<float>(threshold);
  return map_planes(image, "solarize", [t](const uint8_t* p, uint8_t* q, int64_t plane) {
    for (int64_t i = 0; i < plane; ++i) q[i] = static_cast<float>(p[i]) >= t ? static_cast<uint8_t>(255 - p[i]) : p[i];
  });
}

Tensor autocontrast(const Tensor& image) {
  return map_planes(image, "autocontrast", [](const uint8_t* p, uint8_t* q, int64_t plane) {
    const auto [lo_it, hi_it] = std::minmax_element(p, p + plane);
    float minimum = plane ? static_cast<float>(*lo_it) : 0.0f, maximum = plane ? static_cast<float>(*hi_it) : 0.0f;
    float scale = 255.0f / (maximum - minimum);
    if (!std::isfinite(scale)) minimum = 0.0f, scale = 1.0f;  // a flat channel
    for (int64_t i = 0; i < plane; ++i) {
      volatile float v = (static_cast<float>(p[i]) - minimum) * scale;
      q[i] = static_cast<uint8_t>(std::clamp(static_cast<float>(v), 0.0f, 255.0f));
    }
  });
}

Tensor equalize(const Tensor& image) {
  return map_planes(image, "equalize", [](const uint8_t* p, uint8_t* q, int64_t plane) {
    std::array<int64_t, 256> hist{};
    for (int64_t i = 0; i < plane; ++i) ++hist[p[i]];
    // The sum of the non-zero bins but the last non-zero one.
    int64_t last = 255;
    while (last > 0 && hist[static_cast<size_t>(last)] == 0) --last;
    int64_t total = 0;
    for (int64_t v = 0; v < last; ++v) total += hist[static_cast<size_t>(v)];
    const int64_t step = total / 255;
    if (step == 0) {
      std::copy(p, p + plane, q);
      return;
    }
    std::array<uint8_t, 256> lut{};
    int64_t cum = 0;
    for (int64_t v = 0; v < 256; ++v) {
      // lut = pad((cumsum + step // 2) // step, [1, 0])[:-1], clamped to 255.
      lut[static_cast<size_t>(v)] = static_cast<uint8_t>(std::min<int64_t>(255, v == 0 ? 0 : (cum + step / 2) / step));
      cum += hist[static_cast<size_t>(v)];
    }
    for (int64_t i = 0; i < plane; ++i) q[i] = lut[p[i]];
  });
}

Tensor erase(const Tensor& image, int64_t top, int64_t left, int64_t height, int64_t width, float value) {
  EMBER_CHECK(image.defined() && image.dim() == 3 && image.device().is_cpu() && image.dtype() == DType::f32,
              "erase: expected a float32 (C, H, W) CPU image (after ToTensor), got ",
              image.defined() ? describe(image) : std::string("an undefined tensor"));
  const int64_t c = image.size(0), h = image.size(1), w = image.size(2);
  EMBER_CHECK(top >= 0 && left >= 0 && height >= 0 && width >= 0 && top + height <= h && left + width <= w,
              "erase: the box (top ", top, ", left ", left, ", ", height, "x", width, ") is outside ", describe(image));
  Tensor out = image.contiguous().clone();
  float* p = out.data_ptr<float>();
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t y = top; y < top + height; ++y) std::fill_n(p + (ch * h + y) * w + left, width, value);
  return out;
}

// ---- ops and bins ------------------------------------------------------------------------------

namespace {
constexpr const char* kOpNames[kNumAugmentOps] = {"Identity", "ShearX",   "ShearY",    "TranslateX", "TranslateY",
                                                  "Rotate",   "Brightness", "Color",   "Contrast",   "Sharpness",
                                                  "Posterize", "Solarize", "AutoContrast", "Equalize"};

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}
}  // namespace

std::string augment_op_name(AugmentOp op) { return kOpNames[static_cast<int>(op)]; }

std::optional<AugmentOp> parse_augment_op(const std::string& name) {
  for (int i = 0; i < kNumAugmentOps; ++i)
    if (lower(kOpNames[i]) == lower(name)) return static_cast<AugmentOp>(i);
  return std::nullopt;
}

Tensor apply_augment_op(const Tensor& image, AugmentOp op, double magnitude) {
  switch (op) {
    case AugmentOp::identity: return image;
    case AugmentOp::shear_x:
      return affine_nearest(image, 0.0, {0.0, 0.0}, {degrees(std::atan(magnitude)), 0.0}, std::array<double, 2>{0, 0});
    case AugmentOp::shear_y:
      return affine_nearest(image, 0.0, {0.0, 0.0}, {0.0, degrees(std::atan(magnitude))}, std::array<double, 2>{0, 0});
    case AugmentOp::translate_x:
      return affine_nearest(image, 0.0, {std::trunc(magnitude), 0.0}, {0.0, 0.0});
    case AugmentOp::translate_y:
      return affine_nearest(image, 0.0, {0.0, std::trunc(magnitude)}, {0.0, 0.0});
    case AugmentOp::rotate: return rotate_nearest(image, magnitude);
    case AugmentOp::brightness: return adjust_brightness(image, 1.0 + magnitude);
    case AugmentOp::color: return adjust_saturation(image, 1.0 + magnitude);
    case AugmentOp::contrast: return adjust_contrast(image, 1.0 + magnitude);
    case AugmentOp::sharpness: return adjust_sharpness(image, 1.0 + magnitude);
    case AugmentOp::posterize: return posterize(image, static_cast<int>(magnitude));
    case AugmentOp::solarize: return solarize(image, magnitude);
    case AugmentOp::autocontrast: return autocontrast(image);
    case AugmentOp::equalize: return equalize(image);
  }
  return image;
}

AugmentBins augment_bins(AugmentPolicy policy, AugmentOp op, int64_t num_bins, int64_t height, int64_t width) {
  EMBER_CHECK(num_bins >= 2, "augment_bins: num_bins ", num_bins, " must be at least 2");
  const bool wide = policy == AugmentPolicy::trivial_augment_wide;
  const auto n = num_bins;
  switch (op) {
    case AugmentOp::identity:
    case AugmentOp::autocontrast:
    case AugmentOp::equalize: return {};
    case AugmentOp::shear_x:
    case AugmentOp::shear_y: return {linspace_f32(0.0, wide ? 0.99 : 0.3, n), true};
    case AugmentOp::translate_x:
      return {linspace_f32(0.0, wide ? 32.0 : 150.0 / 331.0 * static_cast<double>(width), n), true};
    case AugmentOp::translate_y:
      return {linspace_f32(0.0, wide ? 32.0 : 150.0 / 331.0 * static_cast<double>(height), n), true};
    case AugmentOp::rotate: return {linspace_f32(0.0, wide ? 135.0 : 30.0, n), true};
    case AugmentOp::brightness:
    case AugmentOp::color:
    case AugmentOp::contrast:
    case AugmentOp::sharpness: return {linspace_f32(0.0, wide ? 0.99 : 0.9, n), true};
    case AugmentOp::posterize: {
      // 8 - (arange(n) / ((n - 1) / k)).round(): a float32 division, rounded half to even.
      AugmentBins b;
      const auto divisor = static_cast<float>(static_cast<double>(n - 1) / (wide ? 6.0 : 4.0));
      for (int64_t i = 0; i < n; ++i)
        b.magnitudes.push_back(static_cast<float>(8 - static_cast<int>(std::nearbyint(static_cast<float>(i) / divisor))));
      return b;
    }
    case AugmentOp::solarize: return {linspace_f32(255.0, 0.0, n), false};
  }
  return {};
}

namespace {
// The op, then (for ops with bins) the magnitude at `bin` with the drawn sign.
AugmentChoice choose(AugmentPolicy policy, int64_t op_index, int64_t bin, bool negative, int64_t num_bins,
                     int64_t height, int64_t width) {
  AugmentChoice ch;
  ch.op = static_cast<AugmentOp>(op_index);
  const AugmentBins bins = augment_bins(policy, ch.op, num_bins, height, width);
  ch.bin = bin;
  if (bins.magnitudes.empty()) return ch;
  ch.magnitude = bins.magnitudes[static_cast<size_t>(bin)];
  ch.negative = bins.signed_magnitude && negative;
  if (ch.negative) ch.magnitude = -ch.magnitude;
  return ch;
}
}  // namespace

// ---- TrivialAugmentWide --------------------------------------------------------------------------

TrivialAugmentWide::TrivialAugmentWide(int64_t num_bins) : num_bins_(num_bins) {
  EMBER_CHECK(num_bins >= 2, "TrivialAugmentWide: num_bins ", num_bins, " must be at least 2");
}

std::string TrivialAugmentWide::name() const {
  return "TrivialAugmentWide(num_magnitude_bins=" + std::to_string(num_bins_) + ")";
}

AugmentChoice TrivialAugmentWide::get_params(SampleRng& rng, int64_t height, int64_t width) const {
  const auto op = static_cast<int64_t>(rng.below(kNumAugmentOps));
  const auto bin = static_cast<int64_t>(rng.below(static_cast<uint64_t>(num_bins_)));
  const bool negative = rng.uniform() < 0.5f;
  return choose(AugmentPolicy::trivial_augment_wide, op, bin, negative, num_bins_, height, width);
}

Tensor TrivialAugmentWide::apply(const Tensor& image, SampleRng& rng) const {
  const Tensor in = u8_image(image, name());
  const AugmentChoice ch = get_params(rng, in.size(1), in.size(2));
  return apply_augment_op(in, ch.op, ch.magnitude);
}

// ---- RandAugment ---------------------------------------------------------------------------------

RandAugment::RandAugment(int64_t num_ops, int64_t magnitude, int64_t num_bins)
    : num_ops_(num_ops), magnitude_(magnitude), num_bins_(num_bins) {
  EMBER_CHECK(num_ops >= 0 && num_bins >= 2 && magnitude >= 0 && magnitude < num_bins, "RandAugment: num_ops ",
              num_ops, " must be >= 0 and magnitude ", magnitude, " in [0, num_bins = ", num_bins, ")");
}

std::string RandAugment::name() const {
  std::ostringstream os;
  os << "RandAugment(num_ops=" << num_ops_ << ", magnitude=" << magnitude_ << ", num_magnitude_bins=" << num_bins_
     << ")";
  return os.str();
}

std::vector<AugmentChoice> RandAugment::get_params(SampleRng& rng, int64_t height, int64_t width) const {
  std::vector<AugmentChoice> out;
  for (int64_t k = 0; k < num_ops_; ++k) {
    const auto op = static_cast<int64_t>(rng.below(kNumAugmentOps));
    const bool negative = rng.uniform() < 0.5f;
    out.push_back(choose(AugmentPolicy::rand_augment, op, magnitude_, negative, num_bins_, height, width));
  }
  return out;
}

Tensor RandAugment::apply(const Tensor& image, SampleRng& rng) const {
  Tensor x = u8_image(image, name());
  for (const AugmentChoice& ch : get_params(rng, x.size(1), x.size(2))) x = apply_augment_op(x, ch.op, ch.magnitude);
  return x;
}

// ---- RandomErasing -------------------------------------------------------------------------------

RandomErasing::RandomErasing(double p, std::pair<double, double> scale, std::pair<double, double> ratio, float value)
    : p_(p), scale_(scale), ratio_(ratio), value_(value) {
  EMBER_CHECK(p >= 0.0 && p <= 1.0, "RandomErasing: p = ", p, " must lie in [0, 1]");
  EMBER_CHECK(scale.first >= 0.0 && scale.first <= scale.second && scale.second <= 1.0, "RandomErasing: scale (",
              scale.first, ", ", scale.second, ") must be an increasing pair in [0, 1]");
  EMBER_CHECK(ratio.first > 0.0 && ratio.first <= ratio.second && std::isfinite(ratio.second), "RandomErasing: ratio (",
              ratio.first, ", ", ratio.second, ") must be a positive increasing pair");
}

std::string RandomErasing::name() const {
  std::ostringstream os;
  os << "RandomErasing(p=" << p_ << ", scale=(" << scale_.first << ", " << scale_.second << "), ratio=("
     << ratio_.first << ", " << ratio_.second << "), value=" << value_ << ")";
  return os.str();
}

std::optional<CropBox> RandomErasing::get_params(SampleRng& rng, int64_t height, int64_t width) const {
  const bool erase_it = rng.uniform() < p_;
  const double area = static_cast<double>(height * width);
  const double log_lo = std::log(ratio_.first), log_hi = std::log(ratio_.second);
  std::optional<CropBox> box;
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double u_area = rng.uniform(), u_ratio = rng.uniform();  // drawn on every attempt
    if (box) continue;
    const double erase_area = area * (scale_.first + (scale_.second - scale_.first) * u_area);
    const double aspect = std::exp(log_lo + (log_hi - log_lo) * u_ratio);
    const int64_t h = detail::round_half_even(std::sqrt(erase_area * aspect));
    const int64_t w = detail::round_half_even(std::sqrt(erase_area / aspect));
    if (h < height && w < width) box = CropBox{0, 0, h, w};
  }
  const auto top = static_cast<int64_t>(rng.below(static_cast<uint64_t>(box ? height - box->height + 1 : 1)));
  const auto left = static_cast<int64_t>(rng.below(static_cast<uint64_t>(box ? width - box->width + 1 : 1)));
  if (!erase_it || !box) return std::nullopt;
  box->top = top;
  box->left = left;
  return box;
}

Tensor RandomErasing::apply(const Tensor& image, SampleRng& rng) const {
  EMBER_CHECK(image.defined() && image.dim() == 3 && image.dtype() == DType::f32, name(),
              ": expected a float32 (C, H, W) image (put it after ToTensor and Normalize), got ",
              image.defined() ? describe(image) : std::string("an undefined tensor"));
  const std::optional<CropBox> box = get_params(rng, image.size(1), image.size(2));
  if (!box) return image;
  return erase(image, box->top, box->left, box->height, box->width, value_);
}

}  // namespace ember::data
