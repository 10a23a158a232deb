#pragma once
// optim::GradScaler: loss scaling for float16 training, with torch.amp.GradScaler's semantics
// and defaults.
//
// Note [Loss scaling]
// float16 has 5 exponent bits: its smallest normal value is 2^-14 ≈ 6e-5 and its smallest
// subnormal 2^-24 ≈ 6e-8. Many gradients of a network are smaller than that and would flush to
// zero in a float16 backward pass. Multiplying the loss by a large factor S before backward
// multiplies every gradient by S (backward is linear in its incoming gradient), which lifts them
// into float16's range; dividing the gradients by S before the optimizer step undoes it exactly
// when S is a power of two. If S is too large, some gradient overflows to inf: that step is
// skipped and S is halved. After `growth_interval` clean steps in a row, S doubles again, so S
// hovers near the largest value that does not overflow. bfloat16 has float32's 8 exponent bits and
// needs none of this.
//
//   optim::GradScaler scaler;                 // S = 2^16, x2 every 2000 clean steps, x0.5 on inf
//   for (...) {
//     opt.zero_grad();
//     Tensor loss = cross_entropy(model.forward(x), y);
//     scaler.scale(loss).backward();          // gradients are S times too large
//     scaler.unscale_(opt);                   // optional: now true size, e.g. for clipping
//     optim::clip_grad_norm_(params, 1.0);
//     scaler.step(opt);                       // unscales if not yet done; skips on inf/NaN
//     scaler.update();                        // the next S
//   }
//
// Where the values live. S, the count of clean steps and each optimizer's found-inf flag are
// one-element tensors on the gradients' device (float32, int32, float32), as in PyTorch, and
// unscale_ and update are kernels (kernels/optim.h: non_finite_check_and_unscale, one launch
// for all the gradients of an optimizer, and update_scale), so they queue on a GPU without
// waiting. An eager step() is the one place that reads a value back: whether this step is skipped.
//
// Under a CUDA graph. scale, unscale_, step and update can be captured (ember train --cuda-graphs
// --amp fp16): S and the count stay in device memory, and step() reads nothing; it calls
// Optimizer::step_unless_found_inf, which cancels the update on the device when the flag is set
// and keeps Adam's step count as it was (Note [Steps cancelled on the device] in
// optim/optimizer.h). S must exist before the capture (scale a loss eagerly first), as the
// optimizer's state must.
//
// Data-parallel training. DistributedDataParallel all-reduces the gradients before unscale_ sees
// them, and an inf or NaN on one rank is inf or NaN in the reduced sum on every rank, so every
// rank finds the same flag. Where gradients were not reduced first (no_sync, hand-rolled
// reductions), parallel::all_reduce_found_inf (parallel/ddp.h) makes the ranks agree: called
// between unscale_ and step, it sums the flag found_inf(opt) over the ranks.

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "../core/tensor.h"
#include "optimizer.h"

namespace ember::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;  // false: every method passes its argument through (scale(loss) is loss)
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * S, with S on loss's device (created there on first use). loss must be floating.
  Tensor scale(const Tensor& loss);
  // Divides every gradient of `opt` by S in place and records whether any was inf or NaN. At most
  // once per optimizer between two update() calls (ember::Error otherwise, as in PyTorch).
  void unscale_(Optimizer& opt);
  // Unscales (if unscale_ was not called), then runs opt.step() unless a gradient was inf or NaN.
  // Returns whether the optimizer stepped. At most once per optimizer between two update() calls.
  // While a CUDA graph captures: opt.step_unless_found_inf(found_inf(opt)), decided at each
  // replay on the device; returns true.
  bool step(Optimizer& opt);
  // The found-inf flag of `opt` since its unscale_: a float32 (1,) tensor on the gradients'
  // device, nonzero when a gradient was inf or NaN. step() reads it; writing to it (an all-reduce
  // across ranks) changes what step() decides. Undefined before unscale_.
  Tensor found_inf(const Optimizer& opt);
  // The next S from the flags of every optimizer stepped since the last update (see the Note),
  // and a fresh start for each optimizer's unscale_/step.
  void update();
  // Sets S to new_scale instead (torch's update(new_scale)); the clean-step count is kept.
  void update(double new_scale);

  // S and the count of clean steps, read back to the host (the first S before any scale() call).
  double get_scale() const;
  int64_t growth_tracker() const;
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  // torch's GradScaler.state_dict() keys: "scale", "growth_factor", "backoff_factor",
  // "growth_interval", "_growth_tracker". Loading checks the hyperparameters' values are sane
  // and replaces S and the count; the device tensors are made again on their next use.
  std::map<std::string, double> state_dict() const;
  void load_state_dict(const std::map<std::string, double>& state);

 private:
  enum class Stage { ready, unscaled, stepped };
  struct PerOptimizer {
    Stage stage = Stage::ready;
    Tensor found_inf;  // float32 (1,) on the gradients' device
  };
  void ensure_state(Device device);
  PerOptimizer& per_optimizer(const Optimizer& opt);

  GradScalerOptions options_;
  Tensor scale_;           // float32 (1,), on the device of the first loss scaled
  Tensor growth_tracker_;  // int32 (1,), same device
  double pending_scale_;   // S before the tensors exist (construction, load_state_dict)
  int64_t pending_tracker_ = 0;
  std::map<const Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace ember::optim
