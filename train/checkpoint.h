#pragma once
// Internal pieces of the trainer (train/): opening datasets, transforms, checkpoint files.

#include <memory>
#include <optional>
#include <span>
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
  // The held-out part of --data (Note [Held-out split]); split_recorded: the manifest says
  // whether there is one (manifests written before it do not).
  std::optional<HeldOutSplit> split;
  bool split_recorded = false;
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

// The manifest's fields from its bytes, without looking at any other file (open_checkpoint's
// first step, and the fuzz target's entry point: fuzz/parser_targets.h). Throws an ember::Error
// naming `path` for anything that is not a manifest of this format. Linear in the input.
Manifest parse_manifest(std::span<const uint8_t> bytes, const std::string& path);
// The largest manifest open_checkpoint reads (one is a few hundred bytes).
inline constexpr uint64_t kMaxManifestBytes = 1 << 20;
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
// "a, b, c and 7 more": at most `limit` names, then how many more (messages stay one line).
std::string name_list(const std::vector<std::string>& names, size_t limit = 6);
// Throws "<path>: the tensors do not match the model <name>: missing keys: ...; unexpected keys:
// ..." (at most a few names each) unless the file holds exactly the model's state_dict names.
// Before Module::load_state_dict, whose message lists every name (100,000 of a hostile file).
void check_same_names(const nn::Module& model, const std::string& model_name, const io::SafetensorsFile& f);
// Throws "<path>: tensor '<name>' holds N NaN or infinite value(s) ..." for the first floating
// tensor of the file that is not finite: such weights give NaN for every input (ember never
// writes them: Note [Divergence guard] in train/step_guard.h; a PyTorch file may hold them).
void check_finite_weights(const io::SafetensorsFile& f);

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
// A resumed run's data against the saved state's: the class list, the number of images and (an
// ImageFolder tree) the sample list hash. A difference is an error that says what changed.
void check_resumed_data(const io::TrainingState& st, const DataInfo& d);
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
// each rank keeps those of its own batches). A first SIGINT / SIGTERM / SIGHUP while
// InterruptHandlers are installed (train/interrupt.h) stops it at the next batch, with
// `interrupted` set (on every rank) and partial numbers.
EvalResult evaluate_loader(nn::Module& model, data::DataLoader& loader, int64_t num_classes,
                           parallel::Communicator* comm = nullptr, const MistakeOptions& mistakes = {});

}  // namespace ember::train
