#pragma once
// The data commands of the `ember` tool: `ember inspect PATH [--json]` (a dataset summary, or
// torchvision's ImageFolder mapping as JSON) and `ember bench loader` (the loader's throughput on a
// tree of images, one JSON line). Errors are ember::Error, reported by main().

#include <cstdint>
#include <string>

namespace ember::app {

struct InspectOptions {
  std::string path;
  bool json = false;         // print {"classes":[...],"class_to_idx":{...},"samples":[[path,label],...]} only
  bool skip_hidden = false;  // ImageFolderOptions::skip_hidden
};
// Summary: classes with their image counts, width/height min/median/max over the readable images,
// formats, and every unreadable file with the decoder's message (every file is decoded).
void run_inspect(const InspectOptions& options);

struct BenchLoaderOptions {
  std::string root;
  int64_t batch_size = 32;
  int workers = 0;
  int64_t resize = 256, crop = 224;
  int epochs = 1;
  bool cache = false;     // read through the decoded cache (built on first use)
  std::string cache_dir;  // where; default a directory under the system temp dir
  bool draft = true;      // JPEG draft decoding (data::JpegDraft)
  int threads = 0;        // CPU threads (0: all cores); with workers each worker uses one
};
// ImageFolder -> Resize -> CenterCrop -> ToTensor -> Normalize (ImageNet) batches, shuffled, for
// `epochs` epochs; prints one JSON line: images_per_sec, stall (consumer wait) and read/decode/
// transform seconds.
void run_bench_loader(const BenchLoaderOptions& options);

}  // namespace ember::app
