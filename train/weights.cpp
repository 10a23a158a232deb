// Weights files: written with their metadata and checksum, read back strictly.

#include "weights.h"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_set>

#include "../core/autograd.h"
#include "../core/generator.h"
#include "../data/auto_augment.h"
#include "../data/cifar.h"
#include "../data/idx.h"
#include "../data/image.h"
#include "../data/image_transforms.h"
#include "../io/safetensors.h"
#include "../layers/nn_functional.h"
#include "../layers/reduce.h"
#include "../models/zoo.h"
#include "run_dir.h"

namespace ember::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ---- weights files ------------------------------------------------------------------------------

namespace {
bool all_finite(const Tensor& t) {
  if (!is_floating(t.dtype())) return true;
  for (double v : t.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>())
    if (!std::isfinite(v)) return false;
  return true;
}

// CRC-32 (zlib) of every tensor's name, dtype, shape and bytes, in name order (as the
// training-state checksum, Note [Training-state file]).
std::string tensors_crc32(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::vector<std::pair<std::string, Tensor>> sorted;
  for (const auto& [name, t] : tensors) sorted.emplace_back(name, t.to(Device::cpu()).contiguous());
  std::sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  uLong crc = crc32_z(0L, Z_NULL, 0);
  for (const auto& [name, t] : sorted) {
    const std::string desc = name + '\0' + io::safetensors_dtype_name(t.dtype()) + '\0' + shape_str(t.shape()) + '\0';
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(desc.data()), desc.size());
    // Never a null pointer into zlib: crc32_z(crc, NULL, 0) returns the *initial* CRC, which
    // would forget every tensor before a zero-element one.
    if (t.nbytes() > 0) crc = crc32_z(crc, static_cast<const Bytef*>(t.data()), static_cast<size_t>(t.nbytes()));
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "crc32:%08lx", static_cast<unsigned long>(crc & 0xffffffffUL));
  return buf;
}
}  // namespace

void save_weights(const std::string& path, const nn::Module& model, const TrainConfig& cfg, const DataInfo& d,
                  const std::string& run, int64_t step) {
  const std::vector<std::pair<std::string, Tensor>> tensors = model.state_dict();
  // Nothing non-finite is ever written (Note [Divergence guard] in train/step_guard.h).
  for (const auto& [name, t] : tensors)
    EMBER_CHECK(all_finite(t), "refusing to write ", path, ": parameter '", name, "' holds a NaN or an infinity",
                step >= 0 ? " at step " + std::to_string(step) : std::string());
  std::map<std::string, std::string> meta{
      {"format", "pt"},  // what safetensors.torch.save_file writes
      {"ember.model", cfg.model},
      {"ember.in_channels", std::to_string(d.channels)},
      {"ember.image_size", std::to_string(d.image_size)},
      {"ember.resize", std::to_string(d.resize)},
      {"ember.classes", json(d.classes).dump()},
      {"ember.mean", json(d.mean).dump()},
      {"ember.std", json(d.std).dump()},
      {"ember.checksum", tensors_crc32(tensors)},
  };
  // Which images of the tree the run held out (Note [Held-out split]); "none" for a run that
  // held none out, so that a file written before the key existed is told apart.
  meta["ember.split"] = d.split ? split_json(*d.split) : "none";
  if (!run.empty()) meta["ember.run"] = run;
  if (step >= 0) meta["ember.step"] = std::to_string(step);
  io::save_safetensors(path, tensors, meta);
}

void verify_weights_checksum(const io::SafetensorsFile& f) {
  auto it = f.metadata.find("ember.checksum");
  if (it == f.metadata.end()) return;  // not written by ember (a PyTorch file): nothing to compare
  const std::string actual = tensors_crc32(f.tensors);
  EMBER_CHECK(actual == it->second, f.path, ": the tensors do not match the file's checksum (", actual,
              ", the file says ", it->second, "): the file was damaged or edited after it was written");
}

void check_finite_weights(const io::SafetensorsFile& f) {
  for (const auto& [name, t] : f.tensors) {
    if (!is_floating(t.dtype())) continue;
    const std::vector<double> v = t.to(DType::f64).contiguous().to_vector<double>();
    int64_t bad = 0, first = -1;
    for (size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i])) {
        if (bad++ == 0) first = static_cast<int64_t>(i);
      }
    EMBER_CHECK(bad == 0, f.path, ": tensor '", name, "' holds ", bad, " NaN or infinite value", bad == 1 ? "" : "s",
                " (the first at element ", first, " of ", v.size(), "): a model with these weights gives NaN for "
                "every input; refusing to use it");
  }
}

void check_same_names(const nn::Module& model, const std::string& model_name, const io::SafetensorsFile& f) {
  std::unordered_set<std::string> mine, theirs;
  for (const auto& [name, t] : model.state_dict()) mine.insert(name);
  std::vector<std::string> missing, unexpected;
  for (const auto& [name, t] : f.tensors) {
    theirs.insert(name);
    if (!mine.count(name)) unexpected.push_back(name);
  }
  for (const auto& [name, t] : model.state_dict())
    if (!theirs.count(name)) missing.push_back(name);
  std::sort(missing.begin(), missing.end());  // by name, as load_state_dict lists them
  std::sort(unexpected.begin(), unexpected.end());
  if (missing.empty() && unexpected.empty()) return;
  std::string problems;
  if (!missing.empty()) problems += "missing keys: " + join_names(missing, 6);
  if (!unexpected.empty()) problems += (problems.empty() ? "" : "; ") + std::string("unexpected keys: ") + join_names(unexpected, 6);
  EMBER_THROW(f.path, ": the tensors do not match the model ", model_name, ": ", problems);
}

void load_weights_into(nn::Module& model, const std::string& path) {
  io::SafetensorsFile f = io::load_safetensors(path);
  verify_weights_checksum(f);
  check_finite_weights(f);
  check_same_names(model, model.type_name(), f);
  try {
    model.load_state_dict(f.tensors);
  } catch (const Error& e) {
    EMBER_THROW(path, ": ", e.what());
  }
}

}  // namespace ember::train
