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
// `-U__SANITIZE_THREAD__` keeps simt.h from switching to its TSan build, and
// `tsan-instrument-func-entry-exit=0` leaves out the runtime's call-stack bookkeeping.
// `-fno-tree-sra` keeps GCC from splitting a copied struct into its members, so that a float4
// loaded into a variable is one 16-byte access, as the GPU's ld.global.v4 is.
// Why TSan's instrumentation and not ASan's: a race detector must see every access, so TSan's
// instruments each one. ASan's skips what cannot be a new memory error: the store of
// `s[t] += s[t + k]` (its address was checked by the load just before) and `s[0]` of a static
// array (a constant index inside the array), so a shared-memory tree reduction would lose a third
// of its requests.
//
// Fibers run a warp's lanes one after another, never in lock-step, so "the 32 accesses of one
// warp instruction" are rebuilt afterwards: each access is recorded with its CUDA thread, its
// instruction address and the number of the block's barriers completed before it; when the block
// ends, the k-th execution of instruction P by each lane of warp W after the same barrier b forms
// one request (W, P, b, k). For converged code this is exactly the GPU's grouping. Counting from
// each barrier keeps a loop whose body holds a barrier exact even when a lane skips an access in
// one iteration (a tile loader at a padded edge): every lane is in the same iteration between two
// barriers. Without a barrier in the loop, a lane that skipped an iteration pairs its later
// executions with its neighbours' earlier ones, which still counts every request, with fewer
// lanes in some.
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
#include <unordered_set>

#include "internal.h"

namespace ember::simt {
namespace detail {

std::atomic<bool> g_counting{false};
std::atomic<bool> g_memory_hooks_linked{false};

std::string source_line(const void* pc);

namespace {

struct Access {
  uint32_t thread;  // linear thread index in the block
  uint32_t size;
  uint32_t epoch;   // the block's barriers completed before this access
  uint32_t warp_epoch;  // the warp operations its warp had completed before it (Note [Shared-memory races])
  uintptr_t pc;
  uintptr_t addr;
  bool write;
  bool atomic;  // a read-modify-write
  bool shared;
};

// The launch this host thread is running (fiber blocks run on the launching OS thread).
struct CurrentLaunch {
  bool active = false;
  KernelCounters counts;
  uintptr_t shared_begin = 0, shared_end = 0;    // static __shared__ section
  uintptr_t dynamic_begin = 0, dynamic_end = 0;  // this launch's dynamic shared memory
  std::vector<Access> trace;                     // the current block's accesses
  uint32_t epoch = 0;                            // the current block's barriers completed so far
  std::vector<uint32_t> warp_epoch;              // warp operations completed so far, per warp
};
thread_local CurrentLaunch tls_launch;

std::mutex g_results_mutex;
std::vector<KernelCounters> g_results;

struct RequestKey {
  uint32_t warp;
  uint32_t epoch;
  uint32_t occurrence;
  uintptr_t pc;
  bool operator==(const RequestKey& o) const {
    return warp == o.warp && epoch == o.epoch && occurrence == o.occurrence && pc == o.pc;
  }
};
struct RequestKeyHash {
  size_t operator()(const RequestKey& k) const {
    return std::hash<uintptr_t>()(k.pc) ^ (static_cast<size_t>(k.warp) << 40) ^
           (static_cast<size_t>(k.occurrence) * 0x9E3779B97F4A7C15ull) ^ (static_cast<size_t>(k.epoch) * 0xC2B2AE3D27D4EB4Full);
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
  c.shared_request_lanes += lanes.size();
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

// Note [Shared-memory races]
// Two threads of a block that touch the same shared-memory word, at least one of them writing,
// must be ordered by a synchronization between the two accesses: a __syncthreads, or a warp
// operation (__syncwarp, a shuffle, a vote) when both are lanes of one warp. Otherwise the result
// depends on which runs first: on a GPU, on the timing; here, on the schedule. Each access is
// recorded with the number of barriers the block had completed before it and the number of warp
// operations its warp had completed; two accesses with the same barrier count, and (within one
// warp) the same warp-operation count, had nothing between them. This is a data race, and it is
// counted per block and word, the first one described with both threads and lines. Two atomics
// never race; a warp operation over part of a warp counts for all its lanes, so a race between a
// lane inside the mask and one outside it goes unseen.
void find_shared_races(CurrentLaunch& L) {
  std::unordered_map<uintptr_t, std::vector<uint32_t>> by_word;  // shared word -> its accesses in the trace
  for (uint32_t i = 0; i < L.trace.size(); ++i) {
    const Access& a = L.trace[i];
    if (!a.shared) continue;
    for (uintptr_t w = a.addr / 4; w <= (a.addr + a.size - 1) / 4; ++w) by_word[w].push_back(i);
  }
  auto unordered = [](const Access& a, const Access& b) {
    return a.thread != b.thread && a.epoch == b.epoch && !(a.atomic && b.atomic) &&
           (a.thread / 32 != b.thread / 32 || a.warp_epoch == b.warp_epoch);
  };
  uint32_t first_write = 0, first_other = 0;
  bool found = false;
  // A block's trace is in execution order, and no thread passes a barrier before every thread has
  // reached it, so each word's accesses come in runs of one barrier epoch: only a run's accesses
  // can race with each other.
  for (const auto& [word, ids] : by_word) {
    bool raced = false;
    for (size_t begin = 0, end = 0; begin < ids.size(); begin = end) {
      while (end < ids.size() && L.trace[ids[end]].epoch == L.trace[ids[begin]].epoch) ++end;
      for (size_t i = begin; i < end; ++i) {
        const uint32_t w = ids[i];
        if (!L.trace[w].write) continue;
        for (size_t j = begin; j < end; ++j) {
          const uint32_t o = ids[j];
          if (!unordered(L.trace[w], L.trace[o]) || (L.trace[o].write && o < w)) continue;
          raced = true;
          // The race completed first in this schedule is the one described.
          if (!found || std::max(w, o) < std::max(first_write, first_other)) first_write = w, first_other = o;
          found = true;
        }
      }
    }
    L.counts.shared_races += raced;
  }
  if (!found || !L.counts.first_shared_race.empty()) return;
  const dim3 bd = tls_exec.block_dim;
  const uint3 bi = tls_exec.block_idx;
  auto who = [&](const Access& a) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "thread (%u,%u,%u) %s %u bytes at ", a.thread % bd.x, a.thread / bd.x % bd.y,
                  a.thread / (bd.x * bd.y), a.write ? "writes" : "reads", a.size);
    return buf + source_line(reinterpret_cast<const void*>(a.pc));
  };
  const Access& w = L.trace[first_write];
  const uintptr_t base = w.addr >= L.dynamic_begin && w.addr < L.dynamic_end ? L.dynamic_begin : L.shared_begin;
  const bool dynamic = base == L.dynamic_begin;
  char head[160];
  std::snprintf(head, sizeof head, "block (%u,%u,%u), byte %llu of %s shared memory: ", bi.x, bi.y, bi.z,
                static_cast<unsigned long long>(w.addr - base), dynamic ? "dynamic" : "static");
  L.counts.first_shared_race = head + who(w) + " and " + who(L.trace[first_other]) +
                               ", with no __syncthreads or warp operation between them";
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
  L.epoch = 0;
  L.warp_epoch.clear();
}

void counters_block_end(unsigned threads) {
  CurrentLaunch& L = tls_launch;
  if (!L.active) return;
  KernelCounters& c = L.counts;
  c.blocks += 1;
  c.threads += threads;
  // Number each thread's executions of each instruction, then group the lanes of a warp.
  std::unordered_map<RequestKey, uint32_t, RequestKeyHash> seen;  // (thread, epoch, 0, pc) -> executions so far
  std::unordered_map<RequestKey, std::vector<const Access*>, RequestKeyHash> requests;
  std::vector<RequestKey> order;  // requests in first-seen order (deterministic counting)
  for (const Access& a : L.trace) {
    const uint32_t k = seen[RequestKey{a.thread, a.epoch, 0, a.pc}]++;
    const RequestKey key{a.thread / 32, a.epoch, k, a.pc};
    auto [it, inserted] = requests.try_emplace(key);
    if (inserted) order.push_back(key);
    it->second.push_back(&a);
  }
  for (const RequestKey& key : order) {
    const std::vector<const Access*>& lanes = requests[key];
    if (lanes.front()->shared) count_shared(lanes, c);
    else count_global(lanes, c);
  }
  find_shared_races(L);
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
  if (!tls_launch.active) return;
  tls_launch.counts.barriers += 1;
  tls_launch.epoch += 1;
}

void counters_on_warp_op(unsigned warp, unsigned lanes) {
  CurrentLaunch& L = tls_launch;
  if (!L.active) return;
  L.counts.warp_ops += 1;
  L.counts.warp_op_lanes += static_cast<unsigned>(__builtin_popcount(lanes));
  if (L.warp_epoch.size() <= warp) L.warp_epoch.resize(warp + 1, 0);
  L.warp_epoch[warp] += 1;
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

namespace {
void record_access(const void* p, size_t size, bool write, bool atomic, const void* pc) {
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
  const uint32_t warp_epoch = thread / 32 < L.warp_epoch.size() ? L.warp_epoch[thread / 32] : 0;
  L.trace.push_back(Access{thread, static_cast<uint32_t>(size), L.epoch, warp_epoch, reinterpret_cast<uintptr_t>(pc),
                           addr, write, atomic, shared});
}
}  // namespace

// ---- footprints (counters.h) ----
// One launch at a time is measured (launches run one after another on the launching thread);
// its flat blocks may run on several OS threads, hence the lock.
std::atomic<bool> g_footprint{false};
// A warp request of a footprint: (block, warp, instruction, k-th execution by each lane).
struct WarpRequest {
  uint64_t block;
  uint32_t warp, k;
  uintptr_t pc;
  bool operator==(const WarpRequest& o) const { return block == o.block && warp == o.warp && k == o.k && pc == o.pc; }
};
struct WarpRequestHash {
  size_t operator()(const WarpRequest& r) const {
    return std::hash<uintptr_t>()(r.pc) ^ (r.block * 0x9E3779B97F4A7C15ull) ^ (static_cast<size_t>(r.warp) << 32) ^
           (static_cast<size_t>(r.k) * 0xC2B2AE3D27D4EB4Full);
  }
};
struct RequestSectors {
  std::vector<uintptr_t> sectors;  // distinct
  uint64_t bytes = 0;              // what the lanes asked for
};
struct FootprintState {
  std::mutex mutex;
  bool in_launch = false;
  Footprint current;
  std::unordered_set<uintptr_t> read, written;
  // (block, thread, pc) -> executions so far; then the requests they form.
  std::unordered_map<WarpRequest, uint32_t, WarpRequestHash> executions;
  std::unordered_map<WarpRequest, RequestSectors, WarpRequestHash> requests;
  std::vector<Footprint> results;
};
FootprintState& footprint_state() {
  static FootprintState* s = new FootprintState;
  return *s;
}

void footprint_launch_begin(const LaunchRequest& r) {
  if (!g_footprint.load(std::memory_order_relaxed)) return;
  FootprintState& s = footprint_state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.in_launch = true;
  s.current = Footprint{};
  s.current.kernel = r.site.kernel;
  s.current.grid[0] = r.grid.x, s.current.grid[1] = r.grid.y, s.current.grid[2] = r.grid.z;
  s.current.block[0] = r.block.x, s.current.block[1] = r.block.y, s.current.block[2] = r.block.z;
  s.read.clear();
  s.written.clear();
  s.executions.clear();
  s.requests.clear();
}

void footprint_launch_end() {
  if (!g_footprint.load(std::memory_order_relaxed)) return;
  FootprintState& s = footprint_state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.in_launch) return;
  s.in_launch = false;
  s.current.read_sectors = s.read.size();
  s.current.written_sectors = s.written.size();
  for (const auto& [key, r] : s.requests) {
    s.current.requests += 1;
    s.current.request_sectors += r.sectors.size();
    s.current.ideal_sectors += (r.bytes + 31) / 32;
  }
  s.executions.clear();
  s.requests.clear();
  s.results.push_back(std::move(s.current));
}

namespace {
void footprint_access(const void* p, size_t size, bool write, const void* pc) {
  if (!g_footprint.load(std::memory_order_relaxed) || size == 0) return;
  if (tls_exec.mode != Mode::Fiber && tls_exec.mode != Mode::Flat) return;  // host code of the program
  Allocation a;
  if (!find_allocation(p, false, &a) || a.kind != MemoryKind::Device) return;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  const ExecContext& x = tls_exec;
  const uint64_t block = x.block_idx.x + uint64_t{x.grid_dim.x} * (x.block_idx.y + uint64_t{x.grid_dim.y} * x.block_idx.z);
  const uint32_t thread = x.thread_idx.x + x.block_dim.x * (x.thread_idx.y + x.block_dim.y * x.thread_idx.z);
  const auto at = reinterpret_cast<uintptr_t>(pc);
  FootprintState& s = footprint_state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.in_launch) return;
  const uint32_t k = s.executions[WarpRequest{block, thread, 0, at}]++;
  RequestSectors& r = s.requests[WarpRequest{block, thread / 32, k, at}];
  r.bytes += size;
  for (uintptr_t sector = addr / 32; sector <= (addr + size - 1) / 32; ++sector) {
    (write ? s.written : s.read).insert(sector);
    if (std::find(r.sectors.begin(), r.sectors.end(), sector) == r.sectors.end()) r.sectors.push_back(sector);
  }
}
}  // namespace

void counters_access(const void* p, size_t size, bool write, const void* pc) {
  footprint_access(p, size, write, pc);
  record_access(p, size, write, false, pc);
}

void counters_atomic_access(const void* p, size_t size, const void* pc) {
  footprint_access(p, size, true, pc);
  record_access(p, size, true, true, pc);
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

void footprint_start() {
  detail::FootprintState& s = detail::footprint_state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.results.clear();
  detail::g_footprint.store(true);
}

std::vector<Footprint> footprint_stop() {
  detail::FootprintState& s = detail::footprint_state();
  std::lock_guard<std::mutex> lock(s.mutex);
  detail::g_footprint.store(false);
  return std::move(s.results);
}

}  // namespace ember::simt
