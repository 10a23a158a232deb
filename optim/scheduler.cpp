// LR schedulers: PyTorch's get_lr() recursions and closed forms, written in the same order of
// double operations so that the lrs agree with torch.optim.lr_scheduler to the last bit.

#include "scheduler.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numbers>

#include "../core/error.h"

namespace ember::optim {

namespace {

constexpr double kPi = std::numbers::pi;  // Python's math.pi

// Python's a // b for b > 0.
int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && (a < 0)) --q;
  return q;
}

// Python's bisect.bisect_right on a sorted vector.
int64_t bisect_right(const std::vector<int64_t>& sorted, int64_t x) {
  return std::upper_bound(sorted.begin(), sorted.end(), x) - sorted.begin();
}

// "base_lrs.3" -> 3 after the given prefix; nullopt if malformed.
std::optional<size_t> parse_index(const std::string& key, const std::string& prefix) {
  if (key.size() <= prefix.size() || key.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  size_t index = 0;
  const char* first = key.data() + prefix.size();
  const char* last = key.data() + key.size();
  auto [ptr, ec] = std::from_chars(first, last, index);
  if (ec != std::errc() || ptr != last) return std::nullopt;
  return index;
}

}  // namespace

// ---- LRScheduler ------------------------------------------------------------------------------

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(&optimizer) {
  // PyTorch: group.setdefault('initial_lr', group['lr']); base_lrs = initial_lr.
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) {
    if (!optimizer.get_initial_lr(g)) optimizer.set_initial_lr(g, optimizer.get_lr(g));
    base_lrs_.push_back(*optimizer.get_initial_lr(g));
  }
}

std::vector<double> LRScheduler::group_lrs() const {
  std::vector<double> lrs;
  for (size_t g = 0; g < optimizer_->num_param_groups(); ++g) lrs.push_back(optimizer_->get_lr(g));
  return lrs;
}

void LRScheduler::apply(const std::vector<double>& lrs) {
  EMBER_CHECK(lrs.size() == optimizer_->num_param_groups(), "LRScheduler: the optimizer has ",
              optimizer_->num_param_groups(), " param groups but the scheduler was made for ", lrs.size());
  for (size_t g = 0; g < lrs.size(); ++g) optimizer_->set_lr(g, lrs[g]);
  last_lr_ = group_lrs();
}

void LRScheduler::initial_step() {
  step_count_ = 0;
  step();
}

void LRScheduler::step() {
  EMBER_CHECK(optimizer_->num_param_groups() == num_groups(), "LRScheduler: the optimizer has ",
              optimizer_->num_param_groups(), " param groups but the scheduler was made for ", num_groups(),
              " (add param groups before creating the scheduler)");
  ++step_count_;
  ++last_epoch_;
  apply(get_lr());
}

void LRScheduler::step_to(int64_t epoch) {
  // PyTorch's _update_lr(epoch): unlike step(), it does not count as a step.
  last_epoch_ = epoch;
  apply(closed_form_lr());
}

SchedulerState LRScheduler::state_dict() const {
  SchedulerState s;
  s["last_epoch"] = static_cast<double>(last_epoch_);
  s["step_count"] = static_cast<double>(step_count_);
  for (size_t g = 0; g < base_lrs_.size(); ++g) s["base_lrs." + std::to_string(g)] = base_lrs_[g];
  for (size_t g = 0; g < last_lr_.size(); ++g) s["last_lr." + std::to_string(g)] = last_lr_[g];
  return s;
}

void LRScheduler::load_state_dict(const SchedulerState& state) {
  std::vector<double> base(num_groups()), last(num_groups());
  std::vector<bool> have_base(num_groups()), have_last(num_groups());
  std::optional<double> epoch, count;
  for (const auto& [key, value] : state) {
    if (key == "last_epoch") {
      epoch = value;
    } else if (key == "step_count") {
      count = value;
    } else if (const bool is_base = key.rfind("base_lrs.", 0) == 0; is_base || key.rfind("last_lr.", 0) == 0) {
      const std::optional<size_t> g = parse_index(key, is_base ? "base_lrs." : "last_lr.");
      EMBER_CHECK(g.has_value(), "LRScheduler.load_state_dict: malformed key ", key);
      EMBER_CHECK(*g < num_groups(), "LRScheduler.load_state_dict: the state has ", key,
                  " but the optimizer has ", num_groups(), " param groups");
      (is_base ? base : last)[*g] = value;
      (is_base ? have_base : have_last)[*g] = true;
    } else {
      EMBER_THROW("LRScheduler.load_state_dict: unexpected key ", key);
    }
  }
  EMBER_CHECK(epoch && count, "LRScheduler.load_state_dict: missing last_epoch or step_count");
  for (size_t g = 0; g < num_groups(); ++g)
    EMBER_CHECK(have_base[g] && have_last[g], "LRScheduler.load_state_dict: missing base_lrs.", g, " or last_lr.",
                g, " (the state has fewer param groups than the optimizer's ", num_groups(), ")");
  last_epoch_ = static_cast<int64_t>(*epoch);
  step_count_ = static_cast<int64_t>(*count);
  base_lrs_ = std::move(base);
  last_lr_ = std::move(last);
}

// ---- StepLR -----------------------------------------------------------------------------------

StepLR::StepLR(Optimizer& optimizer, const StepLROptions& options) : LRScheduler(optimizer), options_(options) {
  EMBER_CHECK(options.step_size > 0, "StepLR: step_size must be positive, got ", options.step_size);
  initial_step();
}

std::vector<double> StepLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0 || last_epoch_ % options_.step_size != 0) return lrs;
  for (double& lr : lrs) lr = lr * options_.gamma;
  return lrs;
}

std::vector<double> StepLR::closed_form_lr() {
  std::vector<double> lrs;
  const double k = static_cast<double>(floor_div(last_epoch_, options_.step_size));
  for (double base : base_lrs_) lrs.push_back(base * std::pow(options_.gamma, k));
  return lrs;
}

// ---- MultiStepLR ------------------------------------------------------------------------------

MultiStepLR::MultiStepLR(Optimizer& optimizer, const MultiStepLROptions& options)
    : LRScheduler(optimizer), milestones_(options.milestones), gamma_(options.gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  initial_step();
}

std::vector<double> MultiStepLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  const auto count = std::count(milestones_.begin(), milestones_.end(), last_epoch_);
  if (count == 0) return lrs;
  // PyTorch: group['lr'] * gamma ** milestones[last_epoch] (a Counter: repeats multiply).
  for (double& lr : lrs) lr = lr * std::pow(gamma_, static_cast<double>(count));
  return lrs;
}

std::vector<double> MultiStepLR::closed_form_lr() {
  std::vector<double> lrs;
  const double k = static_cast<double>(bisect_right(milestones_, last_epoch_));
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, k));
  return lrs;
}

// ---- ExponentialLR ----------------------------------------------------------------------------

ExponentialLR::ExponentialLR(Optimizer& optimizer, const ExponentialLROptions& options)
    : LRScheduler(optimizer), gamma_(options.gamma) {
  initial_step();
}

std::vector<double> ExponentialLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) return lrs;
  for (double& lr : lrs) lr = lr * gamma_;
  return lrs;
}

std::vector<double> ExponentialLR::closed_form_lr() {
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, static_cast<double>(last_epoch_)));
  return lrs;
}

// ---- CosineAnnealingLR ------------------------------------------------------------------------

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, const CosineAnnealingLROptions& options)
    : LRScheduler(optimizer), options_(options) {
  EMBER_CHECK(options.t_max > 0, "CosineAnnealingLR: t_max must be positive, got ", options.t_max);
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() {
  const double t_max = static_cast<double>(options_.t_max), eta_min = options_.eta_min;
  const double epoch = static_cast<double>(last_epoch_);
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) return lrs;
  for (size_t g = 0; g < lrs.size(); ++g) {
    const double base = base_lrs_[g];
    if (step_count_ == 1 && last_epoch_ > 0) {
      lrs[g] = eta_min + (base - eta_min) * (1 + std::cos(epoch * kPi / t_max)) / 2;
    } else if ((last_epoch_ - 1 - options_.t_max) % (2 * options_.t_max) == 0) {
      // The bottom of the cosine, where the ratio below would divide by 1 + cos(pi) = 0.
      lrs[g] = lrs[g] + (base - eta_min) * (1 - std::cos(kPi / t_max)) / 2;
    } else {
      lrs[g] = (1 + std::cos(kPi * epoch / t_max)) / (1 + std::cos(kPi * (epoch - 1) / t_max)) * (lrs[g] - eta_min) +
               eta_min;
    }
  }
  return lrs;
}

std::vector<double> CosineAnnealingLR::closed_form_lr() {
  const double t_max = static_cast<double>(options_.t_max), eta_min = options_.eta_min;
  std::vector<double> lrs;
  for (double base : base_lrs_)
    lrs.push_back(eta_min + (base - eta_min) * (1 + std::cos(kPi * static_cast<double>(last_epoch_) / t_max)) / 2);
  return lrs;
}

// ---- LinearLR ---------------------------------------------------------------------------------

LinearLR::LinearLR(Optimizer& optimizer, const LinearLROptions& options) : LRScheduler(optimizer), options_(options) {
  EMBER_CHECK(options.start_factor > 0 && options.start_factor <= 1,
              "LinearLR: start_factor must be in (0, 1], got ", options.start_factor);
  EMBER_CHECK(options.end_factor >= 0 && options.end_factor <= 1, "LinearLR: end_factor must be in [0, 1], got ",
              options.end_factor);
  EMBER_CHECK(options.total_iters > 0, "LinearLR: total_iters must be positive, got ", options.total_iters);
  initial_step();
}

std::vector<double> LinearLR::get_lr() {
  const double start = options_.start_factor, end = options_.end_factor;
  const double total = static_cast<double>(options_.total_iters);
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) {
    for (double& lr : lrs) lr = lr * start;
    return lrs;
  }
  if (last_epoch_ > options_.total_iters) return lrs;
  // lr(t) / lr(t-1) of the closed form, applied to the current lr.
  const double ratio = 1. + (end - start) / (total * start + static_cast<double>(last_epoch_ - 1) * (end - start));
  for (double& lr : lrs) lr = lr * ratio;
  return lrs;
}

std::vector<double> LinearLR::closed_form_lr() {
  const double start = options_.start_factor, end = options_.end_factor;
  const double t = static_cast<double>(std::min(options_.total_iters, last_epoch_));
  std::vector<double> lrs;
  for (double base : base_lrs_)
    lrs.push_back(base * (start + (end - start) * t / static_cast<double>(options_.total_iters)));
  return lrs;
}

// ---- OneCycleLR -------------------------------------------------------------------------------

OneCycleLR::OneCycleLR(Optimizer& optimizer, const OneCycleLROptions& options)
    : LRScheduler(optimizer), options_(options) {
  const OneCycleLROptions& o = options;
  if (o.total_steps) {
    EMBER_CHECK(*o.total_steps > 0, "OneCycleLR: expected a positive total_steps, got ", *o.total_steps);
    total_steps_ = *o.total_steps;
  } else if (o.epochs && o.steps_per_epoch) {
    EMBER_CHECK(*o.epochs > 0, "OneCycleLR: expected a positive epochs, got ", *o.epochs);
    EMBER_CHECK(*o.steps_per_epoch > 0, "OneCycleLR: expected a positive steps_per_epoch, got ", *o.steps_per_epoch);
    total_steps_ = *o.epochs * *o.steps_per_epoch;
  } else {
    EMBER_THROW("OneCycleLR: you must define either total_steps OR (epochs AND steps_per_epoch)");
  }
  EMBER_CHECK(o.pct_start >= 0 && o.pct_start <= 1, "OneCycleLR: expected pct_start in [0, 1], got ", o.pct_start);
  const double total = static_cast<double>(total_steps_);
  using Lr = Phase::Lr;
  if (o.three_phase) {
    phases_ = {{o.pct_start * total - 1, Lr::Initial, Lr::Max},
               {2 * o.pct_start * total - 2, Lr::Max, Lr::Initial},
               {total - 1, Lr::Initial, Lr::Min}};
  } else {
    phases_ = {{o.pct_start * total - 1, Lr::Initial, Lr::Max}, {total - 1, Lr::Max, Lr::Min}};
  }

  const size_t groups = optimizer.num_param_groups();
  EMBER_CHECK(o.max_lr.size() == 1 || o.max_lr.size() == groups, "OneCycleLR: expected 1 or ", groups,
              " values for max_lr, got ", o.max_lr.size());
  // PyTorch overwrites initial_lr (and so base_lrs) here, even if another scheduler set it.
  for (size_t g = 0; g < groups; ++g) {
    const double max_lr = o.max_lr.size() == 1 ? o.max_lr[0] : o.max_lr[g];
    const double initial = max_lr / o.div_factor;
    optimizer.set_initial_lr(g, initial);
    base_lrs_[g] = initial;
    max_lrs_.push_back(max_lr);
    min_lrs_.push_back(initial / o.final_div_factor);
  }
  initial_step();
}

double OneCycleLR::phase_lr(size_t group, Phase::Lr which) const {
  switch (which) {
    case Phase::Lr::Initial: return *optimizer_->get_initial_lr(group);
    case Phase::Lr::Max: return max_lrs_[group];
    case Phase::Lr::Min: return min_lrs_[group];
  }
  return 0;
}

std::vector<double> OneCycleLR::get_lr() {
  const int64_t step_num = last_epoch_;
  EMBER_CHECK(step_num <= total_steps_, "OneCycleLR: tried to step ", step_num,
              " times; the specified number of total steps is ", total_steps_);
  std::vector<double> lrs;
  for (size_t g = 0; g < num_groups(); ++g) {
    double start_step = 0;
    double lr = 0;
    for (size_t i = 0; i < phases_.size(); ++i) {
      const Phase& phase = phases_[i];
      if (static_cast<double>(step_num) <= phase.end_step || i + 1 == phases_.size()) {
        const double pct = (static_cast<double>(step_num) - start_step) / (phase.end_step - start_step);
        const double start = phase_lr(g, phase.start), end = phase_lr(g, phase.end);
        if (options_.anneal_strategy == AnnealStrategy::Cos) {
          const double cos_out = std::cos(kPi * pct) + 1;
          lr = end + (start - end) / 2.0 * cos_out;
        } else {
          lr = (end - start) * pct + start;
        }
        break;
      }
      start_step = phase.end_step;
    }
    lrs.push_back(lr);
  }
  return lrs;
}

// ---- SequentialLR -----------------------------------------------------------------------------

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  EMBER_CHECK(!schedulers_.empty(), "SequentialLR: expects at least one scheduler");
  for (size_t k = 0; k < schedulers_.size(); ++k) {
    EMBER_CHECK(schedulers_[k] != nullptr, "SequentialLR: scheduler ", k, " is null");
    EMBER_CHECK(&schedulers_[k]->optimizer() == &optimizer, "SequentialLR: scheduler ", k,
                " drives a different optimizer than the one SequentialLR was given");
  }
  EMBER_CHECK(milestones_.size() + 1 == schedulers_.size(), "SequentialLR: expects ", schedulers_.size() - 1,
              " milestones for ", schedulers_.size(), " schedulers, got ", milestones_.size());
  EMBER_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()), "SequentialLR: milestones must be sorted");

  last_epoch_ = 0;
  // Every child already made its step 0 when it was built: put the lrs back to initial_lr, undo
  // those steps, and redo step 0 for the first scheduler only (PyTorch's constructor).
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) optimizer.set_lr(g, *optimizer.get_initial_lr(g));
  for (auto& s : schedulers_) undo_initial_step(*s);
  schedulers_[0]->initial_step();
  last_lr_ = schedulers_[0]->last_lr();
}

void SequentialLR::undo_initial_step(LRScheduler& s) {
  if (auto* seq = dynamic_cast<SequentialLR*>(&s)) {
    for (auto& child : seq->schedulers_) undo_initial_step(*child);
  } else {
    s.last_epoch_ -= 1;
  }
}

void SequentialLR::step() {
  ++last_epoch_;
  const int64_t idx = bisect_right(milestones_, last_epoch_);
  LRScheduler& s = *schedulers_[static_cast<size_t>(idx)];
  if (idx > 0 && milestones_[static_cast<size_t>(idx - 1)] == last_epoch_) {
    s.step_to(0);  // restart the scheduler whose milestone this is
  } else {
    s.step();
  }
  last_lr_ = s.last_lr();
}

void SequentialLR::step_to(int64_t) {
  EMBER_THROW("SequentialLR: a nested SequentialLR can only be the first scheduler of its parent");
}

SchedulerState SequentialLR::state_dict() const {
  SchedulerState s;
  s["last_epoch"] = static_cast<double>(last_epoch_);
  for (size_t g = 0; g < last_lr_.size(); ++g) s["last_lr." + std::to_string(g)] = last_lr_[g];
  for (size_t k = 0; k < schedulers_.size(); ++k)
    for (const auto& [key, value] : schedulers_[k]->state_dict())
      s["schedulers." + std::to_string(k) + "." + key] = value;
  return s;
}

void SequentialLR::load_state_dict(const SchedulerState& state) {
  std::vector<SchedulerState> children(schedulers_.size());
  std::vector<double> last(num_groups());
  std::vector<bool> have_last(num_groups());
  std::optional<double> epoch;
  for (const auto& [key, value] : state) {
    if (key == "last_epoch") {
      epoch = value;
    } else if (auto g = parse_index(key, "last_lr.")) {
      EMBER_CHECK(*g < num_groups(), "SequentialLR.load_state_dict: the state has ", key, " but the optimizer has ",
                  num_groups(), " param groups");
      last[*g] = value;
      have_last[*g] = true;
    } else if (key.rfind("schedulers.", 0) == 0) {
      const size_t dot = key.find('.', 11);
      std::optional<size_t> k = dot == std::string::npos ? std::nullopt : parse_index(key.substr(0, dot), "schedulers.");
      EMBER_CHECK(k.has_value(), "SequentialLR.load_state_dict: malformed key ", key);
      EMBER_CHECK(*k < schedulers_.size(), "SequentialLR.load_state_dict: the state has ", key, " but there are ",
                  schedulers_.size(), " schedulers");
      children[*k][key.substr(dot + 1)] = value;
    } else {
      EMBER_THROW("SequentialLR.load_state_dict: unexpected key ", key);
    }
  }
  EMBER_CHECK(epoch.has_value(), "SequentialLR.load_state_dict: missing last_epoch");
  for (size_t g = 0; g < num_groups(); ++g)
    EMBER_CHECK(have_last[g], "SequentialLR.load_state_dict: missing last_lr.", g);
  // Children first: if one throws, this scheduler is unchanged (children before it are loaded).
  for (size_t k = 0; k < schedulers_.size(); ++k) schedulers_[k]->load_state_dict(children[k]);
  last_epoch_ = static_cast<int64_t>(*epoch);
  last_lr_ = std::move(last);
}

// ---- ReduceLROnPlateau -------------------------------------------------------------------------

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, const ReduceLROnPlateauOptions& options)
    : optimizer_(&optimizer), options_(options) {
  EMBER_CHECK(options.factor > 0 && options.factor < 1, "ReduceLROnPlateau: factor must be in (0, 1), got ",
              options.factor);
  EMBER_CHECK(options.patience >= 0 && options.cooldown >= 0 && options.threshold >= 0 && options.min_lr >= 0,
              "ReduceLROnPlateau: patience, cooldown, threshold and min_lr must be >= 0");
  best_ = options.mode == PlateauMode::min ? INFINITY : -INFINITY;
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) last_lr_.push_back(optimizer.get_lr(g));
}

bool ReduceLROnPlateau::is_better(double a) const {
  const double t = options_.threshold;
  if (options_.mode == PlateauMode::min)
    return options_.threshold_mode == ThresholdMode::rel ? a < best_ * (1.0 - t) : a < best_ - t;
  return options_.threshold_mode == ThresholdMode::rel ? a > best_ * (t + 1.0) : a > best_ + t;
}

bool ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {  // in cooldown: bad epochs are not counted
    --cooldown_counter_;
    num_bad_epochs_ = 0;
  }
  bool reduced = false;
  if (num_bad_epochs_ > options_.patience) {
    for (size_t g = 0; g < optimizer_->num_param_groups(); ++g) {
      const double old_lr = optimizer_->get_lr(g);
      const double new_lr = std::max(old_lr * options_.factor, options_.min_lr);
      if (old_lr - new_lr > options_.eps) {
        optimizer_->set_lr(g, new_lr);
        reduced = true;
      }
    }
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
  last_lr_.clear();
  for (size_t g = 0; g < optimizer_->num_param_groups(); ++g) last_lr_.push_back(optimizer_->get_lr(g));
  return reduced;
}

SchedulerState ReduceLROnPlateau::state_dict() const {
  SchedulerState s{{"best", best_},
                   {"num_bad_epochs", static_cast<double>(num_bad_epochs_)},
                   {"cooldown_counter", static_cast<double>(cooldown_counter_)},
                   {"last_epoch", static_cast<double>(last_epoch_)}};
  for (size_t g = 0; g < last_lr_.size(); ++g) s["last_lr." + std::to_string(g)] = last_lr_[g];
  return s;
}

void ReduceLROnPlateau::load_state_dict(const SchedulerState& state) {
  const auto get = [&](const std::string& key) {
    const auto it = state.find(key);
    EMBER_CHECK(it != state.end(), "ReduceLROnPlateau::load_state_dict: no '", key, "' in the state");
    return it->second;
  };
  const double best = get("best"), bad = get("num_bad_epochs"), cooldown = get("cooldown_counter"),
               epoch = get("last_epoch");
  EMBER_CHECK(state.size() == 4 + optimizer_->num_param_groups(), "ReduceLROnPlateau::load_state_dict: a state of ",
              state.size() - 4, " param group(s), but the optimizer has ", optimizer_->num_param_groups());
  best_ = best;
  num_bad_epochs_ = static_cast<int64_t>(bad);
  cooldown_counter_ = static_cast<int64_t>(cooldown);
  last_epoch_ = static_cast<int64_t>(epoch);
  for (size_t g = 0; g < last_lr_.size(); ++g) last_lr_[g] = get("last_lr." + std::to_string(g));
}

}  // namespace ember::optim
