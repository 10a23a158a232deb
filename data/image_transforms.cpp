#include "image_transforms.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <vector>

#include "../core/cpu/parallel.h"
#include "auto_augment.h"
#include "resample.h"

namespace ember::data {

namespace detail {

// Python's round() for the values torchvision rounds: ties go to the even neighbour.
int64_t round_half_even(double x) {
  const double f = std::floor(x);
  const double d = x - f;
  double r = f;
  if (d > 0.5 || (d == 0.5 && std::fmod(f, 2.0) != 0.0)) r = f + 1.0;
  return static_cast<int64_t>(r);
}

double triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

AxisCoeffs precompute_coeffs(int64_t in_size, int64_t out_size) {
  // PIL takes the box as floats; (double)(in1 - in0) / outSize with in0 = 0.
  const double scale = static_cast<double>(static_cast<float>(in_size)) / static_cast<double>(out_size);
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;  // the triangle's support is 1
  AxisCoeffs c;
  c.ksize = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  c.first.resize(static_cast<size_t>(out_size));
  c.count.resize(static_cast<size_t>(out_size));
  c.k.assign(static_cast<size_t>(out_size * c.ksize), 0);
  std::vector<double> w(static_cast<size_t>(c.ksize));
  for (int64_t i = 0; i < out_size; ++i) {
    const double center = (static_cast<double>(i) + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    // (int) truncation as in C, then clipping.
    int64_t xmin = static_cast<int64_t>(static_cast<int>(center - support + 0.5));
    if (xmin < 0) xmin = 0;
    int64_t xmax = static_cast<int64_t>(static_cast<int>(center + support + 0.5));
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double total = 0.0;
    for (int64_t x = 0; x < xmax; ++x) {
      w[static_cast<size_t>(x)] = triangle((static_cast<double>(x + xmin) - center + 0.5) * ss);
      total += w[static_cast<size_t>(x)];
    }
    for (int64_t x = 0; x < xmax; ++x) {
      double v = w[static_cast<size_t>(x)];
      if (total != 0.0) v /= total;
      const double fixed = v * static_cast<double>(1 << kPrecisionBits);
      c.k[static_cast<size_t>(i * c.ksize + x)] = static_cast<int32_t>(fixed < 0 ? -0.5 + fixed : 0.5 + fixed);
    }
    c.first[static_cast<size_t>(i)] = xmin;
    c.count[static_cast<size_t>(i)] = xmax;
  }
  return c;
}

}  // namespace detail

namespace {

// Output rows per thread chunk: keeps small images inline (the loader parallelizes batches).
constexpr int64_t kRowGrainElements = 1 << 16;

// A contiguous CPU copy of a (C, H, W) image, after checking rank, device and (when u8_only)
// dtype.
Tensor checked_chw(const Tensor& image, const std::string& op, bool u8_only) {
  EMBER_CHECK(image.defined(), op, ": undefined image");
  EMBER_CHECK(image.dim() == 3, op, ": expected a (C, H, W) image, got ", describe(image));
  EMBER_CHECK(image.device().is_cpu(), op, ": transforms run on the CPU, got ", describe(image));
  EMBER_CHECK(!u8_only || image.dtype() == DType::u8, op, ": expected uint8 pixels (apply it before ToTensor), got ",
              describe(image));
  return image.contiguous();
}

using detail::AxisCoeffs;
using detail::clip8;
using detail::kPrecisionBits;
using detail::precompute_coeffs;
using detail::round_half_even;

// src (rows, in_w) u8 -> dst (rows, out_w) along each row.
void resample_horizontal(const uint8_t* src, uint8_t* dst, int64_t rows, int64_t in_w, int64_t out_w) {
  const AxisCoeffs c = precompute_coeffs(in_w, out_w);
  parallel_for(0, rows, std::max<int64_t>(1, kRowGrainElements / std::max<int64_t>(out_w, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t r = lo; r < hi; ++r) {
                   const uint8_t* row = src + r * in_w;
                   for (int64_t x = 0; x < out_w; ++x) {
                     const int32_t* k = c.k.data() + x * c.ksize;
                     const uint8_t* p = row + c.first[static_cast<size_t>(x)];
                     int64_t acc = int64_t{1} << (kPrecisionBits - 1);
                     for (int64_t t = 0; t < c.count[static_cast<size_t>(x)]; ++t) acc += int64_t{p[t]} * k[t];
                     dst[r * out_w + x] = clip8(acc);
                   }
                 }
               });
}

// src (planes, in_h, w) u8 -> dst (planes, out_h, w) along each column.
void resample_vertical(const uint8_t* src, uint8_t* dst, int64_t planes, int64_t in_h, int64_t out_h, int64_t w) {
  const AxisCoeffs c = precompute_coeffs(in_h, out_h);
  parallel_for(0, planes * out_h, std::max<int64_t>(1, kRowGrainElements / std::max<int64_t>(w, 1)),
               [&](int64_t lo, int64_t hi) {
                 std::vector<int64_t> acc(static_cast<size_t>(w));
                 for (int64_t pr = lo; pr < hi; ++pr) {
                   const int64_t plane = pr / out_h, y = pr % out_h;
                   const int32_t* k = c.k.data() + y * c.ksize;
                   const uint8_t* base = src + (plane * in_h + c.first[static_cast<size_t>(y)]) * w;
                   std::fill(acc.begin(), acc.end(), int64_t{1} << (kPrecisionBits - 1));
                   for (int64_t t = 0; t < c.count[static_cast<size_t>(y)]; ++t)
                     for (int64_t x = 0; x < w; ++x) acc[static_cast<size_t>(x)] += int64_t{base[t * w + x]} * k[t];
                   for (int64_t x = 0; x < w; ++x) dst[pr * w + x] = clip8(acc[static_cast<size_t>(x)]);
                 }
               });
}

// float32 blend as torchvision's _blend on u8: trunc(clamp(ratio * a + (1 - ratio) * b, 0, 255)).
// The two products are rounded to float before the sum (no fused multiply-add), as torch does.
inline uint8_t blend_u8(float ratio, float one_minus, float a, float b) {
  volatile float pa = ratio * a;  // volatile: keep the compiler from contracting into an FMA
  volatile float pb = one_minus * b;
  const float s = pa + pb;
  return static_cast<uint8_t>(std::clamp(s, 0.0f, 255.0f));
}

void check_colour_image(const Tensor& in, const std::string& op) {
  EMBER_CHECK(in.size(0) == 1 || in.size(0) == 3, op, ": expected 1 or 3 channels, got ", describe(in));
}

void check_factor(double factor, const std::string& op) {
  EMBER_CHECK(std::isfinite(factor) && factor >= 0.0, op, ": factor ", factor, " must be finite and non-negative");
}

void check_increasing_pair(std::pair<double, double> p, const char* what, const std::string& op) {
  EMBER_CHECK(std::isfinite(p.first) && std::isfinite(p.second) && p.first > 0.0 && p.first <= p.second, op, ": ",
              what, " (", p.first, ", ", p.second, ") must be positive with min <= max");
}

}  // namespace

// ---- functional forms --------------------------------------------------------------------------

std::array<int64_t, 2> resize_output_size(int64_t height, int64_t width, int64_t size) {
  EMBER_CHECK(height > 0 && width > 0 && size > 0, "resize_output_size: sizes must be positive, got image (", height,
              ", ", width, ") and size ", size);
  const int64_t shorter = std::min(height, width), longer = std::max(height, width);
  // Python int(size * long / short): an exact integer product, one correctly rounded division.
  const auto new_long =
      static_cast<int64_t>(static_cast<double>(size * longer) / static_cast<double>(shorter));
  return width <= height ? std::array<int64_t, 2>{new_long, size} : std::array<int64_t, 2>{size, new_long};
}

Tensor resize_bilinear(const Tensor& image, int64_t height, int64_t width) {
  const Tensor in = checked_chw(image, "resize_bilinear", true);
  EMBER_CHECK(height > 0 && width > 0, "resize_bilinear: output size (", height, ", ", width, ") must be positive");
  const int64_t c = in.size(0), h = in.size(1), w = in.size(2);
  EMBER_CHECK(h > 0 && w > 0, "resize_bilinear: empty image ", describe(image));
  if (h == height && w == width) return image;
  Tensor cur = in;
  if (w != width) {
    Tensor tmp = empty({c, h, width}, {.dtype = DType::u8});
    resample_horizontal(cur.data_ptr<uint8_t>(), tmp.data_ptr<uint8_t>(), c * h, w, width);
    cur = tmp;
  }
  if (h != height) {
    Tensor out = empty({c, height, width}, {.dtype = DType::u8});
    resample_vertical(cur.data_ptr<uint8_t>(), out.data_ptr<uint8_t>(), c, h, height, width);
    cur = out;
  }
  return cur;
}

Tensor crop(const Tensor& image, int64_t top, int64_t left, int64_t height, int64_t width) {
  const Tensor in = checked_chw(image, "crop", false);
  EMBER_CHECK(height > 0 && width > 0, "crop: size (", height, ", ", width, ") must be positive");
  const int64_t c = in.size(0), h = in.size(1), w = in.size(2), es = in.element_size();
  Tensor out = zeros({c, height, width}, {.dtype = in.dtype()});
  const int64_t x_lo = std::max<int64_t>(0, -left), x_hi = std::min<int64_t>(width, w - left);
  if (x_lo >= x_hi) return out;
  const auto* src = static_cast<const unsigned char*>(in.data());
  auto* dst = static_cast<unsigned char*>(out.data());
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t y = 0; y < height; ++y) {
      const int64_t sy = top + y;
      if (sy < 0 || sy >= h) continue;
      std::memcpy(dst + ((ch * height + y) * width + x_lo) * es, src + ((ch * h + sy) * w + left + x_lo) * es,
                  static_cast<size_t>((x_hi - x_lo) * es));
    }
  return out;
}

Tensor center_crop(const Tensor& image, int64_t height, int64_t width) {
  const Tensor in = checked_chw(image, "center_crop", false);
  EMBER_CHECK(height > 0 && width > 0, "center_crop: size (", height, ", ", width, ") must be positive");
  int64_t h = in.size(1), w = in.size(2);
  // torchvision pads (d // 2 before) when the window is larger, then crops the padded image; in
  // coordinates of the original image that shifts the window by the leading padding.
  const int64_t pad_top = height > h ? (height - h) / 2 : 0, pad_left = width > w ? (width - w) / 2 : 0;
  if (height > h) h = height;  // padded size: h + (d // 2) + ((d + 1) // 2) = height
  if (width > w) w = width;
  if (h == in.size(1) && w == in.size(2) && h == height && w == width) return image;
  const int64_t top = round_half_even(static_cast<double>(h - height) / 2.0) - pad_top;
  const int64_t left = round_half_even(static_cast<double>(w - width) / 2.0) - pad_left;
  return crop(in, top, left, height, width);
}

Tensor resized_crop(const Tensor& image, int64_t top, int64_t left, int64_t height, int64_t width,
                    int64_t out_height, int64_t out_width) {
  checked_chw(image, "resized_crop", true);
  return resize_bilinear(crop(image, top, left, height, width), out_height, out_width);
}

CropBox random_resized_crop_params(int64_t height, int64_t width, std::pair<double, double> scale,
                                   std::pair<double, double> ratio, SampleRng& rng) {
  EMBER_CHECK(height > 0 && width > 0, "random_resized_crop_params: empty image (", height, ", ", width, ")");
  const double area = static_cast<double>(height * width);
  const double log_lo = std::log(ratio.first), log_hi = std::log(ratio.second);
  CropBox box;
  bool found = false;
  for (int attempt = 0; attempt < 10; ++attempt) {
    // Both words are drawn on every attempt, so the stream advances by 20 whatever happens.
    const double u_area = rng.uniform(), u_ratio = rng.uniform();
    if (found) continue;
    const double target_area = area * (scale.first + (scale.second - scale.first) * u_area);
    const double aspect = std::exp(log_lo + (log_hi - log_lo) * u_ratio);
    const int64_t w = round_half_even(std::sqrt(target_area * aspect));
    const int64_t h = round_half_even(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      box = {0, 0, h, w};
      found = true;
    }
  }
  if (!found) {  // torchvision's fallback: the whole image, clamped to the ratio range, centred
    const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
    if (in_ratio < ratio.first) {
      box.width = width;
      box.height = round_half_even(static_cast<double>(width) / ratio.first);
    } else if (in_ratio > ratio.second) {
      box.height = height;
      box.width = round_half_even(static_cast<double>(height) * ratio.second);
    } else {
      box.height = height;
      box.width = width;
    }
  }
  const auto top = static_cast<int64_t>(rng.below(static_cast<uint64_t>(height - box.height + 1)));
  const auto left = static_cast<int64_t>(rng.below(static_cast<uint64_t>(width - box.width + 1)));
  if (found) {
    box.top = top;
    box.left = left;
  } else {
    box.top = (height - box.height) / 2;
    box.left = (width - box.width) / 2;
  }
  return box;
}

Tensor rgb_to_grayscale(const Tensor& image) {
  const Tensor in = checked_chw(image, "rgb_to_grayscale", true);
  EMBER_CHECK(in.size(0) == 3, "rgb_to_grayscale: expected 3 channels, got ", describe(image));
  const int64_t plane = in.size(1) * in.size(2);
  Tensor out = empty({1, in.size(1), in.size(2)}, {.dtype = DType::u8});
  const uint8_t* src = in.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  for (int64_t i = 0; i < plane; ++i) {
    // torch: (0.2989 * r + 0.587 * g + 0.114 * b).to(uint8), each product and sum in float32.
    volatile float r = 0.2989f * static_cast<float>(src[i]);
    volatile float g = 0.587f * static_cast<float>(src[plane + i]);
    volatile float b = 0.114f * static_cast<float>(src[2 * plane + i]);
    const float l = (r + g) + b;
    dst[i] = static_cast<uint8_t>(l);
  }
  return out;
}

Tensor adjust_brightness(const Tensor& image, double factor) {
  const Tensor in = checked_chw(image, "adjust_brightness", true);
  check_colour_image(in, "adjust_brightness");
  check_factor(factor, "adjust_brightness");
  Tensor out = empty(in.shape(), {.dtype = DType::u8});
  const uint8_t* src = in.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  const auto f = static_cast<float>(factor), g = static_cast<float>(1.0 - factor);
  for (int64_t i = 0; i < in.numel(); ++i) dst[i] = blend_u8(f, g, static_cast<float>(src[i]), 0.0f);
  return out;
}

Tensor adjust_contrast(const Tensor& image, double factor) {
  const Tensor in = checked_chw(image, "adjust_contrast", true);
  check_colour_image(in, "adjust_contrast");
  check_factor(factor, "adjust_contrast");
  const Tensor gray = in.size(0) == 3 ? rgb_to_grayscale(in) : in;
  // torch.mean in float32: the integer sum is exact; one float division (torch's float sum can
  // round once the total passes 2^24, i.e. beyond ~65K saturated pixels).
  int64_t sum = 0;
  const uint8_t* gp = gray.data_ptr<uint8_t>();
  for (int64_t i = 0; i < gray.numel(); ++i) sum += gp[i];
  const float mean = static_cast<float>(sum) / static_cast<float>(std::max<int64_t>(gray.numel(), 1));
  Tensor out = empty(in.shape(), {.dtype = DType::u8});
  const uint8_t* src = in.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  const auto f = static_cast<float>(factor), g = static_cast<float>(1.0 - factor);
  for (int64_t i = 0; i < in.numel(); ++i) dst[i] = blend_u8(f, g, static_cast<float>(src[i]), mean);
  return out;
}

Tensor adjust_saturation(const Tensor& image, double factor) {
  const Tensor in = checked_chw(image, "adjust_saturation", true);
  check_colour_image(in, "adjust_saturation");
  check_factor(factor, "adjust_saturation");
  if (in.size(0) == 1) return image;
  const Tensor gray = rgb_to_grayscale(in);
  const int64_t plane = in.size(1) * in.size(2);
  Tensor out = empty(in.shape(), {.dtype = DType::u8});
  const uint8_t* src = in.data_ptr<uint8_t>();
  const uint8_t* gp = gray.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  const auto f = static_cast<float>(factor), g = static_cast<float>(1.0 - factor);
  for (int64_t i = 0; i < in.numel(); ++i)
    dst[i] = blend_u8(f, g, static_cast<float>(src[i]), static_cast<float>(gp[i % plane]));
  return out;
}

Tensor color_jitter(const Tensor& image, const ColorJitterParams& params) {
  const Tensor in = checked_chw(image, "ColorJitter", true);
  check_colour_image(in, "ColorJitter");
  EMBER_CHECK(params.hue_slot >= 0 && params.hue_slot <= 3, "ColorJitter: hue_slot ", params.hue_slot,
              " must lie in [0, 3]");
  Tensor x = image;
  for (int slot = 0, k = 0; slot < 4; ++slot) {
    if (slot == params.hue_slot) {
      if (params.hue != 0.0) x = adjust_hue(x, params.hue);
      continue;
    }
    const int which = params.order[static_cast<size_t>(k++)];
    if (which == 0 && params.brightness != 1.0) x = adjust_brightness(x, params.brightness);
    if (which == 1 && params.contrast != 1.0) x = adjust_contrast(x, params.contrast);
    if (which == 2 && params.saturation != 1.0) x = adjust_saturation(x, params.saturation);
  }
  return x;
}

// ---- Resize ------------------------------------------------------------------------------------

Resize::Resize(int64_t size) : shorter_(size) {
  EMBER_CHECK(size > 0, "Resize: size ", size, " must be positive");
}

Resize::Resize(int64_t height, int64_t width) : height_(height), width_(width) {
  EMBER_CHECK(height > 0 && width > 0, "Resize: size (", height, ", ", width, ") must be positive");
}

std::string Resize::name() const {
  std::ostringstream os;
  if (shorter_ > 0)
    os << "Resize(size=" << shorter_ << ")";
  else
    os << "Resize(size=(" << height_ << ", " << width_ << "))";
  return os.str();
}

std::array<int64_t, 2> Resize::output_size(int64_t height, int64_t width) const {
  if (shorter_ > 0) return resize_output_size(height, width, shorter_);
  return {height_, width_};
}

Tensor Resize::apply(const Tensor& image, SampleRng&) const {
  const Tensor in = checked_chw(image, name(), true);
  const auto [h, w] = output_size(in.size(1), in.size(2));
  return resize_bilinear(image, h, w);
}

// ---- CenterCrop --------------------------------------------------------------------------------

CenterCrop::CenterCrop(int64_t height, int64_t width) : height_(height), width_(width) {
  EMBER_CHECK(height > 0 && width > 0, "CenterCrop: size (", height, ", ", width, ") must be positive");
}

std::string CenterCrop::name() const {
  std::ostringstream os;
  os << "CenterCrop(size=(" << height_ << ", " << width_ << "))";
  return os.str();
}

Tensor CenterCrop::apply(const Tensor& image, SampleRng&) const {
  checked_chw(image, name(), false);
  return center_crop(image, height_, width_);
}

// ---- RandomResizedCrop -------------------------------------------------------------------------

RandomResizedCrop::RandomResizedCrop(int64_t height, int64_t width, std::pair<double, double> scale,
                                     std::pair<double, double> ratio)
    : height_(height), width_(width), scale_(scale), ratio_(ratio) {
  EMBER_CHECK(height > 0 && width > 0, "RandomResizedCrop: size (", height, ", ", width, ") must be positive");
  check_increasing_pair(scale, "scale", "RandomResizedCrop");
  check_increasing_pair(ratio, "ratio", "RandomResizedCrop");
}

std::string RandomResizedCrop::name() const {
  std::ostringstream os;
  os << "RandomResizedCrop(size=(" << height_ << ", " << width_ << "), scale=(" << scale_.first << ", "
     << scale_.second << "), ratio=(" << ratio_.first << ", " << ratio_.second << "))";
  return os.str();
}

Tensor RandomResizedCrop::apply(const Tensor& image, SampleRng& rng) const {
  const Tensor in = checked_chw(image, name(), true);
  const CropBox b = random_resized_crop_params(in.size(1), in.size(2), scale_, ratio_, rng);
  return resized_crop(in, b.top, b.left, b.height, b.width, height_, width_);
}

// ---- ColorJitter -------------------------------------------------------------------------------

ColorJitter::ColorJitter(double brightness, double contrast, double saturation, double hue)
    : brightness_(brightness), contrast_(contrast), saturation_(saturation), hue_(hue) {
  for (const double v : {brightness, contrast, saturation})
    EMBER_CHECK(std::isfinite(v) && v >= 0.0, "ColorJitter: brightness, contrast and saturation (", brightness, ", ",
                contrast, ", ", saturation, ") must be finite and non-negative");
  EMBER_CHECK(hue >= 0.0 && hue <= 0.5, "ColorJitter: hue ", hue, " must lie in [0, 0.5]");
}

std::string ColorJitter::name() const {
  std::ostringstream os;
  os << "ColorJitter(brightness=" << brightness_ << ", contrast=" << contrast_ << ", saturation=" << saturation_;
  if (hue_ > 0.0) os << ", hue=" << hue_;
  os << ")";
  return os.str();
}

ColorJitterParams ColorJitter::get_params(SampleRng& rng) const {
  ColorJitterParams p;
  // Fisher-Yates: a uniform permutation of the three adjustments.
  for (int i = 2; i > 0; --i) {
    const auto j = static_cast<size_t>(rng.below(static_cast<uint64_t>(i + 1)));
    std::swap(p.order[static_cast<size_t>(i)], p.order[j]);
  }
  const auto factor = [&](double v) {
    const double u = rng.uniform();
    const double lo = std::max(0.0, 1.0 - v), hi = 1.0 + v;
    return v > 0.0 ? lo + (hi - lo) * u : 1.0;
  };
  p.brightness = factor(brightness_);
  p.contrast = factor(contrast_);
  p.saturation = factor(saturation_);
  if (hue_ > 0.0) {
    p.hue_slot = static_cast<int>(rng.below(4));
    p.hue = -hue_ + 2.0 * hue_ * rng.uniform();
  }
  return p;
}

Tensor ColorJitter::apply(const Tensor& image, SampleRng& rng) const {
  const Tensor in = checked_chw(image, name(), true);
  check_colour_image(in, name());
  return color_jitter(in, get_params(rng));
}

}  // namespace ember::data
