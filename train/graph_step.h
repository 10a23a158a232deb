#pragma once
// --cuda-graphs: the training step captured once as a CUDA graph and replayed (Note [Training
// with CUDA graphs]).

#include <cstdint>
#include <memory>

#include "../core/tensor.h"
#include "train_step.h"

namespace ember::cuda {
class Graph;
}

namespace ember::train {

// Note [Training with CUDA graphs]
// `ember train --cuda-graphs` runs each full batch's step — TrainStep::run, the one step that eager
// training runs too (Note [One training step] in train/train_step.h): zero_grad, forward, loss,
// loss scaling and backward, the guard's record, unscaling and --clip-grad-norm, the scaler's step
// and update, the optimizer's update — as one replay of a CUDA graph (Note [CUDA graphs in ember]
// in core/cuda/graph.h). Full batches run eagerly until one of them has updated the optimizer:
// that step creates the optimizer's state (and the loss scaler's S) and fills the cuDNN algorithm
// cache, which a capture cannot do; with --amp fp16 a first step whose scaled gradients
// overflowed updates nothing, and the next full batch is the warm-up again. The next full batch is
// captured and replayed, with the batch copied into static device tensors that the graph reads;
// every later full batch is copied into the same tensors and replayed. The captured step folds its
// loss and count of correct predictions into the trainer's StepGuard on the device (Note
// [Divergence guard] in train/step_guard.h) before its update, which the guard's flag cancels
// after a non-finite loss, as in an eager step; the trainer reads the sums when it shows them
// (progress lines, --log-every step events, the end of an epoch). The optimizer's step count and
// the scheduled learning rate are host values: the optimizer moves them into device memory before
// each replay (before_each_replay), so the scheduler is stepped between replays as it is between
// eager steps. With --amp fp16 the overflow check, the skip of the update and the new S are
// decided on the device in every replay, and a skipped step leaves Adam's step count as it was
// (Note [Steps cancelled on the device] in optim/optimizer.h); --clip-grad-norm keeps the norm and
// its coefficient on the device (optim::clip_grad_norm_on_device_). A batch of another shape (the
// epoch's last, partial batch) runs eagerly. The weights are those of eager training, bit for bit
// on the emulator (with fp16 on a GPU, see that Note for the one formula that may round
// differently).
//
// With --amp bf16 or fp16 the captured forward pass and loss run under the autocast region of an
// eager step (Note [Mixed-precision training] in train/train_step.cpp): each replay casts the
// weights anew. Class indices are checked on the host before they are staged (cross_entropy's own
// check waits for the device and is left out of the capture). Not supported, and refused by
// validate() or start_run: the CPU device, several processes (the gradient all-reduce synchronizes)
// and --profile / --profile-trace (they time each op eagerly).
class GraphedStep {
 public:
  // `classes` for the host-side check of class-index labels (2-D soft labels are not checked).
  // `step` is captured as it is (StepMode::captured) and must outlive this object.
  GraphedStep(Device device, int64_t classes, const TrainStep& step);
  ~GraphedStep();
  GraphedStep(const GraphedStep&) = delete;
  GraphedStep& operator=(const GraphedStep&) = delete;

  // Whether this batch should be replayed: after the warm-up, and of the captured shapes.
  bool replays(const Tensor& host_images, const Tensor& host_labels) const;
  // An eager step of this full batch ran and updated the optimizer (TrainStep::Outputs::stepped):
  // the first such batch's shapes become the graph's.
  void eager_step_done(const Tensor& host_images, const Tensor& host_labels);
  // Copies the batch into the static tensors and replays the step (capturing it the first time).
  TrainStep::Outputs run(const Tensor& host_images, const Tensor& host_labels);
  // Nodes of the captured graph (0 before the capture).
  size_t node_count() const;

 private:
  Device device_;
  int64_t classes_;
  const TrainStep& step_;
  Shape image_shape_, label_shape_;
  DType image_dtype_ = DType::f32, label_dtype_ = DType::i64;
  bool warmed_up_ = false;
  Tensor images_, labels_;  // static inputs on the device
  TrainStep::Outputs outputs_;  // static outputs of the captured step
  std::shared_ptr<cuda::Graph> graph_;  // shared: deleted where it was made (a CUDA build)
};

}  // namespace ember::train
