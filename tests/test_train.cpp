// The trainer end to end on a small synthetic IDX dataset: learning, metrics file, checkpoints,
// exact resume, eval/predict, and bad input.

#include <catch2/catch.hpp>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include <ember/ember.h>
#include <ember/io/atomic_file.h>
#include <ember/train/checkpoint.h>
#include <ember/train/config.h>
#include <ember/train/inference.h>
#include <ember/train/trainer.h>

using namespace ember;
namespace fs = std::filesystem;

namespace {

// A 10-class dataset of 28x28 images: class c is a bright 6x6 square at a class-specific place
// plus noise, so a CNN learns it in a few steps. Written as real (gzipped) IDX files.
fs::path make_dataset(const std::string& name, int64_t n_train = 320, int64_t n_test = 80) {
  const fs::path dir = fs::temp_directory_path() / ("ember_train_test_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  Generator g(11);
  auto make = [&](int64_t n, const std::string& images, const std::string& labels) {
    std::vector<uint8_t> img(static_cast<size_t>(n * 28 * 28));
    std::vector<uint8_t> lab(static_cast<size_t>(n));
    std::vector<float> noise = rand({n * 28 * 28}, {}, g).to_vector<float>();
    for (int64_t i = 0; i < n; ++i) {
      const int c = static_cast<int>(i % 10);
      lab[i] = static_cast<uint8_t>(c);
      const int r0 = 2 + (c / 5) * 12, c0 = 2 + (c % 5) * 5;
      for (int y = 0; y < 28; ++y)
        for (int x = 0; x < 28; ++x) {
          const bool on = y >= r0 && y < r0 + 6 && x >= c0 && x < c0 + 4;
          img[(i * 28 + y) * 28 + x] = static_cast<uint8_t>((on ? 180 : 0) + 60 * noise[(i * 28 + y) * 28 + x]);
        }
    }
    data::write_idx(dir / images, from_vector<uint8_t>(img, {n, 28, 28}), data::IdxCompression::gzip);
    data::write_idx(dir / labels, from_vector<uint8_t>(lab, {n}), data::IdxCompression::gzip);
  };
  make(n_train, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz");
  make(n_test, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz");
  return dir;
}

train::TrainConfig base_config(const fs::path& data) {
  train::TrainConfig c;
  c.data = data.string();
  c.model = "cnn";
  c.optimizer = "adam";
  c.lr = 2e-3;
  c.batch_size = 32;
  c.epochs = 2;
  c.scheduler = "cosine";
  c.quiet = true;
  c.threads = 2;
  return c;
}

std::vector<std::pair<std::string, std::vector<float>>> weights_of(const fs::path& file) {
  io::SafetensorsFile f = io::load_safetensors(file.string());
  std::vector<std::pair<std::string, std::vector<float>>> out;
  for (auto& [n, t] : f.tensors)
    if (t.dtype() == DType::f32) out.emplace_back(n, t.to_vector<float>());
  return out;
}

// The weights file of the last checkpoint in a --save directory.
fs::path last_weights(const std::string& dir) { return fs::path(dir) / train::open_checkpoint(dir).weights.path; }

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("ember_train_out_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  return d;
}

}  // namespace

TEST_CASE("train: learns a synthetic dataset and writes the metrics schema", "[train]") {
  const fs::path data = make_dataset("learn");
  train::TrainConfig c = base_config(data);
  c.epochs = 3;
  const fs::path out = temp_dir("learn");
  fs::create_directories(out);
  c.metrics_path = (out / "metrics.jsonl").string();
  train::TrainSummary s = train::run_training(c);
  CHECK(s.test_acc >= 0.9);
  CHECK(s.steps == 3 * 10);
  REQUIRE(s.epochs.size() == 3);
  CHECK(s.epochs[2].train_loss < s.epochs[0].train_loss);

  std::ifstream in(c.metrics_path);
  std::vector<nlohmann::json> events;
  for (std::string line; std::getline(in, line);) events.push_back(nlohmann::json::parse(line));
  REQUIRE(events.size() == 1 + 30 + 3 + 1);
  CHECK(events.front()["event"] == "config");
  for (const char* key : {"model", "epochs", "batch_size", "lr", "optimizer", "scheduler", "seed", "normalize",
                          "steps_per_epoch", "step_event_every"})
    CHECK(events.front().contains(key));
  CHECK(events.front()["normalize"]["mean"].size() == 1);
  CHECK(events[1]["event"] == "step");
  for (const char* key : {"epoch", "step", "loss", "lr", "images_per_sec"}) CHECK(events[1].contains(key));
  CHECK(events[11]["event"] == "epoch");
  for (const char* key : {"epoch", "train_loss", "train_acc", "test_loss", "test_acc", "images_per_sec", "seconds",
                          "loader_wait_seconds"})
    CHECK(events[11].contains(key));
  CHECK(events.back()["event"] == "summary");
  CHECK(events[11]["loader_wait_seconds"].get<double>() >= 0);
  CHECK(events.back()["test_acc"].get<double>() == Approx(s.test_acc));
}

TEST_CASE("train: a run stopped and resumed ends with bit-identical weights", "[train]") {
  const fs::path data = make_dataset("resume");
  // Uninterrupted.
  train::TrainConfig a = base_config(data);
  a.save_dir = temp_dir("resume_a").string();
  train::run_training(a);
  // Stopped after epoch 1, then after 3 more steps (mid-epoch), resumed each time.
  train::TrainConfig b = base_config(data);
  b.save_dir = temp_dir("resume_b").string();
  b.max_steps = 10;  // = one epoch of 320 / 32
  train::run_training(b);
  train::TrainConfig b2;
  b2.resume_dir = b.save_dir;
  b2.save_dir = b.save_dir;
  b2.max_steps = 13;
  b2.quiet = true;
  train::run_training(b2);
  train::TrainConfig b3;
  b3.resume_dir = b.save_dir;
  b3.save_dir = b.save_dir;
  b3.quiet = true;
  train::TrainSummary sb = train::run_training(b3);
  CHECK(sb.steps == 20);
  const auto wa = weights_of(last_weights(a.save_dir));
  const auto wb = weights_of(last_weights(b.save_dir));
  REQUIRE(wa.size() == wb.size());
  for (size_t i = 0; i < wa.size(); ++i) {
    INFO(wa[i].first);
    CHECK(wa[i].first == wb[i].first);
    CHECK(wa[i].second == wb[i].second);  // exact equality, bit for bit
  }
  // The checkpoint directory holds exactly the documented files: the manifest and the step
  // directories it names (Note [Checkpoint sets]), the run's report files (train/run_report.h),
  // and no temp files.
  const train::Manifest m = train::open_checkpoint(b.save_dir);
  CHECK(m.step == 20);
  CHECK(m.weights.path == "step-00000020/model.safetensors");
  CHECK(m.state.path == "step-00000020/state.safetensors");
  std::vector<std::string> names;
  for (auto& e : fs::recursive_directory_iterator(b.save_dir))
    names.push_back(fs::relative(e.path(), b.save_dir).string());
  std::vector<std::string> want{"checkpoint.json", "step-00000020", m.weights.path, m.state.path,
                                "metrics.jsonl", "evaluation.json", "report.html"};
  if (m.has_best && m.best.path != m.weights.path) {  // the best step's directory is kept whole
    want.push_back(fs::path(m.best.path).parent_path().string());
    want.push_back(m.best.path);
    want.push_back((fs::path(m.best.path).parent_path() / "state.safetensors").string());
  }
  std::sort(names.begin(), names.end());
  std::sort(want.begin(), want.end());
  CHECK(names == want);
}

TEST_CASE("train: eval and predict read a checkpoint", "[train]") {
  const fs::path data = make_dataset("eval");
  train::TrainConfig c = base_config(data);
  c.save_dir = temp_dir("eval").string();
  train::TrainSummary s = train::run_training(c);
  train::LoadedModel m = train::load_model(c.save_dir);
  CHECK(m.model_name == "cnn");
  CHECK(m.classes.size() == 10);
  train::EvalResult r = train::evaluate(m, data.string(), "");
  CHECK(r.count == 80);
  CHECK(r.accuracy == Approx(s.test_acc));
  int64_t total = 0;
  for (auto& row : r.confusion)
    for (int64_t v : row) total += v;
  CHECK(total == 80);
  std::vector<train::Prediction> p =
      train::predict(m, {(data / "t10k-images-idx3-ubyte.gz").string() + ":3"}, 5);
  REQUIRE(p.size() == 1);
  CHECK(p[0].top.size() == 5);
  CHECK(p[0].top[0].first == "3");  // test image 3 is class 3
  CHECK(p[0].top[0].second >= p[0].top[1].second);
  CHECK_THROWS_WITH(train::predict(m, {(data / "t10k-images-idx3-ubyte.gz").string() + ":999"}),
                    Catch::Contains("index 999 is out of range"));
}

TEST_CASE("train: bad input gives one clear error and writes nothing", "[train]") {
  const fs::path data = make_dataset("bad", 64, 16);
  auto fails_with = [&](train::TrainConfig c, const std::string& what) {
    INFO(what);
    CHECK_THROWS_WITH(train::run_training(c), Catch::Contains(what));
  };
  train::TrainConfig c = base_config(data);
  const fs::path out = temp_dir("bad");
  c.save_weights = (out / "w.safetensors").string();

  train::TrainConfig x = c;
  x.batch_size = 0;
  fails_with(x, "--batch-size must be at least 1, got 0");
  x = c;
  x.model = "vgg";
  fails_with(x, "unknown model 'vgg'");
  x = c;
  x.data = "/nonexistent/ember-data";
  fails_with(x, "/nonexistent/ember-data");
  x = c;
  x.optimizer = "rmsprop";
  fails_with(x, "--optimizer must be adam, adamw or sgd");
  // A corrupt dataset file.
  {
    const fs::path broken = make_dataset("broken", 64, 16);
    std::ofstream(broken / "train-images-idx3-ubyte.gz", std::ios::binary) << "not an idx file";
    x = c;
    x.data = broken.string();
    fails_with(x, "train-images-idx3-ubyte.gz");
  }
  // Weights of another model.
  {
    models::SimpleCNN other(1, 28, 10);
    const fs::path wfile = fs::temp_directory_path() / ("ember_other_model_" + std::to_string(::getpid()) + ".safetensors");
    io::save_safetensors(wfile.string(), other.state_dict());
    x = c;
    x.init_weights = wfile.string();
    fails_with(x, "unexpected keys: fc.bias, fc.weight");
    // Truncated.
    const auto size = fs::file_size(wfile);
    fs::resize_file(wfile, size / 2);
    fails_with(x, wfile.string());
  }
  // A checkpoint directory that does not exist.
  x = c;
  x.resume_dir = (out / "missing").string();
  fails_with(x, "missing");
  CHECK(!fs::exists(out / "w.safetensors"));  // nothing half-written by any failed run
}

TEST_CASE("train: data-loader workers do not change the result", "[train]") {
  const fs::path data = make_dataset("workers", 192, 32);
  train::TrainConfig a = base_config(data);
  a.epochs = 1;
  a.save_weights = (temp_dir("workers_a") / "w.safetensors").string();
  fs::create_directories(fs::path(a.save_weights).parent_path());
  train::run_training(a);
  train::TrainConfig b = a;
  b.workers = 2;
  b.save_weights = (temp_dir("workers_b") / "w.safetensors").string();
  fs::create_directories(fs::path(b.save_weights).parent_path());
  train::run_training(b);
  const auto wa = weights_of(a.save_weights), wb = weights_of(b.save_weights);
  REQUIRE(wa.size() == wb.size());
  for (size_t i = 0; i < wa.size(); ++i) CHECK(wa[i].second == wb[i].second);
  train::TrainConfig bad = a;
  bad.workers = -1;
  CHECK_THROWS_WITH(train::run_training(bad), Catch::Contains("--workers must be non-negative"));
}

TEST_CASE("train: option values are checked with their range, given or not", "[train]") {
  const fs::path data = make_dataset("options", 64, 16);
  auto fails_with = [&](train::TrainConfig c, const std::string& what) {
    INFO(what);
    CHECK_THROWS_WITH(train::check_options(c), what);
  };
  train::TrainConfig c = base_config(data);
  train::TrainConfig x = c;
  x.lr = -1;  // -1 is "not given" for the C++ API, but not when the option was given
  x.explicitly_set = {"lr"};
  x.given_text = {{"lr", "-1"}};
  fails_with(x, "--lr must be a positive finite number, got -1");
  x = c;
  x.lr = INFINITY;
  fails_with(x, "--lr must be a positive finite number, got inf");
  x = c;
  x.batch_size = -5;
  fails_with(x, "--batch-size must be at least 1, got -5");
  x = c;
  x.label_smoothing = 1;
  fails_with(x, "--label-smoothing must be in [0, 1), got 1");
  x = c;
  x.weight_decay = NAN;
  fails_with(x, "--weight-decay must be a finite number >= 0, got nan");
  // Not given: the recipe fills it.
  x = c;
  x.lr = -1;
  CHECK_NOTHROW(train::check_options(x));
  train::resolve(x);
  CHECK(x.lr == 1e-3);
}

TEST_CASE("train: a diverging run stops with an error and saves nothing non-finite", "[train]") {
  const fs::path data = make_dataset("diverge", 64, 16);
  train::TrainConfig c = base_config(data);
  c.optimizer = "sgd";
  c.lr = 1e4;
  c.scheduler = "none";
  c.save_dir = temp_dir("diverge").string();
  c.save_weights = (fs::path(c.save_dir) / "w.safetensors").string();
  int64_t diverged_at = 0;
  try {
    train::run_training(c);
    FAIL("a run with lr 1e4 finished");
  } catch (const Error& e) {
    const std::string msg = e.what();
    INFO(msg);
    REQUIRE(msg.rfind("training diverged at step ", 0) == 0);
    diverged_at = std::stoll(msg.substr(std::string("training diverged at step ").size()));
    CHECK(msg.find("Lower --lr (10000), add --clip-grad-norm 1 or use --warmup-epochs") != std::string::npos);
  }
  CHECK(!fs::exists(c.save_weights));
  // Whatever checkpoint was written before the divergence is complete, earlier, and finite.
  if (train::has_checkpoint(c.save_dir)) {
    const train::Manifest m = train::open_checkpoint(c.save_dir);
    CHECK(m.step < diverged_at);
    for (const auto& [name, w] : weights_of(fs::path(c.save_dir) / m.weights.path))
      for (float v : w) REQUIRE(std::isfinite(v));
    if (m.has_best) CHECK(std::isfinite(m.best_acc));
  }
}

TEST_CASE("train: a checkpoint whose files do not belong together is refused", "[train]") {
  const fs::path data = make_dataset("belong", 64, 16);
  train::TrainConfig a = base_config(data);
  a.epochs = 1;
  a.save_dir = temp_dir("belong_a").string();
  train::run_training(a);
  train::TrainConfig b = a;
  b.seed = 2;
  b.save_dir = temp_dir("belong_b").string();
  train::run_training(b);
  // b's weights and a manifest rewritten to match them: the run ids still differ.
  const train::Manifest ma = train::open_checkpoint(a.save_dir);
  const train::Manifest mb = train::open_checkpoint(b.save_dir);
  const fs::path wa = fs::path(a.save_dir) / ma.weights.path;
  fs::copy_file(fs::path(b.save_dir) / mb.weights.path, wa, fs::copy_options::overwrite_existing);
  CHECK_THROWS_WITH(train::open_checkpoint(a.save_dir), Catch::Contains("does not match"));
  std::vector<uint8_t> bytes = io::read_file((fs::path(a.save_dir) / train::kManifestName).string());
  std::string text(bytes.begin(), bytes.end());
  auto replace_all = [&](const std::string& from, const std::string& to) {
    for (size_t p = text.find(from); p != std::string::npos; p = text.find(from, p + to.size())) text.replace(p, from.size(), to);
  };
  replace_all(ma.weights.crc32, mb.weights.crc32);
  replace_all("\"bytes\": " + std::to_string(ma.weights.bytes), "\"bytes\": " + std::to_string(mb.weights.bytes));
  io::write_file_atomic((fs::path(a.save_dir) / train::kManifestName).string(), text);
  CHECK_THROWS_WITH(train::open_checkpoint(a.save_dir),
                    Catch::Contains("belongs to run " + mb.run) && Catch::Contains("but the manifest names run " + ma.run) &&
                        Catch::Contains("the files of this checkpoint do not belong together"));
  CHECK_THROWS_WITH(train::load_model(a.save_dir), Catch::Contains("do not belong together"));
}

// ---- --amp (Note [Mixed-precision training] in train/train_step.cpp) ---------------------------------

namespace {

// The loss of each step of a run's metrics file.
std::vector<double> step_losses(const std::string& metrics) {
  std::ifstream in(metrics);
  std::vector<double> losses;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json e = nlohmann::json::parse(line);
    if (e["event"] == "step") losses.push_back(e["loss"].get<double>());
  }
  return losses;
}

}  // namespace

TEST_CASE("train: --amp bf16 and fp16 learn the synthetic dataset and say so in the metrics", "[train][amp]") {
  const fs::path data = make_dataset("amp");
  // The float32 run: its first loss is what a 16-bit forward pass rounds.
  train::TrainConfig f32 = base_config(data);
  f32.max_steps = 1;
  const fs::path f32_out = temp_dir("amp_f32");
  fs::create_directories(f32_out);
  f32.metrics_path = (f32_out / "metrics.jsonl").string();
  train::run_training(f32);
  const double f32_loss = step_losses(f32.metrics_path).at(0);
  for (const char* amp : {"bf16", "fp16"}) {
    INFO("--amp " << amp);
    train::TrainConfig c = base_config(data);
    c.epochs = 3;
    c.amp = amp;
    const fs::path out = temp_dir(std::string("amp_") + amp);
    fs::create_directories(out);
    c.metrics_path = (out / "metrics.jsonl").string();
    const train::TrainSummary s = train::run_training(c);
    CHECK(s.test_acc >= 0.9);
    REQUIRE(s.epochs.size() == 3);
    CHECK(s.epochs[2].train_loss < 0.5 * s.epochs[0].train_loss);
    std::ifstream in(c.metrics_path);
    std::vector<nlohmann::json> events;
    for (std::string line; std::getline(in, line);) events.push_back(nlohmann::json::parse(line));
    REQUIRE(events.size() > 2);
    CHECK(events.front()["amp"] == amp);
    // The same weights and batch: the first loss differs from float32's by 16-bit rounding only.
    const double loss = step_losses(c.metrics_path).at(0);
    CHECK(loss != f32_loss);
    CHECK(loss == Approx(f32_loss).epsilon(1e-3));
    REQUIRE(events[1]["event"] == "step");
    // fp16 steps report the loss scale S (2^16 to start with); bf16 has no scaler.
    if (std::string(amp) == "fp16") {
      REQUIRE(events[1].contains("loss_scale"));
      CHECK(events[1]["loss_scale"].get<double>() == 65536.0);
    } else {
      CHECK_FALSE(events[1].contains("loss_scale"));
    }
  }
}

TEST_CASE("train: an --amp fp16 run stopped and resumed ends with bit-identical weights and loss scaler",
          "[train][amp]") {
  const fs::path data = make_dataset("amp_resume");
  train::TrainConfig a = base_config(data);
  a.amp = "fp16";
  a.save_dir = temp_dir("amp_resume_a").string();
  train::run_training(a);
  train::TrainConfig b = base_config(data);
  b.amp = "fp16";
  b.save_dir = temp_dir("amp_resume_b").string();
  b.max_steps = 13;  // mid-epoch
  train::run_training(b);
  train::TrainConfig b2;
  b2.resume_dir = b.save_dir;
  b2.quiet = true;
  CHECK(train::run_training(b2).steps == 20);
  const auto wa = weights_of(last_weights(a.save_dir));
  const auto wb = weights_of(last_weights(b.save_dir));
  REQUIRE(wa.size() == wb.size());
  for (size_t i = 0; i < wa.size(); ++i) {
    INFO(wa[i].first);
    CHECK(wa[i].second == wb[i].second);  // bit for bit
  }
  // The manifest names the run's --amp, and the training state carries the scaler: the count of
  // clean steps went on from 13 (a scaler made afresh on resume would have counted 7).
  const train::Manifest ma = train::open_checkpoint(a.save_dir), mb = train::open_checkpoint(b.save_dir);
  CHECK(ma.amp == "fp16");
  CHECK(mb.amp == "fp16");
  const io::TrainingState sa = io::load_training_state((fs::path(a.save_dir) / ma.state.path).string());
  const io::TrainingState sb = io::load_training_state((fs::path(b.save_dir) / mb.state.path).string());
  CHECK(sa.model_config.at("amp") == "fp16");
  for (const char* key : {"grad_scaler.scale", "grad_scaler._growth_tracker", "grad_scaler.growth_interval"}) {
    INFO(key);
    REQUIRE(sa.extra.count(key) == 1);
    REQUIRE(sb.extra.count(key) == 1);
    CHECK(io::state_get<double>(sa.extra, key) == io::state_get<double>(sb.extra, key));
  }
  // No scaled gradient of this run overflows float16 at S = 2^16: 20 clean steps, S unchanged
  // (growth needs 2000).
  CHECK(io::state_get<double>(sa.extra, "grad_scaler.scale") == 65536.0);
  CHECK(io::state_get<double>(sa.extra, "grad_scaler._growth_tracker") == 20.0);
}

TEST_CASE("train: --amp takes bf16, fp16 or off, and a resumed run keeps its own", "[train][amp]") {
  const fs::path data = make_dataset("amp_options", 64, 16);
  train::TrainConfig c = base_config(data);
  c.amp = "f16";
  CHECK_THROWS_WITH(train::check_options(c), "--amp must be bf16 or fp16 (or off, the default), got 'f16'");
  c.amp = "fp16";
  CHECK_NOTHROW(train::check_options(c));
  c.epochs = 1;
  c.max_steps = 2;
  c.clip_grad_norm = 1.0;  // unscale_, clip, step, update (GradScaler refuses unscale_ after step, or twice)
  c.save_dir = temp_dir("amp_options").string();
  train::run_training(c);
  train::TrainConfig r;
  r.resume_dir = c.save_dir;
  r.quiet = true;
  r.amp = "bf16";
  r.explicitly_set = {"amp"};
  CHECK_THROWS_WITH(train::run_training(r), "--resume: --amp bf16 conflicts with the saved run's fp16; a resumed run "
                                            "keeps its configuration (start a new run with --save to change it)");
}

TEST_CASE("train: a manifest names step-<N>/ files only, and says which name it refuses", "[train]") {
  const auto manifest = [](const std::string& weights) {
    const nlohmann::json f = {{"path", weights}, {"bytes", 10}, {"crc32", "crc32:00000000"}};
    const nlohmann::json s = {{"path", "step-00000008/state.safetensors"}, {"bytes", 10}, {"crc32", "crc32:00000000"}};
    const std::string text = nlohmann::json{{"format", "ember.checkpoint.v1"}, {"run", "r"}, {"step", 8},
                                            {"epoch", 1}, {"weights", f}, {"state", s}}
                                 .dump();
    return std::vector<uint8_t>(text.begin(), text.end());
  };
  const train::Manifest ok = train::parse_manifest(manifest("step-00000008/model.safetensors"), "d/checkpoint.json");
  CHECK(ok.weights.path == "step-00000008/model.safetensors");
  CHECK(ok.step == 8);
  const auto refused = [&](const std::string& name, const std::string& shown) {
    CHECK_THROWS_WITH(train::parse_manifest(manifest(name), "d/checkpoint.json"),
                      "d/checkpoint.json: names the weights file '" + shown +
                          "', which is not step-<N>/model.safetensors inside the checkpoint directory");
  };
  refused("../../etc/passwd", "../../etc/passwd");
  refused("model.safetensors", "model.safetensors");
  refused("step-00000008/../../model.safetensors", "step-00000008/../../model.safetensors");
  refused("notes/step-00000008/model.safetensors", "notes/step-00000008/model.safetensors");
  refused("/tmp/step-00000008/model.safetensors", "/tmp/step-00000008/model.safetensors");
  refused(std::string("step-00000008/model.safetensors\0x", 33), "step-00000008/model.safetensors\\0x");
}
