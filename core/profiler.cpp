// The profiler (Note [Profiler] in profiler.h): per-thread event buffers, interned names, self
// times from the nesting, the table and the Chrome trace.

#include "profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "autograd.h"
#include "error.h"
#if EMBER_CUDA_BACKEND
#include "cuda/runtime.h"
#endif

namespace ember::profiler {

namespace detail {
std::atomic<bool> g_enabled{false};
std::atomic<bool> g_scopes_open{false};
}

namespace {

using Clock = std::chrono::steady_clock;

struct ThreadBuffer;

// What every thread's buffer shares: the running profile's generation and start time, the
// buffers alive, the events of threads that ended while it ran, and the interned names.
struct Registry {
  std::mutex mutex;
  uint64_t generation = 0;  // bumped by every Profiler start
  Clock::time_point start;
  int next_thread = 0;
  std::vector<ThreadBuffer*> buffers;
  std::vector<Event> retired;  // events of threads that exited during this generation
  std::unordered_set<std::string> names;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: threads may outlive static destruction
  return *r;
}

struct ThreadBuffer {
  uint64_t generation = 0;
  int thread = 0;
  std::vector<Event> events;
  Clock::time_point start;     // the generation's start
  std::vector<std::pair<int64_t, bool>> open;  // the open scopes (event index, sets a phase), innermost last
  std::vector<Phase> phases;   // the enclosing phase scopes' phases

  ThreadBuffer() {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    thread = r.next_thread++;
    r.buffers.push_back(this);
  }
  ~ThreadBuffer() {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.buffers.erase(std::remove(r.buffers.begin(), r.buffers.end(), this), r.buffers.end());
    if (generation == r.generation && detail::g_enabled.load())
      r.retired.insert(r.retired.end(), events.begin(), events.end());
  }
  // The buffer for the running generation (a new profile starts empty).
  void sync(uint64_t g, Clock::time_point t0) {
    if (generation == g) return;
    generation = g;
    start = t0;
    events.clear();
    open.clear();
    phases.clear();
  }
};

ThreadBuffer& buffer() {
  thread_local ThreadBuffer b;
  return b;
}

// Scope tracking (track_scopes): how many asked for it, and each thread's stack of open scopes.
std::atomic<int> g_tracking{0};
struct TrackedScope {
  std::string name;
  Phase phase;  // Phase::none unless the scope is a phase scope
};
std::vector<TrackedScope>& tracked_stack() {
  thread_local std::vector<TrackedScope> stack;
  return stack;
}
void update_scopes_open() {
  detail::g_scopes_open.store(detail::g_enabled.load() || g_tracking.load() > 0);
}

int64_t now_ns(const Registry& r) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - r.start).count();
}

// The running profile (generation and start) and the interned name, under one lock.
struct Begin {
  uint64_t generation;
  Clock::time_point start;
  const char* name;
};
Begin begin_under_lock(const char* name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return {r.generation, r.start, r.names.insert(name ? name : "?").first->c_str()};
}

std::string format_ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ms >= 100 ? "%.0f" : ms >= 10 ? "%.1f" : "%.2f", ms);
  return buf;
}

}  // namespace

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::none: return "-";
    case Phase::step: return "step";
    case Phase::data: return "data";
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::optimizer: return "optimizer";
    case Phase::eval: return "eval";
  }
  return "?";
}

void Scope::begin(const char* name, double flops, Phase phase) {
  if (g_tracking.load(std::memory_order_relaxed) > 0) {
    tracked_stack().push_back({name ? name : "?", phase});
    tracked_ = true;
  }
  if (!enabled()) return;
  const Begin g = begin_under_lock(name);
  ThreadBuffer& b = buffer();
  b.sync(g.generation, g.start);
  Event e;
  e.name = g.name;
  e.phase = phase != Phase::none ? phase : in_backward() ? Phase::backward : b.phases.empty() ? Phase::none : b.phases.back();
  e.depth = static_cast<int>(b.open.size());
  e.thread = b.thread;
  e.flops = flops;
  e.start_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - g.start).count();
  index_ = static_cast<int64_t>(b.events.size());
  b.events.push_back(e);
  b.open.emplace_back(index_, phase != Phase::none);
  if (phase != Phase::none) b.phases.push_back(phase);
  open_ = true;
}

void Scope::end() {
  if (tracked_) {
    tracked_ = false;
    if (!tracked_stack().empty()) tracked_stack().pop_back();
  }
  if (!open_) return;
  ThreadBuffer& b = buffer();
  open_ = false;
  // A profile started or stopped since begin(): the event is not this profile's.
  if (b.open.empty() || b.open.back().first != index_) return;
  b.events[static_cast<size_t>(index_)].end_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - b.start).count();
  if (b.open.back().second) b.phases.pop_back();
  b.open.pop_back();
}

void track_scopes(bool on) {
  g_tracking.fetch_add(on ? 1 : -1);
  update_scopes_open();
}

ScopeContext current_scope() {
  ScopeContext c;
  const std::vector<TrackedScope>& stack = tracked_stack();
  c.op = stack.empty() ? "-" : stack.back().name;
  if (in_backward()) {
    c.phase = Phase::backward;
    return c;
  }
  for (auto it = stack.rbegin(); it != stack.rend(); ++it)
    if (it->phase != Phase::none) {
      c.phase = it->phase;
      break;
    }
  return c;
}

void wait_for_device_if_profiling() {
#if EMBER_CUDA_BACKEND
  if (enabled()) cuda::synchronize();
#endif
}

Profiler::Profiler() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  EMBER_CHECK(!detail::g_enabled.load(), "profiler: another Profiler is already recording (one at a time)");
  ++r.generation;
  r.start = Clock::now();
  r.retired.clear();
  detail::g_enabled.store(true);
  update_scopes_open();
  running_ = true;
}

Profiler::~Profiler() { stop(); }

void Profiler::stop() {
  if (!running_) return;
  running_ = false;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  detail::g_enabled.store(false);
  update_scopes_open();
  const int64_t end = now_ns(r);
  wall_ms_ = static_cast<double>(end) * 1e-6;
  events_ = r.retired;
  r.retired.clear();
  for (ThreadBuffer* b : r.buffers) {
    if (b->generation != r.generation) continue;
    for (Event e : b->events) {
      if (e.end_ns == 0) e.end_ns = end;  // still open when the profile stopped
      events_.push_back(e);
    }
  }
  std::sort(events_.begin(), events_.end(), [](const Event& a, const Event& b) {
    return a.thread != b.thread ? a.thread < b.thread : a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.depth < b.depth;
  });
}

std::vector<OpStats> Profiler::stats() const {
  // Self time: each event's duration minus its direct children's (events nest per thread).
  std::vector<double> child_ns(events_.size(), 0);
  std::vector<size_t> stack;
  for (size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    while (!stack.empty() && (events_[stack.back()].thread != e.thread || events_[stack.back()].end_ns <= e.start_ns ||
                              events_[stack.back()].depth >= e.depth))
      stack.pop_back();
    if (!stack.empty()) child_ns[stack.back()] += static_cast<double>(e.end_ns - e.start_ns);
    stack.push_back(i);
  }
  std::map<std::pair<std::string, Phase>, OpStats> by_op;
  for (size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    OpStats& s = by_op[{e.name, e.phase}];
    s.name = e.name;
    s.phase = e.phase;
    s.calls += 1;
    const double dur = static_cast<double>(e.end_ns - e.start_ns);
    s.total_ms += dur * 1e-6;
    s.self_ms += std::max(0.0, dur - child_ns[i]) * 1e-6;
    s.flops += e.flops;
  }
  std::vector<OpStats> out;
  for (auto& [key, s] : by_op) out.push_back(s);
  std::sort(out.begin(), out.end(), [](const OpStats& a, const OpStats& b) { return a.self_ms > b.self_ms; });
  return out;
}

std::string Profiler::table(int rows) const {
  const std::vector<OpStats> st = stats();
  double self_total = 0;
  for (const OpStats& s : st) self_total += s.self_ms;
  std::string out;
  char line[512];
  // The op column fits the longest name shown (28 to 96 characters): the measured kernels' scopes
  // name their shape and path (Note [Kernels chosen by measurement] in kernels/cpu/measured_choice.cpp).
  int width = 28;
  for (size_t i = 0; i < st.size() && (rows < 0 || static_cast<int>(i) < rows); ++i)
    width = std::max(width, std::min(96, static_cast<int>(st[i].name.size())));
  std::snprintf(line, sizeof line, "%-*s %-9s %8s %10s %10s %7s %9s\n", width, "op", "phase", "calls", "total ms",
                "self ms", "% self", "GFLOP/s");
  out += line;
  int shown = 0;
  double shown_ms = 0;
  for (const OpStats& s : st) {
    if (shown == rows) break;
    ++shown;
    shown_ms += s.self_ms;
    const std::string gflops = s.flops > 0 && s.total_ms > 0 ? format_ms(s.flops / (s.total_ms * 1e-3) / 1e9) : "";
    std::snprintf(line, sizeof line, "%-*.*s %-9s %8lld %10s %10s %6.1f%% %9s\n", width, width, s.name.c_str(),
                  phase_name(s.phase),
                  static_cast<long long>(s.calls), format_ms(s.total_ms).c_str(), format_ms(s.self_ms).c_str(),
                  self_total > 0 ? 100 * s.self_ms / self_total : 0.0, gflops.c_str());
    out += line;
  }
  if (shown < static_cast<int>(st.size())) {
    std::snprintf(line, sizeof line, "%-*s %-9s %8s %10s %10s %6.1f%%\n", width, "(other ops)", "", "", "",
                  format_ms(self_total - shown_ms).c_str(), self_total > 0 ? 100 * (self_total - shown_ms) / self_total : 0.0);
    out += line;
  }
  std::snprintf(line, sizeof line, "%zu events in %s ms; %% self: share of the time inside any scope (%s ms)\n",
                events_.size(), format_ms(wall_ms_).c_str(), format_ms(self_total).c_str());
  out += line;
  return out;
}

std::string Profiler::trace_json() const {
  nlohmann::json events = nlohmann::json::array();
  std::vector<int> threads;
  for (const Event& e : events_) {
    if (std::find(threads.begin(), threads.end(), e.thread) == threads.end()) threads.push_back(e.thread);
    nlohmann::json args{{"depth", e.depth}};
    if (e.flops > 0) args["flops"] = e.flops;
    events.push_back({{"name", e.name},
                      {"cat", phase_name(e.phase)},
                      {"ph", "X"},
                      {"ts", static_cast<double>(e.start_ns) * 1e-3},
                      {"dur", static_cast<double>(e.end_ns - e.start_ns) * 1e-3},
                      {"pid", 1},
                      {"tid", e.thread},
                      {"args", args}});
  }
  for (int t : threads)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", t},
                      {"args", {{"name", t == 0 ? std::string("ember (first thread)") : "ember thread " + std::to_string(t)}}}});
  const nlohmann::json doc{{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  return doc.dump() + "\n";
}

}  // namespace ember::profiler
