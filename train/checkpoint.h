#pragma once
// Internal pieces of the trainer (train/): opening datasets, transforms, checkpoint files.

#include <memory>
#include <string>
#include <vector>

#include "../data/dataset.h"
#include "../data/image_dataset.h"
#include "../data/loader.h"
#include "../data/transforms.h"
#include "../io/safetensors.h"
#include "../io/training_state.h"
#include "../layers/module.h"
#include "../optim/grad_scaler.h"
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
// The training transform: the crop and flip of the recipe, then (policy "trivial" / "randaug")
// TrivialAugmentWide / RandAugment on the u8 image, ToTensor, Normalize, then RandomErasing(p)
// when random_erasing > 0.
data::Compose make_train_transform(const DataInfo& d, bool flip, const std::string& policy = "light",
                                   double random_erasing = 0);
data::Compose make_eval_transform(const DataInfo& d);

// Note [Checkpoint sets]
// A checkpoint directory (--save DIR) holds one checkpoint as a set of files that belong together:
//   DIR/checkpoint.json               the manifest: format, run id, step, epoch, and for every file
//                                     of the set its path, size and CRC-32; written last
//   DIR/step-<N>/model.safetensors    the weights at step N (metadata: ember.run, ember.step and
//                                     ember.checksum, a CRC-32 of the tensors, besides the model's
//                                     name, input size, class names and normalization)
//   DIR/step-<N>/state.safetensors    the training state at step N (io/training_state.h), whose
//                                     extra "run" names the run
// "best" is the manifest's pointer to the weights of an earlier (or the same) step directory,
// which is kept while it is named. A save writes a new step directory, syncs it, and then replaces
// the manifest with one atomic rename (io/atomic_file.h): a crash, a kill or a full disk at any
// point leaves the previous manifest, which names only complete files, so either the whole new
// checkpoint becomes visible or none of it does. What an interrupted save leaves is recognised by
// exact names and markers and removed when the next run opens the directory for writing, and a
// run removes only what is its own (Note [Run directory ownership] in train/run_dir.h); a run
// holds an flock on the directory while it writes, so a second run refuses it. Readers (resume,
// eval, predict, export) use a CheckpointReader, which checks every file against the manifest
// (size, CRC-32, run id and step), refuses a set that does not belong together, and keeps the
// files in place while it reads them (Note [Reading a checkpoint while it is saved]).

struct FileRef {
  std::string path;  // relative to the checkpoint directory
  uint64_t bytes = 0;
  std::string crc32;  // "crc32:<8 hex digits>" of the whole file
};

struct Manifest {
  std::string run;  // the run's id, made when it started (new_run_id)
  int64_t step = 0, epoch = 0;
  FileRef weights, state;
  bool has_best = false;
  int64_t best_step = 0;
  double best_acc = -1;
  FileRef best;
  std::string model, data, data_dir, val;  // what `ember eval DIR` evaluates on by default
  std::string amp = "off";                 // the run's --amp (off in manifests written before it)
};

inline constexpr const char* kManifestName = "checkpoint.json";
// Whether DIR holds a manifest (without checking it).
bool has_checkpoint(const std::string& dir);
// Reads DIR/checkpoint.json and checks every file it names (Note [Checkpoint sets]); throws an
// ember::Error naming the file and the mismatch for a set that does not belong together.
Manifest open_checkpoint(const std::string& dir);
// DIR/checkpoint.json parsed, its files not looked at (every path it names must be
// step-<N>/model.safetensors or step-<N>/state.safetensors).
Manifest read_manifest(const std::string& dir);

// open_checkpoint's check, and a promise: while the reader exists, the writer of a live run does
// not remove the files its manifest names (Note [Reading a checkpoint while it is saved] in
// train/checkpoint_set.cpp).
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& dir);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;
  const Manifest& manifest() const { return m_; }
  // DIR/<f.path>
  std::string path(const FileRef& f) const;

 private:
  int fd_ = -1;  // the manifest read, with a shared flock on it
  std::string dir_;
  Manifest m_;
};
// A fresh run id: 16 hex digits.
std::string new_run_id();
// "crc32:<8 hex digits>" of a file's bytes.
std::string file_crc32(const std::string& path);

struct RunDirSurvey;

// Rank 0's writer of one checkpoint directory: created before the first step, it creates the
// directory, takes the lock, refuses a directory that holds another run's checkpoint (unless
// overwrite) or files it cannot tell are ember's (train/run_dir.h), removes what an interrupted
// save left and says so, and with overwrite says what the first save replaces.
class CheckpointWriter {
 public:
  // `continuing`: this run resumes the checkpoint in `dir` itself.
  CheckpointWriter(const std::string& dir, std::string run, bool overwrite, bool continuing);
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;
  // Writes step-<N>/ with the weights and `state`, then the manifest (the best pointer kept);
  // then removes the step directories it no longer names, and at the first save an earlier
  // run's (overwrite).
  void save(const TrainConfig& cfg, const DataInfo& d, const nn::Module& model, const io::TrainingState& state);
  // Points the manifest's best at the last checkpoint, with this accuracy.
  void mark_best(double acc);
  const std::string& dir() const { return dir_; }
  bool saved() const { return saved_; }
  int64_t step() const { return m_.step; }

 private:
  // A manifest replaced by a newer one, and the step directories only it named: removed once no
  // reader holds it (Note [Reading a checkpoint while it is saved]).
  struct Retired {
    int manifest_fd = -1;
    std::vector<std::string> steps;
  };
  void write_manifest();
  void remove_leftovers(const RunDirSurvey& survey);
  void plan_replacement(const RunDirSurvey& survey, bool overwrite);
  // Removes what retired_ holds once its manifest is free, waiting up to `wait_seconds` for it.
  void remove_retired(double wait_seconds);
  std::string dir_;
  int lock_fd_ = -1;
  Manifest m_;
  bool saved_ = false;                  // a checkpoint of this run is in the manifest
  std::vector<std::string> named_;      // the step directories the manifest on disk names
  std::string new_step_;                // the step directory being saved (its marker is up)
  std::vector<std::string> replace_steps_, replace_files_;  // an earlier run's (overwrite)
  std::vector<Retired> retired_;
};

// Weights file metadata: the model's name and shape, class names and normalization, so a weights
// file alone is enough for `ember eval` / `ember predict`; ember.checksum over the tensors, and
// the run and step when given.
void save_weights(const std::string& path, const nn::Module& model, const TrainConfig& cfg, const DataInfo& d,
                  const std::string& run = "", int64_t step = -1);
// Loads a safetensors file into the model (strict names/shapes/dtypes, ember.checksum when
// present); errors name the file.
void load_weights_into(nn::Module& model, const std::string& path);
// Throws when a file's ember.checksum (if any) does not match its tensors.
void verify_weights_checksum(const io::SafetensorsFile& f);

// The training state of a checkpoint: optimizer, scheduler, the loss scaler (--amp fp16: its
// state_dict as extras "grad_scaler.<key>"), RNG, loader position, configuration.
io::TrainingState make_training_state(const TrainConfig& cfg, const DataInfo& d, const optim::Optimizer& opt,
                                      const optim::LRScheduler* sched, const optim::GradScaler& scaler,
                                      const data::DataLoader& loader, int64_t step, int64_t epochs_completed,
                                      const std::string& run);
// The saved run's configuration replaces cfg's. Options that may change on resume (--epochs
// upwards, --save, --metrics, --quiet, --threads, --workers, --max-steps, --eval-every,
// --eval-limit, --log-every, --save-weights, --device) are kept and listed in `changed`; any other
// option given with a value different from the saved one is an error.
void apply_saved_config(const io::TrainingState& st, TrainConfig& cfg, std::vector<std::string>& changed);
// A scaler that is enabled gets its state back (a checkpoint without it is an error).
void restore_training_state(const io::TrainingState& st, optim::Optimizer& opt, optim::LRScheduler* sched,
                            optim::GradScaler& scaler, data::DataLoader& loader, int64_t& step, int& start_epoch);

// Which misclassified images an evaluation keeps (EvalResult::mistakes): the `keep` most
// confident, with thumbnails un-normalized with `mean` and `std`.
struct MistakeOptions {
  int64_t keep = 0;
  std::vector<double> mean, std;
};

// With a communicator of world size W, rank r evaluates batches r, r + W, ... and the results
// are summed over the ranks (every rank returns the whole test set's numbers, except `mistakes`:
// each rank keeps those of its own batches).
EvalResult evaluate_loader(nn::Module& model, data::DataLoader& loader, int64_t num_classes,
                           parallel::Communicator* comm = nullptr, const MistakeOptions& mistakes = {});

}  // namespace ember::train
