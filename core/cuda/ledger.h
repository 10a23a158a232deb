#pragma once
// The launch ledger: every kernel launch and every cuBLAS, cuDNN, NCCL, copy and memset call that
// ember makes on a CUDA device, with what it costs, recorded while a Ledger is alive.
//
//   cuda::Ledger ledger;                       // or Ledger(LedgerMode::record_only)
//   model.forward(x).backward();
//   for (const cuda::LedgerEntry& e : ledger.stop()) ... e.op, e.kernel, e.cost.read ...
//
// `ember explain` and `ember train --explain GPU` turn the entries into a predicted step time
// (train/explain.h); docs/cuda.md shows a worked example.
//
// Note [Launch ledger]
// What an entry holds: the op (the innermost profiler scope open on the calling thread: the
// kernel call's name such as "batch_norm" or "add", or the autograd node's such as
// "ConvolutionBackward", see Note [Profiler] in core/profiler.h) and its phase (forward, backward,
// optimizer), the kernel expression as written at the launch, its family (the kernels/cuda file
// it was launched from), grid, block, dynamic shared memory, the stream, and a *declared cost*.
// The cost is computed by the launch site from its shapes, never measured: the bytes of device
// memory the launch reads and writes (each byte once, the footprint a perfect cache would see),
// and its floating-point operations (a multiply-add counts 2), marked when they run on tensor
// cores. EMBER_LAUNCH (kernels/cuda/launch.h) takes the cost as an argument, so a launch cannot
// be written without one; library calls declare theirs through ledger_call().
//
// Host syncs (a device-to-host copy the host waits for, cudaDeviceSynchronize) and device
// allocations that reach cudaMalloc are entries too, with no cost.
//
// Modes:
//   run          kernels run as usual; entries are recorded (the default).
//   record_only  nothing runs on the device: launches and library calls are recorded and skipped.
//                Copies and memsets still run (they are how the host sees device memory), so a
//                host read returns what the device memory holds — zeros or the memset value where
//                a kernel would have written — and its entry says it was answered unrun. A
//                full-size training step then walks in seconds on the emulator
//                (Note [Explaining a step] in train/explain.cpp).
//   timed        (a real GPU only) every launch and library call is bracketed by two CUDA events
//                on its stream; stop() waits for the device once and fills measured_us.
//
// Off, a launch site pays one relaxed atomic load and a branch; the cost expression is evaluated
// only when a ledger is on. One ledger at a time per process; entries from every host thread.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../profiler.h"

namespace ember::cuda {

// Which units a launch's flops run on (the peak the prediction divides them by).
enum class Math : uint8_t {
  cuda_core,    // scalar float arithmetic on CUDA cores (the FP32 peak)
  tensor_tf32,  // float products on tensor cores in TF32
  tensor_16,    // f16 / bf16 products on tensor cores, accumulating in float
  fp64,         // double precision
};
const char* math_name(Math m);

// What a launch costs, declared by its launch site (Note [Launch ledger]).
struct Cost {
  double read = 0;     // bytes of device memory read, each byte once
  double written = 0;  // bytes of device memory written, each byte once
  double flops = 0;    // floating-point operations (a multiply-add is 2)
  Math math = Math::cuda_core;
};
// A memory-bound launch: bytes read and written, and optionally its CUDA-core flops.
inline Cost cost(double read, double written, double flops = 0) { return Cost{read, written, flops, Math::cuda_core}; }
// A launch whose flops run on `math` (a GEMM or convolution in cuBLAS/cuDNN).
inline Cost math_cost(double read, double written, double flops, Math math) { return Cost{read, written, flops, math}; }

enum class CallKind : uint8_t { kernel, cublas, cudnn, nccl, copy, memset, host_sync, alloc };
const char* call_kind_name(CallKind k);

struct LedgerEntry {
  CallKind kind = CallKind::kernel;
  std::string op;      // innermost profiler scope ("add", "ConvolutionBackward", ...), or "-"
  profiler::Phase phase = profiler::Phase::none;
  std::string kernel;  // the kernel expression, or the library function ("cublasGemmEx")
  std::string family;  // kernels/cuda file stem ("batchnorm_channels_last"), or the library
  std::string shape;   // for convolutions and GEMMs: the problem's shape (the calibration key)
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  size_t shared_bytes = 0;
  uintptr_t stream = 0;  // the stream's handle as a number (0: the legacy default stream)
  Cost cost;
  bool skipped = false;      // record_only: not run
  bool stub_answer = false;  // a host read answered without running the kernels before it
  double measured_us = -1;   // timed: the launch's device time between its two events
  std::string note;          // why a host sync happened, what an allocation was for
};

enum class LedgerMode : uint8_t { off = 0, run, record_only, timed };

class Ledger {
 public:
  explicit Ledger(LedgerMode mode = LedgerMode::run);
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;
  // Stops recording and returns the entries in the order they were recorded (timed: after waiting
  // for the device, with measured_us filled). A second call returns nothing.
  std::vector<LedgerEntry> stop();
  LedgerMode mode() const { return mode_; }

 private:
  LedgerMode mode_;
  bool running_ = true;
};

namespace detail {
extern std::atomic<uint8_t> g_ledger_mode;
}
// The mode of the running ledger (off when none).
inline LedgerMode ledger_mode() { return static_cast<LedgerMode>(detail::g_ledger_mode.load(std::memory_order_relaxed)); }
inline bool ledger_on() { return ledger_mode() != LedgerMode::off; }
inline bool ledger_record_only() { return ledger_mode() == LedgerMode::record_only; }

// Called by EMBER_LAUNCH while a ledger is on: records the launch; returns whether to run it.
// `file` is the launch site's __FILE__ (its stem names the family).
bool ledger_launch(const char* kernel, const char* file, const unsigned grid[3], const unsigned block[3],
                   size_t shared_bytes, const void* stream, const Cost& cost);
// Called after a launch that ran while a ledger is on (timed: its end event).
void ledger_launched(const void* stream);

// A library call (cuBLAS, cuDNN, NCCL) or a copy/memset, recorded on the current stream before it
// is made; returns whether to make it (false in record_only for library calls). Call
// ledger_launched(stream) after it when it returned true.
bool ledger_call(CallKind kind, const char* function, const Cost& cost, const void* stream, std::string shape = {});
// What a library call declares: its cost, and for convolutions and GEMMs the problem's shape.
struct Declared {
  Cost cost;
  std::string shape;
  Declared(Cost c, std::string s = {}) : cost(c), shape(std::move(s)) {}  // NOLINT: a Cost is a Declared
};
// Makes the library call `call()` (cuBLAS, cuDNN, NCCL, a copy or memset) recorded in the running
// ledger with what `declare()` returns; `declare` is evaluated only while a ledger records, and a
// record_only ledger skips library calls (copies and memsets still run).
template <class Declare, class Call>
void recorded_call(CallKind kind, const char* function, const void* stream, Declare&& declare, Call&& call) {
  if (!ledger_on()) {
    call();
    return;
  }
  Declared d = declare();
  if (!ledger_call(kind, function, d.cost, stream, std::move(d.shape))) return;
  call();
  ledger_launched(stream);
}

// The host is about to wait for the device (`why`: what it reads). Under record_only the entry's
// stub_answer is set: the answer comes from memory that the skipped kernels did not write.
void ledger_host_sync(const char* why);
// A device allocation that reached the driver (cudaMalloc), `bytes` long.
void ledger_alloc(size_t bytes);

}  // namespace ember::cuda
