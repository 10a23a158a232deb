// `ember augment-op` (augment_command.h).

#include "augment_command.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include <ember/ember.h>
#include <ember/data/auto_augment.h>
#include <ember/data/image.h>
#include <ember/data/mix.h>
#include <ember/io/atomic_file.h>

namespace ember::app {

namespace {

using json = nlohmann::json;

data::AugmentPolicy policy_named(const std::string& name, const char* option) {
  if (name == "trivial") return data::AugmentPolicy::trivial_augment_wide;
  if (name == "randaug") return data::AugmentPolicy::rand_augment;
  EMBER_THROW(option, " must be trivial or randaug, got '", name, "'");
}

// A u8 (1 or 3, H, W) image as binary PGM / PPM.
void write_pnm(const std::string& path, const Tensor& image) {
  const Tensor in = image.contiguous();
  const int64_t c = in.size(0), h = in.size(1), w = in.size(2);
  std::string bytes = (c == 1 ? "P5\n" : "P6\n") + std::to_string(w) + " " + std::to_string(h) + "\n255\n";
  const uint8_t* p = in.data_ptr<uint8_t>();
  for (int64_t i = 0; i < h * w; ++i)
    for (int64_t ch = 0; ch < c; ++ch) bytes.push_back(static_cast<char>(p[ch * h * w + i]));
  io::write_file_atomic(path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

void write_f32(const std::string& path, const Tensor& t) {
  const Tensor in = t.contiguous();
  io::write_file_atomic(path, std::span<const uint8_t>(static_cast<const uint8_t*>(in.data()),
                                                       static_cast<size_t>(in.numel()) * sizeof(float)));
}

json choice_json(const data::AugmentChoice& c) {
  return json{{"op", data::augment_op_name(c.op)}, {"bin", c.bin}, {"negative", c.negative}, {"magnitude", c.magnitude}};
}

json box_json(const data::CropBox& b) { return json::array({b.top, b.left, b.height, b.width}); }

}  // namespace

void run_augment_op(const AugmentOpOptions& o) {
  const int modes = !o.ops.empty() + !o.bins.empty() + !o.sample.empty() + !o.mix.empty();
  EMBER_CHECK(modes == 1, "augment-op: give exactly one of --op, --bins, --sample and --mix");
  EMBER_CHECK(o.height >= 1 && o.width >= 1, "augment-op: --height and --width must be positive");
  const data::ImageMode mode = o.gray ? data::ImageMode::Gray : data::ImageMode::RGB;

  if (!o.ops.empty()) {
    EMBER_CHECK(o.inputs.size() == 1 && !o.out.empty(), "augment-op --op: give one --in image and --out");
    EMBER_CHECK(o.magnitudes.size() == o.ops.size(), "augment-op: give one --magnitude per --op (", o.ops.size(),
                " ops, ", o.magnitudes.size(), " magnitudes)");
    const Tensor img = data::decode_image(o.inputs[0], mode);
    if (o.ops.size() > 1) std::filesystem::create_directories(o.out);
    for (size_t k = 0; k < o.ops.size(); ++k) {
      const std::string& name = o.ops[k];
      const double m = o.magnitudes[k];
      const std::string out =
          o.ops.size() > 1 ? (std::filesystem::path(o.out) / (std::to_string(k) + ".pnm")).string() : o.out;
      if (name == "Erase") {
        EMBER_CHECK(o.box.size() == 4, "augment-op --op Erase: give --box TOP,LEFT,HEIGHT,WIDTH");
        write_f32(out, data::erase(data::ToTensor()(img), o.box[0], o.box[1], o.box[2], o.box[3], static_cast<float>(m)));
        continue;
      }
      if (name == "Hue") {
        write_pnm(out, data::adjust_hue(img, m));
        continue;
      }
      const std::optional<data::AugmentOp> op = data::parse_augment_op(name);
      EMBER_CHECK(op.has_value(), "augment-op: unknown --op '", name, "' (Identity, ShearX, ShearY, TranslateX, "
                  "TranslateY, Rotate, Brightness, Color, Contrast, Sharpness, Posterize, Solarize, AutoContrast, "
                  "Equalize, Hue, Erase)");
      write_pnm(out, data::apply_augment_op(img, *op, m));
    }
    return;
  }

  if (!o.bins.empty()) {
    const data::AugmentPolicy policy = policy_named(o.bins, "--bins");
    json j = json::object();
    for (int i = 0; i < data::kNumAugmentOps; ++i) {
      const auto op = static_cast<data::AugmentOp>(i);
      const data::AugmentBins b = data::augment_bins(policy, op, 31, o.height, o.width);
      j[data::augment_op_name(op)] = json{{"magnitudes", b.magnitudes}, {"signed", b.signed_magnitude}};
    }
    std::printf("%s\n", j.dump().c_str());
    return;
  }

  if (!o.sample.empty()) {
    EMBER_CHECK(o.count >= 1, "augment-op --sample: --count must be positive");
    const data::TrivialAugmentWide trivial;
    const data::RandAugment randaug;
    const data::RandomErasing erasing(o.erasing_p);
    const data::MixOptions mix{.mixup_alpha = o.sample == "cutmix" ? 0.0 : o.mixup_alpha,
                               .cutmix_alpha = o.sample == "mixup" ? 0.0 : o.cutmix_alpha, .num_classes = 1};
    for (int64_t i = 0; i < o.count; ++i) {
      ember::SampleRng rng = ember::sample_rng(o.seed, 0, static_cast<uint64_t>(i));
      json j;
      if (o.sample == "trivial") {
        j = choice_json(trivial.get_params(rng, o.height, o.width));
      } else if (o.sample == "randaug") {
        j = json::array();
        for (const data::AugmentChoice& c : randaug.get_params(rng, o.height, o.width)) j.push_back(choice_json(c));
      } else if (o.sample == "erasing") {
        const std::optional<data::CropBox> b = erasing.get_params(rng, o.height, o.width);
        j = json{{"box", b ? box_json(*b) : json()}};
      } else if (o.sample == "mixup" || o.sample == "cutmix" || o.sample == "both") {
        rng = ember::sample_rng(o.seed, 0, ember::kMixStream | static_cast<uint64_t>(i));
        const data::MixParams p = data::mix_params(mix, o.height, o.width, rng);
        j = json{{"cutmix", p.cutmix}, {"lambda", p.lambda}, {"box", box_json(p.box)}, {"drawn_lambda", p.drawn_lambda},
                 {"center", json::array({p.center_y, p.center_x})}};
      } else {
        EMBER_THROW("augment-op: --sample must be trivial, randaug, erasing, mixup, cutmix or both, got '", o.sample, "'");
      }
      std::printf("%s\n", j.dump().c_str());
    }
    return;
  }

  // --mix: one batch of the given images, mixed as the loader mixes batch --batch-index of epoch 0.
  EMBER_CHECK(o.mix == "mixup" || o.mix == "cutmix" || o.mix == "both", "augment-op: --mix must be mixup, cutmix or "
              "both, got '", o.mix, "'");
  EMBER_CHECK(!o.inputs.empty() && o.labels.size() == o.inputs.size() && !o.out.empty(),
              "augment-op --mix: give the --in images, as many --labels and --out");
  std::vector<Tensor> images;
  for (const std::string& path : o.inputs) images.push_back(data::ToTensor()(data::decode_image(path, mode)));
  for (const Tensor& t : images)
    EMBER_CHECK(t.shape() == images[0].shape(), "augment-op --mix: the images differ in size (", describe(t), " vs ",
                describe(images[0]), ")");
  data::Batch batch{stack(images, 0), from_vector<int64_t>(o.labels, {static_cast<int64_t>(o.labels.size())})};
  const data::MixOptions mix{.mixup_alpha = o.mix == "cutmix" ? 0.0 : o.mixup_alpha,
                             .cutmix_alpha = o.mix == "mixup" ? 0.0 : o.cutmix_alpha, .num_classes = o.num_classes};
  ember::SampleRng rng = ember::sample_rng(o.seed, 0, ember::kMixStream | static_cast<uint64_t>(o.batch_index));
  const data::MixParams p = data::mix_params(mix, batch.images.size(2), batch.images.size(3), rng);
  const data::Batch mixed = data::mix_batch(batch, mix, o.seed, 0, o.batch_index);
  write_f32(o.out, mixed.images);
  const int64_t n = mixed.labels.size(0);
  std::vector<float> t = mixed.labels.contiguous().to_vector<float>();
  json targets = json::array();
  for (int64_t i = 0; i < n; ++i)
    targets.push_back(std::vector<float>(t.begin() + i * o.num_classes, t.begin() + (i + 1) * o.num_classes));
  std::printf("%s\n", json{{"cutmix", p.cutmix}, {"lambda", p.lambda}, {"box", box_json(p.box)},
                           {"drawn_lambda", p.drawn_lambda}, {"center", json::array({p.center_y, p.center_x})},
                           {"shape", std::vector<int64_t>(mixed.images.shape().begin(), mixed.images.shape().end())}, {"targets", targets}}.dump().c_str());
}

}  // namespace ember::app
