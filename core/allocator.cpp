#include "allocator.h"

#include <cstdlib>
#include <new>

#include "error.h"

namespace ember {

namespace {

// Note [CPU small blocks]
// A one-element op spent more time in the allocator than in its kernel: aligned_alloc of a
// 64-byte block takes glibc's memalign path (it carves an aligned chunk out of a larger one and
// frees the rest), and the matching free() splits and merges chunks again. Freed blocks of at
// most kSmallMax bytes are therefore kept in the freeing thread's own free lists (one per 64-byte
// size class, at most kSmallPerClass blocks each, so at most 36 KiB per thread) and handed out
// again by that thread's next allocation of the same class, without a lock. Every block comes from
// aligned_alloc, so a block made on one thread and freed on another simply joins the second
// thread's lists. A thread's lists go back to the system when the thread exits; empty_cache()
// empties the calling thread's. (Note [CPU block cache] in allocator.h covers the large blocks.)
constexpr size_t kSmallMax = 512;
constexpr int kSmallPerClass = 16;
constexpr int kSmallClasses = static_cast<int>(kSmallMax / CpuAllocator::kAlignment);

// The calling thread's small free blocks.
struct SmallBlocks {
  void* blocks[kSmallClasses][kSmallPerClass];
  int count[kSmallClasses] = {};
  void release() {
    for (int c = 0; c < kSmallClasses; ++c) {
      for (int i = 0; i < count[c]; ++i) std::free(blocks[c][i]);
      count[c] = 0;
    }
  }
  ~SmallBlocks();
};
// Set when the thread's lists are gone (its exit): later frees on it go straight to free().
// A plain bool, so it stays readable while other thread-local destructors run.
thread_local bool t_small_gone = false;
thread_local SmallBlocks t_small;
SmallBlocks::~SmallBlocks() {
  release();
  t_small_gone = true;
}

// The size class of a rounded size (a multiple of kAlignment up to kSmallMax).
int small_class(size_t rounded) { return static_cast<int>(rounded / CpuAllocator::kAlignment) - 1; }

}  // namespace

size_t CpuAllocator::round_size(size_t bytes) {
  // aligned_alloc wants a multiple of the alignment; cached sizes round to 4 KiB pages so that
  // nearby sizes share a free list.
  const size_t unit = bytes >= kCacheMin ? 4096 : kAlignment;
  return (bytes + unit - 1) / unit * unit;
}

CpuAllocator::~CpuAllocator() { empty_cache(); }

void* CpuAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t rounded = round_size(bytes);
  void* p = nullptr;
  if (rounded <= kSmallMax && !t_small_gone) {
    SmallBlocks& small = t_small;
    int& n = small.count[small_class(rounded)];
    if (n > 0) p = small.blocks[small_class(rounded)][--n];
  } else if (rounded >= kCacheMin) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(rounded);
    if (it != cache_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      cached_ -= rounded;
    }
  }
  if (p == nullptr) p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) {
    empty_cache();  // give the cached blocks back and try once more
    p = std::aligned_alloc(kAlignment, rounded);
  }
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
  in_use_.fetch_sub(static_cast<int64_t>(bytes));
  frees_.fetch_add(1);
  const size_t rounded = round_size(bytes);
  if (rounded <= kSmallMax && !t_small_gone) {
    SmallBlocks& small = t_small;
    int& n = small.count[small_class(rounded)];
    if (n < kSmallPerClass) {
      small.blocks[small_class(rounded)][n++] = ptr;
      return;
    }
  } else if (rounded >= kCacheMin) {
    try {
      std::lock_guard<std::mutex> lock(cache_mu_);
      if (cached_ + rounded <= kCacheMax) {
        cache_[rounded].push_back(ptr);
        cached_ += rounded;
        return;
      }
    } catch (...) {
      // out of memory growing a free list: just free the block
    }
  }
  std::free(ptr);
}

void CpuAllocator::empty_cache() {
  if (!t_small_gone) t_small.release();
  std::lock_guard<std::mutex> lock(cache_mu_);
  for (auto& [size, blocks] : cache_)
    for (void* p : blocks) std::free(p);
  cache_.clear();
  cached_ = 0;
}

int64_t CpuAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  return static_cast<int64_t>(cached_);
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

#if !EMBER_CUDA_BACKEND
Allocator& allocator_for(Device d) {
  EMBER_CHECK(d.is_cpu(), "device ", d, " is not available: this build of ember has no CUDA backend "
              "(configure with -DEMBER_CUDA=ON on a machine with the CUDA toolkit)");
  return cpu_allocator();
}
#endif

}  // namespace ember
