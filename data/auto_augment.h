#pragma once
// Automatic augmentation with torchvision's semantics: the image ops of TrivialAugmentWide and
// RandAugment (torchvision.transforms.functional on uint8 tensors), the two policies, and
// RandomErasing. Each op is a deterministic function of the image and its parameters; the
// policies draw the op, the magnitude bin and the sign from the sample's SampleRng.
//
//   auto tf = data::Compose{data::RandomCrop(28, 2), data::TrivialAugmentWide(), data::ToTensor(),
//                           data::Normalize({0.286}, {0.353}), data::RandomErasing(0.25)};
//
// Note [Affine ops like torchvision]
// ShearX/Y, TranslateX/Y and Rotate are torchvision's tensor affine (functional_tensor.affine):
// the inverse matrix of _get_inverse_affine_matrix (computed in double, as Python does), rounded
// to float32; output pixel (x, y) samples the input at
//     ix = (gx + 1) * (W / 2) - 0.5,  gx = (m0 bx + m1 by + m2) / (W / 2),  bx = x - (W - 1) / 2
// (likewise iy with m3, m4, m5 and H), all in float32, and takes the nearest pixel (ties to even:
// grid_sample's nearest mode); a pixel that falls outside the image is 0 (fill None). Rotate and
// Translate turn about the image centre; Shear about the top-left corner (center=[0, 0], as
// torchvision's _apply_op does, matching the official AutoAugment). torch may order the float32
// products differently (its bmm, its vectorized unnormalize), so a sample point within an ulp of
// a pixel boundary can pick the neighbour: docs/data.md states the measured difference.
//
// Grayscale (1 channel): every op works; Color (saturation) and hue return the image unchanged,
// Contrast uses the image's own mean, as torchvision does.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "image_transforms.h"
#include "transforms.h"

namespace ember::data {

// ---- functional ops on u8 (1 or 3, H, W) CPU images; each returns a new tensor --------------------

// torchvision's F.affine(img, angle, translate, scale=1, shear, NEAREST, fill=None, center) on a
// tensor (Note [Affine ops like torchvision]). angle and shear in degrees; center in pixels from
// the top-left corner, or the image centre when not given.
Tensor affine_nearest(const Tensor& image, double angle, std::array<double, 2> translate, std::array<double, 2> shear,
                      std::optional<std::array<double, 2>> center = std::nullopt);
// F.rotate(img, degrees, NEAREST): counter-clockwise about the centre, same size, fill 0.
Tensor rotate_nearest(const Tensor& image, double degrees);
// F.adjust_sharpness: blend with the image smoothed by [[1,1,1],[1,5,1],[1,1,1]] / 13 (rounded to
// u8; the border pixels kept), trunc(clamp(f * img + (1 - f) * blurred)). Images with a side <= 2
// are returned unchanged. factor >= 0.
Tensor adjust_sharpness(const Tensor& image, double factor);
// F.adjust_hue for u8 tensors: v / 255, torchvision's _rgb2hsv, h = (h + hue_factor) mod 1,
// _hsv2rgb, trunc(* 255), in float32. hue_factor in [-0.5, 0.5]. 1 channel: unchanged.
Tensor adjust_hue(const Tensor& image, double hue_factor);
// F.posterize: keep the top `bits` bits of every value (img & -2^(8 - bits)), bits in [0, 8].
Tensor posterize(const Tensor& image, int bits);
// F.solarize: 255 - v where v >= threshold, v elsewhere.
Tensor solarize(const Tensor& image, double threshold);
// F.autocontrast: per channel, trunc(clamp((v - min) * (255 / (max - min)))) in float32; a flat
// channel (max == min) is left as it is.
Tensor autocontrast(const Tensor& image);
// F.equalize: per channel, torchvision's integer histogram-equalization table (_scale_channel):
// step = (sum of the non-zero histogram bins but the last) / 255 (floor); step 0 leaves the
// channel unchanged; else lut[v] = (cumsum[v - 1] + step / 2) / step, clamped to 255.
Tensor equalize(const Tensor& image);
// F.erase on a float32 (C, H, W) image: the (height, width) box at (top, left) set to `value`.
Tensor erase(const Tensor& image, int64_t top, int64_t left, int64_t height, int64_t width, float value);

// ---- the ops of TrivialAugmentWide and RandAugment -----------------------------------------------

// torchvision's op names, in its _augmentation_space order.
enum class AugmentOp {
  identity, shear_x, shear_y, translate_x, translate_y, rotate, brightness, color, contrast, sharpness,
  posterize, solarize, autocontrast, equalize
};
inline constexpr int kNumAugmentOps = 14;

// "ShearX", ... (torchvision's spelling).
std::string augment_op_name(AugmentOp op);
// The op named (case-insensitively) by torchvision's name; nullopt when there is none.
std::optional<AugmentOp> parse_augment_op(const std::string& name);
// torchvision's autoaugment._apply_op(img, op, magnitude, NEAREST, fill=None): Shear uses the
// shear angle atan(magnitude), Translate int(magnitude) pixels, Rotate `magnitude` degrees,
// Brightness/Color/Contrast/Sharpness the factor 1 + magnitude, Posterize int(magnitude) bits,
// Solarize the threshold `magnitude`; Identity, AutoContrast and Equalize ignore it.
Tensor apply_augment_op(const Tensor& image, AugmentOp op, double magnitude);

enum class AugmentPolicy { trivial_augment_wide, rand_augment };

// The magnitudes of `op` under `policy` (torchvision's _augmentation_space with num_bins bins, for
// an (height, width) image: RandAugment's translation scales with the size), as torch computes
// them in float32 (torch.linspace; Posterize 8 - round(arange / ((num_bins - 1) / k))). Empty for
// the ops without a magnitude. `signed_magnitude`: the sign is drawn at random.
struct AugmentBins {
  std::vector<float> magnitudes;
  bool signed_magnitude = false;
};
AugmentBins augment_bins(AugmentPolicy policy, AugmentOp op, int64_t num_bins, int64_t height, int64_t width);

// One op as a policy chose it: the magnitude is bins[bin], negated when `negative`.
struct AugmentChoice {
  AugmentOp op = AugmentOp::identity;
  int64_t bin = 0;
  bool negative = false;
  double magnitude = 0.0;
};

// torchvision TrivialAugmentWide(num_bins=31): one op uniform over the 14, a bin uniform over
// [0, num_bins), the sign + or - with probability 1/2 for the signed ops; then apply_augment_op.
// Draws 5 words per sample: the op (below, 2), the bin (below, 2), the sign (uniform, 1; drawn
// for every op). u8 (1 or 3, H, W).
class TrivialAugmentWide final : public Transform {
 public:
  explicit TrivialAugmentWide(int64_t num_bins = 31);
  Tensor apply(const Tensor& image, SampleRng& rng) const override;
  bool is_random() const override { return true; }
  std::string name() const override;
  // Draws this sample's choice (5 words) for an (height, width) image, as apply() does.
  AugmentChoice get_params(SampleRng& rng, int64_t height, int64_t width) const;

 private:
  int64_t num_bins_;
};

// torchvision RandAugment(num_ops=2, magnitude=9, num_bins=31): num_ops times, an op uniform over
// the 14 at the fixed magnitude bin `magnitude`, random sign for the signed ops. Draws 3 words per
// op: the op (below, 2), the sign (uniform, 1). u8 (1 or 3, H, W).
class RandAugment final : public Transform {
 public:
  explicit RandAugment(int64_t num_ops = 2, int64_t magnitude = 9, int64_t num_bins = 31);
  Tensor apply(const Tensor& image, SampleRng& rng) const override;
  bool is_random() const override { return true; }
  std::string name() const override;
  // Draws this sample's num_ops choices (3 words each), as apply() does.
  std::vector<AugmentChoice> get_params(SampleRng& rng, int64_t height, int64_t width) const;

 private:
  int64_t num_ops_, magnitude_, num_bins_;
};

// torchvision RandomErasing(p, scale, ratio, value=0) on a float32 (C, H, W) image (after
// Normalize): with probability p, up to 10 attempts at a box with area fraction uniform in
// `scale` and aspect ratio log-uniform in `ratio`, sides round_half_even(sqrt(area * r)) and
// round_half_even(sqrt(area / r)); the first that fits strictly inside is placed uniformly and set
// to `value`; when none fits the image is unchanged. Draws 25 words: the p uniform, the ten
// attempts' two uniforms each (all drawn), then the row and column (below, 2 words each).
class RandomErasing final : public Transform {
 public:
  explicit RandomErasing(double p = 0.5, std::pair<double, double> scale = {0.02, 0.33},
                         std::pair<double, double> ratio = {0.3, 3.3}, float value = 0.0f);
  Tensor apply(const Tensor& image, SampleRng& rng) const override;
  bool is_random() const override { return true; }
  std::string name() const override;
  double p() const { return p_; }
  // The box this sample erases in an (height, width) image (25 words), nullopt for none.
  std::optional<CropBox> get_params(SampleRng& rng, int64_t height, int64_t width) const;

 private:
  double p_;
  std::pair<double, double> scale_, ratio_;
  float value_;
};

}  // namespace ember::data
