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
#include <limits>

#include "../../core/error.h"
#include "block_reduce.cuh"
#include "pool.h"
#include "runtime.h"

namespace ember::kernels::gpu {

namespace {

constexpr int kThreads = 256;

// Grid-stride loop over [0, total) for the flat kernels below.
#define EMBER_POOL_FOR(idx, total)                                                      \
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < (total); \
       idx += int64_t{gridDim.x} * blockDim.x)

__device__ inline int64_t ceil_div_nonneg(int64_t a, int64_t b) { return a <= 0 ? 0 : (a + b - 1) / b; }

// ---- max -------------------------------------------------------------------------------------

// The max of output cell (oh, ow)'s window over one plane whose element (ih, iw) is
// xp[(ih * in_w + iw) * step] (step 1: an NCHW plane; C: one channel of an NHWC image). The window
// walk and the comparison rule are the CPU's general loop (kernels/cpu/pool.cpp) verbatim: start
// at -inf on the first tap that is not padding; a strictly larger value or a NaN takes over.
// `best` is the in-plane position ih * in_w + iw.
template <typename T>
__device__ inline void max_window(const Pool2dGeometry& g, int64_t oh, int64_t ow, const T* xp, int64_t step,
                                  acc_t<T>* best_v, int64_t* best) {
  int64_t h0 = oh * g.stride_h - g.pad_h;
  const int64_t h1 = min(h0 + (g.kernel_h - 1) * g.dilation_h + 1, g.in_h);
  while (h0 < 0) h0 += g.dilation_h;
  int64_t w0 = ow * g.stride_w - g.pad_w;
  const int64_t w1 = min(w0 + (g.kernel_w - 1) * g.dilation_w + 1, g.in_w);
  while (w0 < 0) w0 += g.dilation_w;
  *best = h0 * g.in_w + w0;
  *best_v = -std::numeric_limits<acc_t<T>>::infinity();  // f16/bf16 compared as float
  for (int64_t ih = h0; ih < h1; ih += g.dilation_h) {
    for (int64_t iw = w0; iw < w1; iw += g.dilation_w) {
      const int64_t i = ih * g.in_w + iw;
      const acc_t<T> v = static_cast<acc_t<T>>(xp[i * step]);
      if (v > *best_v || v != v) {
        *best_v = v;
        *best = i;
      }
    }
  }
}

// One thread per output cell (p, oh, ow), consecutive threads on consecutive ow: reads of a
// window row are strided by stride_w across the warp, writes are coalesced.
template <typename T, typename I>
__global__ void max_forward_kernel(Pool2dGeometry g, const T* x, T* out, I* indices) {
  const int64_t out_plane = g.out_h * g.out_w;
  EMBER_POOL_FOR(idx, g.planes * out_plane) {
    const int64_t ow = idx % g.out_w, oh = (idx / g.out_w) % g.out_h, p = idx / out_plane;
    acc_t<T> best_v;
    int64_t best;
    max_window(g, oh, ow, x + p * g.in_h * g.in_w, 1, &best_v, &best);
    out[idx] = static_cast<T>(best_v);  // exact: best_v is one of x's values (or -inf)
    indices[idx] = static_cast<I>(best);
  }
}

// The gradient gathered by input cell (ih, iw) of one plane (Note [Pooling backward as a gather]):
// output row oh's window covers input rows [oh s - pad, oh s - pad + (k - 1) dil], so row ih is in
// the windows with ceil((ih + pad - (k - 1) dil) / s) <= oh <= floor((ih + pad) / s); the sum of
// grad_out over those whose recorded argmax is this cell, in increasing (oh, ow). The plane's
// output cell (oh, ow) is at go[(oh * out_w + ow) * step] and ip[...] likewise.
template <typename T, typename I>
__device__ inline acc_t<T> max_gather(const Pool2dGeometry& g, int64_t ih, int64_t iw, const T* go, const I* ip,
                                      int64_t step) {
  const int64_t me = ih * g.in_w + iw;
  const int64_t oh_lo = ceil_div_nonneg(ih + g.pad_h - (g.kernel_h - 1) * g.dilation_h, g.stride_h);
  const int64_t oh_hi = min((ih + g.pad_h) / g.stride_h, g.out_h - 1);
  const int64_t ow_lo = ceil_div_nonneg(iw + g.pad_w - (g.kernel_w - 1) * g.dilation_w, g.stride_w);
  const int64_t ow_hi = min((iw + g.pad_w) / g.stride_w, g.out_w - 1);
  acc_t<T> acc = 0;  // f16/bf16: summed in float, rounded once
  for (int64_t oh = oh_lo; oh <= oh_hi; ++oh)
    for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
      const int64_t o = (oh * g.out_w + ow) * step;
      if (ip[o] == me) acc += static_cast<acc_t<T>>(go[o]);
    }
  return acc;
}

// One thread per input cell.
template <typename T, typename I>
__global__ void max_backward_kernel(Pool2dGeometry g, const T* grad_out, const I* indices, T* grad_in) {
  const int64_t in_plane = g.in_h * g.in_w, out_plane = g.out_h * g.out_w;
  EMBER_POOL_FOR(idx, g.planes * in_plane) {
    const int64_t iw = idx % g.in_w, ih = (idx / g.in_w) % g.in_h, p = idx / in_plane;
    grad_in[idx] = static_cast<T>(max_gather(g, ih, iw, grad_out + p * out_plane, indices + p * out_plane, 1));
  }
}

// Note [Channels-last max pooling]
// A channels-last (N, H, W, C) tensor is pooled where it lies: the same windows, comparisons and
// gather as above, each plane's element (ih, iw) of channel c at ((n H + ih) W + iw) C + c. One
// thread per output cell (n, oh, ow, c) forward and per input cell (n, ih, iw, c) backward, with c
// fastest, so a warp reads consecutive channels of one pixel (coalesced) where the NCHW kernels
// read along a row. out, indices and grad_in are channels-last too; an index is the in-plane
// position ih * in_w + iw, as in NCHW (and PyTorch). The comparisons and the gather's order are the
// NCHW kernels', so the two layouts give the same bits.
template <typename T, typename I>
__global__ void max_forward_nhwc_kernel(Pool2dGeometry g, int64_t channels, const T* x, T* out, I* indices) {
  EMBER_POOL_FOR(idx, g.planes * g.out_h * g.out_w) {
    const int64_t c = idx % channels, pixel = idx / channels;  // pixel = (n * out_h + oh) * out_w + ow
    const int64_t ow = pixel % g.out_w, oh = (pixel / g.out_w) % g.out_h, n = pixel / (g.out_w * g.out_h);
    acc_t<T> best_v;
    int64_t best;
    max_window(g, oh, ow, x + n * g.in_h * g.in_w * channels + c, channels, &best_v, &best);
    out[idx] = static_cast<T>(best_v);
    indices[idx] = static_cast<I>(best);
  }
}

template <typename T, typename I>
__global__ void max_backward_nhwc_kernel(Pool2dGeometry g, int64_t channels, const T* grad_out, const I* indices,
                                         T* grad_in) {
  const int64_t out_image = g.out_h * g.out_w * channels;
  EMBER_POOL_FOR(idx, g.planes * g.in_h * g.in_w) {
    const int64_t c = idx % channels, pixel = idx / channels;  // pixel = (n * in_h + ih) * in_w + iw
    const int64_t iw = pixel % g.in_w, ih = (pixel / g.in_w) % g.in_h, n = pixel / (g.in_w * g.in_h);
    const int64_t o = n * out_image + c;
    grad_in[idx] = static_cast<T>(max_gather(g, ih, iw, grad_out + o, indices + o, channels));
  }
}

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
    out[idx] = w.divisor > 0 && w.h0 < w.h1 && w.w0 < w.w1 ? static_cast<T>(acc / static_cast<acc_t<T>>(w.divisor))
                                                           : T(0);
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

// Every pooling launch: one (grid-stride) thread per cell of `total`, nothing when empty.
template <typename Kernel, typename... Args>
void launch_cells(const char* op, int64_t total, Kernel kernel, Args... args) {
  if (total <= 0) return;
  EMBER_LAUNCH_FLAT(kernel, detail::grid_stride_blocks(total, kThreads), kThreads, cuda::current_stream(),
                    args...);
  cuda::check_launch(op);
}

int64_t in_cells(const Pool2dGeometry& g) { return g.planes * g.in_h * g.in_w; }
int64_t out_cells(const Pool2dGeometry& g) { return g.planes * g.out_h * g.out_w; }

void check_pool(const char* op, const Pool2dGeometry& g) {
  EMBER_CHECK(g.planes >= 0 && g.in_h >= 0 && g.in_w >= 0 && g.out_h >= 0 && g.out_w >= 0, op, ": negative size");
  EMBER_CHECK(g.kernel_h >= 1 && g.kernel_w >= 1 && g.stride_h >= 1 && g.stride_w >= 1 && g.dilation_h >= 1 &&
                  g.dilation_w >= 1,
              op, ": kernel, stride and dilation must be >= 1");
}

}  // namespace

void max_pool2d_forward(DType dtype, DType index_dtype, const Pool2dGeometry& g, const void* x, void* out,
                        void* indices) {
  check_pool("max_pool2d", g);
  check_max_pool_indices("max_pool2d", index_dtype, g);
  EMBER_DISPATCH_INDEX(index_dtype, "max_pool2d", [&] {
    using I = scalar_t;
    EMBER_DISPATCH_FLOATING(dtype, "max_pool2d", [&] {
      using T = scalar_t;
      launch_cells("max_pool2d", out_cells(g), max_forward_kernel<T, I>, g, static_cast<const T*>(x),
                   static_cast<T*>(out), static_cast<I*>(indices));
    });
  });
}

void max_pool2d_backward(DType dtype, DType index_dtype, const Pool2dGeometry& g, const void* grad_out,
                         const void* indices, void* grad_in) {
  check_pool("max_pool2d backward", g);
  check_max_pool_indices("max_pool2d backward", index_dtype, g);
  EMBER_DISPATCH_INDEX(index_dtype, "max_pool2d backward", [&] {
    using I = scalar_t;
    EMBER_DISPATCH_FLOATING(dtype, "max_pool2d backward", [&] {
      using T = scalar_t;
      launch_cells("max_pool2d backward", in_cells(g), max_backward_kernel<T, I>, g, static_cast<const T*>(grad_out),
                   static_cast<const I*>(indices), static_cast<T*>(grad_in));
    });
  });
}

namespace {
void check_channels(const char* op, const Pool2dGeometry& g, int64_t channels) {
  EMBER_CHECK(channels > 0 && g.planes % channels == 0, op, ": ", g.planes, " planes are not images of ", channels,
              " channels");
}
}  // namespace

void max_pool2d_forward_nhwc(DType dtype, DType index_dtype, const Pool2dGeometry& g, int64_t channels, const void* x,
                             void* out, void* indices) {
  check_pool("max_pool2d", g);
  check_max_pool_indices("max_pool2d", index_dtype, g);
  if (g.planes == 0) return;
  check_channels("max_pool2d", g, channels);
  EMBER_DISPATCH_INDEX(index_dtype, "max_pool2d", [&] {
    using I = scalar_t;
    EMBER_DISPATCH_FLOATING(dtype, "max_pool2d", [&] {
      using T = scalar_t;
      launch_cells("max_pool2d", out_cells(g), max_forward_nhwc_kernel<T, I>, g, channels, static_cast<const T*>(x),
                   static_cast<T*>(out), static_cast<I*>(indices));
    });
  });
}

void max_pool2d_backward_nhwc(DType dtype, DType index_dtype, const Pool2dGeometry& g, int64_t channels,
                              const void* grad_out, const void* indices, void* grad_in) {
  check_pool("max_pool2d backward", g);
  check_max_pool_indices("max_pool2d backward", index_dtype, g);
  if (g.planes == 0) return;
  check_channels("max_pool2d backward", g, channels);
  EMBER_DISPATCH_INDEX(index_dtype, "max_pool2d backward", [&] {
    using I = scalar_t;
    EMBER_DISPATCH_FLOATING(dtype, "max_pool2d backward", [&] {
      using T = scalar_t;
      launch_cells("max_pool2d backward", in_cells(g), max_backward_nhwc_kernel<T, I>, g, channels,
                   static_cast<const T*>(grad_out), static_cast<const I*>(indices), static_cast<T*>(grad_in));
    });
  });
}

void avg_pool2d_forward(DType dtype, const Pool2dGeometry& g, bool count_include_pad, const void* x, void* out) {
  check_pool("avg_pool2d", g);
  EMBER_DISPATCH_FLOATING(dtype, "avg_pool2d", [&] {
    using T = scalar_t;
    launch_cells("avg_pool2d", out_cells(g), avg_forward_kernel<T>, g, count_include_pad, static_cast<const T*>(x),
                 static_cast<T*>(out));
  });
}

void avg_pool2d_backward(DType dtype, const Pool2dGeometry& g, bool count_include_pad, const void* grad_out,
                         void* grad_in) {
  check_pool("avg_pool2d backward", g);
  EMBER_DISPATCH_FLOATING(dtype, "avg_pool2d backward", [&] {
    using T = scalar_t;
    launch_cells("avg_pool2d backward", in_cells(g), avg_backward_kernel<T>, g, count_include_pad,
                 static_cast<const T*>(grad_out), static_cast<T*>(grad_in));
  });
}

void adaptive_avg_pool2d_forward(DType dtype, const Pool2dGeometry& g, const void* x, void* out) {
  check_pool("adaptive_avg_pool2d", g);
  EMBER_DISPATCH_FLOATING(dtype, "adaptive_avg_pool2d", [&] {
    using T = scalar_t;
    launch_cells("adaptive_avg_pool2d", out_cells(g), adaptive_forward_kernel<T>, g, static_cast<const T*>(x),
                 static_cast<T*>(out));
  });
}

void adaptive_avg_pool2d_backward(DType dtype, const Pool2dGeometry& g, const void* grad_out, void* grad_in) {
  check_pool("adaptive_avg_pool2d backward", g);
  EMBER_DISPATCH_FLOATING(dtype, "adaptive_avg_pool2d backward", [&] {
    using T = scalar_t;
    launch_cells("adaptive_avg_pool2d backward", in_cells(g), adaptive_backward_kernel<T>, g,
                 static_cast<const T*>(grad_out), static_cast<T*>(grad_in));
  });
}

}  // namespace ember::kernels::gpu
