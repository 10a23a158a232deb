#pragma once
// Random fills element by element: ember's Philox layout (core/philox.h) as __host__ __device__
// functions of (Philox block, element) shared by the CPU fills (core/generator.cpp) and the
// CUDA kernels (kernels/cuda/random.cu), so that a seed and an offset give the same bits on
// every device.
//
// A fill of n elements starting at block `offset` uses block offset + i / k for element i,
// with k elements per block (kernels/cuda/random.h gives the counts), and the generator's
// offset advances by ceil(n / k):
//   uniform f32  k = 4  word i % 4                    lo + (hi - lo) * u24
//   uniform f64  k = 2  words 2(i % 2), 2(i % 2) + 1  lo + (hi - lo) * u53
//   normal f32   k = 2  words 2(i % 2), 2(i % 2) + 1  mean + std * Box-Muller
//   normal f64   k = 1  all four words               mean + std * Box-Muller
//   bernoulli    k = 4  word i % 4                    u24 < float(p)   (in any dtype)
//   randint      k = 4  word i % 4                    low + (word * range) >> 32
//
// Note [No FMA contraction]
// nvcc contracts a * b + c into one fused multiply-add by default, which rounds once instead
// of twice and would make `lo + width * u` differ from the CPU's in the last bit. mul_rn and
// add_rn are the separately rounded operations on the GPU (__fmul_rn and friends are never
// contracted) and plain arithmetic on the host (g++ does not contract without FMA hardware
// flags; ember builds for the baseline ISA). The Box-Muller transcendental functions
// (logf, cosf, sqrtf) are the platform's: the CPU's and a GPU's libm agree to an ulp or two,
// not bit for bit (the SIMT flavour uses the host libm for both sides, so there they match).

#include <cstdint>

#include "../core/dtype.h"  // EMBER_HD
#include "../core/philox.h"

namespace ember::kernels {

EMBER_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
EMBER_HD inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
EMBER_HD inline double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
EMBER_HD inline double add_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

// lo + width * U[0, 1) from one word (width = hi - lo, rounded to float by the caller).
EMBER_HD inline float random_uniform_f32(uint32_t w, float lo, float width) {
  return add_rn(lo, mul_rn(width, philox_uniform_f32(w)));
}
// Element i (of a block) of a float64 uniform fill.
EMBER_HD inline double random_uniform_f64(const Philox4& r, int64_t i, double lo, double width) {
  const int k = 2 * static_cast<int>(i % 2);
  return add_rn(lo, mul_rn(width, philox_uniform_f64(r.v[k], r.v[k + 1])));
}
EMBER_HD inline float random_normal_f32(const Philox4& r, int64_t i, float mean, float std) {
  const int k = 2 * static_cast<int>(i % 2);
  return add_rn(mean, mul_rn(std, philox_normal_f32(r.v[k], r.v[k + 1])));
}
EMBER_HD inline double random_normal_f64(const Philox4& r, double mean, double std) {
  return add_rn(mean, mul_rn(std, philox_normal_f64(r)));
}
// Whether the float32 uniform of word w falls below p (bernoulli, dropout's keep mask).
EMBER_HD inline bool random_bernoulli(uint32_t w, float p) { return philox_uniform_f32(w) < p; }
// low + an integer in [0, range) by Lemire's multiply-shift (no division), range <= 2^32.
EMBER_HD inline int64_t random_int(uint32_t w, int64_t low, uint64_t range) {
  return low + static_cast<int64_t>((static_cast<uint64_t>(w) * range) >> 32);
}

}  // namespace ember::kernels
