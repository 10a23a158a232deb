// Image transforms (data/image_transforms.h): bilinear resize and Resize/CenterCrop chains
// against Pillow 9.4 outputs (tests/data/pil, made by tests/data/make_pil_resize_reference.py),
// CenterCrop rounding and padding, Resize output shapes, RandomResizedCrop determinism and its
// fallback, ColorJitter known values, and error messages.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <ember/data/image_transforms.h>

#include "test_util.h"

using namespace ember;
using ember::testing::error_of;

namespace {

// The input images of make_pil_resize_reference.py (pattern()): u8 (3, h, w), gradients plus
// hashed noise, wrapping mod 256. Same integer formula, so no input file is needed.
Tensor pattern_image(int64_t h, int64_t w) {
  std::vector<uint8_t> v(static_cast<size_t>(3 * h * w));
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        const int64_t base = (x * 200) / w + (y * 150) / h + c * 40;
        const uint32_t n = static_cast<uint32_t>(x * 73856093) ^ static_cast<uint32_t>(y * 19349663) ^
                           static_cast<uint32_t>(c * 83492791);
        v[static_cast<size_t>((c * h + y) * w + x)] = static_cast<uint8_t>((base + ((n >> 7) & 63)) & 255);
      }
  return from_vector<uint8_t>(v, {3, h, w});
}

std::vector<uint8_t> read_reference(const std::string& name) {
  const std::string path = std::string(EMBER_TEST_DATA_DIR) + "/pil/" + name + ".bin";
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

int max_abs_diff(const Tensor& out, const std::vector<uint8_t>& ref) {
  const std::vector<uint8_t> got = out.contiguous().to_vector<uint8_t>();
  REQUIRE(got.size() == ref.size());
  int worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(int{got[i]} - int{ref[i]}));
  return worst;
}

std::vector<double> values(const Tensor& t) { return t.contiguous().to_vector<double>(); }

}  // namespace

TEST_CASE("bilinear resize and Resize/CenterCrop chains match Pillow", "[transforms]") {
  // Measured max |ember - PIL| is 0 (bit-identical) on every case below; the bound allows 1.
  const Tensor a = pattern_image(53, 37), b = pattern_image(48, 64), c = pattern_image(300, 400);
  struct Case {
    const char* name;
    Tensor out;
    Shape shape;
  };
  const std::vector<Case> cases = {
      {"a_resize_23x16", data::resize_bilinear(a, 23, 16), {3, 23, 16}},
      {"a_resize_7x11", data::resize_bilinear(a, 7, 11), {3, 7, 11}},
      {"a_resize_80x56", data::Resize(80, 56)(a), {3, 80, 56}},
      {"a_resize_40x60", data::Resize(40, 60)(a), {3, 40, 60}},
      {"b_resize_21x28", data::resize_bilinear(b, 21, 28), {3, 21, 28}},
      {"b_resize_7x11", data::resize_bilinear(b, 7, 11), {3, 7, 11}},
      {"b_resize_72x96", data::resize_bilinear(b, 72, 96), {3, 72, 96}},
      {"b_resize32_crop24", data::Compose{data::Resize(32), data::CenterCrop(24)}(b), {3, 24, 24}},
      {"b_crop_60x70", data::CenterCrop(60, 70)(b), {3, 60, 70}},
      {"b_crop_31x41", data::CenterCrop(31, 41)(b), {3, 31, 41}},
      {"a_resizedcrop_5_3_30_20_to_16", data::resized_crop(a, 5, 3, 30, 20, 16, 16), {3, 16, 16}},
      {"c_resize256_crop224", data::Compose{data::Resize(256), data::CenterCrop(224)}(c), {3, 224, 224}},
  };
  for (const Case& k : cases) {
    INFO(k.name);
    CHECK(k.out.shape() == k.shape);
    CHECK(max_abs_diff(k.out, read_reference(k.name)) <= 1);
  }
}

TEST_CASE("resize keeps the image when the size is unchanged and handles strided input", "[transforms]") {
  const Tensor a = pattern_image(20, 30);
  CHECK(values(data::resize_bilinear(a, 20, 30)) == values(a));
  // A transposed view (3, 30, 20) resizes like its contiguous copy.
  const Tensor t = a.transpose(1, 2);
  CHECK(values(data::resize_bilinear(t, 9, 7)) == values(data::resize_bilinear(t.contiguous(), 9, 7)));
  // A constant image stays constant (weights sum to one in fixed point).
  const Tensor flat = full({1, 13, 17}, 77.0, {.dtype = DType::u8});
  for (double v : values(data::resize_bilinear(flat, 5, 40))) CHECK(v == 77.0);
}

TEST_CASE("Resize(size) follows torchvision's shorter-side rule", "[transforms]") {
  using Size = std::array<int64_t, 2>;
  CHECK(data::resize_output_size(53, 37, 16) == Size{22, 16});  // int(16 * 53 / 37) = int(22.9)
  CHECK(data::resize_output_size(300, 400, 256) == Size{256, 341});
  CHECK(data::resize_output_size(48, 64, 32) == Size{32, 42});
  CHECK(data::resize_output_size(10, 10, 5) == Size{5, 5});
  CHECK(data::resize_output_size(375, 500, 256) == Size{256, 341});
  CHECK(data::Resize(16)(pattern_image(53, 37)).shape() == Shape{3, 22, 16});
  CHECK(data::Resize(24)(pattern_image(12, 40)).shape() == Shape{3, 24, 80});  // upscaling too
  CHECK(data::Resize(16).name() == "Resize(size=16)");
  CHECK(data::Resize(7, 9).name() == "Resize(size=(7, 9))");
}

TEST_CASE("CenterCrop rounds like torchvision and pads with zeros", "[transforms]") {
  std::vector<uint8_t> v(15);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i + 1);
  const Tensor img = from_vector<uint8_t>(v, {1, 3, 5});  // rows 1..5, 6..10, 11..15
  // top = round(0.5) = 0 (ties to even), left = round(1.5) = 2.
  CHECK(values(data::CenterCrop(2, 2)(img)) == std::vector<double>{3, 4, 8, 9});
  // top = round(1.0) = 1, left = round(1.0) = 1.
  CHECK(values(data::CenterCrop(1, 3)(img)) == std::vector<double>{7, 8, 9});
  // 4x4: round(1.5) = 2 both ways.
  std::vector<uint8_t> w(16);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint8_t>(i);
  CHECK(values(data::CenterCrop(1)(from_vector<uint8_t>(w, {1, 4, 4}))) == std::vector<double>{10});
  // Larger than the image in H only: pad 1 on top, 1 below (d = 2), then crop columns 1..3.
  CHECK(values(data::CenterCrop(5, 3)(img)) ==
        std::vector<double>{0, 0, 0, 2, 3, 4, 7, 8, 9, 12, 13, 14, 0, 0, 0});
  // Larger in both, odd padding: H pads 0 before / 1 after (d = 1), W pads 0 / 1 (d = 1).
  CHECK(values(data::CenterCrop(4, 6)(img)) ==
        std::vector<double>{1, 2, 3, 4, 5, 0, 6, 7, 8, 9, 10, 0, 11, 12, 13, 14, 15, 0, 0, 0, 0, 0, 0, 0});
  // Same size: unchanged. Float images are cropped too.
  CHECK(values(data::CenterCrop(3, 5)(img)) == values(img));
  const Tensor f = img.to(DType::f32);
  CHECK(data::CenterCrop(2, 2)(f).dtype() == DType::f32);
  CHECK(values(data::CenterCrop(2, 2)(f)) == std::vector<double>{3, 4, 8, 9});
}

TEST_CASE("RandomResizedCrop is a pure function of (seed, epoch, index)", "[transforms]") {
  const Tensor img = pattern_image(48, 64);
  const data::RandomResizedCrop rrc(20);
  CHECK(rrc.is_random());
  auto r1 = ember::sample_rng(7, 2, 11), r2 = ember::sample_rng(7, 2, 11);
  const Tensor o1 = rrc(img, r1), o2 = rrc(img, r2);
  CHECK(o1.shape() == Shape{3, 20, 20});
  CHECK(values(o1) == values(o2));
  CHECK(r1.words_used() == 24);

  // Boxes stay inside the image and within the area bounds; some differ between samples.
  int distinct = 0;
  data::CropBox prev;
  for (uint64_t i = 0; i < 200; ++i) {
    auto rng = ember::sample_rng(3, 0, i);
    const data::CropBox box = data::random_resized_crop_params(48, 64, {0.08, 1.0}, {0.75, 4.0 / 3.0}, rng);
    CHECK(rng.words_used() == 24);
    CHECK(box.top >= 0);
    CHECK(box.left >= 0);
    CHECK(box.height >= 1);
    CHECK(box.width >= 1);
    CHECK(box.top + box.height <= 48);
    CHECK(box.left + box.width <= 64);
    if (!(box == prev)) ++distinct;
    prev = box;
  }
  CHECK(distinct > 150);

  // The output equals resized_crop with the drawn box.
  auto r3 = ember::sample_rng(7, 2, 11);
  const data::CropBox box = data::random_resized_crop_params(48, 64, {0.08, 1.0}, {0.75, 4.0 / 3.0}, r3);
  CHECK(values(o1) == values(data::resized_crop(img, box.top, box.left, box.height, box.width, 20, 20)));
}

TEST_CASE("RandomResizedCrop falls back to the centred crop", "[transforms]") {
  // A 10x1000 strip: no attempt with area >= 90% fits a 3/4..4/3 ratio, so the fallback gives
  // h = 10, w = round(10 * 4/3) = 13, centred: left = (1000 - 13) // 2 = 493.
  for (uint64_t i = 0; i < 5; ++i) {
    auto rng = ember::sample_rng(1, 0, i);
    const data::CropBox box = data::random_resized_crop_params(10, 1000, {0.9, 1.0}, {0.75, 4.0 / 3.0}, rng);
    CHECK(box == data::CropBox{0, 493, 10, 13});
    CHECK(rng.words_used() == 24);
  }
  // A tall strip: w = 10, h = round(10 / 0.75) = 13, top = (1000 - 13) // 2 = 493.
  auto rng = ember::sample_rng(1, 0, 0);
  CHECK(data::random_resized_crop_params(1000, 10, {0.9, 1.0}, {0.75, 4.0 / 3.0}, rng) ==
        data::CropBox{493, 0, 13, 10});
}

TEST_CASE("ColorJitter adjustments match torchvision's u8 tensor semantics", "[transforms]") {
  // Pixels (R, G, B): (100, 50, 10) and (200, 0, 255). Grayscale (0.2989, 0.587, 0.114),
  // truncated: 60.38 -> 60 and 88.85 -> 88.
  const Tensor img = from_vector<uint8_t>({100, 200, 50, 0, 10, 255}, {3, 1, 2});
  CHECK(values(data::rgb_to_grayscale(img)) == std::vector<double>{60, 88});
  CHECK(values(data::adjust_brightness(img, 1.5)) == std::vector<double>{150, 255, 75, 0, 15, 255});
  CHECK(values(data::adjust_saturation(img, 0.0)) == std::vector<double>{60, 88, 60, 88, 60, 88});
  // 0.5 * x + 0.5 * gray: 171.5 truncates to 171.
  CHECK(values(data::adjust_saturation(img, 0.5)) == std::vector<double>{80, 144, 55, 44, 35, 171});
  // Mean of the grayscale image: 74.
  CHECK(values(data::adjust_contrast(img, 0.0)) == std::vector<double>(6, 74.0));
  CHECK(values(data::adjust_contrast(img, 2.0)) == std::vector<double>{126, 255, 26, 0, 0, 255});
  // One channel: contrast uses the image's own mean; saturation is the identity.
  const Tensor g = from_vector<uint8_t>({10, 30}, {1, 1, 2});
  CHECK(values(data::adjust_contrast(g, 0.5)) == std::vector<double>{15, 25});
  CHECK(values(data::adjust_saturation(g, 0.0)) == std::vector<double>{10, 30});

  // The order matters: brightness 2 then saturation 0 vs saturation 0 then brightness 2.
  data::ColorJitterParams p;
  p.brightness = 2.0;
  p.saturation = 0.0;
  p.order = {0, 1, 2};
  CHECK(values(data::color_jitter(img, p)) == std::vector<double>{120, 105, 120, 105, 120, 105});
  p.order = {2, 1, 0};
  CHECK(values(data::color_jitter(img, p)) == std::vector<double>{120, 176, 120, 176, 120, 176});
}

TEST_CASE("ColorJitter draws its factors and order from the sample stream", "[transforms]") {
  const data::ColorJitter cj(0.4, 0.3, 0.0);
  CHECK(cj.is_random());
  std::array<int, 6> orders_seen{};
  for (uint64_t i = 0; i < 300; ++i) {
    auto rng = ember::sample_rng(5, 1, i);
    const data::ColorJitterParams p = cj.get_params(rng);
    CHECK(rng.words_used() == 7);
    CHECK(p.brightness >= 0.6);
    CHECK(p.brightness <= 1.4);
    CHECK(p.contrast >= 0.7);
    CHECK(p.contrast <= 1.3);
    CHECK(p.saturation == 1.0);  // disabled
    std::array<int, 3> sorted = p.order;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == std::array<int, 3>{0, 1, 2});
    orders_seen[static_cast<size_t>(p.order[0] * 2 + (p.order[1] > p.order[2] ? 1 : 0))]++;
  }
  for (int n : orders_seen) CHECK(n > 20);  // all six permutations occur (about 50 each)

  const Tensor img = pattern_image(16, 12);
  auto r1 = ember::sample_rng(5, 1, 9), r2 = ember::sample_rng(5, 1, 9), r3 = ember::sample_rng(5, 1, 9);
  const Tensor o = cj(img, r1);
  CHECK(values(o) == values(cj(img, r2)));
  CHECK(values(o) == values(data::color_jitter(img, cj.get_params(r3))));
  auto r4 = ember::sample_rng(0, 0, 0);
  CHECK(values(data::ColorJitter()(img, r4)) == values(img));
}

TEST_CASE("image transforms reject wrong ranks, dtypes and arguments", "[transforms]") {
  const Tensor f = zeros({3, 8, 8});  // float32
  const Tensor flat = zeros({8, 8}, {.dtype = DType::u8});
  auto rng = ember::sample_rng(0, 0, 0);
  CHECK_THAT(error_of([&] { data::Resize(4)(f); }), Catch::Contains("Resize(size=4)") && Catch::Contains("uint8"));
  CHECK_THAT(error_of([&] { data::Resize(4)(flat); }), Catch::Contains("(C, H, W)"));
  CHECK_THAT(error_of([&] { data::CenterCrop(4)(flat); }),
             Catch::Contains("CenterCrop") && Catch::Contains("(C, H, W)"));
  CHECK_THAT(error_of([&] { data::RandomResizedCrop(4)(f, rng); }),
             Catch::Contains("RandomResizedCrop") && Catch::Contains("uint8"));
  CHECK_THAT(error_of([&] { data::ColorJitter(0.1)(zeros({4, 8, 8}, {.dtype = DType::u8}), rng); }),
             Catch::Contains("1 or 3 channels"));
  CHECK_THAT(error_of([&] { data::ColorJitter(0.1)(f, rng); }), Catch::Contains("uint8"));
  CHECK_THAT(error_of([] { data::ColorJitter(-0.1); }), Catch::Contains("non-negative"));
  CHECK_THAT(error_of([] { data::RandomResizedCrop(8, {0.5, 0.1}); }), Catch::Contains("scale"));
  CHECK_THAT(error_of([] { data::Resize(0); }), Catch::Contains("positive"));
  CHECK_THAT(error_of([&] { data::RandomResizedCrop(8)(zeros({3, 8, 8}, {.dtype = DType::u8})); }),
             Catch::Contains("is random"));
}
