#pragma once
// Helpers for the CUDA-vs-CPU kernel tests: seeded random inputs, iteration shapes and strided
// operands, and the tolerances used when the two sides may round differently.
//
// Tolerances. Under the SIMT emulator the .cu files are compiled by the same g++ with the same
// flags as the CPU kernels and call the same libm, so a kernel that performs the CPU's
// operations in the CPU's order gives identical bits (kExact). On a real GPU two things
// differ: nvcc fuses a * b + c into one FMA (one rounding instead of two), and CUDA's
// exp/log/tanh/erf/pow are accurate to 1-2 ulp rather than glibc's (almost always) correctly
// rounded results. kUlps allows for that: a few units in the last place, with an absolute
// floor for results that cancel to near zero (e.g. x - y, gelu'(x) near its root).

#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <type_traits>
#include <vector>

#include <ember/core/dtype.h>
#include <ember/kernels/strided.h>

#include "device_buffer.h"

namespace ember::testing {

using kernels::IterShape;
using kernels::Operand;

struct Tol {
  double atol, rtol;
};

#if defined(EMBER_SIMT)
inline constexpr bool kSimt = true;
#else
inline constexpr bool kSimt = false;
#endif

// Same operations in the same order: identical under SIMT. On a GPU FMA contraction and the
// device libm (tanh/erf/exp 2 ulp, pow 4 ulp in f32) allow ~16 ulp relative (f32 ulp 1.2e-7,
// f64 2.2e-16), and an absolute floor for results that cancel: gelu_tanh(-4) = 0.5 x (1 + tanh)
// with tanh ~ -1 keeps tanh's absolute error (2 ulp of 1), scaled by |x| <= 4 and, in the
// backward, by |g| <= 3: ~6e-6 in f32, ~1e-14 in f64.
template <typename T>
Tol same_math() {
  if (kSimt) return {0, 0};
  if constexpr (std::is_same_v<T, float>) return {6e-6, 2e-6};
  else return {1e-13, 4e-15};
}

// Reductions and sums in a different order than the CPU's sequential loop. Accumulation is in
// double on both sides; f32 outputs are rounded from doubles that differ by ~1e-13 relative,
// so they agree to within one f32 ulp (a rounding boundary may fall between them); f64 outputs
// differ by the summation order's rounding, bounded by n * eps * sum|x| (~1e-12 relative for the
// test sizes; the absolute floor covers sums that cancel to near zero).
template <typename T>
Tol reordered_sum() {
  if constexpr (std::is_same_v<T, float>) return {1e-6, 2.4e-7};  // 2 f32 ulp
  else return {1e-10, 1e-12};
}

template <typename T>
std::vector<T> random_values(size_t n, uint64_t seed, double lo = -3, double hi = 3) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) {
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) x = T(static_cast<float>(u(rng)));
    else if constexpr (std::is_same_v<T, bool>) x = u(rng) > (lo + hi) / 2;
    else x = static_cast<T>(u(rng));
  }
  return v;
}

inline IterShape iter_shape(std::initializer_list<int64_t> sizes) {
  IterShape s;
  for (const int64_t d : sizes) s.sizes[s.ndim++] = d;
  return s;
}

// Row-major contiguous strides over `shape`.
inline Operand contiguous(void* data, const IterShape& shape) {
  Operand op;
  op.data = data;
  int64_t st = 1;
  for (int d = shape.ndim - 1; d >= 0; --d) {
    op.strides[d] = st;
    st *= shape.sizes[d];
  }
  return op;
}

inline Operand strided(void* data, std::initializer_list<int64_t> strides) {
  Operand op;
  op.data = data;
  int d = 0;
  for (const int64_t s : strides) op.strides[d++] = s;
  return op;
}

// Elements an operand spans over `shape` (non-negative strides): the buffer size it needs.
inline int64_t extent(const IterShape& shape, const Operand& op) {
  int64_t last = 0;
  for (int d = 0; d < shape.ndim; ++d) {
    if (shape.sizes[d] == 0) return 0;
    last += (shape.sizes[d] - 1) * op.strides[d];
  }
  return last + 1;
}

inline Operand with_data(Operand op, void* data) {
  op.data = data;
  return op;
}

// Bitwise equality of two element vectors (NaN payloads, -0 included; on a real GPU any NaN for a
// NaN: Note [Bits on a real GPU] in device_buffer.h).
template <typename T>
void require_same_bits(const std::vector<T>& got, const std::vector<T>& want, const char* what = "") {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (!kExactNanBits && is_nan_value(got[i]) && is_nan_value(want[i])) continue;
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      FAIL(what << ": bits differ at " << i << ": got " << static_cast<double>(got[i]) << ", want "
                << static_cast<double>(want[i]));
    }
  }
}

}  // namespace ember::testing
