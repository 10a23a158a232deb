#pragma once
// Allocator interface and the CPU allocator.
//
// Every Storage owns its bytes through an Allocator. The CPU allocator hands out 64-byte
// aligned blocks (one cache line, and the widest AVX-512 load) and counts what it hands out.
// The CUDA caching allocator (core/cuda/caching_allocator.h) implements the same interface.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "device.h"

namespace ember {

struct AllocatorStats {
  int64_t bytes_in_use = 0;      // currently allocated by users
  int64_t peak_bytes_in_use = 0; // high-water mark of bytes_in_use
  int64_t allocation_count = 0;  // total successful allocate() calls
  int64_t free_count = 0;        // total deallocate() calls
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns a block of at least `bytes` bytes (nullptr for 0 bytes). Throws ember::Error on failure.
  virtual void* allocate(size_t bytes) = 0;
  // Returns a block obtained from allocate(ptr, bytes). Never throws.
  virtual void deallocate(void* ptr, size_t bytes) noexcept = 0;
  virtual Device device() const = 0;
  virtual AllocatorStats stats() const = 0;
  virtual void reset_peak() = 0;
};

// Note [CPU block cache]
// A training step allocates and frees the same large buffers (activations, gradients, im2col
// columns) every iteration. glibc serves blocks above its mmap threshold with fresh mmap/munmap
// pairs, so each step paid page faults and kernel zeroing for every large tensor (a third of
// the run's time was in the kernel). Freed blocks of at least kCacheMin bytes are therefore kept
// in per-size free lists and handed out again for the same rounded size, up to kCacheMax bytes
// in total; empty_cache() returns them to the system.
class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kCacheMin = size_t{1} << 16;      // blocks this large are cached
  static constexpr size_t kCacheMax = size_t{2} << 30;      // at most this many bytes cached
  ~CpuAllocator() override;
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) noexcept override;
  Device device() const override { return Device::cpu(); }
  AllocatorStats stats() const override;
  void reset_peak() override;
  // Frees every cached block.
  void empty_cache();
  int64_t cached_bytes() const;

 private:
  static size_t round_size(size_t bytes);
  std::atomic<int64_t> in_use_{0}, peak_{0}, allocs_{0}, frees_{0};
  mutable std::mutex cache_mu_;
  std::map<size_t, std::vector<void*>> cache_;  // rounded size -> free blocks
  size_t cached_ = 0;
};

// The process-wide CPU allocator (a function-local static: no global constructors in headers).
CpuAllocator& cpu_allocator();

// The allocator for a device: the CPU allocator, or the CUDA allocator of device n.
Allocator& allocator_for(Device d);

}  // namespace ember
