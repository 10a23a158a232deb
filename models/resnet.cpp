#include "resnet.h"

#include "../layers/init.h"

namespace ember::models {

namespace {
// torchvision's downsample: a 1x1 convolution with the stride and a batch norm, or null when the
// block's input already has its output's shape.
std::shared_ptr<nn::Sequential> make_downsample(int64_t in_planes, int64_t out_planes, int64_t stride) {
  if (stride == 1 && in_planes == out_planes) return nullptr;
  auto d = std::make_shared<nn::Sequential>();
  d->push_back(std::make_shared<nn::Conv2d>(in_planes, out_planes, 1, nn::Conv2dOptions{.stride = stride, .bias = false}));
  d->push_back(std::make_shared<nn::BatchNorm2d>(out_planes));
  return d;
}
}  // namespace

// ---- blocks ---------------------------------------------------------------------------------

BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride)
    : conv1(in_planes, planes, 3, {.stride = stride, .padding = 1, .bias = false}),
      conv2(planes, planes, 3, {.padding = 1, .bias = false}),
      bn1(planes),
      bn2(planes),
      downsample(make_downsample(in_planes, planes, stride)) {
  register_module("conv1", conv1);
  register_module("bn1", bn1);
  register_module("conv2", conv2);
  register_module("bn2", bn2);
  if (downsample) register_module("downsample", downsample);
}

// relu(bn1(conv1(x))) and relu(bn2(conv2(out)) + shortcut), each batch norm with its ReLU (and the
// add) fused (Note [Batch norm with a fused ReLU] in kernels/batchnorm.h): the same values.
Tensor BasicBlock::forward(const Tensor& x) {
  const Tensor out = bn1.forward_relu(conv1(x));
  return bn2.forward_relu(conv2(out), downsample ? downsample->forward(x) : x);
}

Bottleneck::Bottleneck(int64_t in_planes, int64_t planes, int64_t stride)
    : conv1(in_planes, planes, 1, {.bias = false}),
      conv2(planes, planes, 3, {.stride = stride, .padding = 1, .bias = false}),
      conv3(planes, planes * expansion, 1, {.bias = false}),
      bn1(planes),
      bn2(planes),
      bn3(planes * expansion),
      downsample(make_downsample(in_planes, planes * expansion, stride)) {
  register_module("conv1", conv1);
  register_module("bn1", bn1);
  register_module("conv2", conv2);
  register_module("bn2", bn2);
  register_module("conv3", conv3);
  register_module("bn3", bn3);
  if (downsample) register_module("downsample", downsample);
}

// As BasicBlock::forward, with the fused batch norms: the residual add and its ReLU after bn3.
Tensor Bottleneck::forward(const Tensor& x) {
  Tensor out = bn1.forward_relu(conv1(x));
  out = bn2.forward_relu(conv2(out));
  return bn3.forward_relu(conv3(out), downsample ? downsample->forward(x) : x);
}

// ---- ResNet ---------------------------------------------------------------------------------

namespace {
template <typename Block>
std::shared_ptr<nn::Sequential> make_stage(int64_t& in_planes, int64_t planes, int64_t blocks, int64_t stride) {
  auto layer = std::make_shared<nn::Sequential>();
  for (int64_t b = 0; b < blocks; ++b) {
    layer->push_back(std::make_shared<Block>(in_planes, planes, b == 0 ? stride : 1));
    in_planes = planes * Block::expansion;
  }
  return layer;
}

int64_t expansion_of(ResNetBlock block) {
  return block == ResNetBlock::Basic ? BasicBlock::expansion : Bottleneck::expansion;
}
}  // namespace

ResNet::ResNet(const ResNetConfig& c)
    : config(c),
      conv1(c.in_channels, c.widths.at(0), c.stem == ResNetStem::ImageNet ? 7 : 3,
            {.stride = c.stem == ResNetStem::ImageNet ? 2 : 1, .padding = c.stem == ResNetStem::ImageNet ? 3 : 1,
             .bias = false}),
      bn1(c.widths.at(0)),
      fc(c.widths.back() * expansion_of(c.block), c.num_classes) {
  EMBER_CHECK(c.widths.size() == c.blocks.size() && !c.widths.empty(), "resnet: ", c.widths.size(), " widths for ",
              c.blocks.size(), " stages");
  register_module("conv1", conv1);
  register_module("bn1", bn1);
  int64_t in_planes = c.widths[0];
  for (size_t stage = 0; stage < c.widths.size(); ++stage) {
    const int64_t stride = stage > 0 ? 2 : 1;
    layers.push_back(c.block == ResNetBlock::Basic
                         ? make_stage<BasicBlock>(in_planes, c.widths[stage], c.blocks[stage], stride)
                         : make_stage<Bottleneck>(in_planes, c.widths[stage], c.blocks[stage], stride));
    register_module("layer" + std::to_string(stage + 1), layers.back());
  }
  register_module("fc", fc);
  // torchvision: kaiming_normal_(fan_out, relu) for convs; BN weight 1, bias 0 (already).
  for (auto& [name, m] : named_modules()) {
    if (auto* conv = dynamic_cast<nn::Conv2d*>(m))
      nn::init::kaiming_normal_(conv->weight, 0.0, nn::init::FanMode::FanOut, nn::init::Nonlinearity::ReLU);
  }
}

Tensor ResNet::forward(const Tensor& x) {
  Tensor h = bn1.forward_relu(conv1(x));
  if (config.stem == ResNetStem::ImageNet) h = maxpool(h);
  for (auto& layer : layers) h = layer->forward(h);
  return fc(avgpool(h).flatten(1));
}

}  // namespace ember::models
