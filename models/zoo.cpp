#include "zoo.h"

#include "../layers/init.h"

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

// ---- ResNet ---------------------------------------------------------------------------------

BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride)
    : conv1(in_planes, planes, 3, {.stride = stride, .padding = 1, .bias = false}),
      conv2(planes, planes, 3, {.padding = 1, .bias = false}),
      bn1(planes),
      bn2(planes) {
  register_module("conv1", conv1);
  register_module("bn1", bn1);
  register_module("conv2", conv2);
  register_module("bn2", bn2);
  if (stride != 1 || in_planes != planes) {
    downsample = std::make_shared<nn::Sequential>();
    downsample->push_back(std::make_shared<nn::Conv2d>(in_planes, planes, 1, nn::Conv2dOptions{.stride = stride, .bias = false}));
    downsample->push_back(std::make_shared<nn::BatchNorm2d>(planes));
    register_module("downsample", downsample);
  }
}

// relu(bn1(conv1(x))) and relu(bn2(conv2(out)) + shortcut), each batch norm with its ReLU (and the
// add) fused (Note [Batch norm with a fused ReLU] in kernels/batchnorm.h): the same values.
Tensor BasicBlock::forward(const Tensor& x) {
  const Tensor out = bn1.forward_relu(conv1(x));
  return bn2.forward_relu(conv2(out), downsample ? downsample->forward(x) : x);
}

ResNet::ResNet(const ResNetConfig& c)
    : config(c),
      conv1(c.in_channels, c.widths.at(0), c.stem == ResNetStem::ImageNet ? 7 : 3,
            {.stride = c.stem == ResNetStem::ImageNet ? 2 : 1, .padding = c.stem == ResNetStem::ImageNet ? 3 : 1,
             .bias = false}),
      bn1(c.widths.at(0)),
      fc(c.widths.back(), c.num_classes) {
  EMBER_CHECK(c.widths.size() == c.blocks.size() && !c.widths.empty(), "resnet: ", c.widths.size(), " widths for ",
              c.blocks.size(), " stages");
  register_module("conv1", conv1);
  register_module("bn1", bn1);
  int64_t in_planes = c.widths[0];
  for (size_t stage = 0; stage < c.widths.size(); ++stage) {
    auto layer = std::make_shared<nn::Sequential>();
    for (int64_t b = 0; b < c.blocks[stage]; ++b) {
      const int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
      layer->push_back(std::make_shared<BasicBlock>(in_planes, c.widths[stage], stride));
      in_planes = c.widths[stage];
    }
    register_module("layer" + std::to_string(stage + 1), layer);
    layers.push_back(layer);
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

// ---- factory ----------------------------------------------------------------------------------

std::vector<std::string> model_names() { return {"simple_cnn", "cnn", "resnet18", "resnet18_cifar", "resnet_small"}; }

std::string classifier_name(const std::string& model) { return model == "cnn" ? "fc2" : "fc"; }

std::shared_ptr<nn::Module> create_model(const ModelSpec& s) {
  if (s.name == "simple_cnn") return std::make_shared<SimpleCNN>(s.in_channels, s.image_size, s.num_classes);
  if (s.name == "cnn") return std::make_shared<CNN>(s.in_channels, s.image_size, s.num_classes);
  ResNetConfig c;
  c.in_channels = s.in_channels;
  c.num_classes = s.num_classes;
  if (s.name == "resnet18") return std::make_shared<ResNet>(c);
  if (s.name == "resnet18_cifar") {
    c.stem = ResNetStem::Cifar;
    return std::make_shared<ResNet>(c);
  }
  if (s.name == "resnet_small") {
    // A narrow ResNet for CPU-sized runs: widths 16/32/64, one block per stage, CIFAR stem.
    c.widths = {16, 32, 64};
    c.blocks = {1, 1, 1};
    c.stem = ResNetStem::Cifar;
    return std::make_shared<ResNet>(c);
  }
  std::string known;
  for (const std::string& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  EMBER_THROW("unknown model '", s.name, "' (known models: ", known, ")");
}

}  // namespace ember::models
