// CIFAR-10 / CIFAR-100 binary batches (format in cifar.h).

#include "cifar.h"

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "../io/atomic_file.h"

namespace ember::data {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kImageBytes = 3 * 32 * 32;

std::vector<uint8_t> read_all(const fs::path& path) {
  try {
    return io::read_file(path.string());  // a regular file only (Note [Reading untrusted files])
  } catch (const Error& e) {
    EMBER_THROW("cifar: ", e.what());
  }
}

// Non-blank lines of `path` (trailing '\r' and spaces dropped), or none when it does not exist.
std::vector<std::string> read_names(const fs::path& path, size_t expected) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return {};
  io::check_regular_file(path.string());  // a FIFO would block the open
  std::ifstream in(path);
  EMBER_CHECK(in.is_open(), "cifar: ", path.string(), ": cannot open");
  std::vector<std::string> names;
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    if (!line.empty()) names.push_back(line);
  }
  EMBER_CHECK(names.size() == expected, "cifar: ", path.string(), " holds ", names.size(), " class names, expected ",
              expected);
  return names;
}

// Reads `files` of records `label_bytes` + 3072 long; the label is byte `label_at` of the record.
InMemoryImageDataset load(const std::vector<fs::path>& files, int64_t label_bytes, int64_t label_at,
                          int64_t num_classes, std::vector<std::string> names) {
  const int64_t record = label_bytes + kImageBytes;
  std::vector<std::vector<uint8_t>> contents;
  int64_t n = 0;
  for (const fs::path& f : files) {
    contents.push_back(read_all(f));
    const auto size = static_cast<int64_t>(contents.back().size());
    EMBER_CHECK(size > 0 && size % record == 0, "cifar: ", f.string(), ": size ", size,
                " bytes is not a whole number of ", record, "-byte records");
    n += size / record;
  }
  Tensor images = empty({n, 3, 32, 32}, {.dtype = DType::u8});
  std::vector<int64_t> labels(static_cast<size_t>(n));
  auto* dst = images.data_ptr<uint8_t>();
  int64_t i = 0;
  for (size_t k = 0; k < files.size(); ++k) {
    const std::vector<uint8_t>& bytes = contents[k];
    for (size_t off = 0; off < bytes.size(); off += static_cast<size_t>(record), ++i) {
      const int64_t label = bytes[off + static_cast<size_t>(label_at)];
      EMBER_CHECK(label < num_classes, "cifar: ", files[k].string(), ": record ", off / record, " has label ", label,
                  ", expected < ", num_classes);
      labels[static_cast<size_t>(i)] = label;
      std::memcpy(dst + i * kImageBytes, bytes.data() + off + label_bytes, kImageBytes);
    }
  }
  return InMemoryImageDataset(images, from_vector(labels), std::move(names));
}

}  // namespace

InMemoryImageDataset cifar10(const fs::path& dir, Split split) {
  std::vector<fs::path> files;
  if (split == Split::train)
    for (int b = 1; b <= 5; ++b) files.push_back(dir / ("data_batch_" + std::to_string(b) + ".bin"));
  else
    files.push_back(dir / "test_batch.bin");
  return load(files, 1, 0, 10, read_names(dir / "batches.meta.txt", 10));
}

InMemoryImageDataset cifar100(const fs::path& dir, Split split, Cifar100Labels labels) {
  const fs::path file = dir / (split == Split::train ? "train.bin" : "test.bin");
  const bool fine = labels == Cifar100Labels::fine;
  return load({file}, 2, fine ? 1 : 0, fine ? 100 : 20,
              read_names(dir / (fine ? "fine_label_names.txt" : "coarse_label_names.txt"), fine ? 100 : 20));
}

}  // namespace ember::data
