// The fused image pipeline's horizontal pass (data/resample_rows.h): the AVX2 path against the
// scalar one, byte for byte, forced with set_horizontal_path; both against a plain int64 sum of
// PIL's taps. PIL's own taps for 3, 5, 7, 9 and more taps (up- and downscaling, odd widths, kept
// windows that reach the end of the row, where the AVX2 pass hands over to the scalar loop), and
// arbitrary taps with negative and large weights (the int16 split of each weight, clamping at 0
// and 255).

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include <ember/data/resample_rows.h>
#include <ember/core/cpu/cpu_features.h>

using namespace ember::data::detail;

namespace {

// Restores the process-wide path when the test ends.
struct PathGuard {
  HorizontalPath saved = horizontal_path();
  ~PathGuard() { set_horizontal_path(saved); }
};

// Output i, channel ch of one row: PIL's sum in int64 with the half added, clipped.
std::vector<uint8_t> naive_row(const std::vector<uint8_t>& row, int64_t channels, const FixedTaps& t) {
  const auto n = static_cast<int64_t>(t.start.size());
  std::vector<uint8_t> out(static_cast<size_t>(n * channels));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < channels; ++ch) {
      int64_t a = int64_t{1} << (kPrecisionBits - 1);
      for (int64_t q = 0; q < t.k; ++q)
        a += int64_t{row[static_cast<size_t>((t.start[static_cast<size_t>(i)] + q) * channels + ch)]} *
             t.w[static_cast<size_t>(i * t.k + q)];
      out[static_cast<size_t>(i * channels + ch)] = clip8(a);
    }
  return out;
}

constexpr uint8_t kGuard = 0xA5;

// Runs `pass` on `row`; the output region, with the guard bytes after the slack checked untouched.
std::vector<uint8_t> run_pass(const HorizontalPass& pass, const std::vector<uint8_t>& row, int64_t channels) {
  const int64_t n = pass.outputs() * channels;
  std::vector<uint8_t> dst(static_cast<size_t>(n + HorizontalPass::kDstSlack + 16), kGuard);
  pass.run(row.data(), dst.data());
  for (int64_t i = n + HorizontalPass::kDstSlack; i < static_cast<int64_t>(dst.size()); ++i)
    REQUIRE(dst[static_cast<size_t>(i)] == kGuard);
  dst.resize(static_cast<size_t>(n));
  return dst;
}

// Rows of in_size pixels: random bytes, all 0 and all 255.
std::vector<std::vector<uint8_t>> test_rows(int64_t in_size, int64_t channels, std::mt19937& rng) {
  const auto len = static_cast<size_t>(in_size * channels);
  std::vector<std::vector<uint8_t>> rows;
  for (int r = 0; r < 3; ++r) {
    std::vector<uint8_t> row(len);
    for (uint8_t& b : row) b = static_cast<uint8_t>(rng() & 0xFF);
    rows.push_back(std::move(row));
  }
  rows.emplace_back(len, uint8_t{0});
  rows.emplace_back(len, uint8_t{255});
  return rows;
}

// Every path this CPU can run: scalar, and avx2 where the CPU has AVX2 (set_horizontal_path must
// accept it exactly then).
std::vector<HorizontalPath> available_paths() {
  const bool avx2 = ember::cpu_features().avx2;
  PathGuard guard;
  REQUIRE(set_horizontal_path(HorizontalPath::avx2) == avx2);
  if (avx2) return {HorizontalPath::scalar, HorizontalPath::avx2};
  return {HorizontalPath::scalar};
}

// Builds one pass per path for `taps` and compares every path's bytes with the naive sums.
// Returns how many outputs the AVX2 pass computed with vectors (0 without AVX2).
int64_t check_all_paths(const FixedTaps& taps, int64_t channels, int64_t in_size, std::mt19937& rng) {
  PathGuard guard;
  int64_t vector_outputs = 0;
  const auto rows = test_rows(in_size, channels, rng);
  for (HorizontalPath path : available_paths()) {
    REQUIRE(set_horizontal_path(path));
    const HorizontalPass pass(taps, channels, in_size);
    if (path == HorizontalPath::scalar) REQUIRE(pass.vector_outputs() == 0);
    if (path == HorizontalPath::avx2) vector_outputs = pass.vector_outputs();
    for (const auto& row : rows) {
      INFO("path " << horizontal_path_name(path) << ", k " << taps.k << ", channels " << channels << ", in " << in_size
                   << ", outputs " << pass.outputs() << " (" << pass.vector_outputs() << " on vectors)");
      const std::vector<uint8_t> want = naive_row(row, channels, taps);
      const std::vector<uint8_t> got = run_pass(pass, row, channels);
      int64_t mismatches = 0;
      for (size_t i = 0; i < want.size(); ++i) mismatches += want[i] != got[i];
      REQUIRE(mismatches == 0);
    }
  }
  return vector_outputs;
}

}  // namespace

TEST_CASE("horizontal pass: AVX2 and scalar give PIL's bytes for every tap count", "[image_pipeline][resample]") {
  std::mt19937 rng(11);
  const bool avx2 = ember::cpu_features().avx2;
  // (in, out): up-scaling (3 taps), downscaling by up to 2x (5), 3x (7), 4x (9), 5.3x (13: the
  // AVX2 loop without a fixed pair count), a 2-pixel row (k = 2 after clamping to the input).
  struct Case {
    int64_t in, out, k;
  };
  const Case cases[] = {{37, 61, 3}, {501, 341, 5}, {375, 256, 5}, {333, 121, 7}, {401, 101, 9},
                        {419, 79, 13}, {2, 1, 2},    {9, 5, 5},     {3, 3, 3}};
  for (const Case& c : cases)
    for (int64_t channels : {3, 1}) {
      const AxisCoeffs coeffs = precompute_coeffs(c.in, c.out);
      // The whole row, and a kept window that ends at the row's end (its last outputs' loads would
      // pass the end: they take the scalar loop), and a window in the middle.
      const int64_t windows[][2] = {{0, c.out}, {c.out / 3, c.out}, {c.out / 5, c.out - c.out / 4}};
      for (const auto& win : windows) {
        const FixedTaps taps = fixed_taps(coeffs, c.in, win[0], win[1]);
        REQUIRE(taps.k == c.k);
        const int64_t vec = check_all_paths(taps, channels, c.in, rng);
        // RGB rows wide enough run mostly on vectors; the other layouts never.
        if (avx2 && channels == 3 && c.in >= 37 && win[1] - win[0] >= 16) CHECK(vec >= (win[1] - win[0]) / 2);
        if (channels != 3) CHECK(vec == 0);
      }
    }
}

TEST_CASE("horizontal pass: arbitrary taps, negative and large weights", "[image_pipeline][resample]") {
  // Weights of either sign up to 2^19 in magnitude (9 taps x 255 x 2^19 stays inside int32, as
  // PIL's sums do), starts that repeat and jump: the int16 split of each weight and the clamp at
  // both ends of [0, 255].
  std::mt19937 rng(12);
  for (int64_t k = 1; k <= 9; ++k)
    for (int64_t in_size : {int64_t{k}, k + 7, int64_t{97}}) {
      FixedTaps t;
      t.k = k;
      const int64_t n = 4 * (rng() % 9) + rng() % 4 + 1;  // not always a multiple of 4
      std::uniform_int_distribution<int64_t> step(0, 2);
      int64_t s = 0;
      for (int64_t i = 0; i < n; ++i) {
        t.start.push_back(static_cast<int32_t>(std::min(s, in_size - k)));
        s += step(rng);
      }
      std::uniform_int_distribution<int32_t> wd(-(1 << 19), 1 << 19);
      for (int64_t i = 0; i < n * k; ++i) t.w.push_back(wd(rng));
      check_all_paths(t, 3, in_size, rng);
    }
}
