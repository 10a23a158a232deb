#include "ledger.h"

#include <mutex>

#include "../error.h"

namespace ember::cuda {

#if EMBER_CUDA_BACKEND
// The CUDA events of timed mode (core/cuda/ledger_events.cu).
namespace ledger_events {
void* record(const void* stream);
double elapsed_us(void* start, void* end);  // waits for `end`
void release(void* event);
}  // namespace ledger_events
#endif

namespace detail {
std::atomic<uint8_t> g_ledger_mode{0};
}

namespace {

struct Recorded {
  std::mutex mutex;
  std::vector<LedgerEntry> entries;
  std::vector<std::pair<void*, void*>> events;  // timed: the start and end event of each entry
};
Recorded& recorded() {
  static Recorded* r = new Recorded;  // never destroyed: launches may come from late threads
  return *r;
}

// The entry this thread opened last and has not closed (timed mode's end event goes there).
thread_local size_t t_open_entry = SIZE_MAX;

// "kernels/cuda/batchnorm_channels_last.cu" -> "batchnorm_channels_last"
std::string file_stem(const char* file) {
  std::string s = file ? file : "";
  const size_t slash = s.find_last_of('/');
  if (slash != std::string::npos) s = s.substr(slash + 1);
  const size_t dot = s.find('.');
  return dot == std::string::npos ? s : s.substr(0, dot);
}

// What a record_only ledger skips: the device work (kernels and library calls), never the copies
// and memsets through which the host sees device memory.
bool skipped_when_recording(CallKind kind) {
  return kind == CallKind::kernel || kind == CallKind::cublas || kind == CallKind::cudnn || kind == CallKind::nccl;
}

size_t add_entry(LedgerEntry e, const void* stream) {
  const profiler::ScopeContext c = profiler::current_scope();
  e.op = c.op;
  e.phase = c.phase;
  e.stream = reinterpret_cast<uintptr_t>(stream);
  e.skipped = ledger_record_only() && skipped_when_recording(e.kind);
  void* start = nullptr;
#if EMBER_CUDA_BACKEND
  if (ledger_mode() == LedgerMode::timed && e.kind != CallKind::host_sync && e.kind != CallKind::alloc)
    start = ledger_events::record(stream);
#endif
  Recorded& r = recorded();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.entries.push_back(std::move(e));
  r.events.emplace_back(start, nullptr);
  return r.entries.size() - 1;
}

}  // namespace

const char* call_kind_name(CallKind k) {
  switch (k) {
    case CallKind::kernel: return "kernel";
    case CallKind::cublas: return "cublas";
    case CallKind::cudnn: return "cudnn";
    case CallKind::nccl: return "nccl";
    case CallKind::copy: return "copy";
    case CallKind::memset: return "memset";
    case CallKind::host_sync: return "host_sync";
    case CallKind::alloc: return "alloc";
  }
  return "?";
}

const char* math_name(Math m) {
  switch (m) {
    case Math::cuda_core: return "cuda_core";
    case Math::tensor_tf32: return "tensor_tf32";
    case Math::tensor_16: return "tensor_16";
    case Math::fp64: return "fp64";
  }
  return "?";
}

Ledger::Ledger(LedgerMode mode) : mode_(mode) {
  EMBER_CHECK(mode != LedgerMode::off, "cuda::Ledger: the mode must be run, record_only or timed");
#if !EMBER_CUDA_BACKEND
  EMBER_THROW("cuda::Ledger: this build of ember has no CUDA backend (neither a GPU build nor the SIMT emulator)");
#endif
  uint8_t expected = 0;
  EMBER_CHECK(detail::g_ledger_mode.compare_exchange_strong(expected, static_cast<uint8_t>(mode)),
              "cuda::Ledger: another ledger is already recording (one at a time)");
  {
    Recorded& r = recorded();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.entries.clear();
    r.events.clear();
  }
  profiler::track_scopes(true);
}

Ledger::~Ledger() { stop(); }

std::vector<LedgerEntry> Ledger::stop() {
  if (!running_) return {};
  running_ = false;
  profiler::track_scopes(false);
  detail::g_ledger_mode.store(0);
  Recorded& r = recorded();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<LedgerEntry> out = std::move(r.entries);
  std::vector<std::pair<void*, void*>> events = std::move(r.events);
  r.entries.clear();
  r.events.clear();
#if EMBER_CUDA_BACKEND
  for (size_t i = 0; i < events.size(); ++i) {
    auto [start, end] = events[i];
    if (start != nullptr && end != nullptr) out[i].measured_us = ledger_events::elapsed_us(start, end);
    if (start != nullptr) ledger_events::release(start);
    if (end != nullptr) ledger_events::release(end);
  }
#endif
  return out;
}

bool ledger_launch(const char* kernel, const char* file, const unsigned grid[3], const unsigned block[3],
                   size_t shared_bytes, const void* stream, const Cost& cost) {
  LedgerEntry e;
  e.kind = CallKind::kernel;
  e.kernel = kernel;
  e.family = file_stem(file);
  for (int i = 0; i < 3; ++i) {
    e.grid[i] = grid[i];
    e.block[i] = block[i];
  }
  e.shared_bytes = shared_bytes;
  e.cost = cost;
  t_open_entry = add_entry(std::move(e), stream);
  return !ledger_record_only();
}

bool ledger_call(CallKind kind, const char* function, const Cost& cost, const void* stream, std::string shape) {
  LedgerEntry e;
  e.kind = kind;
  e.kernel = function;
  e.family = call_kind_name(kind);
  e.shape = std::move(shape);
  e.cost = cost;
  t_open_entry = add_entry(std::move(e), stream);
  return !(ledger_record_only() && skipped_when_recording(kind));
}

void ledger_launched(const void* stream) {
  const size_t i = t_open_entry;
  t_open_entry = SIZE_MAX;
#if EMBER_CUDA_BACKEND
  if (ledger_mode() != LedgerMode::timed || i == SIZE_MAX) return;
  void* end = ledger_events::record(stream);
  Recorded& r = recorded();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (i < r.events.size()) r.events[i].second = end;
  else ledger_events::release(end);
#else
  (void)stream;
  (void)i;
#endif
}

void ledger_host_sync(const char* why) {
  if (!ledger_on()) return;
  LedgerEntry e;
  e.kind = CallKind::host_sync;
  e.kernel = "host sync";
  e.family = "host_sync";
  e.note = why;
  e.stub_answer = ledger_record_only();
  add_entry(std::move(e), nullptr);
}

void ledger_alloc(size_t bytes) {
  if (!ledger_on()) return;
  LedgerEntry e;
  e.kind = CallKind::alloc;
  e.kernel = "cudaMalloc";
  e.family = "alloc";
  e.note = std::to_string(bytes) + " bytes";
  add_entry(std::move(e), nullptr);
}

}  // namespace ember::cuda
