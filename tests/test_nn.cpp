// nn modules and the model zoo: names, parameter counts, initialization, state dicts, modes.

#include <catch2/catch.hpp>
#include <cmath>
#include <ember/ember.h>
#include <ember/layers/init.h>
#include <ember/layers/modules.h>
#include <ember/models/zoo.h>

using namespace ember;

namespace {
std::vector<std::string> keys(const nn::StateDict& sd) {
  std::vector<std::string> k;
  for (auto& [n, t] : sd) k.push_back(n);
  return k;
}
}  // namespace

TEST_CASE("nn: Linear and Conv2d default initialization follows PyTorch", "[nn]") {
  manual_seed(0);
  nn::Linear fc(400, 300);
  const double bound = 1.0 / std::sqrt(400.0);
  std::vector<float> w = fc.weight.to_vector<float>();
  double mean = 0, var = 0, mx = 0;
  for (float v : w) mean += v, var += double(v) * v, mx = std::max(mx, std::abs(double(v)));
  mean /= w.size();
  var /= w.size();
  CHECK(mx <= bound);
  CHECK(mx > 0.99 * bound);
  CHECK(mean == Approx(0).margin(0.01 * bound));
  CHECK(var == Approx(bound * bound / 3).epsilon(0.02));  // U(-b, b) has variance b^2 / 3
  for (float v : fc.bias.to_vector<float>()) CHECK(std::abs(v) <= bound);
  CHECK(fc.weight.requires_grad());
  CHECK(fc.weight.is_leaf());

  nn::Conv2d conv(8, 16, 3, {.padding = 1});
  const double cb = 1.0 / std::sqrt(8.0 * 9);
  for (float v : conv.weight.to_vector<float>()) REQUIRE(std::abs(v) <= cb);
  CHECK(conv.weight.shape() == Shape{16, 8, 3, 3});
  // Same seed, same weights.
  manual_seed(0);
  nn::Linear again(400, 300);
  CHECK(again.weight.to_vector<float>() == w);
  CHECK_THROWS_WITH(nn::Conv2d(3, 8, 3, {.groups = 2}), Catch::Contains("divisible by groups"));
}

TEST_CASE("nn::init: gains and fans", "[nn]") {
  Tensor w = empty({64, 32, 3, 3});
  auto [fi, fo] = nn::init::fan_in_and_fan_out(w);
  CHECK(fi == 32 * 9);
  CHECK(fo == 64 * 9);
  CHECK(nn::init::calculate_gain(nn::init::Nonlinearity::ReLU) == Approx(std::sqrt(2.0)));
  CHECK(nn::init::calculate_gain(nn::init::Nonlinearity::Tanh) == Approx(5.0 / 3));
  CHECK(nn::init::calculate_gain(nn::init::Nonlinearity::LeakyReLU, std::sqrt(5.0)) == Approx(std::sqrt(1.0 / 3)));
  Generator g(3);
  Tensor big = empty({512, 512});
  nn::init::kaiming_normal_(big, 0.0, nn::init::FanMode::FanIn, nn::init::Nonlinearity::ReLU, g);
  const double std_expected = std::sqrt(2.0 / 512);
  const double s = std::sqrt(big.pow(2.0).mean().item());
  CHECK(s == Approx(std_expected).epsilon(0.01));
  nn::init::xavier_uniform_(big, 1.0, g);
  CHECK(max(big.abs()).item() <= std::sqrt(6.0 / 1024));
  nn::init::constant_(big, 0.25);
  CHECK(big.mean().item() == 0.25);
  CHECK_THROWS_WITH(nn::init::fan_in_and_fan_out(empty({3})), Catch::Contains("at least 2 dimensions"));
}

TEST_CASE("models: PyTorch state_dict names and parameter counts", "[nn][models]") {
  auto cnn = models::create_model({.name = "cnn"});
  CHECK(keys(cnn->state_dict()) == std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                                             "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"});
  CHECK(cnn->num_parameters() == 421642);  // 320 + 18496 + 401536 + 1290
  auto simple = models::create_model({.name = "simple_cnn", .in_channels = 3, .image_size = 224});
  CHECK(keys(simple->state_dict()) == std::vector<std::string>{"conv1.weight", "conv1.bias", "fc.weight", "fc.bias"});
  CHECK(simple->named_parameters()[2].second.shape() == Shape{10, 32 * 112 * 112});

  auto r18 = models::create_model({.name = "resnet18", .in_channels = 3, .image_size = 224, .num_classes = 1000});
  nn::StateDict sd = r18->state_dict();
  CHECK(sd.size() == 122);                    // torchvision's resnet18 state_dict has 122 entries
  CHECK(r18->num_parameters() == 11689512);   // and 11,689,512 parameters
  std::vector<std::string> k = keys(sd);
  CHECK(k[0] == "conv1.weight");
  CHECK(k[1] == "bn1.weight");
  CHECK(k[3] == "bn1.running_mean");
  CHECK(k[5] == "bn1.num_batches_tracked");
  CHECK(std::find(k.begin(), k.end(), "layer2.0.downsample.0.weight") != k.end());
  CHECK(std::find(k.begin(), k.end(), "layer4.1.bn2.running_var") != k.end());
  CHECK(k.back() == "fc.bias");
  CHECK(sd[0].second.shape() == Shape{64, 3, 7, 7});
  CHECK_THROWS_WITH(models::create_model({.name = "vgg"}), Catch::Contains("unknown model 'vgg'") &&
                                                                Catch::Contains("resnet18, resnet34, resnet50"));
}

TEST_CASE("models: every zoo model's parameter count at its default input, as docs/models.md lists", "[nn][models]") {
  struct Expected {
    models::ModelSpec spec;
    int64_t parameters;
  };
  const std::vector<Expected> zoo{
      {{.name = "simple_cnn", .in_channels = 1, .image_size = 28, .num_classes = 10}, 63050},  // 320 + 62730
      {{.name = "cnn", .in_channels = 1, .image_size = 28, .num_classes = 10}, 421642},
      {{.name = "resnet18", .in_channels = 3, .image_size = 224, .num_classes = 1000}, 11689512},  // torchvision's
      {{.name = "resnet34", .in_channels = 3, .image_size = 224, .num_classes = 1000}, 21797672},
      {{.name = "resnet50", .in_channels = 3, .image_size = 224, .num_classes = 1000}, 25557032},
      {{.name = "resnet101", .in_channels = 3, .image_size = 224, .num_classes = 1000}, 44549160},
      // resnet18's 11,689,512 - the 7x7 stem (9,408) + a 3x3 one (1,728) - fc (513,000) + 5,130
      {{.name = "resnet18_cifar", .in_channels = 3, .image_size = 32, .num_classes = 10}, 11173962},
      {{.name = "resnet_small", .in_channels = 3, .image_size = 32, .num_classes = 10}, 78042}};
  REQUIRE(zoo.size() == models::model_names().size());
  for (size_t i = 0; i < zoo.size(); ++i) {
    INFO(zoo[i].spec.name);
    CHECK(zoo[i].spec.name == models::model_names()[i]);
    CHECK(models::create_model(zoo[i].spec)->num_parameters() == zoo[i].parameters);
  }
}

TEST_CASE("models: resnet34, resnet50 and resnet101 have torchvision's state_dict", "[nn][models]") {
  struct Expected {
    std::string name;
    size_t entries;         // len(torchvision.models.NAME().state_dict())
    int64_t parameters;     // sum(p.numel() for p in ....parameters())
    int64_t fc_in;          // 512 * expansion
  };
  for (const Expected& e : {Expected{"resnet34", 218, 21797672, 512}, Expected{"resnet50", 320, 25557032, 2048},
                            Expected{"resnet101", 626, 44549160, 2048}}) {
    INFO(e.name);
    auto m = models::create_model({.name = e.name, .in_channels = 3, .image_size = 224, .num_classes = 1000});
    const nn::StateDict sd = m->state_dict();
    CHECK(sd.size() == e.entries);
    CHECK(m->num_parameters() == e.parameters);
    std::map<std::string, Shape> shapes;
    for (const auto& [name, t] : sd) shapes[name] = t.shape();
    CHECK(shapes.at("conv1.weight") == Shape{64, 3, 7, 7});
    CHECK(shapes.at("fc.weight") == Shape{1000, e.fc_in});
    CHECK(sd.back().first == "fc.bias");
    CHECK(models::torchvision_counterpart(e.name) == "torchvision.models." + e.name);
    CHECK(models::classifier_name(e.name) == "fc");
  }
  // Bottleneck (v1.5): conv1 1x1 into the width, the stride on conv2 (3x3), conv3 1x1 to 4x the
  // width; the first block of a stage downsamples with a strided 1x1 convolution.
  auto r50 = models::create_model({.name = "resnet50", .in_channels = 3, .image_size = 224, .num_classes = 1000});
  std::map<std::string, Shape> s;
  for (const auto& [name, t] : r50->state_dict()) s[name] = t.shape();
  CHECK(s.at("layer1.0.conv1.weight") == Shape{64, 64, 1, 1});
  CHECK(s.at("layer1.0.conv3.weight") == Shape{256, 64, 1, 1});
  CHECK(s.at("layer1.0.downsample.0.weight") == Shape{256, 64, 1, 1});  // 64 -> 256 channels, stride 1
  CHECK(s.at("layer2.0.conv1.weight") == Shape{128, 256, 1, 1});
  CHECK(s.at("layer2.0.conv2.weight") == Shape{128, 128, 3, 3});
  CHECK(s.at("layer4.2.bn3.running_var") == Shape{2048});
  CHECK(s.count("layer1.1.downsample.0.weight") == 0);
  auto& block = dynamic_cast<models::Bottleneck&>((*dynamic_cast<models::ResNet&>(*r50).layers[1])[0]);
  CHECK(block.conv1.options.stride == 1);
  CHECK(block.conv2.options.stride == 2);
  CHECK(dynamic_cast<nn::Conv2d&>((*block.downsample)[0]).options.stride == 2);
  auto r101 = models::create_model({.name = "resnet101"});
  CHECK(dynamic_cast<models::ResNet&>(*r101).layers[2]->size() == 23);
  CHECK(models::torchvision_counterpart("resnet18_cifar").empty());
  CHECK_THROWS_WITH(models::check_model_name("resnet152"), Catch::Contains("unknown model 'resnet152'") &&
                                                                 Catch::Contains("resnet101"));
}

TEST_CASE("nn: load_state_dict checks names, shapes and dtypes strictly", "[nn]") {
  manual_seed(1);
  models::CNN a;
  manual_seed(2);
  models::CNN b;
  CHECK(a.fc2.weight.to_vector<float>() != b.fc2.weight.to_vector<float>());
  b.load_state_dict(a.state_dict());
  CHECK(a.fc2.weight.to_vector<float>() == b.fc2.weight.to_vector<float>());
  CHECK(b.fc2.weight.requires_grad());
  nn::StateDict sd = a.state_dict();
  sd.pop_back();
  sd.emplace_back("fc3.bias", zeros({10}));
  sd[0].second = zeros({32, 1, 5, 5});
  try {
    b.load_state_dict(sd);
    FAIL("expected an error");
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK(m.find("missing keys: fc2.bias") != std::string::npos);
    CHECK(m.find("unexpected keys: fc3.bias") != std::string::npos);
    CHECK(m.find("conv1.weight: checkpoint has (32, 1, 5, 5) float32, model has (32, 1, 3, 3) float32") != std::string::npos);
  }
  // The failed load changed nothing.
  CHECK(a.fc2.weight.to_vector<float>() == b.fc2.weight.to_vector<float>());
  nn::StateDict wrong_dtype = a.state_dict();
  wrong_dtype[1].second = wrong_dtype[1].second.to(DType::f64);
  CHECK_THROWS_WITH(b.load_state_dict(wrong_dtype), Catch::Contains("conv1.bias: checkpoint has (32,) float64"));
}

TEST_CASE("nn: train/eval, to(dtype), zero_grad, Sequential, printing", "[nn]") {
  auto seq = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.5),
      std::make_shared<nn::Linear>(8, 2)});
  CHECK(keys(seq->state_dict()) == std::vector<std::string>{"0.weight", "0.bias", "3.weight", "3.bias"});
  seq->eval();
  CHECK(!(*seq)[2].is_training());
  Tensor x = ones({5, 4});
  Tensor y1 = seq->forward(x), y2 = seq->forward(x);  // dropout off in eval: deterministic
  CHECK(y1.to_vector<float>() == y2.to_vector<float>());
  seq->train();
  CHECK((*seq)[2].is_training());
  seq->forward(x).sum().backward();
  CHECK(seq->parameters()[0].grad().defined());
  seq->zero_grad();
  CHECK(!seq->parameters()[0].grad().defined());
  seq->to(DType::f64);
  CHECK(seq->parameters()[0].dtype() == DType::f64);
  CHECK(seq->parameters()[0].requires_grad());
  CHECK(seq->forward(ones({1, 4}, {.dtype = DType::f64})).dtype() == DType::f64);
  const std::string s = seq->str();
  CHECK(s.find("(0): Linear(in_features=4, out_features=8, bias=True)") != std::string::npos);
  CHECK(s.find("(1): ReLU()") != std::string::npos);
  if (!cuda_built()) CHECK_THROWS_WITH(seq->to(Device::cuda(0)), Catch::Contains("CUDA"));  // a CPU-only build
}

TEST_CASE("nn: BatchNorm2d counts batches and switches statistics with the mode", "[nn]") {
  nn::BatchNorm2d bn(3);
  CHECK(keys(bn.state_dict()) == std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                                           "num_batches_tracked"});
  Generator g(5);
  Tensor x = add(mul(randn({4, 3, 2, 2}, {}, g), 2.0), 1.0);
  bn.train();
  Tensor y = bn(x);
  CHECK(bn.num_batches_tracked.item() == 1);
  CHECK(y.mean().item() == Approx(0).margin(1e-5));  // normalized with batch statistics
  // running_mean moved 10% of the way to the batch mean
  CHECK(bn.running_mean.to_vector<float>()[0] == Approx(0.1 * x.select(1, 0).mean().item()).epsilon(1e-4));
  bn.eval();
  Tensor z = bn(x);
  CHECK(bn.num_batches_tracked.item() == 1);
  CHECK(z.mean().item() != Approx(0).margin(1e-3));  // running statistics now
}

TEST_CASE("models: forward shapes and a backward pass through every model", "[nn][models]") {
  struct Case {
    models::ModelSpec spec;
    Shape input;
  };
  for (const Case& c : {Case{{.name = "cnn"}, {2, 1, 28, 28}},
                        Case{{.name = "simple_cnn", .in_channels = 3, .image_size = 32}, {2, 3, 32, 32}},
                        Case{{.name = "resnet_small", .in_channels = 3, .image_size = 32}, {2, 3, 32, 32}},
                        Case{{.name = "resnet18_cifar", .in_channels = 3, .image_size = 32}, {2, 3, 32, 32}},
                        Case{{.name = "resnet50", .in_channels = 3, .image_size = 32}, {2, 3, 32, 32}}}) {
    INFO(c.spec.name);
    manual_seed(0);
    auto m = models::create_model(c.spec);
    Tensor out = m->forward(randn(c.input));
    CHECK(out.shape() == Shape{2, 10});
    out.sum().backward();
    for (auto& [n, p] : m->named_parameters()) {
      INFO(n);
      CHECK(p.grad().defined());
    }
  }
}
