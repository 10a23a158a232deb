// Autocast's thread-local state, the op policies and the cast cache (Note [Autocast] in
// autocast.h).

#include "autocast.h"

#include <map>
#include <memory>
#include <utility>

#include "autograd.h"
#include "error.h"

namespace ember {

namespace {

struct DeviceAutocast {
  bool enabled = false;
  DType dtype;
};

// A kept lower-precision cast of a parameter, and what it was made from.
struct CacheEntry {
  std::weak_ptr<TensorImpl> source;  // expired: the parameter is gone (its address may be reused)
  uint64_t version = 0;              // the source storage's version when cast
  Tensor cast;
};

struct AutocastState {
  DeviceAutocast cpu{false, DType::bf16};
  DeviceAutocast cuda{false, DType::f16};
  int depth = 0;  // AutocastGuards alive on this thread
  std::map<std::pair<const TensorImpl*, DType>, CacheEntry> cache;

  DeviceAutocast& of(DeviceType d) { return d == DeviceType::CUDA ? cuda : cpu; }
  bool any_enabled() const { return cpu.enabled || cuda.enabled; }
};

thread_local AutocastState t_autocast;

void check_autocast_dtype(DeviceType device, DType dtype) {
  EMBER_CHECK(is_low_precision(dtype), "AutocastGuard: autocast computes in float16 or bfloat16, got ", dtype,
              " for ", device == DeviceType::CUDA ? "cuda" : "cpu");
}

// Eligible for autocast's casts: floating, on the region's device type, not f64.
bool eligible(const Tensor& t, DeviceType device) {
  return t.defined() && is_floating(t.dtype()) && t.dtype() != DType::f64 && t.device().type == device;
}

// The cache is for the lower-precision casts of parameters: f32 leaves that require grad.
bool cacheable(const Tensor& t, DType to) {
  return to == t_autocast.of(t.device().type).dtype && t.dtype() == DType::f32 && t.is_leaf() && t.requires_grad();
}

// Whether a kept cast still stands for `t` now (Note [Autocast], the cast cache).
bool still_valid(const CacheEntry& e, const Tensor& t) {
  if (e.source.lock() != t.impl_ptr() || e.version != t.version()) return false;
  if (!grad_mode_enabled()) return true;
  const std::shared_ptr<Node>& fn = e.cast.grad_fn();
  return fn != nullptr && !fn->released;
}

template <typename Args>
std::optional<DType> policy_dtype(autocast::CastPolicy policy, const Args& args) {
  if (!t_autocast.any_enabled()) return std::nullopt;  // the common case: one thread-local read
  // The op's device type: its first floating argument's.
  const Tensor* first = nullptr;
  for (const Tensor* t : args)
    if (t->defined() && is_floating(t->dtype())) {
      first = t;
      break;
    }
  if (first == nullptr) return std::nullopt;
  const DeviceType device = first->device().type;
  const DeviceAutocast& state = t_autocast.of(device);
  if (!state.enabled) return std::nullopt;
  DType target = state.dtype;
  if (policy == autocast::CastPolicy::fp32) target = DType::f32;
  if (policy == autocast::CastPolicy::promote) {
    bool seen = false;
    for (const Tensor* t : args) {
      if (!eligible(*t, device)) continue;
      target = seen ? promote_types(target, t->dtype()) : t->dtype();
      seen = true;
    }
  }
  for (const Tensor* t : args)
    if (eligible(*t, device) && t->dtype() != target) return target;
  return std::nullopt;
}

}  // namespace

AutocastGuard::AutocastGuard(DeviceType device, DType dtype) : device_(device) {
  check_autocast_dtype(device, dtype);
  DeviceAutocast& s = t_autocast.of(device);
  prev_enabled_ = s.enabled;
  prev_dtype_ = s.dtype;
  s = {true, dtype};
  ++t_autocast.depth;
}

AutocastGuard::AutocastGuard(DeviceType device, AutocastMode mode) : device_(device) {
  DeviceAutocast& s = t_autocast.of(device);
  prev_enabled_ = s.enabled;
  prev_dtype_ = s.dtype;
  s.enabled = mode == AutocastMode::on;
  ++t_autocast.depth;
}

AutocastGuard::~AutocastGuard() {
  t_autocast.of(device_) = {prev_enabled_, prev_dtype_};
  if (--t_autocast.depth == 0) t_autocast.cache.clear();
}

bool autocast_enabled(DeviceType device) { return t_autocast.of(device).enabled; }
DType autocast_dtype(DeviceType device) { return t_autocast.of(device).dtype; }

namespace autocast {

std::optional<DType> op_dtype(CastPolicy policy, std::initializer_list<const Tensor*> args) {
  return policy_dtype(policy, args);
}

std::optional<DType> op_dtype(CastPolicy policy, const std::vector<Tensor>& args) {
  if (!t_autocast.any_enabled()) return std::nullopt;
  std::vector<const Tensor*> ptrs;
  ptrs.reserve(args.size());
  for (const Tensor& t : args) ptrs.push_back(&t);
  return policy_dtype(policy, ptrs);
}

Tensor cast(const Tensor& t, DType dtype) {
  if (!t.defined() || t.dtype() == dtype || !eligible(t, t.device().type) || !t_autocast.of(t.device().type).enabled)
    return t;
  if (!cacheable(t, dtype)) return t.to(dtype);
  const auto key = std::make_pair(static_cast<const TensorImpl*>(t.impl_ptr().get()), dtype);
  auto it = t_autocast.cache.find(key);
  if (it != t_autocast.cache.end() && still_valid(it->second, t)) return it->second.cast;
  Tensor c = t.to(dtype);
  t_autocast.cache[key] = CacheEntry{t.impl_ptr(), t.version(), c};
  return c;
}

size_t cache_size() { return t_autocast.cache.size(); }

SuspendGuard::SuspendGuard() : prev_cpu_(t_autocast.cpu.enabled), prev_cuda_(t_autocast.cuda.enabled) {
  t_autocast.cpu.enabled = false;
  t_autocast.cuda.enabled = false;
}

SuspendGuard::~SuspendGuard() {
  t_autocast.cpu.enabled = prev_cpu_;
  t_autocast.cuda.enabled = prev_cuda_;
}

}  // namespace autocast

}  // namespace ember
