#pragma once
// The model zoo. Parameter names follow PyTorch (torchvision for ResNet), so weights move
// between ember and PyTorch through safetensors both ways.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../layers/modules.h"

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

// torchvision's BasicBlock: conv1/bn1/relu/conv2/bn2 (+ downsample.0 conv 1x1, downsample.1 bn).
class BasicBlock : public nn::Module {
 public:
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "BasicBlock"; }
  nn::Conv2d conv1, conv2;
  nn::BatchNorm2d bn1, bn2;
  std::shared_ptr<nn::Sequential> downsample;  // null when the shapes already match
};

enum class ResNetStem { ImageNet, Cifar };  // 7x7/2 conv + maxpool, or 3x3/1 conv without maxpool

struct ResNetConfig {
  std::vector<int64_t> widths{64, 128, 256, 512};
  std::vector<int64_t> blocks{2, 2, 2, 2};
  int64_t in_channels = 3;
  int64_t num_classes = 1000;
  ResNetStem stem = ResNetStem::ImageNet;
};

// torchvision's ResNet layout: conv1, bn1, (maxpool), layer1..layer4 of BasicBlocks, avgpool, fc.
// Convolutions have no bias; convs are kaiming_normal (fan_out, relu) and BN weight 1 / bias 0,
// as torchvision initializes them.
class ResNet : public nn::Module {
 public:
  explicit ResNet(const ResNetConfig& config);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ResNet"; }
  ResNetConfig config;
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::MaxPool2d maxpool{3, 2, 1};
  std::vector<std::shared_ptr<nn::Sequential>> layers;
  nn::AdaptiveAvgPool2d avgpool{1};
  nn::Linear fc;
};

// What the trainer needs to build a model by name.
struct ModelSpec {
  std::string name;            // simple_cnn, cnn, resnet18, resnet18_cifar, resnet_small
  int64_t in_channels = 1;
  int64_t image_size = 28;
  int64_t num_classes = 10;
};

// Builds a model by name; an unknown name is an ember::Error listing the known ones.
std::shared_ptr<nn::Module> create_model(const ModelSpec& spec);
std::vector<std::string> model_names();
// The name of a zoo model's classifier, the last Linear layer ("fc" for simple_cnn and the
// ResNets, "fc2" for cnn): what fine-tuning replaces for a dataset's classes (train/finetune.h).
std::string classifier_name(const std::string& model);

}  // namespace ember::models
