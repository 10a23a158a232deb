// Synchronized batch normalization: the statistics and gradient sums of batch norm, all-reduced.
//
// Note [Synchronized batch norm]
// Per channel, rank r holds n_r values (its rows times the spatial size; n_r may differ between
// ranks and may be 0); the global batch has M = sum_r n_r.
//
// Forward. Each rank reduces its own values as batch_norm does (kernels/cpu/batchnorm.h: the sum
// accumulated in double, then the squared deviations from that mean — the two-pass variance),
// giving its mean m_r and biased variance v_r, and contributes
//     s_r = n_r * m_r               (= sum of x)
//     q_r = n_r * (v_r + m_r^2)     (= sum of x^2)
//     n_r
// packed as [s (C) | q (C) | n (1)] in float64: ONE all_reduce(sum) of 2C + 1 values gives
// S = sum s_r, Q = sum q_r and M on every rank, and from them
//     mean = S / M,    var = Q / M - mean^2   (biased, clamped at 0),
// exactly the statistics of the global batch whatever the n_r: sums add, so a rank with 3 rows
// weighs 3/10 and one with 4 rows 4/10 (averaging the ranks' means would weigh them alike).
// Precision: the subtraction Q / M - mean^2 cancels about log10(mean^2 / var) of float64's 16
// digits — the price of one sum-reducible message. PyTorch instead all-gathers every rank's
// (mean, invstd, count) and merges them without cancellation (Chan et al.), sending world_size
// times more; with batch norm's inputs (|mean| a few standard deviations) float64 leaves >= 13
// digits either way, and float32 inputs round far more than that.
// The output is batch_norm's own kernel applied with these statistics,
//     y = (x - mean) * invstd * weight + bias,   invstd = 1 / sqrt(var + eps),
// (batch_norm in eval mode, given mean and var as its "running" statistics: the same arithmetic
// its training mode does with the batch's), and the running statistics are updated as
// batch_norm updates them (Note [Batch norm running statistics], layers/batchnorm.cpp), with M:
//     running_mean = (1 - momentum) * running_mean + momentum * mean
//     running_var  = (1 - momentum) * running_var  + momentum * var * M / (M - 1)
// Every rank does the same arithmetic on the same all-reduced numbers, so the running statistics
// stay identical on every rank without being broadcast.
//
// Backward. With xhat = (x - mean) * invstd and y = weight * xhat + bias, the loss the ranks
// optimize together is L = sum_r L_r (each rank's loss on its own rows; DDP's averaging divides
// every parameter's gradient by world_size on top, consistently). mean and invstd depend on every
// rank's x, so the gradient of L with respect to one value x_i is batch norm's training formula
// (kernels/cpu/batchnorm.h) with the sums over the GLOBAL batch:
//     dL/dx_i = weight * invstd * (dy_i - (1/M) sum_j dy_j - xhat_i * (1/M) sum_j dy_j xhat_j)
// Each rank sums dy and dy * xhat over its own rows, ONE all_reduce(sum) of 2C float64 values
// makes them global, and the formula is evaluated on the rank's rows. The parameter gradients
//     dL/dweight = sum_j dy_j xhat_j,   dL/dbias = sum_j dy_j
// are returned as the LOCAL sums: summed over ranks they are the global ones, and that sum is what
// DistributedDataParallel's gradient all-reduce computes for every parameter (reducing them here
// as well would count every rank's share world_size times). When x does not require grad (batch
// norm straight on the input) only these local sums are needed: no collective.
//
// A world of one skips all this and calls batch_norm (the same numbers; its kernels fuse the
// passes). Costs per layer and step: forward reads x three times for the local statistics and
// once to normalize, backward a few elementwise passes; two blocking all-reduces of ~2C doubles
// sit on the critical path (latency, not bandwidth), plus one host read of M in forward.

#include "sync_batchnorm.h"

#include <optional>

#include "../core/autograd.h"
#include "../core/error.h"
#include "../layers/elementwise.h"
#include "../layers/nn_functional.h"
#include "../core/autocast.h"
#include "../core/op_helpers.h"
#include "../layers/reduce.h"
#include "../layers/index.h"

namespace ember::parallel {

namespace {

// (1, C, 1, ..., 1): a per-channel vector broadcast over an input of `dims` dimensions.
Shape channel_shape(int64_t channels, int dims) {
  Shape s(dims, 1);
  s[1] = channels;
  return s;
}

// Every dim but the channel dim: the dims a per-channel statistic reduces.
Dims reduced_dims(int dims) {
  Dims d{0};
  for (int i = 2; i < dims; ++i) d.push_back(i);
  return d;
}

}  // namespace

Tensor sync_batch_norm(const Tensor& x0, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, bool training, double momentum, double eps,
                       const std::shared_ptr<Communicator>& comm) {
  EMBER_CHECK(comm != nullptr, "sync_batch_norm: no communicator");
  if (!training || comm->world_size() == 1)
    return batch_norm(x0, running_mean, running_var, weight, bias, training, momentum, eps);

  // Checked before the collective, so a bad argument fails on its own rank with this message
  // rather than as a mismatched collective.
  detail::check_batch_norm_args("sync_batch_norm", x0, running_mean, running_var, weight, bias, eps);
  // Under autocast: in f32, the output in x's dtype, as batch_norm (Note [Autocast] in
  // core/autocast.h). A 16-bit x is kept as it is (what backward saves) and widened to ct = f32
  // only for each computation (Note [Mixed-precision batch norm] in kernels/batchnorm.h).
  Tensor w0 = weight, b0 = bias;
  DType ct = x0.dtype();  // the dtype of the statistics and of the arithmetic
  if (const auto dt = autocast::op_dtype(autocast::CastPolicy::fp32, {&x0, &weight, &bias})) {
    w0 = autocast::cast(weight, *dt);
    b0 = autocast::cast(bias, *dt);
    if (!is_low_precision(x0.dtype()))
      return sync_batch_norm(autocast::cast(x0, *dt), running_mean, running_var, w0, b0, training, momentum, eps,
                             comm);
    ct = *dt;
  }
  EMBER_CHECK(x0.size(1) > 0, "sync_batch_norm: expected at least one channel, got ", describe(x0));
  const DType dt = x0.dtype();
  const int64_t channels = x0.size(1);

  const Tensor x = x0.detach().contiguous();
  const Shape cshape = channel_shape(channels, x.dim());
  const Dims dims = reduced_dims(x.dim());
  const TensorOptions f64_here{.dtype = DType::f64, .device = x.device()};
  Tensor mean_g, var_g, invstd, y;  // global statistics, in ct
  double count = 0;                 // M
  {
    NoGradGuard no_grad;
    // Note [Synchronized batch norm]: [sum x | sum x^2 | n] of this rank, then of all ranks.
    const int64_t local = x.numel() / channels;
    Tensor packed;
    if (local > 0) {
      const Tensor xw = x.to(ct);
      const Tensor m = mean(xw, dims).to(DType::f64), v = var(xw, dims, /*correction=*/0).to(DType::f64);
      const double n = static_cast<double>(local);
      packed = cat({m * n, (v + m * m) * n, full({1}, n, f64_here)});
    } else {
      packed = zeros({2 * channels + 1}, f64_here);
    }
    comm->all_reduce(packed);
    count = packed.narrow(0, 2 * channels, 1).item();
    EMBER_CHECK(count > 1, "sync_batch_norm: expected more than 1 value per channel over all ranks when training, got ",
                count, " (this rank's input: ", describe(x0), ")");
    const Tensor mean64 = packed.narrow(0, 0, channels) / count;
    const Tensor var64 = clamp(packed.narrow(0, channels, channels) / count - mean64 * mean64, 0.0, std::nullopt);
    mean_g = mean64.to(ct);
    var_g = var64.to(ct);
    invstd = rsqrt(add(var_g, eps));  // as batch_norm computes it from var
    if (running_mean.defined()) {
      Tensor rm = running_mean, rv = running_var;
      rm.mul_(1.0 - momentum).add_(mean_g, momentum);
      rv.mul_(1.0 - momentum).add_(var_g, momentum * count / (count - 1));
    }
    // Under autocast (ct != dt) this batch_norm takes the same mixed path, with f32 statistics.
    y = batch_norm(x, mean_g, var_g, w0.defined() ? w0.detach() : Tensor(), b0.defined() ? b0.detach() : Tensor(),
                   /*training=*/false, 0.0, eps);
  }

  if (any_requires_grad({&x0, &w0, &b0})) {
    const bool need_x = x0.requires_grad(), need_w = w0.defined() && w0.requires_grad(),
               need_b = b0.defined() && b0.requires_grad();
    const DType dw = w0.defined() ? w0.dtype() : ct, db = b0.defined() ? b0.dtype() : ct;
    const Tensor w = w0.defined() ? w0.detach().to(ct) : Tensor();
    SavedTensor sx(x, "SyncBatchNormBackward"), smean(mean_g, "SyncBatchNormBackward"),
        sinv(invstd, "SyncBatchNormBackward"), sw(w, "SyncBatchNormBackward");
    std::shared_ptr<Communicator> c = comm;
    record("SyncBatchNormBackward", {x0, w0, b0}, {y}, [=](const std::vector<Tensor>& grads) {
      // Note [Synchronized batch norm], backward, computed in ct (x and grad y widened when 16-bit).
      // An output without a gradient counts as zeros: the collective below must still run, as on
      // every other rank.
      const Tensor xs = sx.get().to(ct);
      const Tensor gy =
          grads[0].defined() ? grads[0].to(ct).contiguous() : zeros(xs.shape(), {.dtype = ct, .device = xs.device()});
      const Tensor& is = sinv.get();
      const Tensor xc = xs - smean.get().view(cshape);  // x - mean
      const Tensor sum_dy = sum(gy, dims);              // (C), this rank's rows
      const Tensor sum_dy_xhat = sum(gy * xc, dims) * is;
      Tensor gx;
      if (need_x) {
        Tensor packed = cat({sum_dy.to(DType::f64), sum_dy_xhat.to(DType::f64)});
        c->all_reduce(packed);
        const Tensor is64 = is.to(DType::f64);
        const Tensor scale = sw.defined() ? sw.get().to(DType::f64) * is64 : is64;  // weight * invstd
        const Tensor mean_dy = packed.narrow(0, 0, channels) / count;               // (1/M) sum dy
        const Tensor coef = packed.narrow(0, channels, channels) * is64 / count;    // invstd (1/M) sum dy xhat
        gx = ((gy - xc * coef.to(ct).view(cshape) - mean_dy.to(ct).view(cshape)) * scale.to(ct).view(cshape)).to(dt);
      }
      return std::vector<Tensor>{gx, need_w ? sum_dy_xhat.to(dw) : Tensor(), need_b ? sum_dy.to(db) : Tensor()};
    });
  }
  return y;
}

namespace {

void make_synchronized(nn::BatchNorm2d& bn, std::shared_ptr<Communicator> comm) {
  const std::string label = "sync_batch_norm(world_size=" + std::to_string(comm->world_size()) + ")";
  bn.set_training_function(
      [comm](const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
             const Tensor& bias, bool training, double momentum, double eps) {
        return sync_batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps, comm);
      },
      label);
}

}  // namespace

SyncBatchNorm::SyncBatchNorm(int64_t num_features, std::shared_ptr<Communicator> comm, nn::BatchNormOptions opt)
    : nn::BatchNorm2d(num_features, opt), comm_(std::move(comm)) {
  EMBER_CHECK(comm_ != nullptr, "SyncBatchNorm: no communicator");
  make_synchronized(*this, comm_);
}

int64_t convert_sync_batchnorm(nn::Module& root, std::shared_ptr<Communicator> comm) {
  EMBER_CHECK(comm != nullptr, "convert_sync_batchnorm: no communicator");
  int64_t converted = 0;
  for (auto& [name, m] : root.named_modules()) {
    if (dynamic_cast<SyncBatchNorm*>(m) != nullptr) continue;  // synchronized over its own communicator
    if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(m)) {
      make_synchronized(*bn, comm);
      ++converted;
    }
  }
  return converted;
}

}  // namespace ember::parallel
