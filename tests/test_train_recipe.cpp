// Gradient accumulation in the one training step (Note [One training step] in train/train_step.h):
// K micro-batches of a step give the weights of one batch of all their images, with the loss
// scaler and the clipping once per step, on the CPU and on a CUDA device (the SIMT emulator in the
// default build); and EarlyStopping's decisions (Note [Plateaus and early stopping]). The command
// line's side is tests/cli/train_recipe.sh.

#include <catch2/catch.hpp>
#include <cmath>

#include <ember/ember.h>
#include <ember/parallel/ddp.h>
#include <ember/train/early_stopping.h>
#include <ember/train/step_guard.h>
#include <ember/train/train_step.h>

#include "parallel/rank_threads.h"

using namespace ember;
using ember::testing::ranks::all_ok;
using ember::testing::ranks::run_ranks;

namespace {

std::vector<Device> devices() {
  std::vector<Device> d{Device::cpu()};
  if (cuda_built() && cuda_device_count() > 0) d.push_back(Device::cuda(0));
  return d;
}

struct Result {
  std::vector<std::vector<float>> weights;
  std::vector<double> losses, correct;  // each step's, read from its outputs
  double guard_loss_sum = 0, guard_correct = 0;
  int64_t guard_steps = 0;
};

// Three optimizer steps of a small MLP (no batch norm, no dropout: a micro-batch's forward pass
// is then that of its rows in the large batch) with AdamW, a loss scaler (enabled without
// autocast: it multiplies by S = 2^16 and divides back, exactly) and clipping, on fixed data of
// 21 images per step, split into micro-batches of the sizes `split` (summing to 21).
Result train_mlp(Device device, const std::vector<int64_t>& split) {
  manual_seed(5);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(12, 16), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, 5)});
  model->to(device);
  nn::CrossEntropyLoss criterion;
  optim::AdamW opt(model->parameters(), optim::AdamWOptions{.lr = 1e-2, .weight_decay = 1e-2});
  optim::GradScaler scaler(optim::GradScalerOptions{.init_scale = 65536.0});
  train::StepGuard guard(device);
  opt.set_skip_flag(guard.flag());
  const train::TrainStep step(train::TrainStep::Parts{.model = model.get(), .criterion = &criterion, .optimizer = &opt,
                                                      .scaler = &scaler, .guard = &guard, .device = device,
                                                      .clip_grad_norm = 0.5});
  Generator g(17);
  Result r;
  guard.start_epoch(0);
  for (int s = 0; s < 3; ++s) {
    const Tensor images = randn({21, 12}, {}, g).to(device);
    const Tensor labels = randint(0, 5, {21}, {.dtype = DType::i64}, g).to(device);
    std::vector<train::TrainStep::Batch> micro;
    int64_t at = 0;
    for (const int64_t n : split) {
      micro.push_back({images.slice(0, at, at + n), labels.slice(0, at, at + n)});
      at += n;
    }
    const train::TrainStep::Outputs out = step.run(micro, train::StepMode::eager, s + 1);
    CHECK(out.stepped);
    r.losses.push_back(out.loss.to(Device::cpu()).to(DType::f64).item<double>());
    r.correct.push_back(out.correct.to(Device::cpu()).item<double>());
  }
  const train::StepGuard::Totals t = guard.read();
  r.guard_loss_sum = t.loss_sum;
  r.guard_correct = t.correct;
  r.guard_steps = t.finite_steps;
  for (const Tensor& p : model->parameters()) r.weights.push_back(p.to(Device::cpu()).to_vector<float>());
  return r;
}

}  // namespace

TEST_CASE("TrainStep: K micro-batches give the weights of one batch of their images", "[train][accum]") {
  for (const Device device : devices()) {
    INFO(device.str());
    const Result whole = train_mlp(device, {21});
    // Equal micro-batches (the loss scaled by 1/K), and unequal ones (each weighted by its share).
    for (const std::vector<int64_t>& split : {std::vector<int64_t>{7, 7, 7}, std::vector<int64_t>{8, 8, 5}}) {
      const Result acc = train_mlp(device, split);
      REQUIRE(acc.weights.size() == whole.weights.size());
      double worst = 0;
      for (size_t i = 0; i < whole.weights.size(); ++i)
        for (size_t j = 0; j < whole.weights[i].size(); ++j)
          worst = std::max(worst, static_cast<double>(std::abs(acc.weights[i][j] - whole.weights[i][j])));
      // Float32 sums in another order: a few ulps of weights of order 0.1-1, far below 1e-6; a
      // missing 1/K, a second clipping or a second scaler step moves them by 1e-3 or more.
      CHECK(worst <= 1e-6);
      for (size_t s = 0; s < 3; ++s) {
        CHECK(acc.losses[s] == Approx(whole.losses[s]).epsilon(1e-6));  // the mean over the 21 images
        CHECK(acc.correct[s] == whole.correct[s]);                      // summed over the micro-batches
      }
      // The guard counts optimizer steps, with the step's images as its batch size.
      CHECK(acc.guard_steps == 3);
      CHECK(acc.guard_loss_sum == Approx(whole.guard_loss_sum).epsilon(1e-6));
      CHECK(acc.guard_correct == whole.guard_correct);
    }
    // The moved weights are not the initial ones (the comparison above compared something).
    manual_seed(5);
    nn::Linear first(12, 16);
    CHECK(first.parameters()[0].to_vector<float>() != whole.weights[0]);
  }
}

TEST_CASE("TrainStep: a step takes at least one micro-batch", "[train][accum]") {
  auto model = std::make_shared<nn::Linear>(3, 2);
  nn::CrossEntropyLoss criterion;
  optim::SGD opt(model->parameters(), optim::SGDOptions{.lr = 0.1});
  optim::GradScaler scaler(optim::GradScalerOptions{.enabled = false});
  train::StepGuard guard(Device::cpu());
  const train::TrainStep step(train::TrainStep::Parts{.model = model.get(), .criterion = &criterion, .optimizer = &opt,
                                                      .scaler = &scaler, .guard = &guard, .device = Device::cpu()});
  CHECK_THROWS_WITH(step.run(std::span<const train::TrainStep::Batch>(), train::StepMode::eager),
                    Catch::Contains("at least one micro-batch"));
}

TEST_CASE("EarlyStopping: stops after P evaluations without improvement, and its state round-trips",
          "[train][early_stop]") {
  // Lightning's rule with min_delta 0: any strict improvement resets the count; NaN never improves.
  train::EarlyStopping loss(train::EarlyStopping::Mode::min, 2);
  const double nan = std::nan("");
  const std::vector<std::pair<double, bool>> seq{{1.0, false}, {0.8, false}, {0.8, false}, {0.7, false},
                                                 {nan, false}, {0.75, true}};
  for (size_t i = 0; i < seq.size(); ++i) {
    INFO("evaluation " << i + 1);
    CHECK(loss.step(seq[i].first, static_cast<int64_t>(i) + 1) == seq[i].second);
  }
  CHECK(loss.best() == 0.7);
  CHECK(loss.best_at() == 4);
  CHECK(loss.evaluations() == 6);
  train::EarlyStopping acc(train::EarlyStopping::Mode::max, 1);
  CHECK_FALSE(acc.step(0.5, 1));
  CHECK_FALSE(acc.step(0.6, 2));
  CHECK(acc.step(0.6, 3));  // equal is no improvement
  // A copy of the state decides as the original.
  train::EarlyStopping copy(train::EarlyStopping::Mode::min, 2);
  copy.load_state_dict(loss.state_dict());
  CHECK(copy.state_dict() == loss.state_dict());
  CHECK(copy.should_stop());
  CHECK_FALSE(copy.step(0.1, 7));
  CHECK(copy.best_at() == 7);
  std::map<std::string, double> bad = loss.state_dict();
  bad.erase("bad");
  CHECK_THROWS_WITH(copy.load_state_dict(bad), Catch::Contains("'bad'"));
  CHECK_THROWS_WITH(train::EarlyStopping(train::EarlyStopping::Mode::min, 0), Catch::Contains("at least 1"));
}

TEST_CASE("TrainStep: accumulation under DDP all-reduces once per step and equals the global batch",
          "[train][accum][parallel]") {
  // Two in-process ranks, each with 12 of a step's 24 images in micro-batches of 7 and 5 (the
  // first backward inside no_sync), against one process stepping on all 24.
  constexpr int kWorld = 2, kSteps = 3;
  Generator g(23);
  std::vector<Tensor> images, labels;
  for (int s = 0; s < kSteps; ++s) {
    images.push_back(randn({24, 12}, {}, g));
    labels.push_back(randint(0, 5, {24}, {.dtype = DType::i64}, g));
  }
  const auto make_model = [] {
    manual_seed(5);
    return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(12, 16), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, 5)});
  };
  // Made on this thread: the default generator is not shared between threads.
  std::vector<std::shared_ptr<nn::Sequential>> models{make_model(), make_model(), make_model()};
  const auto train = [&](nn::Module& model, parallel::DistributedDataParallel* ddp, int rank) {
    nn::CrossEntropyLoss criterion;
    optim::AdamW opt(model.parameters(), optim::AdamWOptions{.lr = 1e-2});
    optim::GradScaler scaler(optim::GradScalerOptions{.enabled = false});
    train::StepGuard guard(Device::cpu());
    opt.set_skip_flag(guard.flag());
    const train::TrainStep step(train::TrainStep::Parts{.model = &model, .criterion = &criterion, .optimizer = &opt,
                                                        .scaler = &scaler, .guard = &guard, .ddp = ddp,
                                                        .device = Device::cpu(), .clip_grad_norm = 0.5});
    for (int s = 0; s < kSteps; ++s) {
      std::vector<train::TrainStep::Batch> micro;
      if (ddp == nullptr) {
        micro.push_back({images[s], labels[s]});
      } else {
        const int64_t at = 12 * rank;
        micro.push_back({images[s].slice(0, at, at + 7), labels[s].slice(0, at, at + 7)});
        micro.push_back({images[s].slice(0, at + 7, at + 12), labels[s].slice(0, at + 7, at + 12)});
      }
      step.run(micro, train::StepMode::eager, s + 1);
    }
  };
  train(*models[kWorld], nullptr, 0);
  REQUIRE(all_ok(run_ranks(kWorld, [&](std::shared_ptr<parallel::Communicator> c) {
    parallel::DistributedDataParallel ddp(*models[c->rank()], c);
    train(*models[c->rank()], &ddp, c->rank());
  })));
  const std::vector<Tensor> want = models[kWorld]->parameters();
  for (int r = 0; r < kWorld; ++r) {
    const std::vector<Tensor> got = models[r]->parameters();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const std::vector<float> a = got[i].to_vector<float>(), b = want[i].to_vector<float>();
      double worst = 0;
      for (size_t j = 0; j < a.size(); ++j) worst = std::max(worst, static_cast<double>(std::abs(a[j] - b[j])));
      INFO("rank " << r << ", parameter " << i);
      CHECK(worst <= 1e-6);
    }
  }
}

TEST_CASE("train: check_class_indices is cross_entropy's target check, made on the host labels", "[train]") {
  // TrainStep runs the loss under a CheckedTargetsGuard (no device check, no host read), so this
  // host check is what names a bad label: the same message as cross_entropy's own.
  CHECK_NOTHROW(train::check_class_indices(from_vector<int64_t>({0, 3, 9, 4}), 10));
  CHECK_THROWS_WITH(train::check_class_indices(from_vector<int64_t>({0, 3, 10, 4}), 10),
                    Catch::Contains("cross_entropy: target 10 (at flat position 2) is out of bounds for 10 classes"));
  CHECK_THROWS_WITH(train::check_class_indices(from_vector<int64_t>({-1, 3}), 10),
                    Catch::Contains("target -1 (at flat position 0)"));
  // ignore_index would make the guarded 'mean' divide by the wrong count: refused too.
  CHECK_THROWS_WITH(train::check_class_indices(from_vector<int64_t>({1, -100}), 10),
                    Catch::Contains("a label equals ignore_index (-100)"));
  // Class probabilities (Mixup, CutMix) are not class indices: nothing to check.
  CHECK_NOTHROW(train::check_class_indices(full({2, 10}, 0.1), 10));
  // And cross_entropy itself, outside the guard, gives the same message.
  CHECK_THROWS_WITH(cross_entropy(zeros({4, 10}), from_vector<int64_t>({0, 3, 10, 4})),
                    Catch::Contains("cross_entropy: target 10 (at flat position 2) is out of bounds for 10 classes"));
}
