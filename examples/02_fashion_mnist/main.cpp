// 02_fashion_mnist: the classic PyTorch training loop, written out with ember's library API —
// dataset, transforms, DataLoader, a CNN module, CrossEntropyLoss, Adam — on Fashion-MNIST
// (Debian's dataset-fashion-mnist package; `ember train` is the same loop with checkpoints,
// schedules and metrics around it).
//
//   ./build/examples/02_fashion_mnist            # 1 epoch, then the test accuracy (about 15 s)
//   ./build/examples/02_fashion_mnist --quick    # 150 steps and 2,000 test images (ctest)
//
// Prints PASS and exits 0 when the loss went down and the test accuracy is above 75% (quick) or
// 85% (full); otherwise FAIL and exit 1.

#include <cstdio>
#include <cstring>

#include <ember/ember.h>

using namespace ember;

struct CNN : nn::Module {
  nn::Conv2d conv1{1, 32, 3, {.padding = 1}};
  nn::Conv2d conv2{32, 64, 3, {.padding = 1}};
  nn::MaxPool2d pool{2};
  nn::Linear fc1{64 * 7 * 7, 128};
  nn::Linear fc2{128, 10};
  CNN() {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = pool(relu(conv1(x)));
    h = pool(relu(conv2(h)));
    return fc2(relu(fc1(h.flatten(1))));
  }
};

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  try {
    manual_seed(1);
    const auto dir = data::default_fashion_mnist_dir();
    auto tf = data::Compose{data::ToTensor(), data::Normalize({0.2860}, {0.3530})};
    data::DataLoader train(data::fashion_mnist(dir, data::Split::train),
                           {.batch_size = 64, .shuffle = true, .seed = 1, .transform = tf});
    data::DataLoader test(data::fashion_mnist(dir, data::Split::test), {.batch_size = 500, .transform = tf});

    CNN model;
    nn::CrossEntropyLoss criterion;
    optim::Adam optimizer(model.parameters(), {.lr = 1e-3});

    const int64_t max_steps = quick ? 150 : train.size();
    double first_loss = 0, last_loss = 0;
    int64_t step = 0;
    for (auto& [images, labels] : train) {
      optimizer.zero_grad();
      Tensor loss = criterion(model(images), labels);
      loss.backward();
      optimizer.step();
      const double l = loss.item();
      if (step == 0) first_loss = l;
      last_loss = 0.9 * (step == 0 ? l : last_loss) + 0.1 * l;  // smoothed
      if (++step % 50 == 0) std::printf("step %4lld  loss %.4f\n", static_cast<long long>(step), last_loss);
      if (step == max_steps) break;
    }

    model.eval();
    NoGradGuard no_grad;
    int64_t correct = 0, seen = 0;
    const int64_t test_batches = quick ? 4 : test.size();
    for (int64_t b = 0; b < test_batches; ++b) {
      data::Batch batch = test.load_batch(0, b);
      correct += static_cast<int64_t>(sum(eq(argmax(model(batch.images), 1), batch.labels).to(DType::f32)).item());
      seen += batch.labels.numel();
    }
    const double acc = static_cast<double>(correct) / static_cast<double>(seen);
    std::printf("test accuracy %.2f%% on %lld images (loss %.3f -> %.3f)\n", 100 * acc, static_cast<long long>(seen),
                first_loss, last_loss);
    const bool ok = last_loss < 0.5 * first_loss && acc > (quick ? 0.75 : 0.85);
    std::printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "02_fashion_mnist: error: %s\nFAIL\n", e.what());
    return 1;
  }
}
