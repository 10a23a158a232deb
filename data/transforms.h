#pragma once
// Image transforms, torchvision-style: ToTensor, Normalize, RandomCrop, RandomHorizontalFlip,
// Compose, and apply_batch, which runs a transform over a batch with per-sample streams.
//
// Images are CPU tensors (C, H, W), u8 before ToTensor and float32 after it. Random transforms
// draw from the SampleRng they are given (core/sample_rng.h) and nothing else, so a sample's
// augmentation depends only on (seed, epoch, dataset index): not on batch composition, thread
// or worker count. Within one sample, transforms draw in pipeline order: RandomCrop draws the
// top offset then the left offset (two words each), RandomHorizontalFlip one word, always
// (even when p is 0 or 1), so the stream position after a transform never depends on the image.
//
//   auto tf = data::Compose{data::RandomCrop(28, 4), data::RandomHorizontalFlip(),
//                           data::ToTensor(), data::Normalize({0.2860}, {0.3530})};

#include <concepts>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../core/tensor.h"
#include "../core/sample_rng.h"

namespace ember::data {

class Transform {
 public:
  virtual ~Transform() = default;
  // image: (C, H, W) on the CPU, any layout. Returns the transformed image: a new tensor, or
  // `image` itself when nothing changes; never writes into `image`. Throws ember::Error naming
  // the transform on a wrong rank, dtype or size.
  virtual Tensor apply(const Tensor& image, SampleRng& rng) const = 0;
  // Whether apply() draws from its stream.
  virtual bool is_random() const = 0;
  // "RandomCrop(size=(28, 28), padding=4)", for messages.
  virtual std::string name() const = 0;

  Tensor operator()(const Tensor& image, SampleRng& rng) const { return apply(image, rng); }
  // For deterministic transforms only (throws for a random one: pass it a SampleRng).
  Tensor operator()(const Tensor& image) const;
};

// A shared, immutable handle to any transform. It converts implicitly from a transform value,
// so options and Compose read `.transform = data::Compose{...}` with no make_shared.
class AnyTransform {
 public:
  AnyTransform() = default;
  template <typename T>
    requires std::derived_from<std::remove_cvref_t<T>, Transform>
  AnyTransform(T&& t)  // NOLINT(google-explicit-constructor): the implicit conversion is the point
      : ptr_(std::make_shared<const std::remove_cvref_t<T>>(std::forward<T>(t))) {}
  AnyTransform(std::shared_ptr<const Transform> ptr) : ptr_(std::move(ptr)) {}  // NOLINT

  explicit operator bool() const { return ptr_ != nullptr; }
  const Transform& operator*() const { return *ptr_; }
  const Transform* operator->() const { return ptr_.get(); }
  const Transform* get() const { return ptr_.get(); }

 private:
  std::shared_ptr<const Transform> ptr_;
};

// u8 -> float32 in [0, 1] (v / 255). Float32 input passes through unchanged, so applying it
// twice is harmless. Takes any rank (a batch (N, C, H, W) too); HWC layouts are not handled
// (IDX and CIFAR data are already CHW).
class ToTensor final : public Transform {
 public:
  Tensor apply(const Tensor& image, SampleRng& rng) const override;
  bool is_random() const override { return false; }
  std::string name() const override { return "ToTensor()"; }
};

// Per channel: (x - mean[c]) / std[c], in float32 (the same operations as torchvision, so
// values match PyTorch bit for bit). Input: float32 (C, H, W) or (N, C, H, W). A single mean and
// std apply to every channel; otherwise their length must equal C.
class Normalize final : public Transform {
 public:
  // Throws when the lengths differ, are empty, or a std is not positive and finite.
  Normalize(std::vector<double> mean, std::vector<double> std);
  Tensor apply(const Tensor& image, SampleRng& rng) const override;
  bool is_random() const override { return false; }
  std::string name() const override;

  const std::vector<float>& mean() const { return mean_; }
  const std::vector<float>& std() const { return std_; }

 private:
  std::vector<float> mean_, std_;
};

// Pads every side with `padding` zeros (in the image's dtype: black for u8, 0.0 for float), then
// cuts a (height, width) window at a random position: top uniform in [0, H + 2p - height], then
// left uniform in [0, W + 2p - width]. Any dtype. Throws when the window exceeds the padded image.
class RandomCrop final : public Transform {
 public:
  explicit RandomCrop(int64_t size, int64_t padding = 0) : RandomCrop(size, size, padding) {}
  RandomCrop(int64_t height, int64_t width, int64_t padding);
  Tensor apply(const Tensor& image, SampleRng& rng) const override;
  bool is_random() const override { return true; }
  std::string name() const override;

  int64_t height() const { return height_; }
  int64_t width() const { return width_; }
  int64_t padding() const { return padding_; }

 private:
  int64_t height_, width_, padding_;
};

// Mirrors the image left-right with probability p (one uniform draw u; flips when u < p). Any dtype.
class RandomHorizontalFlip final : public Transform {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  Tensor apply(const Tensor& image, SampleRng& rng) const override;
  bool is_random() const override { return true; }
  std::string name() const override;

  double p() const { return p_; }

 private:
  double p_;
};

// Applies transforms in order, all drawing from the one stream of the sample.
class Compose final : public Transform {
 public:
  Compose(std::initializer_list<AnyTransform> transforms) : Compose(std::vector<AnyTransform>(transforms)) {}
  explicit Compose(std::vector<AnyTransform> transforms);  // throws on an empty handle
  Tensor apply(const Tensor& image, SampleRng& rng) const override;
  bool is_random() const override;
  std::string name() const override;

  const std::vector<AnyTransform>& transforms() const { return transforms_; }

 private:
  std::vector<AnyTransform> transforms_;
};

// Applies `transform` to every sample of `batch` (N, C, H, W) on the CPU: row n gets the stream
// sample_rng(seed, epoch, sample_indices[n]), so the result equals applying the transform one
// sample at a time, whatever the batch's composition or thread count. An empty `transform`
// means ToTensor for u8 batches and nothing otherwise. Returns (N, C', H', W'), contiguous.
//
// A chain of the form [RandomCrop] [RandomHorizontalFlip] ToTensor [Normalize] on a u8 batch
// (the MNIST/CIFAR recipe) runs fused: one pass per sample from u8 to the normalized float32
// output through a 256-entry table per channel, bit-identical to the step-by-step result.
// Anything else runs the transforms per sample. Both paths spread samples over threads.
Tensor apply_batch(const AnyTransform& transform, const Tensor& batch, std::span<const int64_t> sample_indices,
                   uint64_t seed, int64_t epoch);

namespace detail {
// The transforms that `transform` applies, in order, with every Compose (nested ones too) opened
// into its parts: the chain that the fused paths match (fused_plan, and plan_image_pipeline in
// image_pipeline.h). The pointers point into `transform`.
std::vector<const Transform*> flatten(const Transform& transform);

// A transform of the form [RandomCrop] [RandomHorizontalFlip] ToTensor [Normalize], the one
// apply_batch runs fused on u8 batches (an empty transform is ToTensor alone). The pointers
// point into `transform`.
struct FusedPlan {
  const RandomCrop* crop = nullptr;
  const RandomHorizontalFlip* flip = nullptr;
  const Normalize* normalize = nullptr;
};
std::optional<FusedPlan> fused_plan(const AnyTransform& transform);

// ToTensor then Normalize (when not null) of each u8 value, per channel: lut[c * 256 + v], with
// exactly the float operations of the two transforms (so table lookups are bit-identical to them).
// A single mean/std applies to every channel; otherwise the caller checked mean().size() == channels.
std::vector<float> to_tensor_lut(const Normalize* normalize, int64_t channels);
}  // namespace detail

}  // namespace ember::data
