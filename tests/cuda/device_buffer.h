#pragma once
// Test helpers for kernels/cuda: device buffers with guard bytes, and result comparison.
//
// DeviceBuffer<T> owns n elements of device memory with kGuard guard elements on each side,
// filled with a byte pattern. check_guards() fails the test if a kernel wrote outside its
// output. Runs unchanged on a real GPU and on the SIMT emulator.

#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace ember::testing {

// Note [Bits on a real GPU]
// On the SIMT emulator the kernels are host code, so bit-for-bit checks against the CPU kernels
// hold down to NaN payloads. On a real GPU (first run on an H200, 2026-12-04) two things differ
// and the checks allow exactly them:
//  - NaN bits: a GPU's arithmetic and cuDNN return a NaN of their own (f32 0x7fffffff, f16 and
//    bf16 0x7fff) whatever NaN went in, where x86 keeps the NaN operand's sign and payload: any
//    NaN stands for a NaN there.
//  - cuDNN's own arithmetic: its average pooling, sigmoid and tanh round differently from the
//    CPU kernels by an ulp or a few (kCudnnUlps, of the values' magnitude: an average of values
//    of both signs can be far smaller than they are), and it sums bias gradients in its own
//    order. Its max pooling can return +0 for a window whose largest value is -0.
#if EMBER_SIMT
inline constexpr bool kExactNanBits = true;
inline constexpr double kCudnnUlps = 0;
#else
inline constexpr bool kExactNanBits = false;
inline constexpr double kCudnnUlps = 4;
#endif

template <typename T>
bool is_nan_value(const T& v) {
  return std::isnan(static_cast<double>(v));
}

#define EMBER_TEST_CUDA(expr)                                                        \
  do {                                                                               \
    const cudaError_t e_ = (expr);                                                   \
    INFO(#expr << " -> " << cudaGetErrorName(e_));                                   \
    REQUIRE(e_ == cudaSuccess);                                                      \
  } while (0)

template <typename T>
class DeviceBuffer {
 public:
  static constexpr size_t kGuard = 16;          // elements of guard on each side
  static constexpr unsigned char kPattern = 0xA5;

  explicit DeviceBuffer(size_t n) : n_(n) {
    EMBER_TEST_CUDA(cudaMalloc(&base_, (n_ + 2 * kGuard) * sizeof(T)));
    EMBER_TEST_CUDA(cudaMemset(base_, kPattern, (n_ + 2 * kGuard) * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { (void)cudaFree(base_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() { return reinterpret_cast<T*>(base_) + kGuard; }
  const T* data() const { return reinterpret_cast<const T*>(base_) + kGuard; }
  size_t size() const { return n_; }

  void upload(const std::vector<T>& host) {
    REQUIRE(host.size() == n_);
    if (n_) EMBER_TEST_CUDA(cudaMemcpy(data(), host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    EMBER_TEST_CUDA(cudaDeviceSynchronize());
    std::vector<T> host(n_);
    if (n_) EMBER_TEST_CUDA(cudaMemcpy(host.data(), data(), n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // Fails the test when a guard byte changed (an out-of-bounds write by a kernel).
  void check_guards() const {
    EMBER_TEST_CUDA(cudaDeviceSynchronize());
    std::vector<unsigned char> g(kGuard * sizeof(T));
    const auto* bytes = reinterpret_cast<const unsigned char*>(base_);
    for (size_t side = 0; side < 2; ++side) {
      const unsigned char* src = side == 0 ? bytes : bytes + (kGuard + n_) * sizeof(T);
      EMBER_TEST_CUDA(cudaMemcpy(g.data(), src, g.size(), cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < g.size(); ++i) {
        INFO((side == 0 ? "front" : "back") << " guard byte " << i << " was overwritten");
        REQUIRE(g[i] == kPattern);
      }
    }
  }

 private:
  void* base_ = nullptr;
  size_t n_ = 0;
};

// Elementwise comparison: |got - want| <= atol + rtol * |want|, NaN matching NaN, infinities
// matching exactly. Reports the first mismatch with its index.
template <typename T>
void require_close(const std::vector<T>& got, const std::vector<T>& want, double atol, double rtol,
                   const std::string& what = "") {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    bool ok;
    if (std::isnan(w)) ok = std::isnan(g);
    else if (std::isinf(w)) ok = g == w;
    else ok = std::isfinite(g) && std::fabs(g - w) <= atol + rtol * std::fabs(w);
    if (!ok) {
      std::ostringstream os;
      os << what << " mismatch at " << i << ": got " << g << ", want " << w << " (atol " << atol << ", rtol " << rtol
         << ")";
      FAIL(os.str());
    }
  }
}

// Normalized mean squared error sum((g-w)^2) / sum(w^2) (ggml's test-backend-ops measure).
template <typename T>
double nmse(const std::vector<T>& got, const std::vector<T>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    num += d * d;
    den += static_cast<double>(want[i]) * static_cast<double>(want[i]);
  }
  return den == 0 ? num : num / den;
}

// The buffer's contents, after checking that nothing was written outside them.
template <typename T>
std::vector<T> checked(const DeviceBuffer<T>& b) {
  b.check_guards();
  return b.download();
}

}  // namespace ember::testing
