// Images on disk: decode_image on real files written here by each format's own encoder (stb_image_write,
// TurboJPEG, libwebp, libtiff), with exact pixels for the lossless formats and a tolerance for
// JPEG / lossy WebP; error messages for bad files; ImageFolder's class and sample order on a
// tricky tree (expected order computed by hand from torchvision's make_dataset); CIFAR batches;
// list files.

#include <catch2/catch.hpp>

#include <tiffio.h>
#include <turbojpeg.h>
#include <sys/stat.h>
#include <unistd.h>
#include <webp/encode.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ember/data/cifar.h>
#include <ember/data/image.h>
#include <ember/data/image_folder.h>
#include <ember/data/list_file.h>

#include "stb_write.h"
#include "test_util.h"

using namespace ember;
using namespace ember::data;
using ember::testing::error_of;
namespace fs = std::filesystem;

namespace {

// Every temporary directory of this file: testing::TempDir with this file's prefix.
struct TempDir : ember::testing::TempDir {
  TempDir() : ember::testing::TempDir("ember_test_images") {}
};

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

void truncate_file(const fs::path& p, size_t keep) {
  std::vector<uint8_t> b = read_bytes(p);
  REQUIRE(b.size() > keep);
  b.resize(keep);
  write_bytes(p, b);
}

// A deterministic w x h image with `comp` interleaved channels.
std::vector<uint8_t> pattern(int w, int h, int comp) {
  std::vector<uint8_t> v(static_cast<size_t>(w) * h * comp);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
  return v;
}

// A smooth RGB gradient (JPEG reproduces it closely).
std::vector<uint8_t> smooth(int w, int h) {
  std::vector<uint8_t> v(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &v[(static_cast<size_t>(y) * w + x) * 3];
      p[0] = static_cast<uint8_t>(40 + 150 * x / w);
      p[1] = static_cast<uint8_t>(60 + 120 * y / h);
      p[2] = static_cast<uint8_t>(100 + 50 * (x + y) / (w + h));
    }
  return v;
}

// The CHW RGB tensor we expect from interleaved pixels with `comp` channels (gray replicated,
// alpha dropped).
std::vector<double> expected_rgb(const std::vector<uint8_t>& px, int w, int h, int comp) {
  const size_t hw = static_cast<size_t>(w) * h;
  std::vector<double> out(3 * hw);
  for (size_t i = 0; i < hw; ++i)
    for (int c = 0; c < 3; ++c) out[c * hw + i] = comp >= 3 ? px[i * comp + c] : px[i * comp];
  return out;
}

void write_png(const fs::path& p, int w, int h, int comp, const std::vector<uint8_t>& px) {
  fs::create_directories(p.parent_path());
  REQUIRE(stbi_write_png(p.c_str(), w, h, comp, px.data(), w * comp) != 0);
}

void write_bmp(const fs::path& p, int w, int h, const std::vector<uint8_t>& px) {
  fs::create_directories(p.parent_path());
  REQUIRE(stbi_write_bmp(p.c_str(), w, h, 3, px.data()) != 0);
}

void write_jpeg(const fs::path& p, int w, int h, const std::vector<uint8_t>& rgb, int quality = 95) {
  tjhandle tj = tjInitCompress();
  REQUIRE(tj != nullptr);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(tj, rgb.data(), w, 0, h, TJPF_RGB, &buf, &size, TJSAMP_444, quality, 0);
  tjDestroy(tj);
  REQUIRE(rc == 0);
  write_bytes(p, std::vector<uint8_t>(buf, buf + size));
  tjFree(buf);
}

void write_webp(const fs::path& p, int w, int h, const std::vector<uint8_t>& rgb, bool lossless) {
  uint8_t* out = nullptr;
  const size_t size = lossless ? WebPEncodeLosslessRGB(rgb.data(), w, h, w * 3, &out)
                               : WebPEncodeRGB(rgb.data(), w, h, w * 3, 90.0f, &out);
  REQUIRE(size > 0);
  write_bytes(p, std::vector<uint8_t>(out, out + size));
  WebPFree(out);
}

// An 8-bit (bits 8) or 16-bit (bits 16, samples = value * 257) RGB TIFF, or an 8-bit palette TIFF
// when `palette` is given (px are then indices).
void write_tiff(const fs::path& p, int w, int h, const std::vector<uint8_t>& px, int bits = 8,
                const std::vector<std::array<uint8_t, 3>>* palette = nullptr) {
  fs::create_directories(p.parent_path());
  TIFF* tif = TIFFOpen(p.c_str(), "w");
  REQUIRE(tif != nullptr);
  const int spp = palette ? 1 : 3;
  TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, w);
  TIFFSetField(tif, TIFFTAG_IMAGELENGTH, h);
  TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, spp);
  TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, bits);
  TIFFSetField(tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
  TIFFSetField(tif, TIFFTAG_ORIENTATION, ORIENTATION_TOPLEFT);
  TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, palette ? PHOTOMETRIC_PALETTE : PHOTOMETRIC_RGB);
  TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, 1);
  std::vector<uint16_t> cmap[3];
  if (palette) {
    for (auto& m : cmap) m.assign(256, 0);
    for (size_t i = 0; i < palette->size(); ++i)
      for (int c = 0; c < 3; ++c) cmap[c][i] = static_cast<uint16_t>((*palette)[i][c] * 257);
    TIFFSetField(tif, TIFFTAG_COLORMAP, cmap[0].data(), cmap[1].data(), cmap[2].data());
  }
  const size_t row = static_cast<size_t>(w) * spp;
  for (int y = 0; y < h; ++y) {
    if (bits == 16) {
      std::vector<uint16_t> line(row);
      for (size_t i = 0; i < row; ++i) line[i] = static_cast<uint16_t>(px[y * row + i] * 257);
      REQUIRE(TIFFWriteScanline(tif, line.data(), y, 0) == 1);
    } else {
      std::vector<uint8_t> line(px.begin() + y * row, px.begin() + (y + 1) * row);
      REQUIRE(TIFFWriteScanline(tif, line.data(), y, 0) == 1);
    }
  }
  TIFFClose(tif);
}

std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

}  // namespace

TEST_CASE("decode_image: PNG gray, gray+alpha, RGB, RGBA and BMP give exact pixels", "[images]") {
  TempDir tmp;
  const int w = 5, h = 3;
  for (int comp : {1, 2, 3, 4}) {
    INFO("PNG with " << comp << " channels");
    const std::vector<uint8_t> px = pattern(w, h, comp);
    const fs::path p = tmp.path / ("img" + std::to_string(comp) + ".png");
    write_png(p, w, h, comp, px);
    const Tensor t = decode_image(p.string());
    CHECK(t.dtype() == DType::u8);
    CHECK(t.shape() == Shape{3, h, w});
    CHECK(vals(t) == expected_rgb(px, w, h, comp));
  }
  SECTION("BMP") {
    const std::vector<uint8_t> px = pattern(w, h, 3);
    write_bmp(tmp.path / "a.bmp", w, h, px);
    CHECK(vals(decode_image((tmp.path / "a.bmp").string())) == expected_rgb(px, w, h, 3));
  }
  SECTION("PPM and PGM written by hand") {
    std::vector<uint8_t> ppm = {'P', '6', '\n', '2', ' ', '1', '\n', '2', '5', '5', '\n', 1, 2, 3, 250, 251, 252};
    write_bytes(tmp.path / "a.ppm", ppm);
    CHECK(vals(decode_image((tmp.path / "a.ppm").string())) == std::vector<double>{1, 250, 2, 251, 3, 252});
    std::vector<uint8_t> pgm = {'P', '5', '\n', '2', ' ', '1', '\n', '2', '5', '5', '\n', 7, 200};
    write_bytes(tmp.path / "a.pgm", pgm);
    const Tensor g = decode_image((tmp.path / "a.pgm").string(), ImageMode::Gray);
    CHECK(g.shape() == Shape{1, 1, 2});
    CHECK(vals(g) == std::vector<double>{7, 200});
  }
  SECTION("Gray mode: PIL's L = (19595 R + 38470 G + 7471 B + 0x8000) >> 16") {
    const std::vector<uint8_t> px = pattern(w, h, 3);
    write_png(tmp.path / "rgb.png", w, h, 3, px);
    const Tensor g = decode_image((tmp.path / "rgb.png").string(), ImageMode::Gray);
    REQUIRE(g.shape() == Shape{1, h, w});
    std::vector<double> want;
    for (int i = 0; i < w * h; ++i)
      want.push_back((px[3 * i] * 19595u + px[3 * i + 1] * 38470u + px[3 * i + 2] * 7471u + 0x8000u) >> 16);
    CHECK(vals(g) == want);
  }
  SECTION("the format comes from the bytes, not the name") {
    const std::vector<uint8_t> px = pattern(w, h, 3);
    write_png(tmp.path / "really_a_png.jpg", w, h, 3, px);
    CHECK(vals(decode_image((tmp.path / "really_a_png.jpg").string())) == expected_rgb(px, w, h, 3));
    CHECK(detect_image_format(read_bytes(tmp.path / "really_a_png.jpg")) == ImageFormat::png);
  }
}

TEST_CASE("decode_image: JPEG within tolerance, draft scaling picks the largest DCT reduction", "[images]") {
  TempDir tmp;
  const int w = 64, h = 48;
  const std::vector<uint8_t> px = smooth(w, h);
  const fs::path p = tmp.path / "a.jpg";
  write_jpeg(p, w, h, px);
  const Tensor t = decode_image(p.string());
  REQUIRE(t.shape() == Shape{3, h, w});
  const std::vector<double> got = vals(t), want = expected_rgb(px, w, h, 3);
  double max_err = 0;
  for (size_t i = 0; i < got.size(); ++i) max_err = std::max(max_err, std::abs(got[i] - want[i]));
  CHECK(max_err <= 6);

  // PIL's draft factors 1/2, 1/4, 1/8: for 64x48 and min 16x12, 1/4 is the smallest that fits -> 16x12.
  CHECK(decode_image(p.string(), DecodeOptions{.min_height = 12, .min_width = 16}).shape() == Shape{3, 12, 16});
  // min width 17: 1/4 gives 16 < 17, so 1/2 (libjpeg-turbo's 3/8 would fit, but is no faster).
  CHECK(decode_image(p.string(), DecodeOptions{.min_height = 1, .min_width = 17}).shape() == Shape{3, 24, 32});
  // The interleaved layout holds the same pixels.
  const Tensor hwc = decode_image(p.string(), DecodeOptions{.layout = ImageLayout::HWC});
  REQUIRE(hwc.shape() == Shape{h, w, 3});
  CHECK(vals(hwc.permute({2, 0, 1}).contiguous()) == vals(t));
  // Asking for more than the image has: full size.
  CHECK(decode_image(p.string(), DecodeOptions{.min_height = 100, .min_width = 100}).shape() == Shape{3, h, w});
  // Drafts do not touch other formats.
  write_png(tmp.path / "a.png", w, h, 3, px);
  CHECK(decode_image((tmp.path / "a.png").string(), DecodeOptions{.min_height = 6, .min_width = 8}).shape() ==
        Shape{3, h, w});

  SECTION("truncated JPEG is an error naming the file") {
    truncate_file(p, read_bytes(p).size() / 2);
    const std::string msg = error_of([&] { decode_image(p.string()); });
    CHECK_THAT(msg, Catch::Contains(p.string()) && Catch::Contains("JPEG"));
  }
}

TEST_CASE("decode_image: WebP lossless exact, lossy close, TIFF RGB, 16-bit and palette exact", "[images]") {
  TempDir tmp;
  const int w = 6, h = 4;
  const std::vector<uint8_t> px = pattern(w, h, 3);
  write_webp(tmp.path / "lossless.webp", w, h, px, true);
  CHECK(vals(decode_image((tmp.path / "lossless.webp").string())) == expected_rgb(px, w, h, 3));

  const std::vector<uint8_t> sm = smooth(32, 32);
  write_webp(tmp.path / "lossy.webp", 32, 32, sm, false);
  const std::vector<double> got = vals(decode_image((tmp.path / "lossy.webp").string()));
  const std::vector<double> want = expected_rgb(sm, 32, 32, 3);
  REQUIRE(got.size() == want.size());
  double sum_err = 0;
  for (size_t i = 0; i < got.size(); ++i) sum_err += std::abs(got[i] - want[i]);
  CHECK(sum_err / static_cast<double>(got.size()) < 4);

  write_tiff(tmp.path / "rgb8.tif", w, h, px, 8);
  CHECK(vals(decode_image((tmp.path / "rgb8.tif").string())) == expected_rgb(px, w, h, 3));
  write_tiff(tmp.path / "rgb16.tiff", w, h, px, 16);
  CHECK(vals(decode_image((tmp.path / "rgb16.tiff").string())) == expected_rgb(px, w, h, 3));

  const std::vector<std::array<uint8_t, 3>> palette = {{10, 20, 30}, {200, 100, 0}, {255, 255, 255}};
  const std::vector<uint8_t> idx = {0, 1, 2, 1, 0, 2};  // 3 x 2
  write_tiff(tmp.path / "pal.tif", 3, 2, idx, 8, &palette);
  const Tensor t = decode_image((tmp.path / "pal.tif").string());
  REQUIRE(t.shape() == Shape{3, 2, 3});
  CHECK(vals(t) == std::vector<double>{10, 200, 255, 200, 10, 255, 20, 100, 255, 100, 20, 255,
                                       30, 0, 255, 0, 30, 255});
}

TEST_CASE("decode_image: bad files throw ember::Error naming the file", "[images]") {
  TempDir tmp;
  const int w = 16, h = 16;
  const std::vector<uint8_t> px = pattern(w, h, 3);
  auto check_error = [](const fs::path& p, const std::string& what) {
    INFO(p.string());
    const std::string msg = error_of([&] { decode_image(p.string()); });
    CHECK_THAT(msg, Catch::Contains(p.string()) && Catch::Contains(what));
  };
  check_error(tmp.path / "missing.png", "no such file");
  check_error(tmp.path, "is a directory");
  write_bytes(tmp.path / "empty.png", {});
  check_error(tmp.path / "empty.png", "empty file");
  write_bytes(tmp.path / "text.png", std::vector<uint8_t>{'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'});
  check_error(tmp.path / "text.png", "unsupported");

  write_png(tmp.path / "trunc.png", w, h, 3, px);
  truncate_file(tmp.path / "trunc.png", 40);
  check_error(tmp.path / "trunc.png", "PNG");
  write_bmp(tmp.path / "trunc.bmp", w, h, px);
  truncate_file(tmp.path / "trunc.bmp", 100);
  check_error(tmp.path / "trunc.bmp", "BMP");
  write_bytes(tmp.path / "trunc.ppm", {'P', '6', '\n', '4', ' ', '4', '\n', '2', '5', '5', '\n', 1, 2, 3});
  check_error(tmp.path / "trunc.ppm", "PNM");
  write_webp(tmp.path / "trunc.webp", w, h, px, true);
  truncate_file(tmp.path / "trunc.webp", read_bytes(tmp.path / "trunc.webp").size() / 2);
  check_error(tmp.path / "trunc.webp", "WebP");
  write_tiff(tmp.path / "trunc.tif", w, h, px);
  truncate_file(tmp.path / "trunc.tif", 200);
  check_error(tmp.path / "trunc.tif", "TIFF");
  // A JPEG whose entropy-coded data is garbage.
  write_jpeg(tmp.path / "corrupt.jpg", w, h, px);
  std::vector<uint8_t> b = read_bytes(tmp.path / "corrupt.jpg");
  b.resize(20);  // SOI + part of APP0: no frame header
  write_bytes(tmp.path / "corrupt.jpg", b);
  check_error(tmp.path / "corrupt.jpg", "JPEG");
}

TEST_CASE("decode_image: FIFOs, devices, huge files and hostile headers are refused before the body is read",
          "[images]") {
  TempDir tmp;
  auto message = [](const fs::path& p, const DecodeOptions& o = {}) {
    return error_of([&] { decode_image(p.string(), o); });
  };
  // Opening a FIFO blocks until a writer comes: it is refused unopened, as a device is.
  REQUIRE(::mkfifo((tmp.path / "x.jpg").c_str(), 0600) == 0);
  CHECK(message(tmp.path / "x.jpg") ==
        (tmp.path / "x.jpg").string() + ": is a FIFO (named pipe), not a regular file; ember reads regular files only");
  fs::create_symlink("/dev/zero", tmp.path / "zero.png");
  CHECK(message(tmp.path / "zero.png") ==
        (tmp.path / "zero.png").string() + ": is a character device, not a regular file; ember reads regular files only");
  CHECK_THAT(error_of([&] { probe_image((tmp.path / "x.jpg").string()); }), Catch::Contains("is a FIFO"));
  // Larger than the cap: refused by its size (a sparse file: nothing is read).
  write_bytes(tmp.path / "huge.jpg", {0xFF, 0xD8, 0xFF});
  fs::resize_file(tmp.path / "huge.jpg", (uint64_t{1} << 30) + 1);
  CHECK(message(tmp.path / "huge.jpg") == (tmp.path / "huge.jpg").string() +
                                              ": 1073741825 bytes is more than the limit of 1073741824 bytes for an "
                                              "image file: the file is not an image, or damaged");
  CHECK_THAT(message(tmp.path / "huge.jpg", {.max_file_bytes = 1000}), Catch::Contains("limit of 1000 bytes"));
  // Under the cap but not an image, or an image header asking for too many pixels: refused by
  // the first 64 KiB, before the rest (512 MiB of a sparse file) is read.
  std::vector<uint8_t> text(100, 'x');
  write_bytes(tmp.path / "text.png", text);
  fs::resize_file(tmp.path / "text.png", uint64_t{512} << 20);
  CHECK_THAT(message(tmp.path / "text.png"), Catch::StartsWith((tmp.path / "text.png").string() +
                                                               ": unsupported or unrecognized image format"));
  const std::vector<uint8_t> px = pattern(4, 4, 3);
  write_png(tmp.path / "wide.png", 4, 4, 3, px);
  std::vector<uint8_t> png = read_bytes(tmp.path / "wide.png");
  png[16] = 0, png[17] = 0, png[18] = 0x9C, png[19] = 0x40;  // IHDR width 40000
  write_bytes(tmp.path / "wide.png", png);
  fs::resize_file(tmp.path / "wide.png", uint64_t{512} << 20);
  CHECK(message(tmp.path / "wide.png") ==
        (tmp.path / "wide.png").string() + ": PNG image of 40000x4 has a side longer than the limit of 32768 pixels");
  CHECK_THAT(message(tmp.path / "wide.png", {.max_pixels = 1000}), Catch::Contains("limit of 32768"));
  // The same header in a small file takes the decoder's path and says the same.
  write_bytes(tmp.path / "wide_small.png", png);
  CHECK_THAT(message(tmp.path / "wide_small.png"), Catch::Contains("side longer than the limit of 32768 pixels"));
}

TEST_CASE("ImageFolder: torchvision's class and sample order on a tricky tree", "[images]") {
  TempDir tmp;
  const fs::path root = tmp.path / "root";
  const fs::path ext = tmp.path / "outside";  // reached through the symlink root/banana
  const std::vector<uint8_t> px = pattern(4, 4, 3);
  // Classes: ".ipynb_checkpoints" (0x2E) < "Zebra" (0x5A) < "apple" < "banana" by bytes.
  write_png(root / ".ipynb_checkpoints" / "k.png", 4, 4, 3, px);
  write_png(root / "Zebra" / "z2.PNG", 4, 4, 3, px);
  write_png(root / "Zebra" / "z1.png", 4, 4, 3, px);
  write_jpeg(root / "apple" / "a.JPG", 4, 4, px);
  write_jpeg(root / "apple" / "B.jpeg", 4, 4, px);
  write_png(root / "apple" / ".hidden.png", 4, 4, 3, px);
  write_bytes(root / "apple" / "notes.txt", {'h', 'i'});
  write_png(root / "apple" / ".ipynb_checkpoints" / "c.png", 4, 4, 3, px);
  write_png(root / "apple" / "sub" / "x.png", 4, 4, 3, px);
  write_png(root / "apple" / "sub-dir" / "y.png", 4, 4, 3, px);
  write_webp(root / "apple" / "sub" / "deep" / "w.webp", 4, 4, px, true);
  write_bmp(ext / "e1.bmp", 4, 4, px);
  write_tiff(ext / "nested" / "e2.tif", 4, 4, px);
  fs::create_directory_symlink(ext, root / "banana");
  write_bytes(root / "readme.txt", {'x'});  // a file at the root is not a class

  auto rel = [&](const ImageFolder& ds) {
    std::vector<std::pair<std::string, int64_t>> out;
    for (const ImageSample& s : ds.samples()) out.emplace_back(s.path.lexically_relative(root).generic_string(), s.label);
    return out;
  };
  using Order = std::vector<std::pair<std::string, int64_t>>;

  SECTION("default: hidden names included, as torchvision") {
    const ImageFolder ds(root);
    CHECK(ds.classes() == std::vector<std::string>{".ipynb_checkpoints", "Zebra", "apple", "banana"});
    CHECK(ds.class_to_idx().at("apple") == 2);
    // apple: its own files by bytes (".hidden.png" < "B.jpeg" < "a.JPG"; notes.txt is not an
    // image), then directories by whole path: ".ipynb_checkpoints" < "sub" < "sub-dir" < "sub/deep"
    // ('-' 0x2D sorts before '/' 0x2F, so sub-dir comes between sub and sub/deep).
    const Order want = {{".ipynb_checkpoints/k.png", 0},
                        {"Zebra/z1.png", 1},
                        {"Zebra/z2.PNG", 1},
                        {"apple/.hidden.png", 2},
                        {"apple/B.jpeg", 2},
                        {"apple/a.JPG", 2},
                        {"apple/.ipynb_checkpoints/c.png", 2},
                        {"apple/sub/x.png", 2},
                        {"apple/sub-dir/y.png", 2},
                        {"apple/sub/deep/w.webp", 2},
                        {"banana/e1.bmp", 3},
                        {"banana/nested/e2.tif", 3}};
    CHECK(rel(ds) == want);
    REQUIRE(ds.size() == 12);
    for (int64_t i = 0; i < ds.size(); ++i) {
      const Example e = ds.get(i);
      CHECK(e.image.shape() == Shape{3, 4, 4});
      CHECK(e.label == want[static_cast<size_t>(i)].second);
    }
    CHECK_THAT(error_of([&] { ds.get(12); }), Catch::Contains("out of range"));
  }
  SECTION("skip_hidden drops hidden classes, directories and files") {
    const ImageFolder ds(root, {.skip_hidden = true});
    CHECK(ds.classes() == std::vector<std::string>{"Zebra", "apple", "banana"});
    const Order want = {{"Zebra/z1.png", 0},        {"Zebra/z2.PNG", 0},        {"apple/B.jpeg", 1},
                        {"apple/a.JPG", 1},         {"apple/sub/x.png", 1},     {"apple/sub-dir/y.png", 1},
                        {"apple/sub/deep/w.webp", 1}, {"banana/e1.bmp", 2}, {"banana/nested/e2.tif", 2}};
    CHECK(rel(ds) == want);
    const Example gray = ImageFolder(root, {.decode = {.mode = ImageMode::Gray}, .skip_hidden = true}).get(0);
    CHECK(gray.image.shape() == Shape{1, 4, 4});
  }
  SECTION("a corrupt file fails at get(), naming it") {
    write_bytes(root / "Zebra" / "z1.png", {0x89, 'P', 'N', 'G'});
    const ImageFolder ds(root);
    CHECK_THAT(error_of([&] { ds.get(1); }), Catch::Contains((root / "Zebra" / "z1.png").string()));
  }
}

TEST_CASE("ImageFolder: errors name the path", "[images]") {
  TempDir tmp;
  CHECK_THAT(error_of([&] { ImageFolder(tmp.path / "nope"); }),
             Catch::Contains((tmp.path / "nope").string()) && Catch::Contains("does not exist"));
  write_bytes(tmp.path / "file.png", {1});
  CHECK_THAT(error_of([&] { ImageFolder(tmp.path / "file.png"); }), Catch::Contains("not a directory"));
  CHECK_THAT(error_of([&] { ImageFolder(tmp.path); }),
             Catch::Contains(tmp.path.string()) && Catch::Contains("no class directories"));
  write_png(tmp.path / "good" / "a.png", 2, 2, 3, pattern(2, 2, 3));
  write_bytes(tmp.path / "empty" / "a.txt", {1});
  fs::create_directories(tmp.path / "bare");
  CHECK_THAT(error_of([&] { ImageFolder(tmp.path); }),
             Catch::Contains(tmp.path.string()) && Catch::Contains("found no valid file for the classes bare, empty"));
}

TEST_CASE("CIFAR-10 and CIFAR-100 binary batches round trip", "[images]") {
  TempDir tmp;
  auto record = [](std::vector<uint8_t> labels, uint8_t seed) {
    for (int i = 0; i < 3072; ++i) labels.push_back(static_cast<uint8_t>(seed + i * 7));
    return labels;
  };
  std::vector<uint8_t> train;
  for (int b = 1; b <= 5; ++b) {
    std::vector<uint8_t> file = record({static_cast<uint8_t>(b)}, static_cast<uint8_t>(b));
    if (b == 2) {
      const std::vector<uint8_t> more = record({9}, 99);
      file.insert(file.end(), more.begin(), more.end());
    }
    write_bytes(tmp.path / ("data_batch_" + std::to_string(b) + ".bin"), file);
  }
  write_bytes(tmp.path / "test_batch.bin", record({7}, 3));
  std::ofstream(tmp.path / "batches.meta.txt") << "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n";

  const InMemoryImageDataset tr = cifar10(tmp.path, Split::train);
  REQUIRE(tr.size() == 6);
  CHECK(tr.images().shape() == Shape{6, 3, 32, 32});
  CHECK(tr.labels().to_vector<int64_t>() == std::vector<int64_t>{1, 2, 9, 3, 4, 5});
  CHECK(tr.classes().at(9) == "truck");
  const Example e = tr.get(2);
  CHECK(e.image.to_vector<int>()[0] == 99);
  CHECK(e.image.to_vector<int>()[1024] == static_cast<uint8_t>(99 + 1024 * 7));  // first green byte
  CHECK(cifar10(tmp.path, Split::test).labels().to_vector<int64_t>() == std::vector<int64_t>{7});

  write_bytes(tmp.path / "test_batch.bin", record({10}, 0));
  CHECK_THAT(error_of([&] { cifar10(tmp.path, Split::test); }),
             Catch::Contains("test_batch.bin") && Catch::Contains("label 10"));
  truncate_file(tmp.path / "data_batch_3.bin", 100);
  CHECK_THAT(error_of([&] { cifar10(tmp.path, Split::train); }),
             Catch::Contains("data_batch_3.bin") && Catch::Contains("whole number"));
  write_bytes(tmp.path / "data_batch_3.bin", record({3}, 3));
  fs::remove(tmp.path / "data_batch_5.bin");
  CHECK_THAT(error_of([&] { cifar10(tmp.path, Split::train); }), Catch::Contains("data_batch_5.bin"));

  std::vector<uint8_t> c100 = record({3, 42}, 5);
  const std::vector<uint8_t> r2 = record({19, 99}, 6);
  c100.insert(c100.end(), r2.begin(), r2.end());
  write_bytes(tmp.path / "train.bin", c100);
  CHECK(cifar100(tmp.path, Split::train).labels().to_vector<int64_t>() == std::vector<int64_t>{42, 99});
  CHECK(cifar100(tmp.path, Split::train, Cifar100Labels::coarse).labels().to_vector<int64_t>() ==
        std::vector<int64_t>{3, 19});
  std::ofstream(tmp.path / "coarse_label_names.txt") << "only\ntwo\n";
  CHECK_THAT(error_of([&] { cifar100(tmp.path, Split::train, Cifar100Labels::coarse); }),
             Catch::Contains("coarse_label_names.txt") && Catch::Contains("expected 20"));
  CHECK_THAT(error_of([&] { cifar100(tmp.path, Split::test); }), Catch::Contains("test.bin"));
}

TEST_CASE("ListFileDataset: relative paths, comments, line-numbered errors", "[images]") {
  TempDir tmp;
  const std::vector<uint8_t> px = pattern(3, 2, 3);
  write_png(tmp.path / "imgs" / "a,b.png", 3, 2, 3, px);
  write_bmp(tmp.path / "abs.bmp", 3, 2, px);
  const fs::path list = tmp.path / "lists" / "train.txt";
  fs::create_directories(list.parent_path());
  std::ofstream(list) << "# path,label\n../imgs/a,b.png, 4\r\n\n" << (tmp.path / "abs.bmp").string() << ",0\n";
  const ListFileDataset ds(list);
  REQUIRE(ds.size() == 2);
  CHECK(ds.samples()[0].path == list.parent_path() / "../imgs/a,b.png");
  const Example e = ds.get(0);
  CHECK(e.label == 4);
  CHECK(ember::testing::vec(e.image) == expected_rgb(px, 3, 2, 3));
  CHECK(ds.get(1).label == 0);

  auto error_for = [&](const std::string& text) {
    std::ofstream(list) << text;
    return error_of([&] { ListFileDataset d(list); });
  };
  CHECK_THAT(error_for("a.png,1\nb.png\n"), Catch::Contains(list.string() + ":2:") && Catch::Contains("path,label"));
  CHECK_THAT(error_for("a.png,1\n\nb.png,x\n"), Catch::Contains(list.string() + ":3:") && Catch::Contains("\"x\""));
  CHECK_THAT(error_for("a.png,-1\n"), Catch::Contains(list.string() + ":1:"));
  CHECK_THAT(error_for(" ,1\n"), Catch::Contains(list.string() + ":1: empty path"));
  CHECK_THAT(error_for("# nothing\n"), Catch::Contains("names no sample"));
  CHECK_THAT(error_of([&] { ListFileDataset d(tmp.path / "none.txt"); }), Catch::Contains("none.txt"));
  std::ofstream(list) << "missing.png,1\n";
  CHECK_THAT(error_of([&] { ListFileDataset(list).get(0); }), Catch::Contains("missing.png"));
}
