// The device side of core/: cuda_built(), cuda_device_count(), allocator_for(cuda:n).
//
// Each CUDA device gets one allocator, created on first use: ember::Allocator (core/allocator.h)
// over the device's caching allocator (core/cuda_caching_allocator.h), whose backing memory
// comes from cudaMalloc/cudaFree.

#include "launch.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "../../core/allocator.h"
#include "../../core/error.h"
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

// Device memory straight from cudaMalloc (placeholder until the caching allocator is wired in).
class CudaDeviceAllocator final : public Allocator {
 public:
  explicit CudaDeviceAllocator(int device) : device_(device) {}
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    const cuda::DeviceGuard guard(device_);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      EMBER_THROW("cuda:", device_, ": out of memory: tried to allocate ", bytes, " bytes (", free_b,
                  " bytes free of ", total_b, ")");
    }
    std::lock_guard<std::mutex> lock(mu_);
    stats_.bytes_in_use += static_cast<int64_t>(bytes);
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    stats_.allocation_count += 1;
    return p;
  }
  void deallocate(void* ptr, size_t bytes) noexcept override {
    if (ptr == nullptr) return;
    const int prev = [] {
      int d = 0;
      (void)cudaGetDevice(&d);
      return d;
    }();
    (void)cudaSetDevice(device_);
    (void)cudaFree(ptr);
    (void)cudaSetDevice(prev);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.bytes_in_use -= static_cast<int64_t>(bytes);
    stats_.free_count += 1;
  }
  Device device() const override { return Device::cuda(device_); }
  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_bytes_in_use = stats_.bytes_in_use;
  }

 private:
  int device_;
  mutable std::mutex mu_;
  AllocatorStats stats_;
};

}  // namespace

Allocator& allocator_for(Device d) {
  if (d.is_cpu()) return cpu_allocator();
  EMBER_CHECK(d.index >= 0 && d.index < cuda::device_count(), "device ", d, " is not available: this machine has ",
              cuda::device_count(), " CUDA device", cuda::device_count() == 1 ? "" : "s");
  static std::mutex mu;
  static std::vector<std::unique_ptr<CudaDeviceAllocator>> allocators;
  std::lock_guard<std::mutex> lock(mu);
  if (allocators.empty()) allocators.resize(static_cast<size_t>(cuda::device_count()));
  auto& slot = allocators[static_cast<size_t>(d.index)];
  if (!slot) slot = std::make_unique<CudaDeviceAllocator>(d.index);
  return *slot;
}

}  // namespace ember
