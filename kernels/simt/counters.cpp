// The emulator's hardware counters (counters.h): what a warp's memory instructions would cost on a
// GPU, and how often threads synchronize.
//
// Note [Seeing every load and store]
// The emulator runs a kernel as ordinary compiled C++, so a load is a plain `mov` it never sees.
// To see them without changing a line of the kernel, a lab's translation unit is compiled with
// GCC's ThreadSanitizer *instrumentation* but without its runtime (kernels/labs/CMakeLists.txt):
// `-fsanitize=thread` makes the compiler call __tsan_read4(addr) before every 4-byte load,
// __tsan_write16(addr) before every 16-byte store, __tsan_atomic32_fetch_add(...) in place of an
// atomic, and so on, and the emulator defines those functions itself
// (kernels/simt/lab_support/access_hooks.cpp) to call counters_access() here with the address, the
// size and the caller's return address, which identifies the instruction.
// `-U__SANITIZE_THREAD__` keeps simt.h from switching to its TSan build.
// Why TSan's instrumentation and not ASan's: a race detector must see every access, so TSan's
// instruments each one. ASan's skips what cannot be a new memory error: the store of
// `s[t] += s[t + k]` (its address was checked by the load just before) and `s[0]` of a static
// array (a constant index inside the array), so a shared-memory tree reduction would lose a third
// of its requests.
//
// Fibers run a warp's lanes one after another, never in lock-step, so "the 32 accesses of one
// warp instruction" are rebuilt afterwards: each access is recorded with its CUDA thread and
// instruction address; when the block ends, the k-th execution of instruction P by each lane of
// warp W forms one request (W, P, k). For converged code this is exactly the GPU's grouping; for
// divergent code a lane that skipped an iteration pairs its later executions with its neighbours'
// earlier ones, which still counts every request, with fewer lanes in some.
//
// Per request:
//   global: the distinct 32-byte sectors the lanes touch (4 for 32 consecutive floats, 32 for 32
//           floats a row apart);
//   shared: wavefronts — 32 banks of 4-byte words serve one word each per pass; lanes reading the
//           same word share it (broadcast); 8-byte accesses are served a half-warp per pass and
//           16-byte ones a quarter-warp, as on NVIDIA GPUs since Volta. Wavefronts per pass =
//           the most distinct words asked of one bank.
// An atomic read-modify-write counts as one global store (a GPU's atomic is one request); atomic
// loads are not counted (access_hooks.cpp says why).
// Addresses outside device memory and shared memory (the stack, the emulator's own data) are not
// counted.

#include "counters.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "internal.h"

namespace ember::simt {
namespace detail {

std::atomic<bool> g_counting{false};
std::atomic<bool> g_memory_hooks_linked{false};

namespace {

struct Access {
  uint32_t thread;  // linear thread index in the block
  uint32_t size;
  uintptr_t pc;
  uintptr_t addr;
  bool write;
  bool shared;
};

// The launch this host thread is running (fiber blocks run on the launching OS thread).
struct CurrentLaunch {
  bool active = false;
  KernelCounters counts;
  uintptr_t shared_begin = 0, shared_end = 0;    // static __shared__ section
  uintptr_t dynamic_begin = 0, dynamic_end = 0;  // this launch's dynamic shared memory
  std::vector<Access> trace;                     // the current block's accesses
};
thread_local CurrentLaunch tls_launch;

std::mutex g_results_mutex;
std::vector<KernelCounters> g_results;

struct RequestKey {
  uint32_t warp;
  uint32_t occurrence;
  uintptr_t pc;
  bool operator==(const RequestKey& o) const { return warp == o.warp && occurrence == o.occurrence && pc == o.pc; }
};
struct RequestKeyHash {
  size_t operator()(const RequestKey& k) const {
    return std::hash<uintptr_t>()(k.pc) ^ (static_cast<size_t>(k.warp) << 40) ^ (static_cast<size_t>(k.occurrence) * 0x9E3779B97F4A7C15ull);
  }
};

// Wavefronts one shared-memory request needs: lanes are served in passes of 32 / 16 / 8 lanes for
// accesses of up to 4 / 8 / 16 bytes; in each pass, a bank serves one distinct word.
void count_shared(const std::vector<const Access*>& lanes, KernelCounters& c) {
  uint32_t width = 0;
  for (const Access* a : lanes) width = std::max(width, a->size);
  const uint32_t per_pass = width <= 4 ? 32 : width <= 8 ? 16 : 8;
  std::vector<const Access*> by_lane(32, nullptr);
  for (const Access* a : lanes) by_lane[a->thread % 32] = a;
  for (uint32_t first = 0; first < 32; first += per_pass) {
    // words[bank] = the distinct word addresses asked of that bank in this pass
    std::vector<uintptr_t> words[32];
    bool any = false;
    for (uint32_t l = first; l < first + per_pass; ++l) {
      const Access* a = by_lane[l];
      if (!a) continue;
      any = true;
      for (uintptr_t w = a->addr / 4; w <= (a->addr + a->size - 1) / 4; ++w) {
        std::vector<uintptr_t>& bank = words[w % 32];
        if (std::find(bank.begin(), bank.end(), w) == bank.end()) bank.push_back(w);
      }
    }
    if (!any) continue;
    size_t most = 1;
    for (const auto& bank : words) most = std::max(most, bank.size());
    c.shared_wavefronts += most;
    c.shared_ideal_wavefronts += 1;
  }
  c.shared_requests += 1;
}

void count_global(const std::vector<const Access*>& lanes, KernelCounters& c) {
  std::vector<uintptr_t> sectors;
  for (const Access* a : lanes) {
    for (uintptr_t s = a->addr / 32; s <= (a->addr + a->size - 1) / 32; ++s) sectors.push_back(s);
    c.global_bytes_requested += a->size;
  }
  std::sort(sectors.begin(), sectors.end());
  const uint64_t distinct = static_cast<uint64_t>(std::unique(sectors.begin(), sectors.end()) - sectors.begin());
  if (lanes.front()->write) {
    c.global_store_requests += 1;
    c.global_store_sectors += distinct;
  } else {
    c.global_load_requests += 1;
    c.global_load_sectors += distinct;
  }
  c.global_request_lanes += lanes.size();
}

}  // namespace

void counters_launch_begin(const LaunchRequest& r) {
  CurrentLaunch& L = tls_launch;
  L.active = g_counting.load(std::memory_order_relaxed);
  if (!L.active) return;
  L.counts = KernelCounters{};
  L.counts.kernel = r.site.kernel;
  L.counts.grid[0] = r.grid.x, L.counts.grid[1] = r.grid.y, L.counts.grid[2] = r.grid.z;
  L.counts.block[0] = r.block.x, L.counts.block[1] = r.block.y, L.counts.block[2] = r.block.z;
  L.shared_begin = reinterpret_cast<uintptr_t>(r.shared.begin);
  L.shared_end = reinterpret_cast<uintptr_t>(r.shared.end);
  L.trace.clear();
}

void counters_block_begin(const unsigned char* dynamic_smem, size_t bytes) {
  CurrentLaunch& L = tls_launch;
  if (!L.active) return;
  L.dynamic_begin = reinterpret_cast<uintptr_t>(dynamic_smem);
  L.dynamic_end = L.dynamic_begin + bytes;
  L.trace.clear();
}

void counters_block_end(unsigned threads) {
  CurrentLaunch& L = tls_launch;
  if (!L.active) return;
  KernelCounters& c = L.counts;
  c.blocks += 1;
  c.threads += threads;
  // Number each thread's executions of each instruction, then group the lanes of a warp.
  std::unordered_map<RequestKey, uint32_t, RequestKeyHash> seen;  // (thread, 0, pc) -> executions so far
  std::unordered_map<RequestKey, std::vector<const Access*>, RequestKeyHash> requests;
  std::vector<RequestKey> order;  // requests in first-seen order (deterministic counting)
  for (const Access& a : L.trace) {
    const uint32_t k = seen[RequestKey{a.thread, 0, a.pc}]++;
    const RequestKey key{a.thread / 32, k, a.pc};
    auto [it, inserted] = requests.try_emplace(key);
    if (inserted) order.push_back(key);
    it->second.push_back(&a);
  }
  for (const RequestKey& key : order) {
    const std::vector<const Access*>& lanes = requests[key];
    if (lanes.front()->shared) count_shared(lanes, c);
    else count_global(lanes, c);
  }
  L.trace.clear();
}

void counters_launch_end() {
  CurrentLaunch& L = tls_launch;
  if (!L.active) return;
  L.active = false;
  std::lock_guard<std::mutex> lock(g_results_mutex);
  if (g_counting.load(std::memory_order_relaxed)) g_results.push_back(std::move(L.counts));
}

void counters_on_barrier() {
  if (tls_launch.active) tls_launch.counts.barriers += 1;
}

void counters_on_warp_op(unsigned lanes) {
  if (!tls_launch.active) return;
  tls_launch.counts.warp_ops += 1;
  tls_launch.counts.warp_op_lanes += static_cast<unsigned>(__builtin_popcount(lanes));
}

std::string source_line(const void* pc) {
  Dl_info info{};
  if (dladdr(pc, &info) == 0 || info.dli_fname == nullptr) return "an unknown line";
  // pc is the return address of the instrumentation call: one byte back is inside the call, whose
  // line is the access's line.
  const auto offset = reinterpret_cast<uintptr_t>(pc) - reinterpret_cast<uintptr_t>(info.dli_fbase) - 1;
  char command[4200];
  std::snprintf(command, sizeof command, "addr2line -e '%s' 0x%lx 2>/dev/null", info.dli_fname,
                static_cast<unsigned long>(offset));
  std::string where;
  if (FILE* f = popen(command, "r")) {
    char buf[4096];
    if (std::fgets(buf, sizeof buf, f)) where = buf;
    pclose(f);
  }
  while (!where.empty() && (where.back() == '\n' || where.back() == ' ')) where.pop_back();
  if (where.empty() || where[0] == '?') return "an unknown line (build with -g to see it)";
  return where;
}

// An access that starts or ends past a device allocation: counted, and the first one described.
void out_of_bounds(CurrentLaunch& L, unsigned thread, uintptr_t addr, size_t size, bool write, const void* pc,
                   const Allocation& a) {
  L.counts.out_of_bounds += 1;
  if (!L.counts.first_out_of_bounds.empty()) return;
  const dim3 bd = tls_exec.block_dim;
  const uint3 bi = tls_exec.block_idx;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%zu-byte %s at byte %lld of a %zu-byte device allocation (%lld bytes past its end) by thread "
                "(%u,%u,%u) of block (%u,%u,%u), at ",
                size, write ? "store" : "load", static_cast<long long>(addr - a.base), a.size,
                static_cast<long long>(addr + size - (a.base + a.size)), thread % bd.x, thread / bd.x % bd.y,
                thread / (bd.x * bd.y), bi.x, bi.y, bi.z);
  L.counts.first_out_of_bounds = buf + source_line(pc);
}

void counters_access(const void* p, size_t size, bool write, const void* pc) {
  CurrentLaunch& L = tls_launch;
  if (!L.active || size == 0) return;
  unsigned thread = 0;
  if (!current_fiber_thread(&thread)) return;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  bool shared = (addr >= L.shared_begin && addr < L.shared_end) || (addr >= L.dynamic_begin && addr < L.dynamic_end);
  if (!shared) {
    Allocation a;
    if (find_allocation(p, false, &a)) {
      if (a.kind != MemoryKind::Device) return;  // pinned host memory
      if (addr + size > a.base + a.size) out_of_bounds(L, thread, addr, size, write, pc, a);
    } else if (find_allocation_ending_before(p, 256, &a) && a.kind == MemoryKind::Device) {
      out_of_bounds(L, thread, addr, size, write, pc, a);
      return;
    } else {
      return;  // the stack, host memory, the emulator's own data
    }
  }
  L.trace.push_back(Access{thread, static_cast<uint32_t>(size), reinterpret_cast<uintptr_t>(pc), addr, write, shared});
}

}  // namespace detail

void counters_start() {
  std::lock_guard<std::mutex> lock(detail::g_results_mutex);
  detail::g_results.clear();
  detail::g_counting.store(true);
}

std::vector<KernelCounters> counters_stop() {
  std::lock_guard<std::mutex> lock(detail::g_results_mutex);
  detail::g_counting.store(false);
  return std::move(detail::g_results);
}

bool counters_see_memory() { return detail::g_memory_hooks_linked.load(); }

}  // namespace ember::simt
