// IDX reading and writing (format in idx.h). Both raw and gzipped files go through one small
// ByteReader so the header parsing and the error messages are shared.

#include "idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "../io/atomic_file.h"
#include "quoted_path.h"

namespace ember::data {
namespace {

namespace fs = std::filesystem;

using detail::quoted;

std::string hex_byte(uint8_t b) {
  std::ostringstream os;
  os << "0x" << std::hex << std::uppercase << std::setw(2) << std::setfill('0') << static_cast<int>(b);
  return os.str();
}

// Reads bytes from a raw or gzipped file. read() returns how many bytes it got (short only at
// the end of the data) and throws on an I/O or gzip error.
class ByteReader {
 public:
  explicit ByteReader(const fs::path& path) : path_(path) {
    // A FIFO would block fopen, a device never end (Note [Reading untrusted files]).
    if (std::error_code ec; fs::exists(path, ec)) io::check_regular_file(path.string());
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) {
      const int err = errno;
      EMBER_THROW("read_idx: cannot open ", quoted(path), ": ", std::strerror(err));
    }
    unsigned char magic[2] = {0, 0};
    const size_t got = std::fread(magic, 1, 2, f);
    gzip_ = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (!gzip_) {
      std::rewind(f);
      file_ = f;
      return;
    }
    std::fclose(f);
    gz_ = gzopen(path.c_str(), "rb");
    EMBER_CHECK(gz_ != nullptr, "read_idx: cannot open ", quoted(path), " as gzip");
    gzbuffer(gz_, 1 << 17);  // 128 KiB: fewer, larger reads of the compressed file
  }
  ByteReader(const ByteReader&) = delete;
  ByteReader& operator=(const ByteReader&) = delete;
  ~ByteReader() {
    if (file_ != nullptr) std::fclose(file_);
    if (gz_ != nullptr) gzclose_r(gz_);
  }

  bool gzip() const { return gzip_; }

  // Bytes left in a raw file (gzip: unknown, -1).
  int64_t raw_bytes_left() {
    if (gzip_) return -1;
    std::error_code ec;
    const auto total = fs::file_size(path_, ec);
    if (ec) return -1;
    const long pos = std::ftell(file_);
    return pos < 0 ? -1 : static_cast<int64_t>(total) - pos;
  }

  size_t read(void* dst, size_t n) {
    auto* out = static_cast<unsigned char*>(dst);
    size_t done = 0;
    while (done < n) {
      const size_t want = std::min<size_t>(n - done, 1u << 30);  // gzread takes an unsigned int
      if (!gzip_) {
        const size_t got = std::fread(out + done, 1, want, file_);
        done += got;
        if (got < want) {
          EMBER_CHECK(!std::ferror(file_), "read_idx: read error in ", quoted(path_), ": ", std::strerror(errno));
          break;
        }
        continue;
      }
      const int got = gzread(gz_, out + done, static_cast<unsigned>(want));
      if (got > 0) done += static_cast<size_t>(got);
      int errnum = Z_OK;
      const char* msg = gzerror(gz_, &errnum);
      // Z_BUF_ERROR is zlib's "unexpected end of file": a cut-off stream. Report it as a
      // truncation (the caller knows how many bytes were expected).
      if (errnum == Z_BUF_ERROR) {
        truncated_stream_ = true;
        break;
      }
      EMBER_CHECK(errnum == Z_OK && got >= 0, "read_idx: ", quoted(path_), " is a damaged gzip stream: ", msg);
      if (got == 0 || static_cast<size_t>(got) < want) break;
    }
    return done;
  }

  bool truncated_stream() const { return truncated_stream_; }

 private:
  fs::path path_;
  bool gzip_ = false;
  bool truncated_stream_ = false;
  std::FILE* file_ = nullptr;
  gzFile gz_ = nullptr;
};

struct IdxType {
  uint8_t code;
  int64_t file_size;  // bytes per element in the file
  DType dtype;        // what ember stores it as
  const char* name;
};

constexpr IdxType kIdxTypes[] = {
    {0x08, 1, DType::u8, "u8"},  {0x09, 1, DType::i32, "i8"},  {0x0B, 2, DType::i32, "i16"},
    {0x0C, 4, DType::i32, "i32"}, {0x0D, 4, DType::f32, "f32"}, {0x0E, 8, DType::f64, "f64"},
};

const IdxType* find_type(uint8_t code) {
  for (const IdxType& t : kIdxTypes)
    if (t.code == code) return &t;
  return nullptr;
}

uint32_t load_be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}
uint64_t load_be64(const unsigned char* p) {
  return (uint64_t{load_be32(p)} << 32) | load_be32(p + 4);
}

std::string dims_string(const Shape& dims) { return shape_str(dims); }

// Converts the big-endian file elements in `src` into `out` (contiguous, of type t.dtype).
void decode_elements(const IdxType& t, const unsigned char* src, int64_t n, Tensor& out) {
  if (n == 0) return;  // both pointers may be null: memcpy must not see them
  switch (t.code) {
    case 0x08: std::memcpy(out.data_ptr<uint8_t>(), src, static_cast<size_t>(n)); break;
    case 0x09: {
      int32_t* o = out.data_ptr<int32_t>();
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<int8_t>(src[i]);
      break;
    }
    case 0x0B: {
      int32_t* o = out.data_ptr<int32_t>();
      for (int64_t i = 0; i < n; ++i)
        o[i] = static_cast<int16_t>(static_cast<uint16_t>((src[2 * i] << 8) | src[2 * i + 1]));
      break;
    }
    case 0x0C: {
      int32_t* o = out.data_ptr<int32_t>();
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<int32_t>(load_be32(src + 4 * i));
      break;
    }
    case 0x0D: {
      float* o = out.data_ptr<float>();
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t bits = load_be32(src + 4 * i);
        std::memcpy(&o[i], &bits, 4);
      }
      break;
    }
    case 0x0E: {
      double* o = out.data_ptr<double>();
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t bits = load_be64(src + 8 * i);
        std::memcpy(&o[i], &bits, 8);
      }
      break;
    }
    default: EMBER_THROW("read_idx: internal error: type ", hex_byte(t.code));
  }
}

}  // namespace

Tensor read_idx(const fs::path& path) {
  ByteReader in(path);
  const char* kind = in.gzip() ? " (gzip)" : "";

  unsigned char head[4];
  const size_t got_head = in.read(head, 4);
  EMBER_CHECK(got_head == 4, "read_idx: ", quoted(path), kind, " is truncated: ", got_head,
              " bytes, shorter than the 4-byte IDX header");
  EMBER_CHECK(head[0] == 0 && head[1] == 0, "read_idx: ", quoted(path), kind, " is not an IDX file: bad magic bytes ",
              hex_byte(head[0]), " ", hex_byte(head[1]), " (expected 0x00 0x00)");
  const IdxType* type = find_type(head[2]);
  EMBER_CHECK(type != nullptr, "read_idx: ", quoted(path), kind, " has unsupported element type byte ", hex_byte(head[2]),
              " (IDX types: 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64)");
  const int ndim = head[3];
  EMBER_CHECK(ndim >= 1 && ndim <= kMaxDims, "read_idx: ", quoted(path), kind, " declares ", ndim,
              " dimensions (ember tensors have 1 to ", kMaxDims, ")");

  std::vector<unsigned char> dim_bytes(static_cast<size_t>(4 * ndim));
  const size_t got_dims = in.read(dim_bytes.data(), dim_bytes.size());
  EMBER_CHECK(got_dims == dim_bytes.size(), "read_idx: ", quoted(path), kind, " is truncated inside its header: ",
              ndim, " dims need ", dim_bytes.size(), " bytes, found ", got_dims);
  Shape dims;
  dims.resize(ndim);
  int64_t numel = 1;
  for (int d = 0; d < ndim; ++d) dims[d] = load_be32(&dim_bytes[static_cast<size_t>(4 * d)]);
  for (int d = 0; d < ndim; ++d) {
    // Garbled dims can multiply past int64 (and any real memory): refuse before allocating.
    EMBER_CHECK(dims[d] == 0 || numel <= (INT64_MAX / 8) / dims[d], "read_idx: ", quoted(path), kind,
                " has implausible dims ", dims_string(dims));
    numel *= dims[d];
  }
  const int64_t need = numel * type->file_size;
  const int64_t left = in.raw_bytes_left();
  // A raw file's size is known: fail before allocating for dims the file cannot hold.
  EMBER_CHECK(left < 0 || left >= need, "read_idx: ", quoted(path), " is truncated: dims ", dims_string(dims), " of ",
              type->name, " need ", need, " data bytes, the file has ", left);

  // Gzip hides the real size, so the buffer grows with the data rather than trusting the dims.
  std::vector<unsigned char> bytes;
  int64_t have = 0;
  while (have < need) {
    const int64_t chunk = std::min<int64_t>(need - have, std::max<int64_t>(have, int64_t{1} << 24));
    try {
      bytes.resize(static_cast<size_t>(have + chunk));
    } catch (const std::bad_alloc&) {
      EMBER_THROW("read_idx: ", quoted(path), kind, ": cannot allocate ", have + chunk, " bytes for dims ",
                  dims_string(dims), " (", need, " data bytes): out of memory");
    }
    const size_t got = in.read(bytes.data() + have, static_cast<size_t>(chunk));
    have += static_cast<int64_t>(got);
    if (static_cast<int64_t>(got) < chunk) break;
  }
  EMBER_CHECK(have == need, "read_idx: ", quoted(path), kind, " is truncated: dims ", dims_string(dims), " of ",
              type->name, " need ", need, " data bytes, found ", have,
              in.truncated_stream() ? " (the gzip stream ends early)" : "");
  unsigned char extra[64];
  const size_t trailing = in.read(extra, sizeof(extra));
  EMBER_CHECK(trailing == 0, "read_idx: ", quoted(path), kind, " has ", trailing == sizeof(extra) ? "at least " : "",
              trailing, " bytes after the ", need, " data bytes its dims ", dims_string(dims),
              " describe (garbled header or a concatenated file)");

  Tensor out = empty(dims, {.dtype = type->dtype});
  decode_elements(*type, bytes.data(), numel, out);
  return out;
}

Tensor read_idx_labels(const fs::path& path) {
  Tensor t = read_idx(path);
  EMBER_CHECK(t.dim() == 1 && is_integral(t.dtype()), "read_idx_labels: ", quoted(path), " holds ", describe(t),
              "; a label file is 1-D with an integer type");
  return t.to(DType::i64);
}

void write_idx(const fs::path& path, const Tensor& t, IdxCompression compression) {
  uint8_t code = 0;
  switch (t.dtype()) {
    case DType::u8: code = 0x08; break;
    case DType::i32: code = 0x0C; break;
    case DType::f32: code = 0x0D; break;
    case DType::f64: code = 0x0E; break;
    default:
      EMBER_THROW("write_idx: ", quoted(path), ": IDX has no type for ", describe(t),
                  " (u8, int32, float32 and float64 are written; convert first)");
  }
  EMBER_CHECK(t.dim() >= 1, "write_idx: ", quoted(path), ": IDX needs at least 1 dim, got ", describe(t));
  const Tensor c = t.cpu().contiguous();
  const int64_t esize = c.element_size();

  std::vector<unsigned char> bytes;
  bytes.reserve(static_cast<size_t>(4 + 4 * c.dim() + c.nbytes()));
  bytes.insert(bytes.end(), {0, 0, code, static_cast<unsigned char>(c.dim())});
  for (int64_t d : c.shape()) {
    EMBER_CHECK(d <= 0xffffffffLL, "write_idx: ", quoted(path), ": dim ", d, " does not fit IDX's uint32");
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(static_cast<unsigned char>(static_cast<uint64_t>(d) >> s));
  }
  const auto* src = static_cast<const unsigned char*>(c.data());
  for (int64_t i = 0; i < c.numel(); ++i)  // host order (little-endian x86/ARM) to big-endian
    for (int64_t b = esize - 1; b >= 0; --b) bytes.push_back(src[i * esize + b]);

  if (compression == IdxCompression::gzip) {
    gzFile gz = gzopen(path.c_str(), "wb");
    EMBER_CHECK(gz != nullptr, "write_idx: cannot create ", quoted(path));
    size_t done = 0;
    bool ok = true;
    while (ok && done < bytes.size()) {
      const unsigned want = static_cast<unsigned>(std::min<size_t>(bytes.size() - done, 1u << 30));
      ok = gzwrite(gz, bytes.data() + done, want) == static_cast<int>(want);
      done += want;
    }
    ok = gzclose_w(gz) == Z_OK && ok;
    EMBER_CHECK(ok, "write_idx: failed writing ", quoted(path));
    return;
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    const int err = errno;
    EMBER_THROW("write_idx: cannot create ", quoted(path), ": ", std::strerror(err));
  }
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  EMBER_CHECK(std::fclose(f) == 0 && ok, "write_idx: failed writing ", quoted(path));
}

namespace {

// The first of `dir`/name and `dir`/name.gz that exists, or an empty path.
fs::path find_idx_file(const fs::path& dir, const std::string& name) {
  std::error_code ec;
  for (const fs::path& p : {dir / name, dir / (name + ".gz")})
    if (fs::is_regular_file(p, ec)) return p;
  return {};
}

}  // namespace

MnistData load_mnist(const fs::path& dir, Split split) {
  const std::string prefix = split == Split::train ? "train" : "t10k";
  const std::string image_name = prefix + "-images-idx3-ubyte", label_name = prefix + "-labels-idx1-ubyte";
  std::error_code ec;
  EMBER_CHECK(fs::is_directory(dir, ec), "load_mnist: ", quoted(dir), " is not a directory; it should hold ", image_name,
              "[.gz] and ", label_name, "[.gz]");
  const fs::path image_path = find_idx_file(dir, image_name), label_path = find_idx_file(dir, label_name);
  EMBER_CHECK(!image_path.empty() && !label_path.empty(), "load_mnist: ", quoted(dir), " has no ",
              image_path.empty() ? image_name : label_name, " or ", image_path.empty() ? image_name : label_name,
              ".gz (expected ", image_name, "[.gz] and ", label_name, "[.gz])");

  MnistData out{read_idx(image_path), read_idx_labels(label_path)};
  EMBER_CHECK(out.images.dim() == 3 && out.images.dtype() == DType::u8, "load_mnist: ", quoted(image_path), " holds ",
              describe(out.images), "; expected (N, H, W) uint8 images");
  EMBER_CHECK(out.images.size(0) == out.labels.size(0), "load_mnist: ", quoted(image_path), " has ", out.images.size(0),
              " images but ", quoted(label_path), " has ", out.labels.size(0), " labels");
  return out;
}

}  // namespace ember::data
