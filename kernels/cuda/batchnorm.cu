// Batch normalization on a CUDA device: per-channel block reductions and elementwise passes.
//
// dtypes. Every kernel is a template over T, the dtype of x/y/grad_y/grad_x, and P, that of the
// per-channel vectors: P = T, or float for an f16/bf16 T (Note [Mixed-precision batch norm] in
// kernels/batchnorm.h); both are read into acc_t<T> and rounded once when stored.
//
// Decomposition, (N, C, S) order. A per-channel reduction (statistics; the two sums of the
// backward) is one block per channel (or per slice of a channel: Note [Split channel reductions]):
// channel c's n * s values lie in n rows of s contiguous elements, (i * C + c) * s apart. The
// block's 256 threads walk them with a block stride over the flattened index i * s + j, so for
// s >= 32 a warp reads 32 consecutive elements of one row (coalesced); each thread accumulates in
// acc_t<T> (float for f16/bf16/f32, double for f64: Note [Accumulation types] in core/dtype.h),
// then block_reduce (warp shuffles + one shared slot per warp) combines the 256 partial sums.
// The statistics take one pass (Note [One-pass batch norm statistics]). The elementwise passes
// (apply, grad_x) walk planes: Note [Batch
// norm without per-element division]. Channels-last (N, S, C) order has kernels of its own
// (batchnorm_channels_last.cu, Note [Channels-last batch norm]).
//
// Note [Batch norm without per-element division]
// Integer division is the costly instruction here: a 64-bit divide is a software routine of
// dozens of instructions on a GPU, and these kernels do a few float operations per element. On an
// H200 (2026-12-04) the batch-norm kernels, which divided twice per element to find an element's
// row and channel, ran at about a sixth of the memory bandwidth in a ResNet-18 step. Now:
//  - the reductions keep a ChannelWalk per thread: one division where the thread starts, then each
//    step of blockDim.x elements adds its whole rows and its remainder, carrying into the next row
//    when the position passes the row's end, as one adds in base s;
//  - the elementwise passes take one (image, channel) plane at a time: a block of bx x by threads
//    covers by planes, bx threads along each (bx the power of two >= s, at most 256), so the
//    channel (plane % C) and its per-channel values are found once per plane, not per element.
//
// Note [Split channel reductions]
// One block per channel leaves most of a GPU idle when there are few channels and many elements
// per channel (C = 64 at 32 x 112 x 112: 64 blocks for 132 SMs, each block reading 1.6 MB on its
// own). Then each channel is cut into `splits` contiguous slices, one block per (channel, slice)
// (a 2-D grid: blockIdx.x = channel, blockIdx.y = slice), each writing one acc_t<T> partial sum; a
// small finalize kernel (one thread per channel) adds a channel's partials in slice order. The
// slices and their order are fixed by the shape and the device's SM count, so results are
// deterministic. With one slice (small problems) the fused one-block-per-channel kernels run.
//
// Note [One-pass batch norm statistics]
// A training batch norm's statistics are three launches in all with its normalization: partial
// sums, a finalize kernel, apply (two when a channel is one block: stats_kernel finishes the
// channel itself). The two-pass variance (the mean, then the squared deviations about it) read x
// twice and took a finalize kernel after each pass; the layer then found invstd and updated the
// running statistics with six elementwise launches, and num_batches_tracked with three more. Now:
//  - One pass of shifted sums. Every element of channel c is read once, as d = x - k with k the
//    channel's first element, into s1 = sum(d) and s2 = sum(d^2); then mean = k + s1 / M and
//    var = s2 / M - (s1 / M)^2, clamped at 0. Plain E[x^2] - E[x]^2 cancels catastrophically when
//    the mean is large against the spread (an activation of mean 1000 and spread 0.01 loses every
//    digit in float); the shift removes the mean's size from the sums, so what is left to cancel
//    is (k - mean)^2 against var: k is a value of the channel, a few standard deviations from the
//    mean at most for any bell-shaped channel, so the variance keeps nearly all of its digits. A k
//    far in a tail (an outlier at z standard deviations) costs about z^2 ulps. Both sums are
//    plain additions, so the split layout, the block trees and the slice order are the
//    backward's (and a sum with k = 0 is channel_sums).
//  - One finalize kernel per batch norm, one thread per channel (finish_channel_stats in
//    kernels/batchnorm.h, the CPU's code too): mean, invstd = 1 / sqrt(var + eps), the running
//    mean and variance updated in place, and channel 0 counts num_batches_tracked.
// PyTorch's CUDA batch norm takes one pass too (Welford's update per element, merged with Chan's
// formula); shifted sums cost two multiply-adds per element instead of a division.
//

#include "launch.h"

#include <algorithm>
#include <cstdint>

#include "../../core/cuda/runtime.h"
#include "../../core/error.h"
#include "batchnorm.h"
#include "batchnorm_common.cuh"
#include "block_reduce.cuh"
#include "common.cuh"

namespace ember::kernels::gpu {

namespace {

using namespace batchnorm_detail;
using detail::ChannelWalk;

// One block per channel: the shifted sums (Note [One-pass batch norm statistics]) and the
// channel's outputs, in one pass over x.
template <typename T, typename P>
__global__ void stats_kernel(BatchNormShape sh, const T* x, BatchNormStats out) {
  using A = acc_t<T>;
  const int64_t c = blockIdx.x, count = sh.n * sh.s;
  const A k = channel_shift(x, c, sh.s, count);
  A s1 = 0, s2 = 0;
  ChannelWalk w(threadIdx.x, blockDim.x, sh.s);
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x, w.advance()) {
    const A d = static_cast<A>(x[w.offset(sh.c, c)]) - k;
    s1 += d;
    s2 += d * d;
  }
  s1 = detail::block_sum(s1);
  s2 = detail::block_sum(s2);
  if (threadIdx.x == 0) finish_shifted<T, P>(out, c, k, s1, s2, static_cast<A>(count));
}

// The CPU's expression, element by element: centre first, then scale and shift.
template <typename T, typename P>
__global__ void apply_kernel(BatchNormShape sh, const T* x, const P* mean, const P* invstd, const P* weight,
                             const P* bias, T* y, const T* residual) {
  using A = acc_t<T>;
  // threadIdx.y walks the n * C planes (image, channel), threadIdx.x one plane's s elements.
  for (int64_t plane = blockIdx.y * int64_t{blockDim.y} + threadIdx.y; plane < sh.n * sh.c;
       plane += int64_t{gridDim.y} * blockDim.y) {
    const int64_t c = plane % sh.c, base = plane * sh.s;
    const A m = static_cast<A>(mean[c]);
    const A scale = static_cast<A>(invstd[c]) * (weight ? static_cast<A>(weight[c]) : A(1));
    const A shift = bias ? static_cast<A>(bias[c]) : A(0);
    for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < sh.s; j += int64_t{gridDim.x} * blockDim.x)
      y[base + j] = fused_epilogue<T>(batch_norm_affine(static_cast<A>(x[base + j]), m, scale, shift), residual, base + j,
                                      sh.relu);
  }
}

// Backward pass 1, one block per channel: sum(grad_y) and sum(grad_y * xhat) in acc_t<T>. Writes
// grad_weight / grad_bias when wanted and both sums to `sums` (2 C acc_t<T> values) for pass 2.
template <typename T, typename P>
__global__ void backward_reduce_kernel(BatchNormShape sh, const T* x, const T* gy, ReluMask<T, P> mask,
                                       const P* mean, const P* invstd, P* gw, P* gb, acc_t<T>* sums) {
  using A = acc_t<T>;
  const int64_t c = blockIdx.x, count = sh.n * sh.s;
  const A m = static_cast<A>(mean[c]), is = static_cast<A>(invstd[c]);
  const ChannelMask<T> cm = channel_mask(mask, c, m, is);
  A sg = 0, sgx = 0;
  ChannelWalk w(threadIdx.x, blockDim.x, sh.s);
  for (int64_t k = threadIdx.x; k < count; k += blockDim.x, w.advance()) {
    const int64_t off = w.offset(sh.c, c);
    const A xv = static_cast<A>(x[off]);
    const A g = cm.grad(gy, mask.y, off, xv);
    if (mask.masked_out) mask.masked_out[off] = static_cast<T>(g);
    sg += g;
    sgx += g * (xv - m) * is;
  }
  sg = detail::block_sum(sg);
  sgx = detail::block_sum(sgx);
  if (threadIdx.x == 0) {
    if (gw) gw[c] = static_cast<P>(sgx);
    if (gb) gb[c] = static_cast<P>(sg);
    if (sums) {
      sums[c] = sg;
      sums[sh.c + c] = sgx;
    }
  }
}

// Backward pass 2, one thread per element: the CPU's formula in acc_t<T>. `sums` is null in eval
// mode (the statistics are constants, so only grad_y * weight * invstd remains).
template <typename T, typename P>
__global__ void backward_input_kernel(BatchNormShape sh, const T* x, const T* gy, ReluMask<T, P> mask,
                                      const P* mean, const P* invstd, const P* weight, const acc_t<T>* sums, T* gx) {
  using A = acc_t<T>;
  const A count = static_cast<A>(sh.n * sh.s);
  for (int64_t plane = blockIdx.y * int64_t{blockDim.y} + threadIdx.y; plane < sh.n * sh.c;
       plane += int64_t{gridDim.y} * blockDim.y) {  // as apply_kernel
    const int64_t c = plane % sh.c, base = plane * sh.s;
    const A m = static_cast<A>(mean[c]), is = static_cast<A>(invstd[c]);
    const A w = weight ? static_cast<A>(weight[c]) : A(1);
    const A mean_g = sums ? sums[c] / count : A(0);
    const A mean_gx = sums ? sums[sh.c + c] / count : A(0);
    const ChannelMask<T> cm = channel_mask(mask, c, m, is);
    for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < sh.s; j += int64_t{gridDim.x} * blockDim.x) {
      const int64_t idx = base + j;
      const A xv = static_cast<A>(x[idx]);
      const A xhat = (xv - m) * is;
      gx[idx] = static_cast<T>(w * is * (cm.grad(gy, mask.y, idx, xv) - mean_g - xhat * mean_gx));
    }
  }
}

// ---- split reductions (Note [Split channel reductions]) ----------------------------------------

// Block (c, part): over its slice, the shifted sums sum(x - k) and sum((x - k)^2) with k the
// channel's first element (moments), or sum(x) and 0 -> partial[2 (c * parts + part) + {0, 1}].
template <typename T>
__global__ void stats_partial_kernel(BatchNormShape sh, const T* x, bool moments, acc_t<T>* partial) {
  using A = acc_t<T>;
  const int64_t c = blockIdx.x, part = blockIdx.y, parts = gridDim.y;
  int64_t lo, hi;
  channel_slice(sh.n * sh.s, part, parts, &lo, &hi);
  const A k = moments ? channel_shift(x, c, sh.s, sh.n * sh.s) : A(0);
  A s1 = 0, s2 = 0;
  ChannelWalk w(lo + threadIdx.x, blockDim.x, sh.s);
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x, w.advance()) {
    const A d = static_cast<A>(x[w.offset(sh.c, c)]) - k;
    s1 += d;
    if (moments) s2 += d * d;
  }
  s1 = detail::block_sum(s1);
  s2 = detail::block_sum(s2);
  if (threadIdx.x == 0) {
    partial[2 * (c * parts + part)] = s1;
    partial[2 * (c * parts + part) + 1] = s2;
  }
}

// Block (c, part): sum(grad_y) and sum(grad_y * xhat) over its slice -> partial[2 (c * parts + part) + {0, 1}].
template <typename T, typename P>
__global__ void backward_partial_kernel(BatchNormShape sh, const T* x, const T* gy, ReluMask<T, P> mask,
                                        const P* mean, const P* invstd, acc_t<T>* partial) {
  using A = acc_t<T>;
  const int64_t c = blockIdx.x, part = blockIdx.y, parts = gridDim.y;
  int64_t lo, hi;
  channel_slice(sh.n * sh.s, part, parts, &lo, &hi);
  const A m = static_cast<A>(mean[c]), is = static_cast<A>(invstd[c]);
  const ChannelMask<T> cm = channel_mask(mask, c, m, is);
  A sg = 0, sgx = 0;
  ChannelWalk w(lo + threadIdx.x, blockDim.x, sh.s);
  for (int64_t k = lo + threadIdx.x; k < hi; k += blockDim.x, w.advance()) {
    const int64_t off = w.offset(sh.c, c);
    const A xv = static_cast<A>(x[off]);
    const A g = cm.grad(gy, mask.y, off, xv);
    if (mask.masked_out) mask.masked_out[off] = static_cast<T>(g);
    sg += g;
    sgx += g * (xv - m) * is;
  }
  sg = detail::block_sum(sg);
  sgx = detail::block_sum(sgx);
  if (threadIdx.x == 0) {
    partial[2 * (c * parts + part)] = sg;
    partial[2 * (c * parts + part) + 1] = sgx;
  }
}

int64_t channel_splits(const BatchNormShape& sh) {
  const int64_t count = sh.n * sh.s;
  const int64_t sms = cuda::properties(cuda::current_device()).multiprocessor_count;
  const int64_t fill = std::max<int64_t>(1, 4 * sms / std::max<int64_t>(1, sh.c));
  const int64_t useful = std::max<int64_t>(1, count / kMinPerBlock);
  return std::min<int64_t>({fill, useful, 65535});
}

// The elementwise passes' launch shape (Note [Batch norm without per-element division]): bx
// threads along a plane (the power of two >= s, at most kThreads), by = kThreads / bx planes per
// block; grids stride beyond CUDA's limits (65535 for y).
struct PlaneGrid {
  dim3 grid, block;
  explicit PlaneGrid(const BatchNormShape& sh) {
    unsigned bx = 1;
    while (bx < kThreads && static_cast<int64_t>(bx) < sh.s) bx *= 2;
    const unsigned by = kThreads / bx;
    block = dim3(bx, by);
    const int64_t gx = std::min<int64_t>((sh.s + bx - 1) / bx, 65535);
    const int64_t gy = std::min<int64_t>((sh.n * sh.c + by - 1) / by, 65535);
    grid = dim3(static_cast<unsigned>(std::max<int64_t>(gx, 1)), static_cast<unsigned>(std::max<int64_t>(gy, 1)));
  }
};

template <typename T, typename P>
void stats_impl(const BatchNormShape& sh, const T* x, const BatchNormStats& out) {
  using A = acc_t<T>;
  check_shape("batch_norm", sh);
  if (sh.c == 0) return;
  if (sh.channels_last) return stats_channels_last<T, P>(sh, x, out);
  const cuda::Stream stream = cuda::current_stream();
  const P* const typed = static_cast<const P*>(out.mean);
  const int64_t splits = channel_splits(sh);
  if (splits == 1) {
    EMBER_LAUNCH((stats_kernel<T, P>), static_cast<unsigned>(sh.c), kThreads, 0, stream, stats_cost(sh, x, typed, out),
                 sh, x, out);
    cuda::check_launch("batch_norm stats");
    return;
  }
  cuda::Scratch partial(2 * static_cast<size_t>(sh.c * splits) * sizeof(A));
  EMBER_LAUNCH(stats_partial_kernel<T>, dim3(static_cast<unsigned>(sh.c), static_cast<unsigned>(splits)), kThreads, 0,
               stream, stats_partial_cost(sh, x, splits, true), sh, x, true, partial.as<A>());
  cuda::check_launch("batch_norm stats");
  EMBER_LAUNCH_FLAT((stats_finalize_kernel<T, P>), detail::grid_stride_blocks(sh.c, kThreads), kThreads, stream,
                    stats_finalize_cost(sh, x, typed, splits, out), sh.c, splits, sh.n * sh.s,
                    static_cast<const A*>(partial.as<A>()), x, sh.s, out);
  cuda::check_launch("batch_norm stats");
}

template <typename T, typename P>
void apply_impl(const BatchNormShape& sh, const T* x, const P* mean, const P* invstd, const P* weight, const P* bias,
                T* y, const T* residual) {
  check_shape("batch_norm", sh);
  const int64_t total = sh.n * sh.c * sh.s;
  if (total == 0) return;
  if (!sh.relu) residual = nullptr;  // Note [Batch norm with a fused ReLU]: a residual goes with the ReLU
  if (sh.channels_last) return apply_channels_last<T, P>(sh, x, mean, invstd, weight, bias, y, residual);
  const PlaneGrid pg(sh);
  EMBER_LAUNCH_FLAT((apply_kernel<T, P>), pg.grid, pg.block, cuda::current_stream(),
                    apply_cost(sh, residual, weight, bias), sh, x, mean, invstd, weight, bias, y, residual);
  cuda::check_launch("batch_norm apply");
}

template <typename T, typename P>
void backward_impl(const BatchNormShape& sh, bool training, const T* x, const T* gy, const P* mean, const P* invstd,
                   const P* weight, T* gx, P* gw, P* gb, const T* y, const P* bias, T* gy_masked) {
  using A = acc_t<T>;
  check_shape("batch_norm backward", sh);
  const bool need_sums = gx != nullptr && training;
  EMBER_CHECK(!gy_masked || (sh.relu && (gw || gb || need_sums)), "batch_norm backward: the masked grad_y is "
              "written by the reduction pass: it needs a fused ReLU and a wanted sum (grad_weight, grad_bias, or ",
              "grad_x in training)");
  // Note [Batch norm with a fused ReLU]; without y, Note [The ReLU mask recomputed from x].
  const ReluMask<T, P> mask{.y = sh.relu ? y : nullptr,
                            .recompute = sh.relu && y == nullptr,
                            .weight = weight,
                            .bias = bias,
                            .masked_out = gy_masked};
  if (sh.c == 0) return;
  if (sh.channels_last)
    return backward_channels_last<T, P>(sh, training, x, gy, mask, mean, invstd, weight, gx, gw, gb);
  cuda::Scratch sums(need_sums ? 2 * static_cast<size_t>(sh.c) * sizeof(A) : 0);
  const int64_t splits = channel_splits(sh);
  if ((gw || gb || need_sums) && splits == 1) {
    EMBER_LAUNCH((backward_reduce_kernel<T, P>), static_cast<unsigned>(sh.c), kThreads, 0, cuda::current_stream(),
                 backward_sums_cost(sh, mask, backward_outputs_bytes(sh, gw, gb, sums.as<A>())), sh, x, gy, mask,
                 mean, invstd, gw, gb, sums.as<A>());
    cuda::check_launch("batch_norm backward");
  } else if (gw || gb || need_sums) {
    cuda::Scratch partial(2 * static_cast<size_t>(sh.c * splits) * sizeof(A));
    const dim3 grid(static_cast<unsigned>(sh.c), static_cast<unsigned>(splits));
    EMBER_LAUNCH((backward_partial_kernel<T, P>), grid, kThreads, 0, cuda::current_stream(),
                 backward_sums_cost(sh, mask, static_cast<double>(partial.size())), sh, x, gy, mask, mean, invstd,
                 partial.as<A>());
    cuda::check_launch("batch_norm backward");
    EMBER_LAUNCH_FLAT((finalize_sums_kernel<T, P>), detail::grid_stride_blocks(sh.c, kThreads), kThreads,
                      cuda::current_stream(), finalize_sums_cost(sh, splits, gw, gb, sums.as<A>()), sh.c, splits,
                      static_cast<const A*>(partial.as<A>()), gw, gb, sums.as<A>());
    cuda::check_launch("batch_norm backward");
  }
  const int64_t total = sh.n * sh.c * sh.s;
  if (!gx || total == 0) return;
  const PlaneGrid pg(sh);
  EMBER_LAUNCH_FLAT((backward_input_kernel<T, P>), pg.grid, pg.block, cuda::current_stream(),
                    backward_input_cost(sh, mask.for_input(), weight, sums.as<A>()), sh, x, mask.input_grad(gy),
                    mask.for_input(), mean, invstd, weight, static_cast<const A*>(sums.as<A>()), gx);
  cuda::check_launch("batch_norm backward");
}

// The statistics' partial sums unshifted: out[c] = the sum of channel c's values, the partials of
// its slices added in slice order by finalize_sums_kernel, rounded to T once.
template <typename T>
void channel_sums_impl(const BatchNormShape& sh, const T* x, T* out) {
  using A = acc_t<T>;
  check_shape("channel sums", sh);
  if (sh.c == 0) return;
  if (sh.channels_last) return channel_sums_channels_last<T>(sh, x, out);
  const int64_t splits = channel_splits(sh);
  cuda::Scratch partial(2 * static_cast<size_t>(sh.c * splits) * sizeof(A));
  EMBER_LAUNCH(stats_partial_kernel<T>, dim3(static_cast<unsigned>(sh.c), static_cast<unsigned>(splits)), kThreads,
               0, cuda::current_stream(), stats_partial_cost(sh, x, splits, false), sh, x, false, partial.as<A>());
  cuda::check_launch("channel sums");
  EMBER_LAUNCH_FLAT((finalize_sums_kernel<T, T>), detail::grid_stride_blocks(sh.c, kThreads), kThreads,
                    cuda::current_stream(), finalize_sums_cost(sh, splits, static_cast<T*>(nullptr), out,
                                                               static_cast<A*>(nullptr)),
                    sh.c, splits, static_cast<const A*>(partial.as<A>()), static_cast<T*>(nullptr), out,
                    static_cast<A*>(nullptr));
  cuda::check_launch("channel sums");
}

}  // namespace

void batch_norm_stats(DType dtype, DType param_dtype, const BatchNormShape& sh, const void* x,
                      const BatchNormStats& out) {
  dispatch_batch_norm("batch_norm", dtype, param_dtype, [&](auto t, auto p) {
    using T = decltype(t);
    using P = decltype(p);
    stats_impl<T, P>(sh, static_cast<const T*>(x), out);
  });
}

void batch_norm_apply(DType dtype, DType param_dtype, const BatchNormShape& sh, const void* x, const void* mean,
                      const void* invstd, const void* weight, const void* bias, void* y, const void* residual) {
  dispatch_batch_norm("batch_norm", dtype, param_dtype, [&](auto t, auto p) {
    using T = decltype(t);
    using P = decltype(p);
    apply_impl<T, P>(sh, static_cast<const T*>(x), static_cast<const P*>(mean), static_cast<const P*>(invstd),
                     static_cast<const P*>(weight), static_cast<const P*>(bias), static_cast<T*>(y),
                     static_cast<const T*>(residual));
  });
}

void batch_norm_backward(DType dtype, DType param_dtype, const BatchNormShape& sh, bool training, const void* x,
                         const void* grad_y, const void* mean, const void* invstd, const void* weight, void* grad_x,
                         void* grad_weight, void* grad_bias, const void* y, const void* bias,
                         void* grad_y_masked) {
  dispatch_batch_norm("batch_norm backward", dtype, param_dtype, [&](auto t, auto p) {
    using T = decltype(t);
    using P = decltype(p);
    backward_impl<T, P>(sh, training, static_cast<const T*>(x), static_cast<const T*>(grad_y),
                        static_cast<const P*>(mean), static_cast<const P*>(invstd), static_cast<const P*>(weight),
                        static_cast<T*>(grad_x), static_cast<P*>(grad_weight), static_cast<P*>(grad_bias),
                        static_cast<const T*>(y), static_cast<const P*>(bias), static_cast<T*>(grad_y_masked));
  });
}

void channel_sums(DType dtype, const BatchNormShape& sh, const void* x, void* out) {
  EMBER_DISPATCH_FLOATING(dtype, "channel sums", [&] {
    using T = scalar_t;
    channel_sums_impl<T>(sh, static_cast<const T*>(x), static_cast<T*>(out));
  });
}

}  // namespace ember::kernels::gpu
