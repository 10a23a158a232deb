#pragma once
// A decoded cache: the images of another image dataset decoded and resized once into one u8 file,
// memory-mapped by later epochs and later runs (the seed tutorial's "cache preprocessed data").
//
//   auto folder = std::make_shared<data::ImageFolder>("photos/train");
//   data::CachedImages cached(folder, {.dir = "cache", .resize = 256});   // builds or reuses
//   data::DataLoader loader(cached, {.batch_size = 32, .transform = data::Compose{
//       data::CenterCrop(224), data::ToTensor(), data::Normalize(...)}});
//
// Note [Decoded cache file]
// One file per (source samples, cached transform): DIR/images-<16 hex digits>.cache, the digits a
// hash of the cached transform and the sample list. Layout:
//   "EMBERIC1"                           8-byte magic; the 1 is the format version
//   pixel data                           every image u8 (C, h, w), 64-byte aligned, in sample order
//   JSON header                          {"version":1, "transform":"Resize(256)", "channels":3,
//                                         "files":[[path, size, mtime_ns], ...],
//                                         "entries":[[offset, h, w] | [-1, "why it failed"], ...]}
//   footer (32 bytes)                    "EMBERIC1", u64 JSON offset, u64 JSON size, "EMBERIC1"
// Opening checks, in order: magic, footer, file size (a truncated file has no valid footer), the
// JSON, the version, the transform, the sample list, and every source file's size and mtime
// (nanoseconds) against a fresh stat. Any mismatch rebuilds the file and rebuild_reason() says
// why ("source changed: <path>", "truncated", "transform changed", ...). The file is written
// with io::write_file_atomic, so a crash mid-build leaves the old cache or none, never half of
// one. A file that failed to decode is recorded as such (not retried on every epoch) and raises,
// at load time, the decoder's original message under the dataset's BadImages policy.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "image_dataset.h"

namespace ember::data {

struct ImageCacheOptions {
  std::filesystem::path dir;  // created if missing
  int64_t resize = 0;         // Resize(resize) (shorter side) before caching; 0: the decoded size
  int64_t crop = 0;           // then CenterCrop(crop); 0: no crop
  int threads = 0;            // decode threads while building; 0: get_num_threads()
};

enum class CacheOpen { loaded, built };

class CachedImages final : public ImageDataset {
 public:
  // Opens the cache of `source` in options.dir, building it first when it is missing or stale
  // (Note [Decoded cache file]). Throws ember::Error when the directory or file cannot be
  // written or mapped.
  CachedImages(std::shared_ptr<const ImageDataset> source, ImageCacheOptions options);
  ~CachedImages() override;
  CachedImages(const CachedImages&) = delete;
  CachedImages& operator=(const CachedImages&) = delete;

  int64_t size() const override { return source_->size(); }
  // A copy of the cached u8 (C, h, w) image (the hint is ignored: the cache has one size).
  Tensor load_image(int64_t index, const DecodeHint& hint) const override;
  int64_t label(int64_t index) const override { return source_->label(index); }
  std::string path(int64_t index) const override { return source_->path(index); }
  int64_t channels() const override { return source_->channels(); }
  const std::vector<std::string>& classes() const override { return source_->classes(); }

  CacheOpen how_opened() const { return how_; }
  // Why the cache was (re)built: "no cache file", "source changed: <path>", "truncated ...".
  const std::string& rebuild_reason() const { return reason_; }
  const std::filesystem::path& file() const { return file_; }
  // "Resize(256)+CenterCrop(224)": what the cached images went through after decoding.
  const std::string& transform_name() const { return transform_; }

 private:
  struct Entry {
    int64_t offset = -1, height = 0, width = 0;
    std::string error;  // set when the file failed to decode
  };
  // Maps file_ and validates it; returns "" when usable, else why not.
  std::string try_open();
  void build();
  void unmap();

  std::shared_ptr<const ImageDataset> source_;
  ImageCacheOptions options_;
  std::string transform_;
  std::filesystem::path file_;
  CacheOpen how_ = CacheOpen::loaded;
  std::string reason_;
  std::vector<Entry> entries_;
  const uint8_t* map_ = nullptr;
  size_t map_size_ = 0;
};

}  // namespace ember::data
