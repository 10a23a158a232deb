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

class ListFileDataset : public ImageDataset {
 public:
  // Throws ember::Error "<list>:<line>: <problem>" for a line without a comma, an empty path, or
  // a label that is not a non-negative integer, and "<list>: ..." when the file cannot be read or
  // names no sample.
  explicit ListFileDataset(const std::filesystem::path& list_path, DecodeOptions decode = {});

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  // Decodes sample `index` (u8 (3 or 1, H, W)); throws "<path>: ..." when it cannot.
  Tensor load_image(int64_t index, const DecodeHint& hint) const override;
  // The decoder's (H, W, C) buffer, for the fused pipeline.
  ImageLayout native_layout() const override { return ImageLayout::HWC; }
  Tensor load_native(int64_t index, const DecodeHint& hint) const override;
  int64_t label(int64_t index) const override { return sample(index).label; }
  std::string path(int64_t index) const override { return sample(index).path.string(); }
  int64_t channels() const override { return decode_.mode == ImageMode::Gray ? 1 : 3; }

  const std::vector<ImageSample>& samples() const { return samples_; }

 private:
  const ImageSample& sample(int64_t index) const;
  DecodeOptions decode_;
  std::vector<ImageSample> samples_;
};

}  // namespace ember::data
