#pragma once
// The per-sample image pipeline: a transform split into a prefix run transform by transform and a
// fused suffix that goes from the u8 image to the normalized float32 sample in one pass.
//
// Note [Fused image pipeline]
// The fused suffix is, in order,
//     [Resize] [CenterCrop]  or  RandomResizedCrop,   then  [RandomHorizontalFlip] ToTensor [Normalize]
// (a RandomResizedCrop right after a Resize is not fused with it: the Resize goes to the prefix).
// For one sample it works out the geometry first — the source window (the whole image, or the
// RandomResizedCrop box), the resized size, and the output window in resized coordinates (the
// CenterCrop, which may stick out of the image: those pixels are zero) — then resamples only the
// output window: PIL's horizontal pass over just the source rows the vertical taps of the window
// need, rounded to u8, then the vertical pass, each u8 result looked up in the ToTensor+Normalize
// table and stored at its (possibly mirrored) column of the batch slot. Every output pixel of
// PIL's two-pass resize depends only on its own taps, so computing a window of it gives the same
// bytes as resizing everything and cropping: the result is bit-identical to the composed
// transforms (tests/test_image_pipeline.cpp compares them), with no intermediate tensor. Random
// draws happen in the composed order (the crop box's 24 words, then the flip's one).

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "../core/tensor.h"
#include "image_dataset.h"
#include "image_transforms.h"
#include "transforms.h"

namespace ember::data {

struct ImagePipeline {
  std::vector<const Transform*> prefix;  // run first, one by one (may be empty)
  // The fused suffix; `fused` false when the transform does not end in that form.
  bool fused = false;
  const Resize* resize = nullptr;
  const CenterCrop* center_crop = nullptr;
  const RandomResizedCrop* random_resized_crop = nullptr;
  const RandomHorizontalFlip* flip = nullptr;
  const Normalize* normalize = nullptr;
  // The fused output's (height, width) when every sample gets the same one (a crop or an exact
  // Resize); nullopt when it depends on the image (Resize(size) alone).
  std::optional<std::array<int64_t, 2>> output_size;
  // The smallest decode that loses nothing: set when the pipeline starts with a Resize (JPEG draft).
  DecodeHint hint;
};

// Splits `transform` (Compose chains flattened) into prefix and fused suffix. Empty transform:
// an unfused pipeline with no prefix.
ImagePipeline plan_image_pipeline(const AnyTransform& transform);

// The fused output's (height, width) for a (height, width) input.
std::array<int64_t, 2> fused_output_size(const ImagePipeline& p, int64_t height, int64_t width);

// Runs the fused suffix of `p` (p.fused) on `image`, u8 contiguous CPU in `layout` ((C, H, W) or
// the decoders' interleaved (H, W, C)), drawing from `rng` as the composed transforms do; writes
// the float32 (C, OH, OW) result, OH x OW = fused_output_size(H, W), contiguously at `out`.
// `lut` is detail::to_tensor_lut(p.normalize, C).
void run_fused_pipeline(const ImagePipeline& p, const Tensor& image, SampleRng& rng, const std::vector<float>& lut,
                        float* out, ImageLayout layout = ImageLayout::CHW);

}  // namespace ember::data
