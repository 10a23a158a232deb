// CUDA random fills and dropout (contracts in random.h; the CPU reference is core/generator.cpp
// and layers/dropout.cpp, the shared per-element math kernels/random.h).
//
// Parallel decomposition: one thread per Philox block. Philox is counter-based — block b's four
// words are a pure function of (seed, offset + b) — so threads need no state and no
// coordination: thread b computes its block once and writes the k consecutive elements that
// use it (k = 4 for f32 uniform, bernoulli and dropout, 2 for f64 uniform and f32 normal, 1 for
// f64 normal), bounds-checked for the last block. Flat launches, grid-stride.

#include "launch.h"

#include "random.h"

#include <cstdint>

#include "../../core/error.h"
#include "../../core/philox.h"
#include "../elementwise.h"  // ops::convert
#include "../random.h"
#include "common.cuh"
#include "../../core/cuda/runtime.h"

namespace ember::kernels::gpu {

namespace {

using detail::grid_for;
using detail::kThreads;

// Calls put(element index, block words) for the k elements of block b that exist.
template <int K, typename Put>
__device__ void for_block_elements(int64_t b, int64_t n, const Put& put) {
  for (int e = 0; e < K; ++e) {
    const int64_t i = b * K + e;
    if (i < n) put(i);
  }
}

__global__ void uniform_f32_kernel(int64_t n, float* out, uint64_t seed, uint64_t offset, float lo, float width) {
  EMBER_THREAD_LOOP(b, (n + 3) / 4) {  // b: this thread's Philox block
    const Philox4 r = philox4x32_10(offset + static_cast<uint64_t>(b), seed);
    for_block_elements<4>(b, n, [&](int64_t i) { out[i] = random_uniform_f32(r.v[i % 4], lo, width); });
  }
}

__global__ void uniform_f64_kernel(int64_t n, double* out, uint64_t seed, uint64_t offset, double lo, double width) {
  EMBER_THREAD_LOOP(b, (n + 1) / 2) {  // b: this thread's Philox block
    const Philox4 r = philox4x32_10(offset + static_cast<uint64_t>(b), seed);
    for_block_elements<2>(b, n, [&](int64_t i) { out[i] = random_uniform_f64(r, i, lo, width); });
  }
}

__global__ void normal_f32_kernel(int64_t n, float* out, uint64_t seed, uint64_t offset, float mean, float std) {
  EMBER_THREAD_LOOP(b, (n + 1) / 2) {  // b: this thread's Philox block
    const Philox4 r = philox4x32_10(offset + static_cast<uint64_t>(b), seed);
    for_block_elements<2>(b, n, [&](int64_t i) { out[i] = random_normal_f32(r, i, mean, std); });
  }
}

__global__ void normal_f64_kernel(int64_t n, double* out, uint64_t seed, uint64_t offset, double mean, double std) {
  EMBER_THREAD_LOOP(b, n) {  // one element per block
    out[b] = random_normal_f64(philox4x32_10(offset + static_cast<uint64_t>(b), seed), mean, std);
  }
}

template <typename T>
__global__ void bernoulli_kernel(int64_t n, T* out, uint64_t seed, uint64_t offset, float p) {
  EMBER_THREAD_LOOP(b, (n + 3) / 4) {  // b: this thread's Philox block
    const Philox4 r = philox4x32_10(offset + static_cast<uint64_t>(b), seed);
    // The CPU draws a float32 0/1 and converts it to the dtype: the same conversion here.
    for_block_elements<4>(b, n, [&](int64_t i) {
      out[i] = ops::convert<T>(random_bernoulli(r.v[i % 4], p) ? 1.0f : 0.0f);
    });
  }
}

__global__ void randint_kernel(int64_t n, int64_t* out, uint64_t seed, uint64_t offset, int64_t low, uint64_t range) {
  EMBER_THREAD_LOOP(b, (n + 3) / 4) {  // b: this thread's Philox block
    const Philox4 r = philox4x32_10(offset + static_cast<uint64_t>(b), seed);
    for_block_elements<4>(b, n, [&](int64_t i) { out[i] = random_int(r.v[i % 4], low, range); });
  }
}

// The CPU: mask = T(bernoulli 0/1) * T(1 / (1 - p)) (MulScalar), y = x * mask (Mul).
template <typename T>
__global__ void dropout_kernel(int64_t n, const T* x, T* y, T* mask, uint64_t seed, uint64_t offset, float keep,
                               T scale) {
  EMBER_THREAD_LOOP(b, (n + 3) / 4) {  // b: this thread's Philox block
    const Philox4 r = philox4x32_10(offset + static_cast<uint64_t>(b), seed);
    for_block_elements<4>(b, n, [&](int64_t i) {
      const T m = (random_bernoulli(r.v[i % 4], keep) ? T(1) : T(0)) * scale;
      if (mask) mask[i] = m;
      y[i] = x[i] * m;
    });
  }
}

unsigned grid_blocks(int64_t n, int k) { return grid_for((n + k - 1) / k, kThreads); }

// The declared cost of a fill (Note [Launch ledger] in core/cuda/ledger.h): n elements of `elem`
// bytes written, nothing read, `flops` per element (the Philox rounds are integer work): 3 for a
// uniform (the word's scaling, then lo + width u), 11 for a normal (two scalings, 1 - u1, the log,
// -2 *, the sqrt, 2 pi *, the cos and the product, then mean + std z), 1 for a bernoulli (the
// scaling), 0 for randint.
cuda::Cost fill_cost(int64_t n, size_t elem, double flops) {
  return cuda::cost(0, static_cast<double>(n) * elem, static_cast<double>(n) * flops);
}

}  // namespace

uint64_t philox_blocks_uniform(DType dtype, int64_t n) {
  const auto u = static_cast<uint64_t>(n);
  return dtype == DType::f32 ? (u + 3) / 4 : (u + 1) / 2;
}
uint64_t philox_blocks_normal(DType dtype, int64_t n) {
  const auto u = static_cast<uint64_t>(n);
  return dtype == DType::f32 ? (u + 1) / 2 : u;
}
uint64_t philox_blocks_bernoulli(int64_t n) { return (static_cast<uint64_t>(n) + 3) / 4; }

void fill_uniform(DType dtype, int64_t n, void* out, uint64_t seed, uint64_t offset, double lo, double hi) {
  EMBER_CHECK(dtype == DType::f32 || dtype == DType::f64, "uniform_: expected float32 or float64, got ", dtype);
  if (n == 0) return;
  const cudaStream_t stream = cuda::current_stream();
  if (dtype == DType::f32)
    EMBER_LAUNCH_FLAT(uniform_f32_kernel, grid_blocks(n, 4), kThreads, stream, fill_cost(n, sizeof(float), 3), n,
                      static_cast<float*>(out), seed, offset, static_cast<float>(lo), static_cast<float>(hi - lo));
  else
    EMBER_LAUNCH_FLAT(uniform_f64_kernel, grid_blocks(n, 2), kThreads, stream, fill_cost(n, sizeof(double), 3), n,
                      static_cast<double*>(out), seed, offset, lo, hi - lo);
  cuda::check_launch("uniform_");
}

void fill_normal(DType dtype, int64_t n, void* out, uint64_t seed, uint64_t offset, double mean, double std) {
  EMBER_CHECK(dtype == DType::f32 || dtype == DType::f64, "normal_: expected float32 or float64, got ", dtype);
  if (n == 0) return;
  const cudaStream_t stream = cuda::current_stream();
  if (dtype == DType::f32)
    EMBER_LAUNCH_FLAT(normal_f32_kernel, grid_blocks(n, 2), kThreads, stream, fill_cost(n, sizeof(float), 11), n,
                      static_cast<float*>(out), seed, offset, static_cast<float>(mean), static_cast<float>(std));
  else
    EMBER_LAUNCH_FLAT(normal_f64_kernel, grid_blocks(n, 1), kThreads, stream, fill_cost(n, sizeof(double), 11), n,
                      static_cast<double*>(out), seed, offset, mean, std);
  cuda::check_launch("normal_");
}

void fill_bernoulli(DType dtype, int64_t n, void* out, uint64_t seed, uint64_t offset, double p) {
  EMBER_CHECK(p >= 0 && p <= 1, "bernoulli: probability ", p, " is not in [0, 1]");
  if (n == 0) return;
  EMBER_DISPATCH_ALL(dtype, "bernoulli", [&] {
    EMBER_LAUNCH_FLAT((bernoulli_kernel<scalar_t>), grid_blocks(n, 4), kThreads, cuda::current_stream(),
                      fill_cost(n, sizeof(scalar_t), 1), n, static_cast<scalar_t*>(out), seed, offset,
                      static_cast<float>(p));
  });
  cuda::check_launch("bernoulli");
}

void fill_randint(int64_t n, int64_t* out, uint64_t seed, uint64_t offset, int64_t low, int64_t high) {
  EMBER_CHECK(high > low, "randint: empty range [", low, ", ", high, ")");
  const uint64_t range = static_cast<uint64_t>(high - low);
  EMBER_CHECK(range <= (1ULL << 32), "randint: range ", range, " is larger than 2^32");
  if (n == 0) return;
  EMBER_LAUNCH_FLAT(randint_kernel, grid_blocks(n, 4), kThreads, cuda::current_stream(),
                    fill_cost(n, sizeof(int64_t), 0), n, out, seed, offset, low, range);
  cuda::check_launch("randint");
}

void dropout_forward(DType dtype, int64_t n, const void* x, void* y, void* mask, uint64_t seed, uint64_t offset,
                     double p) {
  EMBER_CHECK(p >= 0.0 && p < 1.0, "dropout: probability p must be in [0, 1) here, got ", p);
  if (n == 0) return;
  EMBER_DISPATCH_FLOAT(dtype, "dropout", [&] {
    using T = scalar_t;
    // x read; y (and the mask) written; the bernoulli's scaling, the mask's and y's products.
    const double bytes = static_cast<double>(n) * sizeof(T);
    EMBER_LAUNCH_FLAT((dropout_kernel<T>), grid_blocks(n, 4), kThreads, cuda::current_stream(),
                      cuda::cost(bytes, mask ? 2 * bytes : bytes, 3.0 * n), n, static_cast<const T*>(x),
                      static_cast<T*>(y), static_cast<T*>(mask), seed, offset, static_cast<float>(1.0 - p),
                      static_cast<T>(1.0 / (1.0 - p)));
  });
  cuda::check_launch("dropout");
}

}  // namespace ember::kernels::gpu
