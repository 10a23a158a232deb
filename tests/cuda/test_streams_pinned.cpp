// Streams, events, pinned host memory and asynchronous copies through the tensor API, and the
// caching allocator's public statistics.

#include <catch2/catch.hpp>

#include <ember/ember.h>
#include <ember/kernels/cuda/runtime.h>

using namespace ember;

TEST_CASE("cuda: pinned memory and non-blocking copies round-trip", "[cuda][pinned]") {
  const Tensor x = arange(0, 1000, 1, {.dtype = DType::f32}).reshape({10, 100});
  CHECK_FALSE(x.is_pinned());
  const Tensor p = x.pin_memory();
  REQUIRE(p.is_pinned());
  CHECK(p.pin_memory().storage() == p.storage());  // already pinned: itself
  const Tensor d = p.to(Device::cuda(0), /*non_blocking=*/true);
  REQUIRE(d.device() == Device::cuda(0));
  const Tensor back = d.to(Device::cpu(), /*non_blocking=*/true);
  CHECK(back.is_pinned());  // a device-to-host non-blocking copy lands in pinned memory
  cuda::synchronize();
  CHECK(back.to_vector<float>() == x.to_vector<float>());
  // From pageable memory non_blocking falls back to a synchronous copy.
  CHECK(x.to(Device::cuda(0), true).to_vector<float>() == x.to_vector<float>());
  // Pinned blocks are cached: a block of the same size comes back once its copies are done.
  const void* first = p.storage()->data();
  {
    const Tensor q = x.pin_memory();
    CHECK(q.storage()->data() != first);
  }
  CHECK_THROWS_AS(d.pin_memory(), Error);  // only CPU tensors can be pinned
}

TEST_CASE("cuda: a copy on a side stream, ordered by an event", "[cuda][streams]") {
  const Device dev = Device::cuda(0);
  cuda::DeviceGuard guard(0);
  cuda::StreamHandle side(0);
  cuda::Event ready;
  const Tensor host = full({4096}, 3.0, {.dtype = DType::f32}).pin_memory();
  Tensor dst;
  {
    cuda::StreamGuard on_side(side.get());
    CHECK(cuda::current_stream() == side.get());
    dst = host.to(dev, true);  // queued on the side stream
    cuda::record_stream(dst.storage()->data(), 0, nullptr);  // also used on the default stream
    ready.record(side.get());
  }
  CHECK(cuda::current_stream() == nullptr);
  ready.wait_on(cuda::current_stream());  // the default stream waits for the copy
  const Tensor y = mul(dst, 2.0);
  ready.synchronize();
  CHECK(ready.query());
  CHECK(sum(y).item() == 6.0 * 4096);
}

TEST_CASE("cuda: caching allocator statistics and empty_cache", "[cuda][allocator]") {
  cuda::empty_cache(0);
  const cuda::CachingAllocatorStats s0 = cuda::memory_stats(0);
  {
    const Tensor a = empty({1 << 20}, {.device = Device::cuda(0)});  // 4 MiB: large pool
    const cuda::CachingAllocatorStats s1 = cuda::memory_stats(0);
    CHECK(s1.allocated_bytes == s0.allocated_bytes + (4 << 20));
    CHECK(s1.reserved_bytes >= s1.allocated_bytes);
    CHECK(cuda::memory_summary(0).find("segment") != std::string::npos);
  }
  const cuda::CachingAllocatorStats s2 = cuda::memory_stats(0);
  CHECK(s2.allocated_bytes == s0.allocated_bytes);
  const Tensor again = empty({1 << 20}, {.device = Device::cuda(0)});  // served from the cache
  CHECK(cuda::memory_stats(0).cache_hits == s2.cache_hits + 1);
  cuda::reset_peak_memory_stats(0);
  CHECK(cuda::memory_stats(0).peak_allocated_bytes == cuda::memory_stats(0).allocated_bytes);
}
