// Streams, events, pinned host memory and asynchronous copies through the tensor API, and the
// caching allocator's public statistics.

#include <catch2/catch.hpp>

#include <ember/ember.h>
#include <ember/core/cuda/runtime.h>

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
  cuda::Event ready(0);
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

TEST_CASE("cuda: the DataLoader delivers batches on the device through a copy stream", "[cuda][loader]") {
  // Every device (the emulator has two): the copy stream and its event must belong to the target
  // device, whatever the calling thread's current device is (ember train under mpirun puts rank 1
  // on cuda:1).
  const int64_t n = 37;
  Tensor images = arange(0, n * 3 * 4 * 4, 1, {.dtype = DType::f32}).reshape({n, 3, 4, 4});
  Tensor labels = arange(0, n, 1, {.dtype = DType::i64});
  auto dataset = std::make_shared<data::TensorDataset>(images, labels);
  for (int dev = 0; dev < std::min(cuda_device_count(), 2); ++dev)
    for (int workers : {0, 2}) {
      const data::LoaderOptions host_opt{.batch_size = 8, .shuffle = true, .seed = 5, .num_workers = workers};
      data::LoaderOptions dev_opt = host_opt;
      dev_opt.device = Device::cuda(dev);
      dev_opt.pin_memory = data::PinMemory::on;
      data::DataLoader host_loader(dataset, host_opt), dev_loader(dataset, dev_opt);
      std::vector<data::Batch> expected;
      for (auto& b : host_loader) expected.push_back({b.images.clone(), b.labels.clone()});
      size_t i = 0;
      for (auto& b : dev_loader) {
        INFO("cuda:" << dev << " workers " << workers << " batch " << i);
        REQUIRE(i < expected.size());
        REQUIRE(b.images.device() == Device::cuda(dev));
        REQUIRE(b.labels.device() == Device::cuda(dev));
        // Used on the consumer's stream right away: the event orders it after the copy.
        CHECK(sum(b.images).item() == sum(expected[i].images).item());
        CHECK(b.labels.to_vector<int64_t>() == expected[i].labels.to_vector<int64_t>());
        ++i;
      }
      CHECK(i == expected.size());
    }
}
