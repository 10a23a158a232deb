// Stream capture and CUDA graphs: cudaStreamBeginCapture ... cudaStreamEndCapture,
// cudaGraphInstantiate, cudaGraphLaunch.
//
// Note [Stream capture in the emulator]
// On a GPU, work issued to a capturing stream is not run: the driver records each kernel launch,
// copy and memset as a node of a graph, and cudaGraphLaunch later runs the whole graph with one
// call, with the parameters frozen at capture time. The emulator does the same with the closures
// it already builds for every stream operation (Note [Streams in the emulator]): enqueue() on a
// capturing stream appends the closure to the capture's node list instead of running or queuing
// it, and a graph is that list. Kernel launches keep their converted arguments alive for this
// (kernel_launch.h takes the deferred path while any capture is active), so a node replays the
// launch with the argument values of the capture. The nodes of one stream form a chain, and a
// graph runs them in capture order: the order a GPU may not reorder either.
//
// Which calls CUDA refuses during a capture follows two rules of the CUDA Programming Guide
// ("Prohibited and Unhandled Operations" under "Stream Capture") and the capture modes of
// cudaThreadExchangeStreamCaptureMode, and matches what CUDA 13.0 (driver 580.159.04) did on an
// H200 on 2026-12-04 (tests/cuda/test_graph_capture.cpp asserts those return codes):
//   * Waiting for or querying what only records: cudaStreamSynchronize / cudaStreamQuery of the
//     capturing stream is cudaErrorStreamCaptureUnsupported and invalidates the capture, so that
//     later work on the stream and cudaStreamEndCapture return cudaErrorStreamCaptureInvalidated.
//     So is cudaDeviceSynchronize while any stream of the device captures, whatever the modes (a
//     "broader handle" that contains the capture): on the H200 it was refused, and invalidated the
//     capture, under a global, a thread-local and a relaxed capture of the calling thread.
//   * "Potentially unsafe API calls": calls that are not stream work, which the capture cannot
//     see. A thread's mode (cudaThreadExchangeStreamCaptureMode, default global) forbids them
//     while this thread has a capture begun in global or thread-local mode and, when the thread is
//     in global mode, while any thread has a capture begun in global mode; a forbidden call
//     returns cudaErrorStreamCaptureUnsupported and invalidates those captures. Unsafe here:
//     cudaMalloc, cudaFree, cudaMallocHost/cudaHostAlloc, cudaFreeHost, and synchronizing or
//     querying work outside the capture: cudaStreamSynchronize and cudaStreamQuery of a stream
//     that does not capture (the legacy stream included), cudaEventSynchronize, cudaEventQuery.
//     On the H200 all of these that were tried were refused and invalidated the capture: under a
//     global capture each of them but cudaHostAlloc and cudaFreeHost, which were not tried
//     (cudaFree under compute-sanitizer); under a thread-local one
//     cudaMalloc and every wait or query; from a second thread in global mode while the first
//     captured in global mode, cudaStreamQuery and cudaStreamSynchronize of another stream. These
//     succeeded and left the capture valid: cudaStreamQuery of another stream from a second
//     thread in thread-local mode, and from a second thread in global mode while the capture was
//     thread-local; cudaStreamSynchronize of the legacy stream and a synchronous cudaMemcpy from
//     the capturing thread after it switched to relaxed mode; cudaStreamQuery and
//     cudaStreamSynchronize of another stream under a capture begun in relaxed mode. A library
//     that waits for eager work during a capture relaxes its thread's mode for that call
//     (cuda::RelaxedCaptureMode in core/cuda/graph.h).
//   * The legacy default stream waits for every blocking stream of its device: while one of them
//     captures, work on the legacy stream, and the synchronous calls that use it (cudaMemcpy,
//     cudaMemset, cudaMemcpy2D), would make the capture depend on uncaptured work:
//     cudaErrorStreamCaptureImplicit, and the capture is invalidated. When the capturing stream is
//     non-blocking there is no such dependency and CUDA runs them: on the H200 a synchronous
//     device-to-host cudaMemcpy into pageable memory and a synchronous cudaMemset returned
//     cudaSuccess during a global capture on a non-blocking stream, and the capture stayed valid.
//     They are not "unsafe calls".
//   * A copy on the capturing stream whose host side is pageable memory is recorded like any other
//     copy: on the H200 a device-to-host and a host-to-device cudaMemcpyAsync with pageable memory
//     each became one memcpy node, the capture copied nothing, and a replay copied the memory as
//     it was at the replay. The node reads and writes that memory when it runs, at each replay. So CUDA does not stop a
//     host read during a capture: ember checks for it itself (check_not_capturing, Note [CUDA
//     graphs in ember]).
//   * Waiting on an event recorded outside the capture: cudaErrorStreamCaptureIsolation.
// Capturing on the legacy stream is cudaErrorStreamCaptureUnsupported. Cross-stream capture (an
// event recorded in a capture joining another stream into it) is not emulated: recording an
// event on a capturing stream invalidates the capture with a warning.

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "internal.h"
#include "shim_memory.h"

// A graph node: what it is, and the work it does (a kernel grid, a copy, a memset, a host call).
struct CUgraphNode_st {
  cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
  std::function<void()> work;
};

struct CUgraph_st {
  int device = 0;
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;  // in capture order
};

// An instantiated graph: the nodes' work, shared with launches still queued (EMBER_SIMT_DEFER=1).
struct CUgraphExec_st {
  int device = 0;
  std::shared_ptr<const std::vector<std::function<void()>>> work;
};

namespace ember::simt::detail {

struct Capture {
  unsigned long long id = 0;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;
  CUstream_st* origin = nullptr;
  bool invalidated = false;
  std::unique_ptr<CUgraph_st> graph;
};

namespace {

std::mutex capture_mutex;  // everything below, and every Capture
std::atomic<int> active_captures{0};
unsigned long long next_capture_id = 1;

std::set<Capture*>& captures() {
  static auto* s = new std::set<Capture*>;  // never destroyed, like the stream registry
  return *s;
}
std::set<CUgraph_st*>& graphs() {
  static auto* s = new std::set<CUgraph_st*>;
  return *s;
}
std::set<CUgraphExec_st*>& execs() {
  static auto* s = new std::set<CUgraphExec_st*>;
  return *s;
}

thread_local cudaStreamCaptureMode tls_mode = cudaStreamCaptureModeGlobal;

bool valid_mode(cudaStreamCaptureMode m) {
  return m == cudaStreamCaptureModeGlobal || m == cudaStreamCaptureModeThreadLocal ||
         m == cudaStreamCaptureModeRelaxed;
}

}  // namespace

bool capture_active() { return active_captures.load() > 0; }

cudaError_t capture_node(CUstream_st* s, cudaGraphNodeType type, std::function<void()> work) {
  std::lock_guard<std::mutex> lock(capture_mutex);
  Capture& c = *s->capture;
  if (c.invalidated) return cudaErrorStreamCaptureInvalidated;
  auto node = std::make_unique<CUgraphNode_st>();
  node->type = type;
  node->work = std::move(work);
  c.graph->nodes.push_back(std::move(node));
  return cudaSuccess;
}

void invalidate_capture(CUstream_st* s) {
  std::lock_guard<std::mutex> lock(capture_mutex);
  if (s->capture) s->capture->invalidated = true;
}

cudaError_t check_unsafe_call() {
  if (!capture_active() || tls_mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  std::lock_guard<std::mutex> lock(capture_mutex);
  const std::thread::id me = std::this_thread::get_id();
  bool forbidden = false;
  for (Capture* c : captures()) {
    const bool mine = c->thread == me && c->mode != cudaStreamCaptureModeRelaxed;
    const bool global = c->thread != me && c->mode == cudaStreamCaptureModeGlobal &&
                        tls_mode == cudaStreamCaptureModeGlobal;
    if (mine || global) {
      c->invalidated = true;
      forbidden = true;
    }
  }
  return forbidden ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

cudaError_t check_device_wait(int device) {
  if (!capture_active()) return cudaSuccess;
  std::lock_guard<std::mutex> lock(capture_mutex);
  bool conflict = false;
  for (Capture* c : captures()) {
    if (c->origin->device == device) {
      c->invalidated = true;
      conflict = true;
    }
  }
  return conflict ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

cudaError_t check_legacy_use(int device) {
  if (!capture_active()) return cudaSuccess;
  std::lock_guard<std::mutex> lock(capture_mutex);
  bool conflict = false;
  for (Capture* c : captures()) {
    const CUstream_st* o = c->origin;
    if (o->device == device && !(o->flags & cudaStreamNonBlocking)) {
      c->invalidated = true;
      conflict = true;
    }
  }
  return conflict ? cudaErrorStreamCaptureImplicit : cudaSuccess;
}

}  // namespace ember::simt::detail

namespace ember::simt {

cudaError_t run_in_stream_order(cudaStream_t stream, std::function<void()> work) {
  cudaError_t e = cudaSuccess;
  CUstream_st* s = detail::resolve_stream(stream, &e);
  if (s == nullptr) return detail::fail(e);
  if (s->capture) {
    e = detail::capture_node(s, cudaGraphNodeTypeKernel, std::move(work));
    return e ? detail::fail(e) : cudaSuccess;
  }
  if ((e = synchronize_stream(stream)) != cudaSuccess) return e;
  work();
  return cudaSuccess;
}

}  // namespace ember::simt

using namespace ember::simt::detail;

extern "C" {

// ---- capture ------------------------------------------------------------------------------------

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  cudaError_t e = cudaSuccess;
  CUstream_st* s = resolve_stream(stream, &e);
  if (s == nullptr) return fail(e);
  if (!valid_mode(mode)) return fail(cudaErrorInvalidValue);
  if (s->legacy) return fail(cudaErrorStreamCaptureUnsupported);  // the legacy stream cannot capture
  std::lock_guard<std::mutex> lock(capture_mutex);
  if (s->capture) return fail(cudaErrorIllegalState);  // already capturing
  auto c = std::make_shared<Capture>();
  c->id = next_capture_id++;
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->origin = s;
  c->graph = std::make_unique<CUgraph_st>();
  c->graph->device = s->device;
  captures().insert(c.get());
  s->capture = std::move(c);
  ++active_captures;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  cudaError_t e = cudaSuccess;
  CUstream_st* s = resolve_stream(stream, &e);
  if (s == nullptr) return fail(e);
  if (graph == nullptr) return fail(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(capture_mutex);
  if (!s->capture) return fail(cudaErrorIllegalState);  // not capturing
  Capture& c = *s->capture;
  if (c.origin != s) return fail(cudaErrorStreamCaptureUnmatched);
  if (c.mode != cudaStreamCaptureModeRelaxed && c.thread != std::this_thread::get_id())
    return fail(cudaErrorStreamCaptureWrongThread);
  const bool invalidated = c.invalidated;
  std::unique_ptr<CUgraph_st> g = std::move(c.graph);
  captures().erase(&c);
  s->capture.reset();
  --active_captures;
  if (invalidated) {
    *graph = nullptr;
    return fail(cudaErrorStreamCaptureInvalidated);
  }
  graphs().insert(g.get());
  *graph = g.release();
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  cudaError_t e = cudaSuccess;
  CUstream_st* s = resolve_stream(stream, &e);
  if (s == nullptr) return fail(e);
  if (status == nullptr) return fail(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(capture_mutex);
  if (!s->capture) {
    *status = cudaStreamCaptureStatusNone;
  } else {
    *status = s->capture->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  }
  return cudaSuccess;
}

// The emulator's graphs are chains: the only dependency of the next node is the last one, and
// edges are not reported (edge_data, dependencies and their count come back empty).
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status, unsigned long long* id,
                                     cudaGraph_t* graph, const cudaGraphNode_t** dependencies,
                                     const cudaGraphEdgeData** edge_data, size_t* num_dependencies) {
  if (status == nullptr) return fail(cudaErrorInvalidValue);
  if (const cudaError_t e = cudaStreamIsCapturing(stream, status)) return e;
  cudaError_t e = cudaSuccess;
  CUstream_st* s = resolve_stream(stream, &e);
  std::lock_guard<std::mutex> lock(capture_mutex);
  const bool capturing = s->capture != nullptr;
  if (id) *id = capturing ? s->capture->id : 0;
  if (graph) *graph = capturing ? s->capture->graph.get() : nullptr;
  if (dependencies) *dependencies = nullptr;
  if (edge_data) *edge_data = nullptr;
  if (num_dependencies) *num_dependencies = 0;
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (mode == nullptr || !valid_mode(*mode)) return fail(cudaErrorInvalidValue);
  std::swap(*mode, tls_mode);
  return cudaSuccess;
}

// ---- graphs -------------------------------------------------------------------------------------

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* num_nodes) {
  if (num_nodes == nullptr) return fail(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(capture_mutex);
  if (graphs().count(graph) == 0) return fail(cudaErrorInvalidValue);
  const size_t n = graph->nodes.size();
  if (nodes != nullptr) {
    for (size_t i = 0; i < std::min(n, *num_nodes); ++i) nodes[i] = graph->nodes[i].get();
    for (size_t i = n; i < *num_nodes; ++i) nodes[i] = nullptr;  // CUDA fills the rest with null
  }
  *num_nodes = n;
  return cudaSuccess;
}

cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
  if (node == nullptr || type == nullptr) return fail(cudaErrorInvalidValue);
  *type = node->type;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  if (exec == nullptr || flags != 0) return fail(cudaErrorInvalidValue);  // no instantiate flags emulated
  std::lock_guard<std::mutex> lock(capture_mutex);
  if (graphs().count(graph) == 0) return fail(cudaErrorInvalidValue);
  auto work = std::make_shared<std::vector<std::function<void()>>>();
  for (const auto& node : graph->nodes) work->push_back(node->work);  // the exec outlives the graph
  auto* x = new CUgraphExec_st;
  x->device = graph->device;
  x->work = std::move(work);
  execs().insert(x);
  *exec = x;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  return cudaGraphInstantiate(exec, graph, flags);
}

// Runs the graph's nodes in order on `stream` (as one queued operation with EMBER_SIMT_DEFER=1;
// as one graph node when `stream` is itself capturing).
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  cudaError_t e = cudaSuccess;
  CUstream_st* s = resolve_stream(stream, &e);
  if (s == nullptr) return fail(e);
  std::shared_ptr<const std::vector<std::function<void()>>> work;
  {
    std::lock_guard<std::mutex> lock(capture_mutex);
    if (execs().count(exec) == 0) return fail(cudaErrorInvalidResourceHandle);
    if (exec->device != s->device) return fail(cudaErrorInvalidValue);
    work = exec->work;
  }
  e = enqueue(s, cudaGraphNodeTypeGraph, [work] {
    for (const auto& w : *work) w();
  });
  return e ? fail(e) : cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  {
    std::lock_guard<std::mutex> lock(capture_mutex);
    if (execs().erase(exec) == 0) return fail(cudaErrorInvalidValue);
  }
  delete exec;  // a queued launch keeps the work alive
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  {
    std::lock_guard<std::mutex> lock(capture_mutex);
    if (graphs().erase(graph) == 0) return fail(cudaErrorInvalidValue);
  }
  delete graph;
  return cudaSuccess;
}

}  // extern "C"
