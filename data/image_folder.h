#pragma once
// ImageFolder: a directory of class subdirectories of image files, with torchvision's
// datasets.ImageFolder semantics exactly (same classes, same labels, same sample order), so an
// index means the same image in ember and in PyTorch.
//
// Note [ImageFolder order]
// torchvision (datasets/folder.py) does:
//   classes = sorted(e.name for e in os.scandir(root) if e.is_dir())       # symlinks followed
//   for c in sorted(classes):
//     for dirpath, _, fnames in sorted(os.walk(root/c, followlinks=True)):
//       for f in sorted(fnames):
//         if f.lower().endswith(IMG_EXTENSIONS): samples.append((dirpath/f, class_to_idx[c]))
// sorted() compares str code points, which for UTF-8 names is byte order (std::string's <), so
// "B" < "a" and "a-c" < "a/b" ('-' is 0x2D, '/' is 0x2F). sorted(os.walk(...)) sorts the
// (dirpath, dirs, files) tuples, i.e. the directories by their whole path string: the files of
// "c/a", then "c/a-c", then "c/a/b" (not a depth-first order). os.walk's "files" are the entries
// that are not directories after following symlinks (so a broken symlink is a file), and its
// unreadable subdirectories are skipped silently; both are kept here. The one deviation: a
// symlink cycle (a directory that is its own ancestor) is not entered again, where Python would
// recurse until ELOOP.

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dataset.h"
#include "image.h"
#include "image_dataset.h"

namespace ember::data {

// torchvision's IMG_EXTENSIONS: .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp (all decoded by
// decode_image).
const std::vector<std::string>& image_extensions();

struct ImageFolderOptions {
  // How get() decodes (RGB or Gray, JPEG draft size).
  DecodeOptions decode = {};
  // Skip files and directories whose names begin with '.' (".ipynb_checkpoints", ".DS_Store"),
  // class directories included. Off by default, as torchvision (which has no such option).
  bool skip_hidden = false;
  // Accepted file name endings, compared case-insensitively (ASCII); default image_extensions().
  std::vector<std::string> extensions = image_extensions();
  // What a file that cannot be decoded does to its batch (Note [Bad image files]).
  BadImages bad_images = BadImages::error;
  // Decode JPEGs at a reduced DCT scale when a Resize follows (see JpegDraft).
  JpegDraft jpeg_draft = JpegDraft::off;
};

// A sample of a file-backed dataset.
struct ImageSample {
  std::filesystem::path path;
  int64_t label = 0;
};

// A dataset of image files known up front (ImageFolder, ListFileDataset): the samples' paths and
// labels in memory, each file decoded when its sample is loaded.
class ImageFileDataset : public ImageDataset {
 public:
  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  // Decodes sample `index` now (u8 (3 or 1, H, W)); throws ember::Error "<path>: ..." when the
  // file cannot be decoded, and outside [0, size()). Thread-safe. (get() is load_image(i, {}).)
  Tensor load_image(int64_t index, const DecodeHint& hint) const override;
  // The decoder's (H, W, C) buffer, for the fused pipeline.
  ImageLayout native_layout() const override { return ImageLayout::HWC; }
  Tensor load_native(int64_t index, const DecodeHint& hint) const override;
  int64_t label(int64_t index) const override { return sample(index).label; }
  std::string path(int64_t index) const override { return sample(index).path.string(); }
  int64_t channels() const override { return decode_.mode == ImageMode::Gray ? 1 : 3; }
  const std::vector<ImageSample>& samples() const { return samples_; }

 protected:
  // `kind` names the dataset in errors ("ImageFolder: index 9 is out of range for 4 samples").
  ImageFileDataset(const char* kind, const DecodeOptions& decode, JpegDraft jpeg_draft)
      : kind_(kind), decode_(decode), jpeg_draft_(jpeg_draft) {}
  // Filled by the derived constructor.
  std::vector<ImageSample> samples_;

 private:
  const ImageSample& sample(int64_t index) const;
  const char* kind_;
  DecodeOptions decode_;
  JpegDraft jpeg_draft_;
};

class ImageFolder : public ImageFileDataset {
 public:
  // Scans `root` (see Note [ImageFolder order]). Throws ember::Error naming the path when root is
  // missing or not a directory, has no class directories, or a class has no image file (the
  // message lists every such class, as torchvision's "Found no valid file for the classes ...").
  explicit ImageFolder(const std::filesystem::path& root, ImageFolderOptions options = {});

  const ImageFolderOptions& options() const { return options_; }
  // Class names by label: the sorted class directory names.
  const std::vector<std::string>& classes() const override { return classes_; }

  const std::map<std::string, int64_t>& class_to_idx() const { return class_to_idx_; }
  const std::filesystem::path& root() const { return root_; }

 private:
  std::filesystem::path root_;
  ImageFolderOptions options_;
  std::vector<std::string> classes_;
  std::map<std::string, int64_t> class_to_idx_;
};

// Whether `name` ends with one of `extensions`, ASCII case-insensitively (Python's
// name.lower().endswith(extensions)).
bool has_extension(const std::string& name, const std::vector<std::string>& extensions);

}  // namespace ember::data
