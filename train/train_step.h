#pragma once
// TrainStep: ember train's training step, written once and run both eagerly and inside a CUDA
// graph's capture (Note [One training step]).

#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "../core/memory_format.h"
#include "../core/tensor.h"

namespace ember::nn {
class Module;
class CrossEntropyLoss;
}  // namespace ember::nn
namespace ember::optim {
class Optimizer;
class GradScaler;
}  // namespace ember::optim
namespace ember::parallel {
class DistributedDataParallel;
}

namespace ember::train {

class StepGuard;

// Note [One training step]
// A step is zero_grad; the forward pass and the loss under autocast (Note [Mixed-precision
// training]); the loss scaled and backward; the divergence guard's record of the loss and the
// correct predictions (Note [Divergence guard] in train/step_guard.h); with --clip-grad-norm,
// the gradients unscaled and clipped (optim::clip_grad_norm_on_device_); the scaler's step, which
// runs the optimizer's update unless the scaled gradients overflowed; and the scaler's update.
// TrainStep::run is that sequence, and it is the only one: train_one_epoch calls it for every
// eager step, and GraphedStep (Note [Training with CUDA graphs] in train/graph_step.h) calls it
// inside the capture, so a replayed step is the eager step's device work by construction, as
// tinygrad's beautiful_mnist runs one train_step eagerly and under its JIT.
//
// What only an eager step does is switched by the StepMode, not written twice: the profiler's
// phase scopes (a graph replays its kernels in one launch), the EMBER_FAULT testing hooks (they
// read the host's step number), DDP's forward and the caller's `before_update` (several
// processes agree on stopping between backward and the update: both synchronize with the host).
// What differs between eager and captured beneath the step is decided by the library where it
// runs, never by the step: GradScaler::step reads the overflow flag on the host eagerly and
// cancels the update on the device in a graph (Note [Steps cancelled on the device] in
// optim/optimizer.h); the optimizers read their per-step scalars from device buffers filled
// before each replay (Note [CUDA graphs in ember] in core/cuda/graph.h); the clipping keeps its
// norm on the device in both. A feature added to the step (accumulation, an EMA of the weights)
// is then added once, and runs under --cuda-graphs as long as it queues only device work.
//
// Gradient accumulation (--accum-steps K) is the same step over K micro-batches: zero_grad once;
// for each micro-batch of n_i images (N in all) the forward pass, its mean loss weighted by
// n_i / N (1/K when the micro-batches are full) and backward, which adds into the gradients;
// with DDP every backward but the last inside no_sync, so the ranks all-reduce once per step;
// then the guard's record of the step (the weighted losses summed: the mean over the N images),
// the unscaling and clipping, the scaler's step and update, once. The gradients are those of one
// batch of N images up to float32 rounding (the sums run in another order); the step counts,
// the schedule, --max-steps and the checkpoints count optimizer steps. A captured step is one
// micro-batch: --cuda-graphs with --accum-steps above 1 is refused (TrainConfig's validate).

// The check cross_entropy would make of a batch's class indices (labels (N,) int64 on the host,
// each in [0, classes)), made on the host before they are copied to the device: an ember::Error
// naming the first bad label. Class probabilities ((N, classes) floats: Mixup, CutMix) pass, and
// so do labels already on a device: --data-on-device gathers them from a dataset whose labels
// ember train checked whole before its first step.
// TrainStep::run takes its labels as checked (CheckedTargetsGuard in layers/nn_functional.h), so
// an eager step reads nothing back for them: no host sync.
void check_class_indices(const Tensor& host_labels, int64_t classes);

// Where a step runs.
enum class StepMode {
  eager,     // now, on the host's thread: host reads, hooks and profiler scopes allowed
  captured,  // recorded into a CUDA graph that replays it: device work only
};

class TrainStep {
 public:
  // What the step works with, owned by the caller, which keeps each object alive and at its
  // address while the step (and any graph that captured it) exists.
  struct Parts {
    nn::Module* model = nullptr;
    nn::CrossEntropyLoss* criterion = nullptr;
    optim::Optimizer* optimizer = nullptr;
    optim::GradScaler* scaler = nullptr;  // --amp fp16; disabled otherwise (its calls pass through)
    StepGuard* guard = nullptr;           // its flag is the optimizer's skip flag
    parallel::DistributedDataParallel* ddp = nullptr;  // several processes (eager steps only)
    std::optional<DType> amp;                          // --amp: the autocast dtype
    Device device;                                     // the training device
    MemoryFormat input_format = MemoryFormat::contiguous;  // --channels-last
    double clip_grad_norm = 0;                             // > 0: --clip-grad-norm
  };
  // What a step leaves on the device, for the guard's reads and the graph's outputs.
  struct Outputs {
    Tensor loss;     // the mean loss (float32, one element)
    Tensor correct;  // the batch's correct predictions (float64, one element)
    // Eager steps: false when the loss scaler skipped the update (scaled gradients overflowed).
    // Captured steps: true (the update is decided on the device at each replay).
    bool stepped = true;
  };
  // Called by an eager step after backward and the guard's record, before the update.
  using BeforeUpdate = std::function<void()>;
  // One micro-batch, on the training device: images (N, C, H, W), labels (N,) class indices or
  // (N, classes) class probabilities (Mixup, CutMix).
  struct Batch {
    Tensor images, labels;
  };

  explicit TrainStep(const Parts& parts);

  // One optimizer step on one or more micro-batches already on the training device, their
  // gradients accumulated (the Note above); one micro-batch is the plain step. Class-index labels
  // were checked by check_class_indices before they were copied. `step_number` is
  // the run's number of this step (1-based; EMBER_FAULT=nan-loss-at reads it). A captured step
  // takes one micro-batch, no DDP and no before_update (ember::Error otherwise).
  Outputs run(std::span<const Batch> micro_batches, StepMode mode, int64_t step_number = 0,
              const BeforeUpdate& before_update = {}) const;
  // The step on one batch.
  Outputs run(const Tensor& images, const Tensor& labels, StepMode mode, int64_t step_number = 0,
              const BeforeUpdate& before_update = {}) const {
    const Batch batch{images, labels};
    return run(std::span<const Batch>(&batch, 1), mode, step_number, before_update);
  }

 private:
  Parts parts_;
};

}  // namespace ember::train
