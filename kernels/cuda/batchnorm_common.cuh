#pragma once
// What the two halves of the CUDA batch norm share (private to kernels/cuda): batchnorm.cu holds
// the (N, C, S) kernels and the entry points, batchnorm_channels_last.cu the (N, S, C) kernels
// (Note [Channels-last batch norm]); both write their per-channel partial sums in one layout and
// add them up with the finalize kernels below (Note [Split channel reductions] in batchnorm.cu).

#include <cstdint>

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

}  // namespace ember::kernels::gpu::batchnorm_detail
