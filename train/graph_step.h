#pragma once
// --cuda-graphs: the training step captured once as a CUDA graph and replayed (Note [Training
// with CUDA graphs]).

#include <cstdint>
#include <functional>
#include <memory>

#include "../core/tensor.h"

namespace ember::cuda {
class Graph;
}

namespace ember::train {

// Note [Training with CUDA graphs]
// `ember train --cuda-graphs` runs each full batch's step — zero_grad, forward, loss, backward,
// the correct-prediction count, the optimizer's update — as one replay of a CUDA graph (Note
// [CUDA graphs in ember] in core/cuda/graph.h). The first full batch runs eagerly: it creates
// the optimizer's state and fills the cuDNN algorithm cache, which a capture cannot do. The
// second is captured and replayed, with the batch copied into static device tensors that the graph
// reads; every later full batch is copied into the same tensors and replayed. The captured step
// folds its loss and count of correct predictions into the trainer's StepGuard on the device
// (Note [Divergence guard] in train/step_guard.h) before its update, which the guard's flag
// cancels after a non-finite loss, as in an eager step; the trainer reads the sums when it shows
// them (progress lines, --log-every step events, the end of an epoch). The optimizer's step count and the scheduled learning rate are host values: the optimizer moves
// them into device memory before each replay (before_each_replay), so the scheduler is stepped
// between replays as it is between eager steps. A batch of another shape (the epoch's last,
// partial batch) runs eagerly. The weights are those of eager training, bit for bit.
//
// With --amp bf16 the captured forward pass and loss run under the autocast region of an eager
// step (Note [Mixed-precision training] in train/trainer.cpp): each replay casts the weights anew.
// Class indices are checked on the host before they are staged (cross_entropy's own check waits
// for the device and is left out of the capture). Not supported, and refused by validate(): the
// CPU device, several processes (the gradient all-reduce synchronizes), --clip-grad-norm (it reads
// the norm on the host), --amp fp16 (its loss scaler reads the overflow flag on the host) and
// --profile / --profile-trace (they time each op eagerly).
class GraphedStep {
 public:
  // What a step leaves on the device: the mean loss and the number of correct predictions (f64).
  struct Outputs {
    Tensor loss, correct;
  };
  // The whole step on device tensors (as the eager step computes it, in that order).
  using StepFunction = std::function<Outputs(const Tensor& images, const Tensor& labels)>;

  // `classes` for the host-side check of class-index labels (2-D soft labels are not checked).
  GraphedStep(Device device, int64_t classes, StepFunction step);
  ~GraphedStep();
  GraphedStep(const GraphedStep&) = delete;
  GraphedStep& operator=(const GraphedStep&) = delete;

  // Whether this batch should be replayed: after the warm-up, and of the captured shapes.
  bool replays(const Tensor& host_images, const Tensor& host_labels) const;
  // An eager step of this batch ran: the first full batch's shapes become the graph's.
  void eager_step_done(const Tensor& host_images, const Tensor& host_labels);
  // Copies the batch into the static tensors and replays the step (capturing it the first time).
  Outputs run(const Tensor& host_images, const Tensor& host_labels);
  // Nodes of the captured graph (0 before the capture).
  size_t node_count() const;

 private:
  Device device_;
  int64_t classes_;
  StepFunction step_;
  Shape image_shape_, label_shape_;
  DType image_dtype_ = DType::f32, label_dtype_ = DType::i64;
  bool warmed_up_ = false;
  Tensor images_, labels_;  // static inputs on the device
  Outputs outputs_;         // static outputs of the captured step
  std::shared_ptr<cuda::Graph> graph_;  // shared: deleted where it was made (a CUDA build)
};

}  // namespace ember::train
