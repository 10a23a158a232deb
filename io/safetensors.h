#pragma once
// Reading and writing the safetensors format (Hugging Face), so weights move between ember and
// PyTorch both ways: safetensors.torch.load_file reads what save_safetensors writes, and
// load_safetensors reads what safetensors.torch.save_file writes.
//
// Note [safetensors layout]
//   bytes [0, 8)        N: the header length, u64 little-endian
//   bytes [8, 8 + N)    the header: a UTF-8 JSON object, right-padded with spaces (0x20)
//                         {"__metadata__": {"format": "pt"},                      (optional, str -> str)
//                          "conv1.weight": {"dtype": "F32", "shape": [32, 3, 3, 3],
//                                           "data_offsets": [0, 3456]}, ...}
//   bytes [8 + N, end)  the data section: each tensor's elements, row-major, little-endian, at
//                       [begin, end) relative to the start of the data section.
// The reference implementation (safetensors/src/tensor.rs) requires, and load_safetensors checks:
// N <= 100'000'000; the header starts with '{'; offsets are in range, and the tensors, sorted by
// offset, cover the data section exactly (no gap, no overlap, no trailing bytes); end - begin ==
// numel(shape) * dtype size. We also reject duplicate names, an unknown dtype, a shape of more than
// kMaxDims dims, and BOOL bytes other than 0 and 1 (ember's bool must be exactly 0 or 1).
//
// save_safetensors pads the header so the data section starts at a multiple of 8 bytes, as the
// reference writer does. The header lists the tensors in the caller's order (PyTorch's state_dict
// order; load_safetensors returns header order), while the data section holds them widest dtype
// first (stable), so each tensor starts at a multiple of its element size — what zero-copy (mmap)
// readers need. The reference writer also lays data out by dtype, but sorts its header by dtype
// and name; both are valid, since readers locate tensors by data_offsets.

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../core/tensor.h"

namespace ember::io {

// The safetensors dtype names ("F32", "BF16", "BOOL", ...) and back. safetensors_dtype throws for
// a name that is not one of ember's eight dtypes (the message says which names are supported).
const char* safetensors_dtype_name(DType dtype);
DType safetensors_dtype(const std::string& name);

// What load_safetensors returns: the tensors in header order, on the CPU, contiguous, with the
// file's dtypes and shapes, plus the string metadata of "__metadata__" (empty if absent).
struct SafetensorsFile {
  std::string path;
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> metadata;

  bool contains(const std::string& name) const;
  // The tensor called `name`; throws "<path>: no tensor named '<name>'" if absent. Linear search:
  // fine for a model's few hundred tensors.
  const Tensor& at(const std::string& name) const;
  std::vector<std::string> names() const;
};

// Writes `tensors` (header in this order) and `metadata` to `path` atomically (io/atomic_file.h).
// Tensors on another device are copied to the CPU and non-contiguous ones written contiguously,
// one at a time. Names must be unique and not "__metadata__"; undefined tensors are rejected.
// Throws ember::Error "<path>: <problem>".
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads and validates a safetensors file (every check in Note [safetensors layout]); a truncated
// or garbled file throws ember::Error "<path>: <problem>". Reads tensor data straight into the
// tensors' storage (no second copy of the file in memory).
// The header is read and checked whole (its length within the 100 MB limit, its JSON in time
// O(n log n) for n entries: Note [Linear header parsing], the layout) before any tensor is
// allocated, and the tensors' total size is refused when it is more than this machine's memory;
// a path that is not a regular file is refused unopened (Note [Reading untrusted files] in
// io/atomic_file.h). An allocation failure names the file and the tensor.
SafetensorsFile load_safetensors(const std::string& path);
// The same from bytes in memory (the fuzz targets' entry point: fuzz/parser_targets.h); `name`
// stands for the path in messages.
SafetensorsFile parse_safetensors(std::span<const uint8_t> bytes, const std::string& name);

}  // namespace ember::io
