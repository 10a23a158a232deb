// cuda::Graph (core/cuda/graph.h): a whole training step — forward, loss, backward, optimizer —
// captured once and replayed gives the same bits as the eager steps, with float16 loss scaling
// (overflows skipped on the device) and gradient clipping too; the private memory pool; ops that
// cannot be captured say so by name. Runs on a GPU and on the SIMT emulator.

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/core/cuda/graph.h>
#include <ember/train/graph_step.h>
#include <ember/train/step_guard.h>
#include <ember/train/train_step.h>

using namespace ember;

namespace {

// A small CNN with every kind of layer the trainer's models use on a CUDA device: convolution and
// pooling (cuDNN), batch norm (running statistics updated in place), ReLU, a linear layer (cuBLAS).
std::shared_ptr<nn::Sequential> small_cnn(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 4, 3, nn::Conv2dOptions{.padding = 1}), std::make_shared<nn::BatchNorm2d>(4),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(4 * 4 * 4, 10)});
}

struct Batch {
  Tensor images, labels;  // on the CPU
};

std::vector<Batch> batches(int count, int64_t n) {
  manual_seed(77);
  std::vector<Batch> out;
  for (int i = 0; i < count; ++i) out.push_back({randn({n, 1, 8, 8}), randint(0, 10, {n})});
  return out;
}

std::vector<std::vector<float>> weights(nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.to_vector<float>());
  for (const auto& [name, b] : m.named_buffers())
    if (b.dtype() == DType::f32) out.push_back(b.to_vector<float>());
  return out;
}

// One training step on whatever is in `x`, `y`; returns the loss tensor (on the device).
Tensor train_step(nn::Module& model, optim::Optimizer& opt, const Tensor& x, const Tensor& y) {
  opt.zero_grad();
  Tensor loss = cross_entropy(model.forward(x), y);
  loss.backward();
  opt.step();
  return loss;
}

// Trains `steps` steps eagerly, and again with the step captured after one eager step, and checks
// that the losses of every step and the final weights are the same bits. `schedule` changes the
// lr before each step (a host value the captured kernels must still see).
void check_replay_matches_eager(const std::function<std::unique_ptr<optim::Optimizer>(nn::Module&)>& make_opt,
                                bool schedule) {
  const Device d = Device::cuda(0);
  const int steps = 5;
  const std::vector<Batch> data = batches(steps, 6);
  auto lr_at = [](int step) { return 0.01 / (1 + step); };

  auto eager_model = small_cnn(3);
  eager_model->to(d);
  auto eager_opt = make_opt(*eager_model);
  std::vector<double> eager_losses;
  for (int s = 0; s < steps; ++s) {
    if (schedule) eager_opt->set_lr(0, lr_at(s));
    eager_losses.push_back(train_step(*eager_model, *eager_opt, data[s].images.to(d), data[s].labels.to(d)).item());
  }

  auto model = small_cnn(3);
  model->to(d);
  auto opt = make_opt(*model);
  std::vector<double> losses;
  // Step 0 eagerly: it creates the optimizer's state (and fills cuDNN's algorithm cache).
  if (schedule) opt->set_lr(0, lr_at(0));
  losses.push_back(train_step(*model, *opt, data[0].images.to(d), data[0].labels.to(d)).item());
  // The static inputs, and the captured step.
  Tensor x = data[1].images.to(d), y = data[1].labels.to(d);
  cuda::Graph graph;
  Tensor loss;
  graph.capture([&] { loss = train_step(*model, *opt, x, y); });
  REQUIRE(graph.captured());
  CHECK(graph.node_count() > 20);
  for (int s = 1; s < steps; ++s) {
    x.copy_(data[s].images.to(d));
    y.copy_(data[s].labels.to(d));
    if (schedule) opt->set_lr(0, lr_at(s));
    graph.replay();
    losses.push_back(loss.item());
  }
  CHECK(losses == eager_losses);
  CHECK(weights(*model) == weights(*eager_model));
  // The optimizer's host state advanced once per replayed step, as it does eagerly.
  CHECK(opt->state_dict().scalars == eager_opt->state_dict().scalars);
}

}  // namespace

TEST_CASE("cuda graph: replayed Adam training steps equal eager steps bit for bit", "[cuda][graphs]") {
  SECTION("Adam, constant lr") {
    check_replay_matches_eager(
        [](nn::Module& m) { return std::make_unique<optim::Adam>(m.parameters(), optim::AdamOptions{.lr = 1e-2}); },
        false);
  }
  SECTION("AdamW with a learning rate that changes every step") {
    check_replay_matches_eager(
        [](nn::Module& m) {
          return std::make_unique<optim::AdamW>(m.parameters(), optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.1});
        },
        true);
  }
}

TEST_CASE("cuda graph: replayed SGD steps with momentum equal eager steps bit for bit", "[cuda][graphs]") {
  check_replay_matches_eager(
      [](nn::Module& m) {
        return std::make_unique<optim::SGD>(m.parameters(),
                                            optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3});
      },
      true);
}

namespace {

// One float16 mixed-precision step with loss scaling (ember train --amp fp16): the forward pass
// under autocast, the scaled backward, optionally the gradients unscaled and clipped on the
// device, the scaler's step (skipped when the scaled gradients overflowed) and update.
Tensor scaled_step(nn::Module& model, optim::Optimizer& opt, optim::GradScaler& scaler, const Tensor& x,
                   const Tensor& y, double clip) {
  opt.zero_grad();
  Tensor loss;
  {
    AutocastGuard amp(DeviceType::CUDA, DType::f16);
    loss = cross_entropy(model.forward(x), y);
  }
  scaler.scale(loss).backward();
  if (clip > 0) {
    scaler.unscale_(opt);
    optim::clip_grad_norm_on_device_(model.parameters(), clip);
  }
  scaler.step(opt);
  scaler.update();
  return loss;
}

// Everything a run leaves: the losses and scales of every step, the weights and buffers, the
// optimizer's state (tensors by bits, scalars such as Adam's step counts) and the scaler's.
struct ScaledRun {
  std::vector<double> losses, scales;
  std::vector<std::vector<float>> weights;
  std::map<std::string, double> scalars;
  std::vector<std::vector<float>> state;
  int64_t growth_tracker = 0;
};

void finish(ScaledRun& run, nn::Module& model, const optim::Optimizer& opt, const optim::GradScaler& scaler) {
  run.weights = weights(model);
  const optim::OptimizerState st = opt.state_dict();
  run.scalars = st.scalars;
  for (const auto& [name, t] : st.tensors) run.state.push_back(t.to_vector<float>());
  run.growth_tracker = scaler.growth_tracker();
}

// The scaler grows S after every clean step, so that it overflows again and again: steps skipped
// by the overflow check come eagerly and in replays alike.
optim::GradScalerOptions overflowing_scaler() { return {.init_scale = 16384.0, .growth_interval = 1}; }

// Trains `steps` loss-scaled steps eagerly, and again with the step captured after one eager
// step and replayed, then one more eager step on both (the epoch's last, partial batch), and
// checks every number of ScaledRun bit for bit.
void check_scaled_replay_matches_eager(const std::function<std::unique_ptr<optim::Optimizer>(nn::Module&)>& make_opt,
                                       double clip) {
  const Device d = Device::cuda(0);
  const int steps = 9;
  const std::vector<Batch> data = batches(steps + 1, 6);
  ScaledRun eager, graphed;
  auto eager_model = small_cnn(5);
  eager_model->to(d);
  auto eager_opt = make_opt(*eager_model);
  optim::GradScaler eager_scaler(overflowing_scaler());
  for (int s = 0; s <= steps; ++s) {
    const Tensor loss = scaled_step(*eager_model, *eager_opt, eager_scaler, data[s].images.to(d),
                                    data[s].labels.to(d), clip);
    eager.losses.push_back(loss.item());
    eager.scales.push_back(eager_scaler.get_scale());
  }
  finish(eager, *eager_model, *eager_opt, eager_scaler);

  auto model = small_cnn(5);
  model->to(d);
  auto opt = make_opt(*model);
  optim::GradScaler scaler(overflowing_scaler());
  // Step 0 eagerly: the optimizer's state and the scaler's S exist before the capture.
  graphed.losses.push_back(scaled_step(*model, *opt, scaler, data[0].images.to(d), data[0].labels.to(d), clip).item());
  graphed.scales.push_back(scaler.get_scale());
  Tensor x = data[1].images.to(d), y = data[1].labels.to(d);
  cuda::Graph graph;
  Tensor loss;
  graph.capture([&] { loss = scaled_step(*model, *opt, scaler, x, y, clip); });
  REQUIRE(graph.captured());
  for (int s = 1; s < steps; ++s) {
    x.copy_(data[s].images.to(d));
    y.copy_(data[s].labels.to(d));
    graph.replay();
    graphed.losses.push_back(loss.item());
    graphed.scales.push_back(scaler.get_scale());
  }
  // An eager step after the replays continues from the true step counts.
  graphed.losses.push_back(
      scaled_step(*model, *opt, scaler, data[steps].images.to(d), data[steps].labels.to(d), clip).item());
  graphed.scales.push_back(scaler.get_scale());
  finish(graphed, *model, *opt, scaler);

  // Overflows happened among the replayed steps: S fell (halved) at least twice after step 1.
  int backoffs = 0;
  for (int s = 1; s < steps; ++s) backoffs += eager.scales[s] < eager.scales[s - 1];
  CHECK(backoffs >= 2);
  CHECK(graphed.losses == eager.losses);
  CHECK(graphed.scales == eager.scales);
  CHECK(graphed.growth_tracker == eager.growth_tracker);
  CHECK(graphed.weights == eager.weights);
  CHECK(graphed.state == eager.state);
  CHECK(graphed.scalars == eager.scalars);
}

}  // namespace

TEST_CASE("cuda graph: replayed fp16 steps with loss scaling equal eager steps, overflows skipped on the device",
          "[cuda][graphs][amp]") {
  SECTION("Adam: a skipped step leaves the step count as it was") {
    check_scaled_replay_matches_eager(
        [](nn::Module& m) { return std::make_unique<optim::Adam>(m.parameters(), optim::AdamOptions{.lr = 1e-2}); },
        0.0);
  }
  SECTION("AdamW, the gradients unscaled and clipped on the device") {
    check_scaled_replay_matches_eager(
        [](nn::Module& m) {
          return std::make_unique<optim::AdamW>(m.parameters(), optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.1});
        },
        0.5);
  }
  SECTION("SGD with momentum, clipped") {
    check_scaled_replay_matches_eager(
        [](nn::Module& m) {
          return std::make_unique<optim::SGD>(m.parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
        },
        0.5);
  }
}

TEST_CASE("cuda graph: clip_grad_norm_on_device_ replays equal clip_grad_norm_ bit for bit", "[cuda][graphs][optim]") {
  const Device d = Device::cuda(0);
  manual_seed(9);
  // A float32 gradient large enough for several blocks of the norm, one in channels-last, and a
  // parameter without a gradient.
  Tensor a = zeros({5000}, {.device = d}).requires_grad_();
  Tensor b = zeros({2, 3, 4, 5}, {.device = d}).contiguous(MemoryFormat::channels_last).requires_grad_();
  Tensor none = zeros({3}, {.device = d}).requires_grad_();
  const std::vector<Tensor> params{a, b, none};
  Tensor ga = empty({5000}, {.device = d}), gb = empty({2, 3, 4, 5}, {.device = d}, MemoryFormat::channels_last);
  a.set_grad(ga);
  b.set_grad(gb);
  Tensor total;
  cuda::Graph graph;
  graph.capture([&] { total = optim::clip_grad_norm_on_device_(params, 1.0); });
  REQUIRE(graph.captured());
  for (double spread : {0.001, 3.0, 50.0}) {  // below max_norm (coefficient 1), above it, far above
    INFO("spread " << spread);
    const Tensor va = randn({5000}) * spread, vb = randn({2, 3, 4, 5}) * spread;
    ga.copy_(va.to(d));
    gb.copy_(vb.to(d));
    graph.replay();
    // The eager reference on copies of the same gradients.
    Tensor ra = zeros({5000}, {.device = d}).requires_grad_();
    Tensor rb = zeros({2, 3, 4, 5}, {.device = d}).contiguous(MemoryFormat::channels_last).requires_grad_();
    ra.set_grad(va.to(d));
    rb.set_grad(vb.to(d).contiguous(MemoryFormat::channels_last));
    const double want = optim::clip_grad_norm_({ra, rb}, 1.0);
    CHECK(total.item() == want);
    CHECK(ga.to_vector<float>() == ra.grad().to_vector<float>());
    CHECK(gb.to_vector<float>() == rb.grad().to_vector<float>());
    CHECK((spread < 0.01) == (ga.to_vector<float>() == va.to_vector<float>()));  // unchanged below max_norm
  }
  CHECK_FALSE(none.grad().defined());
  // No gradient at all: an undefined norm, and nothing to do.
  CHECK_FALSE(optim::clip_grad_norm_on_device_({none}, 1.0).defined());
}

TEST_CASE("cuda graph: loss scaling outside a capture, or before its state exists, is refused", "[cuda][graphs][amp]") {
  const Device d = Device::cuda(0);
  auto model = small_cnn(1);
  model->to(d);
  optim::Adam opt(model->parameters());
  // step_unless_found_inf is for captured steps: eagerly the flag is read (GradScaler::step).
  CHECK_THROWS_WITH(opt.step_unless_found_inf(zeros({1}, {.device = d})), Catch::Contains("captured in a CUDA graph"));
  // The scaler's S made inside a capture would be reset by every replay.
  optim::GradScaler scaler;
  const std::vector<Batch> data = batches(1, 2);
  Tensor x = data[0].images.to(d), y = data[0].labels.to(d);
  (void)train_step(*model, opt, x, y);  // the optimizer's state exists; S does not
  cuda::Graph graph;
  CHECK_THROWS_WITH(graph.capture([&] { (void)scaled_step(*model, opt, scaler, x, y, 0.0); }),
                    Catch::Contains("scale a loss eagerly before capturing"));
  CHECK_FALSE(cuda::is_capturing());
}

namespace {

std::vector<Tensor> parameters_on(nn::Module& model, Device d) {
  model.to(d);
  return model.parameters();
}

// ember train's step (train::TrainStep) with fp16 autocast, loss scaling and clipping, its objects
// owned here.
struct TrainerStep {
  std::shared_ptr<nn::Sequential> model = small_cnn(7);
  nn::CrossEntropyLoss criterion;
  optim::Adam opt;
  optim::GradScaler scaler;
  train::StepGuard guard;
  train::TrainStep step;
  // S starts above what the first steps' float16 gradients can hold: they overflow and are skipped.
  explicit TrainerStep(Device d)
      : opt(parameters_on(*model, d), {.lr = 1e-2}),
        scaler({.init_scale = 1048576.0, .growth_interval = 2}),
        guard(d),
        step({.model = model.get(), .criterion = &criterion, .optimizer = &opt, .scaler = &scaler, .guard = &guard,
              .amp = DType::f16, .device = d, .clip_grad_norm = 1.0}) {
    opt.set_skip_flag(guard.flag());
  }
};

}  // namespace

TEST_CASE("cuda graph: TrainStep eagerly and through GraphedStep gives the same run, the warm-up waiting for an update",
          "[cuda][graphs][amp]") {
  const Device d = Device::cuda(0);
  std::vector<Batch> data = batches(12, 6);
  data.push_back(batches(1, 4)[0]);  // the epoch's last, partial batch: eager after the replays
  TrainerStep eager(d), graphed(d);
  std::vector<double> eager_scales, graphed_scales;
  std::vector<bool> stepped;
  for (size_t s = 0; s < data.size(); ++s) {
    const auto out = eager.step.run(data[s].images.to(d), data[s].labels.to(d), train::StepMode::eager,
                                    static_cast<int64_t>(s) + 1);
    stepped.push_back(out.stepped);
    eager_scales.push_back(eager.scaler.get_scale());
  }
  train::GraphedStep graph_step(d, 10, graphed.step);
  int64_t captured_at = -1;
  for (size_t s = 0; s < data.size(); ++s) {
    const Tensor& x = data[s].images;
    const Tensor& y = data[s].labels;
    if (graph_step.replays(x, y)) {
      if (captured_at < 0) captured_at = static_cast<int64_t>(s);
      graph_step.run(x, y);
    } else {
      const auto out = graphed.step.run(x.to(d), y.to(d), train::StepMode::eager, static_cast<int64_t>(s) + 1);
      if (out.stepped && x.size(0) == 6) graph_step.eager_step_done(x, y);
    }
    graphed_scales.push_back(graphed.scaler.get_scale());
  }
  // The first steps overflowed; the batch after the first one that updated was captured.
  REQUIRE_FALSE(stepped[0]);
  const auto first_update = std::find(stepped.begin(), stepped.end(), true) - stepped.begin();
  CHECK(captured_at == first_update + 1);
  CHECK(graph_step.node_count() > 20);
  CHECK(graphed_scales == eager_scales);
  CHECK(weights(*graphed.model) == weights(*eager.model));
  const optim::OptimizerState a = graphed.opt.state_dict(), b = eager.opt.state_dict();
  CHECK(a.scalars == b.scalars);
  for (size_t i = 0; i < a.tensors.size(); ++i) CHECK(a.tensors[i].second.to_vector<float>() == b.tensors[i].second.to_vector<float>());
  const train::StepGuard::Totals ga = graphed.guard.read(), gb = eager.guard.read();
  CHECK(ga.loss_sum == gb.loss_sum);
  CHECK(ga.correct == gb.correct);
}

TEST_CASE("cuda graph: memory of the capture stays with the graph", "[cuda][graphs]") {
  const Device d = Device::cuda(0);
  Tensor x = full({1000}, 2.0f, {.device = d});
  std::set<const void*> captured;
  Tensor out;
  int64_t private_before = 0;
  {
    cuda::Graph graph;
    graph.capture([&] {
      Tensor t = x * 3.0;  // freed inside the capture: its memory is the graph's
      captured.insert(t.data());
      out = t + 1.0;
      captured.insert(out.data());
    });
    // Eager tensors of the same sizes never get the graph's memory, even after `t` was freed.
    std::vector<Tensor> eager;
    for (int i = 0; i < 8; ++i) {
      eager.push_back(empty({1000}, {.device = d}));
      CHECK(captured.count(eager.back().data()) == 0);
    }
    cuda::empty_cache(0);  // keeps the graph's segment
    CHECK(cuda::memory_stats(0).reserved_bytes > 0);
    // Nothing ran at capture; each replay computes into the same memory.
    graph.replay();
    CHECK(out.to_vector<float>() == std::vector<float>(1000, 7.0f));
    x.fill_(1.0);
    graph.replay();
    CHECK(out.to_vector<float>() == std::vector<float>(1000, 4.0f));
    private_before = cuda::memory_stats(0).reserved_bytes;
  }
  // The graph is gone: its pool is ordinary cache again, and `out` (still alive) is intact.
  CHECK(out.to_vector<float>() == std::vector<float>(1000, 4.0f));
  out = Tensor();
  cuda::empty_cache(0);
  CHECK(cuda::memory_stats(0).reserved_bytes < private_before);
}

TEST_CASE("cuda graph: a capture that allocates while freed memory waits for another stream", "[cuda][graphs]") {
  // A block freed after record_stream waits for an event on the other stream; every allocation
  // polls those events (cudaEventQuery), which CUDA refuses to a thread whose global-mode capture
  // runs, unless the thread relaxes its mode (Note [Stream capture in the emulator]).
  const Device d = Device::cuda(0);
  cuda::StreamHandle side(0);
  {
    Tensor used = full({4096}, 1.0f, {.device = d});
    cuda::record_stream(used.data(), 0, side.get());
  }
  Tensor x = full({16}, 2.0f, {.device = d});
  Tensor out;
  cuda::Graph graph;
  graph.capture([&] { out = x * 3.0; });
  REQUIRE(graph.captured());
  graph.replay();
  CHECK(out.to_vector<float>() == std::vector<float>(16, 6.0f));
}

TEST_CASE("cuda graph: ops that wait for the device say so by name", "[cuda][graphs]") {
  const Device d = Device::cuda(0);
  Tensor x = full({16}, 1.5f, {.device = d});
  auto fails_naming = [&](const std::function<void()>& fn, const std::string& name) {
    cuda::Graph graph;
    INFO(name);
    CHECK_THROWS_WITH(graph.capture(fn), Catch::Contains(name) && Catch::Contains("CUDA graph"));
    CHECK_FALSE(graph.captured());
    CHECK_FALSE(cuda::is_capturing());
  };
  fails_naming([&] { (void)(x * 2.0).sum().item(); }, "Tensor::item");
  fails_naming([&] { (void)(x + 1.0).to(Device::cpu()); }, "between the CPU and a CUDA device");
  fails_naming([&] { (void)x.to_vector<float>(); }, "Tensor::to_vector");
  fails_naming([&] {
    Tensor w = x.clone().requires_grad_();
    (w * w).sum().backward();
    optim::clip_grad_norm_({w}, 1.0);
  }, "clip_grad_norm_");
  fails_naming([&] { (void)dropout(x, 0.5, true); }, "dropout");
  fails_naming([&] { (void)one_hot(full({4}, int64_t{1}, {.dtype = DType::i64, .device = d}), 3); }, "one_hot");
  // A call ember does not check itself fails in CUDA, with the hint.
  fails_naming([&] { cuda::synchronize(); }, "cudaDeviceSynchronize");
  // The device works normally afterwards.
  CHECK((x * 2.0).sum().item() == 48.0);
}

TEST_CASE("cuda graph: an optimizer step without state cannot be captured", "[cuda][graphs]") {
  const Device d = Device::cuda(0);
  auto model = small_cnn(1);
  model->to(d);
  optim::Adam opt(model->parameters());
  const std::vector<Batch> data = batches(1, 2);
  Tensor x = data[0].images.to(d), y = data[0].labels.to(d);
  cuda::Graph graph;
  CHECK_THROWS_WITH(graph.capture([&] { (void)train_step(*model, opt, x, y); }),
                    Catch::Contains("run one step eagerly before capturing"));
  CHECK_FALSE(cuda::is_capturing());
}

