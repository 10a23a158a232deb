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
#include <string>
#include <vector>

#include "../core/device.h"
#include "config.h"

namespace ember::train {

struct EpochStats {
  int epoch = 0;
  double train_loss = 0, train_acc = 0;
  double test_loss = NAN, test_acc = NAN;
  double images_per_sec = 0, seconds = 0;
};

struct TrainSummary {
  bool interrupted = false;     // SIGINT / SIGTERM stopped the run (after a checkpoint, with --save)
  bool stopped_early = false;   // --max-steps or --early-stop-patience stopped it before the last epoch ended
  // Why the run ended: "completed", "max_steps", "early_stop" or "interrupted"; stop_detail says
  // it in words for early stopping ("val_loss did not improve for 3 evaluations; best 0.31 at epoch 4").
  std::string stop_reason = "completed";
  std::string stop_detail;
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

}  // namespace ember::train
