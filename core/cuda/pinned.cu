// Pinned (page-locked) host memory and asynchronous copies (see Note [Pinned host memory]).

#include "cuda_api.h"

#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "../error.h"
#include "ledger.h"
#include "runtime.h"

namespace ember::cuda {

// Note [Pinned host memory]
// A copy from ordinary (pageable) host memory to the GPU goes through a driver staging buffer
// and blocks the host; from page-locked memory the DMA engine reads the bytes directly, so
// cudaMemcpyAsync returns at once and the copy overlaps kernels on other streams. Page-locking
// is slow (cudaHostAlloc costs about as much as the copy itself), so freed pinned blocks are
// cached by size and handed out again — but only once every asynchronous copy that read the
// block has finished: each async copy records an event on its stream against the block, and a
// freed block with pending events waits in the cache until they have all completed.
namespace {

struct PinnedBlock {
  size_t size = 0;
  bool in_use = false;
  std::vector<cudaEvent_t> pending;  // events of async copies that read or write this block
};

class PinnedPool {
 public:
  void* allocate(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t size = round(bytes);
    auto range = free_.equal_range(size);
    for (auto it = range.first; it != range.second; ++it) {
      PinnedBlock& b = blocks_.at(it->second);
      if (!events_done(b)) continue;
      void* p = it->second;
      free_.erase(it);
      b.in_use = true;
      return p;
    }
    void* p = nullptr;
    const cudaError_t err = cudaHostAlloc(&p, size, cudaHostAllocDefault);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      EMBER_THROW("pin_memory: could not allocate ", size, " bytes of pinned host memory (", cudaGetErrorString(err),
                  ")");
    }
    blocks_[p] = PinnedBlock{size, true, {}};
    return p;
  }
  void deallocate(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(p);
    if (it == blocks_.end()) return;
    it->second.in_use = false;
    free_.emplace(it->second.size, p);
  }
  // Records an event on `s` against the block holding p (a pinned pointer, possibly interior).
  void record_use(const void* p, Stream s) {
    std::lock_guard<std::mutex> lock(mu_);
    PinnedBlock* b = find(p);
    if (b == nullptr) return;
    cudaEvent_t e = nullptr;
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    EMBER_CUDA_CHECK(cudaEventRecord(e, s));
    b->pending.push_back(e);
  }
  bool contains(const void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    return find(p) != nullptr;
  }

 private:
  static size_t round(size_t bytes) {
    // Powers of two from 4 KiB: few distinct sizes, so batches of one shape reuse blocks.
    size_t s = 4096;
    while (s < bytes) s <<= 1;
    return s;
  }
  static bool events_done(PinnedBlock& b) {
    while (!b.pending.empty()) {
      const cudaError_t err = cudaEventQuery(b.pending.back());
      if (err == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return false;
      }
      (void)cudaEventDestroy(b.pending.back());
      b.pending.pop_back();
    }
    return true;
  }
  PinnedBlock* find(const void* p) {
    auto it = blocks_.upper_bound(const_cast<void*>(p));
    if (it == blocks_.begin()) return nullptr;
    --it;
    const auto* base = static_cast<const char*>(it->first);
    const auto* q = static_cast<const char*>(p);
    return q >= base && q < base + it->second.size ? &it->second : nullptr;
  }
  std::mutex mu_;
  std::map<void*, PinnedBlock> blocks_;     // every pinned block ever allocated, by address
  std::multimap<size_t, void*> free_;        // freed blocks by size
};

PinnedPool& pinned_pool() {
  static PinnedPool* pool = new PinnedPool;  // never destroyed: blocks may be freed during exit
  return *pool;
}

}  // namespace

void* pinned_allocate(size_t bytes) { return bytes ? pinned_pool().allocate(bytes) : nullptr; }
void pinned_free(void* p) {
  if (p) pinned_pool().deallocate(p);
}
bool is_pinned(const void* p) { return p != nullptr && pinned_pool().contains(p); }

void copy_bytes_async(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  EMBER_CHECK(dst_device.is_cuda() != src_device.is_cuda(),
              "copy_bytes_async: expected a copy between the CPU and a CUDA device, got ", src_device, " -> ",
              dst_device);
  const void* host = dst_device.is_cpu() ? dst : src;
  EMBER_CHECK(is_pinned(host), "non_blocking copy: the host memory is not pinned (use pin_memory())");
  const DeviceGuard guard(dst_device.is_cuda() ? dst_device.index : src_device.index);
  const Stream s = current_stream();
  recorded_call(
      CallKind::copy, dst_device.is_cpu() ? "cudaMemcpyAsync DtoH" : "cudaMemcpyAsync HtoD", s,
      [&] { return dst_device.is_cpu() ? cost(static_cast<double>(bytes), 0) : cost(0, static_cast<double>(bytes)); },
      [&] {
        EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes,
                                         dst_device.is_cpu() ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, s));
      });
  pinned_pool().record_use(host, s);
}

// ---- streams and events ------------------------------------------------------------------------

StreamHandle::StreamHandle(int device) : device_(device) {
  const DeviceGuard guard(device);
  EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}
StreamHandle::~StreamHandle() {
  if (stream_) (void)cudaStreamDestroy(stream_);
}

Event::Event(int device) {
  const DeviceGuard guard(device);
  EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}
Event::~Event() {
  if (event_) (void)cudaEventDestroy(event_);
}
void Event::record(Stream s) { EMBER_CUDA_CHECK(cudaEventRecord(event_, s)); }
void Event::wait_on(Stream s) const { EMBER_CUDA_CHECK(cudaStreamWaitEvent(s, event_, 0)); }
void Event::synchronize() const { EMBER_CUDA_CHECK(cudaEventSynchronize(event_)); }
bool Event::query() const {
  const cudaError_t err = cudaEventQuery(event_);
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  EMBER_CUDA_CHECK(err);
  return true;
}

}  // namespace ember::cuda
