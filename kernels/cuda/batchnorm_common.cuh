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

// One thread per channel: out[c] = (sum of the channel's partials, in slice order) / count; the
// acc_t<T> value also goes to mean_out when given (the mean for the second pass).
template <typename T, typename P>
__global__ void stats_finalize_kernel(int64_t channels, int64_t parts, acc_t<T> count, const acc_t<T>* partial,
                                      acc_t<T>* mean_out, P* out) {
  using A = acc_t<T>;
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < channels; c += int64_t{gridDim.x} * blockDim.x) {
    A sum = 0;
    for (int64_t p = 0; p < parts; ++p) sum += partial[c * parts + p];
    const A v = sum / count;
    if (mean_out) mean_out[c] = v;
    out[c] = static_cast<P>(v);
  }
}

// One thread per channel: the two sums in slice order -> grad_weight, grad_bias, sums (as the
// one-block backward_reduce_kernel writes them).
template <typename T, typename P>
__global__ void backward_finalize_kernel(int64_t channels, int64_t parts, const acc_t<T>* partial, P* gw, P* gb,
                                         acc_t<T>* sums) {
  using A = acc_t<T>;
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < channels; c += int64_t{gridDim.x} * blockDim.x) {
    A sg = 0, sgx = 0;
    for (int64_t p = 0; p < parts; ++p) {
      sg += partial[2 * (c * parts + p)];
      sgx += partial[2 * (c * parts + p) + 1];
    }
    if (gw) gw[c] = static_cast<P>(sgx);
    if (gb) gb[c] = static_cast<P>(sg);
    if (sums) {
      sums[c] = sg;
      sums[channels + c] = sgx;
    }
  }
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
void stats_channels_last(const BatchNormShape& sh, const T* x, P* mean, P* var);
template <typename T, typename P>
void apply_channels_last(const BatchNormShape& sh, const T* x, const P* mean, const P* invstd, const P* weight,
                         const P* bias, T* y, const T* residual);
template <typename T, typename P>
void backward_channels_last(const BatchNormShape& sh, bool training, const T* x, const T* gy, const T* mask,
                            const P* mean, const P* invstd, const P* weight, T* gx, P* gw, P* gb);
template <typename T>
void channel_sums_channels_last(const BatchNormShape& sh, const T* x, T* out);

// ---- declared costs (Note [Launch ledger] in core/cuda/ledger.h) -------------------------------
// Footprints of one launch: activations (x, grad_y, the ReLU mask y, residual, y, grad_x) of T, the
// per-channel vectors of P, the partials and sums of acc_t<T>. grad_y is counted whole under a fused
// ReLU, though masked_grad reads it only where y > 0. The pointers are given for their types and
// for which optional vectors are present.

inline double bn_elements(const BatchNormShape& sh) { return static_cast<double>(sh.n) * sh.c * sh.s; }

// stats_kernel: x (read by both passes, counted once) -> mean and var; a sum, then (x - m)^2 summed.
template <typename T, typename P>
inline cuda::Cost stats_cost(const BatchNormShape& sh, const T*, const P*) {
  return cuda::cost(bn_elements(sh) * sizeof(T), 2.0 * sh.c * sizeof(P), 4 * bn_elements(sh));
}

// stats_partial_kernel / stats_partial_cl_kernel: x, and the acc_t mean when centred -> c * parts partials.
template <typename T>
inline cuda::Cost stats_partial_cost(const BatchNormShape& sh, const T*, int64_t parts, bool centred) {
  using A = acc_t<T>;
  return cuda::cost(bn_elements(sh) * sizeof(T) + (centred ? static_cast<double>(sh.c) * sizeof(A) : 0.0),
                    static_cast<double>(sh.c) * parts * sizeof(A), (centred ? 3 : 1) * bn_elements(sh));
}

// stats_finalize_kernel: c * parts partials -> out (P), and the acc_t mean when wanted.
template <typename T, typename P>
inline cuda::Cost stats_finalize_cost(const BatchNormShape& sh, const T*, const P*, int64_t parts, bool mean_out) {
  using A = acc_t<T>;
  const double c = static_cast<double>(sh.c);
  return cuda::cost(c * parts * sizeof(A), c * (sizeof(P) + (mean_out ? sizeof(A) : 0)), c * (parts + 1));
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
inline cuda::Cost backward_sums_cost(const BatchNormShape& sh, const T* mask, const P*, double written) {
  const double acts = mask ? 3 : 2;  // x, grad_y (, the mask)
  return cuda::cost(bn_elements(sh) * acts * sizeof(T) + 2.0 * sh.c * sizeof(P), written, 5 * bn_elements(sh));
}

// The per-channel results of the backward's sums that are wanted: grad_weight, grad_bias (P) and
// the two acc_t<T> sums for the input gradient.
template <typename P, typename A>
double backward_outputs_bytes(const BatchNormShape& sh, const P* gw, const P* gb, const A* sums) {
  return static_cast<double>(sh.c) * ((gw ? sizeof(P) : 0) + (gb ? sizeof(P) : 0) + (sums ? 2 * sizeof(A) : 0));
}

// backward_finalize_kernel: 2 c parts partials -> the wanted outputs.
template <typename P, typename A>
inline cuda::Cost backward_finalize_cost(const BatchNormShape& sh, int64_t parts, const P* gw, const P* gb, const A* sums) {
  const double c = static_cast<double>(sh.c);
  return cuda::cost(2 * c * parts * sizeof(A), backward_outputs_bytes(sh, gw, gb, sums), 2 * c * parts);
}

// backward_input_kernel / backward_input_cl_kernel: x, grad_y (and the mask), mean, invstd (and
// weight, the acc_t sums) -> grad_x; xhat, then w * is * (g - mean_g - xhat * mean_gx) per element.
template <typename T, typename P, typename A>
inline cuda::Cost backward_input_cost(const BatchNormShape& sh, const T* mask, const P* weight, const A* sums) {
  const double c = static_cast<double>(sh.c);
  return cuda::cost(bn_elements(sh) * (mask ? 3 : 2) * sizeof(T) + c * (2 + (weight ? 1 : 0)) * sizeof(P) +
                        (sums ? 2 * c * sizeof(A) : 0.0),
                    bn_elements(sh) * sizeof(T), 7 * bn_elements(sh));
}

}  // namespace ember::kernels::gpu::batchnorm_detail
