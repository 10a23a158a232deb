#pragma once
// Datasets: the interface a DataLoader reads from, and the in-memory, tensor-backed datasets
// (MNIST, Fashion-MNIST; later CIFAR-10).

#include <algorithm>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "../core/error.h"
#include "../core/tensor.h"
#include "idx.h"

namespace ember::data {

class AnyTransform;  // transforms.h

// One sample.
struct Example {
  Tensor image;       // (C, H, W) on the CPU; any dtype (u8 for the image datasets)
  int64_t label = 0;  // class index
};

// A batch. Exactly two members, so `for (auto& [images, labels] : loader)` binds them.
struct Batch {
  Tensor images;  // (N, C, H, W)
  Tensor labels;  // (N,) int64
};

// The interface a DataLoader reads from. get() and get_batch() are const and must be safe to
// call from several threads at once: the threaded loader (data/loader.h) calls them from its
// workers. Randomness does not belong here: transforms get per-sample streams from the loader
// (core/sample_rng.h), so a dataset returns the same thing for the same index every time.
class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual int64_t size() const = 0;
  // Sample `index`, 0 <= index < size(); throws ember::Error outside that range.
  virtual Example get(int64_t index) const = 0;
  // The samples at `indices` stacked: images (B, C, H, W) in the samples' dtype, labels (B,)
  // int64. The default calls get() for each and copies the images into one tensor (they must
  // share shape and dtype); tensor-backed datasets override it with one gather.
  virtual Batch get_batch(std::span<const int64_t> indices) const;
  // The samples at `indices`, each transformed with its own stream sample_rng(seed, epoch, index)
  // (core/sample_rng.h): what the DataLoader calls for every batch. The default is
  // apply_batch(transform, get_batch(indices).images, ...); datasets of images of varying size
  // (ImageDataset) load and transform sample by sample, and may leave unreadable files out.
  virtual Batch load_transformed(std::span<const int64_t> indices, const AnyTransform& transform, uint64_t seed,
                                 int64_t epoch) const;
  // Class names by label; empty when the dataset has none.
  virtual const std::vector<std::string>& classes() const;
};

// The first `count` samples of another dataset (count clamped to its size).
class PrefixDataset : public Dataset {
 public:
  PrefixDataset(std::shared_ptr<const Dataset> base, int64_t count)
      : base_(std::move(base)), count_(std::min(count, base_->size())) {}
  int64_t size() const override { return count_; }
  Example get(int64_t index) const override {
    EMBER_CHECK(index >= 0 && index < count_, "PrefixDataset: index ", index, " out of range [0, ", count_, ")");
    return base_->get(index);
  }
  Batch get_batch(std::span<const int64_t> indices) const override {
    for (int64_t i : indices)
      EMBER_CHECK(i >= 0 && i < count_, "PrefixDataset: index ", i, " out of range [0, ", count_, ")");
    return base_->get_batch(indices);
  }
  // Forwarded, so a prefix of an image dataset keeps its per-sample loading (data/image_dataset.h).
  Batch load_transformed(std::span<const int64_t> indices, const AnyTransform& transform, uint64_t seed,
                         int64_t epoch) const override {
    for (int64_t i : indices)
      EMBER_CHECK(i >= 0 && i < count_, "PrefixDataset: index ", i, " out of range [0, ", count_, ")");
    return base_->load_transformed(indices, transform, seed, epoch);
  }
  const std::vector<std::string>& classes() const override { return base_->classes(); }

 private:
  std::shared_ptr<const Dataset> base_;
  int64_t count_;
};

// A dataset over two tensors: sample i is (images[i], labels[i]).
class TensorDataset : public Dataset {
 public:
  // images: (N, ...) CPU, any dtype (made contiguous); labels: (N,) int64 or int32 (stored as
  // int64). When `classes` is given, every label must lie in [0, classes.size()).
  TensorDataset(Tensor images, Tensor labels, std::vector<std::string> classes = {});

  int64_t size() const override { return images_.size(0); }
  // The image is a view into the dataset's tensor (no copy): read it, don't write it.
  Example get(int64_t index) const override;
  // One gather: rows copied in parallel.
  Batch get_batch(std::span<const int64_t> indices) const override;
  const std::vector<std::string>& classes() const override { return classes_; }

  const Tensor& images() const { return images_; }
  const Tensor& labels() const { return labels_; }

 private:
  Tensor images_;
  Tensor labels_;
  std::vector<std::string> classes_;
};

// A TensorDataset of u8 images (N, C, H, W) that fit in memory: MNIST, Fashion-MNIST, CIFAR-10.
class InMemoryImageDataset : public TensorDataset {
 public:
  // images: (N, C, H, W) or (N, H, W) u8 (the latter viewed as one channel); labels: (N,).
  InMemoryImageDataset(Tensor images, Tensor labels, std::vector<std::string> classes = {});

  int64_t channels() const { return images().size(1); }
  int64_t height() const { return images().size(2); }
  int64_t width() const { return images().size(3); }
};

// Fashion-MNIST's class names by label: T-shirt/top, Trouser, Pullover, Dress, Coat, Sandal,
// Shirt, Sneaker, Bag, Ankle boot.
const std::vector<std::string>& fashion_mnist_classes();
// Where Debian's dataset-fashion-mnist package installs the files (`ember train`'s default).
// Where `ember train` looks for Fashion-MNIST: $EMBER_FASHION_MNIST_DIR, else the Debian package's
// /usr/share/datasets/fashion-mnist.
std::filesystem::path default_fashion_mnist_dir();

// Fashion-MNIST from `dir` (load_mnist's file names): (N, 1, 28, 28) u8 images and the class names.
InMemoryImageDataset fashion_mnist(const std::filesystem::path& dir, Split split);
// MNIST digits from `dir`: as fashion_mnist, classes "0" to "9".
InMemoryImageDataset mnist(const std::filesystem::path& dir, Split split);

}  // namespace ember::data
