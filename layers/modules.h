#pragma once
// The nn layers: thin Modules over the functions in layers/*.h, with PyTorch's parameter names
// and default initialization (kaiming_uniform with a = sqrt(5) for weights, U(±1/sqrt(fan_in))
// for biases; BatchNorm weight 1, bias 0).

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "elementwise.h"
#include "module.h"
#include "nn_functional.h"

namespace ember::nn {

struct LinearOptions {
  bool bias = true;
};
// y = x W^T + b. x: (*, in_features) -> (*, out_features). weight: (out, in), bias: (out).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, LinearOptions opt = {});
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;
  Tensor weight, bias;
  int64_t in_features, out_features;
};

struct Conv2dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};
// x: (N, in, H, W) -> (N, out, H', W'). weight: (out, in / groups, k, k), bias: (out).
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions opt = {});
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  std::string type_name() const override { return "Conv2d"; }
  std::string extra_repr() const override;
  Tensor weight, bias;
  int64_t in_channels, out_channels, kernel_size;
  Conv2dOptions options;
};

struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
};
// What a BatchNorm2d calls to normalize: ember::batch_norm's signature and contract
// (layers/nn_functional.h).
using BatchNormFunction =
    std::function<Tensor(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                         const Tensor& bias, bool training, double momentum, double eps)>;

// Per-channel batch normalization of (N, C, H, W). Buffers: running_mean, running_var,
// num_batches_tracked (int64), as PyTorch.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions opt = {});
  Tensor forward(const Tensor& x) override;
  // relu(forward(x) + residual), or relu(forward(x)) without a residual, through batch_norm_relu:
  // the ReLU and the add inside the batch norm's passes (Note [Batch norm with a fused ReLU] in
  // kernels/batchnorm.h). A training function (set_training_function) runs unfused.
  Tensor forward_relu(const Tensor& x, const Tensor& residual = Tensor());
  std::string type_name() const override { return "BatchNorm2d"; }
  std::string extra_repr() const override;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  int64_t num_features;
  BatchNormOptions options;

  // Training-mode forward calls `fn` instead of batch_norm; eval mode always calls batch_norm.
  // This is how parallel::convert_sync_batchnorm makes the BatchNorm2d layers of a model compute
  // their statistics over every rank's batch: models hold them as members, which cannot be
  // swapped for another type (parallel/sync_batchnorm.h). `fn` keeps batch_norm's contract and is
  // given this module's tensors at every call (so to() and load_state_dict() keep working);
  // `label` is shown by str(). An empty fn restores batch_norm.
  void set_training_function(BatchNormFunction fn, std::string label);
  const std::string& training_function_label() const { return training_label_; }

 private:
  Tensor normalize(const Tensor& x, bool relu, const Tensor& residual);
  BatchNormFunction training_fn_;
  std::string training_label_;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
  std::string type_name() const override { return "ReLU"; }
};

class GELU : public Module {
 public:
  explicit GELU(GeluApproximation approximate = GeluApproximation::None) : approximate(approximate) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approximate); }
  std::string type_name() const override { return "GELU"; }
  GeluApproximation approximate;
};

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  Tensor forward(const Tensor& x) override { return leaky_relu(x, negative_slope); }
  std::string type_name() const override { return "LeakyReLU"; }
  double negative_slope;
};

class MaxPool2d : public Module {
 public:
  // stride 0 means stride = kernel_size, as PyTorch's default.
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0, bool ceil_mode = false);
  Tensor forward(const Tensor& x) override { return max_pool2d(x, options); }
  std::string type_name() const override { return "MaxPool2d"; }
  Pool2dOptions options;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0, bool ceil_mode = false,
                     bool count_include_pad = true);
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, options); }
  std::string type_name() const override { return "AvgPool2d"; }
  Pool2dOptions options;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(std::pair<int64_t, int64_t> output_size) : output_size(output_size) {}
  explicit AdaptiveAvgPool2d(int64_t size) : output_size(size, size) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, output_size); }
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }
  std::pair<int64_t, int64_t> output_size;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override { return dropout(x, p, is_training()); }
  std::string type_name() const override { return "Dropout"; }
  double p;
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim, end_dim); }
  std::string type_name() const override { return "Flatten"; }
  int64_t start_dim, end_dim;
};

class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  std::string type_name() const override { return "Identity"; }
};

// Children named "0", "1", ... (or given names); forward runs them in order.
class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  Sequential& push_back(std::shared_ptr<Module> m);
  Sequential& push_back(const std::string& name, std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return items_.size(); }
  Module& operator[](size_t i) const { return *items_.at(i); }
  std::string type_name() const override { return "Sequential"; }

 private:
  std::vector<std::shared_ptr<Module>> items_;
};

// A list of children named "0", "1", ...; no forward of its own.
class ModuleList : public Module {
 public:
  ModuleList() = default;
  ModuleList& push_back(std::shared_ptr<Module> m);
  size_t size() const { return items_.size(); }
  Module& operator[](size_t i) const { return *items_.at(i); }
  std::string type_name() const override { return "ModuleList"; }

 private:
  std::vector<std::shared_ptr<Module>> items_;
};

// ---- losses: modules with two inputs ------------------------------------------------------

class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(CrossEntropyOptions opt = {}) : options(std::move(opt)) {}
  Tensor operator()(const Tensor& logits, const Tensor& target) const { return cross_entropy(logits, target, options); }
  std::string type_name() const override { return "CrossEntropyLoss"; }
  CrossEntropyOptions options;
};

class NLLLoss : public Module {
 public:
  explicit NLLLoss(NllLossOptions opt = {}) : options(std::move(opt)) {}
  Tensor operator()(const Tensor& log_probs, const Tensor& target) const { return nll_loss(log_probs, target, options); }
  std::string type_name() const override { return "NLLLoss"; }
  NllLossOptions options;
};

class MSELoss : public Module {
 public:
  explicit MSELoss(Reduction reduction = Reduction::Mean) : reduction(reduction) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const { return mse_loss(input, target, reduction); }
  std::string type_name() const override { return "MSELoss"; }
  Reduction reduction;
};

}  // namespace ember::nn
