// The training step without per-step host reads (Note [Divergence guard] in train/step_guard.h):
// the guard's sums and flag against host arithmetic, a NaN loss at step k that leaves the weights
// of step k-1, the trainer's host reads per epoch bounded, and --log-every step events equal to
// those of --log-every 1. On the CPU and on a CUDA device (the SIMT emulator in the default build).

#include <catch2/catch.hpp>
#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include <ember/ember.h>
#include <ember/train/step_guard.h>
#include <ember/train/config.h>
#include <ember/train/trainer.h>

using namespace ember;
namespace fs = std::filesystem;

namespace {

std::vector<Device> devices() {
  std::vector<Device> d{Device::cpu()};
  if (cuda_built() && cuda_device_count() > 0) d.push_back(Device::cuda(0));
  return d;
}

std::vector<std::vector<float>> weights(const nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.to_vector<float>());
  return out;
}

// `steps` steps of a linear classifier with `opt_name` on fixed batches; the loss of step
// `nan_at` (1-based; 0: none) is multiplied by NaN. With a guard, it records every step and its
// flag cancels updates. Returns the weights; `host_losses` and `host_correct` get each step's.
std::vector<std::vector<float>> train_linear(Device device, const std::string& opt_name, int steps, int nan_at,
                                             train::StepGuard* guard, std::vector<double>* host_losses = nullptr,
                                             std::vector<double>* host_correct = nullptr) {
  manual_seed(5);
  nn::Linear model(6, 4);
  model.to(device);
  std::unique_ptr<optim::Optimizer> opt;
  if (opt_name == "adam")
    opt = std::make_unique<optim::Adam>(std::vector<optim::ParamGroup>{{.params = model.parameters()}},
                                        optim::AdamOptions{.lr = 0.05});
  else
    opt = std::make_unique<optim::SGD>(std::vector<optim::ParamGroup>{{.params = model.parameters()}},
                                       optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  if (guard) opt->set_skip_flag(guard->flag());
  for (int s = 1; s <= steps; ++s) {
    manual_seed(100 + s);
    const Tensor x = randn({8, 6}).to(device);
    const Tensor y = randint(0, 4, {8}).to(device);
    opt->zero_grad();
    const Tensor logits = model.forward(x);
    Tensor loss = cross_entropy(logits, y);
    if (s == nan_at) loss = mul(loss, std::nan(""));
    loss.backward();
    Tensor correct;
    {
      NoGradGuard g;
      correct = sum(eq(argmax(logits, 1), y).to(DType::f64));
    }
    if (host_losses) host_losses->push_back(loss.item());
    if (host_correct) host_correct->push_back(correct.item());
    if (guard) guard->record(loss, correct, 8);
    opt->step();
  }
  return weights(model);
}

}  // namespace

TEST_CASE("StepGuard: the sums of finite steps, and a NaN loss at step k leaves the weights of step k-1",
          "[train][guard]") {
  for (const Device device : devices()) {
    for (const std::string opt : {"sgd", "adam"}) {
      INFO(device.str() << " " << opt);
      // No divergence: the sums equal host arithmetic over every step, and the updates all ran.
      train::StepGuard clean(device);
      clean.start_epoch(10);
      std::vector<double> losses, correct;
      const auto w_clean = train_linear(device, opt, 5, 0, &clean, &losses, &correct);
      CHECK(w_clean == train_linear(device, opt, 5, 0, nullptr));
      train::StepGuard::Totals t = clean.read();
      CHECK_FALSE(t.diverged);
      CHECK(t.finite_steps == 5);
      double loss_sum = 0, correct_sum = 0;
      for (int i = 0; i < 5; ++i) {
        loss_sum += losses[i] * 8;
        correct_sum += correct[i];
      }
      CHECK(t.loss_sum == Approx(loss_sum).epsilon(1e-12));
      CHECK(t.correct == correct_sum);
      CHECK(t.last_finite_step == 15);
      CHECK(t.last_finite_loss == losses[4]);
      CHECK(t.step_loss == losses[4]);
      CHECK(t.step_correct == correct[4]);

      // NaN at step 3 of 6: the updates of steps 3..6 change nothing; the weights are those of 2 steps.
      train::StepGuard guard(device);
      guard.start_epoch(10);
      losses.clear();
      const auto w = train_linear(device, opt, 6, 3, &guard, &losses);
      CHECK(w == train_linear(device, opt, 2, 0, nullptr));
      CHECK(w != w_clean);
      t = guard.read();
      CHECK(t.diverged);
      CHECK(t.first_bad_step == 13);
      CHECK(std::isnan(t.first_bad_loss));
      CHECK(t.finite_steps == 2);
      CHECK(t.last_finite_step == 12);
      CHECK(t.last_finite_loss == losses[1]);
      CHECK(t.loss_sum == Approx((losses[0] + losses[1]) * 8).epsilon(1e-12));
      // A later epoch keeps the flag.
      guard.start_epoch(16);
      CHECK(guard.read().diverged);
    }
  }
}

TEST_CASE("StepGuard: an infinite loss counts as diverged, and bad arguments are refused", "[train][guard]") {
  train::StepGuard g(Device::cpu());
  g.start_epoch(0);
  g.record(scalar_tensor(2.0), scalar_tensor(3.0, {.dtype = DType::f64}), 4);
  g.record(scalar_tensor(INFINITY), scalar_tensor(1.0, {.dtype = DType::f64}), 4);
  g.record(scalar_tensor(1.0), scalar_tensor(1.0, {.dtype = DType::f64}), 4);  // after it: not counted
  const train::StepGuard::Totals t = g.read();
  CHECK(t.diverged);
  CHECK(t.first_bad_step == 2);
  CHECK(std::isinf(t.first_bad_loss));
  CHECK(t.loss_sum == 8.0);
  CHECK(t.correct == 3.0);
  CHECK(t.last_finite_loss == 2.0);
  CHECK_THROWS_WITH(g.record(zeros({2}), scalar_tensor(1.0), 1), Catch::Contains("the loss must be one floating element"));
  optim::SGD sgd(std::vector<optim::ParamGroup>{{.params = {zeros({2}, {.requires_grad = true})}}}, {.lr = 0.1});
  CHECK_THROWS_WITH(sgd.set_skip_flag(zeros({1}, {.dtype = DType::f64})), Catch::Contains("one contiguous float32 element"));
}

namespace {

// A tiny IDX dataset (10 classes of 28x28 noise images), written afresh.
fs::path guard_dataset(const std::string& name, int64_t n_train, int64_t n_test) {
  const fs::path dir = fs::temp_directory_path() / ("ember_guard_test_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  manual_seed(3);
  auto make = [&](int64_t n, const std::string& images, const std::string& labels) {
    data::write_idx(dir / images, randint(0, 256, {n, 28, 28}).to(DType::u8), data::IdxCompression::none);
    std::vector<uint8_t> lab(static_cast<size_t>(n));
    for (size_t i = 0; i < lab.size(); ++i) lab[i] = static_cast<uint8_t>(i % 10);
    data::write_idx(dir / labels, from_vector<uint8_t>(lab, {n}), data::IdxCompression::none);
  };
  make(n_train, "train-images-idx3-ubyte", "train-labels-idx1-ubyte");
  make(n_test, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte");
  return dir;
}

train::TrainConfig guard_config(const fs::path& data, Device device) {
  train::TrainConfig c;
  c.data = data.string();
  c.model = "simple_cnn";
  c.optimizer = "adam";
  c.lr = 1e-3;
  c.batch_size = 16;
  c.epochs = 1;
  c.scheduler = "none";
  c.augment = false;
  c.quiet = true;
  c.threads = 2;
  c.device = device.str();
  return c;
}

struct StepEvent {
  int64_t step;
  double loss, acc;
};

std::vector<StepEvent> step_events(const std::string& metrics) {
  std::ifstream in(metrics);
  std::vector<StepEvent> out;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json e = nlohmann::json::parse(line);
    if (e["event"] == "step") out.push_back({e["step"].get<int64_t>(), e["loss"].get<double>(), e["acc"].get<double>()});
  }
  return out;
}

}  // namespace

TEST_CASE("train: host reads per epoch do not grow with the steps, and --log-every events match --log-every 1",
          "[train][guard]") {
  for (const Device device : devices()) {
    INFO(device.str());
    // The same run with 8 and with 16 steps per epoch: the same number of host reads (those of the
    // end of the epoch, the weight check and the evaluation), none per step.
    std::vector<int64_t> reads;
    for (const int64_t n_train : {128, 256}) {
      train::TrainConfig c = guard_config(guard_dataset("reads" + std::to_string(n_train), n_train, 32), device);
      c.log_every = 1000;
      const int64_t before = host_read_count();
      const train::TrainSummary s = train::run_training(c);
      reads.push_back(host_read_count() - before);
      CHECK(s.steps == n_train / 16);
    }
    CHECK(reads[0] == reads[1]);

    // Step events every 3 steps report the loss and accuracy of those steps exactly.
    const fs::path data = guard_dataset("log_every", 160, 32);
    const fs::path out = fs::temp_directory_path() / ("ember_guard_test_log_every_out_" + std::to_string(::getpid()));
    fs::create_directories(out);
    std::vector<std::vector<StepEvent>> events;
    for (const int64_t every : {1, 3}) {
      train::TrainConfig c = guard_config(data, device);
      c.epochs = 2;
      c.log_every = every;
      c.metrics_path = (out / ("every" + std::to_string(every) + ".jsonl")).string();
      train::run_training(c);
      events.push_back(step_events(c.metrics_path));
    }
    REQUIRE(events[0].size() == 20);
    REQUIRE(events[1].size() == 6);
    for (const StepEvent& e : events[1]) {
      INFO("step " << e.step);
      const StepEvent& ref = events[0][static_cast<size_t>(e.step - 1)];
      CHECK(e.step % 3 == 0);
      CHECK(ref.step == e.step);
      CHECK(e.loss == ref.loss);
      CHECK(e.acc == ref.acc);
    }
  }
}
