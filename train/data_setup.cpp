// Opening --data (IDX, CIFAR; ImageFolder trees in train/image_data.cpp), the images'
// statistics, and the training and evaluation transforms.

#include "data_setup.h"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_set>

#include "../core/autograd.h"
#include "../core/generator.h"
#include "../data/auto_augment.h"
#include "../data/cifar.h"
#include "../data/idx.h"
#include "../data/image.h"
#include "../data/image_transforms.h"
#include "../io/safetensors.h"
#include "../layers/nn_functional.h"
#include "../layers/reduce.h"
#include "../models/zoo.h"

namespace ember::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ---- data ---------------------------------------------------------------------------------------

void channel_stats(const Tensor& images, std::vector<double>& mean, std::vector<double>& std) {
  const int64_t n = images.size(0), c = images.size(1), hw = images.size(2) * images.size(3);
  const auto* p = static_cast<const uint8_t*>(images.contiguous().data());
  mean.assign(c, 0);
  std.assign(c, 0);
  for (int64_t ch = 0; ch < c; ++ch) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* row = p + (i * c + ch) * hw;
      int64_t rs = 0, rs2 = 0;  // exact integer sums per image
      for (int64_t j = 0; j < hw; ++j) {
        rs += row[j];
        rs2 += static_cast<int64_t>(row[j]) * row[j];
      }
      s += static_cast<double>(rs);
      s2 += static_cast<double>(rs2);
    }
    const double count = static_cast<double>(n * hw);
    const double m = s / count / 255.0;
    mean[ch] = m;
    std[ch] = std::sqrt(std::max(0.0, s2 / count / (255.0 * 255.0) - m * m));
  }
}

bool is_cifar_dir(const std::string& dir) {
  return fs::exists(fs::path(dir) / "data_batch_1.bin") || fs::exists(fs::path(dir) / "train.bin");
}

namespace {
bool is_idx_dir(const std::string& dir) {
  for (const char* name : {"train-images-idx3-ubyte", "train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte",
                           "t10k-images-idx3-ubyte.gz"})
    if (fs::exists(fs::path(dir) / name)) return true;
  return false;
}
}  // namespace

bool is_image_folder_dir(const std::string& dir) {
  return fs::is_directory(dir) && !is_cifar_dir(dir) && !is_idx_dir(dir);
}

DataInfo open_data(const std::string& data, const std::string& data_dir, const ImageDataOptions& image) {
  DataInfo d;
  std::shared_ptr<const data::InMemoryImageDataset> train, test;
  if (data == "fashion-mnist") {
    d.dir = data_dir.empty() ? data::default_fashion_mnist_dir().string() : data_dir;
    train = std::make_shared<data::InMemoryImageDataset>(data::fashion_mnist(d.dir, data::Split::train));
    test = std::make_shared<data::InMemoryImageDataset>(data::fashion_mnist(d.dir, data::Split::test));
  } else {
    // mnist, or a directory: IDX files, CIFAR batches, or an ImageFolder tree
    d.dir = data == "mnist" ? data_dir : (data_dir.empty() ? data : data_dir);
    EMBER_CHECK(!d.dir.empty(), "--data mnist needs --data-dir DIR (the directory with the MNIST IDX files)");
    EMBER_CHECK(fs::is_directory(d.dir), "data directory '", d.dir, "' does not exist or is not a directory");
    if (data != "mnist" && is_cifar_dir(d.dir)) {
      const bool c10 = fs::exists(fs::path(d.dir) / "data_batch_1.bin");
      train = std::make_shared<data::InMemoryImageDataset>(c10 ? data::cifar10(d.dir, data::Split::train)
                                                               : data::cifar100(d.dir, data::Split::train));
      test = std::make_shared<data::InMemoryImageDataset>(c10 ? data::cifar10(d.dir, data::Split::test)
                                                              : data::cifar100(d.dir, data::Split::test));
    } else if (data == "mnist" || is_idx_dir(d.dir)) {
      train = std::make_shared<data::InMemoryImageDataset>(data::mnist(d.dir, data::Split::train));
      test = std::make_shared<data::InMemoryImageDataset>(data::mnist(d.dir, data::Split::test));
    } else {
      return open_image_folder(d.dir, image);
    }
  }
  EMBER_CHECK(test->channels() == train->channels() && test->height() == train->height() &&
                  test->width() == train->width(),
              "'", d.dir, "': the test images are ", test->channels(), "x", test->height(), "x", test->width(),
              " but the training images are ", train->channels(), "x", train->height(), "x", train->width(),
              "; both splits must have the same image size");
  d.train = train;
  d.test = test;
  d.classes = train->classes();
  if (d.classes.empty())  // no names in the files: the label numbers
    for (int64_t i = 0, n = static_cast<int64_t>(max(train->labels()).item()) + 1; i < n; ++i)
      d.classes.push_back(std::to_string(i));
  d.channels = train->channels();
  EMBER_CHECK(train->height() == train->width(), "images must be square, got ", train->height(), "x",
              train->width());
  d.image_size = train->height();
  d.samples = train->size();
  channel_stats(train->images(), d.mean, d.std);
  return d;
}

data::Compose image_eval_transform(int64_t resize, int64_t image_size, bool cached, const std::vector<double>& mean,
                                   const std::vector<double>& std) {
  std::vector<data::AnyTransform> t;
  if (!cached) {
    if (resize > 0) t.push_back(data::Resize(resize));
    t.push_back(data::CenterCrop(image_size));
  } else {
    t.push_back(data::CenterCrop(image_size));
  }
  t.push_back(data::ToTensor());
  t.push_back(data::Normalize(mean, std));
  return data::Compose(t);
}

data::Compose make_train_transform(const DataInfo& d, bool flip, const std::string& policy, double random_erasing) {
  std::vector<data::AnyTransform> t;
  if (d.kind == DataKind::image_folder) {
    // torchvision's ImageNet training recipe; with the cache, the crop is taken from the image
    // pre-resized to `resize` (docs/data.md).
    t.push_back(data::RandomResizedCrop(d.image_size));
    t.push_back(data::RandomHorizontalFlip(0.5));
  } else {
    t.push_back(data::RandomCrop(d.image_size, d.image_size, 2));
    if (flip) t.push_back(data::RandomHorizontalFlip(0.5));
  }
  // torchvision's classification recipe order: crop and flip, the policy on the u8 image,
  // ToTensor, Normalize, RandomErasing on the normalized tensor.
  if (policy == "trivial") t.push_back(data::TrivialAugmentWide());
  else if (policy == "randaug") t.push_back(data::RandAugment(2, 9));
  else EMBER_CHECK(policy == "light", "--augment must be light, trivial or randaug, got '", policy, "'");
  t.push_back(data::ToTensor());
  t.push_back(data::Normalize(d.mean, d.std));
  if (random_erasing > 0) t.push_back(data::RandomErasing(random_erasing));
  return data::Compose(t);
}

data::Compose make_eval_transform(const DataInfo& d) {
  if (d.kind == DataKind::image_folder) return image_eval_transform(d.resize, d.image_size, d.cached, d.mean, d.std);
  return data::Compose{data::ToTensor(), data::Normalize(d.mean, d.std)};
}

}  // namespace ember::train
