// Data: IDX files (raw and gzipped) and their errors, MNIST/Fashion-MNIST loading, datasets,
// transforms with known values, per-sample randomness, and the loader's order, determinism,
// drop_last and resume.

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

#include <ember/data/dataset.h>
#include <ember/data/idx.h>
#include <ember/data/loader.h>
#include <ember/core/sample_rng.h>
#include <ember/data/transforms.h>
#include <ember/ember.h>

#include "test_util.h"

using namespace ember;
namespace fs = std::filesystem;

namespace {

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
// Every temporary directory of this file: testing::TempDir with this file's prefix.
struct TempDir : ember::testing::TempDir {
  TempDir() : ember::testing::TempDir("ember_test_data") {}
};

void write_bytes(const fs::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void put_be32(std::vector<uint8_t>& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

// An IDX header, written by hand (independent of write_idx).
std::vector<uint8_t> idx_header(uint8_t type, std::vector<uint32_t> dims) {
  std::vector<uint8_t> b = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) put_be32(b, d);
  return b;
}

// Images (3, 2, 4): pixel (n, y, x) = 10 n + 4 y + x; labels 7, 0, 255.
std::vector<uint8_t> small_images_file() {
  std::vector<uint8_t> b = idx_header(0x08, {3, 2, 4});
  for (int n = 0; n < 3; ++n)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 4; ++x) b.push_back(static_cast<uint8_t>(10 * n + 4 * y + x));
  return b;
}
std::vector<uint8_t> small_labels_file() {
  std::vector<uint8_t> b = idx_header(0x08, {3});
  b.insert(b.end(), {7, 0, 255});
  return b;
}

// A u8 (N, C, H, W) dataset whose pixel values encode the sample: every pixel of sample i is i % 256.
data::InMemoryImageDataset numbered_dataset(int64_t n, int64_t c = 1, int64_t h = 4, int64_t w = 4) {
  std::vector<uint8_t> pixels(static_cast<size_t>(n * c * h * w));
  for (int64_t i = 0; i < n; ++i)
    std::fill_n(pixels.begin() + i * c * h * w, c * h * w, static_cast<uint8_t>(i % 256));
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = i % 10;
  return data::InMemoryImageDataset(from_vector(pixels, {n, c, h, w}), from_vector(labels));
}

// The dataset indices a batch came from, read back from numbered_dataset's pixels after ToTensor.
std::vector<int64_t> sample_ids(const data::Batch& b) {
  std::vector<int64_t> ids;
  const std::vector<float> px = b.images.to_vector<float>();
  const int64_t per = b.images.numel() / b.images.size(0);
  for (int64_t i = 0; i < b.images.size(0); ++i)
    ids.push_back(static_cast<int64_t>(std::lround(px[static_cast<size_t>(i * per)] * 255.0f)));
  return ids;
}

std::vector<std::vector<int64_t>> epoch_batches(data::DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (auto& [images, labels] : loader) out.push_back(labels.to_vector<int64_t>());
  return out;
}

const fs::path kFashionDir = "/usr/share/datasets/fashion-mnist";

// A gzip file of `bytes` written with stored (uncompressed) deflate blocks: an encoder
// independent of zlib, so the reader is not only tested against its own writer.
uint32_t crc32_of(const std::vector<uint8_t>& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (uint8_t b : bytes) {
    crc ^= b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}
std::vector<uint8_t> gzip_stored(const std::vector<uint8_t>& bytes) {
  std::vector<uint8_t> out = {0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 0xff};
  size_t pos = 0;
  do {
    const size_t len = std::min<size_t>(bytes.size() - pos, 65535);
    const bool final = pos + len == bytes.size();
    out.push_back(final ? 1 : 0);  // BFINAL, BTYPE = 00 (stored)
    out.insert(out.end(), {static_cast<uint8_t>(len), static_cast<uint8_t>(len >> 8),
                           static_cast<uint8_t>(~len), static_cast<uint8_t>(~len >> 8)});
    out.insert(out.end(), bytes.begin() + static_cast<std::ptrdiff_t>(pos),
               bytes.begin() + static_cast<std::ptrdiff_t>(pos + len));
    pos += len;
  } while (pos < bytes.size());
  for (uint32_t v : {crc32_of(bytes), static_cast<uint32_t>(bytes.size())})
    for (int s = 0; s < 32; s += 8) out.push_back(static_cast<uint8_t>(v >> s));
  return out;
}

}  // namespace

// ---- IDX --------------------------------------------------------------------------------------

TEST_CASE("idx: raw files with known values, every element type", "[data]") {
  TempDir dir;
  write_bytes(dir.path / "images", small_images_file());
  write_bytes(dir.path / "labels", small_labels_file());

  const Tensor images = data::read_idx(dir.path / "images");
  CHECK(images.dtype() == DType::u8);
  CHECK(images.shape() == Shape{3, 2, 4});
  const std::vector<int64_t> px = images.to_vector<int64_t>();
  for (int i = 0; i < 24; ++i) CHECK(px[static_cast<size_t>(i)] == 10 * (i / 8) + i % 8);

  const Tensor labels = data::read_idx_labels(dir.path / "labels");
  CHECK(labels.dtype() == DType::i64);
  CHECK(labels.to_vector<int64_t>() == std::vector<int64_t>{7, 0, 255});
  CHECK(data::read_idx(dir.path / "labels").dtype() == DType::u8);

  // Multi-byte types are big-endian in the file.
  std::vector<uint8_t> i32 = idx_header(0x0C, {2});
  i32.insert(i32.end(), {0x00, 0x01, 0x02, 0x03, 0xFF, 0xFF, 0xFF, 0xFE});
  write_bytes(dir.path / "i32", i32);
  const Tensor t32 = data::read_idx(dir.path / "i32");
  CHECK(t32.dtype() == DType::i32);
  CHECK(t32.to_vector<int64_t>() == std::vector<int64_t>{0x010203, -2});

  std::vector<uint8_t> i16 = idx_header(0x0B, {2});
  i16.insert(i16.end(), {0x01, 0x00, 0xFF, 0xFF});
  write_bytes(dir.path / "i16", i16);
  CHECK(data::read_idx(dir.path / "i16").to_vector<int64_t>() == std::vector<int64_t>{256, -1});

  std::vector<uint8_t> i8 = idx_header(0x09, {2});
  i8.insert(i8.end(), {0x7F, 0x80});
  write_bytes(dir.path / "i8", i8);
  CHECK(data::read_idx(dir.path / "i8").to_vector<int64_t>() == std::vector<int64_t>{127, -128});

  std::vector<uint8_t> f32 = idx_header(0x0D, {1, 2});
  f32.insert(f32.end(), {0x3F, 0x80, 0x00, 0x00, 0xC0, 0x48, 0x00, 0x00});  // 1.0, -3.125
  write_bytes(dir.path / "f32", f32);
  const Tensor tf = data::read_idx(dir.path / "f32");
  CHECK(tf.dtype() == DType::f32);
  CHECK(tf.shape() == Shape{1, 2});
  CHECK(tf.to_vector<float>() == std::vector<float>{1.0f, -3.125f});

  std::vector<uint8_t> f64 = idx_header(0x0E, {1});
  f64.insert(f64.end(), {0x40, 0x09, 0x21, 0xFB, 0x54, 0x44, 0x2D, 0x18});  // pi
  write_bytes(dir.path / "f64", f64);
  CHECK(data::read_idx(dir.path / "f64").to_vector<double>()[0] == 3.141592653589793);

  // Zero samples is a valid (empty) file.
  write_bytes(dir.path / "empty", idx_header(0x08, {0, 28, 28}));
  CHECK(data::read_idx(dir.path / "empty").shape() == Shape{0, 28, 28});
}

TEST_CASE("idx: write_idx writes the hand-built bytes, gzip round-trips", "[data]") {
  TempDir dir;
  write_bytes(dir.path / "images", small_images_file());
  const Tensor images = data::read_idx(dir.path / "images");

  data::write_idx(dir.path / "again", images);
  CHECK(read_bytes(dir.path / "again") == small_images_file());

  // Gzip is detected by its magic bytes, not the name.
  data::write_idx(dir.path / "images.gz", images, data::IdxCompression::gzip);
  data::write_idx(dir.path / "gzipped_no_suffix", images, data::IdxCompression::gzip);
  const std::vector<uint8_t> gz = read_bytes(dir.path / "images.gz");
  REQUIRE(gz.size() > 2);
  CHECK(gz[0] == 0x1f);
  CHECK(gz[1] == 0x8b);
  CHECK(data::read_idx(dir.path / "images.gz").to_vector<int64_t>() == images.to_vector<int64_t>());
  CHECK(data::read_idx(dir.path / "gzipped_no_suffix").to_vector<int64_t>() == images.to_vector<int64_t>());

  const Tensor f = from_vector<float>({0.5f, -2.0f, 1e-3f, 7.0f, 3.25f, -0.0f}, {2, 3});
  data::write_idx(dir.path / "f.gz", f, data::IdxCompression::gzip);
  const Tensor g = data::read_idx(dir.path / "f.gz");
  CHECK(g.shape() == Shape{2, 3});
  CHECK(g.to_vector<float>() == f.to_vector<float>());

  // A big gzipped file (several read chunks).
  const Tensor big = randint(0, 256, {300, 28, 28}).to(DType::u8);
  data::write_idx(dir.path / "big.gz", big, data::IdxCompression::gzip);
  CHECK(data::read_idx(dir.path / "big.gz").to_vector<int64_t>() == big.to_vector<int64_t>());

  CHECK_THROWS_WITH(data::write_idx(dir.path / "x", from_vector<int64_t>({1, 2})),
                    Catch::Contains("'" + (dir.path / "x").string() + "'") && Catch::Contains("int64"));
}

TEST_CASE("idx: a gzip stream from an independent encoder", "[data]") {
  TempDir dir;
  write_bytes(dir.path / "images.gz", gzip_stored(small_images_file()));
  write_bytes(dir.path / "images", small_images_file());
  CHECK(data::read_idx(dir.path / "images.gz").to_vector<int64_t>() ==
        data::read_idx(dir.path / "images").to_vector<int64_t>());
  // Over 64 KiB: several stored blocks.
  std::vector<uint8_t> big = idx_header(0x08, {100, 1000});
  for (int i = 0; i < 100000; ++i) big.push_back(static_cast<uint8_t>(i * 7));
  write_bytes(dir.path / "big.gz", gzip_stored(big));
  const std::vector<int64_t> v = data::read_idx(dir.path / "big.gz").to_vector<int64_t>();
  REQUIRE(v.size() == 100000);
  CHECK(v[0] == 0);
  CHECK(v[99999] == (99999 * 7) % 256);
}

TEST_CASE("idx: missing, truncated, garbled files give errors naming the file", "[data]") {
  TempDir dir;
  const auto named = [&](const std::string& name) { return Catch::Contains("'" + (dir.path / name).string() + "'"); };
  const std::vector<uint8_t> full = small_images_file();

  CHECK_THROWS_AS(data::read_idx(dir.path / "nope"), Error);
  CHECK_THROWS_WITH(data::read_idx(dir.path / "nope"), named("nope") && Catch::Contains("No such file"));

  // Fewer data bytes than the dims say: raw, and inside a valid gzip stream.
  const std::vector<uint8_t> short_data(full.begin(), full.end() - 5);
  write_bytes(dir.path / "short", short_data);
  CHECK_THROWS_WITH(data::read_idx(dir.path / "short"),
                    named("short") && Catch::Contains("truncated") && Catch::Contains("(3, 2, 4)"));
  write_bytes(dir.path / "short.gz", gzip_stored(short_data));
  CHECK_THROWS_WITH(data::read_idx(dir.path / "short.gz"),
                    named("short.gz") && Catch::Contains("truncated") && Catch::Contains("found 19"));

  // A gzip stream cut off in the middle.
  data::write_idx(dir.path / "cut.gz", randint(0, 256, {64, 64}).to(DType::u8), data::IdxCompression::gzip);
  std::vector<uint8_t> gz = read_bytes(dir.path / "cut.gz");
  gz.resize(gz.size() / 2);
  write_bytes(dir.path / "cut.gz", gz);
  CHECK_THROWS_WITH(data::read_idx(dir.path / "cut.gz"), named("cut.gz") && Catch::Contains("truncated"));

  // Garbage after the gzip header, and a stored stream whose checksum is wrong.
  std::vector<uint8_t> garbage = {0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 0xff};
  for (int i = 0; i < 200; ++i) garbage.push_back(static_cast<uint8_t>(0xA5 ^ (i * 31)));
  write_bytes(dir.path / "garbage.gz", garbage);
  CHECK_THROWS_WITH(data::read_idx(dir.path / "garbage.gz"), named("garbage.gz"));
  std::vector<uint8_t> bad_crc = gzip_stored(full);
  bad_crc[bad_crc.size() - 8] ^= 0xFF;
  write_bytes(dir.path / "bad_crc.gz", bad_crc);
  CHECK_THROWS_WITH(data::read_idx(dir.path / "bad_crc.gz"), named("bad_crc.gz") && Catch::Contains("gzip"));

  // Header problems.
  write_bytes(dir.path / "empty", {});
  CHECK_THROWS_WITH(data::read_idx(dir.path / "empty"), named("empty") && Catch::Contains("truncated"));
  write_bytes(dir.path / "half_dims", std::vector<uint8_t>(full.begin(), full.begin() + 9));
  CHECK_THROWS_WITH(data::read_idx(dir.path / "half_dims"), named("half_dims") && Catch::Contains("truncated"));
  write_bytes(dir.path / "text", {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '\n'});
  CHECK_THROWS_WITH(data::read_idx(dir.path / "text"), named("text") && Catch::Contains("bad magic"));
  std::vector<uint8_t> type7 = full;
  type7[2] = 0x07;
  write_bytes(dir.path / "type7", type7);
  CHECK_THROWS_WITH(data::read_idx(dir.path / "type7"), named("type7") && Catch::Contains("unsupported") &&
                                                            Catch::Contains("0x07"));
  write_bytes(dir.path / "nodims", {0, 0, 8, 0});
  CHECK_THROWS_WITH(data::read_idx(dir.path / "nodims"), named("nodims") && Catch::Contains("0 dimensions"));
  std::vector<uint8_t> trailing = full;
  trailing.insert(trailing.end(), {1, 2, 3});
  write_bytes(dir.path / "trailing", trailing);
  CHECK_THROWS_WITH(data::read_idx(dir.path / "trailing"), named("trailing") && Catch::Contains("3 bytes after"));
  // Huge garbled dims fail on the size check, without trying to allocate them.
  std::vector<uint8_t> huge = idx_header(0x08, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu});
  write_bytes(dir.path / "huge", huge);
  CHECK_THROWS_WITH(data::read_idx(dir.path / "huge"), named("huge"));
  write_bytes(dir.path / "huge.gz", gzip_stored(idx_header(0x08, {60000, 28, 28})));
  CHECK_THROWS_WITH(data::read_idx(dir.path / "huge.gz"), named("huge.gz") && Catch::Contains("truncated"));

  write_bytes(dir.path / "images", full);
  CHECK_THROWS_WITH(data::read_idx_labels(dir.path / "images"), named("images") && Catch::Contains("1-D"));
}

TEST_CASE("load_mnist: finds raw or .gz files, checks counts, names what is missing", "[data]") {
  TempDir dir;
  const std::string where = "'" + dir.path.string() + "'";
  CHECK_THROWS_WITH(data::load_mnist(dir.path / "absent", data::Split::train),
                    Catch::Contains("absent") && Catch::Contains("train-images-idx3-ubyte"));
  CHECK_THROWS_WITH(data::load_mnist(dir.path, data::Split::train),
                    Catch::Contains(where) && Catch::Contains("train-images-idx3-ubyte") &&
                        Catch::Contains("train-labels-idx1-ubyte"));

  write_bytes(dir.path / "train-images-idx3-ubyte", small_images_file());
  CHECK_THROWS_WITH(data::load_mnist(dir.path, data::Split::train),
                    Catch::Contains(where) && Catch::Contains("no train-labels-idx1-ubyte"));
  std::vector<uint8_t> labels = idx_header(0x08, {3});
  labels.insert(labels.end(), {9, 0, 3});
  write_bytes(dir.path / "train-labels-idx1-ubyte.gz", gzip_stored(labels));
  const data::MnistData d = data::load_mnist(dir.path, data::Split::train);
  CHECK(d.images.shape() == Shape{3, 2, 4});
  CHECK(d.labels.dtype() == DType::i64);
  CHECK(d.labels.to_vector<int64_t>() == std::vector<int64_t>{9, 0, 3});

  // Counts must agree.
  std::vector<uint8_t> two = idx_header(0x08, {2});
  two.insert(two.end(), {1, 2});
  write_bytes(dir.path / "t10k-labels-idx1-ubyte", two);
  write_bytes(dir.path / "t10k-images-idx3-ubyte", small_images_file());
  CHECK_THROWS_WITH(data::load_mnist(dir.path, data::Split::test),
                    Catch::Contains("3 images") && Catch::Contains("2 labels"));

  // fashion_mnist adds the channel dim and the class names, and checks labels against them.
  const data::InMemoryImageDataset ds = data::fashion_mnist(dir.path, data::Split::train);
  CHECK(ds.size() == 3);
  CHECK(ds.images().shape() == Shape{3, 1, 2, 4});
  CHECK(ds.classes()[static_cast<size_t>(ds.get(0).label)] == "Ankle boot");
  write_bytes(dir.path / "train-labels-idx1-ubyte", small_labels_file());  // has a 255: raw wins over .gz
  CHECK_THROWS_WITH(data::fashion_mnist(dir.path, data::Split::train), Catch::Contains("label 255"));
}

TEST_CASE("fashion-mnist: the Debian package's files", "[data]") {
  // scripts/install-deps.sh installs dataset-fashion-mnist: missing files are a failure, not a skip.
  REQUIRE(fs::is_directory(kFashionDir));
  CHECK(data::default_fashion_mnist_dir() == kFashionDir);
  const data::InMemoryImageDataset train = data::fashion_mnist(kFashionDir, data::Split::train);
  const data::InMemoryImageDataset test = data::fashion_mnist(kFashionDir, data::Split::test);
  CHECK(train.images().shape() == Shape{60000, 1, 28, 28});
  CHECK(test.images().shape() == Shape{10000, 1, 28, 28});
  CHECK(train.classes().size() == 10);

  const std::vector<int64_t> first = train.labels().slice(0, 0, 10).to_vector<int64_t>();
  CHECK(first == std::vector<int64_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5});
  CHECK(train.classes()[9] == "Ankle boot");
  CHECK(train.classes()[0] == "T-shirt/top");
  CHECK(test.labels().slice(0, 0, 5).to_vector<int64_t>() == std::vector<int64_t>{9, 2, 1, 1, 6});

  std::array<int64_t, 10> train_hist{}, test_hist{};
  for (int64_t l : train.labels().to_vector<int64_t>()) ++train_hist[static_cast<size_t>(l)];
  for (int64_t l : test.labels().to_vector<int64_t>()) ++test_hist[static_cast<size_t>(l)];
  for (int c = 0; c < 10; ++c) {
    CHECK(train_hist[static_cast<size_t>(c)] == 6000);
    CHECK(test_hist[static_cast<size_t>(c)] == 1000);
  }
  // The first training image (an ankle boot): its pixel sum and range, from the raw file.
  const std::vector<int64_t> px = train.get(0).image.to_vector<int64_t>();
  CHECK(std::accumulate(px.begin(), px.end(), int64_t{0}) == 76247);
  CHECK(*std::max_element(px.begin(), px.end()) == 255);
}

// ---- datasets ----------------------------------------------------------------------------------

TEST_CASE("datasets: get, get_batch gather, errors", "[data]") {
  const data::InMemoryImageDataset ds = numbered_dataset(20, 3, 2, 2);
  CHECK(ds.size() == 20);
  CHECK(ds.channels() == 3);
  const data::Example e = ds.get(13);
  CHECK(e.image.shape() == Shape{3, 2, 2});
  CHECK(e.label == 3);
  CHECK(e.image.to_vector<int64_t>() == std::vector<int64_t>(12, 13));
  CHECK_THROWS_WITH(ds.get(20), Catch::Contains("20") && Catch::Contains("out of range"));

  const std::vector<int64_t> idx = {5, 0, 19, 5};
  const data::Batch b = ds.get_batch(idx);
  CHECK(b.images.shape() == Shape{4, 3, 2, 2});
  CHECK(b.images.dtype() == DType::u8);
  CHECK(b.labels.to_vector<int64_t>() == std::vector<int64_t>{5, 0, 9, 5});
  // The fast path equals the generic one (the base class's get() loop).
  const data::Batch slow = ds.data::Dataset::get_batch(idx);
  CHECK(slow.images.to_vector<int64_t>() == b.images.to_vector<int64_t>());
  CHECK(slow.labels.to_vector<int64_t>() == b.labels.to_vector<int64_t>());
  const std::vector<int64_t> bad = {1, -1};
  CHECK_THROWS_WITH(ds.get_batch(bad), Catch::Contains("-1"));

  CHECK_THROWS_WITH(data::TensorDataset(zeros({3, 2}), zeros({4}, {.dtype = DType::i64})),
                    Catch::Contains("3 images but 4 labels"));
  CHECK_THROWS_WITH(data::TensorDataset(zeros({3, 2}), zeros({3})), Catch::Contains("int64"));
  CHECK_THROWS_WITH(data::InMemoryImageDataset(zeros({3, 1, 2, 2}), zeros({3}, {.dtype = DType::i64})),
                    Catch::Contains("uint8"));
  CHECK_THROWS_WITH(data::TensorDataset(zeros({2, 1}), from_vector<int64_t>({0, 2}), {"a", "b"}),
                    Catch::Contains("label 2"));
  // int32 labels are widened.
  const data::TensorDataset t(zeros({2, 1}), from_vector<int32_t>({1, 0}));
  CHECK(t.labels().dtype() == DType::i64);
  CHECK(t.get(0).label == 1);
}

// ---- per-sample randomness --------------------------------------------------------------------

TEST_CASE("sample_rng: a pure function of (seed, epoch, index)", "[data]") {
  auto words = [](ember::SampleRng r, int n) {
    std::vector<uint32_t> w;
    for (int i = 0; i < n; ++i) w.push_back(r.next_u32());
    return w;
  };
  const std::vector<uint32_t> base = words(ember::sample_rng(1, 2, 3), 9);
  CHECK(words(ember::sample_rng(1, 2, 3), 9) == base);
  CHECK(words(ember::sample_rng(2, 2, 3), 9) != base);
  CHECK(words(ember::sample_rng(1, 3, 3), 9) != base);
  CHECK(words(ember::sample_rng(1, 2, 4), 9) != base);
  CHECK(words(ember::sample_rng(1, 2, 3 + (uint64_t{1} << 32)), 9) != base);
  CHECK(words(ember::sample_rng(1, 2, ember::kShuffleStream), 9) != base);

  // Draws use fixed word counts; a copy replays the stream.
  ember::SampleRng r = ember::sample_rng(7, 0, 0);
  const ember::SampleRng copy = r;
  r.uniform();
  CHECK(r.words_used() == 1);
  r.below(10);
  CHECK(r.words_used() == 3);
  ember::SampleRng replay = copy;
  CHECK(replay.next_u32() == ember::SampleRng(copy).next_u32());

  // below(n) covers [0, n) evenly.
  std::array<int, 7> hist{};
  ember::SampleRng s = ember::sample_rng(11, 0, 5);
  for (int i = 0; i < 7000; ++i) {
    const uint64_t v = s.below(7);
    REQUIRE(v < 7);
    ++hist[v];
  }
  for (int c : hist) CHECK((c > 850 && c < 1150));
  CHECK(ember::mul_hi_u64(~uint64_t{0}, ~uint64_t{0}) == ~uint64_t{0} - 1);
  CHECK(ember::mul_hi_u64(uint64_t{1} << 63, 6) == 3);
}

// ---- transforms --------------------------------------------------------------------------------

TEST_CASE("transforms: ToTensor and Normalize known values", "[data]") {
  const Tensor u8 = from_vector<uint8_t>({0, 51, 255, 102}, {1, 2, 2});
  const Tensor f = data::ToTensor()(u8);
  CHECK(f.dtype() == DType::f32);
  CHECK(f.shape() == Shape{1, 2, 2});
  CHECK(f.to_vector<float>() == std::vector<float>{0.0f, 0.2f, 1.0f, 0.4f});
  CHECK(data::ToTensor()(f).is_same(f));  // float passes through
  CHECK_THROWS_WITH(data::ToTensor()(zeros({1, 2, 2}, {.dtype = DType::i64})), Catch::Contains("uint8"));

  // Two channels: (x - mean) / std by hand.
  const Tensor img = from_vector<float>({0.5f, 1.0f, 0.0f, 0.25f}, {2, 1, 2});
  const Tensor n = data::Normalize({0.5, 0.25}, {0.5, 0.25})(img);
  CHECK(n.to_vector<float>() == std::vector<float>{0.0f, 1.0f, -1.0f, 0.0f});
  // One mean/std for every channel; a batch (N, C, H, W) too.
  const Tensor n1 = data::Normalize({0.5}, {2.0})(img.unsqueeze(0));
  CHECK(n1.shape() == Shape{1, 2, 1, 2});
  CHECK(n1.to_vector<float>() == std::vector<float>{0.0f, 0.25f, -0.25f, -0.125f});
  // Fashion-MNIST's statistics on pixel 51: (0.2 - 0.2860) / 0.3530.
  const Tensor px = data::Normalize({0.2860}, {0.3530})(data::ToTensor()(from_vector<uint8_t>({51}, {1, 1, 1})));
  CHECK(px.item<float>() == Approx((0.2 - 0.2860) / 0.3530).epsilon(1e-6));

  CHECK_THROWS_WITH(data::Normalize({0.5, 0.5}, {0.5}), Catch::Contains("mean has 2"));
  CHECK_THROWS_WITH(data::Normalize({0.5}, {0.0}), Catch::Contains("std[0]"));
  CHECK_THROWS_WITH(data::Normalize({0.1, 0.2, 0.3}, {1, 1, 1})(img), Catch::Contains("3 means for 2 channels"));
  CHECK_THROWS_WITH(data::Normalize({0.5}, {0.5})(u8), Catch::Contains("ToTensor first"));
}

TEST_CASE("transforms: RandomCrop with padding on a 3x3 image", "[data]") {
  // 1 2 3 / 4 5 6 / 7 8 9 padded by 1 -> a 5x5 with a zero border; a 3x3 window at (top, left).
  const Tensor img = from_vector<uint8_t>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 3, 3});
  const std::vector<int> padded = {0, 0, 0, 0, 0,  //
                                   0, 1, 2, 3, 0,  //
                                   0, 4, 5, 6, 0,  //
                                   0, 7, 8, 9, 0,  //
                                   0, 0, 0, 0, 0};
  auto window = [&](int top, int left) {
    std::vector<int64_t> w;
    for (int y = 0; y < 3; ++y)
      for (int x = 0; x < 3; ++x) w.push_back(padded[static_cast<size_t>((top + y) * 5 + left + x)]);
    return w;
  };
  CHECK(window(0, 0) == std::vector<int64_t>{0, 0, 0, 0, 1, 2, 0, 4, 5});
  CHECK(window(2, 1) == std::vector<int64_t>{4, 5, 6, 7, 8, 9, 0, 0, 0});

  const data::RandomCrop crop(3, 1);
  std::set<std::pair<int, int>> seen;
  for (uint64_t i = 0; i < 200; ++i) {
    ember::SampleRng rng = ember::sample_rng(5, 0, i);
    ember::SampleRng replay = rng;  // the offsets the crop will draw: top, then left
    const int top = static_cast<int>(replay.below(3)), left = static_cast<int>(replay.below(3));
    const Tensor out = crop(img, rng);
    CHECK(rng.words_used() == 4);
    REQUIRE(out.shape() == Shape{1, 3, 3});
    CHECK(out.dtype() == DType::u8);
    CHECK(out.to_vector<int64_t>() == window(top, left));
    seen.insert({top, left});
  }
  CHECK(seen.size() == 9);  // every offset happens

  // A float image pads with 0.0; a 2x2 crop without padding stays inside.
  ember::SampleRng rng = ember::sample_rng(1, 0, 0);
  const Tensor f = data::RandomCrop(2)(data::ToTensor()(img), rng);
  CHECK(f.shape() == Shape{1, 2, 2});
  const std::vector<float> fv = f.to_vector<float>();
  CHECK(std::find(fv.begin(), fv.end(), 0.0f) == fv.end());
  CHECK(data::RandomCrop(2, 3, 0).name() == "RandomCrop(size=(2, 3), padding=0)");
  CHECK_THROWS_WITH(data::RandomCrop(4)(img, rng), Catch::Contains("larger than the padded image"));
  CHECK_THROWS_WITH(data::RandomCrop(2)(from_vector<uint8_t>({1, 2}, {2}), rng), Catch::Contains("(C, H, W)"));
  CHECK_THROWS_WITH(data::RandomCrop(2)(img), Catch::Contains("is random"));
}

TEST_CASE("transforms: RandomHorizontalFlip", "[data]") {
  const Tensor img = from_vector<uint8_t>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 3, 3});
  ember::SampleRng rng = ember::sample_rng(0, 0, 0);
  CHECK(data::RandomHorizontalFlip(1.0)(img, rng).to_vector<int64_t>() ==
        std::vector<int64_t>{3, 2, 1, 6, 5, 4, 9, 8, 7});
  CHECK(data::RandomHorizontalFlip(0.0)(img, rng).to_vector<int64_t>() == img.to_vector<int64_t>());
  CHECK(rng.words_used() == 2);  // one word each, even for p = 0 and 1
  const Tensor f = from_vector<float>({1, 2, 3, 4}, {2, 1, 2});
  CHECK(data::RandomHorizontalFlip(1.0)(f, rng).to_vector<float>() == std::vector<float>{2, 1, 4, 3});

  int flipped = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    ember::SampleRng r = ember::sample_rng(3, 1, i);
    flipped += data::RandomHorizontalFlip(0.5)(img, r).to_vector<int64_t>()[0] == 3;
  }
  CHECK((flipped > 420 && flipped < 580));
  CHECK_THROWS_WITH(data::RandomHorizontalFlip(1.5), Catch::Contains("1.5"));
}

TEST_CASE("transforms: Compose, and apply_batch fused equals per sample", "[data]") {
  const data::Compose tf{data::RandomCrop(4, 2), data::RandomHorizontalFlip(),
                         data::ToTensor(), data::Normalize({0.1, 0.2, 0.3}, {0.3, 0.4, 0.5})};
  CHECK(tf.is_random());
  CHECK(tf.name().starts_with("Compose(RandomCrop(size=(4, 4), padding=2), RandomHorizontalFlip(p=0.5), ToTensor()"));
  CHECK_FALSE(data::Compose{data::ToTensor()}.is_random());

  const Tensor batch = randint(0, 256, {16, 3, 5, 5}).to(DType::u8);
  std::vector<int64_t> ids(16);
  std::iota(ids.begin(), ids.end(), 100);
  const uint64_t seed = 42;
  const int64_t epoch = 3;

  // The fused chain, a chain that is not fusable (flip before crop; nested Compose), no transform.
  const data::Compose unfusable{data::RandomHorizontalFlip(), data::Compose{data::RandomCrop(4, 2), data::ToTensor()}};
  for (const data::AnyTransform& t : {data::AnyTransform(tf), data::AnyTransform(unfusable), data::AnyTransform()}) {
    const Tensor out = data::apply_batch(t, batch, ids, seed, epoch);
    REQUIRE(out.dim() == 4);
    CHECK(out.dtype() == DType::f32);
    for (int64_t s = 0; s < 16; ++s) {
      ember::SampleRng rng = ember::sample_rng(seed, epoch, static_cast<uint64_t>(ids[static_cast<size_t>(s)]));
      const Tensor one = t ? t->apply(batch[s], rng) : data::ToTensor()(batch[s]);
      CHECK(out[s].to_vector<float>() == one.to_vector<float>());  // bit-identical
    }
  }
  // The result depends on the sample's index, not its row: a reversed batch gives reversed rows.
  const Tensor fwd = data::apply_batch(tf, batch, ids, seed, epoch);
  std::vector<int64_t> rev_ids(ids.rbegin(), ids.rend());
  std::vector<int64_t> rev_rows(16);
  std::iota(rev_rows.rbegin(), rev_rows.rend(), 0);
  const Tensor reversed = data::TensorDataset(batch, zeros({16}, {.dtype = DType::i64})).get_batch(rev_rows).images;
  const Tensor rev = data::apply_batch(tf, reversed, rev_ids, seed, epoch);
  CHECK(rev[0].to_vector<float>() == fwd[15].to_vector<float>());
  CHECK(rev[15].to_vector<float>() == fwd[0].to_vector<float>());
  // A different epoch re-draws the augmentation.
  CHECK(data::apply_batch(tf, batch, ids, seed, epoch + 1).to_vector<float>() != fwd.to_vector<float>());

  CHECK_THROWS_WITH(data::apply_batch(tf, batch, std::vector<int64_t>(3), seed, epoch),
                    Catch::Contains("3 sample indices for a batch of 16"));
  CHECK_THROWS_WITH(data::apply_batch(data::Compose{data::RandomCrop(10)}, batch, ids, seed, epoch),
                    Catch::Contains("larger than the padded image"));
}

// ---- loader ------------------------------------------------------------------------------------

TEST_CASE("loader: batches, drop_last, sequential order, types", "[data]") {
  const data::InMemoryImageDataset ds = numbered_dataset(10, 1, 4, 4);
  data::DataLoader loader(ds, {.batch_size = 3});
  CHECK(loader.size() == 4);
  std::vector<std::vector<int64_t>> ids;
  for (auto& [images, labels] : loader) {
    CHECK(images.dtype() == DType::f32);
    CHECK(labels.dtype() == DType::i64);
    CHECK(images.size(0) == labels.size(0));
    CHECK(images.shape().size() == 4);
    ids.push_back(sample_ids({images, labels}));
  }
  CHECK(ids == std::vector<std::vector<int64_t>>{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9}});
  CHECK(loader.position() == data::LoaderPosition{1, 0});

  data::DataLoader dropping(ds, {.batch_size = 3, .drop_last = true});
  CHECK(dropping.size() == 3);
  int count = 0;
  for (auto& batch : dropping) {
    CHECK(batch.images.shape() == Shape{3, 1, 4, 4});
    ++count;
  }
  CHECK(count == 3);
  CHECK(data::DataLoader(ds, {.batch_size = 5, .drop_last = true}).size() == 2);
  CHECK(data::DataLoader(ds, {.batch_size = 64}).size() == 1);
  // A temporary dataset is owned by the loader.
  data::DataLoader owning(numbered_dataset(5), {.batch_size = 2});
  CHECK(owning.dataset().size() == 5);
  CHECK(sample_ids(*owning.begin()) == std::vector<int64_t>{0, 1});

  CHECK_THROWS_WITH(data::DataLoader(ds, {.batch_size = 0}), Catch::Contains("batch_size 0"));
  const data::InMemoryImageDataset empty_ds(zeros({0, 1, 2, 2}, {.dtype = DType::u8}), zeros({0}, {.dtype = DType::i64}));
  CHECK_THROWS_WITH(data::DataLoader(empty_ds, {.batch_size = 2}), Catch::Contains("empty"));
  CHECK_THROWS_WITH(data::DataLoader(ds, {.batch_size = 11, .drop_last = true}), Catch::Contains("no batch"));
  CHECK_THROWS_AS(loader.set_position({0, 5}), Error);
  CHECK_THROWS_AS(loader.set_position({-1, 0}), Error);
  CHECK_THROWS_AS(loader.batch_indices(0, 4), Error);
}

TEST_CASE("loader: shuffle is a seeded permutation per epoch", "[data]") {
  const data::InMemoryImageDataset ds = numbered_dataset(50);
  const data::LoaderOptions opt{.batch_size = 8, .shuffle = true, .seed = 123};
  data::DataLoader a(ds, opt), b(ds, opt);

  std::vector<std::vector<int64_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    std::vector<int64_t> order;
    for (auto& batch : a) {
      const std::vector<int64_t> ids = sample_ids(batch);
      order.insert(order.end(), ids.begin(), ids.end());
    }
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> expect(50);
    std::iota(expect.begin(), expect.end(), 0);
    CHECK(sorted == expect);  // each index exactly once
    CHECK(order == data::epoch_permutation(50, 123, e));
    epochs.push_back(order);
  }
  CHECK(epochs[0] != epochs[1]);  // a plain epoch loop re-shuffles
  CHECK(epochs[1] != epochs[2]);

  // Same seed, same batches (labels and images); set_epoch picks an epoch's order directly.
  b.set_epoch(1);
  std::vector<int64_t> order_b;
  for (auto& batch : b) {
    const std::vector<int64_t> ids = sample_ids(batch);
    order_b.insert(order_b.end(), ids.begin(), ids.end());
  }
  CHECK(order_b == epochs[1]);
  CHECK(b.position() == data::LoaderPosition{2, 0});

  data::DataLoader other(ds, {.batch_size = 8, .shuffle = true, .seed = 124});
  CHECK(other.batch_indices(0, 0) != a.batch_indices(0, 0));
  CHECK(data::epoch_permutation(1, 9, 0) == std::vector<int64_t>{0});
  CHECK(data::epoch_permutation(0, 9, 0).empty());
}

TEST_CASE("loader: augmentation is reproducible and independent of batch composition", "[data]") {
  // Random pixels so that crops and flips are visible.
  const Tensor pixels = randint(0, 256, {30, 1, 6, 6}).to(DType::u8);
  std::vector<int64_t> labels(30);
  std::iota(labels.begin(), labels.end(), 0);
  const data::InMemoryImageDataset ds(pixels, from_vector(labels));
  const data::Compose tf{data::RandomCrop(6, 2), data::RandomHorizontalFlip(), data::ToTensor(),
                         data::Normalize({0.5}, {0.25})};

  data::DataLoader a(ds, {.batch_size = 7, .shuffle = true, .seed = 9, .transform = tf});
  data::DataLoader b(ds, {.batch_size = 7, .shuffle = true, .seed = 9, .transform = tf});
  data::DataLoader singles(ds, {.batch_size = 1, .shuffle = false, .seed = 9, .transform = tf});
  for (int e = 0; e < 2; ++e) {
    std::vector<Tensor> per_sample(30);
    for (auto& [images, lab] : singles) per_sample[static_cast<size_t>(lab.item<int64_t>())] = images[0];
    auto it_b = b.begin();
    for (auto& [images, lab] : a) {
      CHECK(images.to_vector<float>() == it_b->images.to_vector<float>());
      CHECK(lab.to_vector<int64_t>() == it_b->labels.to_vector<int64_t>());
      const std::vector<int64_t> ids = lab.to_vector<int64_t>();
      for (size_t r = 0; r < ids.size(); ++r) {
        CHECK(images[static_cast<int64_t>(r)].to_vector<float>() ==
              per_sample[static_cast<size_t>(ids[r])].to_vector<float>());
        // ... and equals the transform run by hand with the sample's stream.
        ember::SampleRng rng = ember::sample_rng(9, static_cast<uint64_t>(e), static_cast<uint64_t>(ids[r]));
        CHECK(images[static_cast<int64_t>(r)].to_vector<float>() == tf(ds.get(ids[r]).image, rng).to_vector<float>());
      }
      ++it_b;
    }
  }
  // Epochs differ in augmentation, not only in order.
  CHECK(a.load_batch(0, 0).images.to_vector<float>() != a.load_batch(1, 0).images.to_vector<float>());
}

TEST_CASE("loader: resume from a saved position gives the same remaining batches", "[data]") {
  const data::InMemoryImageDataset ds = numbered_dataset(23, 1, 5, 5);
  const data::LoaderOptions opt{.batch_size = 4, .shuffle = true, .seed = 77,
                                .transform = data::Compose{data::RandomCrop(5, 1), data::RandomHorizontalFlip(),
                                                           data::ToTensor()}};
  // The reference run: 3 epochs straight through.
  data::DataLoader ref(ds, opt);
  CHECK(ref.size() == 6);
  const std::vector<data::Batch> all = testing::run_epochs(ref, 3);
  REQUIRE(all.size() == 18);

  // A run that checkpoints inside the loop body after batch 2 of epoch 1, then "crashes".
  const data::LoaderPosition saved = testing::position_at_crash(ds, opt, {1, 3});
  CHECK(saved == data::LoaderPosition{1, 3});

  // A fresh process: a new loader set to the saved position continues exactly.
  data::DataLoader resumed(ds, opt);
  resumed.set_position(saved);
  const std::vector<data::Batch> rest = testing::run_epochs(resumed, 2);
  REQUIRE(rest.size() == 18 - 9);
  for (size_t i = 0; i < rest.size(); ++i) {
    CHECK(rest[i].labels.to_vector<int64_t>() == all[9 + i].labels.to_vector<int64_t>());
    CHECK(rest[i].images.to_vector<float>() == all[9 + i].images.to_vector<float>());
  }

  // Saved inside the last batch of an epoch: the position is already the next epoch's start.
  data::DataLoader last(ds, opt);
  data::LoaderPosition inside_last;
  for (auto& batch : last) {
    (void)batch;
    inside_last = last.position();
  }
  CHECK(inside_last == data::LoaderPosition{1, 0});
  // (epoch, size()) means that epoch is done.
  last.set_position({4, last.size()});
  CHECK(last.position() == data::LoaderPosition{5, 0});

  // An early break leaves the cursor on the next batch: the next loop continues the epoch.
  data::DataLoader cursor(ds, opt);
  for (auto& batch : cursor) {
    (void)batch;
    if (cursor.position().batch == 2) break;
  }
  std::vector<int64_t> continued;
  for (auto& batch : cursor) {
    const std::vector<int64_t> l = batch.labels.to_vector<int64_t>();
    continued.insert(continued.end(), l.begin(), l.end());
  }
  std::vector<int64_t> expect;
  for (size_t i = 2; i < 6; ++i) {
    const std::vector<int64_t> l = all[i].labels.to_vector<int64_t>();
    expect.insert(expect.end(), l.begin(), l.end());
  }
  CHECK(continued == expect);
}
