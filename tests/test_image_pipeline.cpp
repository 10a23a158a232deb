// The per-sample image pipeline: the fused Resize/crop/flip/Normalize path against the composed
// transforms (bit for bit), ImageFolder batches through the DataLoader (0 and 2 workers agree),
// bad files (error naming the file, or skipped and reported), size limits checked on the header,
// the decoded cache (reuse, invalidation, truncation), and the stratified split.

#include <catch2/catch.hpp>

#include <turbojpeg.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <ember/data/auto_augment.h>
#include <ember/data/image_cache.h>
#include <ember/data/image_folder.h>
#include <ember/data/image_pipeline.h>
#include <ember/data/image_transforms.h>
#include <ember/data/loader.h>

#include "stb_write.h"
#include "test_util.h"

using namespace ember;
using namespace ember::data;
using ember::testing::error_of;
namespace fs = std::filesystem;

namespace {

// Every temporary directory of this file: testing::TempDir with this file's prefix.
struct TempDir : ember::testing::TempDir {
  TempDir() : ember::testing::TempDir("ember_test_pipeline") {}
};

// A smooth-plus-noise RGB image (H, W, 3) interleaved: gradients survive resizing, noise makes
// every rounding visible.
std::vector<uint8_t> photo(int h, int w, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> px(static_cast<size_t>(h) * w * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        px[(static_cast<size_t>(y) * w + x) * 3 + c] =
            static_cast<uint8_t>((x * 255 / std::max(1, w - 1) + y * 97 / std::max(1, h - 1) + c * 60 + rng() % 40) % 256);
  return px;
}

Tensor chw(const std::vector<uint8_t>& hwc, int h, int w) {
  Tensor t = empty({3, h, w}, {.dtype = DType::u8});
  auto* p = t.data_ptr<uint8_t>();
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < h * w; ++i) p[c * h * w + i] = hwc[static_cast<size_t>(i) * 3 + c];
  return t;
}

void write_png(const fs::path& p, int h, int w, uint32_t seed) {
  fs::create_directories(p.parent_path());
  const std::vector<uint8_t> px = photo(h, w, seed);
  REQUIRE(stbi_write_png(p.string().c_str(), w, h, 3, px.data(), w * 3) != 0);
}

void write_jpg(const fs::path& p, int h, int w, uint32_t seed) {
  fs::create_directories(p.parent_path());
  const std::vector<uint8_t> px = photo(h, w, seed);
  REQUIRE(stbi_write_jpg(p.string().c_str(), w, h, 3, px.data(), 90) != 0);
}

void write_bytes(const fs::path& p, const std::vector<uint8_t>& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const std::vector<float> x = a.contiguous().to_vector<float>(), y = b.contiguous().to_vector<float>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, static_cast<double>(std::fabs(x[i] - y[i])));
  return m;
}

// The fused pipeline's output for one image, as the loader computes it.
Tensor fused(const AnyTransform& tf, const Tensor& image, uint64_t seed, uint64_t index) {
  const ImagePipeline p = plan_image_pipeline(tf);
  REQUIRE(p.fused);
  SampleRng rng = sample_rng(seed, 0, index);
  Tensor img = image;
  for (const Transform* t : p.prefix) img = t->apply(img, rng);
  img = img.contiguous();
  const auto [oh, ow] = fused_output_size(p, img.size(1), img.size(2));
  Tensor out = empty({img.size(0), oh, ow});
  SampleRng rng_hwc = rng;
  const std::vector<float> lut = data::detail::to_tensor_lut(p.normalize, img.size(0));
  run_fused_pipeline(p, img, rng, lut, out.data_ptr<float>());
  // The decoders' interleaved layout gives the same bytes.
  Tensor out_hwc = empty({img.size(0), oh, ow});
  run_fused_pipeline(p, img.permute({1, 2, 0}).contiguous(), rng_hwc, lut, out_hwc.data_ptr<float>(), ImageLayout::HWC);
  CHECK(out_hwc.to_vector<float>() == out.to_vector<float>());
  return out;
}

// A class tree of PNG and JPEG files: 2 classes x 5 images of assorted sizes.
void make_tree(const fs::path& root) {
  uint32_t seed = 1;
  for (const char* cls : {"cat", "dog"})
    for (int i = 0; i < 5; ++i) {
      const int h = 30 + 7 * i, w = 45 - 3 * i;
      if (i % 2 == 0)
        write_png(root / cls / ("img" + std::to_string(i) + ".png"), h, w, seed++);
      else
        write_jpg(root / cls / ("img" + std::to_string(i) + ".JPG"), h, w, seed++);
    }
}

const Normalize kImageNet({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225});

}  // namespace

TEST_CASE("fused pipeline: bit-identical to the composed transforms", "[image_pipeline]") {
  const std::vector<std::array<int, 2>> sizes{{37, 53}, {300, 400}, {375, 500}, {20, 15}, {64, 64}, {1, 9}};
  const std::vector<std::pair<std::string, AnyTransform>> transforms{
      {"Resize+CenterCrop+Normalize", Compose{Resize(32), CenterCrop(28), ToTensor(), kImageNet}},
      {"Resize(256)+CenterCrop(224)", Compose{Resize(256), CenterCrop(224), ToTensor(), kImageNet}},
      {"exact Resize", Compose{Resize(40, 30), ToTensor()}},
      {"Resize alone (variable size)", Compose{Resize(24), ToTensor(), kImageNet}},
      {"CenterCrop larger than the image", Compose{CenterCrop(50, 41), RandomHorizontalFlip(), ToTensor()}},
      {"RandomResizedCrop+flip", Compose{RandomResizedCrop(24), RandomHorizontalFlip(), ToTensor(), kImageNet}},
      {"Resize then RandomResizedCrop (prefix)", Compose{Resize(40), RandomResizedCrop(24, {0.3, 1.0}, {0.5, 2.0}),
                                                         RandomHorizontalFlip(0.7), ToTensor(), kImageNet}},
      {"flip only", Compose{RandomHorizontalFlip(1.0), ToTensor()}},
  };
  uint32_t seed = 7;
  for (const auto& [name, tf] : transforms)
    for (const auto& [h, w] : sizes)
      for (uint64_t index : {0, 1, 2, 3}) {
        INFO(name << " on " << h << "x" << w << ", sample " << index);
        const Tensor img = chw(photo(h, w, seed++), h, w);
        SampleRng rng = sample_rng(11, 0, index);
        const Tensor composed = tf->apply(img, rng);
        CHECK(max_abs_diff(fused(tf, img, 11, index), composed) == 0.0);
      }
}

TEST_CASE("fused pipeline: what fuses", "[image_pipeline]") {
  CHECK(plan_image_pipeline(Compose{Resize(256), CenterCrop(224), ToTensor(), kImageNet}).prefix.empty());
  CHECK(plan_image_pipeline(Compose{Resize(256), CenterCrop(224), ToTensor(), kImageNet}).hint.min_height == 256);
  const ImagePipeline rrc = plan_image_pipeline(Compose{Resize(64), RandomResizedCrop(32), ToTensor()});
  CHECK(rrc.fused);
  CHECK(rrc.prefix.size() == 1);
  CHECK(rrc.hint.min_height == 0);  // the Resize runs unfused: no draft decode
  CHECK_FALSE(plan_image_pipeline(Compose{Resize(64), CenterCrop(32)}).fused);  // no ToTensor: u8 out
  CHECK_FALSE(plan_image_pipeline(Compose{Resize(64), ToTensor(), CenterCrop(32)}).fused);
  const ImagePipeline jitter = plan_image_pipeline(Compose{RandomResizedCrop(32), ColorJitter(0.4), ToTensor()});
  CHECK(jitter.fused);  // ToTensor alone fuses after the unfused prefix
  CHECK(jitter.prefix.size() == 2);
}

TEST_CASE("ImageFolder batches: fused, composed per sample, and the same for 0, 1 and 4 workers", "[image_pipeline]") {
  TempDir tmp;
  make_tree(tmp.path);
  const ImageFolder ds(tmp.path);
  const AnyTransform tf = Compose{Resize(24), CenterCrop(20), RandomHorizontalFlip(), ToTensor(), kImageNet};
  auto run = [&](int workers) {
    DataLoader loader(ds, {.batch_size = 4, .shuffle = true, .seed = 3, .transform = tf, .num_workers = workers});
    std::vector<Batch> out;
    for (auto& b : loader) out.push_back(b);
    return out;
  };
  const std::vector<Batch> serial = run(0), one = run(1), threaded = run(4);
  REQUIRE(serial.size() == 3);
  REQUIRE(threaded.size() == 3);
  REQUIRE(one.size() == 3);
  DataLoader loader(ds, {.batch_size = 4, .shuffle = true, .seed = 3, .transform = tf});
  for (size_t b = 0; b < serial.size(); ++b) {
    CHECK(serial[b].images.shape() == Shape{b < 2 ? 4 : 2, 3, 20, 20});
    CHECK(max_abs_diff(serial[b].images, threaded[b].images) == 0.0);
    CHECK(max_abs_diff(serial[b].images, one[b].images) == 0.0);
    CHECK(serial[b].labels.to_vector<int64_t>() == threaded[b].labels.to_vector<int64_t>());
    const std::vector<int64_t> idx = loader.batch_indices(0, static_cast<int64_t>(b));
    for (size_t i = 0; i < idx.size(); ++i) {
      SampleRng rng = sample_rng(3, 0, static_cast<uint64_t>(idx[i]));
      const Tensor one = tf->apply(ds.get(idx[i]).image, rng);
      CHECK(max_abs_diff(serial[b].images[static_cast<int64_t>(i)], one) == 0.0);
      CHECK(serial[b].labels.to_vector<int64_t>()[i] == ds.samples()[static_cast<size_t>(idx[i])].label);
    }
  }
  const ImageLoadStats st = ds.stats();
  CHECK(st.decoded == 40);  // 10 images, 4 passes
  CHECK(st.decode_seconds > 0);
  // Different sizes without a size-fixing transform: a clear error.
  DataLoader raw(ds, {.batch_size = 10});
  CHECK_THAT(error_of([&] { raw.load_batch(0, 0); }), Catch::Contains("need a transform that makes them one size"));
}

TEST_CASE("ImageFolder batches with TrivialAugmentWide, hue, RandomErasing and Mixup/CutMix: the same for 0, 1 and 2 "
          "workers", "[image_pipeline]") {
  TempDir tmp;
  make_tree(tmp.path);
  const ImageFolder ds(tmp.path);
  // The policy breaks the fused suffix, RandomErasing after Normalize leaves nothing to fuse: the
  // per-sample path.
  const AnyTransform tf = Compose{RandomResizedCrop(16), RandomHorizontalFlip(), TrivialAugmentWide(),
                                  ColorJitter(0.2, 0.2, 0.2, 0.1), ToTensor(), kImageNet, RandomErasing(0.5)};
  CHECK_FALSE(plan_image_pipeline(tf).fused);
  const MixOptions mix{.mixup_alpha = 0.2, .cutmix_alpha = 1.0, .num_classes = 2};
  auto run = [&](int workers) {
    DataLoader loader(ds, {.batch_size = 4, .shuffle = true, .seed = 6, .transform = tf, .mix = mix,
                           .num_workers = workers});
    std::vector<Batch> out;
    for (int epoch = 0; epoch < 2; ++epoch)
      for (auto& b : loader) out.push_back(b);
    return out;
  };
  const std::vector<Batch> serial = run(0), one = run(1), two = run(2);
  REQUIRE(serial.size() == 6);
  DataLoader loader(ds, {.batch_size = 4, .shuffle = true, .seed = 6, .transform = tf});
  for (size_t b = 0; b < serial.size(); ++b) {
    CHECK(max_abs_diff(serial[b].images, one[b].images) == 0.0);
    CHECK(max_abs_diff(serial[b].images, two[b].images) == 0.0);
    CHECK(max_abs_diff(serial[b].labels, two[b].labels) == 0.0);
    REQUIRE(serial[b].labels.shape() == Shape{serial[b].images.size(0), 2});
    // Each batch is the per-sample transforms, then the batch's mix.
    const int64_t epoch = static_cast<int64_t>(b) / 3, index = static_cast<int64_t>(b) % 3;
    const std::vector<int64_t> idx = loader.batch_indices(epoch, index);
    std::vector<Tensor> samples;
    std::vector<int64_t> labels;
    for (const int64_t i : idx) {
      SampleRng rng = sample_rng(6, static_cast<uint64_t>(epoch), static_cast<uint64_t>(i));
      samples.push_back(tf->apply(ds.get(i).image, rng));
      labels.push_back(ds.samples()[static_cast<size_t>(i)].label);
    }
    const Batch want = mix_batch(Batch{stack(samples, 0), from_vector<int64_t>(labels, {static_cast<int64_t>(labels.size())})},
                                 mix, 6, epoch, index);
    CHECK(max_abs_diff(serial[b].images, want.images) == 0.0);
    CHECK(max_abs_diff(serial[b].labels, want.labels) == 0.0);
  }
}

TEST_CASE("bad image files: an error naming the file, or skipped and reported", "[image_pipeline]") {
  TempDir tmp;
  make_tree(tmp.path);
  const fs::path zero = tmp.path / "cat" / "zero.png", text = tmp.path / "cat" / "notes.jpg",
                 trunc = tmp.path / "dog" / "truncated.jpg", corrupt = tmp.path / "dog" / "corrupt.png";
  write_bytes(zero, {});
  const std::string words = "this is not an image, whatever its name says\n";
  write_bytes(text, std::vector<uint8_t>(words.begin(), words.end()));
  write_jpg(trunc, 40, 40, 99);
  std::vector<uint8_t> b = read_bytes(trunc);
  b.resize(b.size() / 2);
  write_bytes(trunc, b);
  write_png(corrupt, 40, 40, 98);
  b = read_bytes(corrupt);
  for (size_t i = 40; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 31);
  write_bytes(corrupt, b);

  const AnyTransform tf = Compose{Resize(16), CenterCrop(16), ToTensor()};
  SECTION("default: the loader rethrows the decoder's message with the file name") {
    const ImageFolder ds(tmp.path);
    REQUIRE(ds.size() == 14);
    DataLoader loader(ds, {.batch_size = 14, .transform = tf});
    const std::string e = error_of([&] { loader.load_batch(0, 0); });
    CHECK_THAT(e, Catch::Contains("notes.jpg"));  // the first bad sample in batch order
    CHECK_THAT(e, Catch::Contains("unrecognized image format"));
    // (no structured bindings: clang 14 cannot capture them in the lambda)
    for (const std::pair<fs::path, std::string>& bad : std::vector<std::pair<fs::path, std::string>>{
             {zero, "empty file"}, {text, "unrecognized"}, {trunc, "JPEG"}, {corrupt, "PNG"}}) {
      const fs::path& path = bad.first;
      const std::string msg = error_of([&] { decode_image(path.string()); });
      CHECK_THAT(msg, Catch::Contains(path.string()));
      CHECK_THAT(msg, Catch::Contains(bad.second));
    }
  }
  SECTION("skip: left out of the batch, counted, listed once") {
    const ImageFolder ds(tmp.path, {.bad_images = BadImages::skip});
    DataLoader loader(ds, {.batch_size = 8, .transform = tf, .num_workers = 2});
    int64_t images = 0;
    for (auto& [x, y] : loader) {
      CHECK(x.size(0) == y.size(0));
      images += x.size(0);
    }
    CHECK(images == 10);
    CHECK(ds.stats().skipped == 4);
    const std::vector<SkippedImage> skipped = ds.take_skipped();
    REQUIRE(skipped.size() == 4);
    std::vector<std::string> names;
    for (const SkippedImage& s : skipped) {
      names.push_back(fs::path(s.path).filename().string());
      CHECK_THAT(s.reason, Catch::Contains(s.path));
    }
    std::sort(names.begin(), names.end());
    CHECK(names == std::vector<std::string>{"corrupt.png", "notes.jpg", "truncated.jpg", "zero.png"});
    CHECK(ds.take_skipped().empty());
  }
}

TEST_CASE("absurd dimensions are rejected from the header, before the pixels", "[image_pipeline]") {
  TempDir tmp;
  // A PNG signature + IHDR claiming 40000 x 16: no pixel data at all, so only a header check can
  // produce the size message (a decode attempt would report truncated data).
  auto png_header = [](uint32_t w, uint32_t h) {
    std::vector<uint8_t> b{0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R'};
    for (uint32_t v : {w, h})
      for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
    for (uint8_t x : {8, 2, 0, 0, 0}) b.push_back(x);  // 8-bit RGB
    for (int i = 0; i < 4; ++i) b.push_back(0);        // CRC (stb_image does not check it)
    return b;
  };
  write_bytes(tmp.path / "wide.png", png_header(40000, 16));
  CHECK_THAT(error_of([&] { decode_image((tmp.path / "wide.png").string()); }),
             Catch::Contains("side longer than the limit of 32768"));
  write_bytes(tmp.path / "big.png", png_header(20000, 20000));
  CHECK_THAT(error_of([&] { decode_image((tmp.path / "big.png").string()); }),
             Catch::Contains("larger than the limit of 268435456 pixels"));
  // The pixel limit is configurable.
  write_png(tmp.path / "ok.png", 100, 100, 1);
  CHECK(decode_image((tmp.path / "ok.png").string()).shape() == Shape{3, 100, 100});
  CHECK_THAT(error_of([&] { decode_image((tmp.path / "ok.png").string(), DecodeOptions{.max_pixels = 5000}); }),
             Catch::Contains("larger than the limit of 5000 pixels"));
  // A JPEG whose SOF claims 50000 pixels wide.
  write_jpg(tmp.path / "j.jpg", 8, 8, 2);
  std::vector<uint8_t> j = read_bytes(tmp.path / "j.jpg");
  for (size_t i = 2; i + 8 < j.size(); ++i)
    if (j[i] == 0xFF && (j[i + 1] == 0xC0 || j[i + 1] == 0xC2)) {  // SOF0/SOF2: len(2) P(1) Y(2) X(2)
      j[i + 7] = 50000 >> 8;
      j[i + 8] = 50000 & 0xFF;
      break;
    }
  write_bytes(tmp.path / "j.jpg", j);
  CHECK_THAT(error_of([&] { decode_image((tmp.path / "j.jpg").string()); }), Catch::Contains("32768"));
  CHECK(probe_image((tmp.path / "j.jpg").string()).width == 50000);
  CHECK(probe_image((tmp.path / "ok.png").string()).height == 100);
}

TEST_CASE("decoded cache: built once, read on later epochs and runs, invalidated, rebuilt", "[image_pipeline]") {
  TempDir tmp;
  make_tree(tmp.path / "tree");
  const fs::path cache_dir = tmp.path / "cache";
  auto folder = std::make_shared<ImageFolder>(tmp.path / "tree");
  const AnyTransform tf = Compose{CenterCrop(20), RandomHorizontalFlip(), ToTensor(), kImageNet};
  const ImageCacheOptions opts{.dir = cache_dir, .resize = 24};
  Tensor first_epoch;
  {
    CachedImages cached(folder, opts);
    CHECK(cached.how_opened() == CacheOpen::built);
    CHECK(cached.rebuild_reason() == "no cache file");
    CHECK(folder->stats().decoded == 10);
    DataLoader loader(cached, {.batch_size = 10, .seed = 5, .transform = tf});
    for (int epoch = 0; epoch < 2; ++epoch)
      for (auto& [x, y] : loader)
        if (epoch == 0) first_epoch = x;
    CHECK(cached.stats().cache_reads == 20);
    CHECK(folder->stats().decoded == 10);  // the second epoch decoded nothing
    // Equal to the uncached pipeline Resize(24) + the same transform.
    DataLoader direct(*folder, {.batch_size = 10, .seed = 5, .transform = Compose{Resize(24), tf}});
    CHECK(max_abs_diff(direct.load_batch(0, 0).images, first_epoch) == 0.0);
  }
  {
    CachedImages again(folder, opts);  // a later run
    CHECK(again.how_opened() == CacheOpen::loaded);
    CHECK(folder->stats().decoded == 20);  // 10 by the direct loader above, none by the reopen
  }
  SECTION("touching a source file invalidates it") {
    const fs::path touched = folder->samples()[3].path;
    fs::last_write_time(touched, fs::last_write_time(touched) + std::chrono::seconds(5));
    CachedImages after(folder, opts);
    CHECK(after.how_opened() == CacheOpen::built);
    CHECK(after.rebuild_reason() == "source changed: " + touched.string());
  }
  SECTION("a different transform is a different cache") {
    CachedImages other(folder, {.dir = cache_dir, .resize = 30});
    CHECK(other.how_opened() == CacheOpen::built);
  }
  SECTION("a truncated cache file is rebuilt") {
    const fs::path file = CachedImages(folder, opts).file();
    fs::resize_file(file, fs::file_size(file) / 2);
    CachedImages after(folder, opts);
    CHECK(after.how_opened() == CacheOpen::built);
    CHECK_THAT(after.rebuild_reason(), Catch::Contains("truncated"));
    DataLoader loader(after, {.batch_size = 10, .seed = 5, .transform = tf});
    CHECK(max_abs_diff(loader.load_batch(0, 0).images, first_epoch) == 0.0);
  }
}

TEST_CASE("stratified_split: seeded, per class, disjoint", "[image_pipeline]") {
  std::vector<int64_t> labels;
  for (int i = 0; i < 100; ++i) labels.push_back(i < 70 ? 0 : (i < 95 ? 1 : 2));
  const SplitIndices a = stratified_split(labels, 0.2, 1), b = stratified_split(labels, 0.2, 1),
                     c = stratified_split(labels, 0.2, 2);
  CHECK(a.val == b.val);
  CHECK(a.val != c.val);
  CHECK(a.val.size() + a.train.size() == 100);
  int64_t per[3] = {0, 0, 0};
  for (int64_t i : a.val) ++per[labels[static_cast<size_t>(i)]];
  CHECK(per[0] == 14);
  CHECK(per[1] == 5);
  CHECK(per[2] == 1);
  std::vector<int64_t> all = a.train;
  all.insert(all.end(), a.val.begin(), a.val.end());
  std::sort(all.begin(), all.end());
  for (int i = 0; i < 100; ++i) CHECK(all[static_cast<size_t>(i)] == i);
}

TEST_CASE("16-bit PGM and PPM decode, scaled to 8 bits (a fuzzer finding)", "[image_pipeline]") {
  // fuzz/fuzz_decode found that stb_image's RGB conversion of a 16-bit PGM overflowed its buffer;
  // 16-bit PNM is now decoded by ember itself (and decode_stb converts channels itself).
  TempDir tmp;
  for (const bool colour : {false, true}) {
    const int w = 5, h = 3, c = colour ? 3 : 1;
    std::string head = std::string(colour ? "P6" : "P5") + "\n5 3\n1000\n";
    std::vector<uint8_t> b(head.begin(), head.end());
    std::vector<int> expect;
    for (int i = 0; i < w * h * c; ++i) {
      const int v = (i * 67) % 1001;
      b.push_back(static_cast<uint8_t>(v >> 8));
      b.push_back(static_cast<uint8_t>(v & 0xFF));
      expect.push_back(v);
    }
    const fs::path p = tmp.path / (colour ? "a.ppm" : "a.pgm");
    write_bytes(p, b);
    const Tensor t = decode_image(p.string());
    REQUIRE(t.shape() == Shape{3, h, w});
    const std::vector<int64_t> got = t.to(DType::i64).to_vector<int64_t>();
    for (int ch = 0; ch < 3; ++ch)
      for (int i = 0; i < w * h; ++i) {
        // scaled to 8 bits: round(v * 255 / maxval)
        const int v = expect[static_cast<size_t>(i * c + (colour ? ch : 0))];
        CHECK(got[static_cast<size_t>(ch * w * h + i)] == (v * 255 + 500) / 1000);
      }
  }
  // The fuzzer's input itself (a P5 23x17 maxval 295 file, after the option byte).
  const std::vector<uint8_t> crash = read_bytes(fs::path(EMBER_TEST_DATA_DIR) / "fuzz" / "pgm16_overflow.bin");
  REQUIRE(crash.size() > 1);
  const std::vector<uint8_t> file(crash.begin() + 1, crash.end());
  CHECK(decode_image_bytes(file, "pgm16").shape() == Shape{3, 17, 23});
}

TEST_CASE("CMYK JPEGs decode through TurboJPEG, the fuzzer's corrupt one is an error", "[image_pipeline]") {
  // A YCCK JPEG as libjpeg-turbo writes it from CMYK pixels (Adobe marker, inverted CMYK).
  const int w = 16, h = 8;
  std::vector<uint8_t> cmyk(static_cast<size_t>(w * h * 4));
  for (size_t i = 0; i < cmyk.size(); ++i) cmyk[i] = static_cast<uint8_t>(i % 4 == 3 ? 200 : 40 + (i * 13) % 200);
  tjhandle tj = tjInitCompress();
  REQUIRE(tj != nullptr);
  unsigned char* jpeg = nullptr;
  unsigned long jpeg_size = 0;
  REQUIRE(tjCompress2(tj, cmyk.data(), w, 0, h, TJPF_CMYK, &jpeg, &jpeg_size, TJSAMP_444, 100, 0) == 0);
  const std::vector<uint8_t> file(jpeg, jpeg + jpeg_size);
  tjFree(jpeg);
  tjDestroy(tj);
  const Tensor t = decode_image_bytes(file, "cmyk.jpg");
  REQUIRE(t.shape() == Shape{3, h, w});
  const std::vector<int64_t> got = t.to(DType::i64).to_vector<int64_t>();
  for (int ch = 0; ch < 3; ++ch)
    for (int i = 0; i < w * h; ++i) {
      const int c = cmyk[static_cast<size_t>(i * 4 + ch)], k = cmyk[static_cast<size_t>(i * 4 + 3)];
      CHECK(std::abs(got[static_cast<size_t>(ch * w * h + i)] - (c * k + 127) / 255) <= 3);  // JPEG rounding
    }
  // The fuzzer's input: an Adobe JPEG with a Huffman table of more than 256 codes, past whose
  // array stb_image wrote. libjpeg-turbo tolerates it (the unused codes never occur).
  const std::vector<uint8_t> crash = read_bytes(fs::path(EMBER_TEST_DATA_DIR) / "fuzz" / "jpeg_cmyk_huffman.bin");
  REQUIRE(crash.size() > 1);
  const std::vector<uint8_t> bad(crash.begin() + 1, crash.end());
  CHECK(decode_image_bytes(bad, "bad.jpg").size(0) == 3);
}

TEST_CASE("PNM headers with absurd numbers are errors before stb_image parses them (a fuzzer finding)",
          "[image_pipeline]") {
  auto pnm = [](const std::string& head) {
    std::vector<uint8_t> b(head.begin(), head.end());
    b.resize(b.size() + 64, 7);
    return b;
  };
  CHECK_THAT(error_of([&] { decode_image_bytes(pnm("P5\n23 17\n88888888888888888888888888\n"), "a.pgm"); }),
             Catch::Contains("more than 10 digits"));
  CHECK_THAT(error_of([&] { probe_image_bytes(pnm("P6\n4294967296 2\n255\n"), "b.ppm"); }),
             Catch::Contains("invalid size"));
  CHECK_THAT(error_of([&] { decode_image_bytes(pnm("P5\n2 2\n70000\n"), "c.pgm"); }),
             Catch::Contains("maxval 70000 is outside"));
  CHECK(probe_image_bytes(pnm("P5 # comment\r\n4 2\n255\n"), "d.pgm").width == 4);
  const std::vector<uint8_t> crash = read_bytes(fs::path(EMBER_TEST_DATA_DIR) / "fuzz" / "pnm_maxval_overflow.bin");
  REQUIRE(crash.size() > 1);
  const std::vector<uint8_t> bad(crash.begin() + 1, crash.end());
  CHECK_THAT(error_of([&] { probe_image_bytes(bad, "crash.pgm"); }), Catch::Contains("crash.pgm"));
  CHECK_THAT(error_of([&] { decode_image_bytes(bad, "crash.pgm"); }), Catch::Contains("crash.pgm"));
}

TEST_CASE("ImageFolder loader: leaving an epoch early with workers stops them cleanly", "[image_pipeline]") {
  TempDir tmp;
  make_tree(tmp.path);
  const ImageFolder ds(tmp.path, {.bad_images = BadImages::skip});
  const AnyTransform tf = Compose{RandomResizedCrop(12), RandomHorizontalFlip(), ToTensor(), kImageNet};
  for (int round = 0; round < 5; ++round) {
    DataLoader loader(ds, {.batch_size = 2, .shuffle = true, .seed = 9, .transform = tf, .num_workers = 3,
                           .prefetch = 2});
    int seen = 0;
    for (auto& [x, y] : loader) {
      CHECK(x.shape() == Shape{2, 3, 12, 12});
      if (++seen == 1 + round % 3) break;  // the iterator's destruction joins the workers
    }
    CHECK(loader.position() == LoaderPosition{0, 1 + round % 3});
  }
  CHECK(ds.stats().skipped == 0);
}
