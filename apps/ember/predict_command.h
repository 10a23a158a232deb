#pragma once
// Pieces of `ember predict`: directories of images as inputs, and the --json output.

#include <string>
#include <vector>

#include <ember/train/inference.h>
#include <ember/train/trainer.h>

namespace ember::app {

// Each input that is a directory becomes its image files (data::image_extensions()), sorted by
// name, not recursing; other inputs stay as they are. A directory without images is an error.
std::vector<std::string> expand_image_dirs(const std::vector<std::string>& inputs);

// {"model": NAME, "classes": [...], "predictions": [{"input": PATH, "logits": [...], "top":
// [[CLASS, PROBABILITY], ...]}, ...]}; the logits are the float32 outputs, written exactly.
std::string predictions_json(const train::LoadedModel& m, const std::vector<std::string>& inputs,
                             const std::vector<train::Prediction>& predictions);

}  // namespace ember::app
