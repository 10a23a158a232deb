// CPU classification losses: one sample (a line of C class scores) at a time, samples in
// parallel. The fused cross entropy computes log_softmax and the loss in one pass over the line
// and never materializes log-probabilities; its backward is softmax minus the (smoothed,
// weighted) one-hot target.

#include "loss.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "../../core/error.h"
#include "../../core/cpu/parallel.h"
#include "widen.h"

namespace ember::kernels::cpu {

namespace {

// Samples per parallel_for chunk: about 32K scores per chunk.
int64_t sample_grain(int64_t c) { return c > 0 ? (32768 + c - 1) / c : 32768; }

// Class weight c as double (1 without weights).
template <typename T>
double class_weight(const T* weight, int64_t c) {
  return weight ? static_cast<double>(weight[c]) : 1.0;
}

// Elements of grad_loss the backward reads: one per sample, grad_stride apart (stride 0: one
// value broadcast to every sample).
int64_t grad_loss_extent(const ClassLayout& layout, int64_t grad_stride) {
  const int64_t samples = layout.samples();
  return samples == 0 ? 0 : (samples - 1) * grad_stride + 1;
}

}  // namespace

int64_t find_invalid_target(const int64_t* target, int64_t count, int64_t num_classes, int64_t ignore_index) {
  bool ignored = false;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t t = target[i];
    if (t == ignore_index) {
      ignored = true;
    } else if (t < 0 || t >= num_classes) {
      return i;
    }
  }
  return ignored ? kTargetsValidSomeIgnored : kTargetsValid;
}

void cross_entropy_forward(DType dtype, const ClassLayout& layout, const void* logits, const int64_t* target,
                           const void* weight, int64_t ignore_index, double label_smoothing, double* loss,
                           double* target_weight, double* lse) {
  if (is_low_precision(dtype)) {  // Note [Low-precision CPU kernels through f32] in widen.h
    const Widened xf(dtype, logits, layout.samples() * layout.c), wf(dtype, weight, weight ? layout.c : 0);
    cross_entropy_forward(DType::f32, layout, xf.data(), target, widened_or_null(wf, weight), ignore_index,
                          label_smoothing, loss, target_weight, lse);
    return;
  }
  EMBER_DISPATCH_FLOAT(dtype, "cross_entropy", [&] {
    using T = scalar_t;
    const T* x = static_cast<const T*>(logits);
    const T* w = static_cast<const T*>(weight);
    const int64_t C = layout.c, S = layout.s;
    const double eps = label_smoothing;
    parallel_for(0, layout.samples(), sample_grain(C), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const T* line = x + (i / S) * C * S + i % S;  // logits[n, :, s], stride S
        // logsumexp, shifted by the max so that exp never overflows.
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t c = 0; c < C; ++c) m = std::max(m, static_cast<double>(line[c * S]));
        double s = 0;
        for (int64_t c = 0; c < C; ++c) s += std::exp(static_cast<double>(line[c * S]) - m);
        lse[i] = m + std::log(s);
        const int64_t t = target[i];
        if (t == ignore_index) {
          loss[i] = 0;
          target_weight[i] = 0;
          continue;
        }
        const double wt = class_weight(w, t);
        double l = -wt * (static_cast<double>(line[t * S]) - lse[i]);
        if (eps > 0) {
          double smooth = 0;  // -sum_c w[c] * logp[c]
          for (int64_t c = 0; c < C; ++c) smooth -= class_weight(w, c) * (static_cast<double>(line[c * S]) - lse[i]);
          l = (1 - eps) * l + eps / static_cast<double>(C) * smooth;
        }
        loss[i] = l;
        target_weight[i] = wt;
      }
    });
  });
}

void cross_entropy_backward(DType dtype, const ClassLayout& layout, void* grad_logits, const void* logits,
                            const int64_t* target, const void* weight, int64_t ignore_index, double label_smoothing,
                            const double* lse, const void* grad_loss, int64_t grad_stride, double grad_factor) {
  if (is_low_precision(dtype)) {  // Note [Low-precision CPU kernels through f32] in widen.h
    const int64_t total = layout.samples() * layout.c;
    const Widened xf(dtype, logits, total), wf(dtype, weight, weight ? layout.c : 0);
    const Widened glf(dtype, grad_loss, grad_loss_extent(layout, grad_stride));
    Widened gf(dtype, nullptr, total);
    cross_entropy_backward(DType::f32, layout, gf.data(), xf.data(), target, widened_or_null(wf, weight), ignore_index,
                           label_smoothing, lse, glf.data(), grad_stride, grad_factor);
    gf.store(grad_logits);
    return;
  }
  EMBER_DISPATCH_FLOAT(dtype, "cross_entropy backward", [&] {
    using T = scalar_t;
    T* gx = static_cast<T*>(grad_logits);
    const T* x = static_cast<const T*>(logits);
    const T* w = static_cast<const T*>(weight);
    const T* gl = static_cast<const T*>(grad_loss);
    const int64_t C = layout.c, S = layout.s;
    const double eps = label_smoothing;
    double w_total = 0;  // W = sum_c w[c]: the smoothing term's gradient is eps / C * (W p_c - w_c)
    for (int64_t c = 0; c < C; ++c) w_total += class_weight(w, c);
    parallel_for(0, layout.samples(), sample_grain(C), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t base = (i / S) * C * S + i % S;
        const int64_t t = target[i];
        if (t == ignore_index) {
          for (int64_t c = 0; c < C; ++c) gx[base + c * S] = T(0);
          continue;
        }
        const double scale = static_cast<double>(gl[i * grad_stride]) * grad_factor;
        const double wt = class_weight(w, t);
        for (int64_t c = 0; c < C; ++c) {
          const double p = std::exp(static_cast<double>(x[base + c * S]) - lse[i]);
          double g = (1 - eps) * wt * (p - (c == t ? 1.0 : 0.0));
          if (eps > 0) g += eps / static_cast<double>(C) * (w_total * p - class_weight(w, c));
          gx[base + c * S] = static_cast<T>(scale * g);
        }
      }
    });
  });
}

void nll_loss_forward(DType dtype, const ClassLayout& layout, const void* log_probs, const int64_t* target,
                      const void* weight, int64_t ignore_index, double* loss, double* target_weight) {
  if (is_low_precision(dtype)) {  // Note [Low-precision CPU kernels through f32] in widen.h
    const Widened xf(dtype, log_probs, layout.samples() * layout.c), wf(dtype, weight, weight ? layout.c : 0);
    nll_loss_forward(DType::f32, layout, xf.data(), target, widened_or_null(wf, weight), ignore_index, loss,
                     target_weight);
    return;
  }
  EMBER_DISPATCH_FLOAT(dtype, "nll_loss", [&] {
    using T = scalar_t;
    const T* x = static_cast<const T*>(log_probs);
    const T* w = static_cast<const T*>(weight);
    const int64_t C = layout.c, S = layout.s;
    // Reads one score per sample: the default grain is plenty.
    parallel_for(0, layout.samples(), 32768, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t t = target[i];
        if (t == ignore_index) {
          loss[i] = 0;
          target_weight[i] = 0;
          continue;
        }
        const double wt = class_weight(w, t);
        loss[i] = -wt * static_cast<double>(x[(i / S) * C * S + t * S + i % S]);
        target_weight[i] = wt;
      }
    });
  });
}

void nll_loss_backward(DType dtype, const ClassLayout& layout, void* grad_input, const int64_t* target,
                       const void* weight, int64_t ignore_index, const void* grad_loss, int64_t grad_stride,
                       double grad_factor) {
  if (is_low_precision(dtype)) {  // Note [Low-precision CPU kernels through f32] in widen.h
    const Widened wf(dtype, weight, weight ? layout.c : 0);
    const Widened glf(dtype, grad_loss, grad_loss_extent(layout, grad_stride));
    Widened gf(dtype, nullptr, layout.samples() * layout.c);
    nll_loss_backward(DType::f32, layout, gf.data(), target, widened_or_null(wf, weight), ignore_index, glf.data(),
                      grad_stride, grad_factor);
    gf.store(grad_input);
    return;
  }
  EMBER_DISPATCH_FLOAT(dtype, "nll_loss backward", [&] {
    using T = scalar_t;
    T* gx = static_cast<T*>(grad_input);
    const T* w = static_cast<const T*>(weight);
    const T* gl = static_cast<const T*>(grad_loss);
    const int64_t C = layout.c, S = layout.s;
    parallel_for(0, layout.samples(), sample_grain(C), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t base = (i / S) * C * S + i % S;
        for (int64_t c = 0; c < C; ++c) gx[base + c * S] = T(0);
        const int64_t t = target[i];
        if (t == ignore_index) continue;
        const double scale = static_cast<double>(gl[i * grad_stride]) * grad_factor;
        gx[base + t * S] = static_cast<T>(-class_weight(w, t) * scale);
      }
    });
  });
}

}  // namespace ember::kernels::cpu
