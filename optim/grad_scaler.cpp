// optim::GradScaler (Note [Loss scaling] in grad_scaler.h).

#include "grad_scaler.h"

#include <cmath>
#include <vector>

#include "../core/autograd.h"
#include "../core/dispatch.h"
#include "../core/error.h"
#include "../kernels/cpu/optim.h"
#include "../kernels/cuda/optim.h"
#include "../layers/elementwise.h"

namespace ember::optim {

namespace {

void check_hyperparameters(double growth_factor, double backoff_factor, int64_t growth_interval) {
  EMBER_CHECK(growth_factor > 1.0 && std::isfinite(growth_factor), "GradScaler: growth_factor must be a finite "
              "number above 1, got ", growth_factor);
  EMBER_CHECK(backoff_factor > 0.0 && backoff_factor < 1.0, "GradScaler: backoff_factor must be in (0, 1), got ",
              backoff_factor);
  EMBER_CHECK(growth_interval >= 1, "GradScaler: growth_interval must be at least 1, got ", growth_interval);
}

void check_scale(double scale, const char* what) {
  EMBER_CHECK(scale > 0.0 && std::isfinite(scale), "GradScaler: ", what, " must be a finite positive number, got ",
              scale);
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(std::move(options)), pending_scale_(options_.init_scale) {
  check_scale(options_.init_scale, "init_scale");
  check_hyperparameters(options_.growth_factor, options_.backoff_factor, options_.growth_interval);
}

void GradScaler::ensure_state(Device device) {
  if (scale_.defined()) {
    EMBER_CHECK(scale_.device() == device, "GradScaler: the scale lives on ", scale_.device(),
                " but this loss or these gradients are on ", device, " (one GradScaler per device)");
    return;
  }
  // Made in a capture, S would be reset to its first value by every replay.
  EMBER_CHECK(!detail::capturing_graph(device), "GradScaler: the scale does not exist yet, and a CUDA graph cannot "
              "create it (it must exist before the first replay): scale a loss eagerly before capturing");
  scale_ = scalar_tensor(pending_scale_, {.dtype = DType::f32, .device = device});
  growth_tracker_ = scalar_tensor(static_cast<double>(pending_tracker_), {.dtype = DType::i32, .device = device});
}

GradScaler::PerOptimizer& GradScaler::per_optimizer(const Optimizer& opt) { return per_optimizer_[&opt]; }

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  EMBER_CHECK(loss.is_floating_point(), "GradScaler::scale: the loss must be floating point, got ", describe(loss));
  ensure_state(loss.device());
  return mul(loss, scale_);
}

void GradScaler::unscale_(Optimizer& opt) {
  if (!options_.enabled) return;
  PerOptimizer& state = per_optimizer(opt);
  EMBER_CHECK(state.stage != Stage::unscaled, "GradScaler::unscale_: already called for this optimizer since the "
              "last update()");
  EMBER_CHECK(state.stage != Stage::stepped, "GradScaler::unscale_: called after step() (call it before step, then "
              "update())");
  EMBER_CHECK(scale_.defined(), "GradScaler::unscale_: no loss was scaled yet (call scale(loss).backward() first)");
  NoGradGuard no_grad;

  // The gradients by dtype: one kernel call per dtype covers all of them.
  std::map<DType, std::vector<kernels::UnscaleTensor>> by_dtype;
  for (const Tensor& p : opt.parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    EMBER_CHECK(g.dtype() == DType::f32 || g.dtype() == DType::f64, "GradScaler::unscale_: gradients must be "
                "float32 or float64 (keep float32 master weights under float16 autocast), got ", describe(g));
    EMBER_CHECK(g.device() == scale_.device(), "GradScaler::unscale_: a gradient is on ", g.device(),
                " but the scale lives on ", scale_.device());
    // The kernel walks each gradient's storage as a flat array: any dense memory format will do.
    EMBER_CHECK(g.is_contiguous() || g.is_contiguous(MemoryFormat::channels_last),
                "GradScaler::unscale_: gradients must be dense (contiguous or channels-last), got ", describe(g));
    by_dtype[g.dtype()].push_back({g.data(), g.numel()});
  }
  // 1 / S in double, then rounded to float, as torch does (S is a power of two: exact).
  const Tensor inv_scale = div(scalar_tensor(1.0, {.dtype = DType::f64, .device = scale_.device()}),
                               scale_.to(DType::f64))
                               .to(DType::f32);
  state.found_inf = scalar_tensor(0.0, {.dtype = DType::f32, .device = scale_.device()});
  for (const auto& [dtype, list] : by_dtype) {
    EMBER_KERNEL_CALL(scale_.device(), "grad_scaler_unscale", non_finite_check_and_unscale, dtype, list.data(),
                      static_cast<int64_t>(list.size()), state.found_inf.data_ptr<float>(),
                      inv_scale.data_ptr<float>());
  }
  state.stage = Stage::unscaled;
}

bool GradScaler::step(Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  PerOptimizer& state = per_optimizer(opt);
  EMBER_CHECK(state.stage != Stage::stepped, "GradScaler::step: already called for this optimizer since the last "
              "update()");
  if (state.stage == Stage::ready) unscale_(opt);
  if (detail::capturing_graph(state.found_inf.device())) {
    // No host read in a graph: the update is cancelled on the device instead (Note [Steps
    // cancelled on the device] in optim/optimizer.h).
    opt.step_unless_found_inf(state.found_inf);
    state.stage = Stage::stepped;
    return true;
  }
  const bool skip = state.found_inf.item() != 0.0;  // the one read back of an eager step
  if (!skip) opt.step();
  state.stage = Stage::stepped;
  return !skip;
}

Tensor GradScaler::found_inf(const Optimizer& opt) {
  const auto it = per_optimizer_.find(&opt);
  return it == per_optimizer_.end() ? Tensor() : it->second.found_inf;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  EMBER_CHECK(scale_.defined(), "GradScaler::update: no loss was scaled yet");
  NoGradGuard no_grad;
  Tensor found;
  for (const auto& [opt, state] : per_optimizer_) {
    if (state.stage == Stage::ready) continue;
    found = found.defined() ? add(found, state.found_inf) : state.found_inf;
  }
  EMBER_CHECK(found.defined(), "GradScaler::update: no optimizer was unscaled or stepped since the last update()");
  EMBER_KERNEL_CALL(scale_.device(), "grad_scaler_update", update_scale, scale_.data_ptr<float>(),
                    growth_tracker_.data_ptr<int32_t>(), found.data_ptr<float>(), options_.growth_factor,
                    options_.backoff_factor, options_.growth_interval);
  per_optimizer_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  check_scale(new_scale, "update(new_scale)");
  if (scale_.defined()) {
    scale_.fill_(new_scale);
  } else {
    pending_scale_ = new_scale;
  }
  per_optimizer_.clear();
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  return scale_.defined() ? scale_.item() : pending_scale_;
}

int64_t GradScaler::growth_tracker() const {
  return growth_tracker_.defined() ? static_cast<int64_t>(growth_tracker_.item()) : pending_tracker_;
}

std::map<std::string, double> GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  return {{"scale", get_scale()},
          {"growth_factor", options_.growth_factor},
          {"backoff_factor", options_.backoff_factor},
          {"growth_interval", static_cast<double>(options_.growth_interval)},
          {"_growth_tracker", static_cast<double>(growth_tracker())}};
}

void GradScaler::load_state_dict(const std::map<std::string, double>& state) {
  EMBER_CHECK(options_.enabled, "GradScaler::load_state_dict: this scaler is disabled");
  for (const char* key : {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"})
    EMBER_CHECK(state.count(key), "GradScaler::load_state_dict: the state has no '", key, "'");
  const double scale = state.at("scale"), interval = state.at("growth_interval"), tracker = state.at("_growth_tracker");
  check_scale(scale, "the saved scale");
  EMBER_CHECK(interval == std::floor(interval), "GradScaler::load_state_dict: growth_interval must be an integer, got ",
              interval);
  check_hyperparameters(state.at("growth_factor"), state.at("backoff_factor"), static_cast<int64_t>(interval));
  EMBER_CHECK(tracker >= 0 && tracker < interval && tracker == std::floor(tracker), "GradScaler::load_state_dict: "
              "_growth_tracker must be an integer in [0, growth_interval), got ", tracker);
  options_.growth_factor = state.at("growth_factor");
  options_.backoff_factor = state.at("backoff_factor");
  options_.growth_interval = static_cast<int64_t>(interval);
  pending_scale_ = scale;
  pending_tracker_ = static_cast<int64_t>(tracker);
  if (scale_.defined()) {
    scale_.fill_(scale);
    growth_tracker_.fill_(tracker);
  }
  per_optimizer_.clear();
}

}  // namespace ember::optim
