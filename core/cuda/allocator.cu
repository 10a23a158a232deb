// The device side of core/: cuda_built(), cuda_device_count(), allocator_for(cuda:n).
//
// Each CUDA device gets one allocator, created on first use: ember::Allocator (core/allocator.h)
// over the device's caching allocator (core/cuda/caching_allocator.h), whose backing memory
// comes from cudaMalloc/cudaFree.

#include "cuda_api.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "../allocator.h"
#include "caching_allocator.h"
#include "../error.h"
#include "graph.h"
#include "ledger.h"
#include "runtime.h"

namespace ember {

bool cuda_built() { return true; }
int cuda_device_count() { return cuda::device_count(); }
bool cuda_emulated() {
#if EMBER_SIMT
  return true;
#else
  return false;
#endif
}

namespace {

// The caching allocator's view of one device: cudaMalloc/cudaFree and events, each call made
// with the device current (the allocator may be called from any host thread).
class CudaBackend final : public cuda::DeviceMemoryBackend {
 public:
  explicit CudaBackend(int device) : device_(device) {}
  void* malloc(size_t bytes) override {
    const cuda::DeviceGuard guard(device_);
    void* p = nullptr;
    // A new segment during a graph capture is the allocator's business, not the graph's: it is
    // not part of the captured work and stays reserved for the graph's private pool. CUDA forbids
    // cudaMalloc in a global-mode capture unless this thread relaxes its mode, as PyTorch does.
    cudaError_t err = cudaSuccess;
    {
      const cuda::RelaxedCaptureMode relaxed;
      err = cudaMalloc(&p, bytes);
    }
    if (err != cudaSuccess) {
      (void)cudaGetLastError();  // out of memory is answered with nullptr, not a sticky error
      return nullptr;
    }
    cuda::ledger_alloc(bytes);
    return p;
  }
  void free(void* p) override {
    const cuda::DeviceGuard guard(device_);
    EMBER_CUDA_CHECK(cudaFree(p));
  }
  size_t free_bytes() override { return mem_info().first; }
  size_t total_bytes() override { return mem_info().second; }
  cuda::EventId record_event(cuda::StreamId stream) override {
    const cuda::DeviceGuard guard(device_);
    cudaEvent_t e = nullptr;
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    EMBER_CUDA_CHECK(cudaEventRecord(e, reinterpret_cast<cudaStream_t>(stream)));
    return reinterpret_cast<cuda::EventId>(e);
  }
  bool event_done(cuda::EventId event) override {
    // Every allocation polls, also during a capture, where CUDA refuses cudaEventQuery to a thread
    // in global or thread-local mode. The events are of eager work outside the capture.
    const cuda::RelaxedCaptureMode relaxed;
    const cudaError_t err = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    EMBER_CUDA_CHECK(err);
    return true;
  }
  void destroy_event(cuda::EventId event) override {
    (void)cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event));
  }
  void synchronize() override {
    const cuda::DeviceGuard guard(device_);
    EMBER_CUDA_CHECK(cudaDeviceSynchronize());
  }

 private:
  std::pair<size_t, size_t> mem_info() const {
    const cuda::DeviceGuard guard(device_);
    size_t free_b = 0, total_b = 0;
    EMBER_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return {free_b, total_b};
  }
  int device_;
};

// ember::Allocator for one CUDA device: the caching allocator on the current stream.
// EMBER_CUDA_ALLOC=direct bypasses the cache (every tensor is its own cudaMalloc), which lets
// compute-sanitizer or the SIMT emulator see the exact end of each buffer.
class CudaDeviceAllocator final : public Allocator {
 public:
  explicit CudaDeviceAllocator(int device) : backend_(device), caching_(backend_, device, options()) {}
  void* allocate(size_t bytes) override {
    const cuda::DeviceGuard guard(caching_.device());
    return caching_.allocate(bytes, reinterpret_cast<cuda::StreamId>(cuda::current_stream()));
  }
  void deallocate(void* ptr, size_t) noexcept override {
    try {
      caching_.deallocate(ptr);
    } catch (const std::exception& e) {
      // A pointer this allocator never handed out: a bug in ember, reported but not thrown
      // (deallocate runs in destructors).
      std::fprintf(stderr, "ember: cuda:%d: %s\n", caching_.device(), e.what());
    }
  }
  Device device() const override { return Device::cuda(caching_.device()); }
  AllocatorStats stats() const override {
    const cuda::CachingAllocatorStats c = caching_.stats();
    AllocatorStats s;
    s.bytes_in_use = c.allocated_bytes;
    s.peak_bytes_in_use = c.peak_allocated_bytes;
    s.allocation_count = c.allocation_count;
    s.free_count = c.free_count;
    return s;
  }
  void reset_peak() override { caching_.reset_peak(); }
  cuda::CachingAllocator& caching() { return caching_; }

 private:
  static cuda::CachingAllocatorOptions options() {
    cuda::CachingAllocatorOptions o;
    o.caching = !cuda::env_switch("EMBER_CUDA_ALLOC", "caching", "direct");
    return o;
  }
  CudaBackend backend_;
  cuda::CachingAllocator caching_;
};

CudaDeviceAllocator& device_allocator(int device) {
  EMBER_CHECK(device >= 0 && device < cuda::device_count(), "device cuda:", device,
              " is not available: this machine has ", cuda::device_count(), " CUDA device",
              cuda::device_count() == 1 ? "" : "s");
  static std::mutex mu;
  static std::vector<std::unique_ptr<CudaDeviceAllocator>> allocators;
  std::lock_guard<std::mutex> lock(mu);
  if (allocators.empty()) allocators.resize(static_cast<size_t>(cuda::device_count()));
  auto& slot = allocators[static_cast<size_t>(device)];
  if (!slot) slot = std::make_unique<CudaDeviceAllocator>(device);
  return *slot;
}

}  // namespace

namespace cuda {

CachingAllocatorStats memory_stats(int device) { return device_allocator(device).caching().stats(); }
void empty_cache(int device) { device_allocator(device).caching().empty_cache(); }
void reset_peak_memory_stats(int device) { device_allocator(device).caching().reset_peak(); }
std::string memory_summary(int device) { return device_allocator(device).caching().describe(); }
void record_stream(void* ptr, int device, Stream s) {
  device_allocator(device).caching().record_stream(ptr, reinterpret_cast<StreamId>(s));
}

uint64_t create_memory_pool(int device) { return device_allocator(device).caching().create_pool(); }
void begin_allocate_to_pool(int device, uint64_t pool, Stream s) {
  device_allocator(device).caching().begin_allocate_to_pool(pool, reinterpret_cast<StreamId>(s));
}
void end_allocate_to_pool(int device, Stream s) {
  device_allocator(device).caching().end_allocate_to_pool(reinterpret_cast<StreamId>(s));
}
void release_memory_pool(int device, uint64_t pool) { device_allocator(device).caching().release_pool(pool); }

}  // namespace cuda

Allocator& allocator_for(Device d) {
  if (d.is_cpu()) return cpu_allocator();
  return device_allocator(d.index);
}

}  // namespace ember
