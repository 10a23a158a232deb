#pragma once
// Generator: a seed plus an offset into the Philox stream (see philox.h for the layout).
// Every random fill takes `blocks` Philox blocks starting at the current offset and advances it,
// so the same seed and the same sequence of calls give the same numbers on every device.

#include <cstdint>
#include <mutex>

#include "tensor.h"

namespace ember {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x853c49e6748fea9bULL) : seed_(seed) {}
  void manual_seed(uint64_t seed) {
    std::lock_guard<std::mutex> lock(mu_);
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    std::lock_guard<std::mutex> lock(mu_);
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves `blocks` Philox blocks; returns the first block's counter.
  uint64_t take(uint64_t blocks) {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t first = offset_;
    offset_ += blocks;
    return first;
  }

 private:
  std::mutex mu_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide default generator (seeded by manual_seed).
Generator& default_generator();
void manual_seed(uint64_t seed);

// Random factories (float32 unless opt.dtype says f64; randint/bernoulli as noted).
Tensor rand(const Shape& shape, TensorOptions opt = {}, Generator& gen = default_generator());   // U[0, 1)
Tensor randn(const Shape& shape, TensorOptions opt = {}, Generator& gen = default_generator());  // N(0, 1)
// Integers in [low, high); dtype i64 unless opt.dtype is another integer type.
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opt = {.dtype = DType::i64},
               Generator& gen = default_generator());
// 1 with probability p, else 0, in opt.dtype.
Tensor bernoulli(const Shape& shape, double p, TensorOptions opt = {}, Generator& gen = default_generator());
// In-place fills of an existing float tensor.
Tensor& uniform_(Tensor& t, double lo, double hi, Generator& gen = default_generator());
Tensor& normal_(Tensor& t, double mean, double std, Generator& gen = default_generator());

}  // namespace ember
