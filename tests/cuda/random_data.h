#pragma once
// Seeded random inputs for the kernels/cuda tests (the same values on every run and machine).

#include <cstdint>
#include <random>
#include <vector>

namespace ember::testing {

// n values uniform in [lo, hi), from a generator seeded with `seed`.
template <typename T>
std::vector<T> random_vector(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(gen));
  return v;
}

// n small integers in [0, levels) as T: many exact ties (max pooling's first-index rule).
template <typename T>
std::vector<T> random_ties(size_t n, uint64_t seed, int levels = 3) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> dist(0, levels - 1);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(gen));
  return v;
}

}  // namespace ember::testing
