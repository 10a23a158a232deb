// cuda::Graph: capture into a private memory pool, instantiate, replay (Note [CUDA graphs in
// ember] in graph.h).

#include "cuda_api.h"

#include "graph.h"

#include <exception>
#include <utility>

#include "../dispatch.h"
#include "../error.h"

namespace ember::cuda {

namespace {

// The graph capturing on this host thread, for before_each_replay.
thread_local Graph* tls_capturing = nullptr;
thread_local std::vector<std::function<void()>>* tls_hooks = nullptr;
thread_local std::vector<std::shared_ptr<void>>* tls_held = nullptr;

// Ends the capture of `s` if one is active, throwing away the graph; never throws.
void abandon_capture(Stream s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &status) != cudaSuccess || status == cudaStreamCaptureStatusNone) {
    (void)cudaGetLastError();
    return;
  }
  cudaGraph_t g = nullptr;
  (void)cudaStreamEndCapture(s, &g);
  if (g != nullptr) (void)cudaGraphDestroy(g);
  (void)cudaGetLastError();
}

}  // namespace

bool is_capturing() {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  EMBER_CUDA_CHECK(cudaStreamIsCapturing(current_stream(), &status));
  return status != cudaStreamCaptureStatusNone;
}

void check_not_capturing(const char* op, const char* why) {
  if (!is_capturing()) return;
  abandon_capture(current_stream());
  EMBER_THROW(op, " cannot run while a CUDA graph is being captured: it ", why,
              ". Keep it out of the captured function (Note [CUDA graphs in ember] in core/cuda/graph.h)");
}

RelaxedCaptureMode::RelaxedCaptureMode() {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  EMBER_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  previous_ = static_cast<int>(mode);
}

RelaxedCaptureMode::~RelaxedCaptureMode() {
  auto mode = static_cast<cudaStreamCaptureMode>(previous_);
  (void)cudaThreadExchangeStreamCaptureMode(&mode);  // a valid mode: cannot fail
}

void hold_for_replays(std::shared_ptr<void> resource) {
  if (tls_held != nullptr && is_capturing()) tls_held->push_back(std::move(resource));
}

void before_each_replay(std::function<void()> fn) {
  if (tls_hooks != nullptr && is_capturing()) {
    tls_hooks->push_back(std::move(fn));
    return;
  }
  fn();
}

Graph::Graph(int device) : device_(device) {
  EMBER_CHECK(device >= 0 && device < device_count(), "cuda::Graph: cuda:", device, " does not exist");
}

Graph::~Graph() {
  if (exec_ != nullptr) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  held_.clear();  // before the pool goes: nothing held comes from it, but keep the order plain
  if (pool_ != 0) {
    try {
      release_memory_pool(device_, pool_);
    } catch (...) {
      // A destructor never throws: the pool's memory then stays reserved.
    }
  }
}

void Graph::capture(const std::function<void()>& fn) {
  EMBER_CHECK(!captured(), "cuda::Graph::capture: this graph is already captured (make a new Graph)");
  EMBER_CHECK(tls_capturing == nullptr, "cuda::Graph::capture: another graph is capturing on this thread");
  const DeviceGuard device_guard(device_);
  const Stream previous = current_stream();
  StreamHandle stream(device_);
  {
    // The capture stream starts after the work already queued where the caller works.
    Event ready(device_);
    ready.record(previous);
    ready.wait_on(stream.get());
  }
  if (pool_ == 0) pool_ = create_memory_pool(device_);
  std::vector<std::function<void()>> hooks;
  std::vector<std::shared_ptr<void>> held;
  cudaGraph_t graph = nullptr;
  {
    const StreamGuard stream_guard(stream.get());
    begin_allocate_to_pool(device_, pool_, stream.get());
    tls_capturing = this;
    tls_hooks = &hooks;
    tls_held = &held;
    const auto finish = [&] {
      tls_capturing = nullptr;
      tls_hooks = nullptr;
      tls_held = nullptr;
      end_allocate_to_pool(device_, stream.get());
    };
    try {
      EMBER_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal));
      fn();
      const cudaError_t err = cudaStreamEndCapture(stream.get(), &graph);
      if (err == cudaErrorStreamCaptureInvalidated) {
        (void)cudaGetLastError();
        EMBER_THROW("cuda::Graph::capture: the capture was invalidated by a call that cannot be recorded in a "
                    "CUDA graph (one that waits for the device, or uses the legacy default stream) whose error was "
                    "not reported (Note [CUDA graphs in ember] in core/cuda/graph.h)");
      }
      EMBER_CUDA_CHECK(err);
    } catch (...) {
      abandon_capture(stream.get());
      finish();
      throw;
    }
    finish();
  }
  size_t nodes = 0;
  cudaGraphExec_t exec = nullptr;
  const cudaError_t got = cudaGraphGetNodes(graph, nullptr, &nodes);
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  EMBER_CUDA_CHECK(got);
  EMBER_CUDA_CHECK(made);
  exec_ = exec;
  nodes_ = nodes;
  hooks_ = std::move(hooks);
  held_ = std::move(held);
  // The capture stream is destroyed on return: replays run on the caller's stream, which must
  // see the pool's blocks as its own for nothing (they belong to the graph, never to eager code).
}

void Graph::replay() {
  EMBER_CHECK(captured(), "cuda::Graph::replay: nothing captured yet (call capture first)");
  const DeviceGuard device_guard(device_);
  for (const auto& hook : hooks_) hook();
  EMBER_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), current_stream()));
  if (sync_every_op()) synchronize_stream(current_stream());
}

}  // namespace ember::cuda

namespace ember::detail {

bool capturing_graph(Device device) {
  if (!device.is_cuda()) return false;
  const cuda::DeviceGuard guard(device.index);
  return cuda::is_capturing();
}

void check_not_capturing(Device device, const char* op, const char* why) {
  if (!device.is_cuda()) return;
  const cuda::DeviceGuard guard(device.index);
  cuda::check_not_capturing(op, why);
}

}  // namespace ember::detail
