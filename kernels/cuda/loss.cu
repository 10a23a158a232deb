// CUDA classification losses (contracts in loss.h; the CPU reference is kernels/cpu/loss.cpp).
//
// Parallel decomposition:
//   cross_entropy_forward  one sample (a line of C logits, stride S) per group of G threads, as
//                          softmax: a warp or block per contiguous row when S == 1, a thread per
//                          sample when S > 1 (neighbouring samples are neighbours in memory).
//                          The group computes the logsumexp online (Note [Online logsumexp]),
//                          then lane 0 reads the target's logit; label smoothing adds one more
//                          group sum over the classes. Nothing but lse is kept for the backward.
//   cross_entropy_backward one thread per logit (N * C * S of them, fully parallel): each needs
//                          only its sample's lse, target and incoming gradient. W = sum of the
//                          class weights (for label smoothing) comes from a one-block kernel first.
//   nll_loss_forward       one thread per sample (it reads one score).
//   nll_loss_backward      one thread per score: -w[t] * scale at the target, 0 elsewhere.
//   find_invalid_target    one thread per target; atomicMin keeps the first bad position.
// Per-sample math is the CPU's formulas in acc_t<T> (float for f16/bf16/f32, double for f64: Note
// [Accumulation types] in core/dtype.h); the per-sample results (loss, target weight, lse) are
// stored in the contract's double buffers, where the CPU keeps its double values.

#include "launch.h"

#include "loss.h"

#include <cmath>
#include <cstdint>

#include "../../core/error.h"
#include "common.cuh"
#include "logsumexp.cuh"
#include "../../core/cuda/runtime.h"

namespace ember::kernels::gpu {

namespace {

using detail::grid_for;
using detail::group_sum;
using detail::kThreads;

template <typename T>
__device__ acc_t<T> class_weight(const T* weight, int64_t c) {
  return weight ? static_cast<acc_t<T>>(weight[c]) : acc_t<T>(1);
}

// answer[0]: the first bad position (atomicMin from all ones); answer[1]: 1 when a target is ignored.
__global__ void find_invalid_target_kernel(const int64_t* target, int64_t count, int64_t num_classes,
                                           int64_t ignore_index, unsigned long long* answer) {
  EMBER_THREAD_LOOP(i, count) {
    const int64_t t = target[i];
    if (t == ignore_index) {
      atomicExch(answer + 1, 1ULL);
    } else if (t < 0 || t >= num_classes) {
      atomicMin(answer, static_cast<unsigned long long>(i));
    }
  }
}

template <int G, typename T>
__global__ void cross_entropy_forward_kernel(int64_t samples, int64_t C, int64_t S, const T* logits,
                                             const int64_t* target, const T* weight, int64_t ignore_index, double eps,
                                             double* loss, double* target_weight, double* lse) {
  using A = acc_t<T>;
  EMBER_GROUP_LOOP(G, samples, i, lane) {
    const T* line = logits + (i / S) * C * S + i % S;  // logits[n, :, s], stride S
    const auto load = [line, S](int64_t c) { return static_cast<A>(line[c * S]); };
    const detail::MaxSum<A> ms = detail::line_max_sum<G, A>(C, lane, load);
    const A l_se = ms.m + std::log(ms.s);
    const int64_t t = target[i];
    if (t == ignore_index) {
      if (lane == 0) {
        lse[i] = l_se;
        loss[i] = 0;
        target_weight[i] = 0;
      }
      continue;
    }
    const A wt = class_weight(weight, t);
    A l = -wt * (load(t) - l_se);
    if (eps > 0) {
      A smooth = 0;  // -sum_c w[c] * logp[c]
      for (int64_t c = lane; c < C; c += G) smooth -= class_weight(weight, c) * (load(c) - l_se);
      smooth = group_sum<G>(smooth);
      l = (1 - static_cast<A>(eps)) * l + static_cast<A>(eps) / static_cast<A>(C) * smooth;
    }
    if (lane == 0) {
      lse[i] = l_se;
      loss[i] = l;
      target_weight[i] = wt;
    }
  }
}

// W = sum_c w[c], by one block.
template <typename T>
__global__ void weight_total_kernel(int64_t C, const T* weight, acc_t<T>* total) {
  acc_t<T> s = 0;
  for (int64_t c = threadIdx.x; c < C; c += kThreads) s += static_cast<acc_t<T>>(weight[c]);
  s = group_sum<kThreads>(s);
  if (threadIdx.x == 0) *total = s;
}

template <typename T>
__global__ void cross_entropy_backward_kernel(int64_t total, int64_t C, int64_t S, T* grad_logits, const T* logits,
                                              const int64_t* target, const T* weight, int64_t ignore_index,
                                              double eps, const double* lse, const T* grad_loss, int64_t grad_stride,
                                              double grad_factor, const acc_t<T>* w_total) {
  using A = acc_t<T>;
  const A e_s = static_cast<A>(eps);
  EMBER_THREAD_LOOP(e, total) {
    const int64_t c = (e / S) % C, i = (e / (C * S)) * S + e % S;
    const int64_t t = target[i];
    if (t == ignore_index) {
      grad_logits[e] = T(0);
      continue;
    }
    const A scale = static_cast<A>(grad_loss[i * grad_stride]) * static_cast<A>(grad_factor);
    const A wt = class_weight(weight, t);
    const A p = std::exp(static_cast<A>(logits[e]) - static_cast<A>(lse[i]));
    A g = (1 - e_s) * wt * (p - (c == t ? A(1) : A(0)));
    if (eps > 0) {
      const A W = w_total ? *w_total : static_cast<A>(C);
      g += e_s / static_cast<A>(C) * (W * p - class_weight(weight, c));
    }
    grad_logits[e] = static_cast<T>(scale * g);
  }
}

template <typename T>
__global__ void nll_loss_forward_kernel(int64_t samples, int64_t C, int64_t S, const T* log_probs,
                                        const int64_t* target, const T* weight, int64_t ignore_index, double* loss,
                                        double* target_weight) {
  EMBER_THREAD_LOOP(i, samples) {
    const int64_t t = target[i];
    if (t == ignore_index) {
      loss[i] = 0;
      target_weight[i] = 0;
      continue;
    }
    const acc_t<T> wt = class_weight(weight, t);
    loss[i] = -wt * static_cast<acc_t<T>>(log_probs[(i / S) * C * S + t * S + i % S]);
    target_weight[i] = wt;
  }
}

template <typename T>
__global__ void nll_loss_backward_kernel(int64_t total, int64_t C, int64_t S, T* grad_input, const int64_t* target,
                                         const T* weight, int64_t ignore_index, const T* grad_loss,
                                         int64_t grad_stride, double grad_factor) {
  EMBER_THREAD_LOOP(e, total) {
    const int64_t c = (e / S) % C, i = (e / (C * S)) * S + e % S;
    const int64_t t = target[i];
    if (t == ignore_index || c != t) {
      grad_input[e] = T(0);
      continue;
    }
    const acc_t<T> scale = static_cast<acc_t<T>>(grad_loss[i * grad_stride]) * static_cast<acc_t<T>>(grad_factor);
    grad_input[e] = static_cast<T>(-class_weight(weight, t) * scale);
  }
}

// The declared costs (Note [Launch ledger]). Forward: cross entropy reads every logit (nll_loss
// one log-probability per sample), the targets and the class weights, and writes the loss, the
// target weight and (cross entropy) the log-sum-exp per sample, as doubles.
cuda::Cost loss_forward_cost(int64_t samples, int64_t C, int64_t S, size_t elem, bool weighted, bool cross_entropy) {
  const double s = static_cast<double>(samples);
  // nll_loss gathers one log-probability per sample: a 32-byte sector each when the samples are
  // rows of at least that many bytes (S == 1), neighbours otherwise.
  const double gathered = S > 1 ? s * elem : s * std::min<double>(32, double(C) * elem);
  const double read = (cross_entropy ? s * C * elem : gathered) + s * sizeof(int64_t) + (weighted ? double(C) * elem : 0);
  return cuda::cost(read, s * sizeof(double) * (cross_entropy ? 3 : 2), cross_entropy ? 4 * s * C : s);
}
// Backward: cross entropy reads every logit, the targets, the log-sum-exps and the incoming
// gradient (one value when its stride is 0) and writes every logit's gradient; nll_loss reads no
// logits and no log-sum-exps.
cuda::Cost loss_backward_cost(const ClassLayout& layout, size_t elem, bool weighted, int64_t grad_stride,
                              bool cross_entropy) {
  const double s = static_cast<double>(layout.samples()), total = s * layout.c;
  double read = s * sizeof(int64_t) + (grad_stride == 0 ? 1 : s) * elem + (weighted ? double(layout.c) * elem : 0);
  if (cross_entropy) read += total * elem + s * sizeof(double);
  return cuda::cost(read, total * elem, cross_entropy ? 6 * total : s);
}

}  // namespace

int64_t find_invalid_target(const int64_t* target, int64_t count, int64_t num_classes, int64_t ignore_index) {
  if (count == 0) return kTargetsValid;
  const cudaStream_t stream = cuda::current_stream();
  cuda::Scratch answer(2 * sizeof(unsigned long long));
  // All-ones bytes = the largest unsigned value: "no invalid target yet" for atomicMin; then 0:
  // "no target ignored yet".
  cuda::memset_async(answer.get(), 0xFF, sizeof(unsigned long long), stream);
  cuda::memset_async(answer.as<unsigned long long>() + 1, 0, sizeof(unsigned long long), stream);
  // Declared: the targets read; the answer is written only for an invalid or ignored target.
  EMBER_LAUNCH_FLAT(find_invalid_target_kernel, grid_for(count, kThreads), kThreads, stream,
                    cuda::cost(double(count) * sizeof(int64_t), 0), target, count, num_classes, ignore_index,
                    answer.as<unsigned long long>());
  cuda::check_launch("find_invalid_target");
  // The answer is needed on the host (the caller throws on a bad target): copy it back and
  // wait for the stream. This is the one synchronization of the loss kernels.
  unsigned long long host[2] = {0, 0};
  cuda::read_to_host(host, answer.get(), sizeof(host), stream, "cross_entropy's target check");
  if (host[0] != ~0ULL) return static_cast<int64_t>(host[0]);
  return host[1] != 0 ? kTargetsValidSomeIgnored : kTargetsValid;
}

void cross_entropy_forward(DType dtype, const ClassLayout& layout, const void* logits, const int64_t* target,
                           const void* weight, int64_t ignore_index, double label_smoothing, double* loss,
                           double* target_weight, double* lse) {
  EMBER_DISPATCH_FLOATING(dtype, "cross_entropy", [&] {
    using T = scalar_t;
    const int64_t samples = layout.samples(), C = layout.c, S = layout.s;
    if (samples == 0) return;
    const int g = S > 1 || C <= 8 ? 1 : (C <= 1024 ? detail::kWarp : kThreads);
    detail::with_group(g, [&]<int G>() {
      EMBER_LAUNCH((cross_entropy_forward_kernel<G, T>), detail::grid_for_groups<G>(samples), kThreads, 0,
                   cuda::current_stream(), loss_forward_cost(samples, C, S, sizeof(T), weight != nullptr, true),
                   samples, C, S, static_cast<const T*>(logits), target,
                   static_cast<const T*>(weight), ignore_index, label_smoothing, loss, target_weight, lse);
    });
    cuda::check_launch("cross_entropy");
  });
}

void cross_entropy_backward(DType dtype, const ClassLayout& layout, void* grad_logits, const void* logits,
                            const int64_t* target, const void* weight, int64_t ignore_index, double label_smoothing,
                            const double* lse, const void* grad_loss, int64_t grad_stride, double grad_factor) {
  EMBER_DISPATCH_FLOATING(dtype, "cross_entropy backward", [&] {
    using T = scalar_t;
    const int64_t total = layout.samples() * layout.c;
    if (total == 0) return;
    const cudaStream_t stream = cuda::current_stream();
    const T* w = static_cast<const T*>(weight);
    // W = sum of the weights, needed only with label smoothing (without weights it is C).
    cuda::Scratch w_total(w && label_smoothing > 0 ? sizeof(acc_t<T>) : 0);
    if (w && label_smoothing > 0) {
      EMBER_LAUNCH((weight_total_kernel<T>), 1, kThreads, 0, stream,
                   cuda::cost(double(layout.c) * sizeof(T), sizeof(acc_t<T>), double(layout.c)), layout.c, w,
                   w_total.as<acc_t<T>>());
      cuda::check_launch("cross_entropy backward (weight total)");
    }
    EMBER_LAUNCH_FLAT((cross_entropy_backward_kernel<T>), grid_for(total, kThreads), kThreads, stream,
                      loss_backward_cost(layout, sizeof(T), w != nullptr, grad_stride, true), total, layout.c,
                      layout.s, static_cast<T*>(grad_logits), static_cast<const T*>(logits), target, w, ignore_index,
                      label_smoothing, lse, static_cast<const T*>(grad_loss), grad_stride, grad_factor,
                      w && label_smoothing > 0 ? w_total.as<const acc_t<T>>() : nullptr);
    cuda::check_launch("cross_entropy backward");
  });
}

void nll_loss_forward(DType dtype, const ClassLayout& layout, const void* log_probs, const int64_t* target,
                      const void* weight, int64_t ignore_index, double* loss, double* target_weight) {
  EMBER_DISPATCH_FLOATING(dtype, "nll_loss", [&] {
    using T = scalar_t;
    const int64_t samples = layout.samples();
    if (samples == 0) return;
    EMBER_LAUNCH_FLAT((nll_loss_forward_kernel<T>), grid_for(samples, kThreads), kThreads,
                      cuda::current_stream(), loss_forward_cost(samples, layout.c, layout.s, sizeof(T), weight != nullptr, false),
                      samples, layout.c, layout.s, static_cast<const T*>(log_probs),
                      target, static_cast<const T*>(weight), ignore_index, loss, target_weight);
    cuda::check_launch("nll_loss");
  });
}

void nll_loss_backward(DType dtype, const ClassLayout& layout, void* grad_input, const int64_t* target,
                       const void* weight, int64_t ignore_index, const void* grad_loss, int64_t grad_stride,
                       double grad_factor) {
  EMBER_DISPATCH_FLOATING(dtype, "nll_loss backward", [&] {
    using T = scalar_t;
    const int64_t total = layout.samples() * layout.c;
    if (total == 0) return;
    EMBER_LAUNCH_FLAT((nll_loss_backward_kernel<T>), grid_for(total, kThreads), kThreads,
                      cuda::current_stream(),
                      loss_backward_cost(layout, sizeof(T), weight != nullptr, grad_stride, false), total, layout.c,
                      layout.s, static_cast<T*>(grad_input), target,
                      static_cast<const T*>(weight), ignore_index, static_cast<const T*>(grad_loss), grad_stride,
                      grad_factor);
    cuda::check_launch("nll_loss backward");
  });
}

}  // namespace ember::kernels::gpu
