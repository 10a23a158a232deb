// ImageFolder (contract and the order rule in image_folder.h, Note [ImageFolder order]).

#include "image_folder.h"

#include <algorithm>
#include <set>
#include <system_error>

#include "quoted_path.h"

namespace ember::data {
namespace {

namespace fs = std::filesystem;

using detail::quoted;

bool hidden(const std::string& name) { return !name.empty() && name[0] == '.'; }

// One directory os.walk yields: its path relative to the class directory ("" for the class
// directory itself, "a/b" below it) and its non-directory entries, sorted.
struct WalkedDir {
  std::string rel;
  fs::path path;
  std::vector<std::string> files;
};

// os.walk(dir, followlinks=True), top-down. `ancestors` holds the canonical paths of the
// directories being walked above, to stop at symlink cycles. An unreadable directory yields
// nothing (os.walk's default onerror=None).
void walk(const fs::path& dir, const std::string& rel, bool skip_hidden, std::vector<fs::path>& ancestors,
          std::vector<WalkedDir>& out) {
  std::error_code ec;
  fs::directory_iterator it(dir, fs::directory_options::none, ec);
  if (ec) return;
  WalkedDir here{rel, dir, {}};
  std::vector<std::string> subdirs;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    if (skip_hidden && hidden(name)) continue;
    std::error_code dir_ec;
    if (it->is_directory(dir_ec))  // follows symlinks; a broken link is a file, as os.walk
      subdirs.push_back(name);
    else
      here.files.push_back(name);
  }
  std::sort(here.files.begin(), here.files.end());
  out.push_back(std::move(here));
  for (const std::string& name : subdirs) {
    const fs::path sub = dir / name;
    const fs::path canon = fs::canonical(sub, ec);
    if (ec) continue;
    if (std::find(ancestors.begin(), ancestors.end(), canon) != ancestors.end()) continue;  // a symlink cycle
    ancestors.push_back(canon);
    walk(sub, rel.empty() ? name : rel + "/" + name, skip_hidden, ancestors, out);
    ancestors.pop_back();
  }
}

}  // namespace

const std::vector<std::string>& image_extensions() {
  static const std::vector<std::string> exts = {".jpg", ".jpeg", ".png", ".ppm", ".bmp",
                                                ".pgm", ".tif",  ".tiff", ".webp"};
  return exts;
}

bool has_extension(const std::string& name, const std::vector<std::string>& extensions) {
  std::string lower = name;
  for (char& c : lower)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  for (const std::string& ext : extensions) {
    std::string e = ext;
    for (char& c : e)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (lower.size() >= e.size() && lower.compare(lower.size() - e.size(), e.size(), e) == 0) return true;
  }
  return false;
}

ImageFolder::ImageFolder(const fs::path& root, ImageFolderOptions options)
    : ImageFileDataset("ImageFolder", options.decode, options.jpeg_draft), root_(root), options_(std::move(options)) {
  set_bad_images(options_.bad_images);
  std::error_code ec;
  const fs::file_status st = fs::status(root_, ec);
  EMBER_CHECK(fs::exists(st), "ImageFolder: root ", quoted(root_), " does not exist");
  EMBER_CHECK(fs::is_directory(st), "ImageFolder: root ", quoted(root_), " is not a directory");

  // The classes: root's entries that are directories after following symlinks, sorted by name.
  fs::directory_iterator it(root_, fs::directory_options::none, ec);
  EMBER_CHECK(!ec, "ImageFolder: cannot list root ", quoted(root_), ": ", ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    EMBER_CHECK(!ec, "ImageFolder: cannot list root ", quoted(root_), ": ", ec.message());
    const std::string name = it->path().filename().string();
    if (options_.skip_hidden && hidden(name)) continue;
    std::error_code dir_ec;
    if (it->is_directory(dir_ec)) classes_.push_back(name);
  }
  std::sort(classes_.begin(), classes_.end());
  EMBER_CHECK(!classes_.empty(), "ImageFolder: found no class directories in ", quoted(root_));
  for (size_t i = 0; i < classes_.size(); ++i) class_to_idx_[classes_[i]] = static_cast<int64_t>(i);

  // The samples, class by class (Note [ImageFolder order]).
  std::vector<std::string> empty_classes;
  for (size_t label = 0; label < classes_.size(); ++label) {
    const fs::path class_dir = root_ / classes_[label];
    std::vector<WalkedDir> dirs;
    std::vector<fs::path> ancestors;
    const fs::path canon = fs::canonical(class_dir, ec);
    if (!ec) ancestors.push_back(canon);
    walk(class_dir, "", options_.skip_hidden, ancestors, dirs);
    // sorted(os.walk(...)): by the whole path string; all share the class directory's prefix and
    // the class directory itself ("") comes first, so comparing `rel` is the same.
    std::sort(dirs.begin(), dirs.end(), [](const WalkedDir& a, const WalkedDir& b) { return a.rel < b.rel; });
    const size_t before = samples_.size();
    for (const WalkedDir& d : dirs)
      for (const std::string& f : d.files)
        if (has_extension(f, options_.extensions)) samples_.push_back({d.path / f, static_cast<int64_t>(label)});
    if (samples_.size() == before) empty_classes.push_back(classes_[label]);
  }
  if (!empty_classes.empty()) {
    std::string names, exts;
    for (const std::string& c : empty_classes) names += (names.empty() ? "" : ", ") + c;
    for (const std::string& e : options_.extensions) exts += (exts.empty() ? "" : ", ") + e;
    EMBER_THROW("ImageFolder: ", quoted(root_), ": found no valid file for the classes ", names,
                ". Supported extensions are: ", exts);
  }
}

const ImageSample& ImageFileDataset::sample(int64_t index) const {
  EMBER_CHECK(index >= 0 && index < size(), kind_, ": index ", index, " is out of range for ", size(), " samples");
  return samples_[static_cast<size_t>(index)];
}

Tensor ImageFileDataset::load_image(int64_t index, const DecodeHint& hint) const {
  return decode_file(sample(index).path.string(), decode_, jpeg_draft_, hint);
}

Tensor ImageFileDataset::load_native(int64_t index, const DecodeHint& hint) const {
  return decode_file(sample(index).path.string(), decode_, jpeg_draft_, hint, ImageLayout::HWC);
}

}  // namespace ember::data
