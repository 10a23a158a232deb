#pragma once
// Neural-network functions with autograd: softmax, convolution, pooling, normalization,
// dropout, losses. Image tensors are NCHW.

#include <optional>
#include <utility>

#include "../core/generator.h"
#include "../core/tensor.h"

namespace ember {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

struct Conv2dOptions {
  std::pair<int64_t, int64_t> stride{1, 1};
  std::pair<int64_t, int64_t> padding{0, 0};
  std::pair<int64_t, int64_t> dilation{1, 1};
  int64_t groups = 1;
};
// x: (N, C_in, H, W); weight: (C_out, C_in / groups, kH, kW); bias: (C_out) or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv2dOptions& opt = {});

struct Pool2dOptions {
  std::pair<int64_t, int64_t> kernel{2, 2};
  std::pair<int64_t, int64_t> stride{0, 0};  // {0, 0} means = kernel
  std::pair<int64_t, int64_t> padding{0, 0};
  std::pair<int64_t, int64_t> dilation{1, 1};  // max pool only
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg pool only
};
// (values, indices): indices are int64 positions within each (H*W) input plane, as PyTorch.
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Pool2dOptions& opt);
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& opt);
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& opt);
Tensor adaptive_avg_pool2d(const Tensor& x, std::pair<int64_t, int64_t> output_size);

// Batch norm over (N, C, ...) per channel C. In training, uses the batch statistics and, when
// running_mean/var are given, updates them in place:
//   running = (1 - momentum) * running + momentum * batch_stat (running_var gets the unbiased var).
// In eval, normalizes with the running statistics. weight/bias may be undefined.
// num_batches_tracked (BatchNorm2d's one-element int64 buffer, or undefined) is counted up by one
// whenever the running statistics are updated, in the same kernel when it lies on x's device.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5,
                  const Tensor& num_batches_tracked = Tensor());
// relu(batch_norm(x, ...) + residual), or relu(batch_norm(x, ...)) without a residual: equal to the
// separate ops bit for bit, with the ReLU (and the add) done inside the batch norm's own passes
// over the data, forward and backward (Note [Batch norm with a fused ReLU] in kernels/batchnorm.h).
// A residual of another shape, dtype or device than the batch norm's output runs the separate ops.
Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5,
                       const Tensor& residual = Tensor(), const Tensor& num_batches_tracked = Tensor());
namespace detail {
// num_batches_tracked (one int64 element) counted up by one with device work only, through float64
// (exact below 2^53; no read back, so a CUDA graph can record it): what batch_norm does when its
// statistics kernel cannot reach the counter, and what BatchNorm2d does around a replacement.
void count_batch(const Tensor& num_batches_tracked);
}  // namespace detail

// Zeroes each element with probability p (mask from Philox via `gen`) and scales the rest by
// 1 / (1 - p). Identity when !training or p == 0.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen = default_generator());

enum class Reduction { None, Mean, Sum };

struct CrossEntropyOptions {
  Tensor weight;                 // (C) class weights, or undefined
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
};
// logits: (N, C) or (N, C, d1, ...); target: int64 class indices (N) / (N, d1, ...), or, for
// (N, C) logits, floating class probabilities (N, C) (Note [Soft-target cross-entropy]).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& opt = {});
// The check cross_entropy and nll_loss make of int64 class indices (any shape, any device) before
// a kernel reads them: an ember::Error naming `op`, the first target that is neither in
// [0, classes) nor ignore_index, and its flat position. Returns whether some target equals
// ignore_index. The answer is read on the host: on a GPU that waits for the device, on host
// memory it does not (train::check_class_indices checks a batch's labels there, before the copy).
bool check_class_targets(const char* op, const Tensor& target, int64_t classes, int64_t ignore_index);

// While one lives on this thread, cross_entropy and nll_loss take their class-index targets as
// checked by whoever made them: each is a class index in [0, C), none equals ignore_index. Then
// they launch no check and read nothing back on the host for the targets (on a GPU that read
// waits for the device: a host sync per call). ember train checks each batch's labels on the host
// before it copies them to the device (train::check_class_indices in train/train_step.h), as
// it does for a CUDA graph's staged targets. A target that breaks the promise is read out of
// bounds: only code that has checked its targets makes one.
class CheckedTargetsGuard {
 public:
  CheckedTargetsGuard();
  ~CheckedTargetsGuard();
  CheckedTargetsGuard(const CheckedTargetsGuard&) = delete;
  CheckedTargetsGuard& operator=(const CheckedTargetsGuard&) = delete;
  static bool active();  // on this thread

 private:
  bool previous_;
};

struct NllLossOptions {
  Tensor weight;
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
};
// log_probs: (N, C) or (N, C, d1, ...); target int64.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& opt = {});
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

}  // namespace ember
