// nn::Module: registration, traversal, placement and state dicts.

#include "module.h"

#include <set>
#include <sstream>

#include "../core/autograd.h"

namespace ember::nn {

Tensor Module::forward(const Tensor&) {
  EMBER_THROW(type_name(), ": forward(x) is not defined for this module");
}

Tensor& Module::register_parameter(const std::string& name, Tensor& t, bool requires_grad) {
  EMBER_CHECK(name.find('.') == std::string::npos && !name.empty(), "register_parameter: invalid name '", name, "'");
  for (const Slot& s : params_) EMBER_CHECK(s.name != name, "register_parameter: '", name, "' is already registered");
  if (t.defined() && requires_grad && !t.requires_grad()) t.requires_grad_(true);
  params_.push_back({name, &t});
  return t;
}

Tensor& Module::register_buffer(const std::string& name, Tensor& t) {
  EMBER_CHECK(name.find('.') == std::string::npos && !name.empty(), "register_buffer: invalid name '", name, "'");
  for (const Slot& s : buffers_) EMBER_CHECK(s.name != name, "register_buffer: '", name, "' is already registered");
  buffers_.push_back({name, &t});
  return t;
}

Module& Module::register_module(const std::string& name, Module& child) {
  EMBER_CHECK(name.find('.') == std::string::npos && !name.empty(), "register_module: invalid name '", name, "'");
  for (auto& c : children_) EMBER_CHECK(c.first != name, "register_module: '", name, "' is already registered");
  children_.emplace_back(name, &child);
  return child;
}

Module& Module::register_module(const std::string& name, std::shared_ptr<Module> child) {
  EMBER_CHECK(child != nullptr, "register_module: '", name, "' is null");
  Module& ref = register_module(name, *child);
  owned_.push_back(std::move(child));
  return ref;
}

void Module::collect(const std::string& prefix, bool params, bool buffers,
                     std::vector<std::pair<std::string, Tensor*>>& out) const {
  if (params)
    for (const Slot& s : params_)
      if (s.tensor->defined()) out.emplace_back(prefix + s.name, s.tensor);
  if (buffers)
    for (const Slot& s : buffers_)
      if (s.tensor->defined()) out.emplace_back(prefix + s.name, s.tensor);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", params, buffers, out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor*>> slots;
  if (recurse) {
    collect("", true, false, slots);
  } else {
    for (const Slot& s : params_)
      if (s.tensor->defined()) slots.emplace_back(s.name, s.tensor);
  }
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [n, t] : slots) out.emplace_back(n, *t);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor*>> slots;
  if (recurse) {
    collect("", false, true, slots);
  } else {
    for (const Slot& s : buffers_)
      if (s.tensor->defined()) slots.emplace_back(s.name, s.tensor);
  }
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [n, t] : slots) out.emplace_back(n, *t);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_children() const { return children_; }

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (auto& [name, child] : children_)
    for (auto& [sub, m] : child->named_modules()) out.emplace_back(sub.empty() ? name : name + "." + sub, m);
  return out;
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (const Tensor& p : parameters())
    if (!trainable_only || p.requires_grad()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

namespace {
// Replaces *slot by f(*slot), keeping it a leaf with the same requires_grad.
template <typename F>
void replace_tensor(Tensor* slot, F f) {
  const bool rg = slot->requires_grad();
  Tensor moved;
  {
    NoGradGuard g;
    moved = f(*slot).detach();
  }
  if (moved.is_same_storage(*slot) && moved.dtype() == slot->dtype()) return;  // nothing changed
  if (rg) moved.requires_grad_(true);
  *slot = moved;
}
}  // namespace

void Module::to(Device device) {
  std::vector<std::pair<std::string, Tensor*>> slots;
  collect("", true, true, slots);
  for (auto& [n, t] : slots) replace_tensor(t, [&](const Tensor& x) { return x.to(device); });
}

void Module::to(DType dtype) {
  std::vector<std::pair<std::string, Tensor*>> slots;
  collect("", true, true, slots);
  for (auto& [n, t] : slots)
    if (t->is_floating_point()) replace_tensor(t, [&](const Tensor& x) { return x.to(dtype); });
}

void Module::to(MemoryFormat format) {
  EMBER_CHECK(format != MemoryFormat::preserve, "Module::to: MemoryFormat::preserve is not a format to convert to");
  std::vector<std::pair<std::string, Tensor*>> slots;
  collect("", true, true, slots);
  for (auto& [n, t] : slots)
    if (t->defined() && t->dim() == 4 && t->is_floating_point())
      replace_tensor(t, [&](const Tensor& x) { return x.contiguous(format); });
}

void Module::zero_grad() {
  for (Tensor& p : parameters()) p.set_grad(Tensor());
}

StateDict Module::state_dict() const {
  std::vector<std::pair<std::string, Tensor*>> slots;
  collect("", true, true, slots);
  StateDict out;
  for (auto& [n, t] : slots) out.emplace_back(n, t->detach());
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  std::vector<std::pair<std::string, Tensor*>> slots;
  collect("", true, true, slots);
  std::map<std::string, Tensor*> mine;
  for (auto& [n, t] : slots) mine[n] = t;
  std::map<std::string, const Tensor*> given;
  std::vector<std::string> duplicates;
  for (auto& [n, t] : state)
    if (!given.emplace(n, &t).second) duplicates.push_back(n);

  std::vector<std::string> missing, unexpected, mismatched;
  for (auto& [n, t] : mine)
    if (!given.count(n)) missing.push_back(n);
  for (auto& [n, t] : given) {
    auto it = mine.find(n);
    if (it == mine.end()) {
      unexpected.push_back(n);
      continue;
    }
    const Tensor& dst = *it->second;
    if (t->shape() != dst.shape() || t->dtype() != dst.dtype()) {
      mismatched.push_back(n + ": checkpoint has " + shape_str(t->shape()) + " " + dtype_name(t->dtype()) +
                           ", model has " + shape_str(dst.shape()) + " " + dtype_name(dst.dtype()));
    }
  }
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
    return s;
  };
  std::string problems;
  if (!duplicates.empty()) problems += "\n  duplicate keys: " + join(duplicates);
  if (!mismatched.empty()) problems += "\n  size/dtype mismatch: " + join(mismatched);
  if (strict && !missing.empty()) problems += "\n  missing keys: " + join(missing);
  if (strict && !unexpected.empty()) problems += "\n  unexpected keys: " + join(unexpected);
  EMBER_CHECK(problems.empty(), "load_state_dict: the state does not match ", type_name(), ":", problems);

  NoGradGuard g;
  for (auto& [n, t] : given) {
    auto it = mine.find(n);
    if (it == mine.end()) continue;
    it->second->copy_(*t);
  }
}

void Module::str_into(std::ostringstream& os, const std::string& name, int indent) const {
  os << (name.empty() ? "" : "(" + name + "): ") << type_name() << "(";
  if (children_.empty()) {
    os << extra_repr() << ")";
    return;
  }
  const std::string extra = extra_repr();
  if (!extra.empty()) os << extra;
  os << "\n";
  for (auto& [n, child] : children_) {
    os << std::string(indent + 2, ' ');
    child->str_into(os, n, indent + 2);
    os << "\n";
  }
  os << std::string(indent, ' ') << ")";
}

std::string Module::str() const {
  std::ostringstream os;
  str_into(os, "", 0);
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.str(); }

}  // namespace ember::nn
