#pragma once
// Internal pieces of the trainer (train/): opening datasets, transforms, checkpoint files.

#include <memory>
#include <string>
#include <vector>

#include "../data/dataset.h"
#include "../data/image_dataset.h"
#include "../data/loader.h"
#include "../data/transforms.h"
#include "../io/training_state.h"
#include "../layers/module.h"
#include "../optim/optimizer.h"
#include "../optim/scheduler.h"
#include "trainer.h"

namespace ember::parallel {
class Communicator;
}

namespace ember::train {

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
// Whether `dir` looks like a CIFAR-10 or CIFAR-100 binary directory.
bool is_cifar_dir(const std::string& dir);
// The ImageFolder eval transform for a model: Resize(resize) + CenterCrop(image_size) + ToTensor +
// Normalize (no Resize when resize is 0; no Resize/CenterCrop when `cached`).
data::Compose image_eval_transform(int64_t resize, int64_t image_size, bool cached, const std::vector<double>& mean,
                                   const std::vector<double>& std);
// Per-channel mean and std of u8 images (N, C, H, W), scaled to [0, 1].
void channel_stats(const Tensor& images, std::vector<double>& mean, std::vector<double>& std);
data::Compose make_train_transform(const DataInfo& d, bool flip);
data::Compose make_eval_transform(const DataInfo& d);

struct CheckpointPaths {
  std::string weights, state, best;
};
CheckpointPaths checkpoint_paths(const std::string& dir);

// Weights file metadata: the model's name and shape, class names and normalization, so a weights
// file alone is enough for `ember eval` / `ember predict`.
void save_weights(const std::string& path, const nn::Module& model, const TrainConfig& cfg, const DataInfo& d);
// Loads a safetensors file into the model (strict names/shapes/dtypes); errors name the file.
void load_weights_into(nn::Module& model, const std::string& path);

void save_checkpoint(const TrainConfig& cfg, const DataInfo& d, const nn::Module& model, const optim::Optimizer& opt,
                     const optim::LRScheduler* sched, const data::DataLoader& loader, int64_t step,
                     int64_t epochs_completed, double best_acc, bool is_best);
// The saved run's configuration replaces cfg's (except --epochs, --resume, --save, --metrics,
// --quiet, --threads, --max-steps and --eval-every, which the resuming command may change).
void apply_saved_config(const io::TrainingState& st, TrainConfig& cfg);
void restore_training_state(const io::TrainingState& st, optim::Optimizer& opt, optim::LRScheduler* sched,
                            data::DataLoader& loader, int64_t& step, int& start_epoch, double& best_acc);

// With a communicator of world size W, rank r evaluates batches r, r + W, ... and the results
// are summed over the ranks (every rank returns the whole test set's numbers).
EvalResult evaluate_loader(nn::Module& model, data::DataLoader& loader, int64_t num_classes,
                           parallel::Communicator* comm = nullptr);

}  // namespace ember::train
