#pragma once
// The model zoo. Parameter names follow PyTorch (torchvision for ResNet), so weights move
// between ember and PyTorch through safetensors both ways.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../layers/modules.h"
#include "resnet.h"

namespace ember::models {

// The seed tutorial's SimpleCNN, made correct: conv1 (3x3, pad 1, -> 32) + ReLU + MaxPool 2 + fc.
// Parameter names: conv1.*, fc.*.
class SimpleCNN : public nn::Module {
 public:
  SimpleCNN(int64_t in_channels = 3, int64_t image_size = 224, int64_t num_classes = 10);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "SimpleCNN"; }
  nn::Conv2d conv1;
  nn::MaxPool2d pool{2};
  nn::Linear fc;
};

// conv1 (in->32, 3x3, pad 1) -> ReLU -> MaxPool 2 -> conv2 (32->64, 3x3, pad 1) -> ReLU -> MaxPool 2
// -> flatten -> fc1 (64 * (s/4)^2 -> 128) -> ReLU -> fc2 (128 -> classes). Names conv1.*, conv2.*,
// fc1.*, fc2.*. With the defaults it is the classic Fashion-MNIST CNN (64*7*7 -> 128).
class CNN : public nn::Module {
 public:
  CNN(int64_t in_channels = 1, int64_t image_size = 28, int64_t num_classes = 10);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "CNN"; }
  nn::Conv2d conv1, conv2;
  nn::MaxPool2d pool{2};
  nn::Linear fc1, fc2;
};

// What the trainer needs to build a model by name.
struct ModelSpec {
  std::string name;            // one of model_names()
  int64_t in_channels = 1;
  int64_t image_size = 28;
  int64_t num_classes = 10;
};

// Builds a model by name; an unknown name is an ember::Error listing the known ones.
std::shared_ptr<nn::Module> create_model(const ModelSpec& spec);
// simple_cnn, cnn, resnet18, resnet34, resnet50, resnet101, resnet18_cifar, resnet_small.
std::vector<std::string> model_names();
// Throws an ember::Error "unknown model 'NAME' (known models: ...)" unless `name` is in model_names().
void check_model_name(const std::string& name);
// The torchvision builder whose state_dict the zoo model loads as it is (torchvision.models.resnet50
// for "resnet50"), or "" when torchvision has no such model (simple_cnn, resnet18_cifar, ...).
std::string torchvision_counterpart(const std::string& model);
// The name of a zoo model's classifier, the last Linear layer ("fc" for simple_cnn and the
// ResNets, "fc2" for cnn): what fine-tuning replaces for a dataset's classes (train/finetune.h).
std::string classifier_name(const std::string& model);

}  // namespace ember::models
