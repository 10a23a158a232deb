// `ember inspect` and `ember bench loader` (data_commands.h).

#include "data_commands.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include <ember/data/image_cache.h>
#include <ember/data/image_folder.h>
#include <ember/data/image_transforms.h>
#include <ember/data/loader.h>
#include <ember/core/cpu/parallel.h>
#include <ember/train/terminal_text.h>

namespace ember::app {

namespace fs = std::filesystem;

namespace {

int64_t median(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

void run_inspect(const InspectOptions& o) {
  const data::ImageFolder ds(o.path, {.skip_hidden = o.skip_hidden});
  if (o.json) {
    // Key order as promised: classes, class_to_idx, samples (ordered_json keeps insertion order).
    nlohmann::ordered_json j;
    j["classes"] = ds.classes();
    nlohmann::ordered_json map = nlohmann::ordered_json::object();
    for (const std::string& c : ds.classes()) map[c] = ds.class_to_idx().at(c);
    j["class_to_idx"] = map;
    nlohmann::ordered_json samples = nlohmann::ordered_json::array();
    for (const data::ImageSample& s : ds.samples()) samples.push_back({s.path.string(), s.label});
    j["samples"] = samples;
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  // Every file decoded (in parallel): a header can read fine over truncated data.
  const int64_t n = ds.size();
  std::vector<int64_t> widths(static_cast<size_t>(n), -1), heights(static_cast<size_t>(n), -1);
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::string> formats(static_cast<size_t>(n));
  parallel_for(0, n, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const auto k = static_cast<size_t>(i);
      const std::string path = ds.path(i);
      try {
        const data::ImageInfo info = data::probe_image(path);
        formats[k] = data::image_format_name(info.format);
        ds.load_image(i, {});
        widths[k] = info.width;
        heights[k] = info.height;
      } catch (const std::exception& e) {
        errors[k] = e.what();
      }
    }
  });
  std::vector<int64_t> counts(ds.classes().size(), 0);
  for (const data::ImageSample& s : ds.samples()) ++counts[static_cast<size_t>(s.label)];
  std::printf("%s: %lld images in %zu classes\n", train::printable(o.path).c_str(), static_cast<long long>(n), ds.classes().size());
  std::printf("classes (label, name, images):\n");
  for (size_t c = 0; c < counts.size(); ++c)
    std::printf("  %4zu  %-24s %8lld\n", c, train::printable(ds.classes()[c]).c_str(), static_cast<long long>(counts[c]));
  std::vector<int64_t> ws, hs;
  std::map<std::string, int64_t> by_format;
  for (size_t k = 0; k < widths.size(); ++k) {
    if (widths[k] < 0) continue;
    ws.push_back(widths[k]);
    hs.push_back(heights[k]);
    ++by_format[formats[k]];
  }
  if (!ws.empty()) {
    std::printf("image size (%zu readable):  width min %lld, median %lld, max %lld;  height min %lld, median %lld, max %lld\n",
                ws.size(), static_cast<long long>(*std::min_element(ws.begin(), ws.end())),
                static_cast<long long>(median(ws)), static_cast<long long>(*std::max_element(ws.begin(), ws.end())),
                static_cast<long long>(*std::min_element(hs.begin(), hs.end())), static_cast<long long>(median(hs)),
                static_cast<long long>(*std::max_element(hs.begin(), hs.end())));
    std::printf("formats:");
    for (const auto& [f, count] : by_format) std::printf(" %s %lld", f.c_str(), static_cast<long long>(count));
    std::printf("\n");
  }
  const auto bad = static_cast<size_t>(std::count_if(errors.begin(), errors.end(), [](const std::string& e) { return !e.empty(); }));
  std::printf("unreadable files: %zu\n", bad);
  for (const std::string& e : errors)
    if (!e.empty()) std::printf("  %s\n", train::printable(e).c_str());
}

void run_bench_loader(const BenchLoaderOptions& o) {
  EMBER_CHECK(o.batch_size >= 1 && o.workers >= 0 && o.epochs >= 1 && o.resize >= 1 && o.crop >= 1,
              "bench loader: --batch-size, --epochs, --resize and --crop must be positive and --workers >= 0");
  if (o.threads > 0) set_num_threads(o.threads);
  const data::Normalize normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225});
  auto folder = std::make_shared<const data::ImageFolder>(
      o.root, data::ImageFolderOptions{.jpeg_draft = o.draft ? data::JpegDraft::on : data::JpegDraft::off});
  std::shared_ptr<const data::ImageDataset> ds = folder;
  data::AnyTransform tf = data::Compose{data::Resize(o.resize), data::CenterCrop(o.crop), data::ToTensor(), normalize};
  double cache_seconds = 0;
  std::string cache_how;
  if (o.cache) {
    const auto t0 = std::chrono::steady_clock::now();
    auto cached = std::make_shared<const data::CachedImages>(
        folder, data::ImageCacheOptions{.dir = o.cache_dir, .resize = o.resize, .crop = o.crop});
    cache_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    cache_how = cached->how_opened() == data::CacheOpen::built ? "built" : "loaded";
    ds = cached;
    tf = data::Compose{data::CenterCrop(o.crop), data::ToTensor(), normalize};
  }
  data::DataLoader loader(ds, {.batch_size = o.batch_size, .shuffle = true, .seed = 1, .transform = tf,
                               .num_workers = o.workers});
  int64_t images = 0;
  double checksum = 0;
  std::vector<double> per_epoch;
  const auto t_start = std::chrono::steady_clock::now();
  for (int e = 0; e < o.epochs; ++e) {
    const auto t0 = std::chrono::steady_clock::now();
    int64_t epoch_images = 0;
    for (auto& [x, y] : loader) {
      epoch_images += x.size(0);
      checksum += static_cast<double>(x.data_ptr<float>()[0]);  // touch the batch
    }
    images += epoch_images;
    per_epoch.push_back(static_cast<double>(epoch_images) /
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  const data::ImageLoadStats folder_stats = folder->stats(), stats = ds->stats();
  nlohmann::ordered_json j;
  j["bench"] = "loader";
  j["root"] = o.root;
  j["images"] = images;
  j["epochs"] = o.epochs;
  j["batch_size"] = o.batch_size;
  j["workers"] = o.workers;
  j["threads"] = get_num_threads();
  j["resize"] = o.resize;
  j["crop"] = o.crop;
  j["jpeg_draft"] = o.draft;
  j["cache"] = o.cache ? cache_how : "off";
  j["cache_seconds"] = cache_seconds;
  j["seconds"] = seconds;
  j["images_per_sec"] = static_cast<double>(images) / seconds;
  j["images_per_sec_by_epoch"] = per_epoch;
  j["stall_seconds"] = loader.stats().wait_seconds;  // the consumer waited this long for batches
  j["stall_fraction"] = loader.stats().wait_seconds / seconds;
  // Summed over the threads that loaded (so they can exceed `seconds` with workers).
  j["read_seconds"] = folder_stats.read_seconds + (o.cache ? stats.read_seconds : 0.0);
  j["decode_seconds"] = folder_stats.decode_seconds;
  j["transform_seconds"] = stats.transform_seconds;
  j["decoded"] = folder_stats.decoded;
  j["cache_reads"] = stats.cache_reads;
  j["decode_ms_per_image"] = folder_stats.decoded ? 1e3 * folder_stats.decode_seconds / static_cast<double>(folder_stats.decoded) : 0.0;
  j["checksum"] = checksum;
  std::printf("%s\n", j.dump().c_str());
}

}  // namespace ember::app
