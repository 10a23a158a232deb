// Feature tests of the SIMT emulator: every intrinsic against a CPU model of its CUDA/PTX
// definition, the launch checks, and the runtime behaviours kernels rely on. Also registered as
// simt-perturbed: (random thread and block order) and simt-defer: (EMBER_SIMT_DEFER=1).
#include <ember/kernels/cuda/launch.h>

#include <array>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <numeric>
#include <vector>

namespace {

template <class T>
struct Dev {
  T* p = nullptr;
  size_t n;
  explicit Dev(size_t count, T fill = T{}) : n(count) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T)) == cudaSuccess);
    std::vector<T> h(n, fill);
    REQUIRE(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  explicit Dev(const std::vector<T>& h) : Dev(h.size()) {
    REQUIRE(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~Dev() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    REQUIRE(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
};

// PTX shfl.sync, written independently of the emulator: the lane that `lane` reads.
int model_source(int lane, int mode, int b, int width) {
  const int seg_start = lane / width * width, seg_end = seg_start + width;
  switch (mode) {
    case 0: return seg_start + (b % width);                       // idx
    case 1: return lane - b >= seg_start ? lane - b : lane;       // up
    case 2: return lane + b < seg_end ? lane + b : lane;          // down
    default: return (lane ^ b) < seg_end ? lane ^ b : lane;       // xor
  }
}

__global__ void shuffles(int* out, int mode, int b, int width) {
  const int v = 1000 + static_cast<int>(threadIdx.x);
  int r = 0;
  switch (mode) {
    case 0: r = __shfl_sync(0xffffffffu, v, b, width); break;
    case 1: r = __shfl_up_sync(0xffffffffu, v, static_cast<unsigned>(b), width); break;
    case 2: r = __shfl_down_sync(0xffffffffu, v, static_cast<unsigned>(b), width); break;
    default: r = __shfl_xor_sync(0xffffffffu, v, b, width); break;
  }
  out[threadIdx.x] = r;
}

__global__ void votes(unsigned* out) {
  const unsigned lane = threadIdx.x % 32;
  const int odd = lane & 1;
  out[threadIdx.x * 6 + 0] = __ballot_sync(0xffffffffu, odd);
  out[threadIdx.x * 6 + 1] = static_cast<unsigned>(__any_sync(0xffffffffu, lane == 7));
  out[threadIdx.x * 6 + 2] = static_cast<unsigned>(__all_sync(0xffffffffu, lane < 32));
  out[threadIdx.x * 6 + 3] = static_cast<unsigned>(__all_sync(0xffffffffu, odd));
  out[threadIdx.x * 6 + 4] = __reduce_add_sync(0xffffffffu, lane);
  out[threadIdx.x * 6 + 5] = __activemask();
}

__global__ void block_votes(int* out) {
  const int t = static_cast<int>(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  const int a = __syncthreads_count(t % 3 == 0);
  const int b = __syncthreads_and(t >= 0);
  const int c = __syncthreads_or(t == 5);
  const int d = __syncthreads_and(t != 5);
  if (t == 0) {
    out[0] = a;
    out[1] = b;
    out[2] = c;
    out[3] = d;
  }
}

__global__ void indices(unsigned* out) {
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned i = block * blockDim.x * blockDim.y * blockDim.z + thread;
  out[i] = block * 10000 + thread;
}

__global__ void atomics(int* i, unsigned* u, unsigned long long* ull, float* f, double* d, __half* h, int* mx) {
  atomicAdd(i, 1);
  atomicSub(i + 1, 2);
  atomicAdd(u, 3u);
  atomicInc(u + 1, 9u);
  atomicAdd(ull, 1ull << 33);
  atomicAdd(f, 0.5f);
  atomicAdd(d, 0.25);
  atomicAdd(h, __float2half(1.0f));
  atomicMax(mx, static_cast<int>(threadIdx.x + blockIdx.x * blockDim.x));
  atomicMin(mx + 1, -static_cast<int>(threadIdx.x));
  atomicCAS(mx + 2, 0, 42);
}

__global__ void dynamic_reverse(const float* in, float* out) {
  EMBER_DYNAMIC_SHARED(float, s);
  s[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];
}

__global__ void read_poisoned_shared(unsigned* out) {
  __shared__ unsigned s[4];
  if (threadIdx.x == 0) out[0] = s[3];  // never written: reads the per-block poison
}

__global__ void by_value(int* out, int k) {
  k += static_cast<int>(threadIdx.x);  // each thread has its own copy of k
  __syncthreads();
  out[threadIdx.x] = k;
}

template <int Tile>
__global__ void sgemm_tiled(const float* a, const float* b, float* c, int m, int n, int k) {
  __shared__ float as[Tile][Tile];
  __shared__ float bs[Tile][Tile + 1];
  const int row = static_cast<int>(blockIdx.y * Tile + threadIdx.y), col = static_cast<int>(blockIdx.x * Tile + threadIdx.x);
  float acc = 0;
  for (int t = 0; t < k; t += Tile) {
    as[threadIdx.y][threadIdx.x] = row < m && t + static_cast<int>(threadIdx.x) < k ? a[row * k + t + threadIdx.x] : 0;
    bs[threadIdx.y][threadIdx.x] = col < n && t + static_cast<int>(threadIdx.y) < k ? b[(t + threadIdx.y) * n + col] : 0;
    __syncthreads();
    for (int q = 0; q < Tile; ++q) acc += as[threadIdx.y][q] * bs[q][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = acc;
}

__global__ void flat_scale(float* x, int n, float s) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] *= s;
}

}  // namespace

TEST_CASE("simt: shuffles follow PTX shfl.sync for every mode and width", "[simt]") {
  Dev<int> out(32);
  for (int width : {1, 2, 4, 8, 16, 32})
    for (int mode = 0; mode < 4; ++mode)
      for (int b : {0, 1, 3, 5, 16, 31}) {
        EMBER_LAUNCH(shuffles, 1, 32, 0, 0, ::ember::cuda::Cost{}, out.p, mode, b, width);
        const auto got = out.get();
        for (int lane = 0; lane < 32; ++lane) {
          INFO("width " << width << " mode " << mode << " b " << b << " lane " << lane);
          REQUIRE(got[static_cast<size_t>(lane)] == 1000 + model_source(lane, mode, b, width));
        }
      }
}

TEST_CASE("simt: votes, reductions and the active mask", "[simt]") {
  Dev<unsigned> out(48 * 6);
  EMBER_LAUNCH(votes, 1, 48, 0, 0, ::ember::cuda::Cost{}, out.p);  // the second warp has 16 lanes
  const auto got = out.get();
  for (unsigned t = 0; t < 48; ++t) {
    const unsigned lanes = t < 32 ? 32 : 16, exists = t < 32 ? 0xffffffffu : 0xffffu;
    CHECK(got[t * 6 + 0] == (0xAAAAAAAAu & exists));
    CHECK(got[t * 6 + 1] == 1u);
    CHECK(got[t * 6 + 2] == 1u);
    CHECK(got[t * 6 + 3] == 0u);
    CHECK(got[t * 6 + 4] == lanes * (lanes - 1) / 2);
    CHECK(got[t * 6 + 5] == exists);
  }
}

TEST_CASE("simt: __syncthreads_count/_and/_or over a 3-D block", "[simt]") {
  Dev<int> out(4);
  EMBER_LAUNCH(block_votes, 1, dim3(8, 4, 3), 0, 0, ::ember::cuda::Cost{}, out.p);
  const auto got = out.get();
  CHECK(got[0] == 32);  // t % 3 == 0 for t < 96
  CHECK(got[1] == 1);
  CHECK(got[2] == 1);
  CHECK(got[3] == 0);
}

TEST_CASE("simt: thread and block indices in 3-D, both launch kinds", "[simt]") {
  const dim3 grid(3, 2, 2), block(4, 3, 2);
  const size_t n = 12 * 24;
  for (int flat = 0; flat < 2; ++flat) {
    Dev<unsigned> out(n);
    if (flat) EMBER_LAUNCH_FLAT(indices, grid, block, 0, ::ember::cuda::Cost{}, out.p);
    else EMBER_LAUNCH(indices, grid, block, 0, 0, ::ember::cuda::Cost{}, out.p);
    const auto got = out.get();
    for (unsigned i = 0; i < n; ++i) REQUIRE(got[i] == i / 24 * 10000 + i % 24);
  }
}

TEST_CASE("simt: atomics on every type CUDA has them for", "[simt]") {
  Dev<int> i(2, 0), mx(3, 0);
  Dev<unsigned> u(2, 0u);
  Dev<unsigned long long> ull(1, 0ull);
  Dev<float> f(1, 0.0f);
  Dev<double> d(1, 0.0);
  Dev<__half> h(1, __float2half(0.0f));
  EMBER_LAUNCH_FLAT(atomics, 64, 256, 0, ::ember::cuda::Cost{}, i.p, u.p, ull.p, f.p, d.p, h.p, mx.p);  // blocks run in parallel
  const int n = 64 * 256;
  CHECK(i.get() == std::vector<int>{n, -2 * n});
  CHECK(u.get() == std::vector<unsigned>{3u * n, static_cast<unsigned>(n % 10)});
  CHECK(ull.get()[0] == (static_cast<unsigned long long>(n) << 33));
  CHECK(f.get()[0] == 0.5f * n);
  CHECK(d.get()[0] == 0.25 * n);
  CHECK(__half2float(h.get()[0]) == 2048.0f);  // 1 + 2048 rounds to 2048 in half precision
  CHECK(mx.get() == std::vector<int>{n - 1, -255, 42});
}

TEST_CASE("simt: dynamic shared memory, the 48 KiB limit and cudaFuncSetAttribute", "[simt]") {
  std::vector<float> in(4 * 128);
  std::iota(in.begin(), in.end(), 0.0f);
  Dev<float> x(in), y(in.size());
  EMBER_LAUNCH(dynamic_reverse, 4, 128, 128 * sizeof(float), 0, ::ember::cuda::Cost{}, x.p, y.p);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto got = y.get();
  for (size_t i = 0; i < in.size(); ++i) REQUIRE(got[i] == in[i / 128 * 128 + 127 - i % 128]);

  EMBER_LAUNCH(dynamic_reverse, 4, 128, 64 * 1024, 0, ::ember::cuda::Cost{}, x.p, y.p);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  REQUIRE(cudaFuncSetAttribute(dynamic_reverse, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024) == cudaSuccess);
  EMBER_LAUNCH(dynamic_reverse, 4, 128, 64 * 1024, 0, ::ember::cuda::Cost{}, x.p, y.p);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(cudaFuncSetAttribute(dynamic_reverse, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024) ==
        cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

TEST_CASE("simt: launch limits of sm_90 are CUDA errors", "[simt]") {
  Dev<unsigned> out(1);
  EMBER_LAUNCH(indices, 1, 2048, 0, 0, ::ember::cuda::Cost{}, out.p);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  EMBER_LAUNCH(indices, 1, dim3(1, 1, 65), 0, 0, ::ember::cuda::Cost{}, out.p);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  EMBER_LAUNCH(indices, dim3(1, 65536), 1, 0, 0, ::ember::cuda::Cost{}, out.p);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  EMBER_LAUNCH(indices, 0, 32, 0, 0, ::ember::cuda::Cost{}, out.p);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  cudaStream_t bogus = reinterpret_cast<cudaStream_t>(0x1234);
  EMBER_LAUNCH(indices, 1, 1, 0, bogus, ::ember::cuda::Cost{}, out.p);
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
}

TEST_CASE("simt: shared and device memory start poisoned", "[simt]") {
  if (const char* p = std::getenv("EMBER_SIMT_POISON"); p && p[0] == '0') return;
  Dev<unsigned> out(1);
  EMBER_LAUNCH(read_poisoned_shared, 1, 32, 0, 0, ::ember::cuda::Cost{}, out.p);
#if !defined(__SANITIZE_ADDRESS__)  // ASan builds keep static __shared__ out of the poisoned section
  CHECK(out.get()[0] == 0xFFFFFFFFu);
#endif
  unsigned* raw = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&raw), 16) == cudaSuccess);
  unsigned h[4];
  REQUIRE(cudaMemcpy(h, raw, 16, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(h[0] == 0xFFFFFFFFu);
  cudaFree(raw);
}

TEST_CASE("simt: kernel parameters are per-thread copies", "[simt]") {
  Dev<int> out(64);
  EMBER_LAUNCH(by_value, 1, 64, 0, 0, ::ember::cuda::Cost{}, out.p, 100);
  const auto got = out.get();
  for (int t = 0; t < 64; ++t) REQUIRE(got[static_cast<size_t>(t)] == 100 + t);
}

TEST_CASE("simt: tiled SGEMM matches the CPU, square and ragged", "[simt]") {
  for (auto [m, n, k] : {std::array<int, 3>{64, 64, 64}, std::array<int, 3>{37, 70, 45}}) {
    std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n)), want(static_cast<size_t>(m * n));
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 7) - 3;
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 5) - 2;
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        float s = 0;
        for (int q = 0; q < k; ++q) s += a[static_cast<size_t>(i * k + q)] * b[static_cast<size_t>(q * n + j)];
        want[static_cast<size_t>(i * n + j)] = s;
      }
    Dev<float> da(a), db(b), dc(want.size());
    EMBER_LAUNCH((sgemm_tiled<16>), dim3((n + 15) / 16, (m + 15) / 16), dim3(16, 16), 0, 0, ::ember::cuda::Cost{}, da.p, db.p, dc.p, m, n, k);
    REQUIRE(dc.get() == want);  // small integers: exact
  }
}

TEST_CASE("simt: streams order work, deferred mode waits for synchronization", "[simt]") {
  const int n = 1 << 12;
  Dev<float> x(static_cast<size_t>(n), 1.0f);
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  EMBER_LAUNCH_FLAT(flat_scale, n / 256, 256, s, ::ember::cuda::Cost{}, x.p, n, 3.0f);
  float* early = nullptr;  // pinned: a copy to pageable memory would return only when done
  REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&early), n * sizeof(float)) == cudaSuccess);
  early[0] = early[n - 1] = -1.0f;
  REQUIRE(cudaMemcpyAsync(early, x.p, n * sizeof(float), cudaMemcpyDeviceToHost, s) == cudaSuccess);
  const bool deferred = std::getenv("EMBER_SIMT_DEFER") && std::getenv("EMBER_SIMT_DEFER")[0] == '1';
  CHECK(early[0] == (deferred ? -1.0f : 3.0f));  // no synchronization yet
  CHECK(cudaStreamQuery(s) == (deferred ? cudaErrorNotReady : cudaSuccess));
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(early[0] == 3.0f);
  CHECK(early[n - 1] == 3.0f);
  cudaFreeHost(early);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  CHECK(cudaStreamDestroy(s) == cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
}

TEST_CASE("simt: a captured copy with a pageable host side runs at each replay", "[simt]") {
  // The emulator's model of what CUDA 13.0 accepted on an H200 (Note [Stream capture in the
  // emulator]): the copy becomes a memcpy node that reads and writes the host memory when it runs.
  std::vector<float> values(64);
  std::iota(values.begin(), values.end(), -10.0f);
  Dev<float> d(values);
  std::vector<float> out(64, 1.0f), in(1, 7.0f);  // pageable
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(out.data(), d.p, 64 * sizeof(float), cudaMemcpyDeviceToHost, s) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(d.p, in.data(), sizeof(float), cudaMemcpyHostToDevice, s) == cudaSuccess);
  cudaGraph_t g = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);
  CHECK(out == std::vector<float>(64, 1.0f));  // recorded, not run
  CHECK(d.get() == values);
  size_t nodes = 0;
  REQUIRE(cudaGraphGetNodes(g, nullptr, &nodes) == cudaSuccess);
  CHECK(nodes == 2);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, g, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(out == values);
  std::vector<float> want = values;
  want[0] = 7.0f;
  CHECK(d.get() == want);
  in[0] = 42.0f;  // read by the second node at the next replay, not frozen at capture
  REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(out == want);
  want[0] = 42.0f;
  CHECK(d.get() == want);
  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(g) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}
