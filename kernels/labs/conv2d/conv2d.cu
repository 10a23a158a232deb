// Lab: conv2d — the forward pass of a 2-D convolution layer, NCHW float tensors with stride and
// zero padding:
//   y[n][k][oh][ow] = sum over c, fh, fw of x[n][c][oh*stride - pad + fh][ow*stride - pad + fw]
//                                          * w[k][c][fh][fw]
// (x outside the image reads as 0). Four versions: directly, with shared-memory tiles, as a
// matrix multiply over an "im2col" matrix written to memory, and as the same matrix multiply
// with the im2col matrix computed on the fly. Read kernels/labs/conv2d/README.md alongside.
//   nvcc -O3 -arch=sm_90 -std=c++17 -o conv2d kernels/labs/conv2d/conv2d.cu && ./conv2d
//   cmake --build build --target lab_conv2d && ./build/labs/lab_conv2d   (the emulator)

#include "../common/lab.cuh"

#include <vector>

// The problem: x is N x C x H x W, w is K x C x R x R (K filters of C x R x R), y is
// N x K x OH x OW. All three contiguous, row-major (NCHW).
struct Conv {
  int N, C, H, W;
  int K, R, stride, pad;
  int OH, OW;
};

// v1: one thread per output, consecutive threads on consecutive outputs (ow fastest): the stores
// of a warp are 128 consecutive bytes. Each thread reads C * R * R inputs and as many weights
// from DRAM; neighbouring outputs read mostly the same inputs, R * R / stride^2 times each.
__global__ void conv_direct(Conv s, const float* x, const float* w, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= s.N * s.K * s.OH * s.OW) return;
  const int ow = i % s.OW, oh = i / s.OW % s.OH, k = i / (s.OW * s.OH) % s.K, n = i / (s.OW * s.OH * s.K);
  float acc = 0.0f;
  for (int c = 0; c < s.C; ++c)
    for (int fh = 0; fh < s.R; ++fh)
      for (int fw = 0; fw < s.R; ++fw) {
        const int ih = oh * s.stride - s.pad + fh, iw = ow * s.stride - s.pad + fw;
        if (ih >= 0 && ih < s.H && iw >= 0 && iw < s.W)
          acc += x[((n * s.C + c) * s.H + ih) * s.W + iw] * w[((k * s.C + c) * s.R + fh) * s.R + fw];
      }
  y[i] = acc;
}

// v2: shared-memory tiles. A block of 16 x 16 threads computes a 16 x 16 tile of outputs for 4
// filters. For each input channel it copies the input pixels the tile needs (the tile seen
// through the filter: (16 - 1) * stride + R on a side, the "halo" included, zeros where the
// padding is) and the 4 filters' R x R weights into shared memory, waits, and accumulates; then
// waits again before the next channel overwrites them: 2 barriers per channel. Each input pixel
// now comes from DRAM about once per block instead of R * R times per filter.
constexpr int kTileH = 16, kTileW = 16, kFiltersPerBlock = 4;

__global__ void conv_tiled(Conv s, const float* x, const float* w, float* y) {
  extern __shared__ float smem[];
  const int in_h = (kTileH - 1) * s.stride + s.R, in_w = (kTileW - 1) * s.stride + s.R;
  const int rr = s.R * s.R;
  float* tile = smem;                // in_h x in_w pixels of one channel
  float* filt = smem + in_h * in_w;  // kFiltersPerBlock x R x R weights of that channel
  const int groups = (s.K + kFiltersPerBlock - 1) / kFiltersPerBlock;
  const int n = blockIdx.z / groups, k0 = blockIdx.z % groups * kFiltersPerBlock;
  const int oh0 = blockIdx.y * kTileH, ow0 = blockIdx.x * kTileW;
  const int h0 = oh0 * s.stride - s.pad, w0 = ow0 * s.stride - s.pad;  // the tile's first input pixel
  const int tid = threadIdx.y * kTileW + threadIdx.x;
  float acc[kFiltersPerBlock] = {};
  for (int c = 0; c < s.C; ++c) {
    for (int i = tid; i < in_h * in_w; i += kTileH * kTileW) {
      const int ih = h0 + i / in_w, iw = w0 + i % in_w;
      tile[i] = (ih >= 0 && ih < s.H && iw >= 0 && iw < s.W) ? x[((n * s.C + c) * s.H + ih) * s.W + iw] : 0.0f;
    }
    for (int i = tid; i < kFiltersPerBlock * rr; i += kTileH * kTileW)
      filt[i] = k0 + i / rr < s.K ? w[((k0 + i / rr) * s.C + c) * rr + i % rr] : 0.0f;
    __syncthreads();
    for (int fh = 0; fh < s.R; ++fh)
      for (int fw = 0; fw < s.R; ++fw) {
        const float v = tile[(threadIdx.y * s.stride + fh) * in_w + threadIdx.x * s.stride + fw];
        for (int j = 0; j < kFiltersPerBlock; ++j) acc[j] += v * filt[j * rr + fh * s.R + fw];
      }
    __syncthreads();
  }
  const int oh = oh0 + threadIdx.y, ow = ow0 + threadIdx.x;
  if (oh >= s.OH || ow >= s.OW) return;
  for (int j = 0; j < kFiltersPerBlock && k0 + j < s.K; ++j) y[((n * s.K + k0 + j) * s.OH + oh) * s.OW + ow] = acc[j];
}

// The im2col matrix, (C * R * R) x (N * OH * OW): row (c, fh, fw), column (n, oh, ow) holds the
// input pixel that filter weight w[.][c][fh][fw] meets at output (n, oh, ow), 0 in the padding.
// With it, the convolution is a matrix product: y (as K x N*OH*OW) = w (as K x C*R*R) * im2col.
__device__ float im2col_element(const Conv& s, const float* x, int row, int col) {
  const int c = row / (s.R * s.R), fh = row / s.R % s.R, fw = row % s.R;
  const int n = col / (s.OH * s.OW), oh = col / s.OW % s.OH, ow = col % s.OW;
  const int ih = oh * s.stride - s.pad + fh, iw = ow * s.stride - s.pad + fw;
  return (ih >= 0 && ih < s.H && iw >= 0 && iw < s.W) ? x[((n * s.C + c) * s.H + ih) * s.W + iw] : 0.0f;
}

// v3, first launch: write the im2col matrix to memory, one thread per element, consecutive
// threads on consecutive elements (coalesced stores). R * R / stride^2 times the bytes of x.
__global__ void im2col(Conv s, const float* x, float* cols) {
  const int rows = s.C * s.R * s.R, n_cols = s.N * s.OH * s.OW;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows * n_cols) cols[i] = im2col_element(s, x, i / n_cols, i % n_cols);
}

// v3, second launch, and v4: the matrix product w * im2col with 32 x 32 shared-memory tiles (the
// sgemm lab's v3), each output written to its place in y. The only difference between the two
// versions is where a tile of the im2col matrix comes from: v3 reads the matrix its first launch
// wrote (Source::matrix); v4, the "implicit GEMM", computes each element from x in the tile loader
// (Source::input), so the im2col matrix never exists in memory.
constexpr int kTile = 32;
enum class Source { matrix, input };

__global__ void conv_gemm(Conv s, const float* w, const float* b, Source source, float* y) {
  __shared__ float Ws[kTile][kTile];
  __shared__ float Bs[kTile][kTile];
  const int rows = s.C * s.R * s.R, n_cols = s.N * s.OH * s.OW;  // the GEMM's inner dimension, its columns
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int k = blockIdx.y * kTile + ty, col = blockIdx.x * kTile + tx;  // this thread's filter and column
  float acc = 0.0f;
  for (int r0 = 0; r0 < rows; r0 += kTile) {
    Ws[ty][tx] = (k < s.K && r0 + tx < rows) ? w[k * rows + r0 + tx] : 0.0f;
    const int br = r0 + ty;
    if (br >= rows || col >= n_cols) Bs[ty][tx] = 0.0f;
    else if (source == Source::matrix) Bs[ty][tx] = b[br * n_cols + col];
    else Bs[ty][tx] = im2col_element(s, b, br, col);
    __syncthreads();
    for (int r = 0; r < kTile; ++r) acc += Ws[ty][r] * Bs[r][tx];
    __syncthreads();
  }
  if (k >= s.K || col >= n_cols) return;
  const int n = col / (s.OH * s.OW), pixel = col % (s.OH * s.OW);
  y[(n * s.K + k) * s.OH * s.OW + pixel] = acc;
}

// Exercise (v9): v1 with a bug at the padding edge. Find it from the lab's output.
__global__ void conv_exercise(Conv s, const float* x, const float* w, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= s.N * s.K * s.OH * s.OW) return;
  const int ow = i % s.OW, oh = i / s.OW % s.OH, k = i / (s.OW * s.OH) % s.K, n = i / (s.OW * s.OH * s.K);
  float acc = 0.0f;
  for (int c = 0; c < s.C; ++c)
    for (int fh = 0; fh < s.R; ++fh)
      for (int fw = 0; fw < s.R; ++fw) {
        const int ih = oh * s.stride - s.pad + fh, iw = ow * s.stride - s.pad + fw;
        if (ih >= 0 && ih <= s.H && iw >= 0 && iw < s.W) acc += x[((n * s.C + c) * s.H + ih) * s.W + iw] * w[((k * s.C + c) * s.R + fh) * s.R + fw];
      }
  y[i] = acc;
}

int main(int argc, char** argv) {
  // --size N,C,H,W,K,R,stride,pad (all positive). On a GPU a ResNet-50 layer (conv2_x's 3 x 3).
  lab::Lab L("conv2d", argc, argv, {32, 64, 56, 56, 64, 3, 1, 1}, {8, 4, 15, 15, 12, 3, 1, 1});
  Conv s{};
  s.N = static_cast<int>(L.size(0)), s.C = static_cast<int>(L.size(1));
  s.H = static_cast<int>(L.size(2)), s.W = static_cast<int>(L.size(3));
  s.K = static_cast<int>(L.size(4)), s.R = static_cast<int>(L.size(5));
  s.stride = static_cast<int>(L.size(6)), s.pad = static_cast<int>(L.size(7));
  s.OH = (s.H + 2 * s.pad - s.R) / s.stride + 1, s.OW = (s.W + 2 * s.pad - s.R) / s.stride + 1;
  const size_t x_n = static_cast<size_t>(s.N) * s.C * s.H * s.W, w_n = static_cast<size_t>(s.K) * s.C * s.R * s.R;
  const size_t image = static_cast<size_t>(s.K) * s.OH * s.OW, y_n = s.N * image;
  const size_t cols_n = static_cast<size_t>(s.C) * s.R * s.R * s.N * s.OH * s.OW;
  // Inputs are multiples of 1/4 in [-2, 2]: every product and partial sum is exact in float, so any
  // order of summation gives the reference's value: tolerance 0.
  auto value = [](size_t i) { return static_cast<float>(static_cast<int>((i * 7 + 3) % 17) - 8) * 0.25f; };
  std::vector<float> hx(x_n), hw(w_n), back(y_n);
  for (size_t i = 0; i < x_n; ++i) hx[i] = value(i);
  for (size_t i = 0; i < w_n; ++i) hw[i] = value(i + 5);
  // The CPU reference, directly from the definition, for every image (on a large problem the first
  // and the last: it costs 2 N K OH OW C R R flops on one core).
  std::vector<int> images{0};
  const bool large = static_cast<double>(y_n) * s.C * s.R * s.R > 1e9;
  for (int n = 1; n < s.N; ++n)
    if (!large || n == s.N - 1) images.push_back(n);
  std::vector<float> ref(images.size() * image);
  for (size_t e = 0; e < images.size(); ++e)
    for (int k = 0; k < s.K; ++k)
      for (int oh = 0; oh < s.OH; ++oh)
        for (int ow = 0; ow < s.OW; ++ow) {
          float acc = 0.0f;
          for (int c = 0; c < s.C; ++c)
            for (int fh = 0; fh < s.R; ++fh)
              for (int fw = 0; fw < s.R; ++fw) {
                const int ih = oh * s.stride - s.pad + fh, iw = ow * s.stride - s.pad + fw;
                if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;
                acc += hx[((static_cast<size_t>(images[e]) * s.C + c) * s.H + ih) * s.W + iw] *
                       hw[((static_cast<size_t>(k) * s.C + c) * s.R + fh) * s.R + fw];
              }
          ref[e * image + (static_cast<size_t>(k) * s.OH + oh) * s.OW + ow] = acc;
        }
  float *x = nullptr, *w = nullptr, *y = nullptr, *cols = nullptr;
  LAB_CHECK(cudaMalloc(&x, x_n * sizeof(float)));
  LAB_CHECK(cudaMalloc(&w, w_n * sizeof(float)));
  LAB_CHECK(cudaMalloc(&y, y_n * sizeof(float)));
  LAB_CHECK(cudaMalloc(&cols, cols_n * sizeof(float)));
  LAB_CHECK(cudaMemcpy(x, hx.data(), x_n * sizeof(float), cudaMemcpyHostToDevice));
  LAB_CHECK(cudaMemcpy(w, hw.data(), w_n * sizeof(float), cudaMemcpyHostToDevice));
  LAB_CHECK(cudaMemset(y, 0xFF, y_n * sizeof(float)));  // NaNs: an output a version misses shows
  auto check = [&] {
    LAB_CHECK(cudaMemcpy(back.data(), y, y_n * sizeof(float), cudaMemcpyDeviceToHost));
    LAB_CHECK(cudaMemset(y, 0xFF, y_n * sizeof(float)));
    double err = 0;
    for (size_t e = 0; e < images.size(); ++e)
      err = std::max(err, lab::Lab::max_abs_diff(&back[images[e] * image], &ref[e * image], image));
    return err;
  };

  const double flops = 2.0 * static_cast<double>(y_n) * s.C * s.R * s.R;
  const int threads = 256;
  auto blocks = [](size_t n, int per_block) { return static_cast<unsigned>((n + per_block - 1) / per_block); };
  const int in_h = (kTileH - 1) * s.stride + s.R, in_w = (kTileW - 1) * s.stride + s.R;
  const size_t tiled_smem = (static_cast<size_t>(in_h) * in_w + kFiltersPerBlock * s.R * s.R) * sizeof(float);
  const dim3 tiled_grid(blocks(s.OW, kTileW), blocks(s.OH, kTileH), s.N * blocks(s.K, kFiltersPerBlock));
  const dim3 gemm_grid(blocks(static_cast<size_t>(s.N) * s.OH * s.OW, kTile), blocks(s.K, kTile));
  const dim3 t32(kTile, kTile);
  L.version(1, "direct", "thread per output", flops,
            [&] { conv_direct<<<blocks(y_n, threads), threads>>>(s, x, w, y); }, check, 0);
  L.version(2, "tiled, halo in smem", "input tile + filters", flops,
            [&] { conv_tiled<<<tiled_grid, dim3(kTileW, kTileH), tiled_smem>>>(s, x, w, y); }, check, 0);
  L.version(3, "im2col + GEMM", "two launches", flops,
            [&] {
              im2col<<<blocks(cols_n, threads), threads>>>(s, x, cols);
              conv_gemm<<<gemm_grid, t32>>>(s, w, cols, Source::matrix, y);
            },
            check, 0);
  L.version(4, "implicit GEMM", "im2col in the loader", flops,
            [&] { conv_gemm<<<gemm_grid, t32>>>(s, w, x, Source::input, y); }, check, 0);
  L.broken_version(9, "exercise: padding", "find the bug", flops,
                   [&] { conv_exercise<<<blocks(y_n, threads), threads>>>(s, x, w, y); }, check, 0);
  cudaFree(x);
  cudaFree(w);
  cudaFree(y);
  cudaFree(cols);
  return L.finish();
}
