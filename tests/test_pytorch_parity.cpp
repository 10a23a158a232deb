// Training matches PyTorch: from the same initial weights, on the same batches, ember's weights
// after 5 Adam steps equal PyTorch's to a relative error under 1e-4 in float32. The reference was
// computed independently with PyTorch 1.13 by tests/data/make_pytorch_reference.py and checked in.

#include <catch2/catch.hpp>
#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include <ember/ember.h>
#include <ember/train/config.h>
#include <ember/train/trainer.h>

using namespace ember;
namespace fs = std::filesystem;

TEST_CASE("parity: 5 Adam steps from PyTorch's weights match PyTorch's result", "[train][parity]") {
  const std::string dir = EMBER_TEST_DATA_DIR;
  const fs::path out = fs::temp_directory_path() / ("ember_parity_" + std::to_string(::getpid()));
  fs::remove_all(out);
  fs::create_directories(out);
  train::TrainConfig c;
  c.data = "fashion-mnist";  // Debian's dataset-fashion-mnist, installed by scripts/install-deps.sh
  c.model = "simple_cnn";
  c.init_weights = dir + "/pytorch_adam_initial.safetensors";
  c.optimizer = "adam";
  c.lr = 1e-3;
  c.weight_decay = 0;
  c.scheduler = "none";
  c.label_smoothing = 0;
  c.batch_size = 16;
  c.epochs = 1;
  c.max_steps = 5;
  c.shuffle = false;
  c.augment = false;
  c.quiet = true;
  c.save_weights = (out / "final.safetensors").string();
  c.metrics_path = (out / "metrics.jsonl").string();
  train::run_training(c);

  // Per-step losses.
  nlohmann::json ref = nlohmann::json::parse(std::ifstream(dir + "/pytorch_adam_losses.json"));
  std::ifstream m(c.metrics_path);
  std::vector<double> losses;
  for (std::string line; std::getline(m, line);) {
    nlohmann::json e = nlohmann::json::parse(line);
    if (e["event"] == "step") losses.push_back(e["loss"].get<double>());
  }
  REQUIRE(losses.size() == 5);
  for (size_t i = 0; i < 5; ++i) CHECK(losses[i] == Approx(ref["losses"][i].get<double>()).epsilon(1e-5));

  // Final weights, per tensor: the relative error ||ember - torch|| / ||torch|| (2-norm). Adam
  // divides by sqrt(v): for weights whose gradient is near zero, last-bit differences in a
  // gradient (summation order inside GEMMs) move that single weight by a visible fraction of one
  // lr step, so the largest single-element difference is reported but not the criterion.
  io::SafetensorsFile mine = io::load_safetensors(c.save_weights);
  io::SafetensorsFile theirs = io::load_safetensors(dir + "/pytorch_adam_final.safetensors");
  io::SafetensorsFile initial = io::load_safetensors(dir + "/pytorch_adam_initial.safetensors");
  REQUIRE(theirs.tensors.size() == 4);
  for (auto& [name, t] : theirs.tensors) {
    std::vector<float> want = t.to_vector<float>(), got = mine.at(name).to_vector<float>();
    REQUIRE(want.size() == got.size());
    double diff2 = 0, ref2 = 0, max_diff = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double d = double(got[i]) - want[i];
      diff2 += d * d;
      ref2 += double(want[i]) * want[i];
      max_diff = std::max(max_diff, std::abs(d));
    }
    const double rel = std::sqrt(diff2 / ref2);
    INFO(name << ": relative error " << rel << ", largest element difference " << max_diff);
    CHECK(rel < 1e-4);
    // Training moved the weights far more than that, so the test cannot pass vacuously.
    std::vector<float> start = initial.at(name).to_vector<float>();
    double moved2 = 0;
    for (size_t i = 0; i < want.size(); ++i) moved2 += (double(start[i]) - want[i]) * (double(start[i]) - want[i]);
    CHECK(std::sqrt(moved2 / ref2) > 100 * rel);
  }
}
