// Loading PyTorch state_dicts and freezing a backbone (Note [Fine-tuning] in train/finetune.h).

#include "finetune.h"

#include <map>

#include "../core/autograd.h"
#include "../io/safetensors.h"
#include "../models/zoo.h"
#include "weights.h"
#include "checkpoint.h"
#include "run_dir.h"

namespace ember::train {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool in_classifier(const std::string& name, const std::string& classifier) {
  return name.rfind(classifier + ".", 0) == 0;
}

}  // namespace

int64_t load_pytorch_weights(nn::Module& model, const std::string& model_name, const std::string& path,
                             bool skip_classifier) {
  const io::SafetensorsFile file = io::load_safetensors(path);
  check_finite_weights(file);
  const std::string classifier = models::classifier_name(model_name);
  std::map<std::string, Tensor> given(file.tensors.begin(), file.tensors.end());
  std::vector<std::string> missing, unexpected, wrong;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (model tensor, file tensor)
  std::map<std::string, bool> mine;
  for (const auto& [name, t] : model.state_dict()) {
    mine[name] = true;
    if (skip_classifier && in_classifier(name, classifier)) continue;
    auto it = given.find(name);
    if (it == given.end()) {
      if (!ends_with(name, "num_batches_tracked")) missing.push_back(name);
      continue;
    }
    const Tensor& src = it->second;
    if (src.shape() != t.shape()) {
      wrong.push_back(name + " is " + shape_str(src.shape()) + " in the file, " + model_name + " has " +
                      shape_str(t.shape()));
    } else if (src.is_floating_point() != t.is_floating_point()) {
      wrong.push_back(name + " is " + dtype_name(src.dtype()) + " in the file, " + model_name + " has " +
                      dtype_name(t.dtype()));
    } else {
      copies.emplace_back(t, src);
    }
  }
  for (const auto& [name, t] : file.tensors)
    if (!mine.count(name) && !(skip_classifier && in_classifier(name, classifier))) unexpected.push_back(name);
  std::string problems;
  if (!wrong.empty()) problems += "; wrong shape: " + join_names(wrong, 3);
  if (!missing.empty()) problems += "; missing: " + join_names(missing, 6);
  if (!unexpected.empty()) problems += "; not in " + model_name + ": " + join_names(unexpected, 6);
  EMBER_CHECK(problems.empty(), path, " is not a ", model_name, " state_dict", skip_classifier ? " (classifier aside)" : "",
              problems, models::torchvision_counterpart(model_name).empty()
                            ? ""
                            : " (docs/training.md shows how to save torchvision's)");
  NoGradGuard g;
  // state_dict() tensors are detached views of the model's own storage: copy_ writes the model.
  for (auto& [dst, src] : copies) dst.copy_(src);
  return static_cast<int64_t>(copies.size());
}

ParameterSplit split_parameters(const nn::Module& model, const std::string& model_name) {
  const std::string classifier = models::classifier_name(model_name);
  ParameterSplit s;
  for (const auto& [name, p] : model.named_parameters())
    (in_classifier(name, classifier) ? s.classifier : s.backbone).push_back(p);
  return s;
}

void freeze_backbone(const nn::Module& model, const std::string& model_name) {
  for (Tensor p : split_parameters(model, model_name).backbone) p.requires_grad_(false);
}

void train_with_frozen_backbone(nn::Module& model, const std::string& model_name) {
  const std::string classifier = models::classifier_name(model_name);
  model.train();
  for (auto& [name, m] : model.named_modules())
    if (!name.empty() && name != classifier && !in_classifier(name, classifier)) m->train(false);
}

}  // namespace ember::train
