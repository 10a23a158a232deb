#pragma once
// Counter-based random streams for the data pipeline: one per (seed, epoch, sample index). Below
// the data pipeline (core/) because its CUDA augmentation kernels (kernels/cuda/augment.cu) draw
// from the same streams.
//
// Note [Per-sample randomness]
// Augmentation must not depend on which thread, worker process or batch composition handles a
// sample, and a resumed run must see exactly the crops and flips it would have seen. So no
// generator state is carried between samples: the stream for a sample is a pure function of
// (seed, epoch, dataset index), computed with Philox4x32-10 (core/philox.h):
//   key     = (seed low 32 bits ^ kDataKeyTag, seed high 32 bits)
//   counter = (block, epoch low 32 bits, index low 32 bits, index high 32 bits)
// where `block` counts the Philox blocks used by this stream so far (four 32-bit words each).
// The epoch's shuffle uses the same layout with index = kShuffleStream, a value no sample has.
// The key tag keeps (epoch 0, sample 0) from replaying the tensor generator's stream
// (core/generator.h: counter (offset, 0, 0), key = seed) when a run uses one seed for both.
//
// Every draw consumes a fixed number of words (uniform: 1, below: 2), so any consumer, including
// a future CUDA augmentation kernel (the functions are EMBER_HD), can reproduce a stream exactly.

#include <cstdint>

#include "philox.h"

namespace ember {

// The stream index reserved for an epoch's shuffle permutation.
inline constexpr uint64_t kShuffleStream = ~uint64_t{0};
// Batch b's Mixup/CutMix draws (data/mix.h) use index kMixStream | b: the top bit is set, which
// no dataset index has.
inline constexpr uint64_t kMixStream = uint64_t{1} << 63;
// XORed into the key's low word: "data" in ASCII.
inline constexpr uint32_t kDataKeyTag = 0x64617461u;

// High 64 bits of a 64x64-bit product, without __int128 (portable to device code).
EMBER_HD inline uint64_t mul_hi_u64(uint64_t a, uint64_t b) {
  const uint64_t a_lo = a & 0xffffffffu, a_hi = a >> 32, b_lo = b & 0xffffffffu, b_hi = b >> 32;
  const uint64_t lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo, lo_hi = a_lo * b_hi, hi_hi = a_hi * b_hi;
  const uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xffffffffu) + lo_hi;
  return hi_hi + (hi_lo >> 32) + (cross >> 32);
}

// One sample's random stream. Cheap to construct (no Philox call until the first draw); copy it
// to replay the same draws. Epochs are taken modulo 2^32 and a stream holds 2^34 words: the
// loader checks the first, and no transform comes near the second.
class SampleRng {
 public:
  EMBER_HD SampleRng(uint64_t seed, uint64_t epoch, uint64_t index)
      : seed_(seed), epoch_(static_cast<uint32_t>(epoch)), index_(index) {}

  EMBER_HD uint32_t next_u32() {
    const uint32_t lane = static_cast<uint32_t>(word_ & 3u);
    if (lane == 0) {
      const Philox4 ctr{{static_cast<uint32_t>(word_ >> 2), epoch_, static_cast<uint32_t>(index_),
                         static_cast<uint32_t>(index_ >> 32)}};
      block_ = philox4x32_10(ctr, static_cast<uint32_t>(seed_) ^ kDataKeyTag, static_cast<uint32_t>(seed_ >> 32));
    }
    ++word_;
    return block_.v[lane];
  }
  // Two words, the first in the low half.
  EMBER_HD uint64_t next_u64() {
    const uint64_t lo = next_u32();
    const uint64_t hi = next_u32();
    return (hi << 32) | lo;
  }
  // [0, 1) with 24 random bits; one word.
  EMBER_HD float uniform() { return philox_uniform_f32(next_u32()); }
  // An integer in [0, n) for n >= 1; two words. Lemire's multiply-shift without the rejection
  // step: the bias is below n / 2^64 (nothing measurable), and the word count stays fixed.
  EMBER_HD uint64_t below(uint64_t n) { return mul_hi_u64(next_u64(), n); }
  // Words drawn so far.
  EMBER_HD uint64_t words_used() const { return word_; }

 private:
  uint64_t seed_;
  uint32_t epoch_;
  uint64_t index_;
  uint64_t word_ = 0;
  Philox4 block_{{0u, 0u, 0u, 0u}};
};

// The stream of sample `index` in `epoch` of a run seeded by `seed` (see Note [Per-sample randomness]).
EMBER_HD inline SampleRng sample_rng(uint64_t seed, uint64_t epoch, uint64_t index) {
  return SampleRng(seed, epoch, index);
}

}  // namespace ember
