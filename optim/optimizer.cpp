// optim::Optimizer: groups, zero_grad, and state save/load with all-or-nothing validation.

#include "optimizer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include "../core/autograd.h"
#include "../core/dispatch.h"
#include "../core/error.h"
#include "../core/op_helpers.h"
#include "../layers/elementwise.h"
#if EMBER_CUDA_BACKEND
#include "../core/cuda/graph.h"
#endif

namespace ember::optim {

namespace {

// "state.12.exp_avg" -> {12, "exp_avg"} after the given prefix ("state."); nullopt if malformed.
std::optional<std::pair<size_t, std::string>> split_indexed(const std::string& key, const std::string& prefix) {
  if (key.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const size_t dot = key.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size() || dot + 1 == key.size()) return std::nullopt;
  size_t index = 0;
  const char* first = key.data() + prefix.size();
  const char* last = key.data() + dot;
  auto [ptr, ec] = std::from_chars(first, last, index);
  if (ec != std::errc() || ptr != last) return std::nullopt;
  return std::make_pair(index, key.substr(dot + 1));
}

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

Optimizer::Optimizer(std::string name, const std::vector<ParamGroup>& groups, double default_lr,
                     double default_weight_decay)
    : default_lr_(default_lr), default_weight_decay_(default_weight_decay), name_(std::move(name)) {
  EMBER_CHECK(default_lr >= 0, name_, ": invalid learning rate ", default_lr, " (must be >= 0)");
  EMBER_CHECK(default_weight_decay >= 0, name_, ": invalid weight_decay ", default_weight_decay, " (must be >= 0)");
  EMBER_CHECK(!groups.empty(), name_, ": got an empty parameter list");
  for (const ParamGroup& g : groups) add_param_group(g);
}

void Optimizer::add_param_group(const ParamGroup& group) {
  const size_t gi = groups_.size();
  EMBER_CHECK(!group.params.empty(), name_, ": got an empty parameter list (param group ", gi, ")");
  Group resolved;
  resolved.lr = group.lr.value_or(default_lr_);
  resolved.weight_decay = group.weight_decay.value_or(default_weight_decay_);
  EMBER_CHECK(resolved.lr >= 0, name_, ": invalid learning rate ", resolved.lr, " in param group ", gi);
  EMBER_CHECK(resolved.weight_decay >= 0, name_, ": invalid weight_decay ", resolved.weight_decay,
              " in param group ", gi);
  std::set<const TensorImpl*> seen;
  for (const Group& g : groups_)
    for (const Tensor& p : g.params) seen.insert(p.impl_ptr().get());
  for (size_t k = 0; k < group.params.size(); ++k) {
    const Tensor& p = group.params[k];
    EMBER_CHECK(p.defined(), name_, ": parameter ", k, " of param group ", gi, " is an undefined tensor");
    EMBER_CHECK(p.is_leaf(), name_, ": can't optimize a non-leaf tensor (parameter ", k, " of param group ", gi,
                ", ", describe(p), ")");
    EMBER_CHECK(p.dtype() == DType::f32 || p.dtype() == DType::f64, name_,
                ": parameters must be float32 or float64, got ", describe(p), " (parameter ", k,
                " of param group ", gi, ")");
    EMBER_CHECK(seen.insert(p.impl_ptr().get()).second, name_, ": parameter ", k, " of param group ", gi,
                " appears more than once (in this group or an earlier one)");
    resolved.params.push_back(p);
  }
  state_.resize(state_.size() + resolved.params.size());
  groups_.push_back(std::move(resolved));
}

const Optimizer::Group& Optimizer::param_group(size_t g) const {
  EMBER_CHECK(g < groups_.size(), name_, ": param group ", g, " out of range (", groups_.size(), " groups)");
  return groups_[g];
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> all;
  for (const Group& g : groups_) all.insert(all.end(), g.params.begin(), g.params.end());
  return all;
}

size_t Optimizer::num_parameters() const { return state_.size(); }

void Optimizer::set_lr(size_t group, double lr) {
  param_group(group);  // range check
  groups_[group].lr = lr;
}

void Optimizer::set_weight_decay(size_t group, double weight_decay) {
  param_group(group);
  EMBER_CHECK(weight_decay >= 0, name_, ": invalid weight_decay ", weight_decay);
  groups_[group].weight_decay = weight_decay;
}

void Optimizer::set_initial_lr(size_t group, double lr) {
  param_group(group);
  groups_[group].initial_lr = lr;
}

void Optimizer::set_skip_flag(Tensor flag) {
  if (flag.defined()) {
    EMBER_CHECK(flag.dtype() == DType::f32 && flag.numel() == 1 && flag.is_contiguous(), name_,
                ".set_skip_flag: the flag must be one contiguous float32 element, got ", describe(flag));
    for (const Group& g : groups_)
      for (const Tensor& p : g.params)
        EMBER_CHECK(p.device() == flag.device(), name_, ".set_skip_flag: the flag is on ", flag.device(),
                    " but a parameter is on ", p.device());
  }
  skip_flag_ = std::move(flag);
}

void Optimizer::step_unless_found_inf(const Tensor& found_inf) {
  EMBER_CHECK(found_inf.defined() && found_inf.dtype() == DType::f32 && found_inf.numel() == 1 &&
                  found_inf.is_contiguous(),
              name_, ".step_unless_found_inf: found_inf must be one contiguous float32 element, got ",
              found_inf.defined() ? describe(found_inf) : std::string("an undefined tensor"));
  EMBER_CHECK(detail::capturing_graph(found_inf.device()), name_, ".step_unless_found_inf: only for a step captured "
              "in a CUDA graph (eagerly, read the flag and call step() when it is 0, as GradScaler::step does)");
#if EMBER_CUDA_BACKEND
  NoGradGuard no_grad;
  const Device device = found_inf.device();
  for (const Group& g : groups_)
    for (const Tensor& p : g.params)
      EMBER_CHECK(p.device() == device, name_, ".step_unless_found_inf: found_inf is on ", device,
                  " but a parameter is on ", p.device());
  // The count lives outside the graph's memory and outlives it; made and zeroed now, not replayed.
  if (!skipped_steps_.defined())
    skipped_steps_ = cuda::replay_input(device.index, [&] { return zeros({1}, {.dtype = DType::f64}).to(device); });
  // Inside the graph (Note [Steps cancelled on the device]).
  skipped_steps_.add_(ne(found_inf, 0.0).to(DType::f64));
  // For this step only: the update's flag is the skip flag or found_inf, and Adam counts skips.
  struct Restore {
    Optimizer& opt;
    Tensor kept;
    ~Restore() {
      opt.skip_flag_ = std::move(kept);
      opt.counting_skips_ = false;
    }
  } restore{*this, skip_flag_};
  skip_flag_ = skip_flag_.defined() ? maximum(skip_flag_, found_inf.reshape({1})) : found_inf;
  counting_skips_ = true;
  step();
#endif
}

double Optimizer::device_skips() const {
  if (!skipped_steps_.defined() || counted_.empty() || detail::capturing_graph(skipped_steps_.device())) return 0;
  return skipped_steps_.item();
}

void Optimizer::fold_device_skips() {
  const double skipped = device_skips();
  if (skipped == 0) return;
  for (size_t i : counted_) state_[i].scalars.at("step") -= skipped;
  skipped_steps_.zero_();
}

void Optimizer::zero_grad() {
  for (Group& g : groups_)
    for (Tensor& p : g.params) p.set_grad(Tensor());
}

Tensor Optimizer::prepared_grad(const Tensor& p) const {
  Tensor g = p.grad();
  if (!g.defined()) return g;
  EMBER_CHECK(g.shape() == p.shape(), name_, ": gradient ", describe(g), " does not match parameter ", describe(p));
  EMBER_CHECK(g.device() == p.device(), name_, ": gradient ", describe(g), " is not on the device of parameter ",
              describe(p));
  if (g.dtype() != p.dtype()) g = g.to(p.dtype());
  return g.contiguous(update_format(p));
}

void Optimizer::for_each_update(const EagerUpdate& eager, const CapturedUpdate& captured) {
  size_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (Tensor& p : groups_[g].params) {
      const size_t i = index++;
      const Tensor grad = prepared_grad(p);
      if (!grad.defined()) continue;
      if (detail::capturing_graph(p.device()))
        captured(g, i, p, grad);
      else
        eager(groups_[g], state_[i], p, grad);
    }
  }
}

MemoryFormat Optimizer::update_format(const Tensor& p) {
  return !p.is_contiguous() && p.is_contiguous(MemoryFormat::channels_last) ? MemoryFormat::channels_last
                                                                             : MemoryFormat::contiguous;
}

Tensor Optimizer::zeros_like_param(const Tensor& p) {
  Tensor z = empty(p.shape(), {.dtype = p.dtype(), .device = p.device()}, update_format(p));
  z.zero_();
  return z;
}

OptimizerState Optimizer::state_dict() const {
  NoGradGuard no_grad;
  OptimizerState out;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = "param_groups." + std::to_string(g) + ".";
    out.scalars[prefix + "lr"] = groups_[g].lr;
    out.scalars[prefix + "weight_decay"] = groups_[g].weight_decay;
    out.scalars[prefix + "num_params"] = static_cast<double>(groups_[g].params.size());
    if (groups_[g].initial_lr) out.scalars[prefix + "initial_lr"] = *groups_[g].initial_lr;
  }
  // The true step counts: the host's less the steps cancelled on the device since the last fold.
  const double skipped = device_skips();
  for (size_t i = 0; i < state_.size(); ++i) {
    const std::string prefix = "state." + std::to_string(i) + ".";
    for (const auto& [name, t] : state_[i].tensors) out.tensors.emplace_back(prefix + name, t.clone());
    for (const auto& [name, v] : state_[i].scalars)
      out.scalars[prefix + name] = name == "step" && counted_.count(i) ? v - skipped : v;
  }
  return out;
}

void Optimizer::load_state_dict(const OptimizerState& state) {
  NoGradGuard no_grad;
  const std::vector<Tensor> params = parameters();

  // Everything is checked and built into `groups` / `loaded` first; nothing changes on error.
  std::vector<Group> groups = groups_;
  std::vector<std::set<std::string>> group_fields(groups_.size());
  std::vector<ParamState> loaded(params.size());

  for (const auto& [key, value] : state.scalars) {
    if (auto gk = split_indexed(key, "param_groups.")) {
      const auto& [g, field] = *gk;
      EMBER_CHECK(g < groups.size(), name_, ".load_state_dict: the state has param group ", g, " (", key,
                  ") but the optimizer has ", groups.size(), " param groups");
      if (field == "lr") {
        groups[g].lr = value;
      } else if (field == "weight_decay") {
        groups[g].weight_decay = value;
      } else if (field == "initial_lr") {
        groups[g].initial_lr = value;
      } else if (field == "num_params") {
        EMBER_CHECK(value == static_cast<double>(groups[g].params.size()), name_, ".load_state_dict: param group ",
                    g, " of the state has ", value, " parameters, the optimizer's has ", groups[g].params.size());
      } else {
        EMBER_THROW(name_, ".load_state_dict: unexpected key ", key);
      }
      group_fields[g].insert(field);
    } else if (auto sk = split_indexed(key, "state.")) {
      const auto& [i, field] = *sk;
      EMBER_CHECK(i < params.size(), name_, ".load_state_dict: the state has ", key, " but the optimizer has only ",
                  params.size(), " parameters");
      loaded[i].scalars[field] = value;
    } else {
      EMBER_THROW(name_, ".load_state_dict: unexpected key ", key);
    }
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const char* required : {"lr", "weight_decay", "num_params"}) {
      EMBER_CHECK(group_fields[g].count(required) != 0, name_, ".load_state_dict: missing param_groups.", g, ".",
                  required, " (the state has fewer param groups than the optimizer's ", groups.size(), "?)");
    }
  }

  for (const auto& [key, t] : state.tensors) {
    auto sk = split_indexed(key, "state.");
    EMBER_CHECK(sk.has_value(), name_, ".load_state_dict: unexpected tensor key ", key);
    const auto& [i, field] = *sk;
    EMBER_CHECK(i < params.size(), name_, ".load_state_dict: the state has ", key, " but the optimizer has only ",
                params.size(), " parameters");
    EMBER_CHECK(t.defined(), name_, ".load_state_dict: ", key, " is an undefined tensor");
    EMBER_CHECK(t.shape() == params[i].shape(), name_, ".load_state_dict: ", key, " has shape ", t.shape(),
                " but parameter ", i, " has shape ", params[i].shape());
    EMBER_CHECK(t.is_floating_point(), name_, ".load_state_dict: ", key, " is ", describe(t),
                ", expected a floating-point tensor");
    EMBER_CHECK(loaded[i].tensors.count(field) == 0, name_, ".load_state_dict: duplicate key ", key);
    // A fresh contiguous copy in the parameter's dtype and device: the optimizer must own it.
    Tensor copy = zeros_like_param(params[i]);
    copy.copy_(t.to(params[i].device()));
    loaded[i].tensors[field] = copy;
  }

  // A parameter either has no state (never stepped) or exactly the names this optimizer keeps.
  const std::vector<std::string> tensor_names = state_tensor_names();
  const std::vector<std::string> scalar_names = state_scalar_names();
  for (size_t i = 0; i < loaded.size(); ++i) {
    if (loaded[i].empty()) continue;
    std::vector<std::string> missing, unexpected;
    for (const std::string& n : tensor_names)
      if (!loaded[i].tensors.count(n)) missing.push_back(n);
    for (const std::string& n : scalar_names)
      if (!loaded[i].scalars.count(n)) missing.push_back(n);
    for (const auto& [n, t] : loaded[i].tensors)
      if (std::find(tensor_names.begin(), tensor_names.end(), n) == tensor_names.end()) unexpected.push_back(n);
    for (const auto& [n, v] : loaded[i].scalars)
      if (std::find(scalar_names.begin(), scalar_names.end(), n) == scalar_names.end()) unexpected.push_back(n);
    if (!missing.empty() || !unexpected.empty()) {
      std::string what = missing.empty() ? "" : "lacks " + join(missing);
      if (!unexpected.empty()) what += (what.empty() ? "has unexpected " : " and has unexpected ") + join(unexpected);
      EMBER_THROW(name_, ".load_state_dict: the state of parameter ", i, " ", what,
                  " (saved by a different optimizer or configuration?)");
    }
  }

  groups_ = std::move(groups);
  state_ = std::move(loaded);
  // The loaded counts are true ones: cancelled steps counted before belong to the replaced state.
  if (skipped_steps_.defined()) skipped_steps_.zero_();
}

}  // namespace ember::optim
