// Batch normalization with autograd.
//
// Note [Batch norm running statistics]
// In training, the output is normalized with the batch statistics (biased variance), and the
// running statistics, when given, are updated in place with the unbiased variance:
//   running_mean = (1 - momentum) * running_mean + momentum * mean
//   running_var  = (1 - momentum) * running_var  + momentum * var * M / (M - 1)
// where M = N * (product of the dims after C). The update is buffer bookkeeping, not part of the
// computation graph: it runs under NoGradGuard, and the running tensors are never saved for
// backward, so a later update cannot invalidate a pending backward. In eval the running
// statistics are copied at call time and normalization is an affine map of x.
//
// Note [Channels-last batch norm in the layer]
// On a CUDA device a 4-D channels-last x is normalized where it lies: the kernels take it as an
// (N * H * W) x C matrix (BatchNormShape::channels_last; Note [Channels-last batch norm] in
// kernels/cuda/batchnorm.cu), y and grad x are allocated channels-last, and grad y is made
// channels-last contiguous if it arrives in another layout. No NCHW copy is made, forward or
// backward. Its sums run in another order than the NCHW kernels', so its results equal the NCHW
// run's within float rounding of those sums, not bit for bit. The CPU kernels read (N, C, S) only:
// on the CPU a channels-last x is copied to NCHW, computed there and the result copied back
// (Note [Channels-last through the NCHW kernels] in core/op_helpers.h), bit for bit the NCHW
// result.

#include "../core/autocast.h"
#include "../core/op_helpers.h"
#include "../kernels/cpu/batchnorm.h"
#include "elementwise.h"
#include "nn_functional.h"

#if EMBER_CUDA_BACKEND
#include "../kernels/cuda/batchnorm.h"
#endif

namespace ember {

namespace {

// A per-channel vector argument (weight, bias, running stats): undefined, or C elements.
void check_channel_vector(const char* op, const char* what, const Tensor& t, const Tensor& x, int64_t channels) {
  if (!t.defined()) return;
  EMBER_CHECK(t.dim() == 1 && t.numel() == channels, op, ": ", what, " must have shape ", Shape{channels},
              " for input ", describe(x), ", got ", describe(t));
  detail::check_same_device(op, x, t);
  EMBER_CHECK(is_floating(t.dtype()), op, ": ", what, " must be floating-point, got ", describe(t));
}

// t (or undefined) as a contiguous tensor of dtype dt, cut from the graph.
Tensor plain(const Tensor& t, DType dt) { return t.defined() ? t.detach().to(dt).contiguous() : Tensor(); }

void* data_or_null(const Tensor& t) { return t.defined() ? t.data() : nullptr; }

}  // namespace

void detail::check_batch_norm_args(const char* op, const Tensor& x, const Tensor& running_mean,
                                   const Tensor& running_var, const Tensor& weight, const Tensor& bias, double eps) {
  EMBER_CHECK(x.dim() >= 2, op, ": expected an input of shape (N, C, ...), got ", describe(x));
  check_floating(op, x);
  const int64_t channels = x.size(1);
  check_channel_vector(op, "weight", weight, x, channels);
  check_channel_vector(op, "bias", bias, x, channels);
  check_channel_vector(op, "running_mean", running_mean, x, channels);
  check_channel_vector(op, "running_var", running_var, x, channels);
  EMBER_CHECK(running_mean.defined() == running_var.defined(), op,
              ": running_mean and running_var must both be given or both be undefined");
  EMBER_CHECK(eps >= 0, op, ": eps must be non-negative, got ", eps);
}

namespace {

// What follows the normalization inside the same passes (Note [Batch norm with a fused ReLU] in
// kernels/batchnorm.h): nothing, a ReLU, or a residual add and a ReLU.
struct Fused {
  bool relu = false;
  Tensor residual;  // x0's shape, dtype and device; only with relu
};

// The running statistics as batch_norm_stats updates them (kernels::BatchNormStats): in place
// when they are contiguous vectors of the kernels' dtype, else through a copy in that dtype that
// is written back.
struct RunningStats {
  Tensor mean, var;  // what the kernel updates: the buffers themselves, or their copies
  RunningStats(const Tensor& running_mean, const Tensor& running_var, DType pdt) {
    if (!running_mean.defined()) return;
    mean = running_mean.detach().to(pdt).contiguous();
    var = running_var.detach().to(pdt).contiguous();
  }
  void write_back(const Tensor& running_mean, const Tensor& running_var) const {
    NoGradGuard no_grad;
    if (mean.defined() && mean.data() != running_mean.data()) Tensor(running_mean).copy_(mean);
    if (var.defined() && var.data() != running_var.data()) Tensor(running_var).copy_(var);
  }
};

// The one-element int64 counter a BatchNorm2d keeps, when the statistics kernel can count it where
// it lies (same device, contiguous); else undefined, and the caller counts it.
bool countable(const Tensor& batches, const Tensor& x) {
  return batches.defined() && batches.dtype() == DType::i64 && batches.numel() == 1 &&
         batches.device() == x.device() && batches.is_contiguous();
}

// batch_norm on x0 as it is, with the per-channel vectors (weight, bias, the statistics, their
// gradients) in pdt: x0's dtype, or f32 for a 16-bit x0 under autocast (Note
// [Mixed-precision batch norm] in kernels/batchnorm.h). The output and grad x have x0's dtype.
Tensor batch_norm_impl(const Tensor& x0, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, bool training, double momentum, double eps, DType pdt,
                       const Fused& fused, const Tensor& batches) {
  const DType dt = x0.dtype();
  const int64_t channels = x0.size(1);
  EMBER_CHECK(training || running_mean.defined(),
              "batch_norm: running_mean and running_var are required in eval mode (training = false)");

  kernels::BatchNormShape sh{x0.size(0), channels, 1};
  for (int d = 2; d < x0.dim(); ++d) sh.s *= x0.size(d);
  const int64_t count = sh.n * sh.s;  // elements per channel
  EMBER_CHECK(!training || count > 1, "batch_norm: expected more than 1 value per channel when training, got input ",
              describe(x0));

  // Note [Channels-last batch norm in the layer]: native channels-last on a CUDA device; otherwise
  // x in (N, C, S) order, and a channels-last result copied back to `fmt`.
  const MemoryFormat fmt = x0.suggest_memory_format();
  sh.channels_last = x0.device().is_cuda() && detail::is_channels_last(x0);
  sh.relu = fused.relu;
  const MemoryFormat kernel_fmt = sh.channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous;
  const Tensor x = x0.detach().contiguous(kernel_fmt);
  const Tensor residual = fused.residual.defined() ? fused.residual.detach().contiguous(kernel_fmt) : Tensor();
  const Tensor w = plain(weight, pdt), b = plain(bias, pdt);
  Tensor mean, invstd;
  {
    NoGradGuard no_grad;
    if (training) {
      // One kernel call: the statistics, invstd, the running statistics' update (Note [Batch norm
      // running statistics]) and the batch count (Note [One-pass batch norm statistics] in
      // kernels/cuda/batchnorm.cu).
      mean = empty({channels}, {.dtype = pdt, .device = x.device()});
      invstd = empty({channels}, {.dtype = pdt, .device = x.device()});
      const RunningStats running(running_mean, running_var, pdt);
      const kernels::BatchNormStats out{.mean = mean.data(),
                                        .invstd = invstd.data(),
                                        .eps = eps,
                                        .running_mean = data_or_null(running.mean),
                                        .running_var = data_or_null(running.var),
                                        .momentum = momentum,
                                        .batches_tracked = batches.defined() ? batches.data_ptr<int64_t>() : nullptr};
      EMBER_KERNEL_CALL(x.device(), "batch_norm", batch_norm_stats, dt, pdt, sh, x.data(), out);
      running.write_back(running_mean, running_var);
    } else {
      mean = running_mean.detach().to(pdt).clone();
      invstd = rsqrt(add(running_var.detach().to(pdt), eps));
    }
  }

  Tensor y = empty(x.shape(), {.dtype = dt, .device = x.device()}, kernel_fmt);
  EMBER_KERNEL_CALL(x.device(), "batch_norm", batch_norm_apply, dt, pdt, sh, x.data(), mean.data(), invstd.data(),
                    data_or_null(w), data_or_null(b), y.data(), data_or_null(residual));
  if (!sh.channels_last) y = detail::to_format(y, fmt);

  if (any_requires_grad({&x0, &weight, &bias, &fused.residual})) {
    const bool need_x = x0.requires_grad(), need_w = weight.defined() && weight.requires_grad(),
               need_b = bias.defined() && bias.requires_grad();
    const DType dw = weight.defined() ? weight.dtype() : pdt, db = bias.defined() ? bias.dtype() : pdt;
    const bool has_residual = residual.defined();
    const char* node = !fused.relu ? "BatchNormBackward" : has_residual ? "BatchNormAddReluBackward" : "BatchNormReluBackward";
    // The fused ReLU's mask: from its output y, or on a CUDA device without a residual recomputed
    // from x with the bias (Note [The ReLU mask recomputed from x] in kernels/batchnorm.h), so this
    // node does not save y.
    const bool mask_from_x = fused.relu && !residual.defined() && x.device().is_cuda();
    SavedTensor sx(x, node), smean(mean, node), sinv(invstd, node), sw(w, node);
    SavedTensor sy(fused.relu && !mask_from_x ? y.detach() : Tensor(), node);
    SavedTensor sb(mask_from_x ? b : Tensor(), node);
    record(node, {x0, weight, bias, fused.residual}, {y}, [=](const std::vector<Tensor>& grads) {
      if (!grads[0].defined()) return std::vector<Tensor>(4);
      Tensor gy = grads[0].to(dt).contiguous(kernel_fmt);
      Tensor ys = sy.defined() ? sy.get().contiguous(kernel_fmt) : Tensor();
      Tensor gresidual;
      kernels::BatchNormShape shb = sh;
      const Tensor& xs = sx.get();
      // The residual's gradient is the masked gradient itself. On a CUDA device the batch norm's
      // reduction pass writes it while it reads grad y (when that pass runs); otherwise it is
      // materialized first and the batch norm reads it unmasked.
      const bool masked_by_reduction =
          has_residual && xs.device().is_cuda() && (need_w || need_b || (need_x && training));
      if (masked_by_reduction) {
        gresidual = empty(gy.shape(), {.dtype = dt, .device = gy.device()}, kernel_fmt);
      } else if (has_residual) {
        gy = gresidual = relu_backward(gy, ys);
        shb.relu = false;
        ys = Tensor();
      }
      Tensor gx = need_x ? empty(xs.shape(), {.dtype = dt, .device = xs.device()}, kernel_fmt) : Tensor();
      Tensor gw = need_w ? empty({channels}, {.dtype = pdt, .device = xs.device()}) : Tensor();
      Tensor gb = need_b ? empty({channels}, {.dtype = pdt, .device = xs.device()}) : Tensor();
      EMBER_KERNEL_CALL(xs.device(), "batch_norm backward", batch_norm_backward, dt, pdt, shb, training, xs.data(),
                        gy.data(), smean.get().data(), sinv.get().data(), sw.defined() ? sw.get().data() : nullptr,
                        data_or_null(gx), data_or_null(gw), data_or_null(gb), data_or_null(ys),
                        sb.defined() ? sb.get().data() : nullptr, masked_by_reduction ? gresidual.data() : nullptr);
      return std::vector<Tensor>{sh.channels_last ? gx : detail::to_format(gx, fmt), need_w ? gw.to(dw) : Tensor(),
                                 need_b ? gb.to(db) : Tensor(), gresidual};
    });
  }
  return y;
}

// batch_norm (and batch_norm_relu): the dtypes under autocast, then batch_norm_impl.
Tensor batch_norm_dispatch(const Tensor& x0, const Tensor& running_mean, const Tensor& running_var,
                           const Tensor& weight, const Tensor& bias, bool training, double momentum, double eps,
                           const Fused& fused, const Tensor& batches) {
  // Under autocast: statistics and normalization in f32, the output in x's dtype (Note [Autocast]
  // in core/autocast.h). A 16-bit x is not cast: the kernels read it with f32 per-channel vectors,
  // so backward keeps the 16-bit x, not an f32 copy (Note [Mixed-precision batch norm] in
  // kernels/batchnorm.h). The running statistics are buffers updated in place: never cast.
  if (const auto dt = autocast::op_dtype(autocast::CastPolicy::fp32, {&x0, &weight, &bias})) {
    const Tensor w = autocast::cast(weight, *dt), b = autocast::cast(bias, *dt);
    if (is_low_precision(x0.dtype()))
      return batch_norm_impl(x0, running_mean, running_var, w, b, training, momentum, eps, *dt, fused, batches);
    const Tensor x = autocast::cast(x0, *dt);  // x0 itself when it is f32 or f64
    return batch_norm_impl(x, running_mean, running_var, w, b, training, momentum, eps, x.dtype(), fused, batches);
  }
  return batch_norm_impl(x0, running_mean, running_var, weight, bias, training, momentum, eps, x0.dtype(), fused,
                         batches);
}

// What batch_norm and batch_norm_relu do to num_batches_tracked: nothing outside training or
// without running statistics; counted by the statistics kernel when it can reach it (countable),
// else here.
Tensor counted_batches(const Tensor& batches, const Tensor& x0, const Tensor& running_mean, bool training) {
  if (!batches.defined() || !training || !running_mean.defined()) return Tensor();
  if (countable(batches, x0)) return batches;
  detail::count_batch(batches);
  return Tensor();
}

}  // namespace

void detail::count_batch(const Tensor& num_batches_tracked) {
  NoGradGuard no_grad;
  Tensor(num_batches_tracked).copy_(add(num_batches_tracked.to(DType::f64), 1.0));
}

Tensor batch_norm(const Tensor& x0, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps, const Tensor& num_batches_tracked) {
  detail::check_batch_norm_args("batch_norm", x0, running_mean, running_var, weight, bias, eps);
  const Tensor batches = counted_batches(num_batches_tracked, x0, running_mean, training);
  return batch_norm_dispatch(x0, running_mean, running_var, weight, bias, training, momentum, eps, Fused{}, batches);
}

Tensor batch_norm_relu(const Tensor& x0, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, bool training, double momentum, double eps, const Tensor& residual,
                       const Tensor& num_batches_tracked) {
  detail::check_batch_norm_args("batch_norm_relu", x0, running_mean, running_var, weight, bias, eps);
  // The output's dtype is x0's: a residual in it fuses; any other runs the separate ops, whose
  // add promotes as add() does (Note [Batch norm with a fused ReLU] in kernels/batchnorm.h).
  if (residual.defined() && (residual.shape() != x0.shape() || residual.dtype() != x0.dtype() ||
                             residual.device() != x0.device()))
    return relu(add(batch_norm(x0, running_mean, running_var, weight, bias, training, momentum, eps,
                               num_batches_tracked),
                    residual));
  const Tensor batches = counted_batches(num_batches_tracked, x0, running_mean, training);
  return batch_norm_dispatch(x0, running_mean, running_var, weight, bias, training, momentum, eps,
                             Fused{.relu = true, .residual = residual}, batches);
}

}  // namespace ember
