#include "dataset.h"

#include <cstdlib>
#include <cstring>

#include "../core/cpu/parallel.h"
#include "transforms.h"

namespace ember::data {

namespace {

constexpr int64_t kGatherGrainBytes = 1 << 20;  // a thread chunk copies at least ~1 MiB (memcpy is fast)

std::vector<int64_t> all_labels(const Tensor& labels) { return labels.to_vector<int64_t>(); }

}  // namespace

Batch Dataset::get_batch(std::span<const int64_t> indices) const {
  EMBER_CHECK(!indices.empty(), "Dataset::get_batch: no indices");
  Tensor images;
  std::vector<int64_t> labels(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    Example e = get(indices[i]);
    if (i == 0) {
      Shape shape = e.image.shape();
      shape.insert(0, static_cast<int64_t>(indices.size()));
      images = empty(shape, {.dtype = e.image.dtype()});
    }
    EMBER_CHECK(e.image.shape() == images[0].shape() && e.image.dtype() == images.dtype(),
                "Dataset::get_batch: sample ", indices[i], " is ", describe(e.image), " but sample ", indices[0],
                " was ", describe(images[0]), "; a batch needs one shape and dtype");
    images[static_cast<int64_t>(i)].copy_(e.image);
    labels[i] = e.label;
  }
  return {images, from_vector(labels)};
}

Batch Dataset::load_transformed(std::span<const int64_t> indices, const AnyTransform& transform, uint64_t seed,
                                int64_t epoch) const {
  Batch raw = get_batch(indices);
  EMBER_CHECK(raw.images.defined() && raw.images.dim() == 4 && raw.labels.defined() && raw.labels.dim() == 1 &&
                  raw.labels.size(0) == static_cast<int64_t>(indices.size()) && raw.labels.dtype() == DType::i64,
              "Dataset: get_batch returned images ",
              raw.images.defined() ? describe(raw.images) : std::string("(undefined)"), " and labels ",
              raw.labels.defined() ? describe(raw.labels) : std::string("(undefined)"), " for ", indices.size(),
              " indices; expected (", indices.size(), ", C, H, W) and (", indices.size(), ",) int64");
  return {apply_batch(transform, raw.images, indices, seed, epoch), raw.labels};
}

const std::vector<std::string>& Dataset::classes() const {
  static const std::vector<std::string> none;
  return none;
}

TensorDataset::TensorDataset(Tensor images, Tensor labels, std::vector<std::string> classes)
    : classes_(std::move(classes)) {
  EMBER_CHECK(images.defined() && labels.defined(), "TensorDataset: images and labels must be defined");
  EMBER_CHECK(images.device().is_cpu() && labels.device().is_cpu(), "TensorDataset: images ", describe(images),
              " and labels ", describe(labels), " must be on the CPU");
  EMBER_CHECK(images.dim() >= 1, "TensorDataset: images ", describe(images), " need a sample dim");
  EMBER_CHECK(labels.dim() == 1 && (labels.dtype() == DType::i64 || labels.dtype() == DType::i32),
              "TensorDataset: labels must be (N,) int64 or int32, got ", describe(labels));
  EMBER_CHECK(labels.size(0) == images.size(0), "TensorDataset: ", images.size(0), " images but ", labels.size(0),
              " labels");
  images_ = images.detach().contiguous();
  labels_ = labels.detach().to(DType::i64).contiguous();
  if (!classes_.empty()) {
    const auto n = static_cast<int64_t>(classes_.size());
    const std::vector<int64_t> values = all_labels(labels_);
    for (size_t i = 0; i < values.size(); ++i)
      EMBER_CHECK(values[i] >= 0 && values[i] < n, "TensorDataset: label ", values[i], " of sample ", i,
                  " is outside [0, ", n, ") for ", n, " classes");
  }
}

Example TensorDataset::get(int64_t index) const {
  EMBER_CHECK(index >= 0 && index < size(), "TensorDataset::get: index ", index, " is out of range for ", size(),
              " samples");
  return {images_[index], labels_.data_ptr<int64_t>()[index]};
}

Batch TensorDataset::get_batch(std::span<const int64_t> indices) const {
  const int64_t n = size();
  for (int64_t i : indices)
    EMBER_CHECK(i >= 0 && i < n, "TensorDataset::get_batch: index ", i, " is out of range for ", n, " samples");
  const auto b = static_cast<int64_t>(indices.size());
  Shape shape = images_.shape();
  shape[0] = b;
  Tensor images = empty(shape, {.dtype = images_.dtype()});
  Tensor labels = empty({b}, {.dtype = DType::i64});
  const int64_t row_bytes = images_.nbytes() / std::max<int64_t>(n, 1);
  const auto* src = static_cast<const unsigned char*>(images_.data());
  auto* dst = static_cast<unsigned char*>(images.data());
  const int64_t* src_labels = labels_.data_ptr<int64_t>();
  int64_t* dst_labels = labels.data_ptr<int64_t>();
  parallel_for(0, b, std::max<int64_t>(1, kGatherGrainBytes / std::max<int64_t>(row_bytes, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t i = lo; i < hi; ++i) {
                   std::memcpy(dst + i * row_bytes, src + indices[static_cast<size_t>(i)] * row_bytes,
                               static_cast<size_t>(row_bytes));
                   dst_labels[i] = src_labels[indices[static_cast<size_t>(i)]];
                 }
               });
  return {images, labels};
}

namespace {

Tensor as_nchw_u8(Tensor images) {
  EMBER_CHECK(images.defined() && images.dtype() == DType::u8 && (images.dim() == 3 || images.dim() == 4),
              "InMemoryImageDataset: images must be (N, C, H, W) or (N, H, W) uint8, got ",
              images.defined() ? describe(images) : std::string("an undefined tensor"));
  return images.dim() == 3 ? images.unsqueeze(1) : images;
}

}  // namespace

InMemoryImageDataset::InMemoryImageDataset(Tensor images, Tensor labels, std::vector<std::string> classes)
    : TensorDataset(as_nchw_u8(std::move(images)), std::move(labels), std::move(classes)) {}

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

std::filesystem::path default_fashion_mnist_dir() {
  // EMBER_FASHION_MNIST_DIR points elsewhere (e.g. the Debian package unpacked into a prefix on a
  // machine where it cannot be installed).
  const char* env = std::getenv("EMBER_FASHION_MNIST_DIR");
  if (env != nullptr && env[0] != '\0') return env;
  return "/usr/share/datasets/fashion-mnist";
}

InMemoryImageDataset fashion_mnist(const std::filesystem::path& dir, Split split) {
  MnistData d = load_mnist(dir, split);
  return InMemoryImageDataset(d.images, d.labels, fashion_mnist_classes());
}

InMemoryImageDataset mnist(const std::filesystem::path& dir, Split split) {
  MnistData d = load_mnist(dir, split);
  std::vector<std::string> digits;
  for (int i = 0; i < 10; ++i) digits.push_back(std::to_string(i));
  return InMemoryImageDataset(d.images, d.labels, std::move(digits));
}

}  // namespace ember::data
