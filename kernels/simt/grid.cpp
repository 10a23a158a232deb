// Launching a grid: validation like an sm_90 device, then fiber grids (block.cpp) or flat grids
// (plain loops, blocks spread over a pool of OS threads).
//
// Note [Flat launches]
// EMBER_LAUNCH_FLAT promises that the kernel uses no shared memory, barriers or warp intrinsics,
// so nothing ever has to wait for another CUDA thread: a block is a loop over its threads
// (KernelCall::run_block, where the kernel call can be inlined), and blocks are independent, so
// they are split into chunks that the calling thread and the pool's threads take in turn. Each OS
// thread has its own tls_exec, which is where threadIdx/blockIdx come from. Small grids run inline
// on the calling thread (waking the pool costs microseconds).

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "internal.h"

namespace ember::simt::detail {

namespace {

// ---- the pool of OS threads for flat grids -----------------------------------------------------

struct FlatJob {
  size_t chunks = 0;
  const std::function<void(size_t)>* body = nullptr;
  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  int users = 0;  // helpers working on it (guarded by the pool's mutex)
};

class FlatPool {
 public:
  explicit FlatPool(int helpers) : helpers_(helpers) {
    for (int i = 0; i < helpers; ++i) std::thread([this] { helper_loop(); }).detach();
  }
  int helpers() const { return helpers_; }

  // Runs body(0) ... body(chunks - 1), on this thread and the helpers; returns when all are done
  // and no helper holds the job any more. Everything the helpers did happens before the return
  // (they hand the job back under mu_, which is also what TSan sees).
  void run(size_t chunks, const std::function<void(size_t)>& body) {
    FlatJob job;
    job.chunks = chunks;
    job.body = &body;
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(&job);
    }
    wake_.notify_all();
    work_on(job);
    std::unique_lock<std::mutex> lock(mu_);
    jobs_.erase(std::remove(jobs_.begin(), jobs_.end(), &job), jobs_.end());  // no new helpers
    returned_.wait(lock, [&] { return job.users == 0 && job.done.load() == job.chunks; });
  }

 private:
  static void work_on(FlatJob& job) {
    for (size_t i; (i = job.next.fetch_add(1)) < job.chunks;) {
      (*job.body)(i);
      job.done.fetch_add(1);
    }
  }

  void helper_loop() {
    for (;;) {
      FlatJob* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return !jobs_.empty(); });
        job = jobs_.front();
        if (job->next.load() >= job->chunks) {  // nothing left to take: retire it
          jobs_.pop_front();
          continue;
        }
        ++job->users;
      }
      work_on(*job);
      {
        std::lock_guard<std::mutex> lock(mu_);
        --job->users;
      }
      returned_.notify_all();
    }
  }

  int helpers_ = 0;
  std::mutex mu_;
  std::condition_variable wake_, returned_;
  std::deque<FlatJob*> jobs_;
};

FlatPool& flat_pool() {
  // Never destroyed: its detached threads may still wait on it while the process exits.
  static FlatPool* pool = [] {
    int threads = config().flat_threads;
    if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return new FlatPool(threads - 1);
  }();
  return *pool;
}

void run_flat_grid(const LaunchRequest& r, const unsigned* block_order, unsigned nblocks) {
  const Config& cfg = config();
  const unsigned n = r.block.x * r.block.y * r.block.z;
  std::vector<unsigned> thread_order;
  if (cfg.schedule != Order::Forward) {
    Rng rng{cfg.seed ^ 0x5EED};
    thread_order.resize(n);
    make_order(thread_order.data(), n, cfg.schedule, rng);
  }
  const unsigned* torder = thread_order.empty() ? nullptr : thread_order.data();

  auto run_blocks = [&](unsigned first, unsigned last) {
    ExecContext& ctx = tls_exec;
    const ExecContext saved = ctx;
    ctx.mode = Mode::Flat;
    ctx.block_dim = r.block;
    ctx.grid_dim = r.grid;
    ctx.dynamic_smem = nullptr;
    ctx.kernel_name = r.site.kernel;
    for (unsigned k = first; k < last; ++k) {
      const unsigned lin = block_order ? block_order[k] : k;
      ctx.block_idx = uint3{lin % r.grid.x, (lin / r.grid.x) % r.grid.y, lin / (r.grid.x * r.grid.y)};
      r.run_block(r.call, torder);
    }
    ctx = saved;
  };

  FlatPool& pool = flat_pool();
  const uint64_t total = static_cast<uint64_t>(nblocks) * n;
  if (pool.helpers() == 0 || nblocks < 2 || total < 16384) {
    run_blocks(0, nblocks);
    return;
  }
  const unsigned chunks = std::min<unsigned>(nblocks, static_cast<unsigned>(pool.helpers() + 1) * 8);
  pool.run(chunks, [&](size_t c) {
    const unsigned first = static_cast<unsigned>(static_cast<uint64_t>(nblocks) * c / chunks);
    const unsigned last = static_cast<unsigned>(static_cast<uint64_t>(nblocks) * (c + 1) / chunks);
    run_blocks(first, last);
  });
}

// ---- per-kernel attributes ---------------------------------------------------------------------

constexpr int kDefaultDynamicSmem = 48 * 1024;
constexpr int kMaxDynamicSmemOptin = 227 * 1024;  // sm_90: 232448 bytes

std::mutex attribute_mutex;
std::map<const void*, int>& max_dynamic_smem_table() {
  static auto* table = new std::map<const void*, int>;  // never destroyed, like the registry
  return *table;
}

cudaError_t validate(const LaunchRequest& r) {
  const dim3 b = r.block, g = r.grid;
  const uint64_t threads = static_cast<uint64_t>(b.x) * b.y * b.z;
  if (threads == 0 || threads > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64) return cudaErrorInvalidConfiguration;
  if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 2147483647u || g.y > 65535 || g.z > 65535)
    return cudaErrorInvalidConfiguration;
  if (static_cast<uint64_t>(g.x) * g.y * g.z > 0xFFFFFFFFull) return cudaErrorInvalidConfiguration;  // emulator limit
  if (r.dynamic_smem > max_dynamic_smem(r.func)) return cudaErrorInvalidValue;
  return cudaSuccess;
}

}  // namespace

size_t max_dynamic_smem(const void* func) {
  std::lock_guard<std::mutex> lock(attribute_mutex);
  auto it = max_dynamic_smem_table().find(func);
  return static_cast<size_t>(it == max_dynamic_smem_table().end() ? kDefaultDynamicSmem : it->second);
}

void run_grid(const LaunchRequest& r) {
  const Config& cfg = config();
  const unsigned nblocks = r.grid.x * r.grid.y * r.grid.z;
  std::vector<unsigned> order;
  if (cfg.block_order != Order::Forward) {
    static std::atomic<uint64_t> launches{0};
    Rng rng{cfg.seed + 0x9E37 * launches.fetch_add(1)};
    order.resize(nblocks);
    make_order(order.data(), nblocks, cfg.block_order, rng);
  }
  const unsigned* block_order = order.empty() ? nullptr : order.data();
  footprint_launch_begin(r);
  if (r.kind == LaunchKind::Flat) run_flat_grid(r, block_order, nblocks);
  else run_fiber_grid(r, block_order, nblocks);
  footprint_launch_end();
}

void submit_launch(const LaunchRequest& r, std::shared_ptr<void> keep_alive) {
  cudaError_t err = cudaSuccess;
  CUstream_st* s = resolve_stream(r.stream, &err);
  if (s == nullptr) {
    fail(err);
    return;
  }
  if (stream_device(s) != current_device()) {  // a stream of another device
    fail(cudaErrorInvalidResourceHandle);
    return;
  }
  if ((err = validate(r)) != cudaSuccess) {
    fail(err);
    return;
  }
  if (!keep_alive) {
    run_grid(r);
    return;
  }
  if (const cudaError_t e = enqueue(s, cudaGraphNodeTypeKernel, [r, keep_alive] { run_grid(r); })) fail(e);
}

void check_pointer_argument(const void* p, int index, const LaunchSite& site) {
  if (p == nullptr) return;
  Allocation a;
  if (find_allocation(p, /*one_past_end=*/true, &a)) return;
  fatal("kernel %s launched at %s:%u: pointer argument #%d (%p) is not device memory (a host pointer passed to a "
        "kernel?)",
        site.kernel, site.file, site.line, index, p);
}

}  // namespace ember::simt::detail

using namespace ember::simt::detail;

extern "C" cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (func == nullptr) return fail(cudaErrorInvalidDeviceFunction);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || value > kMaxDynamicSmemOptin) return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lock(attribute_mutex);
    max_dynamic_smem_table()[func] = value;
  }
  return cudaSuccess;  // other attributes (carveout, ...) have no effect here
}
