#include "zoo.h"

#include <algorithm>

namespace ember::models {

// ---- SimpleCNN ------------------------------------------------------------------------------

SimpleCNN::SimpleCNN(int64_t in_channels, int64_t image_size, int64_t num_classes)
    : conv1(in_channels, 32, 3, {.padding = 1}), fc(32 * (image_size / 2) * (image_size / 2), num_classes) {
  EMBER_CHECK(image_size >= 2, "simple_cnn: image size ", image_size, " is too small");
  register_module("conv1", conv1);
  register_module("fc", fc);
}

Tensor SimpleCNN::forward(const Tensor& x) { return fc(pool(relu(conv1(x))).flatten(1)); }

// ---- CNN ------------------------------------------------------------------------------------

CNN::CNN(int64_t in_channels, int64_t image_size, int64_t num_classes)
    : conv1(in_channels, 32, 3, {.padding = 1}),
      conv2(32, 64, 3, {.padding = 1}),
      fc1(64 * (image_size / 4) * (image_size / 4), 128),
      fc2(128, num_classes) {
  EMBER_CHECK(image_size >= 4, "cnn: image size ", image_size, " is too small (needs at least 4)");
  register_module("conv1", conv1);
  register_module("conv2", conv2);
  register_module("fc1", fc1);
  register_module("fc2", fc2);
}

Tensor CNN::forward(const Tensor& x) {
  Tensor h = pool(relu(conv1(x)));
  h = pool(relu(conv2(h)));
  return fc2(relu(fc1(h.flatten(1))));
}

// ---- factory ----------------------------------------------------------------------------------

namespace {
// torchvision's ImageNet ResNets by name: the blocks per stage and the block type.
const std::map<std::string, std::pair<std::vector<int64_t>, ResNetBlock>>& torchvision_resnets() {
  static const std::map<std::string, std::pair<std::vector<int64_t>, ResNetBlock>> table{
      {"resnet18", {{2, 2, 2, 2}, ResNetBlock::Basic}},
      {"resnet34", {{3, 4, 6, 3}, ResNetBlock::Basic}},
      {"resnet50", {{3, 4, 6, 3}, ResNetBlock::Bottleneck}},
      {"resnet101", {{3, 4, 23, 3}, ResNetBlock::Bottleneck}}};
  return table;
}
}  // namespace

std::vector<std::string> model_names() {
  return {"simple_cnn", "cnn", "resnet18", "resnet34", "resnet50", "resnet101", "resnet18_cifar", "resnet_small"};
}

void check_model_name(const std::string& name) {
  const std::vector<std::string> names = model_names();
  if (std::find(names.begin(), names.end(), name) != names.end()) return;
  std::string known;
  for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
  EMBER_THROW("unknown model '", name, "' (known models: ", known, ")");
}

std::string torchvision_counterpart(const std::string& model) {
  return torchvision_resnets().count(model) ? "torchvision.models." + model : "";
}

std::string classifier_name(const std::string& model) { return model == "cnn" ? "fc2" : "fc"; }

std::shared_ptr<nn::Module> create_model(const ModelSpec& s) {
  check_model_name(s.name);
  if (s.name == "simple_cnn") return std::make_shared<SimpleCNN>(s.in_channels, s.image_size, s.num_classes);
  if (s.name == "cnn") return std::make_shared<CNN>(s.in_channels, s.image_size, s.num_classes);
  ResNetConfig c;
  c.in_channels = s.in_channels;
  c.num_classes = s.num_classes;
  if (auto it = torchvision_resnets().find(s.name); it != torchvision_resnets().end()) {
    c.blocks = it->second.first;
    c.block = it->second.second;
  } else if (s.name == "resnet18_cifar") {
    c.stem = ResNetStem::Cifar;
  } else {
    // resnet_small, a narrow ResNet for CPU-sized runs: widths 16/32/64, one block per stage, CIFAR stem.
    c.widths = {16, 32, 64};
    c.blocks = {1, 1, 1};
    c.stem = ResNetStem::Cifar;
  }
  return std::make_shared<ResNet>(c);
}

}  // namespace ember::models
