#pragma once
// The data of a run: datasets opened from --data (IDX, CIFAR or an ImageFolder tree, with its
// held-out split), their statistics and the training and evaluation transforms
// (train/data_setup.cpp, train/image_data.cpp).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../core/tensor.h"
#include "../data/dataset.h"
#include "../data/image_dataset.h"
#include "../data/transforms.h"

namespace ember::train {

// The images a --val-split run held out (Note [Held-out split]): enough to
// find the same images again in the same tree, and to tell when the tree has changed.
struct HeldOutSplit {
  std::string data;          // the tree's absolute path when the run started
  double fraction = 0;       // --val-split
  uint64_t seed = 0;         // --seed
  int64_t samples = 0;       // images in the tree
  int64_t held_out = 0;      // of them, held out for validation
  std::string samples_hash;  // sample_list_hash of the tree ("fnv1a64:<16 hex digits>")
};

enum class DataKind { in_memory, image_folder };

struct DataInfo {
  std::string dir;  // where the files were read from
  DataKind kind = DataKind::in_memory;
  std::shared_ptr<const data::Dataset> train, test;
  // The image datasets behind `train` and `test` (ImageFolder data), for the skipped-file report.
  std::shared_ptr<const data::ImageDataset> image_train, image_test;
  std::vector<std::string> classes;
  int64_t channels = 1, image_size = 28;
  // ImageFolder: eval Resize(resize) + CenterCrop(image_size); 0 for in-memory data.
  int64_t resize = 0;
  // The images are pre-resized to `resize` by the decoded cache: transforms start after it.
  bool cached = false;
  std::vector<double> mean, std;  // per channel, of the training images scaled to [0, 1] (ImageNet's for ImageFolder)
  // What resume compares (check_resumed_data): the images of --data (the whole tree before a
  // split; the training split of IDX and CIFAR data), and for ImageFolder its sample_list_hash.
  int64_t samples = 0;
  std::string samples_hash;
  std::optional<HeldOutSplit> split;  // --val-split: the held-out part of the tree
};

// How to open an ImageFolder tree (TrainConfig's fields of the same names).
struct ImageDataOptions {
  std::string val = "";
  double val_split = -1;
  int64_t image_size = -1;
  std::string cache_dir = "";
  bool skip_bad_images = false;
  uint64_t seed = 1;
  bool eval_only = false;  // `ember eval`: the whole tree is the test set
};

// fashion-mnist | mnist | a directory: MNIST-style IDX files, CIFAR-10/100 binary batches or an
// ImageFolder tree (docs/data.md); data_dir overrides the location.
DataInfo open_data(const std::string& data, const std::string& data_dir, const ImageDataOptions& image = {});
// The ImageFolder part of open_data (train/image_data.cpp).
DataInfo open_image_folder(const std::string& root, const ImageDataOptions& options);
// Note [Held-out split]
// A --val-split run trains on part of its ImageFolder tree and validates on the rest, chosen by
// data::stratified_split(labels, fraction, seed). The choice is recorded (HeldOutSplit: the
// tree's path, the fraction, the seed, the number of images and a hash of the sample list) in the
// weights' metadata ("ember.split") and in the manifest ("split"), so that `ember eval` of the
// run, or of its weights with --data TREE, evaluates on the held-out images, not on images the
// model trained on: the same sample list with the same fraction and seed gives the same split.
// When the tree at the recorded path has another sample list (files added, removed or renamed),
// the held-out images can no longer be told apart from the training images, and eval refuses
// rather than report an accuracy inflated by training images. Another tree is evaluated whole.
// Resume compares the tree too (check_resumed_data): the class list, the number of images and
// the sample list hash.

// "fnv1a64:<16 hex digits>" of the dataset's class names and of every sample's path relative to
// `root` and its label, in order: two trees with the same files in the same classes hash alike.
std::string sample_list_hash(const data::ImageDataset& ds, const std::string& root);
// HeldOutSplit as a JSON object's text, and back (a malformed text is an error naming `where`).
std::string split_json(const HeldOutSplit& s);
HeldOutSplit split_from_json(const std::string& text, const std::string& where);

// Whether `dir` looks like a CIFAR-10 or CIFAR-100 binary directory.
bool is_cifar_dir(const std::string& dir);
// Whether open_data reads the directory `dir` as an ImageFolder tree (it holds neither CIFAR
// batches nor IDX files).
bool is_image_folder_dir(const std::string& dir);
// The ImageFolder eval transform for a model: Resize(resize) + CenterCrop(image_size) + ToTensor +
// Normalize (no Resize when resize is 0; no Resize/CenterCrop when `cached`).
data::Compose image_eval_transform(int64_t resize, int64_t image_size, bool cached, const std::vector<double>& mean,
                                   const std::vector<double>& std);
// Per-channel mean and std of u8 images (N, C, H, W), scaled to [0, 1].
void channel_stats(const Tensor& images, std::vector<double>& mean, std::vector<double>& std);
// The training transform: the crop and flip of the recipe, then (policy "trivial" / "randaug")
// TrivialAugmentWide / RandAugment on the u8 image, ToTensor, Normalize, then RandomErasing(p)
// when random_erasing > 0.
data::Compose make_train_transform(const DataInfo& d, bool flip, const std::string& policy = "light",
                                   double random_erasing = 0);
data::Compose make_eval_transform(const DataInfo& d);

}  // namespace ember::train
