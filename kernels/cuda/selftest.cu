// Backend self-test kernels (selftest.h): one flat launch and one block reduction.
#include "launch.h"

#include "../../core/error.h"
#include "../random.h"  // mul_rn
#include "../../core/cuda/runtime.h"
#include "selftest.h"

namespace ember::cuda {

namespace {

// One thread per element; thread i of the grid handles x[i], y[i]. No cooperation between
// threads, hence a flat launch.
__global__ void axpy_kernel(int64_t n, float a, const float* x, float* y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // mul_rn: the product rounded on its own, as on the CPU (nvcc would otherwise fuse the
  // multiply-add: Note [No FMA contraction] in kernels/random.h).
  if (i < n) y[i] = kernels::mul_rn(a, x[i]) + y[i];
}

// One block per output. Each thread loads one element; each warp sums its 32 values with
// __shfl_down_sync (lane 0 ends with the warp's sum); lane 0 of each warp writes it to shared
// memory; after the barrier, warp 0 sums the per-warp partials the same way.
__global__ void block_sum_kernel(const float* x, float* out) {
  __shared__ float warp_sums[32];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  float v = x[static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? warp_sums[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) out[blockIdx.x] = v;
  }
}

void launch_axpy(int64_t n, float a, const float* x, float* y) {
  if (n == 0) return;
  const int threads = 256;
  const auto blocks = static_cast<unsigned>((n + threads - 1) / threads);
  EMBER_LAUNCH_FLAT(axpy_kernel, blocks, threads, current_stream(), ::ember::cuda::cost(8.0 * n, 4.0 * n, 2.0 * n), n, a, x,
                    y);
  check_launch("selftest_axpy");
}

void launch_block_sum(int64_t n, int block_size, const float* x, float* out) {
  if (n == 0) return;
  EMBER_LAUNCH(block_sum_kernel, static_cast<unsigned>(n / block_size), block_size, 0, current_stream(),
               ::ember::cuda::cost(4.0 * n, 4.0 * (n / block_size), double(n)), x, out);
  check_launch("selftest_block_sum");
}

}  // namespace

void selftest_axpy(int64_t n, float a, const float* x, float* y) {
  EMBER_CHECK(n >= 0, "selftest_axpy: negative n ", n);
  launch_axpy(n, a, x, y);
}

void selftest_block_sum(int64_t n, int block_size, const float* x, float* out) {
  EMBER_CHECK(block_size >= 32 && block_size <= 1024 && block_size % 32 == 0,
              "selftest_block_sum: block_size must be a multiple of 32 in [32, 1024], got ", block_size);
  EMBER_CHECK(n >= 0 && n % block_size == 0, "selftest_block_sum: n = ", n, " is not a multiple of ", block_size);
  launch_block_sum(n, block_size, x, out);
}

}  // namespace ember::cuda
