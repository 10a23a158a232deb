// `ember train --data DIR` on an ImageFolder tree: the training and validation datasets, the decoded
// cache, and the ImageNet-style transform sizes (docs/data.md, "Training on a folder of images").

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string_view>

#include "../data/image_cache.h"
#include "../data/image_folder.h"
#include "data_setup.h"
#include "checkpoint.h"

namespace ember::train {

namespace fs = std::filesystem;

std::string sample_list_hash(const data::ImageDataset& ds, const std::string& root) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, 64 bits
  auto add = [&h](std::string_view bytes) {
    for (const char c : bytes) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  };
  for (const std::string& c : ds.classes()) {
    add(c);
    add(std::string_view("\n", 1));
  }
  add(std::string_view("\0", 1));
  const fs::path base(root);
  for (int64_t i = 0; i < ds.size(); ++i) {
    add(fs::path(ds.path(i)).lexically_relative(base).string());
    add("\t");
    add(std::to_string(ds.label(i)));
    add("\n");
  }
  char out[32];
  std::snprintf(out, sizeof out, "fnv1a64:%016llx", static_cast<unsigned long long>(h));
  return out;
}

DataInfo open_image_folder(const std::string& root, const ImageDataOptions& o) {
  EMBER_CHECK(o.image_size == -1 || o.image_size >= 8, "--image-size must be at least 8, got ", o.image_size);
  EMBER_CHECK(o.val_split == -1 || (o.val_split > 0 && o.val_split < 1), "--val-split must be in (0, 1), got ",
              o.val_split);
  EMBER_CHECK(o.val.empty() || o.val_split == -1, "--val and --val-split exclude each other");
  DataInfo d;
  d.dir = root;
  d.kind = DataKind::image_folder;
  d.channels = 3;
  d.image_size = o.image_size > 0 ? o.image_size : 224;
  // torchvision's ImageNet evaluation: Resize(256) + CenterCrop(224), the same ratio at any size.
  d.resize = std::llround(static_cast<double>(d.image_size) * 256.0 / 224.0);
  d.mean = {0.485, 0.456, 0.406};  // ImageNet's statistics, as torchvision's recipes (docs/data.md)
  d.std = {0.229, 0.224, 0.225};
  const data::ImageFolderOptions folder_options{
      .bad_images = o.skip_bad_images ? data::BadImages::skip : data::BadImages::error,
      .jpeg_draft = data::JpegDraft::on};
  auto open = [&](const std::string& dir) -> std::shared_ptr<const data::ImageDataset> {
    auto folder = std::make_shared<const data::ImageFolder>(dir, folder_options);
    if (o.cache_dir.empty()) return folder;
    return std::make_shared<const data::CachedImages>(folder, data::ImageCacheOptions{.dir = o.cache_dir, .resize = d.resize});
  };
  std::shared_ptr<const data::ImageDataset> all = open(root);
  d.cached = !o.cache_dir.empty();
  d.classes = all->classes();
  d.samples = all->size();
  d.samples_hash = sample_list_hash(*all, root);
  EMBER_CHECK(o.eval_only || d.classes.size() >= 2, "--data '", root, "' has ", d.classes.size(), " class",
              d.classes.size() == 1 ? " ('" + d.classes[0] + "')" : std::string("es"),
              ": a classifier needs at least 2 class subdirectories");
  if (o.eval_only) {
    d.image_train = d.image_test = all;
  } else if (!o.val.empty()) {
    std::shared_ptr<const data::ImageDataset> val = open(o.val);
    EMBER_CHECK(val->classes() == d.classes, "--val '", o.val, "' has ", val->classes().size(),
                " classes that differ from the ", d.classes.size(), " of --data '", root,
                "' (both trees need the same class directories)");
    d.image_train = all;
    d.image_test = val;
  } else {
    std::vector<int64_t> labels(static_cast<size_t>(all->size()));
    for (int64_t i = 0; i < all->size(); ++i) labels[static_cast<size_t>(i)] = all->label(i);
    const double fraction = o.val_split > 0 ? o.val_split : 0.1;
    const data::SplitIndices split = data::stratified_split(labels, fraction, o.seed);
    EMBER_CHECK(!split.val.empty() && !split.train.empty(), "--data '", root, "': ", all->size(),
                " images are too few to split into training and validation sets");
    // Recorded with the run so that eval finds these images again (Note [Held-out split]).
    std::error_code ec;
    const fs::path absolute = fs::absolute(root, ec);
    d.split = HeldOutSplit{.data = ec ? root : absolute.lexically_normal().string(), .fraction = fraction,
                           .seed = o.seed, .samples = all->size(),
                           .held_out = static_cast<int64_t>(split.val.size()), .samples_hash = d.samples_hash};
    d.image_train = std::make_shared<const data::ImageSubset>(all, split.train);
    d.image_test = std::make_shared<const data::ImageSubset>(all, split.val);
  }
  d.train = d.image_train;
  d.test = d.image_test;
  return d;
}

}  // namespace ember::train
