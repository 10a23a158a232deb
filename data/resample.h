#pragma once
// PIL's bilinear resampling pieces (Note [Bilinear resize like PIL] in image_transforms.h), shared
// by resize_bilinear and the fused image pipeline (image_pipeline.cpp) so both compute the same
// coefficients and round the same way. Internal to data/.

#include <cstdint>
#include <vector>

namespace ember::data::detail {

inline constexpr int kPrecisionBits = 32 - 8 - 2;  // PIL's PRECISION_BITS

// One axis' taps: output i reads in[first[i] .. first[i] + count[i]) with weights
// k[i * ksize + t] (fixed point, kPrecisionBits fractional bits). Mirrors PIL's precompute_coeffs
// + normalize_coeffs_8bpc, box = (0, in_size).
struct AxisCoeffs {
  int64_t ksize = 0;
  std::vector<int64_t> first, count;
  std::vector<int32_t> k;
};

AxisCoeffs precompute_coeffs(int64_t in_size, int64_t out_size);

// PIL's clip8: the accumulator (with its rounding half added) to u8.
inline uint8_t clip8(int64_t acc) {
  if (acc >= (int64_t{1} << kPrecisionBits << 8)) return 255;
  if (acc <= 0) return 0;
  return static_cast<uint8_t>(acc >> kPrecisionBits);
}

inline uint8_t clip8(int32_t acc) {
  if (acc >= (int32_t{1} << kPrecisionBits << 8)) return 255;
  if (acc <= 0) return 0;
  return static_cast<uint8_t>(acc >> kPrecisionBits);
}

// Python's round() for the values torchvision rounds: ties go to the even neighbour.
int64_t round_half_even(double x);

}  // namespace ember::data::detail
