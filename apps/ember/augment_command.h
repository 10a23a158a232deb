#pragma once
// `ember augment-op`: the augmentation ops and draws, one at a time, for the torchvision
// comparison (tests/data/check_torchvision_augment.py) and for looking at an op's effect:
//
//   ember augment-op --op Rotate --magnitude 30 --in a.png --out b.ppm     one op (PPM/PGM out)
//   ember augment-op --op Rotate --magnitude 30 --op Solarize --magnitude 128 --in a.png --out DIR
//   ember augment-op --bins trivial --height 32 --width 32                 the magnitude tables (JSON)
//   ember augment-op --sample trivial --count 1000 --seed 1                the policy's draws (JSON lines)
//   ember augment-op --mix both --mixup-alpha 0.2 --cutmix-alpha 1 --in a.png --in b.png \
//                    --labels 0,1 --num-classes 2 --out mixed.f32          one mixed batch
//
// Errors are ember::Error, reported by main().

#include <cstdint>
#include <string>
#include <vector>

namespace ember::app {

struct AugmentOpOptions {
  // --op: a torchvision op name (Identity, ShearX, ..., Equalize), Hue (adjust_hue), or Erase
  // (F.erase of --box on ToTensor's output, written as raw float32). Repeatable, each with its
  // --magnitude: with several, --out is a directory that receives 0.pnm, 1.pnm, ...
  std::vector<std::string> ops;
  std::vector<double> magnitudes;
  std::vector<std::string> inputs;  // --in (repeatable)
  std::string out;
  bool gray = false;                // decode the input as one channel
  std::vector<int64_t> box;         // --box TOP,LEFT,HEIGHT,WIDTH for Erase
  std::string bins;                 // trivial | randaug
  std::string sample;               // trivial | randaug | erasing | mixup | cutmix | both
  int64_t count = 1000;
  uint64_t seed = 1;
  int64_t height = 32, width = 32;
  double erasing_p = 0.5;
  std::string mix;                  // mixup | cutmix | both
  double mixup_alpha = 0.0, cutmix_alpha = 0.0;
  std::vector<int64_t> labels;
  int64_t num_classes = 0;
  int64_t batch_index = 0;
};

void run_augment_op(const AugmentOpOptions& options);

}  // namespace ember::app
