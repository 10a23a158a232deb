#pragma once
// The data pipeline's fused batch transform on a CUDA device, for datasets kept in device memory
// (Note [Data on the device] in data/loader.h): a batch is gathered from the resident u8 images
// by index, cropped, flipped and mapped through the ToTensor+Normalize table, bit-identical to
// the CPU's fused pass (Note [Fused batch transforms] in data/transforms.cpp) because it draws
// from the same per-sample Philox streams (core/sample_rng.h). Device pointers, queued on
// cuda::current_stream(). No CUDA header; no CPU twin (the CPU side is data::apply_batch).

#include <cstdint>

namespace ember::kernels::gpu {

// The geometry and random choices of one fused transform: [RandomCrop(out_height, out_width,
// padding)] [RandomHorizontalFlip(flip_p)] ToTensor [Normalize].
struct CropFlip {
  int64_t channels = 1, height = 0, width = 0;  // the source images
  bool crop = false;
  int64_t out_height = 0, out_width = 0, padding = 0;  // without crop: the source size, padding 0
  bool flip = false;
  double flip_p = 0.5;
};

// out (n, channels, out_height, out_width) float32 <- images[indices[s]] (N, channels, height,
// width) u8 for s < n, each value v of channel c becoming lut[c * 256 + v]. Sample s draws from
// sample_rng(seed, epoch, indices[s]): the crop's top then left, then the flip's uniform, as
// RandomCrop::apply and RandomHorizontalFlip::apply do. `draws` is scratch for 3n int32.
void crop_flip_lut(const uint8_t* images, const int64_t* indices, int64_t n, const CropFlip& p, const float* lut,
                   uint64_t seed, int64_t epoch, int32_t* draws, float* out);

}  // namespace ember::kernels::gpu
