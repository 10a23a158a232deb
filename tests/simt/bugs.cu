// Planted bugs: each case is a classic CUDA mistake, and the emulator must report it with the
// bug's file:line (ctest: simt-bug:<case>; the marker `// BUG(case)` names the line the
// diagnostic must point to). `simt_bugs <case>` runs the case in a child process so that the
// expected abort() does not look like a crash to ctest; the child's output is the test's output.
#include <ember/kernels/cuda/launch.h>
#include <ember/kernels/cuda/common.cuh>
#include <ember/kernels/simt/warp_matrix.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace {

// A tree reduction that forgot the barrier after filling shared memory: thread 0 adds s[128]
// before thread 128 has written it, and reads the 0xFF poison (NaN).
__global__ void missing_barrier(const float* in, float* out) {
  __shared__ float s[256];
  s[threadIdx.x] = in[threadIdx.x];
  // BUG(missing_barrier): __syncthreads() belongs here
  for (unsigned stride = 128; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = s[0];
}

__global__ void divergent_barrier(float* out) {
  if (threadIdx.x % 2) {
    out[threadIdx.x] = 1.0f;
    __syncthreads();
  } else {
    out[threadIdx.x] = 2.0f;
    __syncthreads();  // BUG(divergent_barrier): a different barrier than the odd threads'
  }
}

__global__ void exit_at_barrier(const float* in, float* out, int n) {
  __shared__ float s[256];
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;  // the last block's tail leaves...
  s[threadIdx.x] = in[i];
  __syncthreads();  // BUG(exit_at_barrier): ...while the others wait here
  out[i] = s[threadIdx.x] + s[threadIdx.x ^ 1];
}

__global__ void oob_dynamic_shared(float* out) {
  EMBER_DYNAMIC_SHARED(float, s);
  s[threadIdx.x + 1] = 1.0f;  // BUG(oob_dynamic_shared): thread 63 writes s[64]
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
}

__global__ void oob_static_shared(float* out) {
  __shared__ float s[64];
  s[threadIdx.x + 1] = 1.0f;  // BUG(oob_static_shared): thread 63 writes s[64]
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
}

// Each thread reads its neighbour's new value without a barrier in between: the result depends
// on which thread ran first (forward order: every old 0; reverse: almost every new value).
__global__ void race_neighbour(float* out) {
  __shared__ float s[64];
  s[threadIdx.x] = 0.0f;
  __syncthreads();
  s[threadIdx.x] = static_cast<float>(threadIdx.x);
  out[threadIdx.x] = s[(threadIdx.x + 1) % 64];  // BUG(race_neighbour): no __syncthreads before
}

__global__ void race_counter(int* out) {
  __shared__ int count;
  if (threadIdx.x == 0) count = 0;
  __syncthreads();
  count += 1;  // BUG(race_counter): should be atomicAdd
  __syncthreads();
  if (threadIdx.x == 0) out[0] = count;
}

__global__ void lane_not_in_mask(float* out) {
  const float v = static_cast<float>(threadIdx.x);
  out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, v, 1);  // BUG(lane_not_in_mask): lanes 16.. are not in it
}

__global__ void bad_width(float* out) {
  out[threadIdx.x] = __shfl_sync(0xffffffffu, 1.0f, 0, 12);  // BUG(bad_width)
}

__global__ void divergent_warp_op(float* out) {
  float v = static_cast<float>(threadIdx.x);
  if (threadIdx.x < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
  else v = __shfl_xor_sync(0xffffffffu, v, 2);  // BUG(divergent_warp_op): two different shuffles
  out[threadIdx.x] = v;
}

__global__ void deadlock(float* out) {
  float v = static_cast<float>(threadIdx.x);
  if (threadIdx.x < 16) v = __shfl_down_sync(0xffffffffu, v, 1);  // BUG(deadlock): lanes 16.. never come
  __syncthreads();
  out[threadIdx.x] = v;
}

__global__ void mma_partial_warp(float* out) {
  if (threadIdx.x >= 24) return;  // lanes 24-31 leave before the warp-wide instruction
  const uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  const float c[4] = {0, 0, 0, 0};
  float d[4];
  ember::simt::ptx::mma_m16n8k16_bf16(d, a, b, c);  // BUG(mma_partial_warp): needs all 32 lanes
  out[threadIdx.x] = d[0];
}

__global__ void ldmatrix_misaligned(float* out) {
  __shared__ uint16_t tile[32][8];
  for (int c = 0; c < 8; ++c) tile[threadIdx.x][c] = static_cast<uint16_t>(c);
  __syncthreads();
  uint32_t r[4];
  ember::simt::ptx::ldmatrix_x4(r, &tile[threadIdx.x][1]);  // BUG(ldmatrix_misaligned): rows must be 16-byte aligned
  out[threadIdx.x] = static_cast<float>(r[0]);
}

// Four floats a thread as one 16-byte vector load, from a base one float past an allocation's
// start: every pack straddles a 16-byte boundary, which a GPU refuses (kernels/simt/simt.h,
// Note [Vector access alignment]; a Note's name stays on one line here, for CMake's reading).
__global__ void vector_misaligned(const float* in, float* out) {
  using ember::kernels::gpu::detail::Pack;
  const float* base = in + 1;
  const Pack<float, 4> v = ember::kernels::gpu::detail::vector_load<4>(base + 4 * threadIdx.x);  // BUG(vector_misaligned)
  out[threadIdx.x] = v.v[0] + v.v[1] + v.v[2] + v.v[3];
}

__global__ void nop(float* out) {
  if (out != nullptr && threadIdx.x == 12345) out[0] = 0;
}

__global__ void barrier_in_flat(float* out) {
  out[threadIdx.x] = 1.0f;
  __syncthreads();  // BUG(barrier_in_flat): flat launches may not use barriers
}

template <class T>
T* device_array(size_t n, T fill) {
  T* p = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T));
  std::vector<T> h(n, fill);
  cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice);
  return p;
}

template <class T>
std::vector<T> host_array(const T* d, size_t n) {
  std::vector<T> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
  return h;
}

const std::map<std::string, std::function<void()>> cases = {
    {"missing_barrier",
     [] {
       float *in = device_array(256, 1.0f), *out = device_array(1, 0.0f);
       EMBER_LAUNCH(missing_barrier, 1, 256, 0, 0, ::ember::cuda::Cost{}, in, out);
       const float got = host_array(out, 1)[0];
       std::printf("result %g, want 256: %s\n", got, got == 256.0f ? "correct (bug NOT detected)" : "bug detected");
     }},
    {"divergent_barrier",
     [] { EMBER_LAUNCH(divergent_barrier, 1, 64, 0, 0, ::ember::cuda::Cost{}, device_array(64, 0.0f)); }},
    {"exit_at_barrier",
     [] {
       const int n = 1000;
       EMBER_LAUNCH(exit_at_barrier, 4, 256, 0, 0, ::ember::cuda::Cost{}, device_array(n, 1.0f), device_array(n, 0.0f), n);
     }},
    {"oob_dynamic_shared",
     [] {
       float* out = device_array(64, 0.0f);
       // The plain build's guard check knows the launch, not the writing line (ASan knows that).
       EMBER_LAUNCH(oob_dynamic_shared, 1, 64, 64 * sizeof(float), 0, ::ember::cuda::Cost{}, out);  // BUG(oob_dynamic_shared_launch)
     }},
    {"oob_static_shared", [] { EMBER_LAUNCH(oob_static_shared, 1, 64, 0, 0, ::ember::cuda::Cost{}, device_array(64, 0.0f)); }},
    {"race_neighbour",
     [] {
       float* out = device_array(64, 0.0f);
       EMBER_LAUNCH(race_neighbour, 1, 64, 0, 0, ::ember::cuda::Cost{}, out);
       double sum = 0;
       for (float v : host_array(out, 64)) sum += v;
       std::printf("sum %g (race-free: 2016)\n", sum);
     }},
    {"race_counter",
     [] {
       int* out = device_array(1, 0);
       EMBER_LAUNCH(race_counter, 1, 64, 0, 0, ::ember::cuda::Cost{}, out);
       std::printf("count %d\n", host_array(out, 1)[0]);
     }},
    {"lane_not_in_mask", [] { EMBER_LAUNCH(lane_not_in_mask, 1, 32, 0, 0, ::ember::cuda::Cost{}, device_array(32, 0.0f)); }},
    {"bad_width", [] { EMBER_LAUNCH(bad_width, 1, 32, 0, 0, ::ember::cuda::Cost{}, device_array(32, 0.0f)); }},
    {"divergent_warp_op", [] { EMBER_LAUNCH(divergent_warp_op, 1, 32, 0, 0, ::ember::cuda::Cost{}, device_array(32, 0.0f)); }},
    {"deadlock", [] { EMBER_LAUNCH(deadlock, 1, 32, 0, 0, ::ember::cuda::Cost{}, device_array(32, 0.0f)); }},
    {"mma_partial_warp", [] { EMBER_LAUNCH(mma_partial_warp, 1, 32, 0, 0, ::ember::cuda::Cost{}, device_array(32, 0.0f)); }},
    {"ldmatrix_misaligned", [] { EMBER_LAUNCH(ldmatrix_misaligned, 1, 32, 0, 0, ::ember::cuda::Cost{}, device_array(32, 0.0f)); }},
    {"vector_misaligned",
     [] { EMBER_LAUNCH_FLAT(vector_misaligned, 1, 32, 0, ::ember::cuda::Cost{}, device_array(129, 1.0f), device_array(32, 0.0f)); }},
    {"host_pointer",
     [] {
       std::vector<float> host(64);
       EMBER_LAUNCH(nop, 1, 64, 0, 0, ::ember::cuda::Cost{}, host.data());  // BUG(host_pointer): a host pointer
     }},
    {"barrier_in_flat", [] { EMBER_LAUNCH_FLAT(barrier_in_flat, 1, 64, 0, ::ember::cuda::Cost{}, device_array(64, 0.0f)); }},
};

}  // namespace

int main(int argc, char** argv) {
  const auto it = argc == 2 ? cases.find(argv[1]) : cases.end();
  if (it == cases.end()) {
    std::fprintf(stderr, "usage: simt_bugs <case>; cases:");
    for (const auto& c : cases) std::fprintf(stderr, " %s", c.first.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  std::fflush(stdout);
  const pid_t child = fork();
  if (child == 0) {
    it->second();
    cudaDeviceSynchronize();
    std::fflush(stdout);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (WIFSIGNALED(status)) std::printf("simt_bugs %s: the case aborted (signal %d)\n", argv[1], WTERMSIG(status));
  else std::printf("simt_bugs %s: the case exited with status %d\n", argv[1], WEXITSTATUS(status));
  return 0;
}
