#pragma once
// Optimizer update math written once: the per-element Adam/AdamW and SGD steps as EMBER_HD
// functions, shared by the CPU loop (kernels/cpu/optim.cpp) and the CUDA kernels
// (kernels/cuda/optim.cu), and the contract of the fused steps both backends declare
// (kernels/cpu/optim.h, kernels/cuda/optim.h):
//   adam_step(dtype, n, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, h)
//       Adam / AdamW (h.decay picks L2 or decoupled weight decay); max_exp_avg_sq is used, and
//       must be non-null, only when h.amsgrad
//   sgd_step(dtype, n, param, grad, momentum_buffer, init_buffer, h)
//       SGD; momentum_buffer is used, and must be non-null, only when h.momentum != 0; with
//       init_buffer it is written (buf = d_p, torch's first step) instead of read
//   grad_norm(dtype, n, grad, p, norm)
//       one gradient's p-norm as torch.linalg.vector_norm returns it, rounded to dtype: sum |g|^p
//       accumulated in cpu_acc_t (CPU) or acc_t (CUDA) (p == 2 uses g * g), its p-th root taken in
//       double (grad_norm_from_partial below); max |g| for p = inf (NaN if any element is NaN).
//       Written to *norm, one double in the kernel's memory: no host read, so a graph can capture it
//   clip_coefficient(norms, count, p, norm_dtype, max_norm, total_and_coef)
//       clip_grad_norm_'s total norm and coefficient (clip_total_and_coefficient below) from the
//       `count` per-gradient norms at `norms` (doubles in the kernel's memory, in parameter order):
//       total_and_coef[0] = the total, total_and_coef[1] = the coefficient (both doubles there)
//   scale_grads(dtype, tensors, count, coef)
//       every element of every listed gradient (UnscaleTensor records) times T(*coef) in place, in
//       one call; nothing at all when *coef == 1 (g * 1 is g: the same bits, without the pass).
//       coef: one double in the kernel's memory
//   non_finite_check_and_unscale(dtype, tensors, count, found_inf, inv_scale)
//       loss scaling (Note [Loss scaling] in optim/grad_scaler.h): every element of every listed
//       gradient is multiplied by *inv_scale in place, and *found_inf is set to 1 when any
//       element was inf or NaN (it is never cleared here). One call covers the whole list; the
//       records are host memory, found_inf and inv_scale are single floats in the kernel's memory
//   update_scale(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval)
//       the scale's next value (amp_update_scale below), read and written where it lives: a host
//       float and int32 for kernels::cpu, device memory for kernels::gpu (no host sync)
// AdamHyper::skip and SgdHyper::skip (torch's found_inf of its fused optimizers): null, or one
// float in the kernel's memory, read when the update runs; nonzero makes the call change nothing
// (no parameter, no state array). A step can then be cancelled by a flag computed on the device,
// with no host read (Note [Divergence guard] in train/step_guard.h).
// Every array holds n contiguous elements of `dtype` (float32 or float64), all of the same dtype;
// param and the state arrays are read and overwritten in place, grad is only read; no array may
// alias another. Pointers are host memory for kernels::cpu, device memory of the current device
// for kernels::gpu (queued on cuda::current_stream()). Both backends compile this math without
// floating-point contraction, so a step is bit-identical on CPU and GPU.
//
// Note [Matching torch.optim bit for bit]
// torch.optim's single-tensor Adam and SGD are chains of tensor ops; every op rounds its result
// to the parameter's dtype, and every Python-float hyperparameter is computed in double and then
// cast to the dtype by the op that consumes it. The fused update below performs the same
// operations, in the same order, with the same roundings, on one element at a time:
//
//   Adam (PyTorch >= 2.1 _single_tensor_adam)     here, per element, in T (float or double)
//   grad = -grad                     (maximize)    g = -g
//   param.mul_(1 - lr * wd)          (AdamW)       p = p * T(1 - lr*wd)
//   grad = grad.add(param, alpha=wd) (Adam, wd≠0)  g = g + T(wd) * p
//   exp_avg.lerp_(grad, 1 - beta1)                 m = lerp(m, g, T(1 - beta1))
//   exp_avg_sq.mul_(beta2)                         v = v * T(beta2)
//     .addcmul_(grad, grad, value=1 - beta2)       v = v + T(1 - beta2) * g * g
//   torch.maximum(vmax, v, out=vmax)  (amsgrad)    vmax = max(vmax, v)   (NaN propagates)
//   denom = (v.sqrt() / sqrt(bc2)).add_(eps)       d = sqrt(v) / T(sqrt(1 - beta2^t)) + T(eps)
//   param.addcdiv_(exp_avg, denom, value=-ss)      p = p + T(-lr / (1 - beta1^t)) * m / d
//
// with lerp(a, b, w) = |w| < 0.5 ? a + w * (b - a) : b - (b - a) * (1 - w), ATen's formula.
// Each of those is what ATen's scalar CPU loop computes. ATen's vectorized (AVX2/AVX-512) loop
// fuses two of them into FMAs (add with alpha, lerp), so on long tensors PyTorch itself can
// differ from its own scalar path in the last bit; ember follows the scalar path everywhere.
// kernels/cpu/optim.cpp is compiled with contraction off so that the compiler cannot fuse
// them either. 1.13's mul_(beta1).add_(grad, alpha=1 - beta1) differs from lerp by rounding only.

#include <cmath>
#include <cstdint>

#include "../core/dtype.h"  // EMBER_HD

namespace ember::kernels {

// How weight decay enters the update.
enum class WeightDecayMode {
  None,       // weight_decay == 0 for Adam/SGD: the gradient is used as is
  L2,         // Adam, SGD: grad += weight_decay * param
  Decoupled,  // AdamW: param *= 1 - lr * weight_decay before the Adam update
};

// One Adam step's hyperparameters as torch.optim holds them (Python floats, i.e. double).
// `step` is the step count after this step's increment (1 on the first step).
struct AdamHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  int64_t step = 1;
  WeightDecayMode decay = WeightDecayMode::None;
  bool amsgrad = false;
  bool maximize = false;
  const float* skip = nullptr;  // see the contract above
};

// The per-step scalars, computed in double exactly as torch.optim does, then cast to T where the
// consuming ATen op casts them (see the Note).
template <typename T>
struct AdamCoeffs {
  T grad_sign;              // -1 with maximize, else 1 (g * -1 == -g exactly)
  T decay_factor;           // AdamW: 1 - lr * weight_decay
  T weight_decay;           // Adam L2
  T lerp_weight;            // w = 1 - beta1
  bool lerp_from_start;     // |w| < 0.5: lerp = m + w (g - m), else g + (w - 1) (g - m)
  T lerp_coeff;             // w or w - 1
  T beta2;
  T one_minus_beta2;
  T bias_correction2_sqrt;  // sqrt(1 - beta2^t)
  T eps;
  T neg_step_size;          // -lr / (1 - beta1^t)
  const float* skip;        // AdamHyper::skip
};

// Also compiled for the device: a replayed step whose count of cancelled steps lives there
// computes its coefficients in a kernel (Note [Steps cancelled on the device] in
// optim/optimizer.h).
template <typename T>
EMBER_HD inline AdamCoeffs<T> make_adam_coeffs(const AdamHyper& h) {
  const double step = static_cast<double>(h.step);
  const double bias_correction1 = 1 - std::pow(h.beta1, step);
  const double bias_correction2 = 1 - std::pow(h.beta2, step);
  const double step_size = h.lr / bias_correction1;
  AdamCoeffs<T> c;
  c.grad_sign = h.maximize ? T(-1) : T(1);
  c.decay_factor = static_cast<T>(1 - h.lr * h.weight_decay);
  c.weight_decay = static_cast<T>(h.weight_decay);
  c.lerp_weight = static_cast<T>(1 - h.beta1);
  c.lerp_from_start = c.lerp_weight < T(0.5) && c.lerp_weight > T(-0.5);
  c.lerp_coeff = c.lerp_from_start ? c.lerp_weight : c.lerp_weight - T(1);
  c.beta2 = static_cast<T>(h.beta2);
  c.one_minus_beta2 = static_cast<T>(1 - h.beta2);
  c.bias_correction2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
  c.eps = static_cast<T>(h.eps);
  c.neg_step_size = static_cast<T>(-step_size);
  c.skip = h.skip;
  return c;
}

// Whether an update with this skip flag (AdamHyper::skip, SgdHyper::skip) is cancelled.
EMBER_HD inline bool step_skipped(const float* skip) { return skip != nullptr && *skip != 0.0f; }

// ATen's lerp: the branch keeps the result exact at both ends (w = 0 gives a, w = 1 gives b).
template <typename T>
EMBER_HD inline T lerp(T a, T b, T w) {
  return (w < T(0.5) && w > T(-0.5)) ? a + w * (b - a) : b - (b - a) * (T(1) - w);
}

// The same lerp with the branch on w taken once per step: b - (b - a) (1 - w) equals
// b + (w - 1) (b - a) bit for bit (negation is exact), so both branches are base + coeff (b - a)
// and the per-element loop has no control flow (it vectorizes).
template <typename T>
EMBER_HD inline T lerp_hoisted(T a, T b, bool from_start, T coeff) {
  const T base = from_start ? a : b;
  return base + coeff * (b - a);
}

// torch.maximum: NaN in either operand gives NaN. `|`, not `||`: no branch in the loop.
template <typename T>
EMBER_HD inline T nan_maximum(T a, T b) {
  const bool take_a = (a != a) | (a > b);
  return take_a ? a : b;
}

// One element of Adam/AdamW. p, m, v (and vmax when Amsgrad) are read and overwritten; g is the
// raw gradient. Decay and Amsgrad are template parameters so that the CPU loop has no branches.
template <WeightDecayMode Decay, bool Amsgrad, typename T>
EMBER_HD inline void adam_update(T& p, T g, T& m, T& v, T* vmax, const AdamCoeffs<T>& c) {
  g = g * c.grad_sign;
  if constexpr (Decay == WeightDecayMode::Decoupled) p = p * c.decay_factor;
  if constexpr (Decay == WeightDecayMode::L2) g = g + c.weight_decay * p;
  m = lerp_hoisted(m, g, c.lerp_from_start, c.lerp_coeff);  // = lerp(m, g, c.lerp_weight)
  v = v * c.beta2;
  v = v + c.one_minus_beta2 * g * g;  // addcmul: self + (value * t1) * t2
  T second = v;
  if constexpr (Amsgrad) {
    *vmax = nan_maximum(*vmax, v);
    second = *vmax;
  }
  const T denom = std::sqrt(second) / c.bias_correction2_sqrt + c.eps;
  p = p + c.neg_step_size * m / denom;  // addcdiv: self + (value * t1) / t2
}

// One SGD step's hyperparameters (torch.optim.SGD, single-tensor).
struct SgdHyper {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
  const float* skip = nullptr;  // see the contract at the top
};

template <typename T>
struct SgdCoeffs {
  T grad_sign;  // -1 with maximize
  T weight_decay;
  T momentum;
  T one_minus_dampening;
  T neg_lr;
  const float* skip;  // SgdHyper::skip
};

template <typename T>
inline SgdCoeffs<T> make_sgd_coeffs(const SgdHyper& h) {
  return {h.maximize ? T(-1) : T(1), static_cast<T>(h.weight_decay), static_cast<T>(h.momentum),
          static_cast<T>(1 - h.dampening), static_cast<T>(-h.lr), h.skip};
}

// One element of SGD, following torch.optim.SGD:
//   d_p = -grad if maximize;  d_p = d_p + wd * param            (wd != 0)
//   buf = d_p on the first step, else buf = buf * momentum + (1 - dampening) * d_p
//   d_p = nesterov ? d_p + momentum * buf : buf                   (momentum != 0)
//   param = param + (-lr) * d_p
// `buf` is null when momentum == 0; First says the buffer does not exist yet.
template <bool L2, bool Momentum, bool Nesterov, bool First, typename T>
EMBER_HD inline void sgd_update(T& p, T g, T* buf, const SgdCoeffs<T>& c) {
  T d = g * c.grad_sign;
  if constexpr (L2) d = d + c.weight_decay * p;
  if constexpr (Momentum) {
    if constexpr (First) {
      *buf = d;
    } else {
      *buf = *buf * c.momentum;
      *buf = *buf + c.one_minus_dampening * d;
    }
    if constexpr (Nesterov) {
      d = d + c.momentum * *buf;
    } else {
      d = *buf;
    }
  }
  p = p + c.neg_lr * d;
}

// ---- gradient clipping (optim/clip.h) ----------------------------------------------------------

// A value rounded to the dtype a 0-dim PyTorch tensor of the gradients' dtype would hold it in:
// float32 (f32) or float64.
EMBER_HD inline double round_to_norm_dtype(bool f32, double x) { return f32 ? static_cast<double>(static_cast<float>(x)) : x; }

// One gradient's norm from grad_norm's accumulated sum (or max, for p = inf), rounded to T.
template <typename T>
EMBER_HD inline double grad_norm_from_partial(double partial, double p, bool p_is_inf) {
  if (p_is_inf) return static_cast<double>(static_cast<T>(partial));
  return static_cast<double>(static_cast<T>(p == 2 ? std::sqrt(partial) : std::pow(partial, 1.0 / p)));
}

// torch.nn.utils.clip_grad_norm_ after the per-gradient norms: the total is the p-norm of the
// norms (their max for p = inf, NaN kept), rounded to the norms' dtype (float64 when any gradient
// is, else float32: torch.stack promotes); the coefficient is min(max_norm / (total + 1e-6), 1) in
// that dtype, where PyTorch's Python-float / tensor is tensor.reciprocal() * float (two roundings).
// The sums are taken in double, in parameter order, as the host loop of earlier versions did.
EMBER_HD inline void clip_total_and_coefficient(const double* norms, int64_t count, double p, bool p_is_inf, bool f32,
                                                double max_norm, double* total, double* coef) {
  double t = 0;
  if (p_is_inf) {
    for (int64_t i = 0; i < count; ++i) t = (norms[i] != norms[i] || norms[i] > t) ? norms[i] : t;
  } else {
    double sum = 0;
    for (int64_t i = 0; i < count; ++i) sum += p == 2 ? norms[i] * norms[i] : std::pow(norms[i], p);
    t = round_to_norm_dtype(f32, p == 2 ? std::sqrt(sum) : std::pow(sum, 1.0 / p));
  }
  *total = t;
  if (f32) {
    const float c = (1.0f / (static_cast<float>(t) + static_cast<float>(1e-6))) * static_cast<float>(max_norm);
    *coef = (1.0f < c) ? 1.0f : c;  // min(c, 1); NaN stays NaN
  } else {
    const double c = (1.0 / (t + 1e-6)) * max_norm;
    *coef = (1.0 < c) ? 1.0 : c;
  }
}

// ---- loss scaling (optim/grad_scaler.h) -----------------------------------------------------------

// One gradient of a non_finite_check_and_unscale or scale_grads list: n contiguous elements of the
// call's dtype.
struct UnscaleTensor {
  void* grad = nullptr;
  int64_t n = 0;
};

// One element of torch's _amp_foreach_non_finite_check_and_unscale_: the finiteness test on the
// value as stored, then the product in the gradient's own precision (a float32 gradient times the
// float32 inverse scale; a float64 one times it widened). An inverse scale of exactly 1 leaves
// the value untouched, as ATen does.
template <typename T>
EMBER_HD inline T unscale_element(T g, float inv_scale, bool& non_finite) {
  non_finite = !(g - g == T(0));  // false for inf and NaN alone: inf - inf and NaN - NaN are NaN
  return inv_scale == 1.0f ? g : g * static_cast<T>(inv_scale);
}

// torch's _amp_update_scale_: after a step with an inf/NaN gradient the scale backs off and the
// count of clean steps restarts; after growth_interval clean steps in a row it grows, unless the
// grown scale would be inf. The products are taken in double and rounded to float, as in ATen.
EMBER_HD inline void amp_update_scale(float& scale, int32_t& growth_tracker, float found_inf, double growth_factor,
                                      double backoff_factor, int64_t growth_interval) {
  if (found_inf != 0.0f) {
    scale = static_cast<float>(static_cast<double>(scale) * backoff_factor);
    growth_tracker = 0;
    return;
  }
  const int64_t successful = int64_t{growth_tracker} + 1;
  if (successful == growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(scale) * growth_factor);
    if (grown - grown == 0.0f) scale = grown;  // finite
    growth_tracker = 0;
  } else {
    growth_tracker = static_cast<int32_t>(successful);
  }
}

}  // namespace ember::kernels
