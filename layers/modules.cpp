// The nn layers (see modules.h).

#include "modules.h"

#include <cmath>
#include <sstream>

#include "../core/autograd.h"
#include "init.h"
#include "gemm.h"

namespace ember::nn {

namespace {
// PyTorch's reset_parameters for Linear and Conv: kaiming_uniform(a = sqrt(5)) on the weight,
// which is U(±1/sqrt(fan_in)), and the bias from U(±1/sqrt(fan_in)).
void reset_weight_and_bias(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = init::fan_in_and_fan_out(weight).first;
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}
}  // namespace

// ---- Linear -------------------------------------------------------------------------------

Linear::Linear(int64_t in, int64_t out, LinearOptions opt) : in_features(in), out_features(out) {
  EMBER_CHECK(in > 0 && out > 0, "Linear: in_features and out_features must be positive, got ", in, " and ", out);
  weight = empty({out, in});
  if (opt.bias) bias = empty({out});
  reset_parameters();
  register_parameter("weight", weight);
  if (opt.bias) register_parameter("bias", bias);
}

void Linear::reset_parameters() { reset_weight_and_bias(weight, bias); }

Tensor Linear::forward(const Tensor& x) {
  EMBER_CHECK(x.dim() >= 1 && x.size(-1) == in_features, "Linear: expected input with last dimension ", in_features,
              ", got ", describe(x));
  return linear(x, weight, bias);
}

std::string Linear::extra_repr() const {
  std::ostringstream os;
  os << "in_features=" << in_features << ", out_features=" << out_features << ", bias=" << (bias.defined() ? "True" : "False");
  return os.str();
}

// ---- Conv2d -------------------------------------------------------------------------------

Conv2d::Conv2d(int64_t in, int64_t out, int64_t k, Conv2dOptions opt)
    : in_channels(in), out_channels(out), kernel_size(k), options(opt) {
  EMBER_CHECK(in > 0 && out > 0 && k > 0, "Conv2d: channels and kernel size must be positive, got ", in, ", ", out,
              ", ", k);
  EMBER_CHECK(opt.groups > 0 && in % opt.groups == 0 && out % opt.groups == 0, "Conv2d: in_channels ", in,
              " and out_channels ", out, " must be divisible by groups ", opt.groups);
  EMBER_CHECK(opt.stride > 0 && opt.padding >= 0 && opt.dilation > 0, "Conv2d: invalid stride ", opt.stride,
              ", padding ", opt.padding, " or dilation ", opt.dilation);
  weight = empty({out, in / opt.groups, k, k});
  if (opt.bias) bias = empty({out});
  reset_parameters();
  register_parameter("weight", weight);
  if (opt.bias) register_parameter("bias", bias);
}

void Conv2d::reset_parameters() { reset_weight_and_bias(weight, bias); }

Tensor Conv2d::forward(const Tensor& x) {
  ember::Conv2dOptions o;
  o.stride = {options.stride, options.stride};
  o.padding = {options.padding, options.padding};
  o.dilation = {options.dilation, options.dilation};
  o.groups = options.groups;
  return conv2d(x, weight, bias, o);
}

std::string Conv2d::extra_repr() const {
  std::ostringstream os;
  os << in_channels << ", " << out_channels << ", kernel_size=(" << kernel_size << ", " << kernel_size << ")";
  if (options.stride != 1) os << ", stride=(" << options.stride << ", " << options.stride << ")";
  if (options.padding != 0) os << ", padding=(" << options.padding << ", " << options.padding << ")";
  if (options.dilation != 1) os << ", dilation=(" << options.dilation << ", " << options.dilation << ")";
  if (options.groups != 1) os << ", groups=" << options.groups;
  if (!options.bias) os << ", bias=False";
  return os.str();
}

// ---- BatchNorm2d --------------------------------------------------------------------------

BatchNorm2d::BatchNorm2d(int64_t n, BatchNormOptions opt) : num_features(n), options(opt) {
  EMBER_CHECK(n > 0, "BatchNorm2d: num_features must be positive, got ", n);
  if (opt.affine) {
    weight = ones({n});
    bias = zeros({n});
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
  if (opt.track_running_stats) {
    running_mean = zeros({n});
    running_var = ones({n});
    num_batches_tracked = zeros({}, {.dtype = DType::i64});
    register_buffer("running_mean", running_mean);
    register_buffer("running_var", running_var);
    register_buffer("num_batches_tracked", num_batches_tracked);
  }
}

Tensor BatchNorm2d::forward(const Tensor& x) { return normalize(x, false, Tensor()); }

Tensor BatchNorm2d::forward_relu(const Tensor& x, const Tensor& residual) { return normalize(x, true, residual); }

Tensor BatchNorm2d::normalize(const Tensor& x, bool relu, const Tensor& residual) {
  EMBER_CHECK(x.dim() == 4 && x.size(1) == num_features, "BatchNorm2d: expected input (N, ", num_features,
              ", H, W), got ", describe(x));
  // The replacement (set_training_function) runs in training mode only: in eval mode without
  // running statistics the batch's own statistics normalize it, as in PyTorch.
  // In training num_batches_tracked is counted by batch_norm (in its statistics kernel), or here
  // for a replacement.
  auto normalize = [&](const Tensor& rm, const Tensor& rv, bool training, const Tensor& batches) {
    if (is_training() && training_fn_) {
      if (batches.defined()) detail::count_batch(batches);
      const Tensor y = training_fn_(x, rm, rv, weight, bias, training, options.momentum, options.eps);
      if (!relu) return y;
      return residual.defined() ? ember::relu(add(y, residual)) : ember::relu(y);
    }
    if (relu)
      return batch_norm_relu(x, rm, rv, weight, bias, training, options.momentum, options.eps, residual, batches);
    return batch_norm(x, rm, rv, weight, bias, training, options.momentum, options.eps, batches);
  };
  if (!options.track_running_stats) {
    // No running statistics: always normalize with the batch's own.
    return normalize(Tensor(), Tensor(), /*training=*/true, Tensor());
  }
  return normalize(running_mean, running_var, is_training(), is_training() ? num_batches_tracked : Tensor());
}

void BatchNorm2d::set_training_function(BatchNormFunction fn, std::string label) {
  training_fn_ = std::move(fn);
  training_label_ = training_fn_ ? std::move(label) : std::string();
}

std::string BatchNorm2d::extra_repr() const {
  std::ostringstream os;
  os << num_features << ", eps=" << options.eps << ", momentum=" << options.momentum
     << ", affine=" << (options.affine ? "True" : "False");
  if (!training_label_.empty()) os << ", " << training_label_;
  return os.str();
}

// ---- pools, dropout -----------------------------------------------------------------------

MaxPool2d::MaxPool2d(int64_t k, int64_t stride, int64_t padding, bool ceil_mode) {
  options.kernel = {k, k};
  options.stride = {stride, stride};
  options.padding = {padding, padding};
  options.ceil_mode = ceil_mode;
}

AvgPool2d::AvgPool2d(int64_t k, int64_t stride, int64_t padding, bool ceil_mode, bool count_include_pad) {
  options.kernel = {k, k};
  options.stride = {stride, stride};
  options.padding = {padding, padding};
  options.ceil_mode = ceil_mode;
  options.count_include_pad = count_include_pad;
}

Dropout::Dropout(double p) : p(p) {
  EMBER_CHECK(p >= 0 && p <= 1, "Dropout: probability has to be between 0 and 1, got ", p);
}

// ---- containers ---------------------------------------------------------------------------

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}

Sequential& Sequential::push_back(std::shared_ptr<Module> m) { return push_back(std::to_string(items_.size()), std::move(m)); }

Sequential& Sequential::push_back(const std::string& name, std::shared_ptr<Module> m) {
  register_module(name, m);
  items_.push_back(std::move(m));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& m : items_) h = m->forward(h);
  return h;
}

ModuleList& ModuleList::push_back(std::shared_ptr<Module> m) {
  register_module(std::to_string(items_.size()), m);
  items_.push_back(std::move(m));
  return *this;
}

}  // namespace ember::nn
