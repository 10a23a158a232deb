// 2-D convolution on a CUDA device: im2col / col2im kernels, the bias kernels, and the
// im2col + GEMM drivers (Note [im2col] in kernels/cpu/conv.h).
//
// The drivers process the batch in chunks of images whose im2col columns fit a fixed workspace
// (kColBudgetBytes), so one im2col launch and one batched GEMM cover many images. A 1x1, stride-1,
// unpadded convolution skips im2col: the image is its own column matrix.

#include "launch.h"

#include <algorithm>
#include <vector>

#include "../../core/error.h"
#include "batchnorm.h"
#include "block_reduce.cuh"  // grid_stride_blocks
#include "conv.h"
#include "gemm.h"
#include "../../core/cuda/runtime.h"

namespace ember::kernels::gpu {

namespace {

constexpr int kThreads = 256;
// im2col workspace per chunk of images: large enough that a chunk is a big GEMM, small enough
// not to matter next to activations.
constexpr int64_t kColBudgetBytes = int64_t{64} << 20;

// ---- kernels ---------------------------------------------------------------------------------

// Note [32-bit index math]
// im2col and col2im turn a linear index into (image, row, oy, ox) or (image, c, iy, ix) with
// divisions and remainders, several per element. A 64-bit integer division is a long software
// routine on a GPU, several times the instructions of a 32-bit one (on the CPU emulator it depends
// on the processor's divider: no difference was measurable on a Zen 4), so the kernels are
// templates on the index type I: the launcher picks int32_t whenever every index the kernel forms
// (the col entries and the input pixels of the chunk) fits in it — every layer of the model zoo
// at the usual batch sizes — and int64_t otherwise. The geometry is copied into I-typed locals
// once per thread, so no 64-bit arithmetic is left in the loop. (PyTorch's CUDA kernels make the
// same choice: canUse32BitIndexMath.)
template <typename I>
struct IndexGeometry {
  I c_in, h, w, kh, kw, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, out_h, out_w;
  __host__ __device__ explicit IndexGeometry(const Conv2dGeometry& g)
      : c_in(static_cast<I>(g.c_in)), h(static_cast<I>(g.h)), w(static_cast<I>(g.w)), kh(static_cast<I>(g.kh)),
        kw(static_cast<I>(g.kw)), stride_h(static_cast<I>(g.stride_h)), stride_w(static_cast<I>(g.stride_w)),
        pad_h(static_cast<I>(g.pad_h)), pad_w(static_cast<I>(g.pad_w)), dil_h(static_cast<I>(g.dil_h)),
        dil_w(static_cast<I>(g.dil_w)), out_h(static_cast<I>(g.out_h)), out_w(static_cast<I>(g.out_w)) {}
};

// im2col over `images` consecutive images: col[img] (c_in * kh * kw, out_h * out_w).
// One thread per column entry (grid-stride). The linear index runs fastest over ox, so a warp
// writes 32 consecutive col entries (coalesced) and reads 32 input pixels stride_w apart on one
// input row (coalesced for stride 1). Entries whose tap falls in the padding get 0.
template <typename T, typename I>
__global__ void im2col_kernel(Conv2dGeometry geometry, I images, const T* x, T* col) {
  const IndexGeometry<I> g(geometry);
  const I ohw = g.out_h * g.out_w, rows = g.c_in * g.kh * g.kw;
  const I total = images * rows * ohw;
  for (I idx = static_cast<I>(blockIdx.x * blockDim.x + threadIdx.x); idx < total;
       idx += static_cast<I>(gridDim.x * blockDim.x)) {
    const I ox = idx % g.out_w;
    const I oy = (idx / g.out_w) % g.out_h;
    const I row = (idx / ohw) % rows;
    const I img = idx / (ohw * rows);
    const I j = row % g.kw, i = (row / g.kw) % g.kh, c = row / (g.kw * g.kh);
    const I iy = oy * g.stride_h - g.pad_h + i * g.dil_h;
    const I ix = ox * g.stride_w - g.pad_w + j * g.dil_w;
    T v = T(0);
    if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) v = x[((img * g.c_in + c) * g.h + iy) * g.w + ix];
    col[idx] = v;
  }
}

// col2im as a gather: one thread per input pixel (img, c, iy, ix) sums every col entry that
// im2col copied from it. Tap (i, j) read this pixel for output row oy = (iy + pad_h - i dil_h) /
// stride_h when that division is exact and oy is in range (likewise ox), so a thread visits at
// most kh * kw entries and writes its pixel once: no atomics, and the sum runs in the same (i, j)
// order as the CPU's scatter loop, so the result is bit-identical to kernels::cpu::col2im.
// accumulate: x += sum (col2im's contract); otherwise x = sum (backward data, no zeroing pass).
template <typename T, typename I>
__global__ void col2im_kernel(Conv2dGeometry geometry, I images, const T* col, T* x, bool accumulate) {
  const IndexGeometry<I> g(geometry);
  const I ohw = g.out_h * g.out_w, rows = g.c_in * g.kh * g.kw;
  const I total = images * g.c_in * g.h * g.w;
  for (I idx = static_cast<I>(blockIdx.x * blockDim.x + threadIdx.x); idx < total;
       idx += static_cast<I>(gridDim.x * blockDim.x)) {
    const I ix = idx % g.w;
    const I iy = (idx / g.w) % g.h;
    const I c = (idx / (g.w * g.h)) % g.c_in;
    const I img = idx / (g.w * g.h * g.c_in);
    const T* col_img = col + img * rows * ohw;
    T acc = accumulate ? x[idx] : T(0);
    for (I i = 0; i < g.kh; ++i) {
      const I ty = iy + g.pad_h - i * g.dil_h;
      if (ty < 0 || ty % g.stride_h != 0) continue;
      const I oy = ty / g.stride_h;
      if (oy >= g.out_h) continue;
      for (I j = 0; j < g.kw; ++j) {
        const I tx = ix + g.pad_w - j * g.dil_w;
        if (tx < 0 || tx % g.stride_w != 0) continue;
        const I ox = tx / g.stride_w;
        if (ox >= g.out_w) continue;
        acc += col_img[((c * g.kh + i) * g.kw + j) * ohw + oy * g.out_w + ox];
      }
    }
    x[idx] = acc;
  }
}

// y[img, oc, :] = bias[oc] for every image: the GEMM then adds onto it (beta = 1), as on the CPU.
template <typename T>
__global__ void fill_bias_kernel(int64_t n, int64_t c_out, int64_t ohw, const T* bias, T* y) {
  const int64_t total = n * c_out * ohw;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x)
    y[idx] = bias[(idx / ohw) % c_out];
}

// ---- launchers -------------------------------------------------------------------------------

// EMBER_CONV_INDEX=64 runs the int64 kernels on every layer: the test of that path (ctest
// cuda-index64:conv), which real layers reach only beyond 2^30 elements. Read once per process.
bool index64_forced() {
  static const bool forced = cuda::env_switch("EMBER_CONV_INDEX", "auto", "64");
  return forced;
}

// Whether every index of a chunk of `images` images fits the int32 kernels (Note [32-bit index math]).
bool fits_int32(const Conv2dGeometry& g, int64_t images) {
  if (index64_forced()) return false;
  const int64_t col = images * g.c_in * g.kh * g.kw * g.out_h * g.out_w, pixels = images * g.c_in * g.h * g.w;
  // The grid-stride step (grid * block) is added to an index below `total`: keep headroom for it.
  return col < (int64_t{1} << 30) && pixels < (int64_t{1} << 30);
}

template <typename T>
void launch_im2col(const Conv2dGeometry& g, int64_t images, const T* x, T* col) {
  const int64_t total = images * g.c_in * g.kh * g.kw * g.out_h * g.out_w;
  if (total == 0) return;
  const dim3 grid = detail::grid_stride_blocks(total, kThreads);
  // Declared (Note [Launch ledger]): the images read once, every column element written.
  const double pixels = static_cast<double>(images * g.c_in * g.h * g.w);
  auto declared = [&] { return cuda::cost(pixels * sizeof(T), static_cast<double>(total) * sizeof(T)); };
  if (fits_int32(g, images))
    EMBER_LAUNCH_FLAT((im2col_kernel<T, int32_t>), grid, kThreads, cuda::current_stream(), declared(), g,
                      static_cast<int32_t>(images), x, col);
  else
    EMBER_LAUNCH_FLAT((im2col_kernel<T, int64_t>), grid, kThreads, cuda::current_stream(), declared(), g, images, x,
                      col);
  cuda::check_launch("im2col");
}

template <typename T>
void launch_col2im(const Conv2dGeometry& g, int64_t images, const T* col, T* x, bool accumulate) {
  const int64_t total = images * g.c_in * g.h * g.w;
  if (total == 0) return;
  const dim3 grid = detail::grid_stride_blocks(total, kThreads);
  // Declared (Note [Launch ledger]): every column element read once (plus x when accumulating),
  // x written once, one add per column element.
  const double cols = static_cast<double>(images * g.c_in * g.kh * g.kw * g.out_h * g.out_w);
  auto declared = [&] {
    return cuda::cost((cols + (accumulate ? total : 0)) * sizeof(T), static_cast<double>(total) * sizeof(T), cols);
  };
  if (fits_int32(g, images))
    EMBER_LAUNCH_FLAT((col2im_kernel<T, int32_t>), grid, kThreads, cuda::current_stream(), declared(), g,
                      static_cast<int32_t>(images), col, x, accumulate);
  else
    EMBER_LAUNCH_FLAT((col2im_kernel<T, int64_t>), grid, kThreads, cuda::current_stream(), declared(), g, images, col,
                      x, accumulate);
  cuda::check_launch("col2im");
}

// ---- drivers ---------------------------------------------------------------------------------

bool is_pointwise(const Conv2dGeometry& g) {
  return g.kh == 1 && g.kw == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 && g.pad_w == 0;
}

void check_geometry(const char* op, const Conv2dGeometry& g) {
  EMBER_CHECK(g.groups >= 1 && g.c_in % g.groups == 0 && g.c_out % g.groups == 0, op, ": groups = ", g.groups,
              " must divide c_in = ", g.c_in, " and c_out = ", g.c_out);
  EMBER_CHECK(g.stride_h >= 1 && g.stride_w >= 1 && g.dil_h >= 1 && g.dil_w >= 1, op,
              ": stride and dilation must be >= 1");
  EMBER_CHECK(g.out_h >= 0 && g.out_w >= 0, op, ": negative output size");
}

// Images per chunk: as many as fit kColBudgetBytes of im2col columns (at least one).
template <typename T>
int64_t chunk_images(const Conv2dGeometry& g) {
  const int64_t per_image = std::max<int64_t>(1, g.c_in * g.kh * g.kw * g.out_h * g.out_w * int64_t{sizeof(T)});
  return std::max<int64_t>(1, std::min<int64_t>(g.n, kColBudgetBytes / per_image));
}

// C[img, gr] = alpha W[gr] (or W[gr]^T) @ B[img, gr] for every image of a chunk and every group:
// one batched GEMM. Pointer lists are built on the host (gemm_batched copies them).
template <typename T>
struct GroupGemm {
  std::vector<const T*> a, b;
  std::vector<T*> c;
  void add(const T* ap, const T* bp, T* cp) {
    a.push_back(ap);
    b.push_back(bp);
    c.push_back(cp);
  }
};

template <typename T>
void forward_impl(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y) {
  check_geometry("conv2d", g);
  const int64_t G = g.groups, cout_g = g.c_out / G, kk = g.c_in / G * g.kh * g.kw;
  const int64_t ohw = g.out_h * g.out_w, x_img = g.c_in * g.h * g.w, col_img = g.c_in * g.kh * g.kw * ohw;
  if (g.n == 0 || g.c_out == 0 || ohw == 0) return;
  if (bias) {
    const int64_t total = g.n * g.c_out * ohw;
    EMBER_LAUNCH_FLAT(fill_bias_kernel<T>, detail::grid_stride_blocks(total, kThreads), kThreads,
                      cuda::current_stream(),
                      cuda::cost(double(g.c_out) * sizeof(T), double(total) * sizeof(T)), g.n, g.c_out, ohw, bias, y);
    cuda::check_launch("conv2d bias");
  }
  const bool pointwise = is_pointwise(g);
  const int64_t chunk = chunk_images<T>(g);
  cuda::Scratch cols(pointwise ? 0 : static_cast<size_t>(chunk * col_img) * sizeof(T));
  for (int64_t img0 = 0; img0 < g.n; img0 += chunk) {
    const int64_t images = std::min(chunk, g.n - img0);
    const T* c = pointwise ? x + img0 * x_img : cols.as<T>();
    if (!pointwise) launch_im2col(g, images, x + img0 * x_img, cols.as<T>());
    // y[img][gr] (cout_g, ohw) (+)= w[gr] (cout_g, kk) @ col[img][gr] (kk, ohw)
    GroupGemm<T> gg;
    for (int64_t img = 0; img < images; ++img)
      for (int64_t gr = 0; gr < G; ++gr)
        gg.add(w + gr * cout_g * kk, c + img * col_img + gr * kk * ohw, y + (img0 + img) * g.c_out * ohw + gr * cout_g * ohw);
    kernels::gpu::gemm_batched(Transpose::No, Transpose::No, cout_g, ohw, kk, T(1), gg.a.data(), kk, gg.b.data(), ohw,
                 bias ? T(1) : T(0), gg.c.data(), ohw, static_cast<int64_t>(gg.c.size()));
  }
}

template <typename T>
void backward_data_impl(const Conv2dGeometry& g, const T* gy, const T* w, T* gx) {
  check_geometry("conv2d backward", g);
  const int64_t G = g.groups, cout_g = g.c_out / G, kk = g.c_in / G * g.kh * g.kw;
  const int64_t ohw = g.out_h * g.out_w, x_img = g.c_in * g.h * g.w, col_img = g.c_in * g.kh * g.kw * ohw;
  if (g.n == 0 || x_img == 0) return;
  const bool pointwise = is_pointwise(g);
  const int64_t chunk = chunk_images<T>(g);
  cuda::Scratch cols(pointwise ? 0 : static_cast<size_t>(chunk * col_img) * sizeof(T));
  for (int64_t img0 = 0; img0 < g.n; img0 += chunk) {
    const int64_t images = std::min(chunk, g.n - img0);
    // dcol[img][gr] (kk, ohw) = w[gr]^T (kk, cout_g) @ gy[img][gr] (cout_g, ohw); pointwise: dcol is gx.
    T* dcol = pointwise ? gx + img0 * x_img : cols.as<T>();
    GroupGemm<T> gg;
    for (int64_t img = 0; img < images; ++img)
      for (int64_t gr = 0; gr < G; ++gr)
        gg.add(w + gr * cout_g * kk, gy + (img0 + img) * g.c_out * ohw + gr * cout_g * ohw,
               dcol + img * col_img + gr * kk * ohw);
    kernels::gpu::gemm_batched(Transpose::Yes, Transpose::No, kk, ohw, cout_g, T(1), gg.a.data(), kk, gg.b.data(), ohw, T(0),
                 gg.c.data(), ohw, static_cast<int64_t>(gg.c.size()));
    if (!pointwise) launch_col2im(g, images, cols.as<T>(), gx + img0 * x_img, /*accumulate=*/false);
  }
}

template <typename T>
void backward_weight_impl(const Conv2dGeometry& g, const T* gy, const T* x, T* gw) {
  check_geometry("conv2d backward", g);
  const int64_t G = g.groups, cout_g = g.c_out / G, kk = g.c_in / G * g.kh * g.kw;
  const int64_t ohw = g.out_h * g.out_w, x_img = g.c_in * g.h * g.w, col_img = g.c_in * g.kh * g.kw * ohw;
  const int64_t w_elems = g.c_out * kk;
  if (w_elems == 0) return;
  if (g.n == 0) {
    EMBER_CUDA_CHECK(cudaMemsetAsync(gw, 0, static_cast<size_t>(w_elems) * sizeof(T), cuda::current_stream()));
    return;
  }
  const bool pointwise = is_pointwise(g);
  const int64_t chunk = chunk_images<T>(g);
  cuda::Scratch cols(pointwise ? 0 : static_cast<size_t>(chunk * col_img) * sizeof(T));
  for (int64_t img0 = 0; img0 < g.n; img0 += chunk) {
    const int64_t images = std::min(chunk, g.n - img0);
    const T* c = pointwise ? x + img0 * x_img : cols.as<T>();
    if (!pointwise) launch_im2col(g, images, x + img0 * x_img, cols.as<T>());
    // gw[gr] (cout_g, kk) (+)= gy[img][gr] (cout_g, ohw) @ col[img][gr]^T (ohw, kk). Every image adds
    // into the same gw, so images are GEMMs in sequence (beta = 0 for the first, then 1); the
    // groups of one image write disjoint parts of gw and go in one batched call.
    for (int64_t img = 0; img < images; ++img) {
      GroupGemm<T> gg;
      for (int64_t gr = 0; gr < G; ++gr)
        gg.add(gy + (img0 + img) * g.c_out * ohw + gr * cout_g * ohw, c + img * col_img + gr * kk * ohw,
               gw + gr * cout_g * kk);
      const T beta = img0 + img == 0 ? T(0) : T(1);
      if (G == 1) {
        kernels::gpu::gemm(Transpose::No, Transpose::Yes, cout_g, kk, ohw, T(1), gg.a[0], ohw, gg.b[0], ohw, beta, gg.c[0], kk);
      } else {
        kernels::gpu::gemm_batched(Transpose::No, Transpose::Yes, cout_g, kk, ohw, T(1), gg.a.data(), ohw, gg.b.data(), ohw, beta,
                     gg.c.data(), kk, G);
      }
    }
  }
}

}  // namespace

void im2col(const Conv2dGeometry& g, const float* x, float* col) { launch_im2col(g, 1, x, col); }
void im2col(const Conv2dGeometry& g, const double* x, double* col) { launch_im2col(g, 1, x, col); }
void col2im(const Conv2dGeometry& g, const float* col, float* x) { launch_col2im(g, 1, col, x, true); }
void col2im(const Conv2dGeometry& g, const double* col, double* x) { launch_col2im(g, 1, col, x, true); }

void conv2d_forward(DType dtype, const Conv2dGeometry& g, const void* x, const void* w, const void* bias, void* y) {
  EMBER_DISPATCH_FLOAT(dtype, "conv2d", [&] {
    using T = scalar_t;
    forward_impl(g, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias), static_cast<T*>(y));
  });
}

void conv2d_backward_data(DType dtype, const Conv2dGeometry& g, const void* gy, const void* w, void* gx) {
  EMBER_DISPATCH_FLOAT(dtype, "conv2d backward", [&] {
    using T = scalar_t;
    backward_data_impl(g, static_cast<const T*>(gy), static_cast<const T*>(w), static_cast<T*>(gx));
  });
}

void conv2d_backward_weight(DType dtype, const Conv2dGeometry& g, const void* gy, const void* x, void* gw) {
  EMBER_DISPATCH_FLOAT(dtype, "conv2d backward", [&] {
    using T = scalar_t;
    backward_weight_impl(g, static_cast<const T*>(gy), static_cast<const T*>(x), static_cast<T*>(gw));
  });
}

// gb[oc] = the sum of dy's channel oc: batch norm's split per-channel sum (channel_sums in
// batchnorm.cu), NCHW as (n, c_out, out_h out_w) planes, channels-last as rows of c_out channels
// read in 16-byte packs — many blocks per channel, where one block per channel left most of a GPU
// idle at a small c_out and, channels-last, read each element c_out apart. f16/bf16 too: summed
// in float, rounded once (cuDNN's bf16 bias gradient, which cuDNN 9 refuses, comes here).
void conv2d_backward_bias(DType dtype, const Conv2dGeometry& g, const void* gy, void* gb) {
  channel_sums(dtype, BatchNormShape{.n = g.n, .c = g.c_out, .s = g.out_h * g.out_w}, gy, gb);
}

void conv2d_backward_bias_nhwc(DType dtype, const Conv2dGeometry& g, const void* gy, void* gb) {
  channel_sums(dtype, BatchNormShape{.n = g.n, .c = g.c_out, .s = g.out_h * g.out_w, .channels_last = true}, gy, gb);
}

}  // namespace ember::kernels::gpu
