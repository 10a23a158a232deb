// Batch normalization on a CUDA device: per-channel block reductions and elementwise passes.
//
// Decomposition. A per-channel reduction (statistics; the two sums of the backward) is one block
// per channel: channel c's n * s values lie in n rows of s contiguous elements, (i * C + c) * s
// apart. The block's 256 threads walk them with a block stride over the flattened index
// i * s + j, so for s >= 32 a warp reads 32 consecutive elements of one row (coalesced); each
// thread accumulates in double, then block_reduce (warp shuffles + one shared slot per warp)
// combines the 256 partial sums. Two-pass variance: the block first reduces the sum, every thread
// gets the mean, then the block reduces the squared deviations. The elementwise passes (apply,
// grad_x) are one thread per element with a grid-stride loop.
//
// Limits worth knowing: with few channels and large n * s (C = 64 at 112 x 112 x 32) one block
// per channel leaves most of an H200's 132 SMs idle; a split reduction (several blocks per
// channel, then a second pass) is the next step when it shows in a profile.

#include "launch.h"

#include <vector>

#include "../../core/error.h"
#include "batchnorm.h"
#include "block_reduce.cuh"
#include "runtime.h"

namespace ember::kernels::cuda {

namespace {

constexpr int kThreads = 256;

// Offset of element k (0 <= k < n * s) of channel c.
__device__ inline int64_t channel_offset(const BatchNormShape& sh, int64_t c, int64_t k) {
  return ((k / sh.s) * sh.c + c) * sh.s + k % sh.s;
}

template <typename T>
__global__ void stats_kernel(BatchNormShape sh, const T* x, T* mean, T* var) {
  const int64_t c = blockIdx.x, count = sh.n * sh.s;
  double sum = 0;
  for (int64_t k = threadIdx.x; k < count; k += blockDim.x) sum += static_cast<double>(x[channel_offset(sh, c, k)]);
  const double m = detail::block_sum(sum) / static_cast<double>(count);
  double sq = 0;
  for (int64_t k = threadIdx.x; k < count; k += blockDim.x) {
    const double d = static_cast<double>(x[channel_offset(sh, c, k)]) - m;
    sq += d * d;
  }
  sq = detail::block_sum(sq);
  if (threadIdx.x == 0) {
    mean[c] = static_cast<T>(m);
    var[c] = static_cast<T>(sq / static_cast<double>(count));
  }
}

// The CPU's expression, element by element: centre first, then scale and shift.
template <typename T>
__global__ void apply_kernel(BatchNormShape sh, const T* x, const T* mean, const T* invstd, const T* weight,
                             const T* bias, T* y) {
  const int64_t total = sh.n * sh.c * sh.s;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = (idx / sh.s) % sh.c;
    const T scale = invstd[c] * (weight ? weight[c] : T(1));
    const T shift = bias ? bias[c] : T(0);
    y[idx] = (x[idx] - mean[c]) * scale + shift;
  }
}

// Backward pass 1, one block per channel: sum(grad_y) and sum(grad_y * xhat) in double. Writes
// grad_weight / grad_bias when wanted and both sums to `sums` (2 C doubles) for pass 2.
template <typename T>
__global__ void backward_reduce_kernel(BatchNormShape sh, const T* x, const T* gy, const T* mean, const T* invstd,
                                       T* gw, T* gb, double* sums) {
  const int64_t c = blockIdx.x, count = sh.n * sh.s;
  const double m = mean[c], is = invstd[c];
  double sg = 0, sgx = 0;
  for (int64_t k = threadIdx.x; k < count; k += blockDim.x) {
    const int64_t off = channel_offset(sh, c, k);
    const double g = gy[off];
    sg += g;
    sgx += g * (static_cast<double>(x[off]) - m) * is;
  }
  sg = detail::block_sum(sg);
  sgx = detail::block_sum(sgx);
  if (threadIdx.x == 0) {
    if (gw) gw[c] = static_cast<T>(sgx);
    if (gb) gb[c] = static_cast<T>(sg);
    if (sums) {
      sums[c] = sg;
      sums[sh.c + c] = sgx;
    }
  }
}

// Backward pass 2, one thread per element: the CPU's formula in double. `sums` is null in eval
// mode (the statistics are constants, so only grad_y * weight * invstd remains).
template <typename T>
__global__ void backward_input_kernel(BatchNormShape sh, const T* x, const T* gy, const T* mean, const T* invstd,
                                      const T* weight, const double* sums, T* gx) {
  const int64_t total = sh.n * sh.c * sh.s;
  const double count = static_cast<double>(sh.n * sh.s);
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = (idx / sh.s) % sh.c;
    const double m = mean[c], is = invstd[c];
    const double w = weight ? static_cast<double>(weight[c]) : 1.0;
    const double mean_g = sums ? sums[c] / count : 0.0;
    const double mean_gx = sums ? sums[sh.c + c] / count : 0.0;
    const double xhat = (static_cast<double>(x[idx]) - m) * is;
    gx[idx] = static_cast<T>(w * is * (static_cast<double>(gy[idx]) - mean_g - xhat * mean_gx));
  }
}

void check_shape(const char* op, const BatchNormShape& sh) {
  EMBER_CHECK(sh.n >= 0 && sh.c >= 0 && sh.s >= 0, op, ": negative size (n=", sh.n, " c=", sh.c, " s=", sh.s, ")");
  EMBER_CHECK(sh.c <= 2147483647, op, ": ", sh.c, " channels do not fit one grid");
}

template <typename T>
void stats_impl(const BatchNormShape& sh, const T* x, T* mean, T* var) {
  check_shape("batch_norm", sh);
  if (sh.c == 0) return;
  // n * s == 0 gives 0 / 0 = NaN statistics, as on the CPU.
  EMBER_LAUNCH(stats_kernel<T>, static_cast<unsigned>(sh.c), kThreads, 0, ::ember::cuda::current_stream(), sh, x,
               mean, var);
  ::ember::cuda::check_launch("batch_norm stats");
}

template <typename T>
void apply_impl(const BatchNormShape& sh, const T* x, const T* mean, const T* invstd, const T* weight, const T* bias,
                T* y) {
  check_shape("batch_norm", sh);
  const int64_t total = sh.n * sh.c * sh.s;
  if (total == 0) return;
  EMBER_LAUNCH_FLAT(apply_kernel<T>, detail::grid_stride_blocks(total, kThreads), kThreads,
                    ::ember::cuda::current_stream(), sh, x, mean, invstd, weight, bias, y);
  ::ember::cuda::check_launch("batch_norm apply");
}

template <typename T>
void backward_impl(const BatchNormShape& sh, bool training, const T* x, const T* gy, const T* mean, const T* invstd,
                   const T* weight, T* gx, T* gw, T* gb) {
  check_shape("batch_norm backward", sh);
  if (sh.c == 0) return;
  const bool need_sums = gx != nullptr && training;
  ::ember::cuda::Scratch sums(need_sums ? 2 * static_cast<size_t>(sh.c) * sizeof(double) : 0);
  if (gw || gb || need_sums) {
    EMBER_LAUNCH(backward_reduce_kernel<T>, static_cast<unsigned>(sh.c), kThreads, 0, ::ember::cuda::current_stream(),
                 sh, x, gy, mean, invstd, gw, gb, sums.as<double>());
    ::ember::cuda::check_launch("batch_norm backward");
  }
  const int64_t total = sh.n * sh.c * sh.s;
  if (!gx || total == 0) return;
  EMBER_LAUNCH_FLAT(backward_input_kernel<T>, detail::grid_stride_blocks(total, kThreads), kThreads,
                    ::ember::cuda::current_stream(), sh, x, gy, mean, invstd, weight,
                    static_cast<const double*>(sums.as<double>()), gx);
  ::ember::cuda::check_launch("batch_norm backward");
}

}  // namespace

void batch_norm_stats(DType dtype, const BatchNormShape& sh, const void* x, void* mean, void* var) {
  EMBER_DISPATCH_FLOAT(dtype, "batch_norm", [&] {
    stats_impl<scalar_t>(sh, static_cast<const scalar_t*>(x), static_cast<scalar_t*>(mean),
                         static_cast<scalar_t*>(var));
  });
}

void batch_norm_apply(DType dtype, const BatchNormShape& sh, const void* x, const void* mean, const void* invstd,
                      const void* weight, const void* bias, void* y) {
  EMBER_DISPATCH_FLOAT(dtype, "batch_norm", [&] {
    apply_impl<scalar_t>(sh, static_cast<const scalar_t*>(x), static_cast<const scalar_t*>(mean),
                         static_cast<const scalar_t*>(invstd), static_cast<const scalar_t*>(weight),
                         static_cast<const scalar_t*>(bias), static_cast<scalar_t*>(y));
  });
}

void batch_norm_backward(DType dtype, const BatchNormShape& sh, bool training, const void* x, const void* grad_y,
                         const void* mean, const void* invstd, const void* weight, void* grad_x, void* grad_weight,
                         void* grad_bias) {
  EMBER_DISPATCH_FLOAT(dtype, "batch_norm backward", [&] {
    backward_impl<scalar_t>(sh, training, static_cast<const scalar_t*>(x), static_cast<const scalar_t*>(grad_y),
                            static_cast<const scalar_t*>(mean), static_cast<const scalar_t*>(invstd),
                            static_cast<const scalar_t*>(weight), static_cast<scalar_t*>(grad_x),
                            static_cast<scalar_t*>(grad_weight), static_cast<scalar_t*>(grad_bias));
  });
}

}  // namespace ember::kernels::cuda
