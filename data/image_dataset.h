#pragma once
// Datasets of image files of varying sizes (ImageFolder, list files, the decoded cache, subsets of
// them), and how the loader turns their samples into batches.
//
// A fixed-size dataset (MNIST, CIFAR) is stacked first and transformed as a batch (apply_batch).
// Image files are not the same size until the transform makes them so, so an ImageDataset loads
// batch samples one by one (in parallel over the batch when the loader has no workers; each
// worker runs its batch serially): read + decode, then the transform, straight into the batch
// buffer when the transform has the fused form (Note [Fused image pipeline]: Resize, CenterCrop
// or RandomResizedCrop, flip, ToTensor, Normalize in one pass per sample).
//
// Bad files (Note [Bad image files]): by default a file that cannot be decoded is an error
// naming it, rethrown by the loader; with BadImages::skip the sample is left out of its batch
// (the batch is smaller), counted, and listed by take_skipped() for the end-of-epoch report.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "dataset.h"
#include "image.h"

namespace ember::data {

enum class BadImages { error, skip };

// JPEG draft decoding (PIL's Image.draft): with `on`, when the transform starts with a Resize, a
// JPEG is decoded at the smallest DCT scale (1/2, 1/4, 1/8) that still covers the Resize's
// output, several times faster, then resized from there. The pixels then differ slightly from a
// full-size decode + Resize (torchvision's ImageFolder loader decodes at full size), so it is
// off by default; `ember train` and `ember bench loader` turn it on (docs/data.md).
enum class JpegDraft { off, on };

// What loading a batch throws, under BadImages::error, for a sample whose file cannot be read or
// decoded (Note [Bad image files]): the reader's or decoder's message, which names the file. Its
// own type, so that a caller can tell a bad file from a bug or a bad setting (ember train saves
// the work done before it: Note [A bad file mid-run] in train/trainer.cpp).
class BadImageError : public Error {
 public:
  BadImageError(std::string path, const std::string& what) : Error(what), path_(std::move(path)) {}
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A file that was left out, and why (the decoder's message, which names the file).
struct SkippedImage {
  int64_t index = 0;
  std::string path;
  std::string reason;
};

// Where loading time went, summed over every thread that loaded samples of the dataset (so with
// workers the seconds add up to more than the wall time). Counters only grow.
struct ImageLoadStats {
  int64_t decoded = 0;        // images decoded from their files
  int64_t cache_reads = 0;    // images read from a decoded cache instead
  int64_t skipped = 0;        // unreadable files left out (BadImages::skip), counted per load
  double read_seconds = 0;    // reading files (or copying out of the cache)
  double decode_seconds = 0;  // decoding (JPEG/PNG/...)
  double transform_seconds = 0;  // resize, crops, flips, normalization into the batch
};

// How the transform wants images decoded: JPEG draft mode needs the smallest acceptable size.
struct DecodeHint {
  int64_t min_height = 0, min_width = 0;  // 0: full size
};

class ImageDataset : public Dataset {
 public:
  // u8 (C, H, W) image of sample `index` with C = channels(). `hint` allows a JPEG decoded at a
  // reduced DCT scale no smaller than the hint (when the dataset allows draft decoding). Throws
  // ember::Error naming the file when it cannot be read or decoded. Thread-safe.
  virtual Tensor load_image(int64_t index, const DecodeHint& hint) const = 0;
  virtual int64_t label(int64_t index) const = 0;
  // The file behind sample `index` (for messages and `ember inspect`).
  virtual std::string path(int64_t index) const = 0;
  // 3 (RGB) or 1 (gray).
  virtual int64_t channels() const = 0;
  // The layout load_native returns: a file dataset hands the decoder's interleaved (H, W, C)
  // buffer to the fused pipeline as it is (no conversion pass); the default is load_image's.
  virtual ImageLayout native_layout() const { return ImageLayout::CHW; }
  virtual Tensor load_native(int64_t index, const DecodeHint& hint) const { return load_image(index, hint); }

  Example get(int64_t index) const override;
  // Per-sample loading (see the file comment): images (B', C, H, W) float32 or u8 as the
  // transform makes them, B' = B minus the skipped files; labels (B',). Without a transform the
  // u8 images are stacked (and must then share one size) and converted as ToTensor does.
  Batch load_transformed(std::span<const int64_t> indices, const AnyTransform& transform, uint64_t seed,
                         int64_t epoch) const override;

  BadImages bad_images() const { return shared_->bad_images; }
  void set_bad_images(BadImages policy) { shared_->bad_images = policy; }
  ImageLoadStats stats() const;
  // The files skipped since the last call (in the order they were met), then forgets them.
  std::vector<SkippedImage> take_skipped() const;

 protected:
  ImageDataset() = default;
  // Copies and views (ImageSubset) share the original's counters, skip list and policy.
  ImageDataset(const ImageDataset& other) : Dataset(other), shared_(other.shared_) {}
  ImageDataset& operator=(const ImageDataset&) = default;

  // Reads and decodes `path` for load_image, timed and counted in stats(). With JpegDraft::on a
  // non-zero hint sets decode.min_height / min_width.
  Tensor decode_file(const std::string& path, DecodeOptions decode, JpegDraft draft, const DecodeHint& hint,
                     ImageLayout layout = ImageLayout::CHW) const;
  // Counts and times one decode (for load_image implementations).
  void count_decode(double read_s, double decode_s) const;
  void count_cache_read(double read_s) const;

 private:
  struct Shared {
    BadImages bad_images = BadImages::error;
    std::atomic<int64_t> decoded{0}, cache_reads{0}, skipped{0};
    std::atomic<int64_t> read_ns{0}, decode_ns{0}, transform_ns{0};
    std::mutex mu;
    std::vector<SkippedImage> skipped_list;
  };
  void record_skip(int64_t index, const std::string& reason) const;
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
};

// Samples `indices` of another image dataset, in that order (the training and validation splits). Shares the
// parent's counters and bad-file policy; the parent must outlive it (it is held by shared_ptr).
class ImageSubset final : public ImageDataset {
 public:
  // Throws when an index is outside the parent.
  ImageSubset(std::shared_ptr<const ImageDataset> parent, std::vector<int64_t> indices);

  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Tensor load_image(int64_t index, const DecodeHint& hint) const override;
  int64_t label(int64_t index) const override;
  std::string path(int64_t index) const override;
  int64_t channels() const override { return parent_->channels(); }
  const std::vector<std::string>& classes() const override { return parent_->classes(); }
  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  int64_t at(int64_t index) const;
  std::shared_ptr<const ImageDataset> parent_;
  std::vector<int64_t> indices_;
};

// A seeded split of `n` samples with `labels` into (train, validation) index lists, both sorted.
// Stratified: each class gives round(fraction * its count) samples to validation, chosen by a
// Philox-keyed shuffle of that class (at least one per class when fraction > 0 and the class has
// two or more samples). 0 < fraction < 1.
struct SplitIndices {
  std::vector<int64_t> train, val;
};
SplitIndices stratified_split(std::span<const int64_t> labels, double fraction, uint64_t seed);

}  // namespace ember::data
