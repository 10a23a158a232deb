// TrainStep (Note [One training step] in train_step.h).

#include "train_step.h"

#include <cmath>

#include "../core/autocast.h"
#include "../core/autograd.h"
#include "../core/error.h"
#include "../core/profiler.h"
#include "../io/fault.h"
#include "../layers/elementwise.h"
#include "../layers/modules.h"
#include "../layers/nn_functional.h"
#include "../layers/reduce.h"
#include "../optim/clip.h"
#include "../optim/optim.h"
#include "../parallel/ddp.h"
#include "step_guard.h"

namespace ember::train {

// Note [Mixed-precision training]
// With --amp bf16 or fp16, a step runs the forward pass and the loss under an AutocastGuard on the
// training device (Note [Autocast] in core/autocast.h): convolutions and linear layers compute in
// the 16-bit dtype from 16-bit casts of the float32 weights, batch norm, softmax and the loss in
// float32, and the loss comes out float32. Backward runs after the region: the gradients reach
// the float32 parameters as float32, and the optimizer updates float32 weights. With fp16, the
// loss is scaled before backward and the gradients unscaled before --clip-grad-norm and the step
// (optim::GradScaler, Note [Loss scaling]); a step whose scaled gradients overflowed is skipped
// (the weights and the optimizer's moments stay as they were), counts as a step all the same, and
// the schedule moves on, as in PyTorch's AMP loop. bf16 has float32's range and needs no scaling:
// its scaler is disabled, as it is without --amp. The scaler's state (S and its count of clean
// steps) is saved in every checkpoint, so a resumed fp16 run continues bit for bit. Evaluation
// runs in float32: the test accuracy is that of the weights, not of their 16-bit casts. Under
// --cuda-graphs each replay casts the weights anew and the scaler's skip and update happen on the
// device (Note [Steps cancelled on the device] in optim/optimizer.h).

namespace {

// The batch's correct predictions, summed on the training device (float64). Mixed batches
// (Mixup/CutMix) carry class probabilities: a prediction counts as correct when it is the class
// with the largest share of the image.
Tensor correct_predictions(const Tensor& logits, const Tensor& labels) {
  NoGradGuard g;
  const Tensor truth = labels.dim() == 2 ? argmax(labels, 1) : labels;
  return sum(eq(argmax(logits, 1), truth).to(DType::f64));
}

}  // namespace

void check_class_indices(const Tensor& host_labels, int64_t classes) {
  if (host_labels.dim() != 1 || host_labels.dtype() != DType::i64) return;  // soft labels (Mixup, CutMix)
  if (!host_labels.device().is_cpu()) return;  // --data-on-device: the dataset's labels were checked whole
  // The criterion's ignore_index (CrossEntropyLoss's default) is no label of ember train's data,
  // and under CheckedTargetsGuard none may equal it: the 'mean' would then be over the wrong count.
  const int64_t ignore_index = CrossEntropyOptions{}.ignore_index;
  EMBER_CHECK(!check_class_targets("cross_entropy", host_labels, classes, ignore_index), "cross_entropy: a label "
              "equals ignore_index (", ignore_index, "); ember train's labels are class indices 0 to ", classes - 1);
}

TrainStep::TrainStep(const Parts& parts) : parts_(parts) {
  EMBER_CHECK(parts.model && parts.criterion && parts.optimizer && parts.scaler && parts.guard,
              "TrainStep: the model, criterion, optimizer, scaler and guard are required");
}

TrainStep::Outputs TrainStep::run(std::span<const Batch> micro_batches, StepMode mode, int64_t step_number,
                                  const BeforeUpdate& before_update) const {
  const Parts& p = parts_;
  const bool eager = mode == StepMode::eager;
  EMBER_CHECK(eager || (p.ddp == nullptr && !before_update), "TrainStep: a captured step cannot use DDP or a "
              "before-update hook (both synchronize with the host)");
  EMBER_CHECK(!micro_batches.empty() && (eager || micro_batches.size() == 1),
              "TrainStep: a step takes at least one micro-batch, and a captured step exactly one (got ",
              micro_batches.size(), ")");
  int64_t images = 0;
  for (const Batch& b : micro_batches) images += b.labels.size(0);
  Outputs out;
  // The profiler's phases, eager steps only: a graph replays its kernels in one launch.
  std::optional<profiler::Scope> phase;
  p.optimizer->zero_grad();
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    const Batch& b = micro_batches[i];
    // Gradient accumulation with DDP: the ranks all-reduce at the last micro-batch's backward.
    std::optional<parallel::DistributedDataParallel::NoSyncGuard> local;
    if (p.ddp && i + 1 < micro_batches.size()) local.emplace(*p.ddp);
    if (eager) phase.emplace("forward", profiler::Phase::forward);
    Tensor logits, loss;
    {
      std::optional<AutocastGuard> amp;  // Note [Mixed-precision training]
      if (p.amp) amp.emplace(p.device.type, *p.amp);
      const Tensor x = b.images.contiguous(p.input_format);
      logits = p.ddp ? p.ddp->forward(x) : p.model->forward(x);
      const CheckedTargetsGuard checked;  // the caller ran check_class_indices
      loss = (*p.criterion)(logits, b.labels);
      // EMBER_FAULT=nan-loss-at:K (a testing hook, eager steps): step K's loss is NaN, and so are its gradients.
      if (eager && io::fault_value("nan-loss-at") == step_number) loss = mul(loss, std::nan(""));
      // Accumulation: this micro-batch's share of the mean over the step's images.
      if (micro_batches.size() > 1)
        loss = mul(loss, static_cast<double>(b.labels.size(0)) / static_cast<double>(images));
    }
    phase.reset();
    if (eager) phase.emplace("backward", profiler::Phase::backward);
    p.scaler->scale(loss).backward();  // with DDP (the last micro-batch): the gradients averaged over the ranks
    phase.reset();
    const Tensor correct = correct_predictions(logits, b.labels);
    NoGradGuard g;
    out.loss = i == 0 ? loss.detach() : add(out.loss, loss.detach());
    out.correct = i == 0 ? correct : add(out.correct, correct);
  }
  p.guard->record(out.loss, out.correct, images);
  if (before_update) before_update();
  if (eager) phase.emplace("optimizer", profiler::Phase::optimizer);
  if (p.clip_grad_norm > 0) {
    p.scaler->unscale_(*p.optimizer);  // clip the true gradients, not the scaled ones
    optim::clip_grad_norm_on_device_(p.model->parameters(), p.clip_grad_norm);
  }
  // Skipped when the scaled gradients overflowed (fp16): decided on the host eagerly, on the
  // device in a graph. After a non-finite loss the guard's flag cancels it on the device.
  out.stepped = p.scaler->step(*p.optimizer);
  p.scaler->update();
  return out;
}

}  // namespace ember::train
