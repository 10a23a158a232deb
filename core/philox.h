#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator. philox(counter, key) is a pure function, so any thread (CPU loop or
// CUDA thread) can compute the numbers for element i directly, and the CPU and CUDA backends
// produce identical streams for the same seed.
//
// ember's convention (the CUDA kernels must follow it exactly):
//   key     = (seed low 32 bits, seed high 32 bits)
//   counter = (c low, c high, 0, 0) where c = generator offset + block index
// Each call yields four 32-bit words. For a fill of n elements starting at offset `o`:
//   uniform float32:  element i uses word i % 4 of block o + i / 4;   u = (w >> 8) * 2^-24
//   uniform float64:  element i uses words 2(i%2), 2(i%2)+1 of block o + i / 2 (53 bits)
//   normal float32:   element i uses words 2(i%2), 2(i%2)+1 of block o + i / 2 (Box-Muller, cos branch)
//   normal float64:   element i uses all four words of block o + i
// and the generator's offset advances by the number of blocks used.

#include <cmath>
#include <cstdint>

#include "dtype.h"  // EMBER_HD

namespace ember {

struct Philox4 {
  uint32_t v[4];
};

EMBER_HD inline void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// The full generator: a 128-bit counter and a 64-bit key (two words), ten rounds.
EMBER_HD inline Philox4 philox4x32_10(Philox4 ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // Weyl key increments
  uint32_t c0 = ctr.v[0], c1 = ctr.v[1], c2 = ctr.v[2], c3 = ctr.v[3];
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kM0, c0, hi0, lo0);
    philox_mulhilo(kM1, c2, hi1, lo1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += kW0;
    k1 += kW1;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// ember's use: counter = (c lo, c hi, 0, 0), key = (seed lo, seed hi).
EMBER_HD inline Philox4 philox4x32_10(uint64_t counter, uint64_t seed) {
  return philox4x32_10(Philox4{{static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u}},
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// [0, 1) with 24 random bits.
EMBER_HD inline float philox_uniform_f32(uint32_t w) { return static_cast<float>(w >> 8) * (1.0f / 16777216.0f); }
// [0, 1) with 53 random bits.
EMBER_HD inline double philox_uniform_f64(uint32_t lo, uint32_t hi) {
  const uint64_t bits = ((static_cast<uint64_t>(hi) << 32) | lo) >> 11;
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);
}
// A standard normal from two words (Box-Muller; u1 in (0, 1] so log never sees 0).
EMBER_HD inline float philox_normal_f32(uint32_t w1, uint32_t w2) {
  const float u1 = 1.0f - philox_uniform_f32(w1);
  const float u2 = philox_uniform_f32(w2);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}
EMBER_HD inline double philox_normal_f64(const Philox4& r) {
  const double u1 = 1.0 - philox_uniform_f64(r.v[0], r.v[1]);
  const double u2 = philox_uniform_f64(r.v[2], r.v[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
}

}  // namespace ember
