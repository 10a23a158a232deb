#pragma once
// Shared declarations of the emulator's implementation files (kernels/simt/*.cpp). Not a kernel
// header: .cu files see simt.h only.
//
//   config.cpp       EMBER_SIMT_* environment settings, read once
//   diagnostics.cpp  "[simt] ERROR: ..." reports, then abort()
//   fiber.cpp        persistent worker fibers (boost.context), stacks, sanitizer annotations
//   block.cpp        the block scheduler: barriers, warp ops, deadlock detection
//   grid.cpp         launch validation, fiber grids, flat grids on a thread pool
//   memory.cpp       devices, device/pinned memory registries, copies, memsets, errors
//   streams.cpp      streams, events, deferred execution (EMBER_SIMT_DEFER=1)
//   graphs.cpp       stream capture, graphs, graph launches
//   counters.cpp     hardware counters for the kernel labs (counters.h); access_hooks.cpp: the
//                    instrumentation entry points that feed them loads and stores
//   nccl_shim.cpp    NCCL for ranks that are threads of this process (nccl_reduce.cpp: its
//                    arithmetic); cublas_shim.cpp: the cuBLAS calls ember makes;
//                    cudnn_shim.cpp: the cuDNN calls (only when <cudnn.h> is found)

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "simt.h"

// Set by CMake for EMBER_SANITIZE=thread builds, whose kernels/simt/*.cpp are compiled without
// TSan instrumentation and annotate fibers and CUDA's synchronization instead.
#ifndef EMBER_SIMT_WITH_TSAN
#define EMBER_SIMT_WITH_TSAN 0
#endif

namespace ember::simt::detail {
struct Capture;  // graphs.cpp
}

// The emulator's own stream and event objects; cudaStream_t / cudaEvent_t point to them.
struct CUstream_st {
  int device = 0;
  unsigned flags = cudaStreamDefault;
  int priority = 0;
  bool legacy = false;      // the device's legacy default stream (handle 0 / cudaStreamLegacy)
  bool per_thread = false;  // a host thread's cudaStreamPerThread
  std::deque<std::function<void()>> queue;  // EMBER_SIMT_DEFER=1 only
  // The capture this stream is recording into (Note [Stream capture in the emulator]), or null.
  std::shared_ptr<ember::simt::detail::Capture> capture;
};
struct CUevent_st;

namespace ember::simt::detail {

// ---- configuration (config.cpp) ---------------------------------------------------------------
enum class Order : uint8_t { Forward, Reverse, Random };

struct Config {
  // EMBER_SIMT_PERTURB=<seed> sets both orders to random and the seed at once.
  Order schedule = Order::Forward;     // EMBER_SIMT_SCHEDULE: order of ready threads in a block
  Order block_order = Order::Forward;  // EMBER_SIMT_BLOCK_ORDER
  uint64_t seed = 12345;               // EMBER_SIMT_SEED
  bool poison = true;                  // EMBER_SIMT_POISON=0 turns 0xFF poisoning off
  bool exit_at_barrier_allowed = false;  // EMBER_SIMT_EXIT_AT_BARRIER=allow
  bool defer = false;                  // EMBER_SIMT_DEFER=1
  size_t stack_bytes = 64 * 1024;      // EMBER_SIMT_STACK_KB
  int devices = 2;                     // EMBER_SIMT_DEVICES
  size_t device_memory = size_t{16} << 30;  // EMBER_SIMT_DEVICE_MEMORY (bytes per device)
  int flat_threads = 0;                // EMBER_SIMT_FLAT_THREADS (0: hardware_concurrency)
};
const Config& config();
const char* order_name(Order o);

// A small deterministic generator for the random orders (splitmix64).
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  unsigned below(unsigned n) { return static_cast<unsigned>(next() % n); }
};
// Fills `order` with 0..n-1 in the given order (a fresh shuffle each call for Random).
void make_order(unsigned* order, unsigned n, Order how, Rng& rng);

// ---- diagnostics (diagnostics.cpp) ------------------------------------------------------------
// Prints "[simt] ERROR: <message> in kernel K block (x,y,z)" (the kernel part when a kernel is
// running on this OS thread), then the optional detail lines, and aborts.
[[noreturn]] void fatal(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] void fatal_with_detail(const std::string& detail, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
void warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string site_string(Site s);
bool same_site(Site a, Site b);

// ---- errors (memory.cpp) ----------------------------------------------------------------------
// Records `e` as this host thread's last error (cudaGetLastError) and returns it.
cudaError_t fail(cudaError_t e);

// ---- devices and memory (memory.cpp) ------------------------------------------------------------
int current_device();
enum class MemoryKind : uint8_t { Device, Pinned };
struct Allocation {
  uintptr_t base = 0;
  size_t size = 0;
  int device = -1;
  MemoryKind kind = MemoryKind::Device;
};
// The allocation containing p (p == base + size counts when one_past_end). False if none.
bool find_allocation(const void* p, bool one_past_end, Allocation* out);
// The allocation that ends at most `slack` bytes before p (p lies just past its end). False if none.
bool find_allocation_ending_before(const void* p, size_t slack, Allocation* out);

// ---- streams (streams.cpp) ----------------------------------------------------------------------
// The stream object behind a handle (0, cudaStreamLegacy, cudaStreamPerThread or a created one),
// or null (and *err set) for a handle that is not a live stream.
CUstream_st* resolve_stream(cudaStream_t s, cudaError_t* err);
int stream_device(const CUstream_st* s);
// Runs `work` now, or queues it on `s` when EMBER_SIMT_DEFER=1, or, when `s` is capturing,
// records it as a node of type `type` of the capture's graph. Returns cudaSuccess or the capture
// error CUDA returns for the call (then `work` neither ran nor was recorded).
cudaError_t enqueue(CUstream_st* s, cudaGraphNodeType type, std::function<void()> work);
// Runs every queued operation of `device` (all devices when device < 0).
void drain_device(int device);

// ---- stream capture (graphs.cpp; Note [Stream capture in the emulator]) ------------------------
// Whether some stream is capturing: kernel launches then keep their arguments alive (a node runs
// at every replay, long after the launch returned).
bool capture_active();
// Appends `work` to the graph that `s` (a capturing stream) records into.
cudaError_t capture_node(CUstream_st* s, cudaGraphNodeType type, std::function<void()> work);
// Ends s's capture as failed (cudaStreamEndCapture then returns cudaErrorStreamCaptureInvalidated).
void invalidate_capture(CUstream_st* s);
// For a call CUDA calls "potentially unsafe" during capture (cudaMalloc, cudaFree, pinned host
// allocations, synchronizing or querying a stream that does not capture, or an event): cudaErrorStreamCaptureUnsupported when
// the calling thread's capture mode forbids it (those captures are invalidated), else cudaSuccess.
cudaError_t check_unsafe_call();
// Waiting for the whole device waits for its capturing streams too, whatever the capture modes:
// invalidates every capture of `device` and returns cudaErrorStreamCaptureUnsupported;
// cudaSuccess when none captures.
cudaError_t check_device_wait(int device);
// Work on the legacy default stream of `device` waits for every blocking stream: while one of them
// is capturing that is an implicit dependency capture cannot express. Invalidates those captures
// and returns cudaErrorStreamCaptureImplicit; cudaSuccess when none is capturing.
cudaError_t check_legacy_use(int device);

// ---- grid execution (grid.cpp, block.cpp) -------------------------------------------------------
// Runs a validated launch: every block, in EMBER_SIMT_BLOCK_ORDER.
void run_grid(const LaunchRequest& r);
// Runs the blocks of a fiber launch on this OS thread, one at a time (block.cpp). block_order:
// the blocks' linear indices in the order to run them, or null for forward order.
void run_fiber_grid(const LaunchRequest& r, const unsigned* block_order, unsigned nblocks);
// The CUDA thread (linear index in its block) running on this OS thread inside a fiber block.
bool current_fiber_thread(unsigned* thread);

// ---- counters (counters.cpp; Note [Seeing every load and store]) ------------------------------
// Called by run_fiber_grid around a launch and each block, by the scheduler when a barrier or a
// warp op completes, and by the access hooks; each does nothing unless counting is on.
void counters_launch_begin(const LaunchRequest& r);
void counters_block_begin(const unsigned char* dynamic_smem, size_t bytes);
void counters_block_end(unsigned threads);
void counters_launch_end();
void counters_on_barrier();
void counters_on_warp_op(unsigned warp, unsigned lanes);
void counters_access(const void* p, size_t size, bool write, const void* pc);
// An atomic read-modify-write: counted as a store, and never a race with another atomic.
void counters_atomic_access(const void* p, size_t size, const void* pc);
// Called by run_grid around every launch (footprint_start in counters.h).
void footprint_launch_begin(const LaunchRequest& r);
void footprint_launch_end();
// Set when the access hooks are linked into the program (kernels/simt/lab_support/access_hooks.cpp).
extern std::atomic<bool> g_memory_hooks_linked;

// The dynamic shared-memory size limit of a kernel (48 KiB unless raised by cudaFuncSetAttribute).
size_t max_dynamic_smem(const void* func);

}  // namespace ember::simt::detail
