#include "allocator.h"

#include <cstdlib>
#include <new>

#include "error.h"

namespace ember {

void* CpuAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  // aligned_alloc wants a size that is a multiple of the alignment.
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) {
    EMBER_THROW("CPU allocator: out of memory allocating ", bytes, " bytes (", in_use_.load(),
                " bytes in use)");
  }
  const int64_t now = in_use_.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
  int64_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  allocs_.fetch_add(1);
  return p;
}

void CpuAllocator::deallocate(void* ptr, size_t bytes) noexcept {
  if (ptr == nullptr) return;
  std::free(ptr);
  in_use_.fetch_sub(static_cast<int64_t>(bytes));
  frees_.fetch_add(1);
}

AllocatorStats CpuAllocator::stats() const {
  AllocatorStats s;
  s.bytes_in_use = in_use_.load();
  s.peak_bytes_in_use = peak_.load();
  s.allocation_count = allocs_.load();
  s.free_count = frees_.load();
  return s;
}

void CpuAllocator::reset_peak() { peak_.store(in_use_.load()); }

CpuAllocator& cpu_allocator() {
  static CpuAllocator instance;
  return instance;
}

#ifndef EMBER_HAVE_CUDA
Allocator& allocator_for(Device d) {
  EMBER_CHECK(d.is_cpu(), "device ", d, " is not available: this build of ember has no CUDA backend "
              "(configure with -DEMBER_CUDA=ON on a machine with the CUDA toolkit)");
  return cpu_allocator();
}
#endif

}  // namespace ember
