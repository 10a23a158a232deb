// Stream capture and CUDA graphs through the CUDA runtime API: what is recorded instead of run,
// what a replay does, and the errors CUDA returns for calls a capture cannot contain. Runs
// unchanged on a real GPU and on the SIMT emulator (Note [Stream capture in the emulator]). The
// return codes asserted here are those CUDA 13.0 (driver 580.159.04) gave on an H200 on 2026-12-04.

#include <cuda_runtime.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <thread>
#include <tuple>
#include <vector>

#include <ember/core/cuda/runtime.h>
#include <ember/kernels/cuda/selftest.h>

#include "device_buffer.h"

using ember::testing::DeviceBuffer;

namespace {

// A created stream (blocking or not) that is destroyed at the end of the test.
struct TestStream {
  cudaStream_t s = nullptr;
  explicit TestStream(unsigned flags = cudaStreamNonBlocking) { EMBER_TEST_CUDA(cudaStreamCreateWithFlags(&s, flags)); }
  ~TestStream() { (void)cudaStreamDestroy(s); }
};

// Ends a capture that a test expects to have been invalidated, and checks that it was.
void end_invalidated(cudaStream_t s) {
  cudaGraph_t g = nullptr;
  CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated);
  CHECK(g == nullptr);
  (void)cudaGetLastError();
}

}  // namespace

TEST_CASE("cuda graphs: captured work is recorded, not run, and every launch replays it", "[cuda][graphs]") {
  const int64_t n = 1000;
  std::vector<float> x_host(n), y0(n);
  for (int64_t i = 0; i < n; ++i) {
    x_host[i] = 0.25f * static_cast<float>(i);
    y0[i] = static_cast<float>(i % 7);
  }
  DeviceBuffer<float> x(x_host), y(y0), copy(n);
  TestStream stream;

  EMBER_TEST_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  EMBER_TEST_CUDA(cudaStreamIsCapturing(stream.s, &status));
  CHECK(status == cudaStreamCaptureStatusActive);
  {
    ember::cuda::StreamGuard guard(stream.s);
    ember::cuda::selftest_axpy(n, 2.0f, x.data(), y.data());  // y = 2 x + y
    ember::cuda::check_launch("selftest_axpy");
  }
  EMBER_TEST_CUDA(cudaMemcpyAsync(copy.data(), y.data(), n * sizeof(float), cudaMemcpyDeviceToDevice, stream.s));
  EMBER_TEST_CUDA(cudaMemsetAsync(x.data(), 0, sizeof(float), stream.s));  // x[0] = 0
  cudaGraph_t graph = nullptr;
  EMBER_TEST_CUDA(cudaStreamEndCapture(stream.s, &graph));
  REQUIRE(graph != nullptr);
  EMBER_TEST_CUDA(cudaStreamIsCapturing(stream.s, &status));
  CHECK(status == cudaStreamCaptureStatusNone);

  // Nothing ran during the capture.
  CHECK(y.download() == y0);
  CHECK(x.download() == x_host);
  size_t nodes = 0;
  EMBER_TEST_CUDA(cudaGraphGetNodes(graph, nullptr, &nodes));
  CHECK(nodes == 3);
  std::vector<cudaGraphNode_t> list(nodes);
  EMBER_TEST_CUDA(cudaGraphGetNodes(graph, list.data(), &nodes));
  std::vector<cudaGraphNodeType> types;
  for (cudaGraphNode_t node : list) {
    cudaGraphNodeType t{};
    EMBER_TEST_CUDA(cudaGraphNodeGetType(node, &t));
    types.push_back(t);
  }
  std::sort(types.begin(), types.end());
  CHECK(types == std::vector<cudaGraphNodeType>{cudaGraphNodeTypeKernel, cudaGraphNodeTypeMemcpy,
                                                cudaGraphNodeTypeMemset});

  cudaGraphExec_t exec = nullptr;
  EMBER_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  EMBER_TEST_CUDA(cudaGraphDestroy(graph));  // the executable graph does not need it

  // Each launch runs the three nodes in order with the captured arguments.
  std::vector<float> want_y = y0, want_x = x_host;
  for (int launch = 0; launch < 3; ++launch) {
    EMBER_TEST_CUDA(cudaGraphLaunch(exec, stream.s));
    for (int64_t i = 0; i < n; ++i) want_y[i] = 2.0f * want_x[i] + want_y[i];
    want_x[0] = 0;
  }
  EMBER_TEST_CUDA(cudaStreamSynchronize(stream.s));
  CHECK(y.download() == want_y);
  CHECK(copy.download() == want_y);
  CHECK(x.download() == want_x);
  // The same graph on another stream (here the legacy default stream) runs the same way.
  EMBER_TEST_CUDA(cudaGraphLaunch(exec, nullptr));
  EMBER_TEST_CUDA(cudaDeviceSynchronize());
  for (int64_t i = 0; i < n; ++i) want_y[i] = 2.0f * want_x[i] + want_y[i];
  CHECK(y.download() == want_y);
  EMBER_TEST_CUDA(cudaGraphExecDestroy(exec));
  x.check_guards();
  y.check_guards();
  copy.check_guards();
}

TEST_CASE("cuda graphs: capture refuses the legacy stream, a second begin, and an end without begin",
          "[cuda][graphs]") {
  CHECK(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal) == cudaErrorStreamCaptureUnsupported);
  (void)cudaGetLastError();
  TestStream stream, other;
  DeviceBuffer<float> a(16);
  cudaGraph_t g = nullptr;
  CHECK(cudaStreamEndCapture(stream.s, &g) == cudaErrorIllegalState);
  (void)cudaGetLastError();
  EMBER_TEST_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal));
  CHECK(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal) == cudaErrorIllegalState);
  (void)cudaGetLastError();
  // Work on another, non-blocking stream is not part of the capture and runs.
  EMBER_TEST_CUDA(cudaMemsetAsync(a.data(), 0, 16 * sizeof(float), other.s));
  EMBER_TEST_CUDA(cudaStreamEndCapture(stream.s, &g));
  size_t nodes = 99;
  EMBER_TEST_CUDA(cudaGraphGetNodes(g, nullptr, &nodes));
  CHECK(nodes == 0);
  EMBER_TEST_CUDA(cudaGraphDestroy(g));
  EMBER_TEST_CUDA(cudaStreamSynchronize(other.s));
  CHECK(a.download() == std::vector<float>(16, 0.0f));
}

TEST_CASE("cuda graphs: waiting for or querying other work is refused to a thread that captures",
          "[cuda][graphs]") {
  // Synchronizing or querying a stream or an event outside the capture is one of the "potentially
  // unsafe" calls that a global or thread-local capture forbids to its thread: refused, and the
  // capture is invalidated.
  TestStream stream, other;
  cudaEvent_t done = nullptr;
  EMBER_TEST_CUDA(cudaEventCreate(&done));
  EMBER_TEST_CUDA(cudaEventRecord(done, other.s));
  EMBER_TEST_CUDA(cudaStreamSynchronize(other.s));
  const std::vector<std::pair<const char*, std::function<cudaError_t()>>> calls = {
      {"cudaStreamSynchronize(other)", [&] { return cudaStreamSynchronize(other.s); }},
      {"cudaStreamSynchronize(legacy)", [&] { return cudaStreamSynchronize(nullptr); }},
      {"cudaStreamQuery(other)", [&] { return cudaStreamQuery(other.s); }},
      {"cudaEventQuery", [&] { return cudaEventQuery(done); }},
      {"cudaEventSynchronize", [&] { return cudaEventSynchronize(done); }},
  };
  for (cudaStreamCaptureMode mode : {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal}) {
    for (const auto& [name, call] : calls) {
      INFO(name << (mode == cudaStreamCaptureModeGlobal ? " in global mode" : " in thread-local mode"));
      EMBER_TEST_CUDA(cudaStreamBeginCapture(stream.s, mode));
      CHECK(call() == cudaErrorStreamCaptureUnsupported);
      (void)cudaGetLastError();
      cudaStreamCaptureStatus status{};
      EMBER_TEST_CUDA(cudaStreamIsCapturing(stream.s, &status));
      CHECK(status == cudaStreamCaptureStatusInvalidated);
      end_invalidated(stream.s);
    }
  }
  SECTION("a thread in relaxed mode may wait, and the capture stays valid") {
    DeviceBuffer<float> d(16);
    std::vector<float> host(16, 2.5f);
    EMBER_TEST_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    EMBER_TEST_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
    EMBER_TEST_CUDA(cudaStreamSynchronize(nullptr));
    EMBER_TEST_CUDA(cudaMemcpy(d.data(), host.data(), 16 * sizeof(float), cudaMemcpyHostToDevice));
    EMBER_TEST_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
    cudaGraph_t g = nullptr;
    EMBER_TEST_CUDA(cudaStreamEndCapture(stream.s, &g));
    size_t nodes = 99;
    EMBER_TEST_CUDA(cudaGraphGetNodes(g, nullptr, &nodes));
    CHECK(nodes == 0);
    EMBER_TEST_CUDA(cudaGraphDestroy(g));
    CHECK(d.download() == host);
  }
  // With no capture left, the same calls succeed.
  SECTION("a capture begun in relaxed mode allows them, but not cudaDeviceSynchronize") {
    EMBER_TEST_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeRelaxed));
    EMBER_TEST_CUDA(cudaStreamQuery(other.s));
    EMBER_TEST_CUDA(cudaStreamSynchronize(other.s));
    cudaStreamCaptureStatus status{};
    EMBER_TEST_CUDA(cudaStreamIsCapturing(stream.s, &status));
    CHECK(status == cudaStreamCaptureStatusActive);
    // Synchronizing the device would wait for the capturing stream itself.
    CHECK(cudaDeviceSynchronize() == cudaErrorStreamCaptureUnsupported);
    (void)cudaGetLastError();
    end_invalidated(stream.s);
  }
  SECTION("other threads: refused while a global capture runs, unless they are in thread-local mode") {
    // (capture mode, the other thread's mode, whether it waits too): the combinations run on a GPU.
    const std::vector<std::tuple<cudaStreamCaptureMode, cudaStreamCaptureMode, bool>> cases = {
        {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeGlobal, false},
        {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeGlobal, true},
        {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, false},
        {cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeGlobal, false},
    };
    for (const auto& [capture_mode, thread_mode, wait] : cases) {
      const bool refused = capture_mode == cudaStreamCaptureModeGlobal && thread_mode == cudaStreamCaptureModeGlobal;
      INFO("capture mode " << capture_mode << ", other thread's mode " << thread_mode << (wait ? ", waits" : ", queries"));
      EMBER_TEST_CUDA(cudaStreamBeginCapture(stream.s, capture_mode));
      cudaError_t got = cudaSuccess;
      std::thread([&] {
        cudaStreamCaptureMode m = thread_mode;
        (void)cudaThreadExchangeStreamCaptureMode(&m);
        got = wait ? cudaStreamSynchronize(other.s) : cudaStreamQuery(other.s);
        (void)cudaGetLastError();
      }).join();
      CHECK(got == (refused ? cudaErrorStreamCaptureUnsupported : cudaSuccess));
      if (refused) {
        end_invalidated(stream.s);
      } else {
        cudaGraph_t g = nullptr;
        EMBER_TEST_CUDA(cudaStreamEndCapture(stream.s, &g));
        EMBER_TEST_CUDA(cudaGraphDestroy(g));
      }
    }
  }
  // With no capture left, the same calls succeed.
  for (const auto& [name, call] : calls) {
    INFO(name);
    CHECK(call() == cudaSuccess);
  }
  EMBER_TEST_CUDA(cudaEventDestroy(done));
}

TEST_CASE("cuda graphs: synchronizing with a capturing stream invalidates the capture", "[cuda][graphs]") {
  TestStream stream;
  DeviceBuffer<float> d(64);
  std::vector<float> host(64, 1.0f);

  SECTION("cudaStreamSynchronize") {
    EMBER_TEST_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal));
    CHECK(cudaStreamSynchronize(stream.s) == cudaErrorStreamCaptureUnsupported);
    (void)cudaGetLastError();
    cudaStreamCaptureStatus status{};
    EMBER_TEST_CUDA(cudaStreamIsCapturing(stream.s, &status));
    CHECK(status == cudaStreamCaptureStatusInvalidated);
    // Later work on the stream fails too, and nothing runs.
    CHECK(cudaMemsetAsync(d.data(), 0, 64 * sizeof(float), stream.s) == cudaErrorStreamCaptureInvalidated);
    (void)cudaGetLastError();
    end_invalidated(stream.s);
  }
  SECTION("cudaDeviceSynchronize in global mode") {
    EMBER_TEST_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal));
    CHECK(cudaDeviceSynchronize() == cudaErrorStreamCaptureUnsupported);
    (void)cudaGetLastError();
    end_invalidated(stream.s);
  }
  // The stream works normally after an invalidated capture.
  EMBER_TEST_CUDA(cudaMemcpyAsync(d.data(), host.data(), 64 * sizeof(float), cudaMemcpyHostToDevice, stream.s));
  EMBER_TEST_CUDA(cudaStreamSynchronize(stream.s));
  CHECK(d.download() == host);
}

TEST_CASE("cuda graphs: copies with pageable host memory do not disturb a capture on a non-blocking stream",
          "[cuda][graphs]") {
  // CUDA does not refuse a read of device memory into pageable host memory during a capture, so
  // ember must refuse host reads itself (check_not_capturing, Note [CUDA graphs in ember]).
  TestStream stream;
  std::vector<float> values(64);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * static_cast<float>(i) - 3.0f;
  DeviceBuffer<float> d(values);
  std::vector<float> host(64, 1.0f);

  SECTION("cudaMemcpyAsync on the capturing stream is a copy node, run at each replay") {
    for (cudaMemcpyKind kind : {cudaMemcpyDeviceToHost, cudaMemcpyHostToDevice}) {
      const bool to_host = kind == cudaMemcpyDeviceToHost;
      INFO((to_host ? "device to host" : "host to device"));
      EMBER_TEST_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal));
      if (to_host) {
        EMBER_TEST_CUDA(cudaMemcpyAsync(host.data(), d.data(), 64 * sizeof(float), kind, stream.s));
      } else {
        EMBER_TEST_CUDA(cudaMemcpyAsync(d.data(), host.data(), 64 * sizeof(float), kind, stream.s));
      }
      cudaGraph_t g = nullptr;
      EMBER_TEST_CUDA(cudaStreamEndCapture(stream.s, &g));
      REQUIRE(g != nullptr);
      // Nothing was copied yet.
      CHECK(host == std::vector<float>(64, 1.0f));
      CHECK(d.download() == values);
      size_t nodes = 0;
      cudaGraphNode_t node = nullptr;
      EMBER_TEST_CUDA(cudaGraphGetNodes(g, nullptr, &nodes));
      REQUIRE(nodes == 1);
      EMBER_TEST_CUDA(cudaGraphGetNodes(g, &node, &nodes));
      cudaGraphNodeType type{};
      EMBER_TEST_CUDA(cudaGraphNodeGetType(node, &type));
      CHECK(type == cudaGraphNodeTypeMemcpy);
      // A replay copies what the host memory holds then, not at capture.
      cudaGraphExec_t exec = nullptr;
      EMBER_TEST_CUDA(cudaGraphInstantiate(&exec, g, 0));
      if (!to_host) host[3] = 42.0f;
      EMBER_TEST_CUDA(cudaGraphLaunch(exec, stream.s));
      EMBER_TEST_CUDA(cudaStreamSynchronize(stream.s));
      CHECK((to_host ? host : d.download()) == (to_host ? values : host));
      EMBER_TEST_CUDA(cudaGraphExecDestroy(exec));
      EMBER_TEST_CUDA(cudaGraphDestroy(g));
      host.assign(64, 1.0f);
    }
  }
  SECTION("synchronous cudaMemcpy and cudaMemset in global mode (on the legacy stream, which the capture does not block)") {
    cudaGraph_t g = nullptr;
    EMBER_TEST_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal));
    EMBER_TEST_CUDA(cudaMemcpy(host.data(), d.data(), 64 * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(host == values);  // it ran, and returned once the copy was done
    EMBER_TEST_CUDA(cudaStreamEndCapture(stream.s, &g));
    REQUIRE(g != nullptr);
    EMBER_TEST_CUDA(cudaGraphDestroy(g));
    EMBER_TEST_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal));
    EMBER_TEST_CUDA(cudaMemset(d.data(), 0, sizeof(float)));
    EMBER_TEST_CUDA(cudaStreamEndCapture(stream.s, &g));
    REQUIRE(g != nullptr);
    size_t nodes = 99;
    EMBER_TEST_CUDA(cudaGraphGetNodes(g, nullptr, &nodes));
    CHECK(nodes == 0);
    EMBER_TEST_CUDA(cudaGraphDestroy(g));
    std::vector<float> want = values;
    want[0] = 0.0f;
    CHECK(d.download() == want);
  }
}

TEST_CASE("cuda graphs: cudaMalloc during capture depends on the thread's capture mode", "[cuda][graphs]") {
  TestStream stream;
  void* p = nullptr;

  SECTION("global or thread-local: refused, and the capture is invalidated") {
    for (cudaStreamCaptureMode mode : {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal}) {
      EMBER_TEST_CUDA(cudaStreamBeginCapture(stream.s, mode));
      CHECK(cudaMalloc(&p, 1024) == cudaErrorStreamCaptureUnsupported);
      (void)cudaGetLastError();
      end_invalidated(stream.s);
    }
    // Pinned host memory too.
    EMBER_TEST_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal));
    CHECK(cudaMallocHost(&p, 1024) == cudaErrorStreamCaptureUnsupported);
    (void)cudaGetLastError();
    end_invalidated(stream.s);
  }
  SECTION("relaxed for this thread: allowed (what a caching allocator does)") {
    EMBER_TEST_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    EMBER_TEST_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
    CHECK(mode == cudaStreamCaptureModeGlobal);  // the previous mode comes back
    EMBER_TEST_CUDA(cudaMalloc(&p, 1024));
    EMBER_TEST_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
    cudaGraph_t g = nullptr;
    EMBER_TEST_CUDA(cudaStreamEndCapture(stream.s, &g));
    EMBER_TEST_CUDA(cudaGraphDestroy(g));
    EMBER_TEST_CUDA(cudaFree(p));
  }
  SECTION("a capture begun in relaxed mode allows it") {
    EMBER_TEST_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeRelaxed));
    EMBER_TEST_CUDA(cudaMalloc(&p, 1024));
    cudaGraph_t g = nullptr;
    EMBER_TEST_CUDA(cudaStreamEndCapture(stream.s, &g));
    EMBER_TEST_CUDA(cudaGraphDestroy(g));
    EMBER_TEST_CUDA(cudaFree(p));
  }
  SECTION("another thread: refused while a global capture runs, allowed under thread-local") {
    for (cudaStreamCaptureMode mode : {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal}) {
      EMBER_TEST_CUDA(cudaStreamBeginCapture(stream.s, mode));
      cudaError_t from_other = cudaSuccess;
      std::thread([&] {
        void* q = nullptr;
        from_other = cudaMalloc(&q, 1024);
        if (from_other == cudaSuccess) (void)cudaFree(q);  // cudaFree is unsafe too, and allowed likewise
        (void)cudaGetLastError();
      }).join();
      cudaGraph_t g = nullptr;
      if (mode == cudaStreamCaptureModeGlobal) {
        CHECK(from_other == cudaErrorStreamCaptureUnsupported);
        end_invalidated(stream.s);
      } else {
        CHECK(from_other == cudaSuccess);
        EMBER_TEST_CUDA(cudaStreamEndCapture(stream.s, &g));
        EMBER_TEST_CUDA(cudaGraphDestroy(g));
      }
    }
  }
}

TEST_CASE("cuda graphs: the legacy stream cannot run while a blocking stream captures", "[cuda][graphs]") {
  TestStream blocking(cudaStreamDefault);
  DeviceBuffer<float> d(16);
  EMBER_TEST_CUDA(cudaStreamBeginCapture(blocking.s, cudaStreamCaptureModeRelaxed));
  CHECK(cudaMemsetAsync(d.data(), 0, 16 * sizeof(float), nullptr) == cudaErrorStreamCaptureImplicit);
  (void)cudaGetLastError();
  end_invalidated(blocking.s);
}
