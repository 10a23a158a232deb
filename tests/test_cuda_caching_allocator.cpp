// The CUDA caching allocator's policy (core/cuda/caching_allocator.h) against a fake device:
// a byte budget carved first-fit from a real host arena (so addresses and adjacency are real) and
// events that complete only when the test says so (or on synchronize).

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <ember/core/cuda/caching_allocator.h>
#include <ember/core/error.h>
#include <map>
#include <thread>
#include <vector>

using ember::cuda::CachingAllocator;
using ember::cuda::EventId;
using ember::cuda::StreamId;

namespace {

constexpr size_t KiB = 1024;
constexpr size_t MiB = 1024 * 1024;

class FakeBackend final : public ember::cuda::DeviceMemoryBackend {
 public:
  explicit FakeBackend(size_t budget)
      : budget_(budget), arena_(static_cast<char*>(std::aligned_alloc(4096, budget))) {}
  ~FakeBackend() override { std::free(arena_); }

  void* malloc(size_t bytes) override {
    mallocs.push_back(bytes);
    if (used_ + bytes > budget_) return nullptr;
    size_t offset = 0;  // first fit over the gaps between live allocations
    for (const auto& [off, size] : live_) {
      if (off - offset >= bytes) break;
      offset = off + size;
    }
    if (offset + bytes > budget_) return nullptr;
    live_.emplace(offset, bytes);
    ++malloc_ok;
    used_ += bytes;
    return arena_ + offset;
  }
  void free(void* p) override {
    ++free_calls;
    auto it = live_.find(static_cast<size_t>(static_cast<char*>(p) - arena_));
    CHECK(it != live_.end());
    if (it == live_.end()) return;
    used_ -= it->second;
    live_.erase(it);
  }
  size_t free_bytes() override { return budget_ - used_; }
  size_t total_bytes() override { return budget_; }
  EventId record_event(StreamId stream) override {
    recorded_on.push_back(stream);
    events_[next_event_] = false;
    return next_event_++;
  }
  bool event_done(EventId e) override { return events_.at(e); }
  void destroy_event(EventId e) override { CHECK(events_.erase(e) == 1); }
  void synchronize() override {
    ++sync_calls;
    for (auto& [id, done] : events_) done = true;
  }

  void complete_all_events() {
    for (auto& [id, done] : events_) done = true;
  }
  size_t live_events() const { return events_.size(); }
  size_t used() const { return used_; }
  char* arena() const { return arena_; }

  std::vector<size_t> mallocs;  // every malloc request, failed ones included
  std::vector<StreamId> recorded_on;
  int malloc_ok = 0;  // successful mallocs
  int free_calls = 0;
  int sync_calls = 0;

 private:
  size_t budget_;
  size_t used_ = 0;
  char* arena_;
  std::map<size_t, size_t> live_;  // offset -> size
  std::map<EventId, bool> events_;
  EventId next_event_ = 1;
};

char* at(const FakeBackend& b, size_t offset) { return b.arena() + offset; }

}  // namespace

TEST_CASE("caching allocator: rounding and the two pools", "[cuda_allocator]") {
  FakeBackend backend(128 * MiB);
  CachingAllocator alloc(backend, 0);

  CHECK(alloc.allocate(0, 0) == nullptr);
  CHECK(alloc.stats().allocation_count == 0);
  CHECK(backend.mallocs.empty());

  // 1 byte -> a 512-byte block from a new 2 MiB small segment.
  void* a = alloc.allocate(1, 0);
  CHECK(a == at(backend, 0));
  CHECK(backend.mallocs == std::vector<size_t>{2 * MiB});
  auto s = alloc.stats();
  CHECK(s.allocated_bytes == 512);
  CHECK(s.reserved_bytes == static_cast<int64_t>(2 * MiB));

  // Exactly 1 MiB is still small: carved from the same segment, right after `a`.
  void* b = alloc.allocate(1 * MiB, 0);
  CHECK(b == at(backend, 512));
  CHECK(backend.mallocs.size() == 1);
  CHECK(alloc.stats().allocated_bytes == static_cast<int64_t>(512 + MiB));
  CHECK(alloc.stats().cache_hits == 1);

  // Above 1 MiB: the large pool. Below 10 MiB -> a 20 MiB segment.
  void* c = alloc.allocate(1 * MiB + 1, 0);
  CHECK(c == at(backend, 2 * MiB));
  CHECK(backend.mallocs.back() == 20 * MiB);
  CHECK(alloc.stats().allocated_bytes == static_cast<int64_t>(512 + MiB + MiB + 512));
  // 10 MiB and up -> a segment of the size rounded up to 2 MiB (on stream 5, so that the free
  // rest of c's segment cannot serve them).
  void* d = alloc.allocate(12 * MiB + 1, 5);
  CHECK(d == at(backend, 22 * MiB));
  CHECK(backend.mallocs.back() == 14 * MiB);
  void* f = alloc.allocate(10 * MiB, 5);  // d's free rest (2 MiB - 512) is too small
  CHECK(backend.mallocs.back() == 10 * MiB);
  void* e = alloc.allocate(10 * MiB, 0);  // the free rest of c's segment (19 MiB - 512) fits it
  CHECK(e == at(backend, 2 * MiB + MiB + 512));
  s = alloc.stats();
  CHECK(s.segment_count == 4);
  CHECK(s.reserved_bytes == static_cast<int64_t>(2 * MiB + 20 * MiB + 14 * MiB + 10 * MiB));
  CHECK(s.reserved_bytes == static_cast<int64_t>(backend.used()));
  CHECK(s.cache_misses == 4);
  CHECK(s.cache_hits == 2);
  for (void* p : {a, b, c, d, e, f}) alloc.deallocate(p);
  CHECK(alloc.stats().allocated_bytes == 0);
}

TEST_CASE("caching allocator: a freed block is reused (cache hit, same address)", "[cuda_allocator]") {
  FakeBackend backend(64 * MiB);
  CachingAllocator alloc(backend, 0);
  void* p = alloc.allocate(1000, 7);
  alloc.deallocate(p);
  void* q = alloc.allocate(600, 7);  // same rounded size (1024)
  CHECK(q == p);
  auto s = alloc.stats();
  CHECK(s.cache_misses == 1);
  CHECK(s.cache_hits == 1);
  CHECK(backend.mallocs.size() == 1);
  CHECK(backend.free_calls == 0);
  alloc.deallocate(q);
  CHECK(alloc.stats().free_count == 2);

  // A large block too.
  void* big = alloc.allocate(3 * MiB, 7);
  alloc.deallocate(big);
  CHECK(alloc.allocate(3 * MiB, 7) == big);
  CHECK(backend.mallocs.size() == 2);
}

TEST_CASE("caching allocator: best fit among several free blocks", "[cuda_allocator]") {
  FakeBackend backend(64 * MiB);
  CachingAllocator alloc(backend, 0);
  // One small segment: a(4K) | x | b(2K) | y | c(8K) | z | rest. The separators stay allocated.
  void* a = alloc.allocate(4 * KiB, 0);
  void* x = alloc.allocate(512, 0);
  void* b = alloc.allocate(2 * KiB, 0);
  void* y = alloc.allocate(512, 0);
  void* c = alloc.allocate(8 * KiB, 0);
  void* z = alloc.allocate(512, 0);
  CHECK(b == at(backend, 4 * KiB + 512));
  CHECK(c == at(backend, 7 * KiB));
  alloc.deallocate(c);
  alloc.deallocate(a);
  alloc.deallocate(b);
  // Free: 4K, 2K, 8K, and the big rest. The smallest sufficient one wins.
  CHECK(alloc.allocate(1536, 0) == b);
  CHECK(alloc.allocate(3 * KiB, 0) == a);  // 4K block, split: 1K stays free at a + 3K
  CHECK(alloc.allocate(6 * KiB, 0) == c);
  CHECK(alloc.allocate(1 * KiB, 0) == at(backend, 3 * KiB));
  CHECK(backend.mallocs.size() == 1);

  // Ties go to the lower address.
  void* t1 = alloc.allocate(4 * KiB, 0);
  void* sep = alloc.allocate(512, 0);
  void* t2 = alloc.allocate(4 * KiB, 0);
  void* sep2 = alloc.allocate(512, 0);
  alloc.deallocate(t2);
  alloc.deallocate(t1);
  CHECK(alloc.allocate(4 * KiB, 0) == t1);
  (void)x, (void)y, (void)z, (void)sep, (void)sep2;
}

TEST_CASE("caching allocator: splitting and merging free neighbours", "[cuda_allocator]") {
  FakeBackend backend(64 * MiB);
  CachingAllocator alloc(backend, 0);

  SECTION("A, B, C from one segment; free A and C, then B -> one whole free segment") {
    void* A = alloc.allocate(1 * KiB, 0);
    void* B = alloc.allocate(2 * KiB, 0);
    void* C = alloc.allocate(4 * KiB, 0);
    CHECK(B == at(backend, 1 * KiB));
    CHECK(C == at(backend, 3 * KiB));
    alloc.deallocate(A);
    alloc.deallocate(C);  // merges with the free rest of the segment
    alloc.empty_cache();  // the segment is still split: nothing goes back
    CHECK(alloc.stats().segment_count == 1);
    CHECK(backend.free_calls == 0);
    alloc.deallocate(B);  // merges with A on the left and C+rest on the right
    CHECK(alloc.describe().find("+0  2.00 MiB  free") != std::string::npos);
    alloc.empty_cache();
    auto s = alloc.stats();
    CHECK(s.segment_count == 0);
    CHECK(s.reserved_bytes == 0);
    CHECK(backend.free_calls == 1);
    CHECK(backend.used() == 0);
  }
  SECTION("small pool splits off a remainder of 512 bytes") {
    void* p = alloc.allocate(1 * MiB, 0);
    void* q = alloc.allocate(1 * MiB - 512, 0);
    void* r = alloc.allocate(512, 0);
    CHECK(r == at(backend, 2 * MiB - 512));
    CHECK(backend.mallocs.size() == 1);
    CHECK(alloc.stats().allocated_bytes == static_cast<int64_t>(2 * MiB));
    (void)p, (void)q;
  }
  SECTION("large pool splits only when more than 1 MiB remains") {
    void* p = alloc.allocate(19 * MiB, 0);  // 20 MiB segment, 1 MiB left: handed out whole
    CHECK(backend.mallocs.back() == 20 * MiB);
    CHECK(alloc.stats().allocated_bytes == static_cast<int64_t>(20 * MiB));
    void* q = alloc.allocate(18 * MiB + 512, 0);  // 20 MiB segment, 2 MiB - 512 left: split
    CHECK(alloc.stats().allocated_bytes == static_cast<int64_t>(20 * MiB + 18 * MiB + 512));
    void* r = alloc.allocate(1 * MiB + 512, 0);  // served from q's remainder
    CHECK(r == static_cast<char*>(q) + 18 * MiB + 512);
    CHECK(backend.mallocs.size() == 2);
    (void)p;
  }
}

TEST_CASE("caching allocator: fragmentation forces a new segment", "[cuda_allocator]") {
  FakeBackend backend(64 * MiB);
  CachingAllocator alloc(backend, 0);
  std::vector<void*> q;
  for (int i = 0; i < 4; ++i) q.push_back(alloc.allocate(512 * KiB, 0));  // fills 2 MiB exactly
  CHECK(q[3] == at(backend, 3 * 512 * KiB));
  alloc.deallocate(q[0]);
  alloc.deallocate(q[2]);
  // 1 MiB is free in total, but in two 512 KiB holes: a 1 MiB request needs a new segment.
  void* p = alloc.allocate(1 * MiB, 0);
  CHECK(p == at(backend, 2 * MiB));
  auto s = alloc.stats();
  CHECK(s.segment_count == 2);
  CHECK(s.cache_misses == 2);
  CHECK(s.reserved_bytes == static_cast<int64_t>(4 * MiB));
  // The holes still serve requests that fit them.
  CHECK(alloc.allocate(512 * KiB, 0) == q[0]);
}

TEST_CASE("caching allocator: oversize blocks are not split for small requests", "[cuda_allocator]") {
  FakeBackend backend(128 * MiB);
  CachingAllocator alloc(backend, 0);
  void* big = alloc.allocate(40 * MiB, 0);
  alloc.deallocate(big);
  // 18 MiB <= 20 MiB: the free 40 MiB block is oversize for it -> a new 18 MiB segment.
  void* mid = alloc.allocate(18 * MiB, 0);
  CHECK(mid != big);
  CHECK(backend.mallocs.back() == 18 * MiB);
  // 30 MiB would leave 10 MiB (< 20 MiB) unused: it gets the 40 MiB block whole.
  void* p = alloc.allocate(30 * MiB, 0);
  CHECK(p == big);
  CHECK(alloc.stats().allocated_bytes == static_cast<int64_t>(18 * MiB + 40 * MiB));
  alloc.deallocate(p);
  // 21 MiB would leave 19 MiB unused: still taken.
  CHECK(alloc.allocate(21 * MiB, 0) == big);
  CHECK(alloc.stats().cache_hits == 2);
  CHECK(backend.mallocs.size() == 2);
}

TEST_CASE("caching allocator: blocks are tied to their stream", "[cuda_allocator]") {
  FakeBackend backend(64 * MiB);
  CachingAllocator alloc(backend, 0);
  void* p = alloc.allocate(1000, 1);
  alloc.deallocate(p);
  void* q = alloc.allocate(1000, 2);  // stream 2 never gets stream 1's block
  CHECK(q != p);
  CHECK(q == at(backend, 2 * MiB));
  CHECK(alloc.stats().cache_misses == 2);
  CHECK(alloc.allocate(1000, 1) == p);
}

TEST_CASE("caching allocator: record_stream delays reuse until the events are done", "[cuda_allocator]") {
  FakeBackend backend(64 * MiB);
  CachingAllocator alloc(backend, 0);
  void* p = alloc.allocate(1000, 1);
  alloc.record_stream(p, 2);
  alloc.record_stream(p, 2);  // once per stream
  alloc.record_stream(p, 1);  // its own stream: nothing to wait for
  alloc.deallocate(p);
  CHECK(backend.recorded_on == std::vector<StreamId>{2});
  CHECK(alloc.stats().allocated_bytes == 0);

  SECTION("reused after the event completes") {
    void* q = alloc.allocate(1000, 1);  // p is pending: the best fit is the rest of the segment
    CHECK(q == at(backend, 1024));
    CHECK(alloc.describe().find("pending") != std::string::npos);
    backend.complete_all_events();
    CHECK(alloc.allocate(1000, 1) == p);  // polled at the start of allocate
    CHECK(backend.live_events() == 0);
  }
  SECTION("empty_cache synchronizes, drains the events and releases the segment") {
    alloc.empty_cache();
    CHECK(backend.sync_calls == 1);
    CHECK(backend.live_events() == 0);
    CHECK(alloc.stats().segment_count == 0);
    CHECK(backend.used() == 0);
  }
  SECTION("unknown pointers are errors") {
    int x = 0;
    CHECK_THROWS_AS(alloc.record_stream(&x, 2), ember::Error);
    CHECK_THROWS_WITH(alloc.deallocate(&x), Catch::Contains("does not hold"));
  }
}

TEST_CASE("caching allocator: out of memory frees the cache and retries", "[cuda_allocator]") {
  FakeBackend backend(24 * MiB);
  CachingAllocator alloc(backend, 0);

  SECTION("cached segments of another stream go back, the retry succeeds") {
    alloc.deallocate(alloc.allocate(15 * MiB, 1));  // a cached 16 MiB segment of stream 1
    void* p = alloc.allocate(15 * MiB, 2);
    CHECK(p == at(backend, 0));
    auto s = alloc.stats();
    CHECK(s.num_alloc_retries == 1);
    CHECK(s.oom_count == 0);
    CHECK(s.segment_count == 1);
    CHECK(s.reserved_bytes == static_cast<int64_t>(16 * MiB));
    CHECK(s.peak_reserved_bytes == static_cast<int64_t>(16 * MiB));
    CHECK(backend.sync_calls == 1);
  }
  SECTION("a pending block becomes free after the synchronize and serves the request") {
    void* p = alloc.allocate(15 * MiB, 1);
    alloc.record_stream(p, 2);
    alloc.deallocate(p);
    CHECK(alloc.allocate(15 * MiB, 1) == p);
    auto s = alloc.stats();
    CHECK(s.num_alloc_retries == 1);
    CHECK(s.cache_hits == 1);
    CHECK(s.segment_count == 1);
    CHECK(backend.live_events() == 0);
  }
  SECTION("truly full: ember::Error with the numbers, and the allocator keeps working") {
    void* a = alloc.allocate(15 * MiB, 0);        // holds a whole 16 MiB segment
    alloc.deallocate(alloc.allocate(512, 0));     // a cached 2 MiB small segment
    CHECK(alloc.stats().reserved_bytes == static_cast<int64_t>(18 * MiB));
    std::string msg;
    try {
      alloc.allocate(6 * MiB, 0);  // needs a 20 MiB segment; 8 MiB free after the flush
    } catch (const ember::Error& e) {
      msg = e.what();
    }
    INFO(msg);
    CHECK_THAT(msg, Catch::Contains("out of memory on device 0"));
    CHECK_THAT(msg, Catch::Contains("tried to allocate 6.00 MiB (6291456 bytes)"));
    CHECK_THAT(msg, Catch::Contains("20.00 MiB segment"));
    CHECK_THAT(msg, Catch::Contains("16.00 MiB (16777216 bytes) allocated"));
    CHECK_THAT(msg, Catch::Contains("16.00 MiB (16777216 bytes) reserved"));
    CHECK_THAT(msg, Catch::Contains("8.00 MiB (8388608 bytes) free of 24.00 MiB (25165824 bytes) total"));
    CHECK_THAT(msg, Catch::Contains("batch size"));
    CHECK_THAT(msg, Catch::Contains("EMBER_CUDA_ALLOC=direct"));
    auto s = alloc.stats();
    CHECK(s.oom_count == 1);
    CHECK(s.num_alloc_retries == 1);
    CHECK(s.allocated_bytes == static_cast<int64_t>(16 * MiB));
    CHECK(s.reserved_bytes == static_cast<int64_t>(16 * MiB));
    CHECK(s.segment_count == 1);
    CHECK(s.allocation_count == 2);
    // Still working: a small request gets a new segment, and the big block serves after a free.
    void* b = alloc.allocate(512, 0);
    CHECK(b != nullptr);
    alloc.deallocate(a);
    CHECK(alloc.allocate(6 * MiB, 0) == a);
    CHECK(alloc.stats().reserved_bytes == static_cast<int64_t>(backend.used()));
  }
}

TEST_CASE("caching allocator: direct mode goes straight to the backend", "[cuda_allocator]") {
  FakeBackend backend(4 * MiB);
  CachingAllocator alloc(backend, 3, {.caching = false});
  CHECK_FALSE(alloc.caching());
  void* p = alloc.allocate(1000, 1);
  CHECK(backend.mallocs == std::vector<size_t>{1000});  // the exact size, no rounding
  auto s = alloc.stats();
  CHECK(s.allocated_bytes == 1000);
  CHECK(s.reserved_bytes == 1000);
  CHECK(s.segment_count == 1);
  alloc.record_stream(p, 2);  // nothing to do: cudaFree synchronizes
  alloc.deallocate(p);
  CHECK(backend.free_calls == 1);
  CHECK(backend.used() == 0);
  CHECK(backend.recorded_on.empty());
  void* q = alloc.allocate(1000, 1);
  s = alloc.stats();
  CHECK(s.cache_misses == 2);
  CHECK(s.cache_hits == 0);
  CHECK(s.allocation_count == 2);
  CHECK(s.free_count == 1);
  CHECK(s.peak_allocated_bytes == 1000);
  alloc.empty_cache();  // nothing cached
  CHECK(backend.used() == 1000);
  CHECK_THROWS_WITH(alloc.allocate(8 * MiB, 1),
                    Catch::Contains("device 3") && Catch::Contains("8.00 MiB (8388608 bytes)"));
  CHECK(alloc.stats().oom_count == 1);
  CHECK_THROWS_AS(alloc.deallocate(static_cast<char*>(q) + 1), ember::Error);
  alloc.deallocate(q);
  CHECK(backend.used() == 0);
}

TEST_CASE("caching allocator: current and peak stats", "[cuda_allocator]") {
  FakeBackend backend(64 * MiB);
  CachingAllocator alloc(backend, 0);
  void* a = alloc.allocate(3 * KiB, 0);
  void* b = alloc.allocate(2 * MiB, 0);
  alloc.deallocate(a);
  auto s = alloc.stats();
  CHECK(s.allocated_bytes == static_cast<int64_t>(2 * MiB));
  CHECK(s.peak_allocated_bytes == static_cast<int64_t>(2 * MiB + 3 * KiB));
  CHECK(s.reserved_bytes == static_cast<int64_t>(22 * MiB));
  CHECK(s.peak_reserved_bytes == static_cast<int64_t>(22 * MiB));
  alloc.empty_cache();  // the small segment goes back
  alloc.reset_peak();
  s = alloc.stats();
  CHECK(s.reserved_bytes == static_cast<int64_t>(20 * MiB));
  CHECK(s.peak_reserved_bytes == static_cast<int64_t>(20 * MiB));
  CHECK(s.peak_allocated_bytes == static_cast<int64_t>(2 * MiB));
  void* c = alloc.allocate(512, 0);
  alloc.deallocate(c);
  alloc.deallocate(b);
  s = alloc.stats();
  CHECK(s.allocated_bytes == 0);
  CHECK(s.peak_allocated_bytes == static_cast<int64_t>(2 * MiB + 512));
  CHECK(s.peak_reserved_bytes == static_cast<int64_t>(22 * MiB));
  CHECK(s.allocation_count == 3);
  CHECK(s.free_count == 3);
  CHECK(s.cache_hits + s.cache_misses == s.allocation_count);
}

TEST_CASE("caching allocator: the destructor returns cached segments", "[cuda_allocator]") {
  FakeBackend backend(64 * MiB);
  {
    CachingAllocator alloc(backend, 0);
    void* p = alloc.allocate(5 * MiB, 0);
    alloc.record_stream(p, 9);
    alloc.deallocate(p);  // pending
    alloc.deallocate(alloc.allocate(100, 0));
  }
  CHECK(backend.used() == 0);
  CHECK(backend.live_events() == 0);
}

TEST_CASE("caching allocator: thread safety smoke test", "[cuda_allocator]") {
  FakeBackend backend(256 * MiB);
  CachingAllocator alloc(backend, 0);
  constexpr int kIters = 3000;
  std::atomic<int> corrupted{0};  // Catch2 assertions are not thread-safe: count, check after
  auto worker = [&](int id) {
    uint32_t state = 12345u + static_cast<uint32_t>(id);
    auto next = [&] { return state = state * 1664525u + 1013904223u; };
    std::vector<std::pair<unsigned char*, size_t>> live;
    for (int i = 0; i < kIters; ++i) {
      if (live.size() < 8 && (next() >> 8) % 3 != 0) {
        const uint32_t r = next() >> 8;
        const size_t bytes = r % 16 == 0 ? 1 * MiB + r % (3 * MiB) : 1 + r % (64 * KiB);
        const StreamId stream = (r >> 5) % 2 == 0 ? 0 : static_cast<StreamId>(id + 1);
        auto* p = static_cast<unsigned char*>(alloc.allocate(bytes, stream));
        p[0] = p[bytes - 1] = static_cast<unsigned char>(id + 1);  // no one else may own these
        live.emplace_back(p, bytes);
      } else if (!live.empty()) {
        auto [p, bytes] = live[next() % live.size()];
        if (p[0] != id + 1 || p[bytes - 1] != id + 1) ++corrupted;
        alloc.deallocate(p);
        live.erase(std::find(live.begin(), live.end(), std::make_pair(p, bytes)));
      }
    }
    for (auto [p, bytes] : live) alloc.deallocate(p);
  };
  std::thread t1(worker, 0), t2(worker, 1);
  t1.join();
  t2.join();
  CHECK(corrupted == 0);
  auto s = alloc.stats();
  CHECK(s.allocated_bytes == 0);
  CHECK(s.allocation_count == s.free_count);
  CHECK(s.allocation_count > kIters / 2);
  CHECK(s.cache_hits + s.cache_misses == s.allocation_count);
  CHECK(s.reserved_bytes == static_cast<int64_t>(backend.used()));
  CHECK(s.segment_count == backend.malloc_ok - backend.free_calls);
  alloc.empty_cache();
  CHECK(alloc.stats().reserved_bytes == 0);
  CHECK(backend.used() == 0);
}

TEST_CASE("caching allocator: a private pool keeps captured memory apart from the cache", "[cuda_allocator]") {
  FakeBackend backend(64 * MiB);
  CachingAllocator alloc(backend, 0);
  const StreamId capture = 9;
  // A free block of the ordinary cache on the capture stream: the pool must not take it.
  void* cached = alloc.allocate(4 * KiB, capture);
  alloc.deallocate(cached);
  CHECK(backend.mallocs.size() == 1);

  const ember::cuda::PoolId pool = alloc.create_pool();
  CHECK(pool != 0);
  CHECK(alloc.create_pool() != pool);
  alloc.begin_allocate_to_pool(pool, capture);
  CHECK_THROWS_WITH(alloc.begin_allocate_to_pool(pool, capture), Catch::Contains("already allocates"));
  void* a = alloc.allocate(4 * KiB, capture);
  CHECK(backend.mallocs.size() == 2);  // its own segment
  CHECK(a == at(backend, 2 * MiB));
  void* other = alloc.allocate(4 * KiB, 3);  // another stream is not captured
  CHECK(other != a);
  CHECK(alloc.private_pool_bytes() == static_cast<int64_t>(2 * MiB));
  // Freed during the capture: the same capture may reuse it (the replay reuses it the same way).
  alloc.deallocate(a);
  CHECK(alloc.allocate(4 * KiB, capture) == a);
  void* b = alloc.allocate(8 * KiB, capture);
  CHECK(b == at(backend, 2 * MiB + 4 * KiB));
  alloc.end_allocate_to_pool(capture);

  // After the capture the pool's blocks serve nobody else, and empty_cache keeps the pool.
  alloc.deallocate(a);
  void* after = alloc.allocate(4 * KiB, capture);
  CHECK(after == cached);  // the ordinary cache's block, not the pool's
  alloc.empty_cache();
  CHECK(alloc.private_pool_bytes() == static_cast<int64_t>(2 * MiB));
  CHECK(alloc.describe().find("private pool " + std::to_string(pool)) != std::string::npos);

  // A second capture into the same pool gets the pool's free memory back.
  alloc.begin_allocate_to_pool(pool, capture);
  CHECK(alloc.allocate(4 * KiB, capture) == a);
  alloc.end_allocate_to_pool(capture);
  alloc.deallocate(a);

  // Released: the free blocks become ordinary cache, b joins it when freed, and the segment goes
  // back to the device once whole.
  alloc.release_pool(pool);
  CHECK(alloc.private_pool_bytes() == 0);
  void* reuse = alloc.allocate(4 * KiB, capture);
  CHECK(reuse == a);
  alloc.deallocate(reuse);
  alloc.deallocate(b);
  alloc.deallocate(after);
  alloc.deallocate(other);
  const int frees_before = backend.free_calls;
  alloc.empty_cache();
  CHECK(backend.free_calls == frees_before + 3);  // the two ordinary segments and the former pool's
  CHECK(backend.used() == 0);
}

TEST_CASE("caching allocator: private pools need caching mode", "[cuda_allocator]") {
  FakeBackend backend(4 * MiB);
  CachingAllocator alloc(backend, 0, {.caching = false});
  CHECK_THROWS_WITH(alloc.begin_allocate_to_pool(alloc.create_pool(), 1), Catch::Contains("EMBER_CUDA_ALLOC=direct"));
}
