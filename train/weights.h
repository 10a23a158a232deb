#pragma once
// Weights files: a model's tensors with what is needed to use them (name, input size, classes,
// normalization, a checksum), written and read back strictly (train/weights.cpp).

#include <cstdint>
#include <string>
#include <vector>

#include "../io/safetensors.h"
#include "../layers/module.h"
#include "config.h"
#include "data_setup.h"

namespace ember::train {

// Weights file metadata: the model's name and shape, class names and normalization, so a weights
// file alone is enough for `ember eval` / `ember predict`; ember.checksum over the tensors, and
// the run and step when given.
void save_weights(const std::string& path, const nn::Module& model, const TrainConfig& cfg, const DataInfo& d,
                  const std::string& run = "", int64_t step = -1);
// Loads a safetensors file into the model (strict names/shapes/dtypes, ember.checksum when
// present); errors name the file.
void load_weights_into(nn::Module& model, const std::string& path);
// Throws when a file's ember.checksum (if any) does not match its tensors.
void verify_weights_checksum(const io::SafetensorsFile& f);
// Throws "<path>: the tensors do not match the model <name>: missing keys: ...; unexpected keys:
// ..." (at most a few names each) unless the file holds exactly the model's state_dict names.
// Before Module::load_state_dict, whose message lists every name (100,000 of a hostile file).
void check_same_names(const nn::Module& model, const std::string& model_name, const io::SafetensorsFile& f);
// Throws "<path>: tensor '<name>' holds N NaN or infinite value(s) ..." for the first floating
// tensor of the file that is not finite: such weights give NaN for every input (ember never
// writes them: Note [Divergence guard] in train/step_guard.h; a PyTorch file may hold them).
void check_finite_weights(const io::SafetensorsFile& f);

}  // namespace ember::train
