#pragma once
// Mixup and CutMix on a batch, with soft targets, as torchvision.transforms.v2 (0.16+) MixUp and
// CutMix define them; the loader applies them after the per-sample transforms (LoaderOptions::mix).
//
// Note [Mixup and CutMix]
// A batch (N, C, H, W) float32 with labels (N,) int64 is mixed with itself rolled by one
// (image n with image n - 1, image 0 with image N - 1: torchvision's batch.roll(1, 0)), with
// lambda ~ Beta(alpha, alpha):
//   Mixup:  x = lambda * x + (1 - lambda) * x_rolled (each product and the sum in float32);
//   CutMix: a box centred at (r_y, r_x), uniform over the pixels, with half sides
//           int(0.5 * sqrt(1 - lambda) * H) and ... * W, clipped to the image, is copied from
//           x_rolled; lambda then becomes 1 - (box area) / (H * W), the share of the image kept.
// The targets are lambda * one_hot(y) + (1 - lambda) * one_hot(y_rolled), float32 (N, classes),
// so each row sums to 1; cross_entropy takes them as class probabilities (Note [Soft-target
// cross-entropy] in layers/loss.cpp), where label smoothing composes as in PyTorch. With
// both alphas given, each batch uses one of the two, each with probability 1/2 (torchvision's
// RandomChoice([MixUp, CutMix]), timm's switch_prob 0.5). The draws come from the batch's stream
// sample_rng(seed, epoch, kMixStream | batch) (core/sample_rng.h), so a batch is mixed the same way
// whatever the worker count; Beta uses Marsaglia-Tsang gamma variates (a rejection loop: the word
// count varies, which is harmless for a stream no one else reads).

#include <cstdint>

#include "../core/tensor.h"
#include "dataset.h"
#include "image_transforms.h"
#include "../core/sample_rng.h"

namespace ember::data {

struct MixOptions {
  double mixup_alpha = 0.0;  // > 0: Mixup with lambda ~ Beta(alpha, alpha); 0: off
  double cutmix_alpha = 0.0;  // > 0: CutMix likewise; 0: off
  int64_t num_classes = 0;    // the soft targets' width; >= 1 when mixing is on
  bool enabled() const { return mixup_alpha > 0.0 || cutmix_alpha > 0.0; }
};

// What one batch does: which mix, the lambda (for CutMix, the adjusted one) and CutMix's box
// (top, left, height, width; empty for Mixup), with the draws it came from.
struct MixParams {
  bool cutmix = false;
  double lambda = 1.0;
  CropBox box;
  double drawn_lambda = 1.0;        // the Beta draw (CutMix adjusts it to the box)
  int64_t center_y = 0, center_x = 0;  // CutMix's box centre (r_y, r_x)
};

// A Beta(a, a) variate from `rng` (a > 0).
double sample_beta(double a, SampleRng& rng);

// Draws the batch's choice for (height, width) images (Note [Mixup and CutMix]).
MixParams mix_params(const MixOptions& options, int64_t height, int64_t width, SampleRng& rng);

// Applies `params` to images (N, C, H, W) float32 and labels (N,) int64 in [0, num_classes):
// returns the mixed images and the (N, num_classes) float32 targets. Deterministic.
Batch mix_batch(const Batch& batch, const MixParams& params, int64_t num_classes);

// mix_params from the batch's stream, then mix_batch. A batch with no rows is returned as it is.
Batch mix_batch(const Batch& batch, const MixOptions& options, uint64_t seed, int64_t epoch, int64_t batch_index);

}  // namespace ember::data
