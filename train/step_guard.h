#pragma once
// StepGuard: ember train's running loss and accuracy sums and its divergence flag, kept on the
// training device and read by the host once per log interval (Note [Divergence guard]).

#include <cstdint>

#include "../core/tensor.h"

namespace ember::train {

// Note [Divergence guard]
// A run must never apply an update computed from a non-finite loss, and it must name the step
// whose loss first stopped being finite. Reading every step's loss on the host would do both, but
// on a GPU each read waits for the device to finish the step. So the check runs on the device:
// after a step's backward, record() folds its loss into a few device scalars — a sticky flag
// (1 once any loss was NaN or infinite), the count of finite steps before it, the sums of
// loss * batch size and of correct predictions over those steps, the last finite loss and the
// first non-finite one. The flag is the optimizer's skip flag (Optimizer::set_skip_flag, torch's
// found_inf): the update of the first non-finite step, and of every step after it, changes no
// weight and no optimizer state, on the device, without a host read.
//
// The host reads all of it with one copy (read()) when it shows the numbers: a --log-every step
// event, a progress line, the end of an epoch. A read that finds the flag set stops the run with
// the error naming the first non-finite step (the steps before the epoch, plus the finite steps
// counted on the device, plus one) and the last finite loss; the weights are those of the last
// finite step, the checkpoint is left as it was (it is written only at the end of an epoch, after
// that epoch's read), nothing non-finite is written (save_weights refuses NaN/inf parameters) and
// "best" is chosen among finite evaluations only. The steps between the first non-finite loss and
// the read still run their forward and backward passes (their updates do nothing); the run stops
// without saving, so what they leave (BatchNorm's running statistics) is never kept. A finite loss
// can still leave non-finite weights after its update: the end of each epoch checks the weights
// before they are saved.
//
// With several processes every step also reads the flag and all-reduces it with the interrupt
// flag before the update, as the ranks must agree on stopping (an interrupt stops every rank after
// the same step), so every rank stops at the same step, before its update. A --cuda-graphs step
// records inside the captured graph (Note [Training with CUDA graphs] in train/graph_step.h), so
// replayed steps are guarded the same way.
class StepGuard {
 public:
  explicit StepGuard(Device device);

  // The optimizer's skip flag: float32 (1,) on the device, nonzero once a recorded loss was not
  // finite. The same tensor for the guard's whole life (a captured graph holds its address).
  const Tensor& flag() const { return flag_; }

  // Zeroes the epoch's sums; `steps_before`: the run's step count before the epoch's first step
  // (the first non-finite step is counted from it). Keeps the flag.
  void start_epoch(int64_t steps_before);
  // After a step's backward: its mean loss (one floating element), its correct predictions (one
  // element) and its batch size. Queues device work only; legal while a CUDA graph captures.
  void record(const Tensor& loss, const Tensor& correct, int64_t n);

  struct Totals {
    bool diverged = false;
    int64_t first_bad_step = 0;  // diverged only: the run's step whose loss first was not finite
    double first_bad_loss = 0;   // diverged only: that loss (NaN or +-inf)
    int64_t finite_steps = 0;    // this epoch's steps before the first non-finite one
    double loss_sum = 0;         // sum of loss * batch size over those steps
    double correct = 0;          // their correct predictions
    int64_t last_finite_step = 0;  // finite_steps > 0 only: the run's last step with a finite loss
    double last_finite_loss = 0;   // finite_steps > 0 only: its loss
    double step_loss = 0, step_correct = 0;  // the last recorded step's own numbers
  };
  // Everything above with one host read (one device-to-host copy on a GPU).
  Totals read() const;

 private:
  int64_t steps_before_ = 0;
  Tensor flag_;  // float32 (1,)
  // float64 (1,) each: finite steps, loss sum, correct sum, last finite loss, first bad loss,
  // the last step's loss and correct count.
  Tensor finite_steps_, loss_sum_, correct_sum_, last_loss_, bad_loss_, step_loss_, step_correct_;
};

}  // namespace ember::train
