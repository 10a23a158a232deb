// The fused batch transform on a CUDA device (contract in augment.h).
//
// Two flat launches. The first draws each sample's crop offset and flip from its Philox stream
// (one thread per sample: five 32-bit words, two Philox blocks); the second writes every output
// value (one thread per value), reading the source byte the crop and flip select, or the value of
// 0 in the padding, through the channel's 256-entry table. Splitting them keeps the random draws
// out of the per-value loop, which is a pure gather: one byte read, one float written.

#include "launch.h"

#include "augment.h"

#include <algorithm>
#include <cstdint>

#include "../../core/error.h"
#include "../../core/sample_rng.h"  // the per-sample streams (header-only, EMBER_HD)
#include "common.cuh"
#include "../../core/cuda/runtime.h"

namespace ember::kernels::gpu {

namespace {

using detail::grid_for;
using detail::kThreads;

__global__ void draw_kernel(const int64_t* indices, int64_t n, CropFlip p, uint64_t seed, int64_t epoch,
                            int32_t* draws) {
  EMBER_THREAD_LOOP(s, n) {
    ember::SampleRng rng = ember::sample_rng(seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(indices[s]));
    int64_t top = p.padding, left = p.padding;
    if (p.crop) {
      top = static_cast<int64_t>(rng.below(static_cast<uint64_t>(p.height + 2 * p.padding - p.out_height + 1)));
      left = static_cast<int64_t>(rng.below(static_cast<uint64_t>(p.width + 2 * p.padding - p.out_width + 1)));
    }
    const bool flip = p.flip && rng.uniform() < p.flip_p;
    draws[3 * s] = static_cast<int32_t>(top);
    draws[3 * s + 1] = static_cast<int32_t>(left);
    draws[3 * s + 2] = flip ? 1 : 0;
  }
}

__global__ void gather_kernel(const uint8_t* images, const int64_t* indices, int64_t n, CropFlip p, const float* lut,
                              const int32_t* draws, float* out) {
  const int64_t per_channel = p.out_height * p.out_width, per_sample = p.channels * per_channel;
  EMBER_THREAD_LOOP(i, n * per_sample) {
    const int64_t s = i / per_sample, c = (i % per_sample) / per_channel;
    const int64_t y = (i % per_channel) / p.out_width, x = i % p.out_width;
    const int64_t sy = draws[3 * s] + y - p.padding;
    const int64_t sx = draws[3 * s + 1] + (draws[3 * s + 2] ? p.out_width - 1 - x : x) - p.padding;
    const bool inside = sy >= 0 && sy < p.height && sx >= 0 && sx < p.width;
    const uint8_t v = inside ? images[((indices[s] * p.channels + c) * p.height + sy) * p.width + sx] : uint8_t{0};
    out[i] = lut[c * 256 + v];
  }
}

// ---- declared costs (Note [Launch ledger] in core/cuda/ledger.h) -------------------------------

// The source rows (or columns) one sample's window reads, on average over its draw: the window's
// `out` positions start at top - padding, top uniform in [0, size + 2 padding - out] (rng.below),
// and those in the padding read nothing. Without a crop the window is the image (top = padding).
double expected_inside(int64_t size, int64_t out, int64_t padding, bool crop) {
  if (!crop) return static_cast<double>(std::min(size, out));
  const int64_t tops = size + 2 * padding - out + 1;
  double sum = 0;
  for (int64_t t = 0; t < tops; ++t) {
    const int64_t first = std::max<int64_t>(t - padding, 0), end = std::min(t - padding + out, size);
    sum += static_cast<double>(std::max<int64_t>(0, end - first));
  }
  return sum / static_cast<double>(tops);
}

// gather_kernel: the draws and indices, the source bytes the windows cover (the expectation over
// the draws: the real crops are drawn on the device), the table entries (at most one per value, at
// most the whole table) -> the float values. A gather: no flops.
cuda::Cost gather_cost(int64_t n, const CropFlip& p) {
  const double values = static_cast<double>(n) * p.channels * p.out_height * p.out_width;
  const double rows = expected_inside(p.height, p.out_height, p.padding, p.crop);
  const double columns = expected_inside(p.width, p.out_width, p.padding, p.crop);
  // The u8 rows a window covers are one contiguous run when the columns it skips are fewer than
  // a 32-byte sector: whole rows, and about one sector of rounding at the run's ends.
  const bool whole_rows = static_cast<double>(p.width) - columns < 32;
  const double plane = whole_rows ? rows * static_cast<double>(p.width) + 32 : rows * columns;
  const double source = static_cast<double>(n) * p.channels * plane;
  const double lut = std::min(static_cast<double>(p.channels) * 256, values) * sizeof(float);
  return cuda::cost(3.0 * n * sizeof(int32_t) + static_cast<double>(n) * sizeof(int64_t) + source + lut,
                    values * sizeof(float));
}

}  // namespace

void crop_flip_lut(const uint8_t* images, const int64_t* indices, int64_t n, const CropFlip& p, const float* lut,
                   uint64_t seed, int64_t epoch, int32_t* draws, float* out) {
  EMBER_CHECK(n >= 0 && p.channels >= 1 && p.height >= 1 && p.width >= 1 && p.out_height >= 1 && p.out_width >= 1 &&
                  p.padding >= 0,
              "crop_flip_lut: bad geometry");
  EMBER_CHECK(!p.crop || (p.out_height <= p.height + 2 * p.padding && p.out_width <= p.width + 2 * p.padding),
              "crop_flip_lut: the window is larger than the padded image");
  if (n == 0) return;
  const cuda::Stream stream = cuda::current_stream();
  // The indices read, three int32 draws per sample written; the flip's uniform is a multiply.
  EMBER_LAUNCH_FLAT(draw_kernel, grid_for(n, kThreads), kThreads, stream,
                    cuda::cost(static_cast<double>(n) * sizeof(int64_t), 3.0 * n * sizeof(int32_t), p.flip ? n : 0),
                    indices, n, p, seed, epoch, draws);
  cuda::check_launch("crop_flip_lut");
  const int64_t values = n * p.channels * p.out_height * p.out_width;
  EMBER_LAUNCH_FLAT(gather_kernel, grid_for(values, kThreads), kThreads, stream, gather_cost(n, p), images, indices, n,
                    p, lut, draws, out);
  cuda::check_launch("crop_flip_lut");
}

}  // namespace ember::kernels::gpu
