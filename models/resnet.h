#pragma once
// torchvision's ResNet family with its module and parameter names, so that a torchvision
// state_dict saved with safetensors loads as it is: BasicBlock (ResNet-18/34) and Bottleneck
// (ResNet-50/101, torchvision's "v1.5": the stride on the 3x3 convolution).

#include <memory>
#include <string>
#include <vector>

#include "../layers/modules.h"

namespace ember::models {

// torchvision's BasicBlock: conv1/bn1/relu/conv2/bn2 (+ downsample.0 conv 1x1, downsample.1 bn).
// x: (N, in_planes, H, W) -> (N, planes, H / stride, W / stride).
class BasicBlock : public nn::Module {
 public:
  static constexpr int64_t expansion = 1;
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "BasicBlock"; }
  nn::Conv2d conv1, conv2;
  nn::BatchNorm2d bn1, bn2;
  std::shared_ptr<nn::Sequential> downsample;  // null when the shapes already match
};

// torchvision's Bottleneck: conv1 1x1 (in -> planes) / bn1 / relu, conv2 3x3 with the stride
// (planes -> planes) / bn2 / relu, conv3 1x1 (planes -> 4 * planes) / bn3, + shortcut, relu; the
// shortcut is downsample.0 (1x1 conv with the stride) and downsample.1 (bn) when the shapes differ.
// x: (N, in_planes, H, W) -> (N, 4 * planes, H / stride, W / stride).
class Bottleneck : public nn::Module {
 public:
  static constexpr int64_t expansion = 4;
  Bottleneck(int64_t in_planes, int64_t planes, int64_t stride);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Bottleneck"; }
  nn::Conv2d conv1, conv2, conv3;
  nn::BatchNorm2d bn1, bn2, bn3;
  std::shared_ptr<nn::Sequential> downsample;  // null when the shapes already match
};

enum class ResNetStem { ImageNet, Cifar };  // 7x7/2 conv + maxpool, or 3x3/1 conv without maxpool
enum class ResNetBlock { Basic, Bottleneck };

struct ResNetConfig {
  std::vector<int64_t> widths{64, 128, 256, 512};  // each stage's planes (its output: planes * expansion)
  std::vector<int64_t> blocks{2, 2, 2, 2};
  ResNetBlock block = ResNetBlock::Basic;
  int64_t in_channels = 3;
  int64_t num_classes = 1000;
  ResNetStem stem = ResNetStem::ImageNet;
};

// torchvision's ResNet layout: conv1, bn1, (maxpool), layer1..layer4 of BasicBlocks or
// Bottlenecks, avgpool, fc. Convolutions have no bias; convs are kaiming_normal (fan_out, relu) and
// BN weight 1 / bias 0, as torchvision initializes them (zero_init_residual=False).
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

}  // namespace ember::models
