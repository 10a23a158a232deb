// DistributedDataParallel: see Note [DDP buckets and overlap] in ddp.h.

#include "ddp.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <sstream>

#include "../core/autograd.h"
#include "../core/error.h"

namespace ember::parallel {

namespace {

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}
constexpr uint64_t kFnvOffset = 1469598103934665603ull;

uint64_t hash_tensors(uint64_t h, const std::vector<std::pair<std::string, Tensor>>& named) {
  for (const auto& [name, t] : named) {
    h = fnv1a(h, name.data(), name.size() + 1);
    for (int64_t d : t.shape()) h = fnv1a(h, &d, sizeof d);
    const int64_t dt = static_cast<int64_t>(t.dtype());
    h = fnv1a(h, &dt, sizeof dt);
  }
  return h;
}

}  // namespace

void pack_into(const Tensor& buffer, const std::vector<Tensor>& tensors, const std::vector<int64_t>& offsets) {
  EMBER_CHECK(buffer.dim() == 1 && tensors.size() == offsets.size(), "pack_into: a 1-D buffer and one offset per tensor");
  for (size_t i = 0; i < tensors.size(); ++i)
    buffer.narrow(0, offsets[i], tensors[i].numel()).copy_(tensors[i].reshape({-1}));
}

void unpack_from(const Tensor& buffer, const std::vector<Tensor>& tensors, const std::vector<int64_t>& offsets) {
  EMBER_CHECK(buffer.dim() == 1 && tensors.size() == offsets.size(), "unpack_from: a 1-D buffer and one offset per tensor");
  for (size_t i = 0; i < tensors.size(); ++i) {
    Tensor dst = tensors[i];
    dst.copy_(buffer.narrow(0, offsets[i], dst.numel()).view(dst.shape()));
  }
}

// ---- the reducer ------------------------------------------------------------------------------

struct Bucket {
  std::vector<int64_t> params;   // indices into Reducer::params
  std::vector<int64_t> offsets;  // element offset of each in the buffer
  Tensor buffer;                 // 1-D, the bucket's dtype and device
  int64_t pending = 0;           // gradients still to arrive this iteration
  bool launched = false;
  int64_t tag = 0;               // hash of the unused parameters (0: none)
  std::shared_ptr<Work> work;
};

struct DistributedDataParallel::Reducer {
  Communicator* comm = nullptr;
  std::vector<Tensor> params;      // requiring grad, in registration order
  std::vector<std::string> names;
  std::vector<int64_t> bucket_of;  // per parameter
  std::vector<Bucket> buckets;
  std::function<void(const DDPEvent&)> on_event;

  // Per iteration (armed by forward, disarmed by finalize).
  std::mutex mu;  // hooks run on the backward thread; finish() may come from elsewhere
  bool armed = false;
  bool finalize_queued = false;
  std::vector<bool> ready;
  size_t next_bucket = 0;
  DDPStats stats;

  void emit(DDPEventKind k, int64_t i) {
    if (on_event) on_event({k, i});
  }

  void disarm() {
    std::lock_guard<std::mutex> lock(mu);
    if (next_bucket == 0) armed = false;
  }

  void arm() {
    std::lock_guard<std::mutex> lock(mu);
    EMBER_CHECK(!armed || next_bucket == 0, "DistributedDataParallel: forward called while the previous iteration's "
                "gradients were half reduced (its backward failed?); the ranks are out of step");
    armed = true;
    finalize_queued = false;
    ready.assign(params.size(), false);
    next_bucket = 0;
    for (Bucket& b : buckets) {
      b.pending = static_cast<int64_t>(b.params.size());
      b.launched = false;
      b.tag = 0;
      b.work.reset();
    }
  }

  void on_grad_ready(int64_t i) {
    std::lock_guard<std::mutex> lock(mu);
    if (!armed) return;  // no_sync, eval-mode forward, or a backward without a forward
    EMBER_CHECK(!ready[i], "DistributedDataParallel: parameter '", names[i], "' received its gradient twice in one "
                "iteration (two backward passes after one forward?); accumulate inside no_sync() instead");
    ready[i] = true;
    emit(DDPEventKind::grad_ready, i);
    Bucket& b = buckets[bucket_of[i]];
    size_t k = 0;
    while (b.params[k] != i) ++k;
    b.buffer.narrow(0, b.offsets[k], params[i].numel()).copy_(params[i].grad().reshape({-1}));
    b.pending -= 1;
    if (!finalize_queued && in_backward()) {
      finalize_queued = true;
      // The reducer outlives the callback only as long as the wrapper does.
      queue_backward_callback([this] { finalize(); });
    }
    launch_ready_locked();
  }

  // Launches buckets in order while the next one is complete.
  void launch_ready_locked() {
    while (next_bucket < buckets.size() && buckets[next_bucket].pending == 0) {
      Bucket& b = buckets[next_bucket];
      b.work = comm->all_reduce_async(b.buffer, ReduceOp::avg, b.tag);
      b.launched = true;
      emit(DDPEventKind::bucket_launched, static_cast<int64_t>(next_bucket));
      ++next_bucket;
    }
  }

  // This rank's parameters of bucket `bi` that got no gradient this iteration.
  std::string unused_names(const Bucket& b) const {
    std::ostringstream os;
    for (int64_t p : b.params)
      if (!ready[p]) os << (os.tellp() > 0 ? ", " : "") << "'" << names[p] << "'";
    return os.tellp() > 0 ? os.str() : "none";
  }

  void finalize() {
    std::lock_guard<std::mutex> lock(mu);
    if (!armed) return;
    if (next_bucket == 0 && std::none_of(ready.begin(), ready.end(), [](bool r) { return r; })) {
      armed = false;  // forward without backward (e.g. a finish() after an eval forward)
      return;
    }
    // Parameters without a gradient: zeros in the bucket, and a tag that says which, so ranks
    // that disagree fail in the collective instead of averaging different things.
    for (size_t bi = next_bucket; bi < buckets.size(); ++bi) {
      Bucket& b = buckets[bi];
      uint64_t h = kFnvOffset;
      bool any_unused = false;
      for (size_t k = 0; k < b.params.size(); ++k) {
        const int64_t p = b.params[k];
        if (ready[p]) continue;
        b.buffer.narrow(0, b.offsets[k], params[p].numel()).zero_();
        h = fnv1a(h, &p, sizeof p);
        any_unused = true;
      }
      b.tag = any_unused ? static_cast<int64_t>(h & 0x7fffffffffffffffull) | 1 : 0;
      b.pending = 0;
    }
    launch_ready_locked();
    armed = false;
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t bi = 0; bi < buckets.size(); ++bi) {
      Bucket& b = buckets[bi];
      try {
        b.work->wait();
      } catch (const std::exception& e) {
        stats.comm_wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const std::string what = e.what();
        if (what.find("disagree on all_reduce") != std::string::npos) {
          EMBER_THROW("DistributedDataParallel: the gradient all-reduce of bucket ", bi, " failed (parameters without "
                      "a gradient in it on this rank: ", unused_names(b), "; every rank must leave the same "
                      "parameters unused): ", what);
        }
        EMBER_THROW("DistributedDataParallel: the gradient all-reduce of bucket ", bi, " failed: ", what);
      }
      for (size_t k = 0; k < b.params.size(); ++k) {
        const int64_t p = b.params[k];
        if (!ready[p]) continue;  // unused on every rank (the tags agreed): .grad stays as it was
        Tensor g = params[p].grad();
        Tensor avg = b.buffer.narrow(0, b.offsets[k], params[p].numel()).view(params[p].shape());
        if (g.defined()) {
          g.copy_(avg);  // through g's strides: a channels-last gradient stays channels-last
        } else {
          Tensor own = empty(avg.shape(), {.dtype = avg.dtype(), .device = avg.device()},
                             params[p].suggest_memory_format());  // the parameter's format, as AccumulateGrad's
          own.copy_(avg);
          params[p].set_grad(own);
        }
      }
      stats.bytes_reduced += b.buffer.nbytes();
      emit(DDPEventKind::bucket_reduced, static_cast<int64_t>(bi));
    }
    stats.comm_wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stats.steps += 1;
    emit(DDPEventKind::backward_finished, -1);
  }
};

// ---- the wrapper ------------------------------------------------------------------------------

DistributedDataParallel::DistributedDataParallel(nn::Module& module, std::shared_ptr<Communicator> comm,
                                                 DDPOptions options)
    : module_(module), comm_(std::move(comm)), options_(std::move(options)) {
  EMBER_CHECK(comm_ != nullptr, "DistributedDataParallel: no communicator");
  EMBER_CHECK(options_.bucket_cap_bytes >= 1, "DistributedDataParallel: bucket_cap_bytes must be at least 1, got ",
              options_.bucket_cap_bytes);
  register_module("module", module_);
  NoGradGuard no_grad;

  // 1. Every rank must wrap the same model.
  const auto named_params = module_.named_parameters();
  const auto named_buffers = module_.named_buffers();
  int64_t numel = 0;
  for (const auto& [n, t] : named_params) numel += t.numel();
  const int64_t fingerprint =
      static_cast<int64_t>(hash_tensors(hash_tensors(kFnvOffset, named_params), named_buffers) & 0x7fffffffffffffffull);
  Tensor mine = from_vector<int64_t>({static_cast<int64_t>(named_params.size()),
                                      static_cast<int64_t>(named_buffers.size()), numel, fingerprint});
  const std::vector<Tensor> all = comm_->all_gather(mine);
  const std::vector<int64_t> zero = all[0].to_vector<int64_t>();
  std::ostringstream bad;
  for (size_t r = 1; r < all.size(); ++r) {
    const std::vector<int64_t> v = all[r].to_vector<int64_t>();
    if (v == zero) continue;
    bad << (bad.tellp() > 0 ? "; " : "") << "rank " << r << " has " << v[0] << " parameters (" << v[2]
        << " elements) and " << v[1] << " buffers";
  }
  EMBER_CHECK(bad.tellp() == 0, "DistributedDataParallel: the ranks wrap different models: rank 0 has ", zero[0],
              " parameters (", zero[2], " elements) and ", zero[1], " buffers; ", bad.str(),
              " (or the same counts with different names, shapes or dtypes); this is rank ", comm_->rank());

  // 2. Rank 0's weights and buffers everywhere.
  for (const auto& [n, t] : named_params) comm_->broadcast_async(t.detach(), 0);
  for (const auto& [n, t] : named_buffers) comm_->broadcast_async(t.detach(), 0);
  comm_->barrier();  // collectives run in order: this one finishing means the broadcasts did

  // 3. Buckets, in reverse registration order.
  reducer_ = std::make_shared<Reducer>();
  Reducer& r = *reducer_;
  r.comm = comm_.get();
  r.on_event = options_.on_event;
  for (const auto& [n, t] : named_params) {
    if (!t.requires_grad()) continue;
    r.params.push_back(t);
    r.names.push_back(n);
  }
  r.bucket_of.assign(r.params.size(), -1);
  int64_t bytes = 0;
  for (int64_t i = static_cast<int64_t>(r.params.size()) - 1; i >= 0; --i) {
    const Tensor& p = r.params[i];
    const bool fits = !r.buckets.empty() && bytes + p.nbytes() <= options_.bucket_cap_bytes &&
                      r.params[r.buckets.back().params.front()].dtype() == p.dtype() &&
                      r.params[r.buckets.back().params.front()].device() == p.device();
    if (!fits) {
      r.buckets.emplace_back();
      bytes = 0;
    }
    Bucket& b = r.buckets.back();
    b.offsets.push_back(b.params.empty() ? 0 : b.offsets.back() + r.params[b.params.back()].numel());
    b.params.push_back(i);
    r.bucket_of[i] = static_cast<int64_t>(r.buckets.size()) - 1;
    bytes += p.nbytes();
  }
  for (Bucket& b : r.buckets) {
    const Tensor& last = r.params[b.params.back()];
    b.buffer = zeros({b.offsets.back() + last.numel()}, {.dtype = last.dtype(), .device = last.device()});
  }

  // 4. Grad-ready hooks. They hold the reducer weakly: a hook outliving the wrapper does nothing.
  std::weak_ptr<Reducer> weak = reducer_;
  for (size_t i = 0; i < r.params.size(); ++i) {
    r.params[i].register_post_accumulate_grad_hook([weak, i](Tensor&) {
      if (auto red = weak.lock()) red->on_grad_ready(static_cast<int64_t>(i));
    });
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

Tensor DistributedDataParallel::forward(const Tensor& x) {
  if (is_training() && options_.broadcast_buffers && comm_->world_size() > 1) {
    NoGradGuard no_grad;
    std::shared_ptr<Work> last;
    for (const auto& [n, t] : module_.named_buffers()) last = comm_->broadcast_async(t.detach(), 0);
    if (last) last->wait();  // in order: the last one done means all are
  }
  if (is_training() && sync_ && grad_mode_enabled()) {
    reducer_->arm();
  } else {
    reducer_->disarm();  // this forward's backward (no_sync, eval) stays local
  }
  return module_.forward(x);
}

void DistributedDataParallel::finish() { reducer_->finalize(); }

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.sync_) {
  ddp_.sync_ = false;
}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() { ddp_.sync_ = previous_; }

std::vector<std::vector<int64_t>> DistributedDataParallel::bucket_assignment() const {
  std::vector<std::vector<int64_t>> out;
  for (const Bucket& b : reducer_->buckets) out.push_back(b.params);
  return out;
}

DDPStats DistributedDataParallel::stats() const {
  std::lock_guard<std::mutex> lock(reducer_->mu);
  return reducer_->stats;
}

void all_reduce_found_inf(optim::GradScaler& scaler, const optim::Optimizer& opt, Communicator& comm) {
  Tensor found = scaler.found_inf(opt);
  EMBER_CHECK(found.defined(), "all_reduce_found_inf: call scaler.unscale_(opt) first");
  comm.all_reduce(found, ReduceOp::sum);
}

}  // namespace ember::parallel
