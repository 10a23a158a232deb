// What a 2-wide 16-bit access asks of the memory system (Note [16-bit pairs] in
// kernels/cuda/elementwise.cu), counted by the emulator: a copy of n f16 values one __half per
// lane, and the same copy one __half2 per lane. Compiled with the access instrumentation of the
// kernel labs (tests/simt/CMakeLists.txt), so the counters see every load and store.
//
// Per warp request, 32 lanes x 2 bytes = 64 bytes = 2 sectors of 32 bytes for __half, and
// 32 x 4 = 128 bytes = 4 sectors for __half2; the __half2 copy makes half the requests for the
// same sectors. Prints the counts and exits with 1 when one differs from these values.

// The emulator's own launch (EMBER_SIMT_LAUNCH): this program links the emulator alone, without
// libember's launch ledger (kernels/cuda/launch.h).
#include <ember/kernels/simt/simt.h>

#include <cstdio>
#include <vector>

#include <ember/kernels/simt/counters.h>

__global__ void copy_half(const __half* in, __half* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i];
}

// __ldg and __stcs move the pair as one 4-byte access on the emulator as on a GPU (a plain
// assignment of a __half2 is one access on a GPU but two 2-byte ones in the host's cuda_fp16.h).
__global__ void copy_half2(const __half2* in, __half2* out, int pairs) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < pairs) __stcs(out + i, __ldg(in + i));
}

int main() {
  const int n = 1 << 14, threads = 256;
  __half *in = nullptr, *out = nullptr;
  if (cudaMalloc(&in, n * sizeof(__half)) != cudaSuccess || cudaMalloc(&out, n * sizeof(__half)) != cudaSuccess) {
    std::printf("FAIL: cudaMalloc\n");
    return 1;
  }
  std::vector<__half> host(n);
  for (int i = 0; i < n; ++i) host[i] = __float2half(static_cast<float>(i % 2048));
  cudaMemcpy(in, host.data(), n * sizeof(__half), cudaMemcpyHostToDevice);
  ember::simt::counters_start();
  EMBER_SIMT_LAUNCH(::ember::simt::detail::LaunchKind::Fiber, copy_half, n / threads, threads, 0, 0, in, out, n);
  EMBER_SIMT_LAUNCH(::ember::simt::detail::LaunchKind::Fiber, copy_half2, n / 2 / threads, threads, 0, 0,
                    reinterpret_cast<const __half2*>(in),
               reinterpret_cast<__half2*>(out), n / 2);
  const std::vector<ember::simt::KernelCounters> k = ember::simt::counters_stop();
  cudaDeviceSynchronize();
  std::vector<__half> back(n);
  cudaMemcpy(back.data(), out, n * sizeof(__half), cudaMemcpyDeviceToHost);
  bool copied = true;
  for (int i = 0; i < n; ++i) copied = copied && __half2float(back[i]) == static_cast<float>(i % 2048);
  if (!copied || !ember::simt::counters_see_memory() || k.size() != 2) {
    std::printf("FAIL: copy %s, memory accesses %s, %zu launches counted\n", copied ? "right" : "wrong",
                ember::simt::counters_see_memory() ? "seen" : "not seen", k.size());
    return 1;
  }
  bool ok = true;
  const uint64_t warps = n / 32;
  struct Want {
    uint64_t requests, sectors;
  };
  const Want want[2] = {{warps, 2 * warps}, {warps / 2, 2 * warps}};
  for (int v = 0; v < 2; ++v) {
    const auto& c = k[static_cast<size_t>(v)];
    std::printf("%-8s load requests %llu, sectors %llu (%.1f per request); store requests %llu, sectors %llu\n",
                v == 0 ? "__half" : "__half2", static_cast<unsigned long long>(c.global_load_requests),
                static_cast<unsigned long long>(c.global_load_sectors),
                static_cast<double>(c.global_load_sectors) / static_cast<double>(c.global_load_requests),
                static_cast<unsigned long long>(c.global_store_requests),
                static_cast<unsigned long long>(c.global_store_sectors));
    if (c.global_load_requests != want[v].requests || c.global_load_sectors != want[v].sectors ||
        c.global_store_requests != want[v].requests || c.global_store_sectors != want[v].sectors) {
      std::printf("FAIL: want %llu requests and %llu sectors each way\n",
                  static_cast<unsigned long long>(want[v].requests), static_cast<unsigned long long>(want[v].sectors));
      ok = false;
    }
  }
  cudaFree(in);
  cudaFree(out);
  std::printf(ok ? "PASS\n" : "FAIL\n");
  return ok ? 0 : 1;
}
