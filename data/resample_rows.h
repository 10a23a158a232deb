#pragma once
// The row kernels of the fused image pipeline (image_pipeline.cpp): PIL's horizontal pass over one
// row of interleaved pixels and the vertical pass over k rows, in PIL's fixed-point arithmetic
// (resample.h). Internal to data/; the tests force each horizontal path and compare them.
//
// Two horizontal paths (Note [Horizontal pass in AVX2] in resample_rows.cpp):
//   scalar: one output sample at a time, the tap loop unrolled for 3, 5, 7 and 9 taps; the
//           reference, and the path of every CPU without AVX2 and every layout but RGB;
//   avx2:   RGB (3 interleaved channels), 4 output pixels x 3 channels per step with 16-bit
//           multiply-adds (VPMADDWD) on weights split in two 16-bit halves; the same int32 sums,
//           so the same bytes.

#include <cstdint>
#include <vector>

#include "resample.h"

namespace ember::data::detail {

// PIL's taps recast with one trip count: output i reads in[start[i] .. start[i] + k) with weights
// w[i * k + t]. Each window is PIL's shifted left where it would pass the end of the input, with
// zero weights on the extra taps, so the integer sums (and so the bytes) are PIL's exactly while
// the inner loop no longer depends on i. Only outputs [lo, hi) are kept (i counts from lo).
struct FixedTaps {
  int64_t k = 0;
  std::vector<int32_t> start;  // never decreasing along i
  std::vector<int32_t> w;
};

FixedTaps fixed_taps(const AxisCoeffs& c, int64_t in_size, int64_t lo, int64_t hi);

enum class HorizontalPath { scalar, avx2 };

// The path new HorizontalPass objects take: avx2 where the CPU has AVX2, scalar otherwise.
HorizontalPath horizontal_path();
const char* horizontal_path_name(HorizontalPath path);  // "scalar" or "avx2"
// Chooses the path for the whole process (tests compare both). Returns false, changing nothing,
// when asked for avx2 on a CPU without it. Passes already built keep their path.
bool set_horizontal_path(HorizontalPath path);

// The horizontal pass of one image, built once from its taps and reused for every row: input rows
// of `in_size` pixels of `channels` interleaved u8 samples (`channels` = 1 for a CHW plane), output
// rows of taps.start.size() pixels in the same interleaving.
class HorizontalPass {
 public:
  HorizontalPass() = default;
  HorizontalPass(FixedTaps taps, int64_t channels, int64_t in_size);

  // dst[i * channels + ch] = PIL's sum for output i, channel ch. row: in_size * channels bytes;
  // dst: outputs() * channels bytes plus kDstSlack writable bytes after them (the AVX2 stores write
  // whole 8-byte words; the slack bytes are left with unspecified values).
  void run(const uint8_t* row, uint8_t* dst) const;

  static constexpr int64_t kDstSlack = 8;
  int64_t outputs() const { return static_cast<int64_t>(taps_.start.size()); }
  const FixedTaps& taps() const { return taps_; }
  // The path this pass runs, and how many leading outputs it runs on AVX2 (the rest, whose 16-byte
  // loads would pass the end of the row, run the scalar loop).
  HorizontalPath path() const { return vector_outputs_ > 0 ? HorizontalPath::avx2 : HorizontalPath::scalar; }
  int64_t vector_outputs() const { return vector_outputs_; }

 private:
  FixedTaps taps_;
  int64_t channels_ = 1;
  int64_t vector_outputs_ = 0;  // a multiple of 4
  int64_t pairs_ = 0;           // taps per output rounded up to pairs: (k + 1) / 2
  // The AVX2 weights: per group of 4 outputs and per tap pair, 4 vectors of 8 int32, each int32 two
  // int16 weights (Note [Horizontal pass in AVX2]).
  std::vector<int32_t> packed_;
};

// One row of the vertical pass: k consecutive rows of `first` (row stride n) weighted and summed,
// column by column. acc: n int32 of scratch; out: n bytes.
void vertical_row(const uint8_t* first, int64_t n, const int32_t* k, int64_t taps, int32_t* acc, uint8_t* out);

}  // namespace ember::data::detail
