// 03_imagefolder: the seed tutorial's program (the design document's "The API it should feel like") with
// ember's real API: a folder of class subdirectories of images -> Resize/CenterCrop/ToTensor/
// Normalize -> a shuffled DataLoader with worker threads -> SimpleCNN -> CrossEntropyLoss -> Adam,
// on the best device there is (a GPU when ember was built with CUDA and one is present, else the CPU).
//
//   ./build/examples/03_imagefolder PHOTOS_DIR [--epochs 10] [--image-size 224]
//   ./build/examples/03_imagefolder --quick   # writes a small PNG + JPEG tree, trains a few steps (ctest)
//
// PHOTOS_DIR/<class>/<image>: any of JPEG, PNG, BMP, PPM/PGM, TIFF, WebP, in any subfolders.
// Prints the loss per epoch and PASS when it went down (and, with --quick, when the model learned
// the generated classes: training accuracy above 90%).

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include <ember/ember.h>

using namespace ember;

// Writes the --quick tree (make_tree.cpp): 3 classes of coloured, noisy pictures.
void make_demo_tree(const std::filesystem::path& root, int per_class);

struct SimpleCNN : nn::Module {
  nn::Conv2d conv1;
  nn::MaxPool2d pool{2};
  nn::Linear fc;
  // The tutorial's 224x224 input gives 32 * 112 * 112 features after the pool.
  SimpleCNN(int64_t image_size, int64_t classes)
      : conv1(3, 32, 3, {.padding = 1}), fc(32 * (image_size / 2) * (image_size / 2), classes) {
    register_module("conv1", conv1);
    register_module("fc", fc);
  }
  Tensor forward(const Tensor& x) override { return fc(pool(relu(conv1(x))).flatten(1)); }
};

int main(int argc, char** argv) {
  std::string root;
  int epochs = 10;
  int64_t size = 224;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--epochs" && i + 1 < argc) epochs = std::atoi(argv[++i]);
    else if (a == "--image-size" && i + 1 < argc) size = std::atoll(argv[++i]);
    else root = a;
  }
  try {
    if (quick) {
      root = (std::filesystem::temp_directory_path() / "ember_example_03_tree").string();
      make_demo_tree(root, 24);
      epochs = 4;
      size = 32;
    }
    EMBER_CHECK(!root.empty(), "usage: 03_imagefolder PHOTOS_DIR [--epochs N] [--image-size N] | --quick");
    manual_seed(1);
    Device device = Device::best();  // a GPU if there is one, else the CPU
    auto tf = data::Compose{data::Resize(size * 256 / 224), data::CenterCrop(size), data::ToTensor(),
                            data::Normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225})};
    data::ImageFolder train(root);
    data::DataLoader loader(train, {.batch_size = 32, .shuffle = true, .seed = 1, .transform = tf, .num_workers = 2});
    const auto classes = static_cast<int64_t>(train.classes().size());
    std::printf("%s: %lld images, %lld classes, on %s\n", root.c_str(), static_cast<long long>(train.size()),
                static_cast<long long>(classes), device.str().c_str());

    SimpleCNN model(size, classes);
    model.to(device);
    nn::CrossEntropyLoss criterion;
    optim::Adam optimizer(model.parameters(), {.lr = 1e-3});
    double first = 0, last = 0;
    int64_t correct = 0, seen = 0;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      double sum = 0;
      int64_t batches = 0;
      correct = seen = 0;
      for (auto& [images, labels] : loader) {
        optimizer.zero_grad();
        Tensor logits = model.forward(images.to(device));
        Tensor loss = criterion(logits, labels.to(device));
        loss.backward();
        optimizer.step();
        sum += loss.item();
        ++batches;
        NoGradGuard g;
        correct += static_cast<int64_t>(ember::sum(eq(argmax(logits, 1), labels.to(device)).to(DType::f32)).item());
        seen += labels.numel();
      }
      last = sum / static_cast<double>(batches);
      if (epoch == 0) first = last;
      std::printf("epoch %d: loss %.4f, train accuracy %.1f%%\n", epoch + 1, last,
                  100.0 * static_cast<double>(correct) / static_cast<double>(seen));
    }
    const double acc = static_cast<double>(correct) / static_cast<double>(seen);
    const bool ok = last < first && (!quick || acc > 0.9);
    std::printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "03_imagefolder: error: %s\nFAIL\n", e.what());
    return 1;
  }
}
