// TrivialAugmentWide, RandAugment, RandomErasing, ColorJitter's hue and Mixup/CutMix
// (data/auto_augment.h, data/mix.h): fixed stream consumption, grayscale behaviour, the loader's
// batches bit-identical for 0, 1 and 2 workers, Mixup/CutMix's images and soft targets, and the
// training transforms keeping the fused path for the default recipe. The comparison with
// torchvision's output is tests/data/check_torchvision_augment.py (ctest data:torchvision_augment).

#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>

#include <ember/data/auto_augment.h>
#include <ember/data/image_pipeline.h>
#include <ember/data/loader.h>
#include <ember/data/mix.h>
#include <ember/ember.h>
#include <ember/train/data_setup.h>
#include <ember/train/checkpoint.h>

#include "test_util.h"

using namespace ember;
using namespace ember::data;
using ember::testing::error_of;

namespace {

// A (c, h, w) u8 image with structure: gradients, a bright square and noise from `seed`.
Tensor test_image(int64_t c, int64_t h, int64_t w, uint32_t seed) {
  std::vector<uint8_t> px(static_cast<size_t>(c * h * w));
  uint32_t s = seed * 2654435761u + 1;
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        s = s * 1664525u + 1013904223u;
        const int64_t base = (x * 200) / w + (y * 40) / h + ch * 20;
        const int64_t square = (y > h / 4 && y < h / 2 && x > w / 3 && x < 2 * w / 3) ? 60 : 0;
        px[static_cast<size_t>((ch * h + y) * w + x)] = static_cast<uint8_t>(std::min<int64_t>(255, base + square + (s >> 28)));
      }
  return from_vector(px, {c, h, w});
}

std::vector<uint8_t> bytes(const Tensor& t) { return t.contiguous().to_vector<uint8_t>(); }

// A TensorDataset of n (c, h, w) images with labels i % classes.
TensorDataset make_dataset(int64_t n, int64_t c, int64_t h, int64_t w, int64_t classes) {
  std::vector<Tensor> images;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < n; ++i) {
    images.push_back(test_image(c, h, w, static_cast<uint32_t>(i + 1)));
    labels.push_back(i % classes);
  }
  std::vector<std::string> names;
  for (int64_t k = 0; k < classes; ++k) names.push_back("class" + std::to_string(k));
  return TensorDataset(stack(images, 0), from_vector<int64_t>(labels, {n}), names);
}

std::vector<Batch> epochs_of(DataLoader& loader, int epochs) {
  std::vector<Batch> out;
  for (int e = 0; e < epochs; ++e)
    for (auto& b : loader) out.push_back(b);
  return out;
}

}  // namespace

TEST_CASE("augment: each policy draws a fixed number of words, whatever the image and the op", "[augment]") {
  for (uint64_t index = 0; index < 200; ++index) {
    for (const int64_t c : {1, 3}) {
      const Tensor img = test_image(c, 12 + static_cast<int64_t>(index % 5), 17, static_cast<uint32_t>(index));
      SampleRng a = sample_rng(3, 0, index), b = a, e = a, j = a, k = a;
      (void)TrivialAugmentWide()(img, a);
      CHECK(a.words_used() == 5);
      (void)RandAugment()(img, b);
      CHECK(b.words_used() == 6);
      (void)RandomErasing(0.5)(ToTensor()(img), e);
      CHECK(e.words_used() == 25);
      (void)ColorJitter(0.2, 0.2, 0.2)(img, j);
      CHECK(j.words_used() == 7);  // no hue: the stream of before
      (void)ColorJitter(0.2, 0.2, 0.2, 0.1)(img, k);
      CHECK(k.words_used() == 10);
    }
  }
}

TEST_CASE("augment: the ops on grayscale and RGB images, torchvision's special cases", "[augment]") {
  const Tensor gray = test_image(1, 20, 24, 4), rgb = test_image(3, 20, 24, 5);
  for (int i = 0; i < kNumAugmentOps; ++i) {
    const auto op = static_cast<AugmentOp>(i);
    INFO(augment_op_name(op));
    CHECK(parse_augment_op(augment_op_name(op)) == op);
    CHECK(apply_augment_op(gray, op, 0.3).shape() == gray.shape());
    CHECK(apply_augment_op(rgb, op, 0.3).shape() == rgb.shape());
  }
  CHECK_FALSE(parse_augment_op("Invert").has_value());
  // Saturation and hue leave one channel as it is (torchvision returns the image).
  CHECK(bytes(apply_augment_op(gray, AugmentOp::color, 0.9)) == bytes(gray));
  CHECK(bytes(adjust_hue(gray, 0.3)) == bytes(gray));
  CHECK(bytes(adjust_hue(rgb, 0.3)) != bytes(rgb));
  // A hue shift of 0 gives the image back up to the float round trip: v / 255 through HSV and
  // back, times 255, truncated (torchvision's arithmetic) can land one level below.
  const std::vector<uint8_t> h0 = bytes(adjust_hue(rgb, 0.0)), h_in = bytes(rgb);
  for (size_t i = 0; i < h0.size(); ++i) REQUIRE((h0[i] == h_in[i] || h0[i] + 1 == h_in[i]));
  // Posterize 8 bits and Solarize above 255 change nothing; Solarize 0 inverts everything.
  CHECK(bytes(posterize(rgb, 8)) == bytes(rgb));
  CHECK(bytes(solarize(rgb, 256)) == bytes(rgb));
  const std::vector<uint8_t> v = bytes(rgb), inv = bytes(solarize(rgb, 0));
  for (size_t i = 0; i < v.size(); ++i) REQUIRE(inv[i] == 255 - v[i]);
  for (const uint8_t x : bytes(posterize(rgb, 2))) REQUIRE((x & 0x3f) == 0);
  // A flat image: AutoContrast and Equalize leave it alone; Rotate by 0 is the identity.
  const Tensor flat = full({1, 8, 8}, 77.0, {.dtype = DType::u8});
  CHECK(bytes(autocontrast(flat)) == bytes(flat));
  CHECK(bytes(equalize(flat)) == bytes(flat));
  CHECK(bytes(rotate_nearest(rgb, 0.0)) == bytes(rgb));
  // AutoContrast stretches each channel to [0, 255] (the top truncated in float32 may be 254).
  const std::vector<uint8_t> ac = bytes(autocontrast(gray));
  CHECK(int{*std::min_element(ac.begin(), ac.end())} == 0);
  CHECK(int{*std::max_element(ac.begin(), ac.end())} >= 254);
  // Translate by whole pixels shifts and fills with 0.
  const Tensor t = apply_augment_op(gray, AugmentOp::translate_x, 3.7);  // int(3.7) = 3 pixels right
  const std::vector<uint8_t> g = bytes(gray), tv = bytes(t);
  for (int64_t y = 0; y < 20; ++y)
    for (int64_t x = 0; x < 24; ++x)
      REQUIRE(tv[static_cast<size_t>(y * 24 + x)] == (x < 3 ? 0 : g[static_cast<size_t>(y * 24 + x - 3)]));
  // Bad input is an error naming the op.
  CHECK_THAT(error_of([&] { posterize(ToTensor()(rgb), 4); }), Catch::Contains("uint8"));
  CHECK_THAT(error_of([&] { adjust_hue(rgb, 0.7); }), Catch::Contains("[-0.5, 0.5]"));
  CHECK_THAT(error_of([&] { RandomErasing(1.5); }), Catch::Contains("[0, 1]"));
  SampleRng rng = sample_rng(1, 0, 0);
  CHECK_THAT(error_of([&] { RandomErasing(0.5)(rgb, rng); }), Catch::Contains("after ToTensor"));
  CHECK_THAT(error_of([&] { ColorJitter(0, 0, 0, 0.6); }), Catch::Contains("hue"));
}

TEST_CASE("augment: ColorJitter with hue runs it at its drawn slot", "[augment]") {
  const Tensor rgb = test_image(3, 10, 12, 9);
  ColorJitterParams p;
  p.brightness = 1.2;
  p.hue = 0.2;
  for (int slot = 0; slot < 4; ++slot) {
    p.hue_slot = slot;
    // order {0, 1, 2} with only brightness active: hue before it (slots 0) or after it (1, 2, 3).
    const Tensor want = slot == 0 ? adjust_brightness(adjust_hue(rgb, 0.2), 1.2) : adjust_hue(adjust_brightness(rgb, 1.2), 0.2);
    CHECK(bytes(color_jitter(rgb, p)) == bytes(want));
  }
  // The hue's slot is uniform over the four places.
  std::array<int, 4> slots{};
  const ColorJitter cj(0.1, 0.1, 0.1, 0.3);
  for (uint64_t i = 0; i < 4000; ++i) {
    SampleRng r = sample_rng(2, 0, i);
    const ColorJitterParams q = cj.get_params(r);
    CHECK(std::abs(q.hue) <= 0.3);
    ++slots[static_cast<size_t>(q.hue_slot)];
  }
  for (const int n : slots) CHECK(std::abs(n - 1000) < 150);
}

TEST_CASE("augment: loader batches with every new augmentation are bit-identical for 0, 1 and 2 workers", "[augment]") {
  for (const int64_t c : {1, 3}) {
    INFO(c << " channel(s)");
    const TensorDataset ds = make_dataset(23, c, 16, 16, 4);
    const std::vector<double> mean(static_cast<size_t>(c), 0.4), sd(static_cast<size_t>(c), 0.25);
    const std::vector<std::pair<std::string, LoaderOptions>> setups{
        {"trivial", {.batch_size = 5, .shuffle = true, .seed = 7,
                     .transform = Compose{RandomCrop(16, 2), RandomHorizontalFlip(), TrivialAugmentWide(), ToTensor(),
                                          Normalize(mean, sd), RandomErasing(0.5)}}},
        {"randaug+mixup+cutmix", {.batch_size = 5, .shuffle = true, .seed = 7,
                                  .transform = Compose{RandomCrop(16, 2), RandAugment(2, 9), ToTensor(), Normalize(mean, sd)},
                                  .mix = {.mixup_alpha = 0.2, .cutmix_alpha = 1.0, .num_classes = 4}}},
        {"jitter+hue+cutmix", {.batch_size = 4, .shuffle = true, .seed = 2,
                               .transform = Compose{ColorJitter(0.3, 0.3, 0.3, 0.2), ToTensor()},
                               .mix = {.cutmix_alpha = 1.0, .num_classes = 4}}},
    };
    for (const auto& [name, base] : setups) {
      INFO(name);
      LoaderOptions opt = base;
      DataLoader serial(ds, opt);
      const std::vector<Batch> ref = epochs_of(serial, 2);
      for (const int workers : {1, 2}) {
        opt.num_workers = workers;
        DataLoader threaded(ds, opt);
        const std::vector<Batch> got = epochs_of(threaded, 2);
        REQUIRE(got.size() == ref.size());
        for (size_t b = 0; b < ref.size(); ++b) {
          CHECK(got[b].images.to_vector<float>() == ref[b].images.to_vector<float>());
          CHECK(got[b].labels.shape() == ref[b].labels.shape());
          CHECK(got[b].labels.to(DType::f64).to_vector<double>() == ref[b].labels.to(DType::f64).to_vector<double>());
        }
      }
      // A second loader with the same seed gives the same batches; another seed does not.
      DataLoader again(ds, base);
      CHECK(epochs_of(again, 1)[1].images.to_vector<float>() == ref[1].images.to_vector<float>());
      LoaderOptions other = base;
      other.seed = base.seed + 1;
      DataLoader different(ds, other);
      CHECK(epochs_of(different, 1)[1].images.to_vector<float>() != ref[1].images.to_vector<float>());
      if (base.mix.enabled()) {
        for (const Batch& b : ref) {
          REQUIRE(b.labels.shape() == Shape{b.images.size(0), 4});
          REQUIRE(b.labels.dtype() == DType::f32);
          const std::vector<double> rows = sum(b.labels.to(DType::f64), {1}).to_vector<double>();
          for (const double s : rows) CHECK(s == Approx(1.0).margin(1e-6));
        }
      }
    }
  }
}

TEST_CASE("mix: Mixup and CutMix images and soft targets follow torchvision v2's rules", "[augment]") {
  const TensorDataset ds = make_dataset(4, 3, 10, 14, 3);
  Batch batch{ToTensor()(stack({ds.get(0).image, ds.get(1).image, ds.get(2).image, ds.get(3).image}, 0)),
              from_vector<int64_t>({0, 1, 2, 0}, {4})};
  const std::vector<float> x = batch.images.to_vector<float>();
  const int64_t sample = 3 * 10 * 14;
  SECTION("Mixup: lambda x + (1 - lambda) x rolled by one") {
    const MixParams p{.cutmix = false, .lambda = 0.3};
    const Batch m = mix_batch(batch, p, 3);
    const std::vector<float> y = m.images.to_vector<float>();
    for (int64_t i = 0; i < 4; ++i) {
      const int64_t j = (i + 3) % 4;
      for (int64_t k = 0; k < sample; ++k)
        REQUIRE(y[static_cast<size_t>(i * sample + k)] ==
                x[static_cast<size_t>(j * sample + k)] * 0.7f + x[static_cast<size_t>(i * sample + k)] * 0.3f);
    }
    // Row 1 (label 1) mixed with row 0 (label 0); row 0 (label 0) with row 3 (label 0): all 0.
    const std::vector<float> t = m.labels.to_vector<float>();
    CHECK(std::vector<float>(t.begin() + 3, t.begin() + 6) == std::vector<float>{0.7f, 0.3f, 0.0f});
    CHECK(std::vector<float>(t.begin(), t.begin() + 3) == std::vector<float>{0.7f + 0.3f, 0.0f, 0.0f});
  }
  SECTION("CutMix: the box comes from the rolled batch, lambda is the kept share") {
    for (uint64_t b = 0; b < 50; ++b) {
      SampleRng rng = sample_rng(5, 0, kMixStream | b);
      const MixParams p = mix_params({.cutmix_alpha = 1.0, .num_classes = 3}, 10, 14, rng);
      REQUIRE(p.cutmix);
      CHECK(p.lambda == Approx(1.0 - static_cast<double>(p.box.height * p.box.width) / 140.0));
      CHECK(p.box.top >= 0);
      CHECK(p.box.top + p.box.height <= 10);
      CHECK(p.box.left + p.box.width <= 14);
      const Batch m = mix_batch(batch, p, 3);
      const std::vector<float> y = m.images.to_vector<float>();
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t ch = 0; ch < 3; ++ch)
          for (int64_t yy = 0; yy < 10; ++yy)
            for (int64_t xx = 0; xx < 14; ++xx) {
              const bool in_box = yy >= p.box.top && yy < p.box.top + p.box.height && xx >= p.box.left &&
                                  xx < p.box.left + p.box.width;
              const int64_t from = in_box ? (i + 3) % 4 : i;
              const int64_t off = (ch * 10 + yy) * 14 + xx;
              REQUIRE(y[static_cast<size_t>(i * sample + off)] == x[static_cast<size_t>(from * sample + off)]);
            }
      // The loader's entry point draws the same parameters from the batch's stream.
      const Batch via_stream = mix_batch(batch, MixOptions{.cutmix_alpha = 1.0, .num_classes = 3}, 5, 0,
                                         static_cast<int64_t>(b));
      CHECK(via_stream.images.to_vector<float>() == y);
    }
  }
  SECTION("bad labels and shapes are errors") {
    Batch bad = batch;
    bad.labels = from_vector<int64_t>({0, 1, 5, 0}, {4});
    CHECK_THAT(error_of([&] { mix_batch(bad, MixParams{}, 3); }), Catch::Contains("label 5"));
    CHECK_THAT(error_of([&] { DataLoader(ds, {.batch_size = 2, .mix = {.mixup_alpha = -1, .num_classes = 3}}); }),
               Catch::Contains("non-negative"));
  }
}

TEST_CASE("augment: the training transforms keep the fused path for the default recipe", "[augment]") {
  train::DataInfo idx;
  idx.mean = {0.3};
  idx.std = {0.3};
  // Light (the default): exactly RandomCrop, flip, ToTensor, Normalize, the form apply_batch fuses.
  const Compose light = train::make_train_transform(idx, true);
  REQUIRE(light.transforms().size() == 4);
  CHECK(dynamic_cast<const RandomCrop*>(light.transforms()[0].get()) != nullptr);
  CHECK(dynamic_cast<const Normalize*>(light.transforms()[3].get()) != nullptr);
  const Compose trivial = train::make_train_transform(idx, true, "trivial", 0.25);
  REQUIRE(trivial.transforms().size() == 6);
  CHECK(dynamic_cast<const TrivialAugmentWide*>(trivial.transforms()[2].get()) != nullptr);
  CHECK(dynamic_cast<const RandomErasing*>(trivial.transforms()[5].get()) != nullptr);
  CHECK(dynamic_cast<const RandAugment*>(train::make_train_transform(idx, false, "randaug").transforms()[1].get()));
  CHECK_THAT(error_of([&] { train::make_train_transform(idx, false, "heavy"); }), Catch::Contains("--augment"));
  // ImageFolder data: the whole default chain fuses; with a policy, the crop and the policy run
  // first and ToTensor + Normalize still fuse.
  train::DataInfo folder = idx;
  folder.kind = train::DataKind::image_folder;
  folder.image_size = 32;
  folder.mean = {0.485, 0.456, 0.406};
  folder.std = {0.229, 0.224, 0.225};
  const ImagePipeline fast = plan_image_pipeline(train::make_train_transform(folder, true));
  CHECK(fast.fused);
  CHECK(fast.prefix.empty());
  CHECK(fast.random_resized_crop != nullptr);
  const ImagePipeline ta = plan_image_pipeline(train::make_train_transform(folder, true, "trivial"));
  CHECK(ta.fused);
  CHECK(ta.prefix.size() == 3);
  // The batch-level results equal the per-sample transforms (the per-sample path for the policy).
  const TensorDataset ds = make_dataset(6, 1, 28, 28, 2);
  idx.image_size = 28;
  DataLoader loader(ds, {.batch_size = 6, .seed = 4, .transform = train::make_train_transform(idx, true, "trivial", 0.5)});
  const Batch b = loader.load_batch(0, 0);
  const Compose tf = train::make_train_transform(idx, true, "trivial", 0.5);
  for (int64_t i = 0; i < 6; ++i) {
    SampleRng rng = sample_rng(4, 0, static_cast<uint64_t>(i));
    CHECK(tf.apply(ds.get(i).image, rng).to_vector<float>() == b.images[i].to_vector<float>());
  }
}
