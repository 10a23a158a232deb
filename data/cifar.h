#pragma once
// CIFAR-10 and CIFAR-100 from their binary distributions (cifar-10-batches-bin/,
// cifar-100-binary/).
//
// CIFAR-10 record: 1 label byte, then 3072 image bytes (1024 R, 1024 G, 1024 B; rows top to
// bottom), 10000 records per file. Train = data_batch_1.bin .. data_batch_5.bin in that order,
// test = test_batch.bin; class names from batches.meta.txt (one per line) when present.
// CIFAR-100 record: coarse label byte, fine label byte, 3072 image bytes; train = train.bin,
// test = test.bin; names from fine_label_names.txt / coarse_label_names.txt when present.
// A file may hold any whole number of records (tests use tiny ones).

#include <filesystem>

#include "dataset.h"
#include "idx.h"

namespace ember::data {

// Which of CIFAR-100's two labels becomes Example::label.
enum class Cifar100Labels { fine, coarse };

// (N, 3, 32, 32) u8 images and (N,) labels in file order. Throws ember::Error naming the file when
// one is missing or unreadable, its size is not a whole number of records, a label is out of
// range (>= 10), or the meta file does not hold exactly 10 names.
InMemoryImageDataset cifar10(const std::filesystem::path& dir, Split split);

// As cifar10 for CIFAR-100: labels < 100 (fine) or < 20 (coarse), names from the matching file.
InMemoryImageDataset cifar100(const std::filesystem::path& dir, Split split,
                              Cifar100Labels labels = Cifar100Labels::fine);

}  // namespace ember::data
