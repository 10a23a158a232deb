#pragma once
// What the two halves of the CUDA batch norm share (private to kernels/cuda): batchnorm.cu holds
// the (N, C, S) kernels and the entry points, batchnorm_channels_last.cu the (N, S, C) kernels
// (Note [Channels-last batch norm]); both write their per-channel partial sums in one layout and
// add them up with the finalize kernels below (Note [Split channel reductions] in batchnorm.cu).

#include <cstdint>

#include "../../core/cuda/ledger.h"
#include "../../core/dtype.h"
#include "../../core/error.h"
#include "batchnorm.h"

namespace ember::kernels::gpu::batchnorm_detail {

constexpr int kThreads = 256;

// Elements [lo, hi) of a channel's count are slice `part` of `parts`.
__device__ inline void channel_slice(int64_t count, int64_t part, int64_t parts, int64_t* lo, int64_t* hi) {
  *lo = count * part / parts;
  *hi = count * (part + 1) / parts;
}

// Slices per channel: enough blocks in all to give every SM about four, but at least
// kMinPerBlock elements per block (fewer and the partials cost more than they save).
constexpr int64_t kMinPerBlock = int64_t{kThreads} * 16;

// The channel's first element, the shift of Note [One-pass batch norm statistics]: x[c * stride]
// (stride s in (N, C, S) order, 1 channels-last), or 0 for an empty channel.
template <typename T>
__device__ inline acc_t<T> channel_shift(const T* x, int64_t c, int64_t stride, int64_t count) {
  return count > 0 ? static_cast<acc_t<T>>(x[c * stride]) : acc_t<T>(0);
}

// A channel's mean and biased variance from its shifted sums s1 = sum(x - k), s2 = sum((x - k)^2)
// over `count` elements (Note [One-pass batch norm statistics]), then the outputs `out` asks for.
template <typename T, typename P>
__device__ inline void finish_shifted(const BatchNormStats& out, int64_t c, acc_t<T> k, acc_t<T> s1, acc_t<T> s2,
                                      acc_t<T> count) {
  using A = acc_t<T>;
  const A d = s1 / count;  // mean - k; 0 / 0 = NaN statistics for an empty channel, as on the CPU
  const A var = s2 / count - d * d;
  finish_channel_stats<A, P>(out, c, k + d, var < A(0) ? A(0) : var, count);  // NaN stays NaN
}

// One thread per channel: the channel's two sums, its partials added in slice order, finished as
// `out` asks. x is read for the shifts only.
template <typename T, typename P>
__global__ void stats_finalize_kernel(int64_t channels, int64_t parts, int64_t count, const acc_t<T>* partial,
                                      const T* x, int64_t stride, BatchNormStats out) {
  using A = acc_t<T>;
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < channels; c += int64_t{gridDim.x} * blockDim.x) {
    A s1 = 0, s2 = 0;
    for (int64_t p = 0; p < parts; ++p) {
      s1 += partial[2 * (c * parts + p)];
      s2 += partial[2 * (c * parts + p) + 1];
    }
    finish_shifted<T, P>(out, c, channel_shift(x, c, stride, count), s1, s2, static_cast<A>(count));
  }
}

// One thread per channel: the two sums of the split layout (partial[2 (c * parts + p) + {0, 1}]),
// added in slice order -> first and second (P, each optional) and sums (2 C acc_t<T>: all firsts,
// then all seconds). The backward's sum(grad_y) and sum(grad_y * xhat); channel_sums' sums.
template <typename T, typename P>
__global__ void finalize_sums_kernel(int64_t channels, int64_t parts, const acc_t<T>* partial, P* second, P* first,
                                     acc_t<T>* sums) {
  using A = acc_t<T>;
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < channels; c += int64_t{gridDim.x} * blockDim.x) {
    A sg = 0, sgx = 0;
    for (int64_t p = 0; p < parts; ++p) {
      sg += partial[2 * (c * parts + p)];
      sgx += partial[2 * (c * parts + p) + 1];
    }
    if (second) second[c] = static_cast<P>(sgx);
    if (first) first[c] = static_cast<P>(sg);
    if (sums) {
      sums[c] = sg;
      sums[channels + c] = sgx;
    }
  }
}

// The fused ReLU's mask as the backward reads it (Note [Batch norm with a fused ReLU], Note [The
// ReLU mask recomputed from x] in kernels/batchnorm.h): from y when y is given, recomputed from x
// with apply's scale and shift when `recompute`, else no mask.
template <typename T, typename P>
struct ReluMask {
  const T* y = nullptr;
  bool recompute = false;
  const P* weight = nullptr;  // apply's scale and shift, for recompute
  const P* bias = nullptr;
  T* masked_out = nullptr;    // the reduction pass writes grad_y read through the mask here

  // What the input pass reads after the reduction pass: the masked grad_y it wrote, unmasked, or
  // `gy` through this mask.
  ReluMask for_input() const { return masked_out ? ReluMask{} : *this; }
  const T* input_grad(const T* gy) const { return masked_out ? masked_out : gy; }
};

// One channel's view of a ReluMask: grad(grad_y, y, i, x_i) is grad_y[i] as the batch norm sees it.
template <typename T>
struct ChannelMask {
  using A = acc_t<T>;
  bool recompute = false;
  A m = 0, scale = 0, shift = 0;
  __device__ A grad(const T* gy, const T* y, int64_t i, A xv) const {
    if (recompute) return relu_passes<T>(batch_norm_affine(xv, m, scale, shift)) ? static_cast<A>(gy[i]) : A(0);
    return masked_grad(gy, y, i);
  }
};

// Channel c's mask, from its mean m and invstd `is` as the backward reads them: scale = is * weight,
// the product apply forms.
template <typename T, typename P>
__device__ inline ChannelMask<T> channel_mask(const ReluMask<T, P>& mask, int64_t c, acc_t<T> m, acc_t<T> is) {
  using A = acc_t<T>;
  ChannelMask<T> cm;
  cm.recompute = mask.recompute;
  if (mask.recompute) {
    cm.m = m;
    cm.scale = is * (mask.weight ? static_cast<A>(mask.weight[c]) : A(1));
    cm.shift = mask.bias ? static_cast<A>(mask.bias[c]) : A(0);
  }
  return cm;
}

inline void check_shape(const char* op, const BatchNormShape& sh) {
  EMBER_CHECK(sh.n >= 0 && sh.c >= 0 && sh.s >= 0, op, ": negative size (n=", sh.n, " c=", sh.c, " s=", sh.s, ")");
  EMBER_CHECK(sh.c <= 2147483647, op, ": ", sh.c, " channels do not fit one grid");
}

// The channels-last halves of batch_norm_stats, _apply, _backward and channel_sums (T: the
// activations' dtype, P: the per-channel vectors'), after the entry points' checks: sh.c > 0 and
// sh.channels_last; apply: n * c * s > 0 and residual null unless sh.relu; backward: mask is y
// under a fused ReLU, else null. Instantiated in batchnorm_channels_last.cu for the dtype pairs of
// dispatch_batch_norm (kernels/batchnorm.h).
template <typename T, typename P>
void stats_channels_last(const BatchNormShape& sh, const T* x, const BatchNormStats& out);
template <typename T, typename P>
void apply_channels_last(const BatchNormShape& sh, const T* x, const P* mean, const P* invstd, const P* weight,
                         const P* bias, T* y, const T* residual);
template <typename T, typename P>
void backward_channels_last(const BatchNormShape& sh, bool training, const T* x, const T* gy,
                            const ReluMask<T, P>& mask, const P* mean, const P* invstd, const P* weight, T* gx, P* gw,
                            P* gb);
template <typename T>
void channel_sums_channels_last(const BatchNormShape& sh, const T* x, T* out);

// ---- declared costs (Note [Launch ledger] in core/cuda/ledger.h) -------------------------------
// Footprints of one launch: activations (x, grad_y, the ReLU mask y, residual, y, grad_x) of T, the
// per-channel vectors of P, the partials and sums of acc_t<T>. grad_y is counted whole under a fused
// ReLU, though masked_grad reads it only where y > 0. The pointers are given for their types and
// for which optional vectors are present.

inline double bn_elements(const BatchNormShape& sh) { return static_cast<double>(sh.n) * sh.c * sh.s; }

// The per-channel vectors batch_norm_stats reads and writes, in bytes: the running statistics
// (read and written), the wanted outputs and the batch counter.
template <typename P>
inline double stats_outputs_bytes(const BatchNormShape& sh, const BatchNormStats& out, bool written) {
  const double c = static_cast<double>(sh.c) * sizeof(P);
  const double running = out.running_mean ? 2 * c : 0.0, counter = out.batches_tracked ? 8.0 : 0.0;
  if (!written) return running + counter;
  return c * (1 + (out.var ? 1 : 0) + (out.invstd ? 1 : 0)) + running + counter;
}

// stats_kernel: x -> the wanted outputs in one block per channel; the shifted sums (a subtract and
// two multiply-adds per element).
template <typename T, typename P>
inline cuda::Cost stats_cost(const BatchNormShape& sh, const T*, const P*, const BatchNormStats& out) {
  return cuda::cost(bn_elements(sh) * sizeof(T) + stats_outputs_bytes<P>(sh, out, false),
                    stats_outputs_bytes<P>(sh, out, true), 3 * bn_elements(sh));
}

// stats_partial_kernel / stats_partial_cl_kernel: x -> 2 c parts partial sums of acc_t<T>.
template <typename T>
inline cuda::Cost stats_partial_cost(const BatchNormShape& sh, const T*, int64_t parts, bool moments) {
  using A = acc_t<T>;
  return cuda::cost(bn_elements(sh) * sizeof(T), 2.0 * sh.c * parts * sizeof(A), (moments ? 3 : 1) * bn_elements(sh));
}

// stats_finalize_kernel: 2 c parts partials and the c shifts -> the wanted outputs.
template <typename T, typename P>
inline cuda::Cost stats_finalize_cost(const BatchNormShape& sh, const T*, const P*, int64_t parts,
                                      const BatchNormStats& out) {
  using A = acc_t<T>;
  const double c = static_cast<double>(sh.c);
  return cuda::cost(2 * c * parts * sizeof(A) + c * sizeof(T) + stats_outputs_bytes<P>(sh, out, false),
                    stats_outputs_bytes<P>(sh, out, true), c * (2 * parts + 12));
}

// apply_kernel / apply_cl_kernel: x (and residual), mean, invstd (and weight, bias) -> y;
// (x - m) * scale + shift per element, and the residual's add.
template <typename T, typename P>
inline cuda::Cost apply_cost(const BatchNormShape& sh, const T* residual, const P* weight, const P* bias) {
  const double vectors = 2 + (weight ? 1 : 0) + (bias ? 1 : 0), acts = residual ? 2 : 1;
  return cuda::cost(bn_elements(sh) * acts * sizeof(T) + vectors * sh.c * sizeof(P), bn_elements(sh) * sizeof(T),
                    bn_elements(sh) * (residual ? 4 : 3));
}

// backward_reduce_kernel / backward_partial(_cl)_kernel: x, grad_y (and the mask), mean, invstd ->
// `written` bytes of sums; sum(g) and sum(g (x - m) invstd) per element.
template <typename T, typename P>
inline cuda::Cost backward_sums_cost(const BatchNormShape& sh, const ReluMask<T, P>& mask, double written) {
  const double acts = mask.y ? 3 : 2;                       // x, grad_y (, the mask y)
  written += mask.masked_out ? bn_elements(sh) * sizeof(T) : 0.0;  // (the masked grad_y)
  // mean and invstd (and apply's weight and bias, to recompute the mask)
  const double vectors = 2 + (mask.recompute && mask.weight ? 1 : 0) + (mask.recompute && mask.bias ? 1 : 0);
  const double per_element = mask.recompute ? 8 : 5;       // (and apply's affine map and the test)
  return cuda::cost(bn_elements(sh) * acts * sizeof(T) + vectors * sh.c * sizeof(P), written,
                    per_element * bn_elements(sh));
}

// The per-channel results of the backward's sums that are wanted: grad_weight, grad_bias (P) and
// the two acc_t<T> sums for the input gradient.
template <typename P, typename A>
double backward_outputs_bytes(const BatchNormShape& sh, const P* gw, const P* gb, const A* sums) {
  return static_cast<double>(sh.c) * ((gw ? sizeof(P) : 0) + (gb ? sizeof(P) : 0) + (sums ? 2 * sizeof(A) : 0));
}

// finalize_sums_kernel: 2 c parts partials -> the wanted outputs.
template <typename P, typename A>
inline cuda::Cost finalize_sums_cost(const BatchNormShape& sh, int64_t parts, const P* gw, const P* gb, const A* sums) {
  const double c = static_cast<double>(sh.c);
  return cuda::cost(2 * c * parts * sizeof(A), backward_outputs_bytes(sh, gw, gb, sums), 2 * c * parts);
}

// backward_input_kernel / backward_input_cl_kernel: x, grad_y (and the mask), mean, invstd (and
// weight, the acc_t sums) -> grad_x; xhat, then w * is * (g - mean_g - xhat * mean_gx) per element.
template <typename T, typename P, typename A>
inline cuda::Cost backward_input_cost(const BatchNormShape& sh, const ReluMask<T, P>& mask, const P* weight,
                                      const A* sums) {
  const double c = static_cast<double>(sh.c);
  const double vectors = 2 + (weight ? 1 : 0) + (mask.recompute && mask.bias ? 1 : 0);
  return cuda::cost(bn_elements(sh) * (mask.y ? 3 : 2) * sizeof(T) + c * vectors * sizeof(P) +
                        (sums ? 2 * c * sizeof(A) : 0.0),
                    bn_elements(sh) * sizeof(T), (mask.recompute ? 10 : 7) * bn_elements(sh));
}

}  // namespace ember::kernels::gpu::batchnorm_detail
