#pragma once
// Where the time goes: a profiler that records every op's wall time, forward and backward.
//
//   profiler::Profiler prof;          // starts recording (one profiler at a time)
//   train_some_steps();
//   prof.stop();
//   std::printf("%s", prof.table().c_str());   // op, phase, calls, total/self ms, % of time, GFLOP/s
//   io::write_file_atomic("trace.json", prof.trace_json());   // chrome://tracing, ui.perfetto.dev
//
// `ember train --profile` and `--profile-trace FILE` use it (docs/training.md).
//
// Note [Profiler]
// What is recorded: a Scope is a named interval on one thread. Every kernel call made through
// EMBER_KERNEL_CALL (core/dispatch.h) opens one named after the op ("add", "sum", "conv2d", ...),
// every autograd node that runs opens one named after the node ("ConvolutionBackward", ...), and
// the trainer opens "step", "data", "forward", "backward" and "optimizer" around the parts of a
// training step. Scopes nest: a scope's self time is its time minus its children's, so the table
// sums to the wall time without counting anything twice. The phase of a scope (forward, backward,
// optimizer, ...) is the nearest enclosing phase scope's, and "backward" inside the autograd
// engine.
//
// Cost: off, a Scope is one relaxed atomic load and a branch (bench/bench_dispatch.cpp measures
// the op dispatch with it). On, two steady_clock reads and a push into a per-thread buffer; names
// are interned once, so an op's name need not outlive its scope.
//
// On a CUDA device kernels run asynchronously: with the profiler on, EMBER_CUDA_CALL waits for the
// device after each op, so an op's scope closes when its kernels have finished and its time is the
// device time of those kernels (what a pair of CUDA events around it would give on one stream).
// The price is the host/device overlap of an unprofiled run: profiled steps are slower on a GPU,
// and the table says which ops dominate, not how fast the overlapped step is. (On the SIMT
// emulator kernels run at their launch, so nothing changes there.)

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace ember::profiler {

namespace detail {
extern std::atomic<bool> g_enabled;
extern std::atomic<bool> g_scopes_open;  // a Profiler records, or scope tracking is on
}

// Whether a Profiler is recording.
inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }

enum class Phase : uint8_t { none, step, data, forward, backward, optimizer, eval };
const char* phase_name(Phase p);

// A named interval on this thread, recorded when a Profiler is on (see Note [Profiler]).
// `flops`: the floating-point operations the op performs (for the GFLOP/s column), or 0.
class Scope {
 public:
  explicit Scope(const char* name, double flops = 0) {
    if (detail::g_scopes_open.load(std::memory_order_relaxed)) begin(name, flops, Phase::none);
  }
  Scope(const std::string& name, double flops = 0) : Scope(name.c_str(), flops) {}
  // A phase scope: everything inside it belongs to `phase` (the trainer's step parts).
  Scope(const char* name, Phase phase) {
    if (detail::g_scopes_open.load(std::memory_order_relaxed)) begin(name, 0, phase);
  }
  ~Scope() {
    if (open_ || tracked_) end();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  void begin(const char* name, double flops, Phase phase);
  void end();
  bool open_ = false;     // recorded by a Profiler
  bool tracked_ = false;  // on this thread's scope stack (scope tracking)
  int64_t index_ = 0;  // this scope's event in the thread's buffer
};

// Scope tracking: while on, every Scope on every thread also keeps its name and phase on a stack
// of its thread, which current_scope() reads. The launch ledger (core/cuda/ledger.h) turns it on
// to name the op each launch belongs to; a Profiler need not be recording. Counted: tracking
// stays on until as many track_scopes(false) as track_scopes(true).
void track_scopes(bool on);
struct ScopeContext {
  std::string op;  // the innermost open scope's name, "-" when none is open
  Phase phase = Phase::none;  // the nearest enclosing phase ("backward" inside the autograd engine)
};
ScopeContext current_scope();

// Called by EMBER_CUDA_CALL after an op's kernels were launched: with the profiler on, waits for
// the current CUDA device (Note [Profiler]); off, does nothing.
void wait_for_device_if_profiling();

struct OpStats {
  std::string name;
  Phase phase = Phase::none;
  int64_t calls = 0;
  double total_ms = 0;  // inclusive
  double self_ms = 0;   // minus the children's time
  double flops = 0;
};

struct Event {
  const char* name = nullptr;  // interned
  Phase phase = Phase::none;
  int depth = 0;  // nesting depth on its thread (0: outermost)
  int thread = 0;
  int64_t start_ns = 0, end_ns = 0;  // since the profiler started
  double flops = 0;
};

class Profiler {
 public:
  Profiler();  // starts recording; throws ember::Error when another Profiler is recording
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  void stop();  // stops recording and collects every thread's events (idempotent)
  const std::vector<Event>& events() const { return events_; }
  double wall_ms() const { return wall_ms_; }
  // Per (name, phase), by self time, largest first.
  std::vector<OpStats> stats() const;
  // The table printed by `ember train --profile`: op, phase, calls, total ms, self ms, % of the
  // profiled wall time (self), GFLOP/s where the op counts its FLOPs. At most `rows` ops (the
  // rest summed in one "(other ops)" line); rows < 0: every op.
  std::string table(int rows = 40) const;
  // A Chrome trace (the traceEvents JSON that chrome://tracing and ui.perfetto.dev open): one
  // complete ("X") event per scope, µs, with its phase as the category. Files are written by the
  // caller (`ember train --profile-trace` uses io::write_file_atomic, io/atomic_file.h).
  std::string trace_json() const;

 private:
  bool running_ = false;
  double wall_ms_ = 0;
  std::vector<Event> events_;
};

}  // namespace ember::profiler
