// The block scheduler: runs one block of an EMBER_LAUNCH kernel on fibers, and implements the
// scheduling points of sync.h (block barriers and warp intrinsics).
//
// Note [Block scheduling]
// A block's CUDA threads are started lazily, in EMBER_SIMT_SCHEDULE order, on a few persistent
// worker fibers (fiber.h). A worker runs its thread until the thread exits, then immediately
// claims the next unstarted thread on the same fiber: a kernel without barriers costs no context
// switch per thread. When a thread reaches a scheduling point (__syncthreads, a shuffle, ...) it
// records what it waits for and where, and switches straight to the next runnable fiber:
//   1. a thread released by a completed barrier / warp op (the `runnable` queue), else
//   2. a fresh worker for the next unstarted thread, else
//   3. the host thread's own context when every thread has exited (the block is done), else
//   4. nothing can run: a deadlock, reported with every thread's state and call site.
// The last thread to arrive at a barrier checks that every waiting thread is at the same call site
// and that none has exited, then moves all of them to `runnable` (itself included, so the next
// phase starts again in schedule order). A warp op completes when every live lane of its mask has
// arrived; the completing lane computes every participant's result with PTX's rules.
//
// All fiber blocks of the process run one at a time under `fiber_mutex`: static __shared__
// variables are process-wide statics (simt.h), so two blocks cannot run side by side.
//
// TSan (EMBER_SIMT_WITH_TSAN): every thread index has its own fiber (no back-to-back reuse, which
// would order two CUDA threads), and happens-before is added only where CUDA guarantees it:
// release/acquire on a barrier token per barrier generation, on a token per warp for warp ops, and
// block start/end tokens. This file is compiled without TSan instrumentation, so the scheduler's
// own bookkeeping is invisible to it.

#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "fiber.h"
#include "internal.h"
#include "warp_matrix.h"

#if EMBER_SIMT_WITH_TSAN
#include <sanitizer/tsan_interface.h>
#define EMBER_SIMT_TSAN_RELEASE(p) __tsan_release(p)
#define EMBER_SIMT_TSAN_ACQUIRE(p) __tsan_acquire(p)
#else
#define EMBER_SIMT_TSAN_RELEASE(p) ((void)(p))
#define EMBER_SIMT_TSAN_ACQUIRE(p) ((void)(p))
#endif

namespace ember::simt::detail {

namespace {

constexpr bool kFiberPerThreadIndex = EMBER_SIMT_WITH_TSAN;
constexpr size_t kDynamicSmemGuard = EMBER_SIMT_ASAN ? 0 : 64;  // ASan has real redzones
constexpr unsigned char kGuardByte = 0xA5;

enum class State : uint8_t { NotStarted, Running, Ready, AtBarrier, AtWarpOp, Exited };

struct CudaThread {
  State state = State::NotStarted;
  Fiber* fiber = nullptr;
  Site site{nullptr, 0};  // where it waits
  int barrier_result = 0;
  // a pending warp op: the arrival record, then the result
  WarpKind warp_kind = WarpKind::Sync;
  ShflMode shfl_mode = ShflMode::Idx;
  unsigned warp_mask = 0;
  int operand = 0, width = 32;
  uint64_t value = 0, result = 0;
  bool valid = true;
  // a pending warp collective (warp_matrix.h): its operation, name and this lane's data
  WarpCollectiveFn collective = nullptr;
  const char* collective_name = nullptr;
  void* collective_data = nullptr;
};

struct WarpGroup {
  unsigned mask;
  unsigned arrived;
};

struct Warp {
  unsigned exists = 0;  // lanes that belong to the block
  unsigned exited = 0;
  unsigned exited_at_sync = 0;    // `exited` as of the warp's last completed warp op or barrier
  std::vector<WarpGroup> groups;  // pending warp ops, one per distinct mask
};

void worker_body(Fiber* self);

struct Block {
  FiberPool pool{&worker_body};
  const LaunchRequest* launch = nullptr;
  unsigned n = 0;  // threads per block
  std::vector<CudaThread> threads;
  std::vector<Warp> warps;
  std::vector<unsigned> start_order;
  unsigned next_start = 0;
  std::vector<unsigned> runnable;
  size_t runnable_head = 0;
  unsigned exited = 0;
  unsigned current = 0;  // the CUDA thread running now
  // the block barrier being gathered
  std::vector<unsigned> waiting;
  Site barrier_site{nullptr, 0};
  BarrierKind barrier_kind = BarrierKind::Sync;
  int count = 0, all = 1, any = 0;
  uint64_t barrier_generation = 0;
  Rng rng{0};
  // TSan synchronization objects (only their addresses matter)
  char block_start_token = 0, block_end_token = 0, barrier_token[2] = {0, 0};
  std::vector<char> warp_tokens;

  uint3 thread_index(unsigned t) const {
    const dim3& d = tls_exec.block_dim;
    return uint3{t % d.x, (t / d.x) % d.y, t / (d.x * d.y)};
  }

  void make_runnable(unsigned t) {
    threads[t].state = State::Ready;
    runnable.push_back(t);
  }

  // Makes thread t the running one (its fiber is about to be resumed or started).
  void make_current(unsigned t) {
    current = t;
    threads[t].state = State::Running;
    tls_exec.thread_idx = thread_index(t);
  }

  Fiber* pick_next();
  void wait_here() { pool.switch_to(pick_next()); }
  void run_thread(unsigned t, Fiber* self);
  void on_exit(unsigned t);
  void complete_barrier();
  void try_complete_warp(unsigned w);
  void complete_warp_group(unsigned w, WarpGroup group);
  [[noreturn]] void deadlock();
};

std::mutex fiber_mutex;
thread_local std::unique_ptr<Block> tls_block_storage;
thread_local Block* tls_block = nullptr;

Block& this_thread_block() {
  if (!tls_block_storage) {
    tls_block_storage = std::make_unique<Block>();
    tls_block_storage->rng.state = config().seed * 0x2545F4914F6CDD1Dull + 1;
  }
  return *tls_block_storage;
}

Fiber* Block::pick_next() {
  if (runnable_head < runnable.size()) {
    if (config().schedule == Order::Random) {
      const size_t k = runnable_head + rng.below(static_cast<unsigned>(runnable.size() - runnable_head));
      std::swap(runnable[k], runnable[runnable_head]);
    }
    const unsigned t = runnable[runnable_head++];
    if (runnable_head == runnable.size()) {
      runnable.clear();
      runnable_head = 0;
    }
    make_current(t);
    return threads[t].fiber;
  }
  if (next_start < n) {
    const unsigned t = start_order[next_start++];
    Fiber* f = kFiberPerThreadIndex ? pool.by_index(t) : pool.acquire();
    f->assigned = t;
    return f;
  }
  if (exited == n) return pool.main();
  deadlock();
}

void Block::run_thread(unsigned t, Fiber* self) {
  threads[t].fiber = self;
  make_current(t);
  EMBER_SIMT_TSAN_ACQUIRE(&block_start_token);
  launch->run_thread(launch->call);
  EMBER_SIMT_TSAN_RELEASE(&block_end_token);
  on_exit(t);
}

// Every worker fiber runs this forever: CUDA threads back to back, then park.
void worker_body(Fiber* self) {
  for (;;) {
    Block& b = *tls_block;
    unsigned t = self->assigned;
    for (;;) {
      b.run_thread(t, self);
      if (kFiberPerThreadIndex || b.next_start == b.n) break;
      t = b.start_order[b.next_start++];
    }
    if (!kFiberPerThreadIndex) b.pool.release(self);
    b.wait_here();
  }
}

void Block::on_exit(unsigned t) {
  threads[t].state = State::Exited;
  ++exited;
  const unsigned w = t / 32;
  warps[w].exited |= 1u << (t % 32);
  if (!warps[w].groups.empty()) try_complete_warp(w);  // an exited lane no longer holds up a warp op
  if (!waiting.empty() && waiting.size() == n - exited) complete_barrier();
}

void Block::complete_barrier() {
  if (exited > 0 && !config().exit_at_barrier_allowed) {
    unsigned gone = 0;
    while (threads[gone].state != State::Exited) ++gone;
    fatal("%u of %u threads exited while %zu wait at __syncthreads (%s); e.g. thread %u exited, thread %u waits. "
          "A barrier that not every thread of the block reaches is undefined behaviour "
          "(EMBER_SIMT_EXIT_AT_BARRIER=allow emulates what current NVIDIA GPUs do)",
          exited, n, waiting.size(), site_string(barrier_site).c_str(), gone, waiting.front());
  }
  const int result = barrier_kind == BarrierKind::Count ? count
                     : barrier_kind == BarrierKind::And ? all
                     : barrier_kind == BarrierKind::Or  ? any
                                                        : 0;
  for (const unsigned t : waiting) {
    threads[t].barrier_result = result;
    make_runnable(t);
  }
  waiting.clear();
  ++barrier_generation;
  counters_on_barrier();
  for (Warp& w : warps) w.exited_at_sync = w.exited;
}

const char* warp_kind_name(WarpKind k) {
  switch (k) {
    case WarpKind::Shfl: return "warp shuffle";
    case WarpKind::Ballot: return "warp vote";
    case WarpKind::Sync: return "__syncwarp";
    case WarpKind::ReduceAdd: return "__reduce_add_sync";
  }
  return "warp op";
}

// The name of what a thread waits in: a warp collective's own name, else its kind's.
const char* warp_op_name(const CudaThread& t) {
  return t.collective ? t.collective_name : warp_kind_name(t.warp_kind);
}

void Block::try_complete_warp(unsigned w) {
  Warp& warp = warps[w];
  for (size_t i = 0; i < warp.groups.size();) {
    const WarpGroup g = warp.groups[i];
    const unsigned expected = g.mask & warp.exists & ~warp.exited;
    if ((g.arrived & expected) == expected) {
      warp.groups.erase(warp.groups.begin() + static_cast<long>(i));
      complete_warp_group(w, g);
    } else {
      ++i;
    }
  }
}

// PTX shfl.sync: the source lane of `lane` for mode/b/width, or -1 when it is out of the
// segment's range (then the lane reads its own value).
int shuffle_source(unsigned lane, ShflMode mode, int b, int width) {
  const unsigned segmask = static_cast<unsigned>(32 - width) & 0x1f;  // c[12:8]
  const unsigned cval = mode == ShflMode::Up ? 0u : 0x1fu;          // c[4:0]
  const int max_lane = static_cast<int>((lane & segmask) | (cval & ~segmask));
  const int min_lane = static_cast<int>(lane & segmask);
  const int bval = b & 0x1f;
  int j = 0;
  bool in_range = false;
  switch (mode) {
    case ShflMode::Up: j = static_cast<int>(lane) - bval; in_range = j >= max_lane; break;
    case ShflMode::Down: j = static_cast<int>(lane) + bval; in_range = j <= max_lane; break;
    case ShflMode::Xor: j = static_cast<int>(lane) ^ bval; in_range = j <= max_lane; break;
    case ShflMode::Idx: j = min_lane | (bval & static_cast<int>(~segmask & 0x1f)); in_range = j <= max_lane; break;
  }
  return in_range ? j : static_cast<int>(lane);
}

void Block::complete_warp_group(unsigned w, WarpGroup g) {
  const unsigned base = w * 32;
  warps[w].exited_at_sync = warps[w].exited;
  const unsigned first = static_cast<unsigned>(__builtin_ctz(g.arrived));
  const CudaThread& f = threads[base + first];
  counters_on_warp_op(w, g.arrived);
  uint32_t ballot = 0, sum = 0;
  for (unsigned l = first; l < 32; ++l) {
    if (!((g.arrived >> l) & 1)) continue;
    const CudaThread& r = threads[base + l];
    if (r.warp_kind != f.warp_kind || r.collective != f.collective || !same_site(r.site, f.site))
      fatal("divergent warp intrinsic in warp %u (mask 0x%08x): lane %u at %s (%s), lane %u at %s (%s)", w, g.mask,
            first, warp_op_name(f), site_string(f.site).c_str(), l, warp_op_name(r), site_string(r.site).c_str());
    ballot |= static_cast<uint32_t>(r.value & 1) << l;
    sum += static_cast<uint32_t>(r.value);
  }
  if (f.collective) {
    // Note [Warp collectives] in warp_matrix.h: every lane of the warp, then one call for all.
    if (g.arrived != 0xffffffffu)
      fatal("%s at %s: lanes 0x%08x of warp %u arrived, the others have exited or do not exist; a warp matrix "
            "operation needs all 32 lanes of the warp",
            f.collective_name, site_string(f.site).c_str(), g.arrived, w);
    void* lanes[32];
    for (unsigned l = 0; l < 32; ++l) lanes[l] = threads[base + l].collective_data;
    f.collective(lanes);
    for (unsigned l = 0; l < 32; ++l) threads[base + l].collective = nullptr;
  }
  for (unsigned l = first; l < 32; ++l) {
    if (!((g.arrived >> l) & 1)) continue;
    CudaThread& r = threads[base + l];
    r.valid = true;
    switch (r.warp_kind) {
      case WarpKind::Shfl: {
        const int j = shuffle_source(l, r.shfl_mode, r.operand, r.width);
        if ((g.arrived >> j) & 1) r.result = threads[base + static_cast<unsigned>(j)].value;
        else r.valid = false;  // the source lane did not take part: CUDA leaves the value undefined
        break;
      }
      case WarpKind::Ballot: r.result = ballot | (static_cast<uint64_t>(g.arrived) << 32); break;
      case WarpKind::ReduceAdd: r.result = sum; break;
      case WarpKind::Sync: break;
    }
    make_runnable(base + l);
  }
}

void Block::deadlock() {
  auto describe = [&](unsigned t) {
    const CudaThread& r = threads[t];
    switch (r.state) {
      case State::NotStarted: return std::string("not started");
      case State::Running: return std::string("running");
      case State::Ready: return std::string("ready");
      case State::Exited: return std::string("exited");
      case State::AtBarrier: return "waits at __syncthreads " + site_string(r.site);
      case State::AtWarpOp: {
        char mask[32];
        std::snprintf(mask, sizeof mask, " mask=0x%08x", r.warp_mask);
        return std::string("waits at ") + warp_op_name(r) + " " + site_string(r.site) + mask;
      }
    }
    return std::string("?");
  };
  // One line per run of consecutive threads in the same state at the same place.
  std::string detail, summary;
  int shown_in_summary = 0;
  for (unsigned t = 0; t < n;) {
    const std::string what = describe(t);
    unsigned u = t + 1;
    while (u < n && describe(u) == what) ++u;
    char head[96];
    if (u - t == 1) std::snprintf(head, sizeof head, "[simt]   thread %u (warp %u lane %u): ", t, t / 32, t % 32);
    else std::snprintf(head, sizeof head, "[simt]   threads %u-%u (warps %u-%u): ", t, u - 1, t / 32, (u - 1) / 32);
    detail += head + what + "\n";
    const State s = threads[t].state;
    if ((s == State::AtBarrier || s == State::AtWarpOp) && shown_in_summary < 2) {
      summary += (shown_in_summary++ ? "; " : "") + ("thread " + std::to_string(t) + " " + what);
    }
    t = u;
  }
  fatal_with_detail(detail, "deadlock: no thread can run (%s)", summary.c_str());
}

}  // namespace

// ---- the scheduling points of sync.h ------------------------------------------------------------

int block_barrier(BarrierKind kind, int predicate, Site site) {
  Block& b = *tls_block;
  const unsigned t = b.current;
  CudaThread& me = b.threads[t];
  if (b.waiting.empty()) {
    b.barrier_site = site;
    b.barrier_kind = kind;
    b.count = 0;
    b.all = 1;
    b.any = 0;
  } else if (!same_site(site, b.barrier_site) || kind != b.barrier_kind) {
    fatal("divergent __syncthreads: thread %u waits at %s but thread %u arrived at %s", b.waiting.front(),
          site_string(b.barrier_site).c_str(), t, site_string(site).c_str());
  }
  b.count += predicate;
  b.all &= predicate;
  b.any |= predicate;
  me.state = State::AtBarrier;
  me.site = site;
  b.waiting.push_back(t);
  char* token = &b.barrier_token[b.barrier_generation & 1];
  EMBER_SIMT_TSAN_RELEASE(token);
  if (b.waiting.size() == b.n - b.exited) b.complete_barrier();
  b.wait_here();
  EMBER_SIMT_TSAN_ACQUIRE(token);
  return me.barrier_result;
}

WarpResult warp_op(WarpKind kind, unsigned mask, ShflMode mode, int operand, int width, uint64_t value, Site site) {
  Block& b = *tls_block;
  const unsigned t = b.current, lane = t % 32, w = t / 32, bit = 1u << lane;
  if (!(mask & bit))
    fatal("%s at %s: the calling lane %u (thread %u) is not in its mask 0x%08x", warp_kind_name(kind),
          site_string(site).c_str(), lane, t, mask);
  if (kind == WarpKind::Shfl && (width <= 0 || width > 32 || (width & (width - 1)) != 0))
    fatal("warp shuffle at %s: width %d is not a power of two between 1 and 32", site_string(site).c_str(), width);
  CudaThread& me = b.threads[t];
  me.warp_kind = kind;
  me.shfl_mode = mode;
  me.warp_mask = mask;
  me.operand = operand;
  me.width = width;
  me.value = value;
  me.site = site;
  me.state = State::AtWarpOp;
  Warp& warp = b.warps[w];
  size_t g = 0;
  for (; g < warp.groups.size(); ++g) {
    if (warp.groups[g].mask == mask) break;
    if (warp.groups[g].mask & mask) {
      const unsigned other = static_cast<unsigned>(__builtin_ctz(warp.groups[g].arrived));
      fatal("warp %u: lanes wait in warp ops with overlapping but different masks: lane %u at %s with mask 0x%08x, "
            "lane %u at %s with mask 0x%08x",
            w, other, site_string(b.threads[w * 32 + other].site).c_str(), warp.groups[g].mask, lane,
            site_string(site).c_str(), mask);
    }
  }
  if (g == warp.groups.size()) warp.groups.push_back(WarpGroup{mask, 0});
  warp.groups[g].arrived |= bit;
  EMBER_SIMT_TSAN_RELEASE(&b.warp_tokens[w]);
  b.try_complete_warp(w);
  b.wait_here();
  EMBER_SIMT_TSAN_ACQUIRE(&b.warp_tokens[w]);
  return WarpResult{me.result, me.valid};
}

void warp_collective(const char* name, WarpCollectiveFn fn, void* lane_data, Site site) {
  require_fiber(name, site);
  CudaThread& me = tls_block->threads[tls_block->current];
  me.collective = fn;
  me.collective_name = name;
  me.collective_data = lane_data;
  warp_op(WarpKind::Sync, 0xffffffffu, ShflMode::Idx, 0, 32, 0, site);
}

void fatal_warp_matrix(const char* name, Site site, const char* problem) {
  fatal("%s at %s: %s", name, site_string(site).c_str(), problem);
}

// Threads run one after another, so "the lanes executing this together" does not exist here.
// The answer: the warp's lanes that were alive at its last synchronization (warp op or barrier),
// which in converged code is what a GPU reports, independent of which lanes ran first since.
unsigned active_mask(Site) {
  const Block& b = *tls_block;
  const Warp& w = b.warps[b.current / 32];
  return w.exists & ~w.exited_at_sync;
}

bool current_fiber_thread(unsigned* thread) {
  if (tls_block == nullptr || tls_exec.mode != Mode::Fiber) return false;
  *thread = tls_block->current;
  return true;
}

unsigned char* dynamic_shared_memory(const char* file, unsigned line) {
  const Mode m = tls_exec.mode;
  if (m == Mode::Fiber) return tls_exec.dynamic_smem;
  if (m == Mode::Flat) fatal_in_flat_kernel("EMBER_DYNAMIC_SHARED", Site{file, line});
  fatal_outside_kernel("EMBER_DYNAMIC_SHARED", Site{file, line});
}

// ---- running a fiber grid ---------------------------------------------------------------------

void run_fiber_grid(const LaunchRequest& r, const unsigned* block_order, unsigned nblocks) {
  Block& b = this_thread_block();
  const Config& cfg = config();
  const unsigned n = r.block.x * r.block.y * r.block.z;
  b.launch = &r;
  b.n = n;
  b.threads.assign(n, CudaThread{});
  b.warps.assign((n + 31) / 32, Warp{});
  for (unsigned w = 0; w < b.warps.size(); ++w) {
    const unsigned lanes = std::min(32u, n - w * 32);
    b.warps[w].exists = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
  }
  b.warp_tokens.assign(b.warps.size(), 0);
  // Allocate on the host thread what the fibers would otherwise allocate: TSan intercepts
  // malloc/free even in uninstrumented code, and would see a fiber's allocation freed later by
  // another fiber as a race in the emulator.
  for (Warp& w : b.warps) w.groups.reserve(4);
  if (kFiberPerThreadIndex) b.pool.by_index(n - 1);
  b.start_order.resize(n);
  make_order(b.start_order.data(), n, cfg.schedule, b.rng);
  b.runnable.reserve(n);
  b.waiting.reserve(n);

  const size_t smem = r.dynamic_smem;
  std::unique_ptr<unsigned char[]> dynamic(new unsigned char[smem + kDynamicSmemGuard]);
  const size_t section = r.shared.end > r.shared.begin ? static_cast<size_t>(r.shared.end - r.shared.begin) : 0;

  ExecContext& ctx = tls_exec;
  const ExecContext saved = ctx;
  counters_launch_begin(r);
  for (unsigned k = 0; k < nblocks; ++k) {
    std::lock_guard<std::mutex> lock(fiber_mutex);
    const unsigned lin = block_order ? block_order[k] : k;
    ctx = ExecContext{{0, 0, 0},
                      {lin % r.grid.x, (lin / r.grid.x) % r.grid.y, lin / (r.grid.x * r.grid.y)},
                      r.block,
                      r.grid,
                      Mode::Fiber,
                      dynamic.get(),
                      r.site.kernel};
    if (cfg.poison) {
      if (section) std::memset(r.shared.begin, 0xFF, section);
      std::memset(dynamic.get(), 0xFF, smem);
    }
    std::memset(dynamic.get() + smem, kGuardByte, kDynamicSmemGuard);
    for (CudaThread& th : b.threads) th.state = State::NotStarted;
    for (Warp& w : b.warps) {
      w.exited = 0;
      w.exited_at_sync = 0;
      w.groups.clear();
    }
    b.runnable.clear();
    b.runnable_head = 0;
    b.waiting.clear();
    b.exited = 0;
    b.next_start = 0;
    if (cfg.schedule == Order::Random && k > 0) make_order(b.start_order.data(), n, cfg.schedule, b.rng);

    counters_block_begin(dynamic.get(), smem);
    tls_block = &b;
    EMBER_SIMT_TSAN_RELEASE(&b.block_start_token);
    b.wait_here();  // returns when every thread of the block has exited
    EMBER_SIMT_TSAN_ACQUIRE(&b.block_end_token);
    tls_block = nullptr;
    counters_block_end(n);

    for (size_t i = 0; i < kDynamicSmemGuard; ++i)
      if (dynamic[smem + i] != kGuardByte)
        fatal("write past the end of dynamic shared memory: guard byte %zu after the %zu-byte buffer was overwritten "
              "(launched at %s:%u; run the ASan build to find the writing line)",
              i, smem, r.site.file, r.site.line);
  }
  counters_launch_end();
  ctx = saved;
  b.launch = nullptr;
}

}  // namespace ember::simt::detail
