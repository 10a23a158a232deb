#pragma once
// ListFileDataset: images named in a text file, one "path,label" per line.
//
// Format: each non-blank line is `<path>,<label>`; the label is a non-negative decimal integer
// after the LAST comma (so paths may hold commas); spaces and tabs around both are trimmed; a
// trailing '\r' (CRLF files) is dropped; lines whose first non-blank character is '#' are
// comments. A relative path is resolved against the list file's directory. Files are not opened
// until get(), so building the dataset over a million-line list costs only the parse.

#include <filesystem>
#include <vector>

#include "dataset.h"
#include "image.h"
#include "image_folder.h"

namespace ember::data {

// Samples load as ImageFileDataset says (image_folder.h), with no JPEG draft decoding.
class ListFileDataset : public ImageFileDataset {
 public:
  // Throws ember::Error "<list>:<line>: <problem>" for a line without a comma, an empty path, or
  // a label that is not a non-negative integer, and "<list>: ..." when the file cannot be read or
  // names no sample.
  explicit ListFileDataset(const std::filesystem::path& list_path, DecodeOptions decode = {});
};

}  // namespace ember::data
