#pragma once
// What `ember train` is asked to do: TrainConfig (every option, "not given" values chosen by the
// recipe), the recipe that fills it (resolve), and the checks of its values (train/recipe.cpp).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

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
  int64_t batch_size = -1;  // images per loader batch (a micro-batch with --accum-steps)
  // --accum-steps K: each optimizer step accumulates the gradients of K loader batches (Note [One
  // training step] in train/train_step.h); the batch a step sees is K * batch_size images.
  int64_t accum_steps = 1;
  double lr = -1;
  std::string optimizer;  // adam | adamw | sgd
  double momentum = 0.9;  // sgd
  double weight_decay = -1;
  // none | step | cosine | onecycle | multistep:M1,M2,... | exponential:G | plateau (parse_scheduler)
  std::string scheduler;
  double warmup_epochs = -1;
  // --scheduler plateau (optim::ReduceLROnPlateau, stepped after each evaluation): the lr times
  // plateau_factor after more than plateau_patience evaluations without improvement of
  // plateau_metric ("": the evaluation's loss, test_loss or val_loss; resolve_monitored).
  int64_t plateau_patience = 10;
  double plateau_factor = 0.1;
  std::string plateau_metric;
  // --early-stop-patience P (0: off): the run stops after P evaluations in a row without
  // improvement of early_stop_metric ("": the evaluation's loss; train/early_stopping.h).
  int64_t early_stop_patience = 0;
  std::string early_stop_metric;
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
  // --explain GPU: record one step of the run's first batch and print its launch ledger priced on
  // that GPU ("h100", "h200"; train/explain.h), then stop without training.
  std::string explain;
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

// --scheduler, parsed. Milestones are in epochs; every schedule is stepped once per optimizer step
// (train/run_setup.cpp).
struct ScheduleSpec {
  std::string kind;                 // none | step | cosine | onecycle | multistep | exponential | plateau
  std::vector<int64_t> milestones;  // multistep: epochs, increasing, each >= 1
  double gamma = 0.1;               // multistep: 0.1; exponential: G in (0, 1]
};
// Throws ember::Error naming --scheduler and what is wrong ("multistep:30,x", "exponential:2").
ScheduleSpec parse_scheduler(const std::string& text);

// Fills every "chosen by the recipe" field: the default recipe for the dataset (the one that
// reaches >= 92% on Fashion-MNIST in a few minutes on 2 cores), or PyTorch-comparable settings
// where the user gave them. Returns human-readable lines saying what it chose.
std::vector<std::string> resolve(TrainConfig& cfg);
// The metrics --scheduler plateau and --early-stop-patience watch: "" becomes the evaluation's
// loss; a name the run does not produce is an ember::Error naming the option. `held_out`: the run
// evaluates on a validation set (ImageFolder --val or --val-split: val_loss, val_acc), else on
// the test set (test_loss, test_acc).
void resolve_monitored(TrainConfig& cfg, bool held_out);
// Throws ember::Error for impossible settings (batch size 0, negative epochs, unknown names,...).
void validate(const TrainConfig& cfg);
// The ranges of the values given (fields in explicitly_set, and any field not at its "not given"
// value): "--lr must be a positive finite number, got -1". `ember train` calls it right after
// parsing; validate() calls it too.
void check_options(const TrainConfig& cfg);

}  // namespace ember::train
