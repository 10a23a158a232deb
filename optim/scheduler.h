#pragma once
// Learning-rate schedulers, matching torch.optim.lr_scheduler (PyTorch 2.x).
//
// Note [Scheduler epochs]
// A scheduler's constructor performs its step 0 (PyTorch's _initial_step): it records each
// group's initial_lr (kept if an earlier scheduler set it) as base_lrs, sets last_epoch = 0 and
// writes the epoch-0 lr into the optimizer. Each step() then advances last_epoch by one and
// writes the next lr. Like PyTorch, most schedulers are chainable: they compute the new lr from
// the group's current lr (StepLR multiplies it by gamma at each multiple of step_size), so
// their values round exactly as PyTorch's do; the closed forms (base_lr * gamma^(epoch /
// step_size), ...) are used only where PyTorch uses them (SequentialLR restarting a scheduler
// at a milestone). Call order per epoch, as in PyTorch: optimizer.step() then scheduler.step().
//
// A scheduler keeps a reference to its optimizer, which must outlive it. Its saved state (a map
// of scalars: "last_epoch", "step_count", "base_lrs.<g>", "last_lr.<g>"; SequentialLR adds
// "schedulers.<k>.<key>") restores the schedule position; the current lr itself lives in the
// optimizer's state. To resume: build optimizer and scheduler as at the start, then load both.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "optimizer.h"

namespace ember::optim {

using SchedulerState = std::map<std::string, double>;

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances one epoch (or iteration) and writes the new lr into every param group.
  virtual void step();
  // The lr of each group as of the last step (PyTorch's get_last_lr()).
  const std::vector<double>& last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  Optimizer& optimizer() const { return *optimizer_; }

  virtual SchedulerState state_dict() const;
  // Throws ember::Error for a state from a different number of param groups or unknown keys.
  virtual void load_state_dict(const SchedulerState& state);

 protected:
  // Records base_lrs. Does not step: each final class's constructor calls initial_step() last,
  // once its own members (used by get_lr) exist.
  explicit LRScheduler(Optimizer& optimizer);

  // PyTorch's get_lr(): the lrs for last_epoch (already advanced), usually from the current ones.
  virtual std::vector<double> get_lr() = 0;
  // PyTorch's _get_closed_form_lr(), or get_lr() for schedulers without one.
  virtual std::vector<double> closed_form_lr() { return get_lr(); }
  // PyTorch's _update_lr(epoch): jumps to `epoch` using the closed form.
  virtual void step_to(int64_t epoch);

  // step_count = 0, then step() (last_epoch -1 -> 0).
  void initial_step();
  // Writes lrs into the optimizer and records them as last_lr.
  void apply(const std::vector<double>& lrs);
  // The current lr of every group.
  std::vector<double> group_lrs() const;
  size_t num_groups() const { return base_lrs_.size(); }

  Optimizer* optimizer_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = -1;
  int64_t step_count_ = 0;

  friend class SequentialLR;
};

// Multiplies the lr by gamma every step_size epochs: 1, 1, 1, 0.1, 0.1, 0.1, 0.01 ... for
// step_size 3, gamma 0.1.
struct StepLROptions {
  int64_t step_size = 1;  // > 0
  double gamma = 0.1;
};
class StepLR final : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, const StepLROptions& options);

 private:
  std::vector<double> get_lr() override;
  std::vector<double> closed_form_lr() override;
  StepLROptions options_;
};

// Multiplies the lr by gamma at each milestone (a milestone listed twice multiplies twice).
struct MultiStepLROptions {
  std::vector<int64_t> milestones{};
  double gamma = 0.1;
};
class MultiStepLR final : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, const MultiStepLROptions& options);

 private:
  std::vector<double> get_lr() override;
  std::vector<double> closed_form_lr() override;
  std::vector<int64_t> milestones_;  // sorted, with repeats
  double gamma_;
};

// Multiplies the lr by gamma every epoch.
struct ExponentialLROptions {
  double gamma = 0.1;
};
class ExponentialLR final : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, const ExponentialLROptions& options);

 private:
  std::vector<double> get_lr() override;
  std::vector<double> closed_form_lr() override;
  double gamma_;
};

// Cosine from base_lr down to eta_min over t_max epochs (then back up: a cosine of period
// 2 t_max, as PyTorch without restarts):
//   lr(t) = eta_min + (base_lr - eta_min) (1 + cos(pi t / t_max)) / 2
// computed, like PyTorch, by the equivalent recursion from the current lr.
struct CosineAnnealingLROptions {
  int64_t t_max = 1;  // > 0
  double eta_min = 0;
};
class CosineAnnealingLR final : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, const CosineAnnealingLROptions& options);

 private:
  std::vector<double> get_lr() override;
  std::vector<double> closed_form_lr() override;
  CosineAnnealingLROptions options_;
};

// Scales the lr linearly from start_factor * base_lr to end_factor * base_lr over total_iters
// epochs, then holds it (warmup):
//   lr(t) = base_lr (start + (end - start) min(t, total_iters) / total_iters)
struct LinearLROptions {
  double start_factor = 1.0 / 3;  // in (0, 1]
  double end_factor = 1.0;        // in [0, 1]
  int64_t total_iters = 5;        // > 0
};
class LinearLR final : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, const LinearLROptions& options);

 private:
  std::vector<double> get_lr() override;
  std::vector<double> closed_form_lr() override;
  LinearLROptions options_;
};

// The 1cycle policy (Smith & Topin), stepped once per batch: from initial_lr = max_lr /
// div_factor up to max_lr over the first pct_start of total_steps, then down to min_lr =
// initial_lr / final_div_factor. With three_phase, it comes back down to initial_lr
// symmetrically first, then anneals to min_lr. Each phase anneals with a cosine,
//   lr = end + (start - end) / 2 (1 + cos(pi pct)),
// or linearly. The constructor sets each group's initial_lr (overriding any earlier one), as
// PyTorch does. Stepping past total_steps throws.
// Omitted from PyTorch's: momentum cycling (cycle_momentum, base_momentum, max_momentum): the
// optimizers here have no per-group momentum to cycle. The lrs equal PyTorch's for any
// cycle_momentum, but PyTorch's default cycle_momentum=True also rewrites SGD's momentum (even
// from 0) or Adam's beta1 every step, so training matches PyTorch with cycle_momentum=False.
enum class AnnealStrategy { Cos, Linear };
struct OneCycleLROptions {
  std::vector<double> max_lr{};                         // one value for all groups, or one per group
  std::optional<int64_t> total_steps = std::nullopt;    // either this ...
  std::optional<int64_t> epochs = std::nullopt;         // ... or epochs * steps_per_epoch
  std::optional<int64_t> steps_per_epoch = std::nullopt;
  double pct_start = 0.3;                               // in [0, 1]
  AnnealStrategy anneal_strategy = AnnealStrategy::Cos;
  double div_factor = 25;
  double final_div_factor = 1e4;
  bool three_phase = false;
};
class OneCycleLR final : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, const OneCycleLROptions& options);
  int64_t total_steps() const { return total_steps_; }

 private:
  struct Phase {
    double end_step;
    enum class Lr { Initial, Max, Min } start, end;
  };
  std::vector<double> get_lr() override;
  double phase_lr(size_t group, Phase::Lr which) const;

  OneCycleLROptions options_;
  int64_t total_steps_;
  std::vector<Phase> phases_;
  std::vector<double> max_lrs_, min_lrs_;
};

// Runs schedulers one after another: schedulers[k] is in charge from milestones[k-1] on, and is
// restarted at its epoch 0 (closed form) when its milestone is reached. E.g. LinearLR warmup for
// 5 epochs, then CosineAnnealingLR:
//   auto warmup = std::make_shared<optim::LinearLR>(opt, optim::LinearLROptions{.start_factor = 0.1});
//   auto cosine = std::make_shared<optim::CosineAnnealingLR>(opt, optim::CosineAnnealingLROptions{.t_max = 95});
//   optim::SequentialLR sched(opt, {warmup, cosine}, {5});
// The schedulers must drive the same optimizer; milestones: one fewer than schedulers, sorted.
class SequentialLR final : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);

  void step() override;
  SchedulerState state_dict() const override;
  void load_state_dict(const SchedulerState& state) override;

 private:
  std::vector<double> get_lr() override { return last_lr_; }
  void step_to(int64_t epoch) override;
  // Undoes the initial step of a scheduler (and, for a nested SequentialLR, of its children).
  static void undo_initial_step(LRScheduler& s);

  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

// Lowers the lr when a monitored metric stops improving (PyTorch's ReduceLROnPlateau), stepped
// with the metric once per evaluation: step(val_loss). A value is better than the best so far
// when, in mode min, value < best * (1 - threshold) (threshold_mode rel) or value < best -
// threshold (abs); in mode max, value > best * (1 + threshold) or value > best + threshold.
// Each step that is not better adds one "bad epoch"; once there are more than `patience` in a
// row, every group's lr becomes max(lr * factor, min_lr) (unchanged where that changes it by eps
// or less), and `cooldown` steps follow in which bad epochs are not counted. A NaN metric is never
// better. Unlike the schedulers above it reads and writes the optimizer's current lrs, whatever set
// them, and its constructor changes no lr. Its saved state: "best", "num_bad_epochs",
// "cooldown_counter", "last_epoch" and "last_lr.<g>".
enum class PlateauMode { min, max };
enum class ThresholdMode { rel, abs };
struct ReduceLROnPlateauOptions {
  PlateauMode mode = PlateauMode::min;
  double factor = 0.1;  // in (0, 1)
  int64_t patience = 10;  // >= 0
  double threshold = 1e-4;  // >= 0
  ThresholdMode threshold_mode = ThresholdMode::rel;
  int64_t cooldown = 0;  // >= 0
  double min_lr = 0;     // >= 0, for every group
  double eps = 1e-8;
};
class ReduceLROnPlateau {
 public:
  ReduceLROnPlateau(Optimizer& optimizer, const ReduceLROnPlateauOptions& options);
  ReduceLROnPlateau(const ReduceLROnPlateau&) = delete;
  ReduceLROnPlateau& operator=(const ReduceLROnPlateau&) = delete;

  // One evaluation's metric; returns whether it lowered the lr.
  bool step(double metric);
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& last_lr() const { return last_lr_; }

  SchedulerState state_dict() const;
  // Throws ember::Error for a missing key or another number of param groups.
  void load_state_dict(const SchedulerState& state);

 private:
  bool is_better(double a) const;
  Optimizer* optimizer_;
  ReduceLROnPlateauOptions options_;
  double best_;
  int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0, last_epoch_ = 0;
  std::vector<double> last_lr_;
};

}  // namespace ember::optim
