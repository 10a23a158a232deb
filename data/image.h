#pragma once
// Decoding image files into u8 (C, H, W) tensors: JPEG (TurboJPEG), PNG/BMP/PPM/PGM/TGA/GIF
// (stb_image), WebP (libwebp) and TIFF (libtiff).
//
// The format comes from the file's first bytes, never from its name. EXIF orientation is ignored
// (as torchvision's decode_image and PIL's Image.open). Gray output uses PIL's convert("L") rule,
// L = (19595 R + 38470 G + 7471 B + 0x8000) >> 16, applied to the RGB decode; a gray source
// therefore comes back unchanged.
//
// Every failure throws ember::Error "<path>: <problem>" (missing or unreadable file, empty,
// truncated or corrupt data, an unsupported format); nothing here crashes or prints.
// decode_image is thread-safe: each call owns its decoder handles.

#include <cstdint>
#include <span>
#include <string>

#include "../core/tensor.h"

namespace ember::data {

// Channels of a decoded image: RGB (alpha dropped, gray replicated) or one gray channel.
enum class ImageMode { RGB, Gray };

// What the first bytes say.
enum class ImageFormat { unknown, jpeg, png, bmp, gif, pnm, webp, tiff };

// "jpeg", "png", ... ("unknown" for unknown).
const char* image_format_name(ImageFormat format);

// The format of `bytes` by magic number: JPEG FF D8 FF; PNG 89 'PNG' 0D 0A 1A 0A; BMP "BM";
// GIF "GIF87a"/"GIF89a"; PNM 'P' '1'..'6'; WebP "RIFF" ?? ?? ?? ?? "WEBP"; TIFF "II*\0" or
// "MM\0*" (and BigTIFF's "II+\0" / "MM\0+"). TGA has no magic number: it is `unknown` here and
// decode_image still tries stb_image on unknown data.
ImageFormat detect_image_format(std::span<const uint8_t> bytes);

// Memory layout of a decoded image: planes (C, H, W), the tensor convention, or interleaved
// (H, W, C), what the decoders produce (no conversion pass; the fused pipeline reads it directly).
enum class ImageLayout { CHW, HWC };

struct DecodeOptions {
  ImageMode mode = ImageMode::RGB;
  ImageLayout layout = ImageLayout::CHW;
  // JPEG draft mode (PIL's Image.draft): when either is > 0, a JPEG is decoded at the largest
  // DCT-domain reduction among 1/2, 1/4 and 1/8 that keeps height >= min_height
  // and width >= min_width; an image already smaller decodes at full size. Other formats ignore
  // it. Use it when a Resize follows that shrinks the image anyway: decoding is several times
  // faster and the Resize input is smaller.
  int64_t min_height = 0;
  int64_t min_width = 0;
  // Size limits, checked on the header before any pixel buffer is allocated: a side longer than
  // kMaxImageSide (32768) or more than max_pixels pixels is an error naming the file (a corrupt or
  // hostile header must not ask for gigabytes). The default, 2^28 (16384 x 16384), is above
  // PIL's decompression-bomb error threshold (~179M pixels).
  int64_t max_pixels = int64_t{1} << 28;
  // A file larger than this many bytes is refused by its size, before any of it is read (a
  // multi-gigabyte file, or a link to one, named *.jpg); <= 0: no limit. The default, 1 GiB, is
  // above a 16384 x 16384 RGB BMP (768 MiB), the largest uncompressed 8-bit image max_pixels lets
  // through.
  int64_t max_file_bytes = int64_t{1} << 30;
};

// The longest side decode_image accepts.
inline constexpr int64_t kMaxImageSide = 32768;

// What an image file's header says, without decoding the pixels.
struct ImageInfo {
  ImageFormat format = ImageFormat::unknown;
  int64_t width = 0, height = 0;
};

// Decodes the image file at `path` into a new contiguous u8 tensor (3, H, W) for RGB or (1, H, W)
// for Gray. 16-bit samples are reduced to 8 bits (high byte; binary PNM with maxval > 255: round(v * 255 / maxval)),
// palettes expanded, alpha dropped.
// JPEG: TurboJPEG (CMYK/YCCK too, as Adobe inverted CMYK). TIFF: any layout TIFFReadRGBAImage
// handles (strips/tiles, CMYK, palette, 16-bit, gray), first directory only. GIF: first frame.
// Throws ember::Error "<path>: <problem>".
Tensor decode_image(const std::string& path, ImageMode mode = ImageMode::RGB);
Tensor decode_image(const std::string& path, const DecodeOptions& options);

// As decode_image, from bytes already in memory; `name` is what error messages call them.
Tensor decode_image_bytes(std::span<const uint8_t> bytes, const std::string& name,
                          const DecodeOptions& options = {});

// The format and full-size dimensions from the header only (cheap: no pixel is decoded). Throws
// ember::Error "<name>: ..." for an empty, unrecognized or corrupt header. A file whose header
// reads fine may still fail to decode (truncated data): only decode_image tells.
ImageInfo probe_image_bytes(std::span<const uint8_t> bytes, const std::string& name);
// Reads the header first (the whole file only when the header runs past its first 64 KiB).
ImageInfo probe_image(const std::string& path, const DecodeOptions& options = {});

// The bytes of an image file, read header first (Note [Reading untrusted files] in
// io/atomic_file.h): a path that is not a regular file (a FIFO, a device, a socket, a link to
// one) is refused without being opened; an empty file, or one larger than
// options.max_file_bytes, by its size; a file whose first 64 KiB show an unknown format, or a
// size over options.max_pixels or kMaxImageSide, before the rest is read. Errors name the file.
std::vector<uint8_t> read_image_file(const std::string& path, const DecodeOptions& options = {});

}  // namespace ember::data
