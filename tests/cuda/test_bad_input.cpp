// Bad input on the CUDA device: every case is an ember::Error naming what was wrong, and the
// process (and the device's caching allocator) keeps working afterwards.

#include <catch2/catch.hpp>

#include <functional>
#include <string>

#include <ember/ember.h>
#include <ember/core/cuda/runtime.h>

using namespace ember;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("cuda bad input: an op across two devices names both", "[cuda][bad_input]") {
  const Tensor a = ones({2, 3}, {.device = Device::cuda(0)});
  const Tensor b = ones({2, 3});
  const std::string msg = error_of([&] { (void)add(a, b); });
  INFO(msg);
  CHECK(msg.find("cuda:0") != std::string::npos);
  CHECK(msg.find("cpu") != std::string::npos);
}

TEST_CASE("cuda bad input: an unsupported dtype names the op and the dtype", "[cuda][bad_input]") {
  const Tensor x = ones({1, 1, 4, 4}, {.dtype = DType::i32, .device = Device::cuda(0)});
  const Tensor w = ones({1, 1, 3, 3}, {.dtype = DType::i32, .device = Device::cuda(0)});
  const std::string msg = error_of([&] { (void)conv2d(x, w); });
  INFO(msg);
  CHECK(msg.find("conv2d") != std::string::npos);
  CHECK(msg.find("int32") != std::string::npos);
}

TEST_CASE("cuda bad input: a device that does not exist", "[cuda][bad_input]") {
  const std::string msg = error_of([&] { (void)ones({2}, {.device = Device::cuda(cuda_device_count())}); });
  INFO(msg);
  CHECK(msg.find("cuda:" + std::to_string(cuda_device_count())) != std::string::npos);
}

TEST_CASE("cuda bad input: out of memory is an error with the numbers, and the cache survives",
          "[cuda][bad_input]") {
  const Tensor keep = ones({1024}, {.device = Device::cuda(0)});
  const cuda::CachingAllocatorStats before = cuda::memory_stats(0);
  // 2^50 bytes: more than any device has.
  const std::string msg = error_of([&] { (void)empty({int64_t{1} << 48}, {.device = Device::cuda(0)}); });
  INFO(msg);
  CHECK(msg.find("shape (281474976710656,)") != std::string::npos);
  CHECK(msg.find("cuda:0") != std::string::npos);
  CHECK(msg.find("out of memory") != std::string::npos);
  const cuda::CachingAllocatorStats after = cuda::memory_stats(0);
  CHECK(after.allocated_bytes == before.allocated_bytes);
  CHECK(after.oom_count == before.oom_count + 1);
  // Still usable: the earlier tensor is intact and new ones work.
  const Tensor more = full({1000}, 2.0, {.device = Device::cuda(0)});
  CHECK(sum(mul(keep, more.slice(0, 0, 1).expand({1024}))).item() == 2048.0);
}
