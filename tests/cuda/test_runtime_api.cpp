// The CUDA runtime API as ember uses it, and the backend's first kernels. Runs unchanged on a real
// GPU and on the SIMT emulator.

#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <thread>
#include <vector>

#include <ember/core/device.h>
#include <ember/core/cuda/runtime.h>
#include <ember/kernels/cuda/selftest.h>

#include "device_buffer.h"

using ember::testing::DeviceBuffer;

TEST_CASE("cuda runtime: devices and properties", "[cuda]") {
  int n = 0;
  EMBER_TEST_CUDA(cudaGetDeviceCount(&n));
  REQUIRE(n >= 1);
  REQUIRE(ember::cuda_built());
  REQUIRE(ember::cuda_device_count() == n);
  cudaDeviceProp p{};
  EMBER_TEST_CUDA(cudaGetDeviceProperties(&p, 0));
  CHECK(p.warpSize == 32);
  CHECK(p.maxThreadsPerBlock == 1024);
  CHECK(p.sharedMemPerBlock == 48 * 1024);
  int v = 0;
  EMBER_TEST_CUDA(cudaDeviceGetAttribute(&v, cudaDevAttrMaxThreadsPerBlock, 0));
  CHECK(v == 1024);
  CHECK(cudaSetDevice(n) == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaSuccess);  // reading it clears it
}

TEST_CASE("cuda runtime: malloc, memcpy, memset round trip", "[cuda]") {
  std::vector<float> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 0.5f;
  DeviceBuffer<float> d(host);
  DeviceBuffer<float> e(host.size());
  EMBER_TEST_CUDA(cudaMemcpy(e.data(), d.data(), host.size() * sizeof(float), cudaMemcpyDeviceToDevice));
  REQUIRE(e.download() == host);
  EMBER_TEST_CUDA(cudaMemset(e.data(), 0, host.size() * sizeof(float)));
  REQUIRE(e.download() == std::vector<float>(host.size(), 0.0f));
  std::vector<float> back(host.size());
  EMBER_TEST_CUDA(cudaMemcpy(back.data(), d.data(), back.size() * sizeof(float), cudaMemcpyDefault));
  REQUIRE(back == host);
  d.check_guards();
  e.check_guards();
}

TEST_CASE("cuda runtime: bad copies and frees are errors", "[cuda]") {
  DeviceBuffer<float> d(16);
  std::vector<float> h(16);
  // Direction swapped: the destination is host memory.
  CHECK(cudaMemcpy(h.data(), d.data(), 64, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  int x = 0;
  CHECK(cudaFree(&x) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

TEST_CASE("cuda runtime: streams, events and host functions", "[cuda]") {
  cudaStream_t s = nullptr;
  EMBER_TEST_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t start = nullptr, stop = nullptr;
  EMBER_TEST_CUDA(cudaEventCreate(&start));
  EMBER_TEST_CUDA(cudaEventCreate(&stop));
  std::vector<float> host(4096, 2.0f), back(4096);
  float* pinned = nullptr;
  EMBER_TEST_CUDA(cudaMallocHost(reinterpret_cast<void**>(&pinned), host.size() * sizeof(float)));
  DeviceBuffer<float> d(host.size());
  EMBER_TEST_CUDA(cudaEventRecord(start, s));
  EMBER_TEST_CUDA(cudaMemcpyAsync(d.data(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, s));
  int calls = 0;
  EMBER_TEST_CUDA(cudaLaunchHostFunc(s, [](void* p) { ++*static_cast<int*>(p); }, &calls));
  EMBER_TEST_CUDA(cudaMemcpyAsync(pinned, d.data(), host.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
  EMBER_TEST_CUDA(cudaEventRecord(stop, s));
  EMBER_TEST_CUDA(cudaEventSynchronize(stop));
  CHECK(cudaEventQuery(stop) == cudaSuccess);
  float ms = -1;
  EMBER_TEST_CUDA(cudaEventElapsedTime(&ms, start, stop));
  CHECK(ms >= 0);
  EMBER_TEST_CUDA(cudaStreamSynchronize(s));
  CHECK(calls == 1);
  CHECK(std::vector<float>(pinned, pinned + host.size()) == host);
  CHECK(cudaStreamQuery(s) == cudaSuccess);
  EMBER_TEST_CUDA(cudaFreeHost(pinned));
  EMBER_TEST_CUDA(cudaEventDestroy(start));
  EMBER_TEST_CUDA(cudaEventDestroy(stop));
  EMBER_TEST_CUDA(cudaStreamDestroy(s));
}

TEST_CASE("cuda runtime: pointer attributes", "[cuda]") {
  DeviceBuffer<int> d(8);
  cudaPointerAttributes a{};
  EMBER_TEST_CUDA(cudaPointerGetAttributes(&a, d.data()));
  CHECK(a.type == cudaMemoryTypeDevice);
  CHECK(a.device == 0);
  int local = 0;
  EMBER_TEST_CUDA(cudaPointerGetAttributes(&a, &local));
  CHECK(a.type == cudaMemoryTypeUnregistered);
}

TEST_CASE("cuda runtime: out of memory is cudaErrorMemoryAllocation", "[cuda]") {
  size_t free_bytes = 0, total = 0;
  EMBER_TEST_CUDA(cudaMemGetInfo(&free_bytes, &total));
  REQUIRE(free_bytes <= total);
  void* p = nullptr;
  CHECK(cudaMalloc(&p, total + (size_t{1} << 30)) == cudaErrorMemoryAllocation);
  CHECK(p == nullptr);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
}

TEST_CASE("cuda runtime: every device works from its own host thread", "[cuda]") {
  const int n = ember::cuda::device_count();
  std::vector<int> ok(static_cast<size_t>(n), 0);
  std::vector<std::thread> ranks;
  for (int dev = 0; dev < n; ++dev)
    ranks.emplace_back([dev, &ok] {
      if (cudaSetDevice(dev) != cudaSuccess) return;
      const int64_t len = 4096;
      float *x = nullptr, *y = nullptr, *sums = nullptr;
      if (cudaMalloc(reinterpret_cast<void**>(&x), len * 4) || cudaMalloc(reinterpret_cast<void**>(&y), len * 4) ||
          cudaMalloc(reinterpret_cast<void**>(&sums), len / 256 * 4))
        return;
      std::vector<float> ones(len, 1.0f);
      cudaMemcpy(x, ones.data(), len * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(y, ones.data(), len * 4, cudaMemcpyHostToDevice);
      ember::cuda::selftest_axpy(len, static_cast<float>(dev + 1), x, y);  // y = dev + 2
      ember::cuda::selftest_block_sum(len, 256, y, sums);
      std::vector<float> got(len / 256);
      cudaMemcpy(got.data(), sums, got.size() * 4, cudaMemcpyDeviceToHost);
      bool good = true;
      for (float v : got) good = good && v == 256.0f * static_cast<float>(dev + 2);
      ok[static_cast<size_t>(dev)] = good;
      cudaFree(x);
      cudaFree(y);
      cudaFree(sums);
    });
  for (auto& t : ranks) t.join();
  for (int dev = 0; dev < n; ++dev) CHECK(ok[static_cast<size_t>(dev)] == 1);
}

TEST_CASE("cuda kernels: self-test axpy (flat launch) matches the CPU", "[cuda]") {
  for (int64_t n : {0, 1, 255, 256, 257, 100000}) {
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n)), want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      x[static_cast<size_t>(i)] = std::sin(static_cast<float>(i));
      y[static_cast<size_t>(i)] = std::cos(static_cast<float>(i));
      want[static_cast<size_t>(i)] = 1.5f * x[static_cast<size_t>(i)] + y[static_cast<size_t>(i)];
    }
    DeviceBuffer<float> dx(x), dy(y);
    ember::cuda::selftest_axpy(n, 1.5f, dx.data(), dy.data());
    ember::testing::require_close(dy.download(), want, 0, 0, "axpy");
    dy.check_guards();
  }
}

TEST_CASE("cuda kernels: self-test block sum (barriers and shuffles) matches the CPU", "[cuda]") {
  for (int block : {32, 64, 256, 1024}) {
    const int64_t blocks = 7, n = blocks * block;
    std::vector<float> x(static_cast<size_t>(n));
    std::vector<float> want(static_cast<size_t>(blocks), 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      x[static_cast<size_t>(i)] = static_cast<float>((i * 7) % 13) - 6.0f;
      want[static_cast<size_t>(i / block)] += x[static_cast<size_t>(i)];
    }
    DeviceBuffer<float> dx(x), out(static_cast<size_t>(blocks));
    ember::cuda::selftest_block_sum(n, block, dx.data(), out.data());
    ember::testing::require_close(out.download(), want, 1e-4, 1e-5, "block sum");
    out.check_guards();
  }
}

TEST_CASE("cuda env_switch: unset, empty and the off value are false, the on value true, others an error",
          "[cuda][runtime]") {
  const char* name = "EMBER_TEST_ENV_SWITCH";
  ::unsetenv(name);
  CHECK_FALSE(ember::cuda::env_switch(name, "auto", "64"));
  ::setenv(name, "", 1);
  CHECK_FALSE(ember::cuda::env_switch(name, "auto", "64"));
  ::setenv(name, "auto", 1);
  CHECK_FALSE(ember::cuda::env_switch(name, "auto", "64"));
  ::setenv(name, "64", 1);
  CHECK(ember::cuda::env_switch(name, "auto", "64"));
  ::setenv(name, "32", 1);
  CHECK_THROWS_WITH(ember::cuda::env_switch(name, "auto", "64"),
                    "EMBER_TEST_ENV_SWITCH=32 is not understood (expected 'auto' or '64')");
  ::unsetenv(name);
}
