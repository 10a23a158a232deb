// The decoded cache (format in Note [Decoded cache file], image_cache.h).

#include "image_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>
#include <atomic>

#include "../io/atomic_file.h"
#include "../core/cpu/parallel.h"
#include "image_transforms.h"

namespace ember::data {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr char kMagic[9] = "EMBERIC1";
constexpr int kVersion = 1;
constexpr size_t kFooterBytes = 32;
constexpr int64_t kAlign = 64;
constexpr int64_t kBuildChunk = 64;  // samples decoded in parallel before they are written out

struct FileStamp {
  int64_t size = -1, mtime_ns = -1;
};

FileStamp stamp(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {static_cast<int64_t>(st.st_size), static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

uint64_t read_u64(const uint8_t* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, 8);  // the file is written little-endian on the little-endian machines ember runs on
  return v;
}

}  // namespace

CachedImages::CachedImages(std::shared_ptr<const ImageDataset> source, ImageCacheOptions options)
    : source_(std::move(source)), options_(std::move(options)) {
  EMBER_CHECK(source_ != nullptr, "CachedImages: no source dataset");
  EMBER_CHECK(options_.resize >= 0 && options_.crop >= 0, "CachedImages: resize ", options_.resize, " and crop ",
              options_.crop, " must be >= 0");
  EMBER_CHECK(!options_.dir.empty(), "CachedImages: no cache directory");
  set_bad_images(source_->bad_images());
  transform_ = options_.resize > 0 ? "Resize(" + std::to_string(options_.resize) + ")" : "Decode()";
  if (options_.crop > 0) transform_ += "+CenterCrop(" + std::to_string(options_.crop) + ")";
  transform_ += source_->channels() == 1 ? "+Gray" : "+RGB";
  std::error_code ec;
  fs::create_directories(options_.dir, ec);
  EMBER_CHECK(fs::is_directory(options_.dir), "CachedImages: cannot create cache directory '", options_.dir.string(),
              "': ", ec.message());
  uint64_t h = fnv1a(transform_);
  h = fnv1a(std::to_string(source_->size()), h);
  for (int64_t i = 0; i < source_->size(); ++i) h = fnv1a(source_->path(i) + "\n", h);
  char name[40];
  std::snprintf(name, sizeof name, "images-%016llx.cache", static_cast<unsigned long long>(h));
  file_ = options_.dir / name;
  reason_ = try_open();
  if (reason_.empty()) return;
  build();
  how_ = CacheOpen::built;
  const std::string again = try_open();
  EMBER_CHECK(again.empty(), file_.string(), ": the cache just written does not read back: ", again);
}

CachedImages::~CachedImages() { unmap(); }

void CachedImages::unmap() {
  if (map_ != nullptr) ::munmap(const_cast<uint8_t*>(map_), map_size_);
  map_ = nullptr;
  map_size_ = 0;
}

std::string CachedImages::try_open() {
  unmap();
  entries_.clear();
  const std::string path = file_.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "no cache file";
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return "cannot stat the cache file";
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (size < 8 + kFooterBytes) {
    ::close(fd);
    return "truncated (" + std::to_string(size) + " bytes)";
  }
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) return std::string("cannot map the cache file: ") + std::strerror(errno);
  map_ = static_cast<const uint8_t*>(m);
  map_size_ = size;
  const uint8_t* footer = map_ + size - kFooterBytes;
  if (std::memcmp(map_, kMagic, 8) != 0) return "not an ember image cache (bad magic) or another version";
  if (std::memcmp(footer, kMagic, 8) != 0 || std::memcmp(footer + 24, kMagic, 8) != 0)
    return "truncated or damaged (no footer; " + std::to_string(size) + " bytes)";
  const uint64_t json_at = read_u64(footer + 8), json_size = read_u64(footer + 16);
  if (json_at < 8 || json_at > size - kFooterBytes || json_size != size - kFooterBytes - json_at)
    return "damaged footer";
  json header;
  try {
    header = json::parse(map_ + json_at, map_ + json_at + json_size);
    if (header.at("version").get<int>() != kVersion) return "format version changed";
    if (header.at("transform").get<std::string>() != transform_)
      return "transform changed (cached " + header.at("transform").get<std::string>() + ", now " + transform_ + ")";
    if (header.at("channels").get<int64_t>() != source_->channels()) return "channels changed";
    const json& files = header.at("files");
    const json& entries = header.at("entries");
    const int64_t n = source_->size();
    if (static_cast<int64_t>(files.size()) != n || static_cast<int64_t>(entries.size()) != n)
      return "the sample list changed";
    entries_.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const json& f = files[static_cast<size_t>(i)];
      const std::string p = source_->path(i);
      if (f.at(0).get<std::string>() != p) return "the sample list changed at " + p;
      const FileStamp now = stamp(p);
      if (f.at(1).get<int64_t>() != now.size || f.at(2).get<int64_t>() != now.mtime_ns) return "source changed: " + p;
      const json& e = entries[static_cast<size_t>(i)];
      Entry& out = entries_[static_cast<size_t>(i)];
      out.offset = e.at(0).get<int64_t>();
      if (out.offset < 0) {
        out.error = e.at(1).get<std::string>();
        continue;
      }
      out.height = e.at(1).get<int64_t>();
      out.width = e.at(2).get<int64_t>();
      const int64_t bytes = source_->channels() * out.height * out.width;
      if (out.height <= 0 || out.width <= 0 || out.offset < 8 || out.offset + bytes > static_cast<int64_t>(json_at))
        return "damaged entry " + std::to_string(i);
    }
  } catch (const json::exception& e) {
    entries_.clear();
    return std::string("damaged header (") + e.what() + ")";
  }
  return "";
}

// Decomposition: chunks of kBuildChunk samples decoded and resized in parallel (one sample per
// task), then appended in sample order, so memory holds one chunk, not the dataset.
void CachedImages::build() {
  unmap();
  const int64_t n = source_->size(), c = source_->channels();
  const DecodeHint hint = options_.resize > 0 ? DecodeHint{options_.resize, options_.resize} : DecodeHint{};
  json files = json::array(), entries = json::array();
  // Stamps first: a file modified during the build then invalidates the cache on the next open.
  for (int64_t i = 0; i < n; ++i) {
    const std::string p = source_->path(i);
    const FileStamp s = stamp(p);
    files.push_back(json::array({p, s.size, s.mtime_ns}));
  }
  io::write_file_atomic(file_.string(), [&](io::FileWriter& w) {
    w.write(std::string_view(kMagic, 8));
    std::vector<Tensor> images(static_cast<size_t>(kBuildChunk));
    std::vector<std::string> errors(static_cast<size_t>(kBuildChunk));
    static const char zeros[kAlign] = {};
    for (int64_t lo = 0; lo < n; lo += kBuildChunk) {
      const int64_t hi = std::min(n, lo + kBuildChunk);
      auto work = [&](int64_t a, int64_t b) {
        for (int64_t i = a; i < b; ++i) {
          const auto k = static_cast<size_t>(i - lo);
          images[k] = Tensor();
          errors[k].clear();
          try {
            Tensor img = source_->load_image(i, hint);
            if (options_.resize > 0) {
              const auto [h, wd] = resize_output_size(img.size(1), img.size(2), options_.resize);
              img = resize_bilinear(img, h, wd);
            }
            if (options_.crop > 0) img = center_crop(img, options_.crop, options_.crop);
            images[k] = img.contiguous();
          } catch (const std::exception& e) {
            errors[k] = e.what();
            if (errors[k].empty()) errors[k] = "unknown error";
          }
        }
      };
      if (options_.threads > 0) {
        SerialThreadScope serial;  // explicit thread count: run the chunk in that many std::threads
        std::vector<std::thread> pool;
        std::atomic<int64_t> next{lo};
        for (int t = 0; t < options_.threads; ++t)
          pool.emplace_back([&] {
            SerialThreadScope inner;
            for (int64_t i = next++; i < hi; i = next++) work(i, i + 1);
          });
        for (std::thread& t : pool) t.join();
      } else {
        parallel_for(lo, hi, 1, work);
      }
      for (int64_t i = lo; i < hi; ++i) {
        const auto k = static_cast<size_t>(i - lo);
        if (!errors[k].empty()) {
          entries.push_back(json::array({-1, errors[k]}));
          continue;
        }
        const Tensor& img = images[k];
        const auto pad = static_cast<size_t>((kAlign - static_cast<int64_t>(w.bytes_written() % kAlign)) % kAlign);
        w.write(zeros, pad);
        entries.push_back(json::array({static_cast<int64_t>(w.bytes_written()), img.size(1), img.size(2)}));
        EMBER_CHECK(img.size(0) == c, path(i), ": decoded to ", img.size(0), " channels, expected ", c);
        w.write(img.data(), static_cast<size_t>(img.numel()));
        images[k] = Tensor();
      }
    }
    const json header{{"version", kVersion}, {"transform", transform_}, {"channels", c}, {"files", files},
                      {"entries", entries}};
    const std::string text = header.dump();
    const uint64_t json_at = w.bytes_written(), json_size = text.size();
    w.write(text);
    w.write(std::string_view(kMagic, 8));
    w.write(&json_at, 8);
    w.write(&json_size, 8);
    w.write(std::string_view(kMagic, 8));
  });
}

Tensor CachedImages::load_image(int64_t index, const DecodeHint&) const {
  EMBER_CHECK(index >= 0 && index < size(), "CachedImages: index ", index, " is out of range for ", size(), " samples");
  const Entry& e = entries_[static_cast<size_t>(index)];
  if (e.offset < 0) EMBER_THROW(e.error);
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t c = channels();
  Tensor out = empty({c, e.height, e.width}, {.dtype = DType::u8});
  std::memcpy(out.data(), map_ + e.offset, static_cast<size_t>(c * e.height * e.width));
  count_cache_read(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return out;
}

}  // namespace ember::data
