#pragma once
// ImageNet-style transforms on u8 (C, H, W) CPU images, torchvision-compatible: Resize,
// CenterCrop, RandomResizedCrop, ColorJitter (TrivialAugmentWide, RandAugment and RandomErasing:
// data/auto_augment.h). Each is a data::Transform, so they compose with
// ToTensor / Normalize / RandomHorizontalFlip (data/transforms.h):
//
//   auto train_tf = data::Compose{data::RandomResizedCrop(224), data::RandomHorizontalFlip(),
//                                 data::ColorJitter(0.4, 0.4, 0.4), data::ToTensor(),
//                                 data::Normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225})};
//   auto eval_tf = data::Compose{data::Resize(256), data::CenterCrop(224), data::ToTensor(), ...};
//
// Note [Bilinear resize like PIL]
// Resizing is PIL's Image.resize(BILINEAR) (Pillow src/libImaging/Resample.c), which is also
// what torchvision's Resize(antialias=True) gives for PIL images and, up to rounding, for u8
// tensors. Per axis, output pixel i is centred at (i + 0.5) * scale in input coordinates,
// scale = in / out; the triangle filter's support is 1 * max(scale, 1), so downscaling averages
// over the whole footprint (the antialias). The taps run from int(centre - support + 0.5) to
// int(centre + support + 0.5) clipped to the image, weights tri((x - centre + 0.5) / max(scale, 1))
// normalized to sum 1, then converted to fixed point with 22 fractional bits (rounding half away
// from zero). The horizontal pass runs first and rounds to u8 (add 2^21, shift right 22, clamp),
// then the vertical pass reads those u8 values. An axis whose size does not change is not
// resampled. Measured against Pillow 9.4: identical on every case in tests/data/pil (docs/data.md).
//
// Randomness: transforms draw from the sample's SampleRng only, and always the same number of
// words whatever the image (RandomResizedCrop 24 words, ColorJitter 7), so later transforms in a
// chain see the same stream positions on every image. The draws cannot reproduce torch's
// generator; the distributions and algorithms are torchvision's.

#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "transforms.h"

namespace ember::data {

// ---- functional forms (deterministic; the classes below use them) ----------------------------

// torchvision's output size for Resize(size) on an (height, width) image: the shorter side
// becomes `size` and the longer int(size * long / short) (truncated). Returns {height, width}.
std::array<int64_t, 2> resize_output_size(int64_t height, int64_t width, int64_t size);

// image: u8 (C, H, W) CPU, any layout. Returns a new contiguous u8 (C, height, width) resampled
// as in Note [Bilinear resize like PIL] (or `image` itself when the size is unchanged).
Tensor resize_bilinear(const Tensor& image, int64_t height, int64_t width);

// image: (C, H, W) CPU, any dtype. Returns the (height, width) window whose top-left corner is
// (top, left) (either may be negative); pixels outside the image are zero. New contiguous tensor.
Tensor crop(const Tensor& image, int64_t top, int64_t left, int64_t height, int64_t width);

// torchvision's center_crop: when the window is larger than the image the image is first padded
// with zeros ((d // 2) before, (d + 1) // 2 after, per axis that is too small); then
// top = round_half_even((H - height) / 2) and likewise left. Any dtype.
Tensor center_crop(const Tensor& image, int64_t height, int64_t width);

// crop(image, top, left, height, width) then resize_bilinear to (out_height, out_width): u8 only.
Tensor resized_crop(const Tensor& image, int64_t top, int64_t left, int64_t height, int64_t width,
                    int64_t out_height, int64_t out_width);

// A crop window in pixels.
struct CropBox {
  int64_t top = 0, left = 0, height = 0, width = 0;
  bool operator==(const CropBox&) const = default;
};

// torchvision RandomResizedCrop.get_params for an (height, width) image: up to 10 attempts with
// area fraction uniform in `scale` and aspect ratio log-uniform in `ratio`, sides
// round_half_even(sqrt(area * r)) and round_half_even(sqrt(area / r)); the first that fits is
// placed uniformly at random; otherwise the centred fallback (whole image clamped to the ratio
// range). Draws exactly 24 words: 20 for the ten attempts (all drawn, used or not), then the row
// and column offsets (below(), 2 words each; below(1) in the fallback).
CropBox random_resized_crop_params(int64_t height, int64_t width, std::pair<double, double> scale,
                                   std::pair<double, double> ratio, SampleRng& rng);

// torchvision's tensor colour functions on u8 images, computed in float32 as torch does
// (functional_tensor.py). rgb_to_grayscale: (3, H, W) -> (1, H, W),
// trunc(0.2989f * R + 0.587f * G + 0.114f * B) (torch's tensor weights, not PIL's integer
// 299/587/114 formula, which rounds differently). The adjust_* functions take (1, H, W) or
// (3, H, W) and return trunc(clamp(f * img + (1 - f) * other, 0, 255)) with `other` zeros
// (brightness), the float32 mean of the grayscale image (contrast), or the grayscale image
// (saturation; a 1-channel image is returned unchanged). factor >= 0.
Tensor rgb_to_grayscale(const Tensor& image);
Tensor adjust_brightness(const Tensor& image, double factor);
Tensor adjust_contrast(const Tensor& image, double factor);
Tensor adjust_saturation(const Tensor& image, double factor);

// ---- transforms -------------------------------------------------------------------------------

// Resize(size): shorter side to `size`, aspect kept (resize_output_size). Resize(height, width):
// exactly that size. Bilinear with antialias, as PIL (Note [Bilinear resize like PIL]); u8 only.
class Resize final : public Transform {
 public:
  explicit Resize(int64_t size);
  Resize(int64_t height, int64_t width);
  Tensor apply(const Tensor& image, SampleRng& rng) const override;
  bool is_random() const override { return false; }
  std::string name() const override;

  // The output size for an (height, width) input.
  std::array<int64_t, 2> output_size(int64_t height, int64_t width) const;
  // The shorter side for Resize(size), 0 for an exact Resize(height, width).
  int64_t shorter() const { return shorter_; }
  int64_t height() const { return height_; }  // exact size (0 for Resize(size))
  int64_t width() const { return width_; }

 private:
  int64_t shorter_ = 0;  // > 0: Resize(size); 0: exact (height_, width_)
  int64_t height_ = 0, width_ = 0;
};

// The centred (height, width) window, zero-padded when larger than the image (center_crop).
// Any dtype.
class CenterCrop final : public Transform {
 public:
  explicit CenterCrop(int64_t size) : CenterCrop(size, size) {}
  CenterCrop(int64_t height, int64_t width);
  Tensor apply(const Tensor& image, SampleRng& rng) const override;
  bool is_random() const override { return false; }
  std::string name() const override;
  int64_t height() const { return height_; }
  int64_t width() const { return width_; }

 private:
  int64_t height_, width_;
};

// A random window (random_resized_crop_params) resized to exactly (height, width) with the PIL
// bilinear resize. u8 only. Throws when scale or ratio is not an increasing positive pair.
class RandomResizedCrop final : public Transform {
 public:
  explicit RandomResizedCrop(int64_t size, std::pair<double, double> scale = {0.08, 1.0},
                             std::pair<double, double> ratio = {3.0 / 4.0, 4.0 / 3.0})
      : RandomResizedCrop(size, size, scale, ratio) {}
  RandomResizedCrop(int64_t height, int64_t width, std::pair<double, double> scale,
                    std::pair<double, double> ratio);
  Tensor apply(const Tensor& image, SampleRng& rng) const override;
  bool is_random() const override { return true; }
  std::string name() const override;
  int64_t height() const { return height_; }
  int64_t width() const { return width_; }
  std::pair<double, double> scale() const { return scale_; }
  std::pair<double, double> ratio() const { return ratio_; }

 private:
  int64_t height_, width_;
  std::pair<double, double> scale_, ratio_;
};

// The factors and order one ColorJitter call uses. order[k] is 0 (brightness), 1 (contrast) or
// 2 (saturation); a factor of exactly 1 is skipped, as is a disabled one. Hue (adjust_hue in
// data/auto_augment.h) runs as the hue_slot-th of the four adjustments (0 to 3: before order[0],
// ..., after order[2]); a hue of 0 is skipped.
struct ColorJitterParams {
  std::array<int, 3> order{0, 1, 2};
  double brightness = 1.0, contrast = 1.0, saturation = 1.0;
  int hue_slot = 3;
  double hue = 0.0;
};

// Applies the adjustments in params.order with params' factors (deterministic; the test hook).
Tensor color_jitter(const Tensor& image, const ColorJitterParams& params);

// torchvision ColorJitter(brightness, contrast, saturation, hue) on u8 (1 or 3, H, W) with
// torchvision's tensor semantics (see adjust_*, adjust_hue). A value v > 0 enables that
// adjustment with a factor uniform in [max(0, 1 - v), 1 + v]; 0 disables it. hue in [0, 0.5]: a
// shift uniform in [-hue, hue]. Per sample the adjustments run in a uniformly random order.
// Draws 7 words: the order of the three (Fisher-Yates, below(3) then below(2)), then the
// brightness, contrast and saturation uniforms (drawn even when disabled); with hue > 0, 3 more:
// the hue's slot among the four (below(4): with the first draws, a uniform permutation of four)
// and its uniform. Without hue the stream is the 7 words of before.
class ColorJitter final : public Transform {
 public:
  explicit ColorJitter(double brightness = 0.0, double contrast = 0.0, double saturation = 0.0, double hue = 0.0);
  Tensor apply(const Tensor& image, SampleRng& rng) const override;
  bool is_random() const override { return true; }
  std::string name() const override;

  // Draws this sample's factors and order (7 words; 10 with hue), as apply() does.
  ColorJitterParams get_params(SampleRng& rng) const;

 private:
  double brightness_, contrast_, saturation_, hue_;
};

}  // namespace ember::data
