#pragma once
// Checkpoint sets (--save DIR): the manifest, the reader and the writer of a run directory's
// checkpoints, and the training state they carry (train/checkpoint.cpp).

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "../data/loader.h"
#include "../io/safetensors.h"
#include "../io/training_state.h"
#include "../layers/module.h"
#include "../optim/grad_scaler.h"
#include "../optim/optimizer.h"
#include "../optim/scheduler.h"
#include "config.h"
#include "data_setup.h"

namespace ember::train {

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
// train/checkpoint.cpp).
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

}  // namespace ember::train
