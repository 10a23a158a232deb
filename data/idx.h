#pragma once
// The IDX format of MNIST and Fashion-MNIST, raw or gzipped, and a loader for their file sets.
//
// An IDX file is: two zero bytes, a type byte, a dimension count d, d big-endian uint32 sizes,
// then the elements row-major, multi-byte types big-endian. Type bytes: 0x08 u8, 0x09 i8,
// 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64. A file is read as gzip when it starts with the gzip
// magic bytes 1f 8b, whatever its name.

#include <filesystem>

#include "../core/tensor.h"

namespace ember::data {

// Which half of a dataset: MNIST's "train" or "t10k" files.
enum class Split { train, test };

// Reads an IDX file into a new contiguous CPU tensor with the file's dims. Element types map to
// u8 -> u8, i8 and i16 -> i32 (ember has no narrower signed type), i32 -> i32, f32 -> f32,
// f64 -> f64. Throws ember::Error naming `path` when the file is missing or unreadable, has bad
// magic bytes, an unsupported type byte or no dims, holds fewer data bytes than its dims say
// (truncated) or more (trailing garbage), or is a damaged gzip stream.
Tensor read_idx(const std::filesystem::path& path);

// read_idx for a label file: must be 1-D with an integer type; returns (N,) i64.
Tensor read_idx_labels(const std::filesystem::path& path);

enum class IdxCompression { none, gzip };

// Writes `t` (CPU or not, any layout) as an IDX file; dtypes u8, i32, f32 and f64 (the IDX types
// ember has). Used by tests and for making small subsets of a dataset. Throws on an i64 or other
// dtype (convert first), a dim above 2^32 - 1, or a write failure, naming `path`.
void write_idx(const std::filesystem::path& path, const Tensor& t, IdxCompression compression = IdxCompression::none);

// One split of MNIST or Fashion-MNIST.
struct MnistData {
  Tensor images;  // (N, H, W) u8
  Tensor labels;  // (N,) i64
};

// Loads {train,t10k}-images-idx3-ubyte and {train,t10k}-labels-idx1-ubyte from `dir`, each raw
// or with a .gz suffix (the raw file wins when both exist). Throws ember::Error naming the
// directory and the expected file names when a file is missing, and when the image and label
// counts differ or the images are not 3-D u8.
MnistData load_mnist(const std::filesystem::path& dir, Split split);

}  // namespace ember::data
