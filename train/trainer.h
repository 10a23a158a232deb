#pragma once
// The bundled trainer behind `ember train`, `ember eval` and `ember predict`, usable from C++ too.
//
//   train::TrainConfig cfg;            // defaults = the default recipe
//   cfg.epochs = 2;
//   train::TrainSummary s = train::run_training(cfg);
//
// Checkpoint directory layout (--save DIR): DIR/checkpoint.json (the manifest, written last),
// DIR/step-<N>/model.safetensors (weights, with the model's name, config, class names,
// normalization, run id, step and checksum in the metadata), DIR/step-<N>/state.safetensors
// (optimizer, scheduler, RNG, loader position, epoch/step: io/training_state.h); the manifest's
// "best" names the step with the best finite test accuracy so far (Note [Checkpoint sets] in
// train/checkpoint.h).

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../core/tensor.h"
#include "../layers/module.h"

namespace ember::train {

struct TrainConfig {
  // data
  // fashion-mnist | mnist | a directory: MNIST-style IDX files, CIFAR-10/100 binary batches, or an
  // ImageFolder tree (class subdirectories of images; docs/data.md)
  std::string data = "fashion-mnist";
  std::string data_dir;                // overrides where fashion-mnist / mnist are read from
  // ImageFolder only:
  std::string val;          // a validation tree with the same classes; else a split of --data
  double val_split = -1;    // fraction held out for validation (stratified, seeded); -1: 0.1 without --val
  int64_t image_size = -1;  // training crop N (eval: Resize(round(N*256/224)) + CenterCrop(N)); -1: 224
  std::string cache_dir;    // decoded cache directory (data/image_cache.h); "": decode every epoch
  bool skip_bad_images = false;  // leave unreadable files out (reported per epoch) instead of failing
  // model and recipe ("" or negative = chosen by the default recipe; see resolve())
  std::string model;
  int epochs = -1;
  int64_t batch_size = -1;
  double lr = -1;
  std::string optimizer;  // adam | adamw | sgd
  double momentum = 0.9;  // sgd
  double weight_decay = -1;
  std::string scheduler;  // none | step | cosine | onecycle
  double warmup_epochs = -1;
  double label_smoothing = -1;
  double clip_grad_norm = 0;  // > 0: gradients scaled to this total norm at most (optim/clip.h); 0: off
  // --amp: mixed precision (Note [Mixed-precision training] in train/train_step.cpp; docs/amp.md).
  // off | bf16 (forward and loss under autocast in bfloat16) | fp16 (in float16, with loss scaling)
  std::string amp = "off";
  // --channels-last: the model's 4-D parameters and each batch of images in the channels-last
  // memory format (Note [Memory formats] in core/memory_format.h); the same values as without.
  bool channels_last = false;
  bool augment = true;   // RandomCrop(pad 2) + flip ... unless --no-augment
  // --augment: light (the crop and flip above) | trivial (then TrivialAugmentWide) | randaug (then
  // RandAugment(2, 9)); docs/training.md, "Augmentation".
  std::string augment_policy = "light";
  double random_erasing = 0;  // RandomErasing's p after Normalize (0: off)
  double mixup = 0;           // Mixup's alpha (0: off)
  double cutmix = 0;          // CutMix's alpha (0: off); with both, one of the two per batch
  bool shuffle = true;
  uint64_t seed = 1;
  std::string device = "auto";  // auto | cpu | cuda[:n]
  // --cuda-graphs: each full batch's step replays one captured CUDA graph (Note [Training with CUDA
  // graphs] in train/graph_step.h); the same weights as without, bit for bit.
  bool cuda_graphs = false;
  int threads = 0;              // 0: all cores
  int workers = 0;              // data-loader worker threads (0: load in the training thread)
  bool data_on_device = false;  // the training set in device memory, batches made there (--device cuda)
  // checkpoints and outputs
  std::string save_dir;    // --resume DIR without --save: DIR
  std::string resume_dir;
  bool overwrite = false;  // --save into a directory holding another run's checkpoint
  int eval_every = 1;  // evaluate on the test set every N epochs (and after the last)
  int64_t eval_limit = 0;  // evaluate on the first N test images only (0: all of them)
  std::string init_weights;
  // Fine-tuning from PyTorch weights (Note [Fine-tuning] in train/finetune.h): --init-weights
  // without its classifier, which is made fresh for the dataset's classes; the backbone frozen,
  // or trained with lr * backbone_lr_scale.
  bool finetune = false;
  bool freeze_backbone = false;
  double backbone_lr_scale = 1;
  std::string save_weights;
  int64_t max_steps = -1;  // stop after this many optimizer steps in total (checkpoint saved)
  std::string metrics_path;
  // --profile: print a table of every op's time (forward, backward, optimizer, data) at the end;
  // --profile-trace FILE: write the same as a Chrome/Perfetto trace (core/profiler.h).
  bool profile = false;
  std::string profile_trace;
  bool quiet = false;
  int64_t log_every = 1;  // metrics "step" events every N steps

  // Data-parallel runs (mpirun / srun; docs/distributed.md).
  // --sync-bn: BatchNorm layers normalize with the statistics of the global batch (every
  // process's images; parallel::convert_sync_batchnorm). Nothing changes on one process.
  bool sync_bn = false;
  // Not options, filled by run_training from the launcher. batch_size stays per process: the
  // global batch is batch_size * world_size.
  int world_size = 1;

  // The options the user gave, by long name without "--" ("batch-size", "lr", ...): their values
  // are checked and kept even where they equal a "not given" value, and a resumed run compares
  // them with the saved configuration. given_text: the text as typed, for error messages.
  std::vector<std::string> explicitly_set;
  std::map<std::string, std::string> given_text;
};

// Fills every "chosen by the recipe" field: the default recipe for the dataset (the one that
// reaches >= 92% on Fashion-MNIST in a few minutes on 2 cores), or PyTorch-comparable settings
// where the user gave them. Returns human-readable lines saying what it chose.
std::vector<std::string> resolve(TrainConfig& cfg);
// Throws ember::Error for impossible settings (batch size 0, negative epochs, unknown names,...).
void validate(const TrainConfig& cfg);
// The ranges of the values given (fields in explicitly_set, and any field not at its "not given"
// value): "--lr must be a positive finite number, got -1". `ember train` calls it right after
// parsing; validate() calls it too.
void check_options(const TrainConfig& cfg);

struct EpochStats {
  int epoch = 0;
  double train_loss = 0, train_acc = 0;
  double test_loss = NAN, test_acc = NAN;
  double images_per_sec = 0, seconds = 0;
};

struct TrainSummary {
  bool interrupted = false;     // SIGINT / SIGTERM stopped the run (after a checkpoint, with --save)
  bool stopped_early = false;   // --max-steps stopped it before the last epoch ended
  int epochs_run = 0;           // epochs begun in this run's numbering (1-based epoch of the last step)
  double test_acc = NAN;
  double test_loss = NAN;
  double images_per_sec = 0;  // training throughput over the whole run
  double seconds = 0;
  int64_t steps = 0;
  std::vector<EpochStats> epochs;
};

// Runs a whole training (or its remainder, with resume_dir). Progress goes to stderr, the
// one-line summary to stdout (unless quiet). A non-finite loss throws (Note [Divergence guard] in
// train/step_guard.h); SIGINT / SIGTERM stop it after the current step with a checkpoint and
// summary.interrupted set (Note [Clean interrupts]).
//
// Started by mpirun / srun with more than one process (parallel::init_from_env), every process
// trains a replica wrapped in parallel::DistributedDataParallel on its DistributedSampler shard
// of each epoch (per-process batch --batch-size, augmentation seeded per rank); gradients are
// averaged every step. Only rank 0 prints, writes metrics and saves checkpoints; every rank
// resumes from the same checkpoint directory. --threads defaults to cores / processes per node.
TrainSummary run_training(TrainConfig cfg);

// --device: "auto" (a real GPU if there is one, else the CPU — never the SIMT emulator, which is
// for correctness, not speed), "cpu", "cuda" or "cuda:N". Throws a clear error for a device this
// build or machine does not have.
Device resolve_device(const std::string& spec);

// The images a --val-split run held out (Note [Held-out split] in train/checkpoint.h): enough to
// find the same images again in the same tree, and to tell when the tree has changed.
struct HeldOutSplit {
  std::string data;          // the tree's absolute path when the run started
  double fraction = 0;       // --val-split
  uint64_t seed = 0;         // --seed
  int64_t samples = 0;       // images in the tree
  int64_t held_out = 0;      // of them, held out for validation
  std::string samples_hash;  // sample_list_hash of the tree ("fnv1a64:<16 hex digits>")
};

// A model with what is needed to use it: built from a checkpoint's metadata.
struct LoadedModel {
  std::shared_ptr<nn::Module> model;
  std::string model_name;
  int64_t in_channels = 1, image_size = 28;
  int64_t resize = 0;  // eval Resize(resize) before CenterCrop(image_size) (ImageFolder models); 0: none
  std::vector<std::string> classes;
  std::vector<double> mean, std;
  std::optional<HeldOutSplit> split;  // the run held out part of its ImageFolder tree (--val-split)
};
// CHECKPOINT: a weights .safetensors file written by ember (its ember.checksum verified), or a
// checkpoint directory (the whole set verified by open_checkpoint; its best weights if it has
// them, else the last).
LoadedModel load_model(const std::string& checkpoint);
// A PyTorch state_dict saved with safetensors (no ember metadata), as the zoo model `model_name`:
// the input channels and the number of classes from the tensors' shapes (classes named "0",
// "1", ...), ImageNet's normalization, and torchvision's ImageNet eval transform scaled to
// image_size: Resize(round(image_size * 256 / 224)) + CenterCrop(image_size). Missing
// num_batches_tracked buffers are allowed; anything else that does not match is an error naming
// the tensors (Note [Fine-tuning] in train/finetune.h).
LoadedModel load_pytorch_model(const std::string& path, const std::string& model_name, int64_t image_size = 224);

// One misclassified test image (EvalResult::mistakes).
struct Mistake {
  int64_t index = -1;  // in the test split; -1 when unreadable files were left out of its batch
  int64_t truth = 0, predicted = 0;
  double confidence = 0;  // the softmax probability of `predicted`
  std::string png;        // a thumbnail of the image as the model saw it (train/run_report.h)
};

struct EvalResult {
  double accuracy = 0, loss = 0;
  int64_t count = 0;
  std::vector<double> per_class_accuracy;
  std::vector<std::vector<int64_t>> confusion;  // [true][predicted]
  std::vector<Mistake> mistakes;                // the most confident first; only when asked for
  // evaluate(): > 0 when `data` was the tree the model's run split (m.split): the images evaluated
  // are the held_out ones of a tree of this many.
  int64_t held_out_of = 0;
  bool interrupted = false;  // evaluate_loader: SIGINT/SIGTERM/SIGHUP stopped it; the numbers are partial
};
// Evaluates a loaded model on the test split of `data` (fashion-mnist | mnist | IDX directory), or
// on an ImageFolder tree: the whole tree, or, when it is the tree the model's run split with
// --val-split (the same sample list: m.split), its held-out images only; a tree at the path the
// run split whose sample list has changed since is refused (Note [Held-out split]).
EvalResult evaluate(const LoadedModel& m, const std::string& data, const std::string& data_dir, int64_t batch_size = 256);

struct Prediction {
  std::vector<std::pair<std::string, double>> top;  // (class name, probability), best first
  std::vector<float> logits;                        // the model's output, one per class
};
// Top-k predictions: each input is an image file (PNG, JPEG, ... : decoded, then the checkpoint's
// eval transform: Resize(resize) + CenterCrop(image_size), or Resize + CenterCrop to image_size
// for a model without a recorded resize) or "FILE.idx[.gz]:INDEX" (an image inside an IDX file).
std::vector<Prediction> predict(const LoadedModel& m, const std::vector<std::string>& inputs, int k = 5);

}  // namespace ember::train
