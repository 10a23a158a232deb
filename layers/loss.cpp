// The losses (cross_entropy, nll_loss, mse_loss), with autograd. Declared in nn_functional.h.
//
// Note [Class-index losses]
// cross_entropy and nll_loss follow PyTorch exactly:
//   - logits / log-probs are (N, C) or (N, C, d1, ...) (or (C) with a 0-d target); targets are
//     int64 class indices of shape (N) / (N, d1, ...);
//   - a target equal to ignore_index contributes nothing (loss 0, weight 0, gradient 0); any
//     other target outside [0, C) is an error;
//   - 'mean' divides the summed loss by the summed weight w[target] of the non-ignored samples
//     (the count when there are no weights), so it is NaN when every target is ignored;
//   - label smoothing eps mixes in the uniform target: per sample
//       (1 - eps) * (-w[t] logp[t]) + eps / C * (-sum_c w[c] logp[c]),
//     and 'mean' divides this whole sum by the same sum of w[target].
// A floating-point target of the logits' shape is class probabilities instead (Note [Soft-target
// cross-entropy]).
// The kernels take the (N, C, S) contiguous layout (S = d1 * d2 * ...): inputs are made
// contiguous here, which copies only when they are not. Weight and target get no gradient.

#include <cmath>

#include "../core/autocast.h"
#include "../core/op_helpers.h"
#include "../kernels/cpu/loss.h"
#include "elementwise.h"
#include "nn_functional.h"
#include "reduce.h"

#if EMBER_CUDA_BACKEND
#include "../kernels/cuda/loss.h"
#endif

namespace ember {

namespace {

using autocast::CastPolicy;
using kernels::ClassLayout;

// Checks scores / target / weight (Note [Class-index losses]) and returns the (N, C, S) layout.
// `some_ignored`: set to whether any target equals ignore_index (a 'mean' then reads its total weight).
ClassLayout check_class_loss(const char* op, const Tensor& scores, const Tensor& target, const Tensor& weight,
                             int64_t ignore_index, bool* some_ignored) {
  detail::check_floating(op, scores);
  EMBER_CHECK(scores.dim() >= 1, op, ": expected input of shape (N, C) or (N, C, d1, ...), got ", describe(scores));
  EMBER_CHECK(target.dtype() == DType::i64, op, ": expected int64 class indices as target, got ", describe(target),
              " (or class probabilities of the input's shape, for cross_entropy)");
  detail::check_same_device(op, scores, target);
  ClassLayout l;
  Shape expected_target;  // scores' shape without the class dim
  if (scores.dim() == 1) {
    l.n = 1;
    l.c = scores.shape()[0];
  } else {
    l.n = scores.shape()[0];
    l.c = scores.shape()[1];
    expected_target.push_back(l.n);
    for (int i = 2; i < scores.dim(); ++i) {
      l.s *= scores.shape()[i];
      expected_target.push_back(scores.shape()[i]);
    }
  }
  EMBER_CHECK(target.shape() == expected_target, op, ": target of shape ", target.shape(),
              " does not match input of shape ", scores.shape(), " (expected target shape ", expected_target, ")");
  if (weight.defined()) {
    detail::check_same_device(op, scores, weight);
    detail::check_floating(op, weight);
    EMBER_CHECK(weight.dim() == 1 && weight.shape()[0] == l.c, op, ": weight should have one entry per class (",
                l.c, "), got ", describe(weight));
  }
  // Validate the class indices before any kernel runs (kernels cannot throw from their threads).
  // The check reads its answer on the host; a CUDA graph cannot record that, so while one is being
  // captured the check is left to whoever fills the graph's static targets (ember train checks
  // every batch's labels before it stages them: Note [CUDA graphs in ember] in core/cuda/graph.h),
  // and so it is under a CheckedTargetsGuard.
  *some_ignored = !detail::capturing_graph(target.device()) && !CheckedTargetsGuard::active() &&
                  check_class_targets(op, target, l.c, ignore_index);
  return l;
}

// The per-sample losses reduced: None -> target's shape, Sum -> sum, Mean -> sum / sum of weights.
// Returns the loss in `dtype` and, for the backward, the factor that scales the incoming gradient.
// `weighted`: class weights were given.
std::pair<Tensor, double> reduce_loss(const Tensor& per_sample, const Tensor& target_weight, Reduction reduction,
                                      const Shape& target_shape, DType dtype, bool weighted, bool some_ignored) {
  NoGradGuard ng;
  switch (reduction) {
    case Reduction::None: return {per_sample.reshape(target_shape).to(dtype), 1.0};
    case Reduction::Sum: return {sum(per_sample).to(dtype), 1.0};
    case Reduction::Mean: {
      // 0 / 0 = NaN when every target is ignored, as PyTorch. Without class weights and with no
      // target ignored the total weight is the number of targets (the sum of as many 1.0s, exact);
      // otherwise it is read on the host. A CUDA graph cannot read, so while one is being captured
      // every target is taken to be a class index (the check above is left out too: the caller
      // checks the staged targets), and without class weights the total is the number of targets,
      // exactly the sum an eager step would read (Note [CUDA graphs in ember] in core/cuda/graph.h).
      double total_weight = static_cast<double>(per_sample.numel());
      if (weighted)
        detail::check_not_capturing(per_sample.device(), "cross_entropy / nll_loss with class weights and reduction "
                                    "'mean'", "divides by the targets' total weight, read on the host");
      if ((weighted || some_ignored) && !detail::capturing_graph(per_sample.device()))
        total_weight = sum(target_weight).item();
      return {div(sum(per_sample), total_weight).to(dtype), 1.0 / total_weight};
    }
  }
  return {};
}

thread_local bool t_targets_checked = false;

}  // namespace

bool check_class_targets(const char* op, const Tensor& target, int64_t classes, int64_t ignore_index) {
  EMBER_CHECK(target.dtype() == DType::i64, op, ": expected int64 class indices as target, got ", describe(target));
  const Tensor t = target.contiguous();
  int64_t bad = kernels::kTargetsValid;
  EMBER_KERNEL_CALL_INTO(bad, t.device(), op, find_invalid_target, t.data_ptr<int64_t>(), t.numel(), classes,
                         ignore_index);
  if (bad >= 0) {
    const int64_t value = t.reshape({-1}).slice(0, bad, bad + 1).item<int64_t>();
    EMBER_THROW(op, ": target ", value, " (at flat position ", bad, ") is out of bounds for ", classes,
                " classes (expected 0 to ", classes - 1, ", or ignore_index ", ignore_index, ")");
  }
  return bad == kernels::kTargetsValidSomeIgnored;
}

CheckedTargetsGuard::CheckedTargetsGuard() : previous_(t_targets_checked) { t_targets_checked = true; }
CheckedTargetsGuard::~CheckedTargetsGuard() { t_targets_checked = previous_; }
bool CheckedTargetsGuard::active() { return t_targets_checked; }

// The losses are on autocast's f32 list: under autocast, 16-bit inputs are computed in f32 and
// the result is f32 (Note [Autocast] in core/autocast.h).

namespace {

// Note [Soft-target cross-entropy]
// With class probabilities p (N, C) as the target (Mixup/CutMix produce them), PyTorch's
// cross_entropy is, per sample, -sum_c w[c] * q[c] * log_softmax(x)[c] with
// q = (1 - eps) * p + eps / C (label smoothing composes with the mixed target exactly as with a
// one-hot one: a one-hot p gives the class-index loss), and 'mean' divides the sum by N (not by
// a sum of weights: there is no single target class to weigh). ignore_index does not apply. It is
// composed of differentiable ops (log_softmax, mul, sum), so the gradient
// (softmax(x) * sum_c w[c] q[c] - w * q) / N comes from autograd and runs on any device; the
// target gets no gradient.
Tensor soft_cross_entropy(const Tensor& logits, const Tensor& target0, const CrossEntropyOptions& opt) {
  detail::check_floating("cross_entropy", logits);
  detail::check_same_device("cross_entropy", logits, target0);
  EMBER_CHECK(logits.dim() == 2 && target0.shape() == logits.shape(), "cross_entropy: expected int64 class indices ",
              "or class probabilities of the same shape as (N, C) logits, got input ", describe(logits),
              " and target ", describe(target0));
  const int64_t c = logits.shape()[1];
  Tensor q = target0.detach().to(logits.dtype());
  if (opt.label_smoothing > 0) q = add(mul(q, 1.0 - opt.label_smoothing), opt.label_smoothing / static_cast<double>(c));
  if (opt.weight.defined()) {
    detail::check_same_device("cross_entropy", logits, opt.weight);
    EMBER_CHECK(opt.weight.dim() == 1 && opt.weight.shape()[0] == c, "cross_entropy: weight should have one entry "
                "per class (", c, "), got ", describe(opt.weight));
    q = mul(q, opt.weight.detach().to(logits.dtype()).reshape({1, c}));
  }
  const Tensor per_sample = neg(sum(mul(log_softmax(logits, 1), q), {1}));
  switch (opt.reduction) {
    case Reduction::None: return per_sample;
    case Reduction::Sum: return sum(per_sample);
    case Reduction::Mean: return mean(per_sample);
  }
  return per_sample;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits0, const Tensor& target0, const CrossEntropyOptions& opt) {
  // The target and the class weights follow the logits' dtype (converted below).
  if (const auto dt = autocast::op_dtype(CastPolicy::fp32, {&logits0}))
    return cross_entropy(autocast::cast(logits0, *dt), target0, opt);
  EMBER_CHECK(opt.label_smoothing >= 0.0 && opt.label_smoothing <= 1.0,
              "cross_entropy: label_smoothing must be between 0.0 and 1.0, got ", opt.label_smoothing);
  if (target0.defined() && is_floating(target0.dtype())) return soft_cross_entropy(logits0, target0, opt);
  bool some_ignored = false;
  const ClassLayout l = check_class_loss("cross_entropy", logits0, target0, opt.weight, opt.ignore_index, &some_ignored);
  // Detached: the kernels read raw data; this op records its own node.
  const Tensor logits = logits0.detach().contiguous(), target = target0.contiguous();
  const Tensor weight = opt.weight.defined() ? opt.weight.detach().to(logits.dtype()).contiguous() : Tensor();
  const TensorOptions f64{.dtype = DType::f64, .device = logits.device()};
  Tensor per_sample = empty({l.samples()}, f64), target_weight = empty({l.samples()}, f64),
         lse = empty({l.samples()}, f64);
  EMBER_KERNEL_CALL(logits.device(), "cross_entropy", cross_entropy_forward, logits.dtype(), l, logits.data(),
                    target.data_ptr<int64_t>(), weight.defined() ? weight.data() : nullptr, opt.ignore_index,
                    opt.label_smoothing, per_sample.data_ptr<double>(), target_weight.data_ptr<double>(),
                    lse.data_ptr<double>());
  auto [out, grad_factor] =
      reduce_loss(per_sample, target_weight, opt.reduction, target.shape(), logits.dtype(), weight.defined(),
                  some_ignored);
  const double factor = grad_factor;  // a plain local: the backward closure captures it
  if (any_requires_grad({&logits0})) {
    const char* node = "CrossEntropyBackward";
    SavedTensor sx(logits, node), st(target, node), sw(weight, node), sl(lse, node);
    const int64_t ignore_index = opt.ignore_index;
    const double eps = opt.label_smoothing;
    const bool per_sample_grad = opt.reduction == Reduction::None;
    record(node, {logits0}, {out}, [=](const std::vector<Tensor>& g) {
      const Tensor& x = sx.get();
      const Tensor gl = g[0].to(x.dtype()).contiguous();
      Tensor gx = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
      EMBER_KERNEL_CALL(x.device(), "cross_entropy backward", cross_entropy_backward, x.dtype(), l, gx.data(), x.data(),
                        st.get().data_ptr<int64_t>(), sw.defined() ? sw.get().data() : nullptr, ignore_index, eps,
                        sl.get().data_ptr<double>(), gl.data(), per_sample_grad ? 1 : 0, factor);
      return std::vector<Tensor>{gx};
    });
  }
  return out;
}

Tensor nll_loss(const Tensor& input0, const Tensor& target0, const NllLossOptions& opt) {
  if (const auto dt = autocast::op_dtype(CastPolicy::fp32, {&input0}))
    return nll_loss(autocast::cast(input0, *dt), target0, opt);
  bool some_ignored = false;
  const ClassLayout l = check_class_loss("nll_loss", input0, target0, opt.weight, opt.ignore_index, &some_ignored);
  const Tensor input = input0.detach().contiguous(), target = target0.contiguous();
  const Tensor weight = opt.weight.defined() ? opt.weight.detach().to(input.dtype()).contiguous() : Tensor();
  const TensorOptions f64{.dtype = DType::f64, .device = input.device()};
  Tensor per_sample = empty({l.samples()}, f64), target_weight = empty({l.samples()}, f64);
  EMBER_KERNEL_CALL(input.device(), "nll_loss", nll_loss_forward, input.dtype(), l, input.data(),
                    target.data_ptr<int64_t>(), weight.defined() ? weight.data() : nullptr, opt.ignore_index,
                    per_sample.data_ptr<double>(), target_weight.data_ptr<double>());
  auto [out, grad_factor] =
      reduce_loss(per_sample, target_weight, opt.reduction, target.shape(), input.dtype(), weight.defined(),
                  some_ignored);
  const double factor = grad_factor;
  if (any_requires_grad({&input0})) {
    const char* node = "NllLossBackward";
    SavedTensor st(target, node), sw(weight, node);
    const int64_t ignore_index = opt.ignore_index;
    const bool per_sample_grad = opt.reduction == Reduction::None;
    const Shape shape = input.shape();
    const DType dtype = input.dtype();
    record(node, {input0}, {out}, [=](const std::vector<Tensor>& g) {
      const Tensor gl = g[0].to(dtype).contiguous();
      Tensor gx = empty(shape, {.dtype = dtype, .device = gl.device()});
      EMBER_KERNEL_CALL(gl.device(), "nll_loss backward", nll_loss_backward, dtype, l, gx.data(),
                        st.get().data_ptr<int64_t>(), sw.defined() ? sw.get().data() : nullptr, ignore_index, gl.data(),
                        per_sample_grad ? 1 : 0, factor);
      return std::vector<Tensor>{gx};
    });
  }
  return out;
}

// Composed from differentiable ops (so it is differentiable in both input and target).
// Unlike PyTorch, which broadcasts mismatched shapes with a warning, a shape mismatch is an
// error here: an (N, 1) prediction against an (N) target silently becomes an (N, N) loss.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (const auto dt = autocast::op_dtype(CastPolicy::fp32, {&input, &target}))
    return mse_loss(autocast::cast(input, *dt), autocast::cast(target, *dt), reduction);
  detail::check_floating("mse_loss", input);
  detail::check_floating("mse_loss", target);
  detail::check_same_device("mse_loss", input, target);
  EMBER_CHECK(input.shape() == target.shape(), "mse_loss: input ", describe(input), " and target ", describe(target),
              " must have the same shape");
  const Tensor d = sub(input, target);
  const Tensor sq = mul(d, d);
  switch (reduction) {
    case Reduction::None: return sq;
    case Reduction::Sum: return sum(sq);
    case Reduction::Mean: return mean(sq);
  }
  return sq;
}

}  // namespace ember
