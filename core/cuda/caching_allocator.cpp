#include "caching_allocator.h"

// The policy is explained in Note [Caching allocator] (cuda_caching_allocator.h).

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <memory>
#include <sstream>

#include "../error.h"

namespace ember::cuda {

namespace {

// "512 B", "1.50 KiB", "20.00 MiB", "3.25 GiB".
std::string format_bytes(size_t bytes) {
  static const char* const units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 3) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f %s", v, units[u]);
  return buf;
}

// "20.00 MiB (20971520 bytes)": human readable and exact.
std::string format_bytes_exact(size_t bytes) {
  return format_bytes(bytes) + " (" + std::to_string(bytes) + " bytes)";
}

std::string format_pointer(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%" PRIxPTR, reinterpret_cast<uintptr_t>(p));
  return buf;
}

}  // namespace

// One block of a segment. Blocks of a segment form a doubly linked list in address order; the
// first block (prev == nullptr) is the segment's head and is never merged away.
struct CachingAllocator::Block {
  char* ptr = nullptr;
  size_t size = 0;
  StreamId stream = 0;  // the stream it was allocated on; a free block serves only this stream
  PoolId pool_id = 0;   // the private pool of its segment, 0 for the ordinary cache
  PoolKind pool = PoolKind::small;
  BlockState state = BlockState::free;
  Block* prev = nullptr;
  Block* next = nullptr;
  std::vector<StreamId> stream_uses;  // other streams that use it (record_stream)
};

// Free pools are ordered by (private pool, stream, size, address): lower_bound({pool, stream,
// size, 0}) is the best fit, ties going to the lower address.
bool CachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  if (a->pool_id != b->pool_id) return a->pool_id < b->pool_id;
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
}

CachingAllocator::CachingAllocator(DeviceMemoryBackend& backend, int device, Options options)
    : backend_(backend), device_(device), options_(options) {}

CachingAllocator::~CachingAllocator() {
  try {
    synchronize_and_drain_events();
    release_cached_segments();
  } catch (...) {
    // A destructor never throws; a failing backend at teardown leaves the memory to the driver.
  }
  for (auto& [base, head] : segments_) {
    for (Block* b = head; b != nullptr;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
  }
}

size_t CachingAllocator::round_size(size_t bytes) {
  return (bytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t CachingAllocator::segment_size(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallSegment;
  if (rounded < kMinLargeAlloc) return kLargeSegment;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

CachingAllocator::FreePool& CachingAllocator::pool(PoolKind kind) {
  return kind == PoolKind::small ? small_pool_ : large_pool_;
}

void CachingAllocator::add_allocated(int64_t delta) {
  stats_.allocated_bytes += delta;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
}

void CachingAllocator::add_reserved(int64_t delta) {
  stats_.reserved_bytes += delta;
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
}

void* CachingAllocator::allocate(size_t bytes, StreamId stream) {
  if (bytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  if (!options_.caching) return allocate_direct(bytes);
  // No segment could hold this; report it like any other out-of-memory (and avoid overflow below).
  if (bytes > std::numeric_limits<size_t>::max() - kRoundLarge) throw_out_of_memory(bytes, 0);

  const size_t size = round_size(bytes);
  const PoolKind kind = size <= kSmallSize ? PoolKind::small : PoolKind::large;
  const auto capturing = capturing_.find(stream);
  const PoolId pool_id = capturing == capturing_.end() ? 0 : capturing->second;
  process_events();
  Block* block = find_free_block(kind, pool_id, stream, size);
  if (block == nullptr) {
    const size_t seg = segment_size(size);
    void* base = backend_.malloc(seg);
    if (base == nullptr) {
      // Out of memory: make every pending block free (one may fit now), else give the cache back
      // to the device and try once more.
      ++stats_.num_alloc_retries;
      synchronize_and_drain_events();
      block = find_free_block(kind, pool_id, stream, size);
      if (block == nullptr) {
        release_cached_segments();
        base = backend_.malloc(seg);
        if (base == nullptr) throw_out_of_memory(bytes, seg);
      }
    }
    if (block == nullptr) {
      block = add_segment(base, seg, kind, pool_id, stream);
      ++stats_.cache_misses;
    } else {
      ++stats_.cache_hits;
    }
  } else {
    ++stats_.cache_hits;
  }
  block = split(block, size);
  block->state = BlockState::allocated;
  allocated_.emplace(block->ptr, block);
  add_allocated(static_cast<int64_t>(block->size));
  ++stats_.allocation_count;
  return block->ptr;
}

void CachingAllocator::deallocate(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!options_.caching) return deallocate_direct(p);
  auto it = allocated_.find(p);
  EMBER_CHECK(it != allocated_.end(), "CUDA caching allocator (device ", device_, "): deallocate(",
              format_pointer(p), ") of a pointer it does not hold (double free or foreign pointer)");
  Block* block = it->second;
  // Record the events first: if the backend throws, nothing has changed.
  std::vector<EventId> events;
  try {
    for (StreamId s : block->stream_uses) events.push_back(backend_.record_event(s));
  } catch (...) {
    for (EventId e : events) backend_.destroy_event(e);
    throw;
  }
  allocated_.erase(it);
  add_allocated(-static_cast<int64_t>(block->size));
  ++stats_.free_count;
  block->stream_uses.clear();
  if (events.empty()) {
    free_block(block);
  } else {
    block->state = BlockState::pending;
    pending_.push_back(PendingFree{block, std::move(events)});
  }
}

void CachingAllocator::record_stream(void* p, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!options_.caching) {
    EMBER_CHECK(direct_.count(p) != 0, "CUDA caching allocator (device ", device_, "): record_stream(",
                format_pointer(p), ") on a pointer it does not hold");
    return;  // cudaFree synchronizes the device: no events needed
  }
  auto it = allocated_.find(p);
  EMBER_CHECK(it != allocated_.end(), "CUDA caching allocator (device ", device_, "): record_stream(",
              format_pointer(p), ") on a pointer it does not hold");
  Block* block = it->second;
  if (stream == block->stream) return;  // ordered with the next user already
  auto& uses = block->stream_uses;
  if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!options_.caching) return;
  synchronize_and_drain_events();
  release_cached_segments();
}

PoolId CachingAllocator::create_pool() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_pool_++;
}

void CachingAllocator::begin_allocate_to_pool(PoolId pool_id, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  EMBER_CHECK(options_.caching, "CUDA caching allocator (device ", device_, "): a CUDA graph needs the caching "
              "allocator's private pool, but EMBER_CUDA_ALLOC=direct is set");
  EMBER_CHECK(pool_id != 0 && pool_id < next_pool_, "CUDA caching allocator (device ", device_,
              "): begin_allocate_to_pool(", pool_id, ") of a pool create_pool() did not make");
  EMBER_CHECK(capturing_.count(stream) == 0, "CUDA caching allocator (device ", device_, "): stream ", stream,
              " already allocates to private pool ", capturing_[stream]);
  capturing_[stream] = pool_id;
}

void CachingAllocator::end_allocate_to_pool(StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  capturing_.erase(stream);
}

void CachingAllocator::release_pool(PoolId pool_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pool_id == 0) return;
  for (auto& [base, head] : segments_) {
    if (head->pool_id != pool_id) continue;
    for (Block* b = head; b != nullptr; b = b->next) {
      if (b->state != BlockState::free) {
        b->pool_id = 0;  // joins the ordinary cache when it is freed
        continue;
      }
      FreePool& free_pool = pool(b->pool);
      free_pool.erase(b);  // re-keyed: the pool id is part of the order
      b->pool_id = 0;
      free_pool.insert(b);
    }
  }
}

int64_t CachingAllocator::private_pool_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t bytes = 0;
  for (const auto& [base, head] : segments_) {
    if (head->pool_id == 0) continue;
    for (const Block* b = head; b != nullptr; b = b->next) bytes += static_cast<int64_t>(b->size);
  }
  return bytes;
}

CachingAllocator::Stats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

// ---- direct mode ----

void* CachingAllocator::allocate_direct(size_t bytes) {
  void* p = backend_.malloc(bytes);
  if (p == nullptr) throw_out_of_memory(bytes, 0);
  try {
    direct_.emplace(p, bytes);
  } catch (...) {
    backend_.free(p);
    throw;
  }
  ++stats_.cache_misses;
  ++stats_.segment_count;
  ++stats_.allocation_count;
  add_reserved(static_cast<int64_t>(bytes));
  add_allocated(static_cast<int64_t>(bytes));
  return p;
}

void CachingAllocator::deallocate_direct(void* p) {
  auto it = direct_.find(p);
  EMBER_CHECK(it != direct_.end(), "CUDA caching allocator (device ", device_, ", direct): deallocate(",
              format_pointer(p), ") of a pointer it does not hold (double free or foreign pointer)");
  const auto bytes = static_cast<int64_t>(it->second);
  backend_.free(p);
  direct_.erase(it);
  ++stats_.free_count;
  --stats_.segment_count;
  add_allocated(-bytes);
  add_reserved(-bytes);
}

// ---- blocks and segments ----

CachingAllocator::Block* CachingAllocator::find_free_block(PoolKind kind, PoolId pool_id, StreamId stream,
                                                           size_t size) {
  FreePool& free_pool = pool(kind);
  Block key;
  key.pool_id = pool_id;
  key.stream = stream;
  key.size = size;  // key.ptr == nullptr sorts before every block of this (pool, stream, size)
  auto it = free_pool.lower_bound(&key);
  if (it == free_pool.end() || (*it)->pool_id != pool_id || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  // Oversize blocks (see the Note). Every other candidate is bigger still, so none fits either.
  if (block->size > kLargeSegment && (size <= kLargeSegment || block->size - size >= kLargeSegment))
    return nullptr;
  free_pool.erase(it);
  return block;
}

CachingAllocator::Block* CachingAllocator::add_segment(void* base, size_t bytes, PoolKind kind, PoolId pool_id,
                                                       StreamId stream) {
  auto block = std::make_unique<Block>();
  block->ptr = static_cast<char*>(base);
  block->size = bytes;
  block->pool_id = pool_id;
  block->stream = stream;
  block->pool = kind;
  try {
    segments_.emplace(reinterpret_cast<uintptr_t>(base), block.get());
  } catch (...) {
    backend_.free(base);
    throw;
  }
  ++stats_.segment_count;
  add_reserved(static_cast<int64_t>(bytes));
  return block.release();
}

// `block` is free and out of its pool, with block->size >= size. Cuts the remainder off into a new
// free block when worth it (see the Note) and returns `block`, now of the size to hand out.
CachingAllocator::Block* CachingAllocator::split(Block* block, size_t size) {
  const size_t remaining = block->size - size;
  const bool worth_it = block->pool == PoolKind::small
                            ? remaining >= kMinBlockSize
                            : block->size <= kLargeSegment && remaining > kSmallSize;
  if (!worth_it) return block;
  auto* rest = new Block;
  rest->ptr = block->ptr + size;
  rest->size = remaining;
  rest->stream = block->stream;
  rest->pool_id = block->pool_id;
  rest->pool = block->pool;
  rest->prev = block;
  rest->next = block->next;
  if (block->next != nullptr) block->next->prev = rest;
  block->next = rest;
  block->size = size;
  pool(rest->pool).insert(rest);
  return block;
}

// Returns `block` (allocated or pending, in no pool) to its pool, merged with free neighbours.
void CachingAllocator::free_block(Block* block) {
  FreePool& free_pool = pool(block->pool);
  block->state = BlockState::free;
  if (Block* prev = block->prev; prev != nullptr && prev->state == BlockState::free) {
    free_pool.erase(prev);  // before its size (part of the pool's key) changes
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    delete block;
    block = prev;
  }
  if (Block* next = block->next; next != nullptr && next->state == BlockState::free) {
    free_pool.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    delete next;
  }
  free_pool.insert(block);
}

// Polls the events of pending blocks; a block whose events are all done goes back to its pool.
void CachingAllocator::process_events() {
  for (size_t i = 0; i < pending_.size();) {
    auto& events = pending_[i].events;
    for (size_t j = 0; j < events.size();) {
      if (backend_.event_done(events[j])) {
        backend_.destroy_event(events[j]);
        events[j] = events.back();
        events.pop_back();
      } else {
        ++j;
      }
    }
    if (events.empty()) {
      free_block(pending_[i].block);
      pending_[i] = std::move(pending_.back());
      pending_.pop_back();
    } else {
      ++i;
    }
  }
}

// After a device-wide synchronize every recorded event is complete: no need to query them.
void CachingAllocator::synchronize_and_drain_events() {
  backend_.synchronize();
  for (PendingFree& pf : pending_) {
    for (EventId e : pf.events) backend_.destroy_event(e);
    free_block(pf.block);
  }
  pending_.clear();
}

// Gives every free segment of the ordinary cache that is one whole block back to the backend.
void CachingAllocator::release_cached_segments() {
  for (FreePool* free_pool : {&small_pool_, &large_pool_}) {
    for (auto it = free_pool->begin(); it != free_pool->end();) {
      Block* block = *it;
      if (block->prev != nullptr || block->next != nullptr || block->pool_id != 0) {
        ++it;
        continue;
      }
      backend_.free(block->ptr);
      it = free_pool->erase(it);
      segments_.erase(reinterpret_cast<uintptr_t>(block->ptr));
      --stats_.segment_count;
      add_reserved(-static_cast<int64_t>(block->size));
      delete block;
    }
  }
}

void CachingAllocator::throw_out_of_memory(size_t requested, size_t segment) {
  ++stats_.oom_count;
  std::ostringstream os;
  os << "CUDA out of memory on device " << device_ << ": tried to allocate " << format_bytes_exact(requested);
  if (segment != 0 && segment != round_size(requested))
    os << " (as a new " << format_bytes(segment) << " segment)";
  os << ". ember has " << format_bytes_exact(static_cast<size_t>(stats_.allocated_bytes)) << " allocated and "
     << format_bytes_exact(static_cast<size_t>(stats_.reserved_bytes))
     << " reserved (allocated + cached); the device has " << format_bytes_exact(backend_.free_bytes())
     << " free of " << format_bytes_exact(backend_.total_bytes()) << " total. "
     << "Try a smaller batch size (or model), or free tensors you no longer need; "
     << "EMBER_CUDA_ALLOC=direct bypasses the cache for debugging memory errors.";
  EMBER_THROW(os.str());
}

std::string CachingAllocator::describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  const Stats& s = stats_;
  std::ostringstream os;
  os << "CUDA caching allocator, device " << device_ << (options_.caching ? "" : " (direct mode)") << "\n"
     << "  allocated " << format_bytes_exact(static_cast<size_t>(s.allocated_bytes)) << ", peak "
     << format_bytes(static_cast<size_t>(s.peak_allocated_bytes)) << "\n"
     << "  reserved  " << format_bytes_exact(static_cast<size_t>(s.reserved_bytes)) << ", peak "
     << format_bytes(static_cast<size_t>(s.peak_reserved_bytes)) << ", " << s.segment_count << " segment(s)\n"
     << "  " << s.allocation_count << " allocations, " << s.free_count << " frees, " << s.cache_hits
     << " cache hits, " << s.cache_misses << " misses, " << s.num_alloc_retries << " OOM retries, "
     << s.oom_count << " OOMs\n";
  if (!options_.caching) {
    os << "  " << direct_.size() << " live direct allocation(s)\n";
    return os.str();
  }
  for (const auto& [base, head] : segments_) {
    size_t total = 0;
    for (const Block* b = head; b != nullptr; b = b->next) total += b->size;
    os << "  segment " << format_pointer(head->ptr) << "  " << format_bytes(total) << "  "
       << (head->pool == PoolKind::small ? "small" : "large") << " pool  stream " << head->stream;
    if (head->pool_id != 0) os << "  private pool " << head->pool_id;
    os << "\n";
    for (const Block* b = head; b != nullptr; b = b->next) {
      const char* state = b->state == BlockState::allocated ? "allocated"
                          : b->state == BlockState::pending ? "pending (waiting on stream events)"
                                                            : "free";
      os << "    +" << (b->ptr - head->ptr) << "  " << format_bytes(b->size) << "  " << state << "\n";
    }
  }
  return os.str();
}

}  // namespace ember::cuda
