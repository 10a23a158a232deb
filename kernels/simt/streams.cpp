// Streams and events.
//
// Note [Streams in the emulator]
// By default every stream operation (kernel, async copy, memset, event record, host function)
// runs when it is issued, on the issuing host thread: the simplest correct schedule, and fully
// deterministic. EMBER_SIMT_DEFER=1 instead queues operations per stream and runs them only at a
// synchronization point — cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize, a
// synchronous cudaMemcpy/cudaMemset, cudaFree, or a stream waiting on an event — so host code that
// reads a result before synchronizing sees stale data, as it may on a GPU. The legacy default
// stream keeps its CUDA meaning: work on it first waits for all blocking streams of the device,
// and work on a blocking stream first waits for the legacy stream (eagerly: the queues drain at
// enqueue time, which orders more than CUDA does but never less). Streams created with
// cudaStreamNonBlocking do neither. cudaStreamPerThread is one blocking stream per host thread and
// device. Deferred queues are guarded by one process-wide recursive mutex.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "internal.h"
#include "shim_memory.h"

namespace ember::simt::detail {

struct EventState {
  std::atomic<uint64_t> generation{0};  // one per cudaEventRecord
  std::atomic<bool> recorded{false};
  std::atomic<bool> completed{false};
  double ms = 0;  // timestamp of the last completed record
  CUstream_st* stream = nullptr;
};

}  // namespace ember::simt::detail

struct CUevent_st {
  unsigned flags = cudaEventDefault;
  int device = 0;
  std::shared_ptr<ember::simt::detail::EventState> state;
};

namespace ember::simt::detail {

namespace {

std::recursive_mutex defer_mutex;  // every deferred queue
std::mutex registry_mutex;         // the sets below

struct StreamRegistry {
  std::vector<std::unique_ptr<CUstream_st>> legacy;  // per device
  std::set<CUstream_st*> live;                       // every stream, legacy and per-thread included
  std::set<CUevent_st*> events;
};

StreamRegistry& streams() {
  static StreamRegistry* r = [] {
    auto* reg = new StreamRegistry;  // never destroyed: threads may use it while the process exits
    for (int d = 0; d < config().devices; ++d) {
      auto s = std::make_unique<CUstream_st>();
      s->device = d;
      s->legacy = true;
      reg->live.insert(s.get());
      reg->legacy.push_back(std::move(s));
    }
    return reg;
  }();
  return *r;
}

// cudaStreamPerThread: created on first use by each host thread, per device.
struct PerThreadStreams {
  std::vector<CUstream_st*> by_device;
  ~PerThreadStreams() {
    for (CUstream_st* s : by_device) {
      if (s == nullptr) continue;
      drain_device(s->device);
      std::lock_guard<std::mutex> lock(registry_mutex);
      streams().live.erase(s);
      delete s;
    }
  }
};
thread_local PerThreadStreams tls_streams;

CUstream_st* per_thread_stream(int device) {
  auto& v = tls_streams.by_device;
  if (v.size() <= static_cast<size_t>(device)) v.resize(static_cast<size_t>(device) + 1, nullptr);
  if (v[static_cast<size_t>(device)] == nullptr) {
    auto* s = new CUstream_st;
    s->device = device;
    s->per_thread = true;
    std::lock_guard<std::mutex> lock(registry_mutex);
    streams().live.insert(s);
    v[static_cast<size_t>(device)] = s;
  }
  return v[static_cast<size_t>(device)];
}

// Runs queued operations of s until it is empty or `until` says stop. Caller holds defer_mutex.
template <class Stop>
void drain_stream(CUstream_st* s, Stop until) {
  while (!s->queue.empty() && !until()) {
    auto work = std::move(s->queue.front());
    s->queue.pop_front();
    work();
  }
}

void drain_stream(CUstream_st* s) {
  drain_stream(s, [] { return false; });
}

std::vector<CUstream_st*> streams_of(int device) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  std::vector<CUstream_st*> out;
  for (CUstream_st* s : streams().live)
    if (device < 0 || s->device == device) out.push_back(s);
  return out;
}

bool live_event(CUevent_st* e) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  return streams().events.count(e) != 0;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

CUstream_st* resolve_stream(cudaStream_t s, cudaError_t* err) {
  const int d = current_device();
  if (s == nullptr || s == cudaStreamLegacy) return streams().legacy[static_cast<size_t>(d)].get();
  if (s == cudaStreamPerThread) return per_thread_stream(d);
  std::lock_guard<std::mutex> lock(registry_mutex);
  if (streams().live.count(s)) return s;
  *err = cudaErrorInvalidResourceHandle;  // never created, or already destroyed
  return nullptr;
}

int stream_device(const CUstream_st* s) { return s->device; }

cudaError_t enqueue(CUstream_st* s, cudaGraphNodeType type, std::function<void()> work) {
  if (s->capture) return capture_node(s, type, std::move(work));
  if (s->legacy) {
    if (const cudaError_t e = check_legacy_use(s->device)) return e;
  }
  if (!config().defer) {
    work();
    return cudaSuccess;
  }
  std::lock_guard<std::recursive_mutex> lock(defer_mutex);
  if (s->legacy) {
    for (CUstream_st* o : streams_of(s->device))
      if (o != s && !(o->flags & cudaStreamNonBlocking)) drain_stream(o);
  } else if (!(s->flags & cudaStreamNonBlocking)) {
    drain_stream(streams().legacy[static_cast<size_t>(s->device)].get());
  }
  s->queue.push_back(std::move(work));
  return cudaSuccess;
}

void drain_device(int device) {
  if (!config().defer) return;
  std::lock_guard<std::recursive_mutex> lock(defer_mutex);
  // Repeat: a drained operation (a host function) may queue more work.
  for (bool again = true; again;) {
    again = false;
    for (CUstream_st* s : streams_of(device)) {
      if (s->queue.empty()) continue;
      drain_stream(s);
      again = true;
    }
  }
}

}  // namespace ember::simt::detail

namespace ember::simt {

cudaError_t synchronize_stream(cudaStream_t stream) {
  using namespace detail;
  cudaError_t e = cudaSuccess;
  CUstream_st* s = resolve_stream(stream, &e);
  if (s == nullptr) return fail(e);
  if (s->capture) {  // the host cannot wait for work that is only being recorded
    invalidate_capture(s);
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  if (s->legacy) {
    if (const cudaError_t err = check_legacy_use(s->device)) return fail(err);
  }
  if (config().defer) {
    std::lock_guard<std::recursive_mutex> lock(defer_mutex);
    drain_stream(s);
  }
  return cudaSuccess;
}

}  // namespace ember::simt

using namespace ember::simt::detail;

extern "C" {

// ---- streams ----------------------------------------------------------------------------------

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int priority) {
  if (stream == nullptr || (flags & ~cudaStreamNonBlocking) != 0) return fail(cudaErrorInvalidValue);
  auto* s = new CUstream_st;
  s->device = current_device();
  s->flags = flags;
  s->priority = std::clamp(priority, -5, 0);
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    streams().live.insert(s);
  }
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  return cudaStreamCreateWithPriority(stream, flags, 0);
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithPriority(stream, 0, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
    return fail(cudaErrorInvalidResourceHandle);
  cudaError_t e = cudaSuccess;
  CUstream_st* s = resolve_stream(stream, &e);
  if (s == nullptr) return fail(e);
  if (s->capture) invalidate_capture(s);  // the capture can no longer be ended
  if (config().defer) {
    std::lock_guard<std::recursive_mutex> lock(defer_mutex);
    drain_stream(s);  // CUDA finishes the stream's work after the destroy call returns
  }
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    streams().live.erase(s);
  }
  delete s;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  cudaError_t e = cudaSuccess;
  CUstream_st* s = resolve_stream(stream, &e);
  if (s == nullptr) return fail(e);
  // Waiting for a stream that does not capture is a "potentially unsafe" call (Note [Stream
  // capture in the emulator]); waiting for the capturing stream is refused by synchronize_stream.
  if (!s->capture) {
    if (const cudaError_t err = check_unsafe_call()) return fail(err);
  }
  return ember::simt::synchronize_stream(stream);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  cudaError_t e = cudaSuccess;
  CUstream_st* s = resolve_stream(stream, &e);
  if (s == nullptr) return fail(e);
  if (s->capture) {
    invalidate_capture(s);
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  if (const cudaError_t err = check_unsafe_call()) return fail(err);  // querying another stream is unsafe too
  std::lock_guard<std::recursive_mutex> lock(defer_mutex);
  return s->queue.empty() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
  cudaError_t e = cudaSuccess;
  CUstream_st* s = resolve_stream(stream, &e);
  if (s == nullptr || flags == nullptr) return fail(s ? cudaErrorInvalidValue : e);
  *flags = s->flags;
  return cudaSuccess;
}

cudaError_t cudaStreamGetPriority(cudaStream_t stream, int* priority) {
  cudaError_t e = cudaSuccess;
  CUstream_st* s = resolve_stream(stream, &e);
  if (s == nullptr || priority == nullptr) return fail(s ? cudaErrorInvalidValue : e);
  *priority = s->priority;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  cudaError_t e = cudaSuccess;
  CUstream_st* s = resolve_stream(stream, &e);
  if (s == nullptr) return fail(e);
  if (fn == nullptr) return fail(cudaErrorInvalidValue);
  if (const cudaError_t err = enqueue(s, cudaGraphNodeTypeHost, [fn, user_data] { fn(user_data); })) return fail(err);
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  cudaError_t e = cudaSuccess;
  CUstream_st* s = resolve_stream(stream, &e);
  if (s == nullptr) return fail(e);
  if (!live_event(event)) return fail(cudaErrorInvalidResourceHandle);
  std::shared_ptr<EventState> st = event->state;
  if (!st->recorded || st->completed) return cudaSuccess;  // nothing to wait for
  // A capture cannot depend on work outside it (cudaEventWaitExternal is not emulated).
  if (s->capture) {
    invalidate_capture(s);
    return fail(cudaErrorStreamCaptureIsolation);
  }
  // Deferred: when `s` reaches this point, run the event's stream up to the event.
  if (const cudaError_t err =
          enqueue(s, cudaGraphNodeTypeWaitEvent, [st] { drain_stream(st->stream, [&] { return st->completed.load(); }); }))
    return fail(err);
  return cudaSuccess;
}

// ---- events -----------------------------------------------------------------------------------

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (event == nullptr) return fail(cudaErrorInvalidValue);
  auto* e = new CUevent_st;
  e->flags = flags;
  e->device = current_device();
  e->state = std::make_shared<EventState>();
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    streams().events.insert(e);
  }
  *event = e;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    if (streams().events.erase(event) == 0) return fail(cudaErrorInvalidResourceHandle);
  }
  delete event;  // a queued record keeps the state alive
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  cudaError_t e = cudaSuccess;
  CUstream_st* s = resolve_stream(stream, &e);
  if (s == nullptr) return fail(e);
  if (!live_event(event) || event->device != s->device) return fail(cudaErrorInvalidResourceHandle);
  if (s->capture) {
    // CUDA turns a record in a capture into a fork/join point between captured streams; the
    // emulator captures one stream at a time and says so.
    warn("cudaEventRecord on a capturing stream: cross-stream capture is not emulated");
    invalidate_capture(s);
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  std::shared_ptr<EventState> st = event->state;
  std::lock_guard<std::recursive_mutex> lock(defer_mutex);
  const uint64_t generation = ++st->generation;
  st->recorded = true;
  st->completed = false;
  st->stream = s;
  const cudaError_t err = enqueue(s, cudaGraphNodeTypeEventRecord, [st, generation] {
    if (st->generation != generation) return;  // recorded again since: that record counts
    st->ms = now_ms();
    st->completed = true;
  });
  return err ? fail(err) : cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!live_event(event)) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = check_unsafe_call()) return fail(e);
  const EventState& st = *event->state;
  return !st.recorded || st.completed ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!live_event(event)) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = check_unsafe_call()) return fail(e);
  std::shared_ptr<EventState> st = event->state;
  if (!st->recorded || st->completed) return cudaSuccess;
  std::lock_guard<std::recursive_mutex> lock(defer_mutex);
  drain_stream(st->stream, [&] { return st->completed.load(); });
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return fail(cudaErrorInvalidValue);
  if (!live_event(start) || !live_event(end)) return fail(cudaErrorInvalidResourceHandle);
  if ((start->flags | end->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
  const EventState &a = *start->state, &b = *end->state;
  if (!a.recorded || !b.recorded) return fail(cudaErrorInvalidResourceHandle);
  if (!a.completed || !b.completed) return cudaErrorNotReady;
  *ms = static_cast<float>(b.ms - a.ms);
  return cudaSuccess;
}

}  // extern "C"
