// Batch normalization on a CUDA device, channels-last (N, S, C) activations: the column kernels
// of Note [Channels-last batch norm]. The entry points and the (N, C, S) kernels are in
// batchnorm.cu; what both use is in batchnorm_common.cuh.
//
// Note [Channels-last batch norm]
// A channels-last (NHWC) activation (sh.channels_last) holds its R = n * s positions as rows of C
// channels: an R x C row-major matrix whose column c is channel c. The (N, C, S) kernels of
// batchnorm.cu could only take it copied to NCHW, with the result copied back: a read and a write of x and y
// (grad_y and grad_x in backward) on top of batch norm's own passes, which doubled a ResNet-18
// channels-last step on an H200. These kernels read the matrix where it lies. Each thread owns V
// adjacent columns, a "lane group" (V = 1, or a 16-byte pack: Note [Channels-last batch norm in
// 16-byte packs]); blocks are bx x by threads (ColumnBlock: bx the power of two >= C / V, at most
// 32; by = 256 / bx): threadIdx.x picks the lane group, threadIdx.y the row, so a warp reads bx
// consecutive groups of 32 / bx consecutive rows, one contiguous run of memory (coalesced).
//  - Reductions: blockIdx.x picks a chunk of bx groups, blockIdx.y a slice of the rows (slices as
//    in Note [Split channel reductions]: enough blocks for about four per SM, but at least
//    kMinPerBlock elements each). Thread (x, y) adds rows lo + y, lo + y + by, ... of each of its
//    columns in acc_t<T>, one after another; the block then adds its by partial sums of each
//    column in shared memory as a fixed tree of depth log2(by) (column_sums), and writes one
//    partial per (channel, slice) in the split kernels' layout, so stats_finalize_kernel and
//    finalize_sums_kernel add the slices in order. The statistics are the NCHW kernels' math
//    (the shifted sums of Note [One-pass batch norm statistics] in batchnorm.cu), and the
//    backward's two sums likewise; only
//    the order in which the sums are added differs, so results differ from the NCHW kernels' in
//    the last bits of a float sum, and are the same from run to run (the slices depend on the
//    shape, V and the SM count only).
//  - Elementwise passes (apply; grad_x): the same block shape, blockIdx.x over chunks of
//    groups, rows strided over blockIdx.y. A thread stays in its columns, so it loads its
//    channels' means and scales once and needs no division or modulo per element (Note [Batch
//    norm without per-element division]); the arithmetic per element is the NCHW kernels',
//    expression for expression.
//
// Note [Channels-last batch norm in 16-byte packs]
// With one column per thread a warp's load asks for bx consecutive elements: 64 bytes of a bf16
// activation at C >= 32, two sectors per request, so a kernel needs one load instruction per
// element and runs out of outstanding requests long before it runs out of bandwidth (the
// reductions worst: each thread's loads feed one running sum). When every row's C elements split
// into 16-byte groups — C a multiple of V = 16 / sizeof(T) (8 for f16/bf16, 4 for f32, 2 for f64)
// and every tensor the kernel touches 16-byte aligned — a thread owns V adjacent columns instead:
// one 16-byte load or store per row (a warp's request covers 512 bytes), V independent running
// sums per thread, and the per-channel values of its V channels in registers. ResNet's channel
// counts (64 to 512) all qualify; the first layer's three channels, odd counts and views at odd
// offsets take V = 1, the same kernels instantiated one column wide. Element by element the
// arithmetic is the same expression, so y and grad x are bit for bit those of V = 1; the sums
// add the same rows of each column in a different grouping (more threads per column: by is
// larger for the same C), so statistics and parameter gradients can differ from V = 1 in the last
// bits of a float sum, run to run they are fixed by the shape, V and the SM count.

#include "launch.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "../../core/cuda/runtime.h"
#include "../../core/error.h"
#include "batchnorm.h"
#include "batchnorm_common.cuh"
#include "block_reduce.cuh"
#include "common.cuh"

namespace ember::kernels::gpu::batchnorm_detail {

namespace {

using detail::kLanes16;
using detail::Pack;
using detail::vector_load;
using detail::vector_store;

// ---- channels-last kernels (Note [Channels-last batch norm]) ---------------------------------
// x, grad_y, y, grad_x: an (R = n * s) x C row-major matrix. Each thread owns V adjacent columns
// (a "lane group": Note [Channels-last batch norm in 16-byte packs]), group
// blockIdx.x * blockDim.x + threadIdx.x (idle when past C / V), and rows threadIdx.y,
// threadIdx.y + blockDim.y, ... of its range. V = 1 is one column per thread.

// The sums over a block's threadIdx.y of each of a thread's K values, for each threadIdx.x
// (column): every thread parks its values, then the upper half of the rows adds itself onto the
// lower half, h = blockDim.y / 2, blockDim.y / 4, ..., 1 (row y takes row y + h): a fixed tree of
// depth log2(blockDim.y), so the bits do not depend on scheduling. On return every thread holds
// its column's sums. Every thread of the block must call it (barriers inside); the last barrier
// lets the caller call it again at once. blockDim.y a power of two, blockDim.x * blockDim.y <=
// kThreads.
template <typename A, int K>
__device__ inline void column_sums(A (&v)[K]) {
  __shared__ A cell[K * kThreads];
  const unsigned columns = blockDim.x, n = blockDim.x * blockDim.y, at = threadIdx.y * columns + threadIdx.x;
  for (int k = 0; k < K; ++k) cell[k * n + at] = v[k];
  __syncthreads();
  for (unsigned h = blockDim.y / 2; h > 0; h /= 2) {
    if (threadIdx.y < h)
      for (int k = 0; k < K; ++k) cell[k * n + at] += cell[k * n + at + h * columns];
    __syncthreads();
  }
  for (int k = 0; k < K; ++k) v[k] = cell[k * n + threadIdx.x];
  __syncthreads();
}

// Block (chunk, part): for each of its columns c, over the rows of slice `part`, the shifted sums
// sum(x - k) and sum((x - k)^2) with k the column's first element (moments), or sum(x) and 0 ->
// partial[2 (c * parts + part) + {0, 1}] (stats_partial_kernel's layout; Note [One-pass batch norm
// statistics] in batchnorm.cu).
template <typename T, int V>
__global__ void stats_partial_cl_kernel(BatchNormShape sh, const T* x, bool moments, acc_t<T>* partial) {
  using A = acc_t<T>;
  const int64_t c0 = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * V, part = blockIdx.y, parts = gridDim.y;
  int64_t lo, hi;
  channel_slice(sh.n * sh.s, part, parts, &lo, &hi);  // a column's elements are the rows
  A sums[2 * V] = {}, k[V] = {};  // sum(d) of column c0 + j in sums[j], sum(d^2) in sums[V + j]
  if (c0 < sh.c) {
    if (moments)
      for (int j = 0; j < V; ++j) k[j] = channel_shift(x, c0 + j, 1, sh.n * sh.s);
    for (int64_t r = lo + threadIdx.y; r < hi; r += blockDim.y) {
      const Pack<T, V> v = vector_load<V>(x + r * sh.c + c0);
      for (int j = 0; j < V; ++j) {
        const A d = static_cast<A>(v.v[j]) - k[j];
        sums[j] += d;
        if (moments) sums[V + j] += d * d;
      }
    }
  }
  column_sums(sums);  // outside the `if`: every thread reaches the barriers
  if (threadIdx.y == 0 && c0 < sh.c)
    for (int j = 0; j < V; ++j) {
      partial[2 * ((c0 + j) * parts + part)] = sums[j];
      partial[2 * ((c0 + j) * parts + part) + 1] = sums[V + j];
    }
}

// Block (chunk, part): sum(grad_y) and sum(grad_y * xhat) of each of its columns over the rows of
// slice `part` -> partial[2 (c * parts + part) + {0, 1}] (backward_partial_kernel's layout).
template <typename T, typename P, int V>
__global__ void backward_partial_cl_kernel(BatchNormShape sh, const T* x, const T* gy, ReluMask<T, P> mask,
                                           const P* mean, const P* invstd, acc_t<T>* partial) {
  using A = acc_t<T>;
  const int64_t c0 = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * V, part = blockIdx.y, parts = gridDim.y;
  int64_t lo, hi;
  channel_slice(sh.n * sh.s, part, parts, &lo, &hi);
  A sums[2 * V] = {};  // sum(grad_y) of column c0 + j in sums[j], sum(grad_y * xhat) in sums[V + j]
  if (c0 < sh.c) {
    A m[V], is[V];
    ChannelMask<T> cm[V];
    for (int j = 0; j < V; ++j) {
      m[j] = static_cast<A>(mean[c0 + j]), is[j] = static_cast<A>(invstd[c0 + j]);
      cm[j] = channel_mask(mask, c0 + j, m[j], is[j]);
    }
    for (int64_t r = lo + threadIdx.y; r < hi; r += blockDim.y) {
      const int64_t at = r * sh.c + c0;
      const Pack<T, V> xv = vector_load<V>(x + at), gv = vector_load<V>(gy + at);
      const Pack<T, V> yv = mask.y ? vector_load<V>(mask.y + at) : Pack<T, V>{};
      Pack<T, V> masked;
      for (int j = 0; j < V; ++j) {
        const A xj = static_cast<A>(xv.v[j]);
        const A g = cm[j].grad(gv.v, mask.y ? yv.v : nullptr, j, xj);
        masked.v[j] = static_cast<T>(g);
        sums[j] += g;
        sums[V + j] += g * (xj - m[j]) * is[j];
      }
      if (mask.masked_out) vector_store<V>(mask.masked_out + at, masked);
    }
  }
  column_sums(sums);
  if (threadIdx.y == 0 && c0 < sh.c)
    for (int j = 0; j < V; ++j) {
      partial[2 * ((c0 + j) * parts + part)] = sums[j];
      partial[2 * ((c0 + j) * parts + part) + 1] = sums[V + j];
    }
}

// apply_kernel's expression, V columns per thread.
template <typename T, typename P, int V>
__global__ void apply_cl_kernel(BatchNormShape sh, const T* x, const P* mean, const P* invstd, const P* weight,
                                const P* bias, T* y, const T* residual) {
  using A = acc_t<T>;
  const int64_t c0 = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * V, rows = sh.n * sh.s;
  if (c0 >= sh.c) return;
  A m[V], scale[V], shift[V];
  for (int j = 0; j < V; ++j) {
    const int64_t c = c0 + j;
    m[j] = static_cast<A>(mean[c]);
    scale[j] = static_cast<A>(invstd[c]) * (weight ? static_cast<A>(weight[c]) : A(1));
    shift[j] = bias ? static_cast<A>(bias[c]) : A(0);
  }
  for (int64_t r = blockIdx.y * int64_t{blockDim.y} + threadIdx.y; r < rows; r += int64_t{gridDim.y} * blockDim.y) {
    const int64_t at = r * sh.c + c0;
    const Pack<T, V> xv = vector_load<V>(x + at);
    const Pack<T, V> rv = residual ? vector_load<V>(residual + at) : Pack<T, V>{};
    Pack<T, V> out;
    for (int j = 0; j < V; ++j)
      out.v[j] = fused_epilogue<T>(batch_norm_affine(static_cast<A>(xv.v[j]), m[j], scale[j], shift[j]),
                                   residual ? rv.v : nullptr,
                                   j, sh.relu);
    vector_store<V>(y + at, out);
  }
}

// backward_input_kernel's expression, V columns per thread; `sums` is null in eval mode.
template <typename T, typename P, int V>
__global__ void backward_input_cl_kernel(BatchNormShape sh, const T* x, const T* gy, ReluMask<T, P> mask,
                                         const P* mean, const P* invstd, const P* weight, const acc_t<T>* sums,
                                         T* gx) {
  using A = acc_t<T>;
  const int64_t c0 = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * V, rows = sh.n * sh.s;
  if (c0 >= sh.c) return;
  const A count = static_cast<A>(rows);
  A m[V], is[V], w[V], mean_g[V], mean_gx[V];
  ChannelMask<T> cm[V];
  for (int j = 0; j < V; ++j) {
    const int64_t c = c0 + j;
    m[j] = static_cast<A>(mean[c]), is[j] = static_cast<A>(invstd[c]);
    w[j] = weight ? static_cast<A>(weight[c]) : A(1);
    mean_g[j] = sums ? sums[c] / count : A(0);
    mean_gx[j] = sums ? sums[sh.c + c] / count : A(0);
    cm[j] = channel_mask(mask, c, m[j], is[j]);
  }
  for (int64_t r = blockIdx.y * int64_t{blockDim.y} + threadIdx.y; r < rows; r += int64_t{gridDim.y} * blockDim.y) {
    const int64_t at = r * sh.c + c0;
    const Pack<T, V> xv = vector_load<V>(x + at), gv = vector_load<V>(gy + at);
    const Pack<T, V> yv = mask.y ? vector_load<V>(mask.y + at) : Pack<T, V>{};
    Pack<T, V> out;
    for (int j = 0; j < V; ++j) {
      const A xj = static_cast<A>(xv.v[j]);
      const A xhat = (xj - m[j]) * is[j];
      out.v[j] = static_cast<T>(w[j] * is[j] *
                                (cm[j].grad(gv.v, mask.y ? yv.v : nullptr, j, xj) - mean_g[j] - xhat * mean_gx[j]));
    }
    vector_store<V>(gx + at, out);
  }
}

// The channels-last kernels' launch shape (Note [Channels-last batch norm]) for V columns per
// thread: blocks of bx x by threads, bx the power of two >= C / V (at most 32), by = kThreads / bx;
// `chunks` blocks of bx lane groups along x. A reduction adds `slices` blocks along y; an
// elementwise pass strides over the rows with up to 65535 blocks along y.
struct ColumnBlock {
  dim3 block;
  unsigned chunks = 1;
  int64_t columns = 1;  // columns per block: bx * V, or C when fewer
  ColumnBlock(const BatchNormShape& sh, int lanes) {
    const int64_t groups = sh.c / lanes;
    unsigned bx = 1;
    while (bx < 32 && static_cast<int64_t>(bx) < groups) bx *= 2;
    block = dim3(bx, kThreads / bx);
    chunks = static_cast<unsigned>(std::max<int64_t>(1, (groups + bx - 1) / bx));
    columns = std::min<int64_t>(sh.c, int64_t{bx} * lanes);
  }
  // Row slices for a reduction, as channel_splits(): about four blocks per SM in all, at least
  // kMinPerBlock elements (of the block's columns) per block.
  int64_t slices(const BatchNormShape& sh) const {
    const int64_t rows = sh.n * sh.s;
    const int64_t sms = cuda::properties(cuda::current_device()).multiprocessor_count;
    const int64_t fill = std::max<int64_t>(1, 4 * sms / chunks);
    const int64_t useful = std::max<int64_t>(1, rows * columns / kMinPerBlock);
    return std::min<int64_t>({fill, useful, 65535});
  }
  dim3 elementwise_grid(const BatchNormShape& sh) const {
    const int64_t gy = std::min<int64_t>((sh.n * sh.s + block.y - 1) / block.y, 65535);
    return dim3(chunks, static_cast<unsigned>(std::max<int64_t>(gy, 1)));
  }
};

template <typename T>
bool fits_lanes(const BatchNormShape& sh, std::initializer_list<const void*> tensors) {
  return sh.c % kLanes16<T> == 0 && detail::all_aligned(tensors, 16);  // null pointers pass
}

// Channels-last launchers: the same steps for every shape (split reductions with one or more
// slices), sh.c > 0, V columns per thread (sh.c % V == 0, the tensors V * sizeof(T) aligned).
template <typename T, typename P, int V>
void stats_cl(const BatchNormShape& sh, const T* x, const BatchNormStats& out) {
  using A = acc_t<T>;
  const cuda::Stream stream = cuda::current_stream();
  const ColumnBlock cb(sh, V);
  const int64_t slices = cb.slices(sh);
  cuda::Scratch partial(2 * static_cast<size_t>(sh.c * slices) * sizeof(A));
  EMBER_LAUNCH((stats_partial_cl_kernel<T, V>), dim3(cb.chunks, static_cast<unsigned>(slices)), cb.block, 0, stream,
               stats_partial_cost(sh, x, slices, true), sh, x, true, partial.as<A>());
  cuda::check_launch("batch_norm stats");
  EMBER_LAUNCH_FLAT((stats_finalize_kernel<T, P>), detail::grid_stride_blocks(sh.c, kThreads), kThreads, stream,
                    stats_finalize_cost(sh, x, static_cast<const P*>(out.mean), slices, out), sh.c, slices,
                    sh.n * sh.s, static_cast<const A*>(partial.as<A>()), x, int64_t{1}, out);
  cuda::check_launch("batch_norm stats");
}

template <typename T, typename P, int V>
void apply_cl(const BatchNormShape& sh, const T* x, const P* mean, const P* invstd, const P* weight, const P* bias,
              T* y, const T* residual) {
  const ColumnBlock cb(sh, V);
  EMBER_LAUNCH_FLAT((apply_cl_kernel<T, P, V>), cb.elementwise_grid(sh), cb.block, cuda::current_stream(),
                    apply_cost(sh, residual, weight, bias), sh, x, mean, invstd, weight, bias, y, residual);
  cuda::check_launch("batch_norm apply");
}

template <typename T, typename P, int V>
void backward_cl(const BatchNormShape& sh, bool training, const T* x, const T* gy, const ReluMask<T, P>& mask,
                 const P* mean, const P* invstd, const P* weight, T* gx, P* gw, P* gb) {
  using A = acc_t<T>;
  const cuda::Stream stream = cuda::current_stream();
  const ColumnBlock cb(sh, V);
  const bool need_sums = gx != nullptr && training;
  cuda::Scratch sums(need_sums ? 2 * static_cast<size_t>(sh.c) * sizeof(A) : 0);
  if (gw || gb || need_sums) {
    const int64_t slices = cb.slices(sh);
    cuda::Scratch partial(2 * static_cast<size_t>(sh.c * slices) * sizeof(A));
    EMBER_LAUNCH((backward_partial_cl_kernel<T, P, V>), dim3(cb.chunks, static_cast<unsigned>(slices)), cb.block, 0,
                 stream, backward_sums_cost(sh, mask, static_cast<double>(partial.size())), sh, x, gy, mask, mean,
                 invstd, partial.as<A>());
    cuda::check_launch("batch_norm backward");
    EMBER_LAUNCH_FLAT((finalize_sums_kernel<T, P>), detail::grid_stride_blocks(sh.c, kThreads), kThreads, stream,
                      finalize_sums_cost(sh, slices, gw, gb, sums.as<A>()), sh.c, slices,
                      static_cast<const A*>(partial.as<A>()), gw, gb, sums.as<A>());
    cuda::check_launch("batch_norm backward");
  }
  if (!gx || sh.n * sh.s == 0) return;
  EMBER_LAUNCH_FLAT((backward_input_cl_kernel<T, P, V>), cb.elementwise_grid(sh), cb.block, stream,
                    backward_input_cost(sh, mask.for_input(), weight, sums.as<A>()), sh, x, mask.input_grad(gy),
                    mask.for_input(), mean, invstd, weight, static_cast<const A*>(sums.as<A>()), gx);
  cuda::check_launch("batch_norm backward");
}

// channel_sums channels-last (as channel_sums_impl in batchnorm.cu).
template <typename T, int V>
void channel_sums_cl(const BatchNormShape& sh, const T* x, T* out) {
  using A = acc_t<T>;
  const ColumnBlock cb(sh, V);
  const int64_t slices = cb.slices(sh);
  cuda::Scratch partial(2 * static_cast<size_t>(sh.c * slices) * sizeof(A));
  EMBER_LAUNCH((stats_partial_cl_kernel<T, V>), dim3(cb.chunks, static_cast<unsigned>(slices)), cb.block, 0,
               cuda::current_stream(), stats_partial_cost(sh, x, slices, false), sh, x, false, partial.as<A>());
  cuda::check_launch("channel sums");
  EMBER_LAUNCH_FLAT((finalize_sums_kernel<T, T>), detail::grid_stride_blocks(sh.c, kThreads), kThreads,
                    cuda::current_stream(), finalize_sums_cost(sh, slices, static_cast<T*>(nullptr), out,
                                                               static_cast<A*>(nullptr)),
                    sh.c, slices, static_cast<const A*>(partial.as<A>()), static_cast<T*>(nullptr), out,
                    static_cast<A*>(nullptr));
  cuda::check_launch("channel sums");
}

}  // namespace

template <typename T, typename P>
void stats_channels_last(const BatchNormShape& sh, const T* x, const BatchNormStats& out) {
  if (fits_lanes<T>(sh, {x})) return stats_cl<T, P, kLanes16<T>>(sh, x, out);
  stats_cl<T, P, 1>(sh, x, out);
}

template <typename T, typename P>
void apply_channels_last(const BatchNormShape& sh, const T* x, const P* mean, const P* invstd, const P* weight,
                         const P* bias, T* y, const T* residual) {
  if (fits_lanes<T>(sh, {x, y, residual}))
    return apply_cl<T, P, kLanes16<T>>(sh, x, mean, invstd, weight, bias, y, residual);
  apply_cl<T, P, 1>(sh, x, mean, invstd, weight, bias, y, residual);
}

template <typename T, typename P>
void backward_channels_last(const BatchNormShape& sh, bool training, const T* x, const T* gy,
                            const ReluMask<T, P>& mask, const P* mean, const P* invstd, const P* weight, T* gx, P* gw,
                            P* gb) {
  if (fits_lanes<T>(sh, {x, gy, mask.y, mask.masked_out, gx}))
    return backward_cl<T, P, kLanes16<T>>(sh, training, x, gy, mask, mean, invstd, weight, gx, gw, gb);
  backward_cl<T, P, 1>(sh, training, x, gy, mask, mean, invstd, weight, gx, gw, gb);
}

template <typename T>
void channel_sums_channels_last(const BatchNormShape& sh, const T* x, T* out) {
  if (fits_lanes<T>(sh, {x})) return channel_sums_cl<T, kLanes16<T>>(sh, x, out);
  channel_sums_cl<T, 1>(sh, x, out);
}

// The dtype pairs of dispatch_batch_norm: P = T, or float for a 16-bit T.
#define EMBER_BATCH_NORM_CHANNELS_LAST(T, P)                                                                  \
  template void stats_channels_last<T, P>(const BatchNormShape&, const T*, const BatchNormStats&);          \
  template void apply_channels_last<T, P>(const BatchNormShape&, const T*, const P*, const P*, const P*,      \
                                          const P*, T*, const T*);                                            \
  template void backward_channels_last<T, P>(const BatchNormShape&, bool, const T*, const T*,                 \
                                             const ReluMask<T, P>&, const P*, const P*, const P*, T*, P*, P*);
EMBER_BATCH_NORM_CHANNELS_LAST(float, float)
EMBER_BATCH_NORM_CHANNELS_LAST(double, double)
EMBER_BATCH_NORM_CHANNELS_LAST(Half, Half)
EMBER_BATCH_NORM_CHANNELS_LAST(Half, float)
EMBER_BATCH_NORM_CHANNELS_LAST(BFloat16, BFloat16)
EMBER_BATCH_NORM_CHANNELS_LAST(BFloat16, float)
#undef EMBER_BATCH_NORM_CHANNELS_LAST
template void channel_sums_channels_last<float>(const BatchNormShape&, const float*, float*);
template void channel_sums_channels_last<double>(const BatchNormShape&, const double*, double*);
template void channel_sums_channels_last<Half>(const BatchNormShape&, const Half*, Half*);
template void channel_sums_channels_last<BFloat16>(const BatchNormShape&, const BFloat16*, BFloat16*);

}  // namespace ember::kernels::gpu::batchnorm_detail
