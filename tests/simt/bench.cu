// The emulator's costs: `simt_bench` prints one line per measurement (best of 5 runs).
// Numbers for the project's machine are in docs/simt.md.
#include <ember/kernels/cuda/launch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

namespace {

__global__ void saxpy(int n, float a, const float* x, float* y) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void block_reduce(const float* in, float* out) {
  __shared__ float s[256];
  s[threadIdx.x] = in[blockIdx.x * 256 + threadIdx.x];
  __syncthreads();
  for (unsigned stride = 128; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

__global__ void shuffle_reduce(const float* in, float* out) {
  __shared__ float warp_sums[8];
  float v = in[blockIdx.x * 256 + threadIdx.x];
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < 8 ? warp_sums[threadIdx.x] : 0.0f;
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) out[blockIdx.x] = v;
  }
}

__global__ void barriers(int rounds, float* out) {
  float v = 0;
  for (int r = 0; r < rounds; ++r) {
    v += 1.0f;
    __syncthreads();
  }
  out[threadIdx.x] = v;
}

__global__ void sgemm32(const float* a, const float* b, float* c, int n) {
  __shared__ float as[32][32];
  __shared__ float bs[32][33];
  const int row = static_cast<int>(blockIdx.y * 32 + threadIdx.y), col = static_cast<int>(blockIdx.x * 32 + threadIdx.x);
  float acc = 0;
  for (int t = 0; t < n; t += 32) {
    as[threadIdx.y][threadIdx.x] = a[row * n + t + threadIdx.x];
    bs[threadIdx.y][threadIdx.x] = b[(t + threadIdx.y) * n + col];
    __syncthreads();
    for (int k = 0; k < 32; ++k) acc += as[threadIdx.y][k] * bs[k][threadIdx.x];
    __syncthreads();
  }
  c[row * n + col] = acc;
}

double best_ms(const std::function<void()>& f) {
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    cudaDeviceSynchronize();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

float* dev(size_t n, float v) {
  float* p = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float));
  std::vector<float> h(n, v);
  cudaMemcpy(p, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  return p;
}

}  // namespace

int main() {
  const int n = 1 << 20;
  float *x = dev(n, 1.0f), *y = dev(n, 2.0f), *out = dev(n / 256, 0.0f);
  double ms = best_ms([&] { EMBER_LAUNCH_FLAT(saxpy, n / 256, 256, 0, ::ember::cuda::Cost{}, n, 2.0f, x, y); });
  std::printf("saxpy 1M, EMBER_LAUNCH_FLAT (4096x256)        %8.2f ms  %6.1f ns/element\n", ms, ms * 1e6 / n);
  ms = best_ms([&] { EMBER_LAUNCH(saxpy, n / 256, 256, 0, 0, ::ember::cuda::Cost{}, n, 2.0f, x, y); });
  std::printf("saxpy 1M, EMBER_LAUNCH (fibers, 4096x256)    %8.2f ms  %6.1f ns/element\n", ms, ms * 1e6 / n);
  ms = best_ms([&] { EMBER_LAUNCH(block_reduce, n / 256, 256, 0, 0, ::ember::cuda::Cost{}, x, out); });
  std::printf("block reduce 1M (smem, 9 barriers, 4096x256)  %8.2f ms  %6.1f ns/element\n", ms, ms * 1e6 / n);
  ms = best_ms([&] { EMBER_LAUNCH(shuffle_reduce, n / 256, 256, 0, 0, ::ember::cuda::Cost{}, x, out); });
  std::printf("shuffle reduce 1M (10 shuffles, 1 barrier)    %8.2f ms  %6.1f ns/element\n", ms, ms * 1e6 / n);
  for (int block : {32, 256, 1024}) {
    const int rounds = 200;
    const double base = best_ms([&] { EMBER_LAUNCH(barriers, 8, block, 0, 0, ::ember::cuda::Cost{}, 0, out); });
    ms = best_ms([&] { EMBER_LAUNCH(barriers, 8, block, 0, 0, ::ember::cuda::Cost{}, rounds, out); });
    std::printf("__syncthreads, block %4d                      %8.1f ns per thread per barrier\n", block,
                (ms - base) * 1e6 / (8.0 * block * rounds));
  }
  const int m = 256;
  float *a = dev(m * m, 1.0f), *b = dev(m * m, 0.5f), *c = dev(m * m, 0.0f);
  ms = best_ms([&] { EMBER_LAUNCH(sgemm32, dim3(m / 32, m / 32), dim3(32, 32), 0, 0, ::ember::cuda::Cost{}, a, b, c, m); });
  std::printf("tiled SGEMM 256^3 (32x32 tiles, 1024 thr/blk) %8.2f ms  %6.2f GFLOP/s\n", ms, 2.0 * m * m * m / ms / 1e6);
  return 0;
}
