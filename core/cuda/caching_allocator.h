#pragma once
// The policy of ember's CUDA caching allocator: pools, best fit, splitting, merging, stream
// ownership, out-of-memory retry and statistics.
//
// This file is pure C++ and includes no CUDA header: device memory, streams and events come
// through DeviceMemoryBackend, so the same policy compiles in every build flavour and is
// unit-tested on the CPU with a fake backend (tests/test_cuda_caching_allocator.cpp). The CUDA
// adapter (cudaMalloc / cudaFree / cudaEvent*) implements the backend and hooks a
// CachingAllocator into ember::Allocator.
//
// Note [Caching allocator]
// ========================
// Why cache at all? cudaMalloc and cudaFree are slow (tens of microseconds to milliseconds) and
// cudaFree synchronizes the whole device, stalling every stream. A training step allocates and
// frees the same tensors every iteration, so after the first step nearly every request can be
// served from memory freed earlier, with no driver call. The allocator keeps freed memory and
// hands it out again; the memory it holds from the device is "reserved", the part handed to users
// "allocated", the difference "cached".
//
// Segments and blocks. Each backend malloc makes a *segment*. A segment is cut into *blocks*, a
// doubly linked list in address order; every block is allocated, free, or pending (freed by the
// user, but still in use by other streams, see below). Free blocks sit in one of two pools,
// ordered by (stream, size, address).
//
// Rounding. Every request is rounded up to a multiple of 512 bytes (kMinBlockSize): blocks stay
// aligned for any vector load, and sizes that differ by a few bytes share blocks. A request for 0
// bytes returns nullptr and is not counted.
//
// Two pools. Small requests (<= 1 MiB, kSmallSize) are carved from 2 MiB segments (kSmallSegment);
// large requests (> 1 MiB) come from their own pool: requests below 10 MiB (kMinLargeAlloc) get a
// 20 MiB segment (kLargeSegment) that later large requests can share, bigger ones a segment of
// their size rounded up to 2 MiB (kRoundLarge). Keeping the pools apart stops long-lived small
// tensors (biases, scalars) from pinning the big segments that activations need, and vice versa:
// a segment can only go back to the device when all of it is free.
//
// Best fit. A request takes the smallest free block of its pool and stream that is big enough
// (ties broken by the lower address). If the block is bigger than needed it is split: the front
// goes to the user, the remainder becomes a new free block. The small pool splits whenever the
// remainder is at least 512 bytes; the large pool only when the remainder exceeds 1 MiB, because
// a remainder below that could only serve a small request, and small requests have their own pool.
//
// Oversize blocks (the idea of PyTorch's max_split_size, with a fixed threshold). A free block
// bigger than 20 MiB can only come from a dedicated segment of one big request. Splitting it for a
// small request would pin the whole big segment behind a small tensor, so a block over kLargeSegment
// is "oversize": it is never split; a request of at most 20 MiB never takes it; a bigger request
// takes it whole only when less than 20 MiB of it would go unused. Otherwise the request gets a
// new segment, and the idle oversize block goes back to the device at the next empty_cache() or
// out-of-memory retry.
//
// Merging. When a block is freed it merges with its free neighbours in the same segment, so a
// segment whose blocks are all free is again one block, and can be handed out whole or returned.
//
// Streams. CUDA work on one stream is ordered; across streams it is not. A block remembers the
// stream it was allocated on, and a free block is only reused for a request on that same stream:
// the user's kernels on that stream that still read the block are queued before any kernel of the
// next user, so the memory can be reused at once, without waiting. If the block is also used on
// other streams (a tensor handed to a copy stream, say), the user says so with record_stream(p, s).
// On deallocate the allocator then records an event on each such stream and keeps the block
// *pending*: it goes back to the pool only when all those events are done. Events are polled
// lazily: at the start of each allocate, and drained after a device synchronize in empty_cache()
// and in the out-of-memory path.
//
// Out of memory. When the backend malloc fails, the allocator synchronizes the device (every
// pending event is then done), returns pending blocks to the pools, and looks for a fitting free
// block again; if there is none it gives every unsplit free segment (of any pool and stream) back
// to the device and retries the malloc once. If that fails too it throws ember::Error saying how
// much was requested, how much ember has allocated and reserved, and how much the device has free,
// with a hint. The allocator stays consistent: later allocations work.
//
// Direct mode (options.caching = false, EMBER_CUDA_ALLOC=direct). Every request goes straight to
// the backend with its exact size and every free straight back (cudaFree synchronizes, so streams
// need no events). No caching means tools like compute-sanitizer see each tensor as its own
// allocation and catch out-of-bounds accesses at the tensor's real end. Slow; for debugging.
//
// Statistics. allocated_bytes counts the sizes of blocks held by users (rounded sizes; exact sizes
// in direct mode), reserved_bytes the sizes of all segments; both with a peak since construction
// or reset_peak(). allocation_count / free_count count allocate / deallocate calls (0-byte requests
// and nullptr frees excluded); cache_hits counts requests served from a free block, cache_misses
// those that needed a new segment; segment_count is the current number of segments; oom_count
// counts requests that ended in an out-of-memory error; num_alloc_retries counts the times the
// cache was flushed to retry a failed malloc.
//
// Private pools (PyTorch's graph pools). A captured CUDA graph (core/cuda/graph.h) replays
// kernels with the addresses they had at capture time: every tensor the captured work allocated
// must keep its memory for as long as the graph may be replayed, and nothing outside the graph may
// be handed that memory, even after the tensor itself was freed. So while a stream captures,
// its allocations come from a private pool (begin_allocate_to_pool): blocks carved from segments
// that belong to that pool only. A block freed during the capture goes back to the pool and may
// serve a later allocation of the same capture — the replay runs the same work in the same
// order, so that reuse is as safe as it was at capture time — but no ordinary allocation ever
// gets it, and empty_cache() keeps the pool's segments. When the graph is destroyed its owner
// calls release_pool(): the pool's segments become ordinary cache (blocks still held by tensors
// from the capture join it when they are freed). A free pool is ordered by (pool, stream, size,
// address), so pools never mix; pool 0 is the ordinary cache.
//
// Thread safety: every public member function takes one mutex; the backend is only called with
// that mutex held.

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace ember::cuda {

// A stream as an opaque integer (a cudaStream_t cast to uintptr_t; the default stream is 0).
using StreamId = uintptr_t;
// An event as an opaque integer (a cudaEvent_t cast to uintptr_t).
using EventId = uintptr_t;
// A private pool (see the Note); 0 is the ordinary cache.
using PoolId = uint64_t;

// What the allocator needs from one device. The CUDA adapter implements it with cudaMalloc /
// cudaFree / cudaEventRecord / cudaEventQuery; the tests with host memory and controllable events.
// The allocator calls it with its own mutex held.
class DeviceMemoryBackend {
 public:
  virtual ~DeviceMemoryBackend() = default;
  // `bytes` of device memory, or nullptr when the device is out of memory (never throws for OOM;
  // may throw ember::Error for other failures).
  virtual void* malloc(size_t bytes) = 0;
  // Returns memory from malloc. Must be safe while kernels may still use it (cudaFree synchronizes).
  virtual void free(void* p) = 0;
  // Device memory free now and in total (for the out-of-memory message).
  virtual size_t free_bytes() = 0;
  virtual size_t total_bytes() = 0;
  // Records an event on `stream` that completes when the work queued there so far is done.
  virtual EventId record_event(StreamId stream) = 0;
  // Whether the event has completed. Does not block.
  virtual bool event_done(EventId event) = 0;
  virtual void destroy_event(EventId event) = 0;
  // Waits for all work on the device, every stream.
  virtual void synchronize() = 0;
};

struct CachingAllocatorOptions {
  // false = EMBER_CUDA_ALLOC=direct: every request goes straight to backend malloc / free.
  bool caching = true;
};

struct CachingAllocatorStats {
  int64_t allocated_bytes = 0;       // bytes in blocks held by users
  int64_t peak_allocated_bytes = 0;  // high-water mark of allocated_bytes
  int64_t reserved_bytes = 0;        // bytes in segments obtained from the backend (allocated + cached)
  int64_t peak_reserved_bytes = 0;   // high-water mark of reserved_bytes
  int64_t allocation_count = 0;      // successful allocate() calls with bytes > 0
  int64_t free_count = 0;            // deallocate() calls with p != nullptr
  int64_t cache_hits = 0;            // requests served from a cached free block
  int64_t cache_misses = 0;          // requests that needed a backend malloc
  int64_t segment_count = 0;         // segments held now
  int64_t oom_count = 0;             // requests that threw out of memory
  int64_t num_alloc_retries = 0;     // cache flushes to retry a failed backend malloc
};

class CachingAllocator {
 public:
  using Options = CachingAllocatorOptions;
  using Stats = CachingAllocatorStats;

  static constexpr size_t kMinBlockSize = 512;                  // every size is a multiple of this
  static constexpr size_t kSmallSize = size_t{1} << 20;         // largest request of the small pool
  static constexpr size_t kSmallSegment = size_t{2} << 20;      // segment size of the small pool
  static constexpr size_t kMinLargeAlloc = size_t{10} << 20;    // large requests below get kLargeSegment
  static constexpr size_t kLargeSegment = size_t{20} << 20;     // shared large segment; oversize above
  static constexpr size_t kRoundLarge = size_t{2} << 20;        // bigger segments round up to this

  // `backend` must outlive the allocator; `device` only names the device in messages.
  CachingAllocator(DeviceMemoryBackend& backend, int device, Options options = {});
  // Synchronizes, destroys pending events and returns every free segment to the backend. A
  // segment that still holds an allocated block is left to the device rather than freed under its
  // user. Never throws.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // At least `bytes` bytes usable on `stream`; nullptr for 0 bytes. Throws ember::Error when the
  // device is out of memory even after flushing the cache.
  void* allocate(size_t bytes, StreamId stream);
  // Frees a pointer from allocate (nullptr: no-op). Throws ember::Error for a pointer this
  // allocator does not hold (a double free or a foreign pointer).
  void deallocate(void* p);
  // Declares that the allocated block `p` is also used on `stream`: when it is freed it is not
  // reused before the work queued on `stream` at free time is done. A no-op for the block's own
  // stream and in direct mode. Throws ember::Error for a pointer this allocator does not hold.
  void record_stream(void* p, StreamId stream);
  // Synchronizes the device, then returns every unsplit free segment of the ordinary cache to the
  // backend (private pools keep theirs).
  void empty_cache();

  // Private pools (see the Note). create_pool() returns a new pool id. Between
  // begin_allocate_to_pool(pool, stream) and end_allocate_to_pool(stream), every allocation on
  // `stream` comes from `pool`. release_pool() hands the pool's memory back to the ordinary cache.
  // begin throws ember::Error in direct mode (freed memory would go back to the device) and when
  // `stream` already allocates to a pool.
  PoolId create_pool();
  void begin_allocate_to_pool(PoolId pool, StreamId stream);
  void end_allocate_to_pool(StreamId stream);
  void release_pool(PoolId pool);
  // Bytes of segments that belong to private pools now.
  int64_t private_pool_bytes() const;
  Stats stats() const;
  // Sets the peaks to the current values.
  void reset_peak();
  // A readable dump of the stats, every segment and its blocks, for debugging.
  std::string describe() const;

  int device() const { return device_; }
  bool caching() const { return options_.caching; }

 private:
  enum class PoolKind { small, large };
  enum class BlockState { allocated, pending, free };
  struct Block;
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreePool = std::set<Block*, BlockOrder>;
  struct PendingFree {
    Block* block;
    std::vector<EventId> events;
  };

  static size_t round_size(size_t bytes);
  static size_t segment_size(size_t rounded);
  FreePool& pool(PoolKind kind);
  void* allocate_direct(size_t bytes);
  void deallocate_direct(void* p);
  Block* find_free_block(PoolKind kind, PoolId pool_id, StreamId stream, size_t size);
  Block* add_segment(void* base, size_t bytes, PoolKind kind, PoolId pool_id, StreamId stream);
  Block* split(Block* block, size_t size);
  void free_block(Block* block);
  void process_events();
  void synchronize_and_drain_events();
  void release_cached_segments();
  [[noreturn]] void throw_out_of_memory(size_t requested, size_t segment);
  void add_allocated(int64_t delta);
  void add_reserved(int64_t delta);

  DeviceMemoryBackend& backend_;
  const int device_;
  const Options options_;
  mutable std::mutex mu_;
  FreePool small_pool_, large_pool_;
  std::unordered_map<void*, Block*> allocated_;        // user pointer -> its block
  std::map<uintptr_t, Block*> segments_;               // segment base address -> its first block
  std::vector<PendingFree> pending_;                   // freed blocks waiting for stream events
  std::unordered_map<void*, size_t> direct_;           // direct mode: pointer -> exact size
  std::map<StreamId, PoolId> capturing_;                // streams allocating to a private pool
  PoolId next_pool_ = 1;
  Stats stats_;
};

}  // namespace ember::cuda
