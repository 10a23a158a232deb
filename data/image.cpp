// Image decoding (contract in image.h). Every decoder fills one interleaved RGB buffer (H, W, 3);
// finish() turns it into the (C, H, W) tensor, converting to gray when asked. Library handles are
// held by small RAII owners so an exception on any path frees them.

#include "image.h"

#include <tiffio.h>
#include <turbojpeg.h>
#include <webp/decode.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include "../io/atomic_file.h"

// stb_image's implementation lives here, once, with its symbols static so nothing clashes with an
// application that compiles its own copy. Only the formats image.h promises are compiled in.
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#define STBI_NO_STDIO
#define STBI_NO_HDR
#define STBI_NO_JPEG  // JPEG is TurboJPEG's, CMYK included
#define STBI_NO_PSD
#define STBI_NO_PIC
#define STBI_NO_LINEAR
#define STBI_FAILURE_USERMSG
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#endif
#include <stb_image.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

namespace ember::data {
namespace {

namespace fs = std::filesystem;

// Images larger than this many pixels are refused before any allocation (a corrupt header must
// not ask for terabytes). 2^31 pixels is a 46k x 46k image.
constexpr int64_t kMaxPixels = int64_t{1} << 31;

// An interleaved 8-bit RGB image, row-major (H, W, 3), in a tensor so the HWC result needs no copy.
struct RgbImage {
  int64_t height = 0;
  int64_t width = 0;
  Tensor hwc;  // u8 (H, W, 3)
  RgbImage() = default;
  RgbImage(int64_t h, int64_t w) : height(h), width(w), hwc(empty({h, w, 3}, {.dtype = DType::u8})) {}
  uint8_t* data() { return hwc.data_ptr<uint8_t>(); }
  const uint8_t* data() const { return hwc.data_ptr<uint8_t>(); }
};

void check_dims(const std::string& name, const char* format, int64_t height, int64_t width, int64_t max_pixels) {
  EMBER_CHECK(height > 0 && width > 0, name, ": ", format, " image has invalid size ", width, "x", height);
  EMBER_CHECK(height <= kMaxImageSide && width <= kMaxImageSide, name, ": ", format, " image of ", width, "x", height,
              " has a side longer than the limit of ", kMaxImageSide, " pixels");
  const int64_t limit = std::min(max_pixels, kMaxPixels);
  EMBER_CHECK(height <= limit / width, name, ": ", format, " image of ", width, "x", height,
              " is larger than the limit of ", limit, " pixels");
}

// ---- stb_image: PNG, BMP, GIF, PPM/PGM, TGA (and CMYK JPEGs) ------------------------------------

// Width and height straight from the header of the formats stb_image decodes, so that the size
// limits are checked (with their own message) before stb_image looks at the data; stb_image's own
// limits would otherwise report a huge image as "corrupt". {0, 0} when the header is too short.
std::pair<int64_t, int64_t> stb_header_dims(std::span<const uint8_t> b, ImageFormat format) {
  auto be32 = [&](size_t at) { return (uint32_t{b[at]} << 24) | (uint32_t{b[at + 1]} << 16) | (uint32_t{b[at + 2]} << 8) | b[at + 3]; };
  auto le16 = [&](size_t at) { return static_cast<uint32_t>(b[at] | (b[at + 1] << 8)); };
  auto le32 = [&](size_t at) { return le16(at) | (le16(at + 2) << 16); };
  if (format == ImageFormat::png && b.size() >= 24 && std::memcmp(b.data() + 12, "IHDR", 4) == 0)
    return {be32(16), be32(20)};
  if (format == ImageFormat::gif && b.size() >= 10) return {le16(6), le16(8)};
  if (format == ImageFormat::bmp && b.size() >= 26) {
    if (le32(14) == 12) return {le16(18), le16(20)};
    const auto w = static_cast<int32_t>(le32(18)), h = static_cast<int32_t>(le32(22));
    return {std::abs(static_cast<int64_t>(w)), std::abs(static_cast<int64_t>(h))};
  }
  return {0, 0};
}

RgbImage decode_stb(std::span<const uint8_t> bytes, const std::string& name, const char* format, int64_t max_pixels) {
  EMBER_CHECK(bytes.size() <= static_cast<size_t>(std::numeric_limits<int>::max()), name, ": ", format,
              " file too large for stb_image");
  const auto* data = reinterpret_cast<const stbi_uc*>(bytes.data());
  const int len = static_cast<int>(bytes.size());
  int w = 0, h = 0, comp = 0;
  if (!stbi_info_from_memory(data, len, &w, &h, &comp)) {
    const char* why = stbi_failure_reason();
    EMBER_THROW(name, ": corrupt or unsupported ", format, " data (", why ? why : "unknown", ")");
  }
  check_dims(name, format, h, w, max_pixels);
  // The file's own channels (req_comp 0), expanded to RGB here as stb_image would: stb's channel
  // conversion runs before its 16-to-8-bit one, so with req_comp 3 a valid 16-bit PGM (1 channel)
  // overflowed its buffer (found by fuzz/fuzz_decode; stb_image 2.28, stbi__pnm_load).
  int n = 0;
  std::unique_ptr<stbi_uc, void (*)(void*)> out(stbi_load_from_memory(data, len, &w, &h, &n, 0), &stbi_image_free);
  if (!out) {
    const char* why = stbi_failure_reason();
    EMBER_THROW(name, ": truncated or corrupt ", format, " data (", why ? why : "unknown", ")");
  }
  EMBER_CHECK(n >= 1 && n <= 4, name, ": ", format, " image with ", n, " channels");
  RgbImage img(h, w);
  const int64_t pixels = static_cast<int64_t>(h) * w;
  const stbi_uc* src = out.get();
  uint8_t* dst = img.data();
  if (n == 3) {
    std::memcpy(dst, src, static_cast<size_t>(pixels) * 3);
  } else {
    for (int64_t i = 0; i < pixels; ++i) {
      const stbi_uc* p = src + i * n;
      // gray (+ alpha): replicated; RGBA: alpha dropped (stb_image's own conversions)
      dst[3 * i] = p[0];
      dst[3 * i + 1] = n >= 3 ? p[1] : p[0];
      dst[3 * i + 2] = n >= 3 ? p[2] : p[0];
    }
  }
  return img;
}

// stb_image reads past the end of a BMP as zeros, so a truncated uncompressed BMP would decode
// "successfully": compare the size its header promises with the bytes there are.
void check_bmp_size(std::span<const uint8_t> b, const std::string& name) {
  auto u16 = [&](size_t at) { return static_cast<uint32_t>(b[at] | (b[at + 1] << 8)); };
  auto u32 = [&](size_t at) { return u16(at) | (u16(at + 2) << 16); };
  EMBER_CHECK(b.size() >= 26, name, ": truncated BMP header");
  const uint64_t offset = u32(10);
  const uint32_t dib = u32(14);
  int64_t w = 0, h = 0;
  uint32_t bpp = 0, compression = 0;
  if (dib == 12) {  // OS/2 BITMAPCOREHEADER
    w = static_cast<int16_t>(u16(18));
    h = static_cast<int16_t>(u16(20));
    bpp = u16(24);
  } else {
    EMBER_CHECK(b.size() >= 34, name, ": truncated BMP header");
    w = static_cast<int32_t>(u32(18));
    h = static_cast<int32_t>(u32(22));
    bpp = u16(28);
    compression = u32(30);
  }
  const bool uncompressed = compression == 0 || compression == 3 || compression == 6;  // RGB, BITFIELDS
  if (!uncompressed || w <= 0 || bpp == 0 || bpp > 32) return;  // stb_image judges the rest
  const uint64_t row = (static_cast<uint64_t>(w) * bpp + 31) / 32 * 4;
  const uint64_t need = offset + row * static_cast<uint64_t>(h < 0 ? -h : h);
  EMBER_CHECK(b.size() >= need, name, ": truncated BMP data (", b.size(), " bytes, the header needs ", need, ")");
}

// The same for binary PNM (P5 gray, P6 RGB): header "P5|P6 <w> <h> <maxval>" with whitespace and
// '#' comments between fields, one whitespace byte, then w*h*channels samples of 1 or 2 bytes.
// Binary PNM (P5 gray, P6 RGB) header: "P5|P6 <w> <h> <maxval>", whitespace and '#' comments
// between fields, one whitespace byte, then w*h*channels samples of 1 byte (maxval < 256) or 2
// big-endian bytes. Checks that the samples are all there (stb_image reads past the end as zeros).
struct PnmHeader {
  uint64_t width = 0, height = 0, maxval = 0, channels = 0;
  size_t data_at = 0;
};

// The header alone (nullopt for the ASCII variants P1-P4, which stb_image rejects itself). Fields
// are checked here, before stb_image parses them into an int (it overflowed on a 40-digit maxval:
// a fuzzer finding): 1 <= width, height < 2^31, 1 <= maxval <= 65535.
std::optional<PnmHeader> parse_pnm_header(std::span<const uint8_t> b, const std::string& name) {
  if (b.size() < 2 || (b[1] != '5' && b[1] != '6')) return std::nullopt;
  size_t at = 2;
  uint64_t fields[3] = {0, 0, 0};
  for (uint64_t& field : fields) {
    for (;;) {  // whitespace and comments
      while (at < b.size() && std::isspace(b[at])) ++at;
      if (at < b.size() && b[at] == '#') {  // to the end of the line, '\n' or '\r' as stb_image
        while (at < b.size() && b[at] != '\n' && b[at] != '\r') ++at;
        continue;
      }
      break;
    }
    EMBER_CHECK(at < b.size() && std::isdigit(b[at]), name, ": truncated or corrupt PNM header");
    int digits = 0;
    while (at < b.size() && std::isdigit(b[at])) {
      EMBER_CHECK(++digits <= 10, name, ": corrupt PNM header (a number of more than 10 digits)");
      field = field * 10 + (b[at++] - '0');
    }
  }
  EMBER_CHECK(fields[0] >= 1 && fields[0] < (uint64_t{1} << 31) && fields[1] >= 1 && fields[1] < (uint64_t{1} << 31),
              name, ": PNM image has invalid size ", fields[0], "x", fields[1]);
  EMBER_CHECK(fields[2] >= 1 && fields[2] <= 65535, name, ": PNM maxval ", fields[2], " is outside [1, 65535]");
  ++at;  // the single whitespace byte before the samples
  return PnmHeader{fields[0], fields[1], fields[2], b[1] == '6' ? uint64_t{3} : uint64_t{1}, at};
}

std::optional<PnmHeader> check_pnm_size(std::span<const uint8_t> b, const std::string& name) {
  const std::optional<PnmHeader> p = parse_pnm_header(b, name);
  if (!p) return p;
  const uint64_t need = p->data_at + p->width * p->height * p->channels * (p->maxval > 255 ? 2 : 1);
  EMBER_CHECK(b.size() >= need, name, ": truncated PNM data (", b.size(), " bytes, the header needs ", need, ")");
  return p;
}

// 16-bit binary PNM (maxval 256..65535), which stb_image mishandles (its RGB conversion of a 16-bit
// PGM overflowed a buffer: a fuzzer finding): samples scaled to 8 bits as round(v * 255 / maxval),
// clamped (a sample above maxval is out of spec).
RgbImage decode_pnm16(std::span<const uint8_t> b, const PnmHeader& p, const std::string& name, int64_t max_pixels) {
  check_dims(name, "PNM", static_cast<int64_t>(p.height), static_cast<int64_t>(p.width), max_pixels);
  RgbImage img(static_cast<int64_t>(p.height), static_cast<int64_t>(p.width));
  const uint64_t pixels = p.width * p.height;
  const uint8_t* src = b.data() + p.data_at;
  uint8_t* dst = img.data();
  for (uint64_t i = 0; i < pixels; ++i)
    for (uint64_t k = 0; k < 3; ++k) {
      const uint64_t s = p.channels == 3 ? 3 * i + k : i;
      const uint64_t v = std::min<uint64_t>((uint64_t{src[2 * s]} << 8) | src[2 * s + 1], p.maxval);
      dst[3 * i + k] = static_cast<uint8_t>((v * 255 + p.maxval / 2) / p.maxval);
    }
  return img;
}

// ---- JPEG: TurboJPEG ---------------------------------------------------------------------------

struct TjHandle {
  tjhandle h = tjInitDecompress();
  TjHandle() = default;
  TjHandle(const TjHandle&) = delete;
  TjHandle& operator=(const TjHandle&) = delete;
  ~TjHandle() {
    if (h != nullptr) tjDestroy(h);
  }
};

// The scaling factor with the smallest output that keeps both sides >= the requested minimum
// (PIL's draft): 1/1 when nothing was requested or the image is already small.
tjscalingfactor pick_jpeg_scale(int width, int height, const DecodeOptions& options) {
  tjscalingfactor best{1, 1};
  if (options.min_height <= 0 && options.min_width <= 0) return best;
  int n = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&n);
  if (factors == nullptr) return best;
  for (int i = 0; i < n; ++i) {
    const tjscalingfactor f = factors[i];
    // PIL's draft factors only: 1/2, 1/4, 1/8. libjpeg-turbo's other n/8 reductions use scalar
    // IDCTs and decode no faster than full size (measured: 3/4 was 5% slower on 500x375 photos).
    if (f.num != 1 || (f.denom != 2 && f.denom != 4 && f.denom != 8)) continue;
    const int64_t sw = TJSCALED(width, f);
    const int64_t sh = TJSCALED(height, f);
    if (sw < options.min_width || sh < options.min_height) continue;
    if (static_cast<int64_t>(f.num) * best.denom < static_cast<int64_t>(best.num) * f.denom) best = f;
  }
  return best;
}

RgbImage decode_jpeg(std::span<const uint8_t> bytes, const std::string& name, const DecodeOptions& options) {
  TjHandle tj;
  EMBER_CHECK(tj.h != nullptr, name, ": cannot create a TurboJPEG decompressor: ", tjGetErrorStr2(nullptr));
  auto* data = const_cast<unsigned char*>(bytes.data());  // TurboJPEG 2 takes non-const but only reads
  const auto size = static_cast<unsigned long>(bytes.size());
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj.h, data, size, &width, &height, &subsamp, &colorspace) != 0)
    EMBER_THROW(name, ": corrupt JPEG header (", tjGetErrorStr2(tj.h), ")");
  check_dims(name, "JPEG", height, width, options.max_pixels);
  const tjscalingfactor scale = pick_jpeg_scale(width, height, options);
  const int sw = TJSCALED(width, scale);
  const int sh = TJSCALED(height, scale);
  RgbImage img(sh, sw);
  // TurboJPEG will not convert CMYK / YCCK to RGB: it decodes them to CMYK (YCCK converted by
  // libjpeg), and cmyk_to_rgb below applies Adobe's inverted-CMYK rule as stb_image does. (stb_image
  // decoded these JPEGs before; its Huffman-table code overflows on corrupt tables: a fuzzer finding.)
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  std::vector<uint8_t> cmyk_pixels(cmyk ? static_cast<size_t>(sh) * sw * 4 : 0);
  // Accurate IDCT and fancy upsampling: libjpeg's defaults, which PIL uses.
  if (tjDecompress2(tj.h, data, size, cmyk ? cmyk_pixels.data() : img.data(), sw, 0, sh, cmyk ? TJPF_CMYK : TJPF_RGB,
                    TJFLAG_ACCURATEDCT) != 0) {
    const std::string why = tjGetErrorStr2(tj.h);
    // Like PIL, a warning ("Corrupt JPEG data: N extraneous bytes before marker") still yields
    // the image; running out of data does not.
    const bool warning_only = tjGetErrorCode(tj.h) == TJERR_WARNING && why.find("Premature end") == std::string::npos;
    EMBER_CHECK(warning_only, name, ": truncated or corrupt JPEG data (", why, ")");
  }
  if (cmyk) {
    // Adobe stores inverted CMYK (255 = no ink): R = C * K / 255 with stb_image's rounding.
    auto blinn = [](unsigned x, unsigned y) {
      const unsigned t = x * y + 128;
      return static_cast<uint8_t>((t + (t >> 8)) >> 8);
    };
    uint8_t* dst = img.data();
    for (size_t i = 0; i < static_cast<size_t>(sh) * sw; ++i) {
      const uint8_t* p = cmyk_pixels.data() + 4 * i;
      for (int k = 0; k < 3; ++k) dst[3 * i + k] = blinn(p[k], p[3]);
    }
  }
  return img;
}

// ---- WebP: libwebp -----------------------------------------------------------------------------

RgbImage decode_webp(std::span<const uint8_t> bytes, const std::string& name, int64_t max_pixels) {
  WebPBitstreamFeatures features;
  const VP8StatusCode status = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  EMBER_CHECK(status == VP8_STATUS_OK, name, ": corrupt or truncated WebP header (VP8 status ", static_cast<int>(status),
              ")");
  EMBER_CHECK(!features.has_animation, name, ": animated WebP is not supported");
  check_dims(name, "WebP", features.height, features.width, max_pixels);
  int w = 0, h = 0;
  std::unique_ptr<uint8_t, void (*)(void*)> out(WebPDecodeRGB(bytes.data(), bytes.size(), &w, &h), &WebPFree);
  EMBER_CHECK(out != nullptr, name, ": truncated or corrupt WebP data");
  RgbImage img(h, w);
  std::memcpy(img.data(), out.get(), static_cast<size_t>(h) * w * 3);
  return img;
}

// ---- TIFF: libtiff over the bytes in memory ----------------------------------------------------

struct TiffMemory {
  std::span<const uint8_t> bytes;
  uint64_t offset = 0;
  std::string error;  // libtiff's last error message
};

tmsize_t tiff_read(thandle_t handle, void* buf, tmsize_t n) {
  auto* m = static_cast<TiffMemory*>(handle);
  if (n < 0 || m->offset >= m->bytes.size()) return 0;
  const uint64_t left = m->bytes.size() - m->offset;
  const uint64_t take = std::min<uint64_t>(left, static_cast<uint64_t>(n));
  std::memcpy(buf, m->bytes.data() + m->offset, take);
  m->offset += take;
  return static_cast<tmsize_t>(take);
}
tmsize_t tiff_write(thandle_t, void*, tmsize_t) { return -1; }
toff_t tiff_seek(thandle_t handle, toff_t off, int whence) {
  auto* m = static_cast<TiffMemory*>(handle);
  uint64_t base = 0;
  if (whence == SEEK_CUR) base = m->offset;
  if (whence == SEEK_END) base = m->bytes.size();
  m->offset = base + off;
  return m->offset;
}
int tiff_close(thandle_t) { return 0; }
toff_t tiff_size(thandle_t handle) { return static_cast<TiffMemory*>(handle)->bytes.size(); }
int tiff_map(thandle_t, void**, toff_t*) { return 0; }
void tiff_unmap(thandle_t, void*, toff_t) {}

int tiff_on_error(TIFF*, void* user, const char* module, const char* fmt, va_list ap) {
  char msg[512];
  std::vsnprintf(msg, sizeof(msg), fmt, ap);
  auto* m = static_cast<TiffMemory*>(user);
  if (m->error.empty()) m->error = msg;  // the first error is the cause
  return 1;                              // handled: libtiff prints nothing
}
int tiff_on_warning(TIFF*, void*, const char*, const char*, va_list) { return 1; }

using TiffHandle = std::unique_ptr<TIFF, void (*)(TIFF*)>;

// Opens the in-memory TIFF `mem` (its errors are collected in mem.error, which must outlive the
// handle) and reads the size of its first directory.
TiffHandle open_tiff(TiffMemory& mem, const std::string& name, uint32_t& w, uint32_t& h) {
  std::unique_ptr<TIFFOpenOptions, void (*)(TIFFOpenOptions*)> opts(TIFFOpenOptionsAlloc(), &TIFFOpenOptionsFree);
  EMBER_CHECK(opts != nullptr, name, ": out of memory opening TIFF");
  TIFFOpenOptionsSetErrorHandlerExtR(opts.get(), &tiff_on_error, &mem);
  TIFFOpenOptionsSetWarningHandlerExtR(opts.get(), &tiff_on_warning, &mem);
  TiffHandle tif(TIFFClientOpenExt(name.c_str(), "rm", &mem, &tiff_read, &tiff_write, &tiff_seek, &tiff_close,
                                   &tiff_size, &tiff_map, &tiff_unmap, opts.get()),
                 &TIFFClose);
  EMBER_CHECK(tif != nullptr, name, ": corrupt TIFF (", mem.error, ")");
  EMBER_CHECK(TIFFGetField(tif.get(), TIFFTAG_IMAGEWIDTH, &w) == 1 && TIFFGetField(tif.get(), TIFFTAG_IMAGELENGTH, &h) == 1,
              name, ": TIFF without image size");
  return tif;
}

RgbImage decode_tiff(std::span<const uint8_t> bytes, const std::string& name, int64_t max_pixels) {
  TiffMemory mem{bytes, 0, {}};
  uint32_t w = 0, h = 0;
  const TiffHandle tif = open_tiff(mem, name, w, h);
  check_dims(name, "TIFF", h, w, max_pixels);
  std::vector<uint32_t> raster(static_cast<size_t>(w) * h);
  char why[1024] = "";
  EMBER_CHECK(TIFFRGBAImageOK(tif.get(), why) == 1, name, ": unsupported TIFF (", why, ")");
  const int ok = TIFFReadRGBAImageOriented(tif.get(), w, h, raster.data(), ORIENTATION_TOPLEFT, 1);
  EMBER_CHECK(ok == 1, name, ": truncated or corrupt TIFF data (", mem.error, ")");
  RgbImage img(h, w);
  uint8_t* px = img.data();
  for (size_t i = 0; i < raster.size(); ++i) {
    px[3 * i + 0] = static_cast<uint8_t>(TIFFGetR(raster[i]));
    px[3 * i + 1] = static_cast<uint8_t>(TIFFGetG(raster[i]));
    px[3 * i + 2] = static_cast<uint8_t>(TIFFGetB(raster[i]));
  }
  return img;
}

// ---- to the tensor -----------------------------------------------------------------------------

Tensor finish(const RgbImage& img, ImageMode mode, ImageLayout layout) {
  const int64_t hw = img.height * img.width;
  const uint8_t* src = img.data();
  if (mode == ImageMode::RGB && layout == ImageLayout::HWC) return img.hwc;  // as decoded
  if (mode == ImageMode::Gray) {
    Tensor out = layout == ImageLayout::HWC ? empty({img.height, img.width, 1}, {.dtype = DType::u8})
                                            : empty({1, img.height, img.width}, {.dtype = DType::u8});
    auto* dst = out.data_ptr<uint8_t>();
    for (int64_t i = 0; i < hw; ++i) {
      const uint32_t r = src[3 * i], g = src[3 * i + 1], b = src[3 * i + 2];
      dst[i] = static_cast<uint8_t>((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);  // PIL's "L"
    }
    return out;
  }
  Tensor out = empty({3, img.height, img.width}, {.dtype = DType::u8});
  auto* dst = out.data_ptr<uint8_t>();
  for (int64_t i = 0; i < hw; ++i) {
    dst[i] = src[3 * i];
    dst[hw + i] = src[3 * i + 1];
    dst[2 * hw + i] = src[3 * i + 2];
  }
  return out;
}

bool starts_with(std::span<const uint8_t> b, const char* magic, size_t n, size_t at = 0) {
  return b.size() >= at + n && std::memcmp(b.data() + at, magic, n) == 0;
}

}  // namespace

const char* image_format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::jpeg: return "JPEG";
    case ImageFormat::png: return "PNG";
    case ImageFormat::bmp: return "BMP";
    case ImageFormat::gif: return "GIF";
    case ImageFormat::pnm: return "PNM";
    case ImageFormat::webp: return "WebP";
    case ImageFormat::tiff: return "TIFF";
    case ImageFormat::unknown: break;
  }
  return "unknown";
}

ImageFormat detect_image_format(std::span<const uint8_t> b) {
  if (starts_with(b, "\xFF\xD8\xFF", 3)) return ImageFormat::jpeg;
  if (starts_with(b, "\x89PNG\r\n\x1A\n", 8)) return ImageFormat::png;
  if (starts_with(b, "GIF87a", 6) || starts_with(b, "GIF89a", 6)) return ImageFormat::gif;
  if (starts_with(b, "RIFF", 4) && starts_with(b, "WEBP", 4, 8)) return ImageFormat::webp;
  if (starts_with(b, "II*\0", 4) || starts_with(b, "MM\0*", 4) || starts_with(b, "II+\0", 4) ||
      starts_with(b, "MM\0+", 4))
    return ImageFormat::tiff;
  if (starts_with(b, "BM", 2)) return ImageFormat::bmp;
  if (b.size() >= 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '6') return ImageFormat::pnm;
  return ImageFormat::unknown;
}

Tensor decode_image_bytes(std::span<const uint8_t> bytes, const std::string& name, const DecodeOptions& options) {
  EMBER_CHECK(!bytes.empty(), name, ": empty file");
  const ImageFormat format = detect_image_format(bytes);
  RgbImage img;
  switch (format) {
    case ImageFormat::jpeg: img = decode_jpeg(bytes, name, options); break;
    case ImageFormat::webp: img = decode_webp(bytes, name, options.max_pixels); break;
    case ImageFormat::tiff: img = decode_tiff(bytes, name, options.max_pixels); break;
    case ImageFormat::png:
    case ImageFormat::bmp:
    case ImageFormat::gif:
    case ImageFormat::pnm:
      if (const auto [w, h] = stb_header_dims(bytes, format); w > 0 && h > 0)
        check_dims(name, image_format_name(format), h, w, options.max_pixels);
      if (format == ImageFormat::bmp) check_bmp_size(bytes, name);
      if (format == ImageFormat::pnm) {
        const std::optional<PnmHeader> pnm = check_pnm_size(bytes, name);
        if (pnm && pnm->maxval > 255) {
          img = decode_pnm16(bytes, *pnm, name, options.max_pixels);
          break;
        }
      }
      img = decode_stb(bytes, name, image_format_name(format), options.max_pixels);
      break;
    case ImageFormat::unknown: {
      // TGA has no magic number: let stb_image try; anything else is unsupported.
      int w = 0, h = 0, c = 0;
      const bool stb_knows = bytes.size() <= static_cast<size_t>(std::numeric_limits<int>::max()) &&
                             stbi_info_from_memory(bytes.data(), static_cast<int>(bytes.size()), &w, &h, &c);
      EMBER_CHECK(stb_knows, name,
                  ": unsupported or unrecognized image format (supported: JPEG, PNG, BMP, GIF, PPM/PGM, TGA, WebP, "
                  "TIFF)");
      img = decode_stb(bytes, name, "TGA", options.max_pixels);
      break;
    }
  }
  return finish(img, options.mode, options.layout);
}

Tensor decode_image(const std::string& path, const DecodeOptions& options) {
  const std::vector<uint8_t> bytes = read_image_file(path, options);
  return decode_image_bytes(bytes, path, options);
}

Tensor decode_image(const std::string& path, ImageMode mode) { return decode_image(path, DecodeOptions{.mode = mode}); }

}  // namespace ember::data

namespace ember::data {

namespace {

// The TIFF's first directory's size, from its tags.
ImageInfo probe_tiff(std::span<const uint8_t> bytes, const std::string& name) {
  TiffMemory mem{bytes, 0, {}};
  uint32_t w = 0, h = 0;
  const TiffHandle tif = open_tiff(mem, name, w, h);
  return {ImageFormat::tiff, w, h};
}

}  // namespace

ImageInfo probe_image_bytes(std::span<const uint8_t> bytes, const std::string& name) {
  EMBER_CHECK(!bytes.empty(), name, ": empty file");
  const ImageFormat format = detect_image_format(bytes);
  if (format == ImageFormat::jpeg) {
    TjHandle tj;
    EMBER_CHECK(tj.h != nullptr, name, ": cannot create a TurboJPEG decompressor: ", tjGetErrorStr2(nullptr));
    int width = 0, height = 0, subsamp = 0, colorspace = 0;
    if (tjDecompressHeader3(tj.h, const_cast<unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()),
                            &width, &height, &subsamp, &colorspace) != 0)
      EMBER_THROW(name, ": corrupt JPEG header (", tjGetErrorStr2(tj.h), ")");
    return {format, width, height};
  }
  if (format == ImageFormat::webp) {
    WebPBitstreamFeatures features;
    const VP8StatusCode status = WebPGetFeatures(bytes.data(), bytes.size(), &features);
    EMBER_CHECK(status == VP8_STATUS_OK, name, ": corrupt or truncated WebP header (VP8 status ",
                static_cast<int>(status), ")");
    return {format, features.width, features.height};
  }
  if (format == ImageFormat::tiff) return probe_tiff(bytes, name);
  if (format == ImageFormat::pnm)
    if (const std::optional<PnmHeader> p = parse_pnm_header(bytes, name))
      return {format, static_cast<int64_t>(p->width), static_cast<int64_t>(p->height)};
  int w = 0, h = 0, comp = 0;
  const bool ok = bytes.size() <= static_cast<size_t>(std::numeric_limits<int>::max()) &&
                  stbi_info_from_memory(bytes.data(), static_cast<int>(bytes.size()), &w, &h, &comp);
  EMBER_CHECK(ok || format != ImageFormat::unknown, name,
              ": unsupported or unrecognized image format (supported: JPEG, PNG, BMP, GIF, PPM/PGM, TGA, WebP, TIFF)");
  EMBER_CHECK(ok, name, ": corrupt or unsupported ", image_format_name(format), " header");
  return {format, w, h};
}

namespace {

// The first bytes of an image file: what decoders need to find the format and, for every format
// but TIFF (and JPEG after large EXIF blocks), the size.
constexpr uint64_t kImageHeadBytes = 64 * 1024;

std::vector<uint8_t> allocate_bytes(const std::string& path, uint64_t n) {
  try {
    return std::vector<uint8_t>(static_cast<size_t>(n));
  } catch (const std::bad_alloc&) {
    EMBER_THROW(path, ": cannot allocate ", n, " bytes to read the image: out of memory");
  }
}

// The header check of read_image_file on a file larger than its head: an unknown format, or a
// size over the limits, is refused before the body is read. A header that runs past the head is
// left to the decoder, except for the formats whose header always sits in the first bytes.
void check_image_head(std::span<const uint8_t> head, const std::string& path, int64_t max_pixels) {
  const ImageFormat format = detect_image_format(head);
  // The sizes ember reads itself first, as decode_image_bytes does: stb_image's own header check
  // calls an image too large for its limits "corrupt".
  if (const auto [w, h] = stb_header_dims(head, format); w > 0 && h > 0)
    check_dims(path, image_format_name(format), h, w, max_pixels);
  ImageInfo info;
  try {
    info = probe_image_bytes(head, path);
  } catch (const Error&) {
    if (format == ImageFormat::jpeg || format == ImageFormat::tiff || format == ImageFormat::pnm) return;
    throw;
  }
  check_dims(path, image_format_name(info.format), info.height, info.width, max_pixels);
}

// Opens nothing itself: `f` was opened by io::FileReader, which refuses what is not a regular file.
std::vector<uint8_t> read_image_head(const io::FileReader& f, const DecodeOptions& options) {
  const std::string& path = f.path();
  EMBER_CHECK(f.size() > 0, path, ": empty file");
  EMBER_CHECK(options.max_file_bytes <= 0 || f.size() <= static_cast<uint64_t>(options.max_file_bytes), path, ": ",
              f.size(), " bytes is more than the limit of ", options.max_file_bytes,
              " bytes for an image file: the file is not an image, or damaged");
  std::vector<uint8_t> head = allocate_bytes(path, std::min(f.size(), kImageHeadBytes));
  f.read_at(0, head.data(), head.size(), "the image header");
  if (head.size() < f.size()) check_image_head(head, path, options.max_pixels);
  return head;
}

}  // namespace

std::vector<uint8_t> read_image_file(const std::string& path, const DecodeOptions& options) {
  const io::FileReader f(path);
  std::vector<uint8_t> bytes = read_image_head(f, options);
  const uint64_t head = bytes.size();
  if (head < f.size()) {
    try {
      bytes.resize(static_cast<size_t>(f.size()));
    } catch (const std::bad_alloc&) {
      EMBER_THROW(path, ": cannot allocate ", f.size(), " bytes to read the image: out of memory");
    }
    f.read_at(head, bytes.data() + head, static_cast<size_t>(f.size() - head), "the image data");
  }
  return bytes;
}

ImageInfo probe_image(const std::string& path, const DecodeOptions& options) {
  // Headers sit at the start, except TIFF's (at an offset) and the frame header of a JPEG after
  // large EXIF blocks: the first bytes first, the whole file (within the cap) when they do not
  // hold the header.
  io::FileReader f(path);
  const std::vector<uint8_t> head = read_image_head(f, options);
  if (head.size() < f.size()) {
    try {
      return probe_image_bytes(head, path);
    } catch (const Error&) {
      // The header runs past the first bytes: probe the whole file below.
    }
  }
  return probe_image_bytes(read_image_file(path, options), path);
}

}  // namespace ember::data
