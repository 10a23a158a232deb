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
// Two-pass variance: the block first reduces the sum, every thread gets the mean, then the block
// reduces the squared deviations. The elementwise passes (apply, grad_x) walk planes: Note [Batch
// norm without per-element division]. Channels-last (N, S, C) order has kernels of its own: Note
// [Channels-last batch norm].
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
// two-pass variance becomes partial sums -> mean -> partial squared deviations -> variance. The
// slices and their order are fixed by the shape and the device's SM count, so results are
// deterministic. With one slice (small problems) the fused one-block-per-channel kernels run.
//
// Note [Channels-last batch norm]
// A channels-last (NHWC) activation (sh.channels_last) holds its R = n * s positions as rows of C
// channels: an R x C row-major matrix whose column c is channel c. The (N, C, S) kernels above
// could only take it copied to NCHW, with the result copied back: a read and a write of x and y
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
//    backward_finalize_kernel add the slices in order. The statistics are the NCHW kernels' math
//    — the mean, then the centred squares about it — and the backward's two sums likewise; only
//    the order in which the sums are added differs, so results differ from the NCHW kernels' in
//    the last bits of a float sum, and are the same from run to run (the slices depend on the
//    shape, V and the SM count only).
//  - Elementwise passes (apply; grad_x): the same block shape, blockIdx.x over chunks of
//    groups, rows strided over blockIdx.y. A thread stays in its columns, so it loads its
//    channels' means and scales once and needs no division or modulo per element (Note [Batch
//    norm without per-element division]); the arithmetic per element is the NCHW kernels',
//    expression for expression.

#include "launch.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "../../core/error.h"
#include "batchnorm.h"
#include "block_reduce.cuh"
#include "common.cuh"
#include "../../core/cuda/runtime.h"

namespace ember::kernels::gpu {

namespace {

constexpr int kThreads = 256;

using detail::ChannelWalk;
using detail::kLanes16;
using detail::Pack;
using detail::vector_load;
using detail::vector_store;

template <typename T, typename P>
__global__ void stats_kernel(BatchNormShape sh, const T* x, P* mean, P* var) {
  using A = acc_t<T>;
  const int64_t c = blockIdx.x, count = sh.n * sh.s;
  A sum = 0;
  ChannelWalk w(threadIdx.x, blockDim.x, sh.s);
  for (int64_t k = threadIdx.x; k < count; k += blockDim.x, w.advance()) sum += static_cast<A>(x[w.offset(sh.c, c)]);
  const A m = detail::block_sum(sum) / static_cast<A>(count);
  A sq = 0;
  w = ChannelWalk(threadIdx.x, blockDim.x, sh.s);
  for (int64_t k = threadIdx.x; k < count; k += blockDim.x, w.advance()) {
    const A d = static_cast<A>(x[w.offset(sh.c, c)]) - m;
    sq += d * d;
  }
  sq = detail::block_sum(sq);
  if (threadIdx.x == 0) {
    mean[c] = static_cast<P>(m);
    var[c] = static_cast<P>(sq / static_cast<A>(count));
  }
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
      y[base + j] = fused_epilogue<T>((static_cast<A>(x[base + j]) - m) * scale + shift, residual, base + j, sh.relu);
  }
}

// Backward pass 1, one block per channel: sum(grad_y) and sum(grad_y * xhat) in acc_t<T>. Writes
// grad_weight / grad_bias when wanted and both sums to `sums` (2 C acc_t<T> values) for pass 2.
template <typename T, typename P>
__global__ void backward_reduce_kernel(BatchNormShape sh, const T* x, const T* gy, const T* mask, const P* mean,
                                       const P* invstd, P* gw, P* gb, acc_t<T>* sums) {
  using A = acc_t<T>;
  const int64_t c = blockIdx.x, count = sh.n * sh.s;
  const A m = static_cast<A>(mean[c]), is = static_cast<A>(invstd[c]);
  A sg = 0, sgx = 0;
  ChannelWalk w(threadIdx.x, blockDim.x, sh.s);
  for (int64_t k = threadIdx.x; k < count; k += blockDim.x, w.advance()) {
    const int64_t off = w.offset(sh.c, c);
    const A g = masked_grad(gy, mask, off);
    sg += g;
    sgx += g * (static_cast<A>(x[off]) - m) * is;
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
__global__ void backward_input_kernel(BatchNormShape sh, const T* x, const T* gy, const T* mask, const P* mean,
                                      const P* invstd, const P* weight, const acc_t<T>* sums, T* gx) {
  using A = acc_t<T>;
  const A count = static_cast<A>(sh.n * sh.s);
  for (int64_t plane = blockIdx.y * int64_t{blockDim.y} + threadIdx.y; plane < sh.n * sh.c;
       plane += int64_t{gridDim.y} * blockDim.y) {  // as apply_kernel
    const int64_t c = plane % sh.c, base = plane * sh.s;
    const A m = static_cast<A>(mean[c]), is = static_cast<A>(invstd[c]);
    const A w = weight ? static_cast<A>(weight[c]) : A(1);
    const A mean_g = sums ? sums[c] / count : A(0);
    const A mean_gx = sums ? sums[sh.c + c] / count : A(0);
    for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < sh.s; j += int64_t{gridDim.x} * blockDim.x) {
      const int64_t idx = base + j;
      const A xhat = (static_cast<A>(x[idx]) - m) * is;
      gx[idx] = static_cast<T>(w * is * (masked_grad(gy, mask, idx) - mean_g - xhat * mean_gx));
    }
  }
}

// ---- split reductions (Note [Split channel reductions]) ----------------------------------------

// Elements [lo, hi) of a channel's count are slice `part` of `parts`.
__device__ inline void channel_slice(int64_t count, int64_t part, int64_t parts, int64_t* lo, int64_t* hi) {
  *lo = count * part / parts;
  *hi = count * (part + 1) / parts;
}

// Block (c, part): sum of x (mean == null) or of (x - mean[c])^2 over its slice -> partial[c * parts + part].
template <typename T>
__global__ void stats_partial_kernel(BatchNormShape sh, const T* x, const acc_t<T>* mean, acc_t<T>* partial) {
  using A = acc_t<T>;
  const int64_t c = blockIdx.x, part = blockIdx.y, parts = gridDim.y;
  int64_t lo, hi;
  channel_slice(sh.n * sh.s, part, parts, &lo, &hi);
  const A m = mean ? mean[c] : A(0);
  A acc = 0;
  ChannelWalk w(lo + threadIdx.x, blockDim.x, sh.s);
  for (int64_t k = lo + threadIdx.x; k < hi; k += blockDim.x, w.advance()) {
    const A v = static_cast<A>(x[w.offset(sh.c, c)]);
    acc += mean ? (v - m) * (v - m) : v;
  }
  acc = detail::block_sum(acc);
  if (threadIdx.x == 0) partial[c * parts + part] = acc;
}

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

// Block (c, part): sum(grad_y) and sum(grad_y * xhat) over its slice -> partial[2 (c * parts + part) + {0, 1}].
template <typename T, typename P>
__global__ void backward_partial_kernel(BatchNormShape sh, const T* x, const T* gy, const T* mask, const P* mean,
                                        const P* invstd, acc_t<T>* partial) {
  using A = acc_t<T>;
  const int64_t c = blockIdx.x, part = blockIdx.y, parts = gridDim.y;
  int64_t lo, hi;
  channel_slice(sh.n * sh.s, part, parts, &lo, &hi);
  const A m = static_cast<A>(mean[c]), is = static_cast<A>(invstd[c]);
  A sg = 0, sgx = 0;
  ChannelWalk w(lo + threadIdx.x, blockDim.x, sh.s);
  for (int64_t k = lo + threadIdx.x; k < hi; k += blockDim.x, w.advance()) {
    const int64_t off = w.offset(sh.c, c);
    const A g = masked_grad(gy, mask, off);
    sg += g;
    sgx += g * (static_cast<A>(x[off]) - m) * is;
  }
  sg = detail::block_sum(sg);
  sgx = detail::block_sum(sgx);
  if (threadIdx.x == 0) {
    partial[2 * (c * parts + part)] = sg;
    partial[2 * (c * parts + part) + 1] = sgx;
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

// Block (chunk, part): for each of its columns c, the sum of x (mean == null) or of (x - mean[c])^2
// over the rows of slice `part` -> partial[c * parts + part] (stats_partial_kernel's layout).
template <typename T, int V>
__global__ void stats_partial_cl_kernel(BatchNormShape sh, const T* x, const acc_t<T>* mean, acc_t<T>* partial) {
  using A = acc_t<T>;
  const int64_t c0 = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * V, part = blockIdx.y, parts = gridDim.y;
  int64_t lo, hi;
  channel_slice(sh.n * sh.s, part, parts, &lo, &hi);  // a column's elements are the rows
  A acc[V] = {}, m[V] = {};
  if (c0 < sh.c) {
    if (mean)
      for (int j = 0; j < V; ++j) m[j] = mean[c0 + j];
    for (int64_t r = lo + threadIdx.y; r < hi; r += blockDim.y) {
      const Pack<T, V> v = vector_load<V>(x + r * sh.c + c0);
      for (int j = 0; j < V; ++j) {
        const A e = static_cast<A>(v.v[j]);
        acc[j] += mean ? (e - m[j]) * (e - m[j]) : e;
      }
    }
  }
  column_sums(acc);  // outside the `if`: every thread reaches the barriers
  if (threadIdx.y == 0 && c0 < sh.c)
    for (int j = 0; j < V; ++j) partial[(c0 + j) * parts + part] = acc[j];
}

// Block (chunk, part): sum(grad_y) and sum(grad_y * xhat) of each of its columns over the rows of
// slice `part` -> partial[2 (c * parts + part) + {0, 1}] (backward_partial_kernel's layout).
template <typename T, typename P, int V>
__global__ void backward_partial_cl_kernel(BatchNormShape sh, const T* x, const T* gy, const T* mask,
                                           const P* mean, const P* invstd, acc_t<T>* partial) {
  using A = acc_t<T>;
  const int64_t c0 = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * V, part = blockIdx.y, parts = gridDim.y;
  int64_t lo, hi;
  channel_slice(sh.n * sh.s, part, parts, &lo, &hi);
  A sums[2 * V] = {};  // sum(grad_y) of column c0 + j in sums[j], sum(grad_y * xhat) in sums[V + j]
  if (c0 < sh.c) {
    A m[V], is[V];
    for (int j = 0; j < V; ++j) m[j] = static_cast<A>(mean[c0 + j]), is[j] = static_cast<A>(invstd[c0 + j]);
    for (int64_t r = lo + threadIdx.y; r < hi; r += blockDim.y) {
      const int64_t at = r * sh.c + c0;
      const Pack<T, V> xv = vector_load<V>(x + at), gv = vector_load<V>(gy + at);
      const Pack<T, V> yv = mask ? vector_load<V>(mask + at) : Pack<T, V>{};
      for (int j = 0; j < V; ++j) {
        const A g = masked_grad(gv.v, mask ? yv.v : nullptr, j);
        sums[j] += g;
        sums[V + j] += g * (static_cast<A>(xv.v[j]) - m[j]) * is[j];
      }
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
      out.v[j] = fused_epilogue<T>((static_cast<A>(xv.v[j]) - m[j]) * scale[j] + shift[j], residual ? rv.v : nullptr,
                                   j, sh.relu);
    vector_store<V>(y + at, out);
  }
}

// backward_input_kernel's expression, V columns per thread; `sums` is null in eval mode.
template <typename T, typename P, int V>
__global__ void backward_input_cl_kernel(BatchNormShape sh, const T* x, const T* gy, const T* mask,
                                         const P* mean, const P* invstd, const P* weight, const acc_t<T>* sums,
                                         T* gx) {
  using A = acc_t<T>;
  const int64_t c0 = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * V, rows = sh.n * sh.s;
  if (c0 >= sh.c) return;
  const A count = static_cast<A>(rows);
  A m[V], is[V], w[V], mean_g[V], mean_gx[V];
  for (int j = 0; j < V; ++j) {
    const int64_t c = c0 + j;
    m[j] = static_cast<A>(mean[c]), is[j] = static_cast<A>(invstd[c]);
    w[j] = weight ? static_cast<A>(weight[c]) : A(1);
    mean_g[j] = sums ? sums[c] / count : A(0);
    mean_gx[j] = sums ? sums[sh.c + c] / count : A(0);
  }
  for (int64_t r = blockIdx.y * int64_t{blockDim.y} + threadIdx.y; r < rows; r += int64_t{gridDim.y} * blockDim.y) {
    const int64_t at = r * sh.c + c0;
    const Pack<T, V> xv = vector_load<V>(x + at), gv = vector_load<V>(gy + at);
    const Pack<T, V> yv = mask ? vector_load<V>(mask + at) : Pack<T, V>{};
    Pack<T, V> out;
    for (int j = 0; j < V; ++j) {
      const A xhat = (static_cast<A>(xv.v[j]) - m[j]) * is[j];
      out.v[j] = static_cast<T>(w[j] * is[j] * (masked_grad(gv.v, mask ? yv.v : nullptr, j) - mean_g[j] -
                                                xhat * mean_gx[j]));
    }
    vector_store<V>(gx + at, out);
  }
}

// Slices per channel: enough blocks in all to give every SM about four, but at least
// kMinPerBlock elements per block (fewer and the partials cost more than they save).
constexpr int64_t kMinPerBlock = int64_t{kThreads} * 16;

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
template <typename T>
bool fits_lanes(const BatchNormShape& sh, std::initializer_list<const void*> tensors) {
  return sh.c % kLanes16<T> == 0 && detail::all_aligned(tensors, 16);  // null pointers pass
}

void check_shape(const char* op, const BatchNormShape& sh) {
  EMBER_CHECK(sh.n >= 0 && sh.c >= 0 && sh.s >= 0, op, ": negative size (n=", sh.n, " c=", sh.c, " s=", sh.s, ")");
  EMBER_CHECK(sh.c <= 2147483647, op, ": ", sh.c, " channels do not fit one grid");
}

// Channels-last launchers: the same steps for every shape (split reductions with one or more
// slices), sh.c > 0, V columns per thread (sh.c % V == 0, the tensors V * sizeof(T) aligned).
template <typename T, typename P, int V>
void stats_cl(const BatchNormShape& sh, const T* x, P* mean, P* var) {
  using A = acc_t<T>;
  const cuda::Stream stream = cuda::current_stream();
  const ColumnBlock cb(sh, V);
  const int64_t slices = cb.slices(sh);
  cuda::Scratch partial(static_cast<size_t>(sh.c * slices) * sizeof(A));
  cuda::Scratch mean_d(static_cast<size_t>(sh.c) * sizeof(A));
  const dim3 grid(cb.chunks, static_cast<unsigned>(slices));
  const unsigned fin_blocks = detail::grid_stride_blocks(sh.c, kThreads);
  const A count = static_cast<A>(sh.n * sh.s);  // 0 rows: 0 / 0 = NaN statistics, as on the CPU
  EMBER_LAUNCH((stats_partial_cl_kernel<T, V>), grid, cb.block, 0, stream, sh, x, static_cast<const A*>(nullptr),
               partial.as<A>());
  cuda::check_launch("batch_norm stats");
  EMBER_LAUNCH_FLAT((stats_finalize_kernel<T, P>), fin_blocks, kThreads, stream, sh.c, slices, count,
                    static_cast<const A*>(partial.as<A>()), mean_d.as<A>(), mean);
  cuda::check_launch("batch_norm stats");
  EMBER_LAUNCH((stats_partial_cl_kernel<T, V>), grid, cb.block, 0, stream, sh, x,
               static_cast<const A*>(mean_d.as<A>()), partial.as<A>());
  cuda::check_launch("batch_norm stats");
  EMBER_LAUNCH_FLAT((stats_finalize_kernel<T, P>), fin_blocks, kThreads, stream, sh.c, slices, count,
                    static_cast<const A*>(partial.as<A>()), static_cast<A*>(nullptr), var);
  cuda::check_launch("batch_norm stats");
}

template <typename T, typename P, int V>
void apply_cl(const BatchNormShape& sh, const T* x, const P* mean, const P* invstd, const P* weight, const P* bias,
              T* y, const T* residual) {
  const ColumnBlock cb(sh, V);
  EMBER_LAUNCH_FLAT((apply_cl_kernel<T, P, V>), cb.elementwise_grid(sh), cb.block, cuda::current_stream(), sh, x,
                    mean, invstd, weight, bias, y, residual);
  cuda::check_launch("batch_norm apply");
}

template <typename T, typename P, int V>
void backward_cl(const BatchNormShape& sh, bool training, const T* x, const T* gy, const T* mask, const P* mean,
                 const P* invstd, const P* weight, T* gx, P* gw, P* gb) {
  using A = acc_t<T>;
  const cuda::Stream stream = cuda::current_stream();
  const ColumnBlock cb(sh, V);
  const bool need_sums = gx != nullptr && training;
  cuda::Scratch sums(need_sums ? 2 * static_cast<size_t>(sh.c) * sizeof(A) : 0);
  if (gw || gb || need_sums) {
    const int64_t slices = cb.slices(sh);
    cuda::Scratch partial(2 * static_cast<size_t>(sh.c * slices) * sizeof(A));
    EMBER_LAUNCH((backward_partial_cl_kernel<T, P, V>), dim3(cb.chunks, static_cast<unsigned>(slices)), cb.block, 0,
                 stream, sh, x, gy, mask, mean, invstd, partial.as<A>());
    cuda::check_launch("batch_norm backward");
    EMBER_LAUNCH_FLAT((backward_finalize_kernel<T, P>), detail::grid_stride_blocks(sh.c, kThreads), kThreads, stream,
                      sh.c, slices, static_cast<const A*>(partial.as<A>()), gw, gb, sums.as<A>());
    cuda::check_launch("batch_norm backward");
  }
  if (!gx || sh.n * sh.s == 0) return;
  EMBER_LAUNCH_FLAT((backward_input_cl_kernel<T, P, V>), cb.elementwise_grid(sh), cb.block, stream, sh, x, gy, mask,
                    mean, invstd, weight, static_cast<const A*>(sums.as<A>()), gx);
  cuda::check_launch("batch_norm backward");
}

template <typename T, typename P>
void stats_impl(const BatchNormShape& sh, const T* x, P* mean, P* var) {
  using A = acc_t<T>;
  check_shape("batch_norm", sh);
  if (sh.c == 0) return;
  if (sh.channels_last) {
    if (fits_lanes<T>(sh, {x})) return stats_cl<T, P, kLanes16<T>>(sh, x, mean, var);
    return stats_cl<T, P, 1>(sh, x, mean, var);
  }
  const cuda::Stream stream = cuda::current_stream();
  const int64_t splits = channel_splits(sh);
  if (splits == 1) {
    // n * s == 0 gives 0 / 0 = NaN statistics, as on the CPU.
    EMBER_LAUNCH((stats_kernel<T, P>), static_cast<unsigned>(sh.c), kThreads, 0, stream, sh, x, mean, var);
    cuda::check_launch("batch_norm stats");
    return;
  }
  cuda::Scratch partial(static_cast<size_t>(sh.c * splits) * sizeof(A));
  cuda::Scratch mean_d(static_cast<size_t>(sh.c) * sizeof(A));
  const dim3 grid(static_cast<unsigned>(sh.c), static_cast<unsigned>(splits));
  const unsigned fin_blocks = detail::grid_stride_blocks(sh.c, kThreads);
  const A count = static_cast<A>(sh.n * sh.s);
  EMBER_LAUNCH(stats_partial_kernel<T>, grid, kThreads, 0, stream, sh, x, static_cast<const A*>(nullptr),
               partial.as<A>());
  cuda::check_launch("batch_norm stats");
  EMBER_LAUNCH_FLAT((stats_finalize_kernel<T, P>), fin_blocks, kThreads, stream, sh.c, splits, count,
                    static_cast<const A*>(partial.as<A>()), mean_d.as<A>(), mean);
  cuda::check_launch("batch_norm stats");
  EMBER_LAUNCH(stats_partial_kernel<T>, grid, kThreads, 0, stream, sh, x, static_cast<const A*>(mean_d.as<A>()),
               partial.as<A>());
  cuda::check_launch("batch_norm stats");
  EMBER_LAUNCH_FLAT((stats_finalize_kernel<T, P>), fin_blocks, kThreads, stream, sh.c, splits, count,
                    static_cast<const A*>(partial.as<A>()), static_cast<A*>(nullptr), var);
  cuda::check_launch("batch_norm stats");
}

template <typename T, typename P>
void apply_impl(const BatchNormShape& sh, const T* x, const P* mean, const P* invstd, const P* weight, const P* bias,
                T* y, const T* residual) {
  check_shape("batch_norm", sh);
  const int64_t total = sh.n * sh.c * sh.s;
  if (total == 0) return;
  if (!sh.relu) residual = nullptr;  // Note [Batch norm with a fused ReLU]: a residual goes with the ReLU
  if (sh.channels_last) {
    if (fits_lanes<T>(sh, {x, y, residual}))
      return apply_cl<T, P, kLanes16<T>>(sh, x, mean, invstd, weight, bias, y, residual);
    return apply_cl<T, P, 1>(sh, x, mean, invstd, weight, bias, y, residual);
  }
  const PlaneGrid pg(sh);
  EMBER_LAUNCH_FLAT((apply_kernel<T, P>), pg.grid, pg.block, cuda::current_stream(), sh, x, mean, invstd, weight,
                    bias, y, residual);
  cuda::check_launch("batch_norm apply");
}

template <typename T, typename P>
void backward_impl(const BatchNormShape& sh, bool training, const T* x, const T* gy, const P* mean, const P* invstd,
                   const P* weight, T* gx, P* gw, P* gb, const T* y) {
  using A = acc_t<T>;
  check_shape("batch_norm backward", sh);
  EMBER_CHECK(!sh.relu || y != nullptr, "batch_norm backward: a fused ReLU needs its output y");
  const T* mask = sh.relu ? y : nullptr;  // Note [Batch norm with a fused ReLU]
  if (sh.c == 0) return;
  if (sh.channels_last) {
    if (fits_lanes<T>(sh, {x, gy, mask, gx}))
      return backward_cl<T, P, kLanes16<T>>(sh, training, x, gy, mask, mean, invstd, weight, gx, gw, gb);
    return backward_cl<T, P, 1>(sh, training, x, gy, mask, mean, invstd, weight, gx, gw, gb);
  }
  const bool need_sums = gx != nullptr && training;
  cuda::Scratch sums(need_sums ? 2 * static_cast<size_t>(sh.c) * sizeof(A) : 0);
  const int64_t splits = channel_splits(sh);
  if ((gw || gb || need_sums) && splits == 1) {
    EMBER_LAUNCH((backward_reduce_kernel<T, P>), static_cast<unsigned>(sh.c), kThreads, 0, cuda::current_stream(),
                 sh, x, gy, mask, mean, invstd, gw, gb, sums.as<A>());
    cuda::check_launch("batch_norm backward");
  } else if (gw || gb || need_sums) {
    cuda::Scratch partial(2 * static_cast<size_t>(sh.c * splits) * sizeof(A));
    const dim3 grid(static_cast<unsigned>(sh.c), static_cast<unsigned>(splits));
    EMBER_LAUNCH((backward_partial_kernel<T, P>), grid, kThreads, 0, cuda::current_stream(), sh, x, gy, mask,
                 mean, invstd, partial.as<A>());
    cuda::check_launch("batch_norm backward");
    EMBER_LAUNCH_FLAT((backward_finalize_kernel<T, P>), detail::grid_stride_blocks(sh.c, kThreads), kThreads,
                      cuda::current_stream(), sh.c, splits, static_cast<const A*>(partial.as<A>()),
                      gw, gb, sums.as<A>());
    cuda::check_launch("batch_norm backward");
  }
  const int64_t total = sh.n * sh.c * sh.s;
  if (!gx || total == 0) return;
  const PlaneGrid pg(sh);
  EMBER_LAUNCH_FLAT((backward_input_kernel<T, P>), pg.grid, pg.block, cuda::current_stream(), sh, x, gy, mask,
                    mean, invstd, weight, static_cast<const A*>(sums.as<A>()), gx);
  cuda::check_launch("batch_norm backward");
}

// The first pass of the statistics alone: out[c] = the sum of channel c's values, in the split
// layouts' order (partials of slices, added in slice order by stats_finalize_kernel with a count
// of 1), rounded to T once.
template <typename T, int V>
void channel_sums_cl(const BatchNormShape& sh, const T* x, T* out) {
  using A = acc_t<T>;
  const ColumnBlock cb(sh, V);
  const int64_t slices = cb.slices(sh);
  cuda::Scratch partial(static_cast<size_t>(sh.c * slices) * sizeof(A));
  EMBER_LAUNCH((stats_partial_cl_kernel<T, V>), dim3(cb.chunks, static_cast<unsigned>(slices)), cb.block, 0,
               cuda::current_stream(), sh, x, static_cast<const A*>(nullptr), partial.as<A>());
  cuda::check_launch("channel sums");
  EMBER_LAUNCH_FLAT((stats_finalize_kernel<T, T>), detail::grid_stride_blocks(sh.c, kThreads), kThreads,
                    cuda::current_stream(), sh.c, slices, A(1), static_cast<const A*>(partial.as<A>()),
                    static_cast<A*>(nullptr), out);
  cuda::check_launch("channel sums");
}

template <typename T>
void channel_sums_impl(const BatchNormShape& sh, const T* x, T* out) {
  using A = acc_t<T>;
  check_shape("channel sums", sh);
  if (sh.c == 0) return;
  if (sh.channels_last) {
    if (fits_lanes<T>(sh, {x})) return channel_sums_cl<T, kLanes16<T>>(sh, x, out);
    return channel_sums_cl<T, 1>(sh, x, out);
  }
  const int64_t splits = channel_splits(sh);
  cuda::Scratch partial(static_cast<size_t>(sh.c * splits) * sizeof(A));
  EMBER_LAUNCH(stats_partial_kernel<T>, dim3(static_cast<unsigned>(sh.c), static_cast<unsigned>(splits)), kThreads,
               0, cuda::current_stream(), sh, x, static_cast<const A*>(nullptr), partial.as<A>());
  cuda::check_launch("channel sums");
  EMBER_LAUNCH_FLAT((stats_finalize_kernel<T, T>), detail::grid_stride_blocks(sh.c, kThreads), kThreads,
                    cuda::current_stream(), sh.c, splits, A(1), static_cast<const A*>(partial.as<A>()),
                    static_cast<A*>(nullptr), out);
  cuda::check_launch("channel sums");
}

}  // namespace

void batch_norm_stats(DType dtype, DType param_dtype, const BatchNormShape& sh, const void* x, void* mean, void* var) {
  dispatch_batch_norm("batch_norm", dtype, param_dtype, [&](auto t, auto p) {
    using T = decltype(t);
    using P = decltype(p);
    stats_impl<T, P>(sh, static_cast<const T*>(x), static_cast<P*>(mean), static_cast<P*>(var));
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
                         void* grad_weight, void* grad_bias, const void* y) {
  dispatch_batch_norm("batch_norm backward", dtype, param_dtype, [&](auto t, auto p) {
    using T = decltype(t);
    using P = decltype(p);
    backward_impl<T, P>(sh, training, static_cast<const T*>(x), static_cast<const T*>(grad_y),
                        static_cast<const P*>(mean), static_cast<const P*>(invstd), static_cast<const P*>(weight),
                        static_cast<T*>(grad_x), static_cast<P*>(grad_weight), static_cast<P*>(grad_bias),
                        static_cast<const T*>(y));
  });
}

void channel_sums(DType dtype, const BatchNormShape& sh, const void* x, void* out) {
  EMBER_DISPATCH_FLOATING(dtype, "channel sums", [&] {
    using T = scalar_t;
    channel_sums_impl<T>(sh, static_cast<const T*>(x), static_cast<T*>(out));
  });
}

}  // namespace ember::kernels::gpu
