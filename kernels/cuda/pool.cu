// 2-D pooling on a CUDA device: one thread per output cell forward, one thread per input cell
// backward.
//
// Note [Pooling backward as a gather]
// The CPU backward scatters: for every output cell, add its gradient to the input cells of its
// window. On a GPU with one thread per output cell, overlapping windows (stride < kernel, e.g.
// the 3x3 stride-2 max pool of ResNet; adaptive cells that share a row) would make two threads
// add to the same input cell, so a scatter needs atomicAdd — non-deterministic in floating point
// and slow under contention. Non-overlapping windows (the common 2x2 stride 2) could scatter
// with plain stores after a zeroing pass. Instead every backward here is a gather: one thread per
// INPUT cell walks the few output windows that can contain it (their range follows from the
// window arithmetic) and sums their contributions. Each input cell is written exactly once (no
// atomics, no zeroing pass, coalesced writes), and the sum runs over output cells in increasing
// order — the order of the CPU's scatter loop — so results match the CPU bit for bit, with
// overlapping windows or not.

#include "launch.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <vector>

#include "../../core/error.h"
#include "block_reduce.cuh"
#include "common.cuh"
#include "pool.h"
#include "../../core/cuda/runtime.h"

namespace ember::kernels::gpu {

namespace {

constexpr int kThreads = 256;

using detail::kLanes16;
using detail::Pack;
using detail::vector_load;
using detail::vector_store;

// Grid-stride loop over [0, total) for the flat kernels below.
#define EMBER_POOL_FOR(idx, total)                                                  \
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < (total); \
       idx += int64_t{gridDim.x} * blockDim.x)

__device__ inline int64_t ceil_div_nonneg(int64_t a, int64_t b) { return a <= 0 ? 0 : (a + b - 1) / b; }

// ---- max -------------------------------------------------------------------------------------
//
// Note [32-bit index math in max pooling]
// The max-pooling kernels turn a linear index into (plane or image, row, column[, channel]) and
// find a cell's windows with several divisions per element; a 64-bit integer division is a long
// software routine on a GPU (Note [32-bit index math] in conv.cu). So they are templates on the
// index type J: the launcher picks int32_t whenever every cell index fits (ResNet's stem pooling
// at batch 256 has 2^27.6 input cells), int64_t otherwise, and each thread copies the geometry
// into J-typed locals (MaxIndex) once. EMBER_POOL_INDEX=64 runs the int64 kernels everywhere: the
// test of that path (ctest cuda-index64:pool).

template <typename J>
struct MaxIndex {
  J in_h, in_w, out_h, out_w, k_h, k_w, s_h, s_w, p_h, p_w, d_h, d_w;
  __host__ __device__ explicit MaxIndex(const Pool2dGeometry& g)
      : in_h(static_cast<J>(g.in_h)),
        in_w(static_cast<J>(g.in_w)),
        out_h(static_cast<J>(g.out_h)),
        out_w(static_cast<J>(g.out_w)),
        k_h(static_cast<J>(g.kernel_h)),
        k_w(static_cast<J>(g.kernel_w)),
        s_h(static_cast<J>(g.stride_h)),
        s_w(static_cast<J>(g.stride_w)),
        p_h(static_cast<J>(g.pad_h)),
        p_w(static_cast<J>(g.pad_w)),
        d_h(static_cast<J>(g.dilation_h)),
        d_w(static_cast<J>(g.dilation_w)) {}
};

// Grid-stride loop over [0, total) in index type J.
#define EMBER_POOL_FOR_J(J, idx, total)                                                                              \
  for (J idx = static_cast<J>(blockIdx.x) * static_cast<J>(blockDim.x) + static_cast<J>(threadIdx.x); idx < (total); \
       idx += static_cast<J>(gridDim.x) * static_cast<J>(blockDim.x))

template <typename J>
__device__ inline J ceil_div_nonneg_j(J a, J b) {
  return a <= 0 ? J(0) : (a + b - 1) / b;
}

// The max of output cell (oh, ow)'s window over V adjacent planes whose element (ih, iw) is
// xp[(ih * in_w + iw) * step + j], j < V (V = 1, step 1: an NCHW plane; step C: V channels of an
// NHWC image, read as one Pack when V > 1: Note [Channels-last max pooling]). The window walk and
// the comparison rule are the CPU's general loop (kernels/cpu/pool.cpp) verbatim, for each of the
// V planes: start at -inf on the first tap that is not padding; a strictly larger value or a NaN
// takes over. best[j] is the in-plane position ih * in_w + iw.
template <int V, typename T, typename J>
__device__ inline void max_window(const MaxIndex<J>& q, J oh, J ow, const T* xp, J step, acc_t<T> (&best_v)[V],
                                  J (&best)[V]) {
  J h0 = oh * q.s_h - q.p_h;
  const J h1 = min(h0 + (q.k_h - 1) * q.d_h + 1, q.in_h);
  while (h0 < 0) h0 += q.d_h;
  J w0 = ow * q.s_w - q.p_w;
  const J w1 = min(w0 + (q.k_w - 1) * q.d_w + 1, q.in_w);
  while (w0 < 0) w0 += q.d_w;
  for (int j = 0; j < V; ++j) {
    best[j] = h0 * q.in_w + w0;
    best_v[j] = -std::numeric_limits<acc_t<T>>::infinity();  // f16/bf16 compared as float
  }
  for (J ih = h0; ih < h1; ih += q.d_h) {
    for (J iw = w0; iw < w1; iw += q.d_w) {
      const J i = ih * q.in_w + iw;
      const Pack<T, V> p = vector_load<V>(xp + i * step);
      for (int j = 0; j < V; ++j) {
        const acc_t<T> v = static_cast<acc_t<T>>(p.v[j]);
        if (v > best_v[j] || v != v) {
          best_v[j] = v;
          best[j] = i;
        }
      }
    }
  }
}

// One thread per output cell (p, oh, ow), consecutive threads on consecutive ow: reads of a
// window row are strided by stride_w across the warp, writes are coalesced.
template <typename T, typename I, typename J>
__global__ void max_forward_kernel(Pool2dGeometry g, const T* x, T* out, I* indices) {
  const MaxIndex<J> q(g);
  const J out_plane = q.out_h * q.out_w, total = static_cast<J>(g.planes) * out_plane;
  EMBER_POOL_FOR_J(J, idx, total) {
    const J ow = idx % q.out_w, oh = (idx / q.out_w) % q.out_h, p = idx / out_plane;
    acc_t<T> best_v[1];
    J best[1];
    max_window<1>(q, oh, ow, x + p * q.in_h * q.in_w, J(1), best_v, best);
    out[idx] = static_cast<T>(best_v[0]);  // exact: best_v is one of x's values (or -inf)
    indices[idx] = static_cast<I>(best[0]);
  }
}

// The gradient gathered by input cell (ih, iw) of V adjacent planes (Note [Pooling backward as a
// gather]): output row oh's window covers input rows [oh s - pad, oh s - pad + (k - 1) dil], so row
// ih is in the windows with ceil((ih + pad - (k - 1) dil) / s) <= oh <= floor((ih + pad) / s); for
// each plane j, the sum of grad_out over those whose recorded argmax is this cell, in increasing
// (oh, ow). Plane j's output cell (oh, ow) is at go[(oh * out_w + ow) * step + j] and ip[...]
// likewise (V > 1: one Pack of each).
template <int V, typename T, typename I, typename J>
__device__ inline void max_gather(const MaxIndex<J>& q, J ih, J iw, const T* go, const I* ip, J step,
                                  acc_t<T> (&acc)[V]) {
  const J me = ih * q.in_w + iw;
  const J oh_lo = ceil_div_nonneg_j(ih + q.p_h - (q.k_h - 1) * q.d_h, q.s_h);
  const J oh_hi = min((ih + q.p_h) / q.s_h, q.out_h - 1);
  const J ow_lo = ceil_div_nonneg_j(iw + q.p_w - (q.k_w - 1) * q.d_w, q.s_w);
  const J ow_hi = min((iw + q.p_w) / q.s_w, q.out_w - 1);
  for (int j = 0; j < V; ++j) acc[j] = 0;  // f16/bf16: summed in float, rounded once
  for (J oh = oh_lo; oh <= oh_hi; ++oh)
    for (J ow = ow_lo; ow <= ow_hi; ++ow) {
      const J o = (oh * q.out_w + ow) * step;
      const Pack<I, V> at = vector_load<V>(ip + o);
      const Pack<T, V> g = vector_load<V>(go + o);
      for (int j = 0; j < V; ++j)
        if (static_cast<int64_t>(at.v[j]) == static_cast<int64_t>(me)) acc[j] += static_cast<acc_t<T>>(g.v[j]);
    }
}

// One thread per input cell.
template <typename T, typename I, typename J>
__global__ void max_backward_kernel(Pool2dGeometry g, const T* grad_out, const I* indices, T* grad_in) {
  const MaxIndex<J> q(g);
  const J in_plane = q.in_h * q.in_w, out_plane = q.out_h * q.out_w, total = static_cast<J>(g.planes) * in_plane;
  EMBER_POOL_FOR_J(J, idx, total) {
    const J iw = idx % q.in_w, ih = (idx / q.in_w) % q.in_h, p = idx / in_plane;
    acc_t<T> acc[1];
    max_gather<1>(q, ih, iw, grad_out + p * out_plane, indices + p * out_plane, J(1), acc);
    grad_in[idx] = static_cast<T>(acc[0]);
  }
}

// Note [Channels-last max pooling]
// A channels-last (N, H, W, C) tensor is pooled where it lies: the same windows, comparisons and
// gather as above, each plane's element (ih, iw) of channel c at ((n H + ih) W + iw) C + c. One
// thread per output cell (n, oh, ow) and group of V channels forward, per input cell (n, ih, iw)
// and group backward, with the group fastest, so a warp reads consecutive channels of one pixel
// (coalesced) where the NCHW kernels read along a row. V = 16 / sizeof(T) (8 for f16/bf16) when C
// is a multiple of it and the tensors are aligned to their packs: then every tap of the window is
// one 16-byte load, the index arithmetic (divisions included) is done once for V channels, and
// the output and index stores are vector stores; otherwise V = 1, one channel per thread. out,
// indices and grad_in are channels-last too; an index is the in-plane position ih * in_w + iw, as
// in NCHW (and PyTorch). The comparisons and the gather's order are the NCHW kernels', so the two
// layouts (and both V) give the same bits.
template <int V, typename T, typename I, typename J>
__global__ void max_forward_nhwc_kernel(Pool2dGeometry g, int64_t channels, const T* x, T* out, I* indices) {
  const MaxIndex<J> q(g);
  const J c_n = static_cast<J>(channels), groups = c_n / V;
  const J total = static_cast<J>(g.planes / V) * q.out_h * q.out_w;
  EMBER_POOL_FOR_J(J, idx, total) {
    const J c = (idx % groups) * V, pixel = idx / groups;  // pixel = (n * out_h + oh) * out_w + ow
    const J ow = pixel % q.out_w, oh = (pixel / q.out_w) % q.out_h, n = pixel / (q.out_w * q.out_h);
    acc_t<T> best_v[V];
    J best[V];
    max_window<V>(q, oh, ow, x + n * q.in_h * q.in_w * c_n + c, c_n, best_v, best);
    Pack<T, V> o;
    Pack<I, V> at;
    for (int j = 0; j < V; ++j) {
      o.v[j] = static_cast<T>(best_v[j]);
      at.v[j] = static_cast<I>(best[j]);
    }
    vector_store<V>(out + pixel * c_n + c, o);
    vector_store<V>(indices + pixel * c_n + c, at);
  }
}

template <int V, typename T, typename I, typename J>
__global__ void max_backward_nhwc_kernel(Pool2dGeometry g, int64_t channels, const T* grad_out, const I* indices,
                                         T* grad_in) {
  const MaxIndex<J> q(g);
  const J c_n = static_cast<J>(channels), groups = c_n / V, out_image = q.out_h * q.out_w * c_n;
  const J total = static_cast<J>(g.planes / V) * q.in_h * q.in_w;
  EMBER_POOL_FOR_J(J, idx, total) {
    const J c = (idx % groups) * V, pixel = idx / groups;  // pixel = (n * in_h + ih) * in_w + iw
    const J iw = pixel % q.in_w, ih = (pixel / q.in_w) % q.in_h, n = pixel / (q.in_w * q.in_h);
    const J o = n * out_image + c;
    acc_t<T> acc[V];
    max_gather<V>(q, ih, iw, grad_out + o, indices + o, c_n, acc);
    Pack<T, V> r;
    for (int j = 0; j < V; ++j) r.v[j] = static_cast<T>(acc[j]);
    vector_store<V>(grad_in + pixel * c_n + c, r);
  }
}

#undef EMBER_POOL_FOR_J

// ---- average ---------------------------------------------------------------------------------

// The in-bounds part of one average window and its divisor: kernels/cpu/pool.cpp's avg_window.
struct AvgWindow {
  int64_t h0, h1, w0, w1;
  int64_t divisor;
};

__device__ inline AvgWindow avg_window(const Pool2dGeometry& g, bool count_include_pad, int64_t oh, int64_t ow) {
  int64_t h0 = oh * g.stride_h - g.pad_h, w0 = ow * g.stride_w - g.pad_w;
  int64_t h1 = min(h0 + g.kernel_h, g.in_h + g.pad_h), w1 = min(w0 + g.kernel_w, g.in_w + g.pad_w);
  const int64_t padded_size = (h1 - h0) * (w1 - w0);
  h0 = max(h0, int64_t{0});
  w0 = max(w0, int64_t{0});
  h1 = min(h1, g.in_h);
  w1 = min(w1, g.in_w);
  const int64_t inside = max(int64_t{0}, h1 - h0) * max(int64_t{0}, w1 - w0);
  return {h0, h1, w0, w1, count_include_pad ? padded_size : inside};
}

// One thread per output cell; the window is summed in acc_t<T> in row-major order (the CPU sums
// in cpu_acc_t: Note [Accumulation types] in core/dtype.h).
template <typename T>
__global__ void avg_forward_kernel(Pool2dGeometry g, bool count_include_pad, const T* x, T* out) {
  const int64_t out_plane = g.out_h * g.out_w;
  EMBER_POOL_FOR(idx, g.planes * out_plane) {
    const int64_t ow = idx % g.out_w, oh = (idx / g.out_w) % g.out_h, p = idx / out_plane;
    const T* xp = x + p * g.in_h * g.in_w;
    const AvgWindow w = avg_window(g, count_include_pad, oh, ow);
    acc_t<T> acc = 0;
    for (int64_t ih = w.h0; ih < w.h1; ++ih)
      for (int64_t iw = w.w0; iw < w.w1; ++iw) acc += static_cast<acc_t<T>>(xp[ih * g.in_w + iw]);
    out[idx] =
        w.divisor > 0 && w.h0 < w.h1 && w.w0 < w.w1 ? static_cast<T>(acc / static_cast<acc_t<T>>(w.divisor)) : T(0);
  }
}

// One thread per input cell: the windows that can hold row ih are those with
// ceil((ih + pad - k + 1) / s) <= oh <= floor((ih + pad) / s); each adds grad_out / divisor
// (computed in T, as the CPU's `share`) when its clipped window really contains the cell.
template <typename T>
__global__ void avg_backward_kernel(Pool2dGeometry g, bool count_include_pad, const T* grad_out, T* grad_in) {
  const int64_t in_plane = g.in_h * g.in_w, out_plane = g.out_h * g.out_w;
  EMBER_POOL_FOR(idx, g.planes * in_plane) {
    const int64_t iw = idx % g.in_w, ih = (idx / g.in_w) % g.in_h, p = idx / in_plane;
    const int64_t oh_lo = ceil_div_nonneg(ih + g.pad_h - g.kernel_h + 1, g.stride_h);
    const int64_t oh_hi = min((ih + g.pad_h) / g.stride_h, g.out_h - 1);
    const int64_t ow_lo = ceil_div_nonneg(iw + g.pad_w - g.kernel_w + 1, g.stride_w);
    const int64_t ow_hi = min((iw + g.pad_w) / g.stride_w, g.out_w - 1);
    const T* go = grad_out + p * out_plane;
    acc_t<T> acc = 0;  // f16/bf16: summed in float, rounded once
    for (int64_t oh = oh_lo; oh <= oh_hi; ++oh) {
      for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
        const AvgWindow w = avg_window(g, count_include_pad, oh, ow);
        if (w.divisor <= 0 || ih < w.h0 || ih >= w.h1 || iw < w.w0 || iw >= w.w1) continue;
        acc += static_cast<acc_t<T>>(go[oh * g.out_w + ow]) / static_cast<acc_t<T>>(w.divisor);
      }
    }
    grad_in[idx] = static_cast<T>(acc);
  }
}

// ---- adaptive average ------------------------------------------------------------------------

__device__ inline int64_t adaptive_start(int64_t i, int64_t out, int64_t in) { return (i * in) / out; }
__device__ inline int64_t adaptive_end(int64_t i, int64_t out, int64_t in) { return ((i + 1) * in + out - 1) / out; }

template <typename T>
__global__ void adaptive_forward_kernel(Pool2dGeometry g, const T* x, T* out) {
  const int64_t out_plane = g.out_h * g.out_w;
  EMBER_POOL_FOR(idx, g.planes * out_plane) {
    const int64_t ow = idx % g.out_w, oh = (idx / g.out_w) % g.out_h, p = idx / out_plane;
    const T* xp = x + p * g.in_h * g.in_w;
    const int64_t h0 = adaptive_start(oh, g.out_h, g.in_h), h1 = adaptive_end(oh, g.out_h, g.in_h);
    const int64_t w0 = adaptive_start(ow, g.out_w, g.in_w), w1 = adaptive_end(ow, g.out_w, g.in_w);
    acc_t<T> acc = 0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) acc += static_cast<acc_t<T>>(xp[ih * g.in_w + iw]);
    out[idx] = static_cast<T>(acc / static_cast<acc_t<T>>((h1 - h0) * (w1 - w0)));
  }
}

// One thread per input cell. Cell oh covers row ih iff floor(oh in / out) <= ih < ceil((oh + 1) in / out),
// i.e. floor(ih out / in) <= oh <= ceil((ih + 1) out / in) - 1; the bounds are re-checked with
// the forward's own arithmetic so that rounding can never add or drop a cell.
template <typename T>
__global__ void adaptive_backward_kernel(Pool2dGeometry g, const T* grad_out, T* grad_in) {
  const int64_t in_plane = g.in_h * g.in_w, out_plane = g.out_h * g.out_w;
  EMBER_POOL_FOR(idx, g.planes * in_plane) {
    const int64_t iw = idx % g.in_w, ih = (idx / g.in_w) % g.in_h, p = idx / in_plane;
    const int64_t oh_lo = (ih * g.out_h) / g.in_h;
    const int64_t oh_hi = min(((ih + 1) * g.out_h + g.in_h - 1) / g.in_h - 1, g.out_h - 1);
    const int64_t ow_lo = (iw * g.out_w) / g.in_w;
    const int64_t ow_hi = min(((iw + 1) * g.out_w + g.in_w - 1) / g.in_w - 1, g.out_w - 1);
    const T* go = grad_out + p * out_plane;
    acc_t<T> acc = 0;  // f16/bf16: summed in float, rounded once
    for (int64_t oh = oh_lo; oh <= oh_hi; ++oh) {
      const int64_t h0 = adaptive_start(oh, g.out_h, g.in_h), h1 = adaptive_end(oh, g.out_h, g.in_h);
      if (ih < h0 || ih >= h1) continue;
      for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
        const int64_t w0 = adaptive_start(ow, g.out_w, g.in_w), w1 = adaptive_end(ow, g.out_w, g.in_w);
        if (iw < w0 || iw >= w1) continue;
        acc += static_cast<acc_t<T>>(go[oh * g.out_w + ow]) / static_cast<acc_t<T>>((h1 - h0) * (w1 - w0));
      }
    }
    grad_in[idx] = static_cast<T>(acc);
  }
}

#undef EMBER_POOL_FOR

// ---- launchers -------------------------------------------------------------------------------

// Every pooling launch: one (grid-stride) thread per cell of `total`, nothing when empty;
// declared() is the launch's cost (Note [Launch ledger] in core/cuda/ledger.h).
template <typename Declared, typename Kernel, typename... Args>
void launch_cells(const char* op, int64_t total, const Declared& declared, Kernel kernel, Args... args) {
  if (total <= 0) return;
  EMBER_LAUNCH_FLAT(kernel, detail::grid_stride_blocks(total, kThreads), kThreads, cuda::current_stream(), declared(),
                    args...);
  cuda::check_launch(op);
}

// ---- declared costs --------------------------------------------------------------------------

// One axis of a pooling geometry as a launch's footprint sees it.
struct AxisCover {
  int64_t inputs = 0;   // input positions some window's tap reads
  int64_t outputs = 0;  // output positions whose window's span meets the input (the gathers read them)
  int64_t taps = 0;     // (output, input) pairs: the taps that fall inside the input
};

// Windows of k taps `dilation` apart from o * stride - pad (max pooling; average pooling with
// dilation 1, its window clipped to the input the same way).
AxisCover window_cover(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad, int64_t dilation) {
  AxisCover a;
  std::vector<char> seen(static_cast<size_t>(std::max<int64_t>(in, 0)), 0);
  for (int64_t o = 0; o < out; ++o) {
    const int64_t first = o * stride - pad;
    if (first < in && first + (k - 1) * dilation >= 0) ++a.outputs;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t i = first + j * dilation;
      if (i < 0 || i >= in) continue;
      ++a.taps;
      if (!seen[static_cast<size_t>(i)]) seen[static_cast<size_t>(i)] = 1, ++a.inputs;
    }
  }
  return a;
}

// Adaptive windows [floor(o in / out), ceil((o + 1) in / out)): they cover the input, each meets it.
AxisCover adaptive_cover(int64_t in, int64_t out) {
  AxisCover a{out > 0 ? in : 0, out, 0};
  for (int64_t o = 0; o < out; ++o) a.taps += ((o + 1) * in + out - 1) / out - (o * in) / out;
  return a;
}

// A pooling launch's cost from its axes' coverage; values of `elem` bytes, max pooling's indices of
// `index` bytes (0: an average). Forward: the covered input read; the output (and indices)
// written; a comparison per tap (max) or an add per tap and a division per output (average).
// Backward (a gather): the gradient (and indices) of the outputs whose windows meet the input
// read; grad_in written whole; an add per output's gradient at its argmax (max), or a division
// and an add per tap (average).
cuda::Cost pool_cost(const Pool2dGeometry& g, const AxisCover& h, const AxisCover& w, bool forward, size_t elem,
                     size_t index) {
  const double planes = static_cast<double>(g.planes), taps = planes * h.taps * w.taps;
  const double in = planes * g.in_h * g.in_w, out = planes * g.out_h * g.out_w;
  // A covered row whose uncovered cells are fewer than a 32-byte sector's worth is read whole: the
  // sectors holding its covered cells hold the others too.
  const double row = static_cast<double>((g.in_w - w.inputs) * static_cast<int64_t>(elem) < 32 ? g.in_w : w.inputs);
  if (forward) return cuda::cost(planes * h.inputs * row * elem, out * (elem + index), index ? taps : taps + out);
  const double reached = planes * h.outputs * w.outputs;
  return cuda::cost(reached * (elem + index), in * elem, index ? reached : 2 * taps);
}

cuda::Cost max_pool_cost(const Pool2dGeometry& g, bool forward, size_t elem, size_t index) {
  return pool_cost(g, window_cover(g.in_h, g.out_h, g.kernel_h, g.stride_h, g.pad_h, g.dilation_h),
                   window_cover(g.in_w, g.out_w, g.kernel_w, g.stride_w, g.pad_w, g.dilation_w), forward, elem, index);
}

cuda::Cost avg_pool_cost(const Pool2dGeometry& g, bool forward, size_t elem) {
  return pool_cost(g, window_cover(g.in_h, g.out_h, g.kernel_h, g.stride_h, g.pad_h, 1),
                   window_cover(g.in_w, g.out_w, g.kernel_w, g.stride_w, g.pad_w, 1), forward, elem, 0);
}

cuda::Cost adaptive_pool_cost(const Pool2dGeometry& g, bool forward, size_t elem) {
  return pool_cost(g, adaptive_cover(g.in_h, g.out_h), adaptive_cover(g.in_w, g.out_w), forward, elem, 0);
}

int64_t in_cells(const Pool2dGeometry& g) { return g.planes * g.in_h * g.in_w; }
int64_t out_cells(const Pool2dGeometry& g) { return g.planes * g.out_h * g.out_w; }

// Whether every cell index of g fits the int32 max-pooling kernels (Note [32-bit index math in max
// pooling]), with headroom for the grid-stride step added to an index below the total.
bool max_pool_fits_int32(const Pool2dGeometry& g) {
  static const bool forced64 = cuda::env_switch("EMBER_POOL_INDEX", "auto", "64");
  const int64_t limit = int64_t{1} << 30;
  return !forced64 && g.planes * g.in_h * g.in_w < limit && g.planes * g.out_h * g.out_w < limit;
}

// Calls f(J{}) with J = int32_t where max_pool_fits_int32(g), int64_t otherwise.
template <typename F>
void with_index_type(const Pool2dGeometry& g, const F& f) {
  if (max_pool_fits_int32(g))
    f(int32_t{});
  else
    f(int64_t{});
}

// Whether the channels-last max-pooling kernels take packs (Note [Channels-last max pooling]): V =
// kLanes16<T> channels of T in 16 bytes, when C is a multiple of V and the data (16 bytes) and the
// indices (V * sizeof(I) bytes) are aligned to their packs.
template <typename T, typename I>
bool fits_lanes(int64_t channels, std::initializer_list<const void*> data, const void* indices) {
  return channels % kLanes16<T> == 0 && detail::all_aligned(data, 16) &&
         detail::aligned(indices, kLanes16<T> * sizeof(I));
}

void check_pool(const char* op, const Pool2dGeometry& g) {
  EMBER_CHECK(g.planes >= 0 && g.in_h >= 0 && g.in_w >= 0 && g.out_h >= 0 && g.out_w >= 0, op, ": negative size");
  EMBER_CHECK(g.kernel_h >= 1 && g.kernel_w >= 1 && g.stride_h >= 1 && g.stride_w >= 1 && g.dilation_h >= 1 &&
                  g.dilation_w >= 1,
              op, ": kernel, stride and dilation must be >= 1");
}

}  // namespace

namespace {

// The checks every max-pooling entry point makes, then f(T{}, I{}, J{}) with T the data type, I
// the index dtype's type and J the kernels' index type (Note [32-bit index math in max pooling]).
// channels > 0: the channels-last kernels', whose planes must be whole images.
template <typename F>
void dispatch_max_pool(const char* op, DType dtype, DType index_dtype, const Pool2dGeometry& g, int64_t channels,
                       const F& f) {
  check_pool(op, g);
  check_max_pool_indices(op, index_dtype, g);
  if (channels > 0 && g.planes > 0)
    EMBER_CHECK(g.planes % channels == 0, op, ": ", g.planes, " planes are not images of ", channels, " channels");
  EMBER_DISPATCH_INDEX(index_dtype, op, [&] {
    using I = scalar_t;
    EMBER_DISPATCH_FLOATING(dtype, op, [&] {
      using T = scalar_t;
      with_index_type(g, [&](auto j) { f(T{}, I{}, j); });
    });
  });
}

}  // namespace

void max_pool2d_forward(DType dtype, DType index_dtype, const Pool2dGeometry& g, const void* x, void* out,
                        void* indices) {
  dispatch_max_pool("max_pool2d", dtype, index_dtype, g, 0, [&](auto t, auto i, auto j) {
    using T = decltype(t);
    using I = decltype(i);
    launch_cells("max_pool2d", out_cells(g), [&] { return max_pool_cost(g, true, sizeof(T), sizeof(I)); },
                 max_forward_kernel<T, I, decltype(j)>, g, static_cast<const T*>(x), static_cast<T*>(out),
                 static_cast<I*>(indices));
  });
}

void max_pool2d_backward(DType dtype, DType index_dtype, const Pool2dGeometry& g, const void* grad_out,
                         const void* indices, void* grad_in) {
  dispatch_max_pool("max_pool2d backward", dtype, index_dtype, g, 0, [&](auto t, auto i, auto j) {
    using T = decltype(t);
    using I = decltype(i);
    launch_cells("max_pool2d backward", in_cells(g), [&] { return max_pool_cost(g, false, sizeof(T), sizeof(I)); },
                 max_backward_kernel<T, I, decltype(j)>, g, static_cast<const T*>(grad_out),
                 static_cast<const I*>(indices), static_cast<T*>(grad_in));
  });
}

void max_pool2d_forward_nhwc(DType dtype, DType index_dtype, const Pool2dGeometry& g, int64_t channels, const void* x,
                             void* out, void* indices) {
  EMBER_CHECK(channels > 0, "max_pool2d: channels-last images need at least one channel, got ", channels);
  dispatch_max_pool("max_pool2d", dtype, index_dtype, g, channels, [&](auto t, auto i, auto j) {
    using T = decltype(t);
    using I = decltype(i);
    using J = decltype(j);
    const auto declared = [&] { return max_pool_cost(g, true, sizeof(T), sizeof(I)); };  // the same for any V
    if (fits_lanes<T, I>(channels, {x, out}, indices))
      launch_cells("max_pool2d", out_cells(g) / kLanes16<T>, declared, max_forward_nhwc_kernel<kLanes16<T>, T, I, J>,
                   g, channels, static_cast<const T*>(x), static_cast<T*>(out), static_cast<I*>(indices));
    else
      launch_cells("max_pool2d", out_cells(g), declared, max_forward_nhwc_kernel<1, T, I, J>, g, channels,
                   static_cast<const T*>(x), static_cast<T*>(out), static_cast<I*>(indices));
  });
}

void max_pool2d_backward_nhwc(DType dtype, DType index_dtype, const Pool2dGeometry& g, int64_t channels,
                              const void* grad_out, const void* indices, void* grad_in) {
  EMBER_CHECK(channels > 0, "max_pool2d backward: channels-last images need at least one channel, got ", channels);
  dispatch_max_pool("max_pool2d backward", dtype, index_dtype, g, channels, [&](auto t, auto i, auto j) {
    using T = decltype(t);
    using I = decltype(i);
    using J = decltype(j);
    const auto declared = [&] { return max_pool_cost(g, false, sizeof(T), sizeof(I)); };  // the same for any V
    if (fits_lanes<T, I>(channels, {grad_out, grad_in}, indices))
      launch_cells("max_pool2d backward", in_cells(g) / kLanes16<T>, declared,
                   max_backward_nhwc_kernel<kLanes16<T>, T, I, J>, g, channels, static_cast<const T*>(grad_out),
                   static_cast<const I*>(indices), static_cast<T*>(grad_in));
    else
      launch_cells("max_pool2d backward", in_cells(g), declared, max_backward_nhwc_kernel<1, T, I, J>, g, channels,
                   static_cast<const T*>(grad_out), static_cast<const I*>(indices), static_cast<T*>(grad_in));
  });
}

void avg_pool2d_forward(DType dtype, const Pool2dGeometry& g, bool count_include_pad, const void* x, void* out) {
  check_pool("avg_pool2d", g);
  EMBER_DISPATCH_FLOATING(dtype, "avg_pool2d", [&] {
    using T = scalar_t;
    launch_cells("avg_pool2d", out_cells(g), [&] { return avg_pool_cost(g, true, sizeof(T)); }, avg_forward_kernel<T>,
                 g, count_include_pad, static_cast<const T*>(x), static_cast<T*>(out));
  });
}

void avg_pool2d_backward(DType dtype, const Pool2dGeometry& g, bool count_include_pad, const void* grad_out,
                         void* grad_in) {
  check_pool("avg_pool2d backward", g);
  EMBER_DISPATCH_FLOATING(dtype, "avg_pool2d backward", [&] {
    using T = scalar_t;
    launch_cells("avg_pool2d backward", in_cells(g), [&] { return avg_pool_cost(g, false, sizeof(T)); },
                 avg_backward_kernel<T>, g, count_include_pad, static_cast<const T*>(grad_out),
                 static_cast<T*>(grad_in));
  });
}

void adaptive_avg_pool2d_forward(DType dtype, const Pool2dGeometry& g, const void* x, void* out) {
  check_pool("adaptive_avg_pool2d", g);
  EMBER_DISPATCH_FLOATING(dtype, "adaptive_avg_pool2d", [&] {
    using T = scalar_t;
    launch_cells("adaptive_avg_pool2d", out_cells(g), [&] { return adaptive_pool_cost(g, true, sizeof(T)); },
                 adaptive_forward_kernel<T>, g, static_cast<const T*>(x), static_cast<T*>(out));
  });
}

void adaptive_avg_pool2d_backward(DType dtype, const Pool2dGeometry& g, const void* grad_out, void* grad_in) {
  check_pool("adaptive_avg_pool2d backward", g);
  EMBER_DISPATCH_FLOATING(dtype, "adaptive_avg_pool2d backward", [&] {
    using T = scalar_t;
    launch_cells("adaptive_avg_pool2d backward", in_cells(g), [&] { return adaptive_pool_cost(g, false, sizeof(T)); },
                 adaptive_backward_kernel<T>, g, static_cast<const T*>(grad_out), static_cast<T*>(grad_in));
  });
}

}  // namespace ember::kernels::gpu
