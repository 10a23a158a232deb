// `ember train --data TREE` end to end on a tiny ImageFolder tree of PNG and JPEG files: it learns,
// the checkpoint records classes and the eval transform, predict reads image files with it, the
// split/--val/cache/skip options do what they say, and a bad file fails or is skipped.

#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <cmath>

#include <ember/ember.h>
#include <ember/io/safetensors.h>
#include <ember/train/config.h>
#include <ember/train/inference.h>
#include <ember/train/trainer.h>
#include <ember/train/weights.h>
#include <ember/train/checkpoint.h>

#include "stb_write.h"
#include "test_util.h"

using namespace ember;
using ember::testing::error_of;
namespace fs = std::filesystem;

namespace {

// Three classes told apart by colour (red, green, blue dominant), sizes 40..60, noise on top;
// PNG and JPEG mixed. Returns the root.
fs::path make_tree(const std::string& name, int per_class) {
  const fs::path root = fs::temp_directory_path() / ("ember_train_images_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(root);
  std::mt19937 rng(5);
  const char* classes[] = {"blue", "green", "red"};
  for (int c = 0; c < 3; ++c) {
    fs::create_directories(root / classes[c]);
    for (int i = 0; i < per_class; ++i) {
      const int w = 40 + static_cast<int>(rng() % 21), h = 40 + static_cast<int>(rng() % 21);
      std::vector<uint8_t> px(static_cast<size_t>(w * h * 3));
      for (size_t k = 0; k < px.size(); ++k) {
        const int ch = static_cast<int>(k % 3);
        const int hot = 2 - c;  // blue -> channel 2, green -> 1, red -> 0
        px[k] = static_cast<uint8_t>((ch == hot ? 150 : 40) + rng() % 80);
      }
      const std::string file = (root / classes[c] / ("img" + std::to_string(i))).string();
      if (i % 2 == 0)
        REQUIRE(stbi_write_png((file + ".png").c_str(), w, h, 3, px.data(), w * 3) != 0);
      else
        REQUIRE(stbi_write_jpg((file + ".jpg").c_str(), w, h, 3, px.data(), 90) != 0);
    }
  }
  return root;
}

train::TrainConfig config(const fs::path& root) {
  train::TrainConfig c;
  c.data = root.string();
  c.model = "cnn";
  c.optimizer = "adam";
  c.lr = 3e-3;
  c.batch_size = 8;
  c.epochs = 3;
  c.image_size = 16;
  c.scheduler = "none";
  c.quiet = true;
  c.threads = 2;
  return c;
}

}  // namespace

TEST_CASE("train on an ImageFolder tree: learns, checkpoints the transform, predicts image files", "[train]") {
  const fs::path root = make_tree("basic", 16);
  const fs::path save = root.string() + "_ckpt", metrics = root.string() + "_metrics.jsonl";
  train::TrainConfig c = config(root);
  c.save_dir = save.string();
  c.metrics_path = metrics.string();
  c.val_split = 0.25;
  c.workers = 2;
  const train::TrainSummary s = train::run_training(c);
  CHECK(s.test_acc >= 0.9);  // colour is easy
  // The config event names the sizes; 4 of 16 per class held out (stratified).
  std::ifstream in(metrics);
  std::string first_line;
  std::getline(in, first_line);
  const nlohmann::json cfg = nlohmann::json::parse(first_line);
  CHECK(cfg["train_size"] == 36);
  CHECK(cfg["test_size"] == 12);
  CHECK(cfg["image_size"] == 16);
  CHECK(cfg["eval_resize"] == 18);  // round(16 * 256 / 224)
  CHECK(cfg["classes"] == nlohmann::json({"blue", "green", "red"}));

  const train::LoadedModel m = train::load_model(save.string());
  CHECK(m.classes == std::vector<std::string>{"blue", "green", "red"});
  CHECK(m.resize == 18);
  CHECK(m.image_size == 16);
  CHECK(m.in_channels == 3);
  const std::vector<train::Prediction> p =
      train::predict(m, {(root / "red" / "img0.png").string(), (root / "blue" / "img1.jpg").string()}, 2);
  REQUIRE(p.size() == 2);
  CHECK(p[0].top[0].first == "red");
  CHECK(p[1].top[0].first == "blue");
  // eval on the tree the run split: its 12 held-out images (Note [Held-out split]), with the
  // checkpoint's transform: the best evaluation's accuracy exactly.
  REQUIRE(m.split.has_value());
  CHECK(m.split->fraction == 0.25);
  CHECK(m.split->samples == 48);
  CHECK(m.split->held_out == 12);
  const train::EvalResult ev = train::evaluate(m, root.string(), "", 16);
  CHECK(ev.count == 12);
  CHECK(ev.held_out_of == 48);
  const nlohmann::json manifest = nlohmann::json::parse(std::ifstream(save / "checkpoint.json"));
  CHECK(ev.accuracy == manifest["best"]["test_acc"].get<double>());
  CHECK(manifest["split"]["held_out"] == 12);
  CHECK(manifest["split"]["samples_hash"] == m.split->samples_hash);
  // A copy of the tree is the same tree; another tree is evaluated whole.
  const fs::path copy = root.string() + "_copy";
  fs::copy(root, copy, fs::copy_options::recursive);
  CHECK(train::evaluate(m, copy.string(), "", 16).count == 12);
  std::ofstream(copy / "red" / "notes.txt") << "not an image: not a sample";
  CHECK(train::evaluate(m, copy.string(), "", 16).held_out_of == 48);
  fs::copy_file(copy / "red" / "img0.png", copy / "red" / "img99.png");
  const train::EvalResult whole = train::evaluate(m, copy.string(), "", 16);
  CHECK(whole.count == 49);
  CHECK(whole.held_out_of == 0);
  // The tree the run split, changed since: refused, saying why.
  fs::copy_file(copy / "red" / "img99.png", root / "red" / "img99.png");
  CHECK_THAT(error_of([&] { train::evaluate(m, root.string(), "", 16); }),
             Catch::Contains("is the tree the model's run split with --val-split 0.25 --seed 1, but it has changed "
                             "since (49 images now, 48 then)"));
  // Resume refuses changed data, saying what changed.
  train::TrainConfig more;
  more.resume_dir = save.string();
  more.epochs = 4;
  more.quiet = true;
  CHECK_THAT(error_of([&] { train::run_training(more); }),
             Catch::Contains("changed since the run was saved: 49 images now, 48 then"));
  fs::rename(root / "red" / "img99.png", root / "red" / "img98.png");
  fs::remove(root / "red" / "img0.png");
  CHECK_THAT(error_of([&] { train::run_training(more); }),
             Catch::Contains("the same 48 images in number, but files were added, removed or renamed"));
  fs::rename(root / "red", root / "rouge");
  CHECK_THAT(error_of([&] { train::run_training(more); }),
             Catch::Contains("3 classes now, 3 then; new: 'rouge'; gone: 'red'"));
  fs::remove_all(copy);
  // Weights with a NaN are refused, naming the tensor (a PyTorch file may hold them).
  std::vector<std::pair<std::string, Tensor>> tensors = m.model->state_dict();
  for (auto& [name, t] : tensors) t = t.clone();
  tensors[2].second.view({-1}).narrow(0, 3, 1).fill_(std::nan(""));
  const std::string nan_file = save.string() + "_nan.safetensors";
  io::save_safetensors(nan_file, tensors);
  const std::string nan_error = nan_file + ": tensor '" + tensors[2].first + "' holds 1 NaN or infinite value "
                                "(the first at element 3 of " + std::to_string(tensors[2].second.numel()) + ")";
  CHECK_THAT(error_of([&] { train::load_model(nan_file); }), Catch::StartsWith(nan_error));
  CHECK_THAT(error_of([&] { train::load_weights_into(*m.model, nan_file); }), Catch::StartsWith(nan_error));
  fs::remove(nan_file);
  // A path that is neither a file nor FILE:INDEX.
  CHECK_THAT(error_of([&] { train::predict(m, {(root / "nope.png").string()}, 1); }),
             Catch::Contains("neither an image file nor FILE:INDEX"));
  fs::remove_all(root);
  fs::remove_all(save);
  fs::remove(metrics);
}

TEST_CASE("train on an ImageFolder tree: --val tree, cache, bad files", "[train]") {
  const fs::path root = make_tree("val", 6), val = make_tree("val_tree", 3);
  const fs::path cache = root.string() + "_cache";
  train::TrainConfig c = config(root);
  c.epochs = 2;
  c.val = val.string();
  c.cache_dir = cache.string();
  const train::TrainSummary s = train::run_training(c);
  CHECK(s.epochs.size() == 2);
  REQUIRE(fs::is_directory(cache));
  CHECK(std::distance(fs::directory_iterator(cache), fs::directory_iterator{}) == 2);  // train and val caches
  // --eval-limit: a prefix of the validation tree, still loaded image by image.
  train::TrainConfig limited = c;
  limited.epochs = 1;
  limited.eval_limit = 4;
  CHECK(!std::isnan(train::run_training(limited).test_acc));

  // A corrupt file: an error naming it, or, with --skip-bad-images, left out.
  std::ofstream(root / "red" / "broken.jpg") << "not a jpeg";
  train::TrainConfig bad = config(root);
  bad.epochs = 1;
  bad.val = val.string();
  CHECK_THAT(error_of([&] { train::run_training(bad); }), Catch::Contains("broken.jpg"));
  bad.skip_bad_images = true;
  CHECK(train::run_training(bad).epochs.size() == 1);
  // Mismatched classes.
  fs::create_directories(val / "yellow");
  std::filesystem::copy_file(val / "red" / "img0.png", val / "yellow" / "img0.png");
  CHECK_THAT(error_of([&] { train::run_training(bad); }), Catch::Contains("classes that differ"));
  fs::remove_all(root);
  fs::remove_all(val);
  fs::remove_all(cache);
}

TEST_CASE("train on a CIFAR-10 binary directory (detected by its batch files)", "[train]") {
  const fs::path dir = fs::temp_directory_path() / ("ember_train_cifar_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::mt19937 rng(2);
  auto batch = [&](const std::string& name, int records) {
    std::ofstream out(dir / name, std::ios::binary);
    for (int r = 0; r < records; ++r) {
      const auto label = static_cast<char>(r % 10);
      out.put(label);
      for (int i = 0; i < 3072; ++i) out.put(static_cast<char>((i / 1024 == r % 3 ? 200 : 30) + rng() % 40));
    }
  };
  for (int b = 1; b <= 5; ++b) batch("data_batch_" + std::to_string(b) + ".bin", 8);
  batch("test_batch.bin", 10);
  std::ofstream(dir / "batches.meta.txt") << "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n";
  train::TrainConfig c = config(dir);
  c.image_size = -1;  // CIFAR: the images' own 32x32
  c.epochs = 1;
  const train::TrainSummary s = train::run_training(c);
  CHECK(s.steps == 5);  // 40 images, batch 8
  CHECK(s.epochs.size() == 1);
  fs::remove_all(dir);
}
