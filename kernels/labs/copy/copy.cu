// Lab: copy — how fast can a GPU move memory, and what makes a copy slow?
// Read kernels/labs/copy/README.md alongside. Build and run:
//   nvcc -O3 -arch=sm_90 -std=c++17 -o copy kernels/labs/copy/copy.cu && ./copy     (a GPU)
//   cmake --build build --target lab_copy && ./build/labs/lab_copy                  (the emulator)

#include "../common/lab.cuh"

#include <vector>

// v1: one thread per element. Neighbouring threads read neighbouring floats, so the 32 lanes of a
// warp ask for 128 consecutive bytes: 4 sectors, one request.
__global__ void copy_naive(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i];
}

// v2: the same threads, each copying a different element: the array seen as rows of 32 floats,
// thread i takes row i % rows, column i / rows. Neighbouring lanes land a row (128 bytes) apart,
// so every lane needs its own sector: 32 sectors per request, 8 times the bytes of v1 moved.
__global__ void copy_strided(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int rows = n / 32;  // the last n % 32 elements are copied in place
  if (i < rows * 32) {
    const int j = (i % rows) * 32 + i / rows;
    out[j] = in[j];
  } else if (i < n) {
    out[i] = in[i];
  }
}

// v3: a grid-stride loop: a fixed grid (a few blocks per SM) walks the whole array, so a launch
// does not depend on n and each thread amortizes its index arithmetic over many elements.
__global__ void copy_grid_stride(const float* in, float* out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = in[i];
}

// v4: float4 — each lane moves 16 bytes with one instruction, so a warp request covers 512 bytes
// (16 sectors) and the GPU needs a quarter of the load/store instructions. The tail that is not
// a multiple of 4 is copied one float at a time.
__global__ void copy_float4(const float* in, float* out, int n) {
  const int n4 = n / 4;
  const float4* in4 = reinterpret_cast<const float4*>(in);
  float4* out4 = reinterpret_cast<float4*>(out);
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += gridDim.x * blockDim.x) out4[i] = in4[i];
  for (int i = n4 * 4 + blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = in[i];
}

// v5: float4 through the read-only data cache (__ldg), two float4 per thread per iteration so
// that each thread has two independent loads in flight.
__global__ void copy_float4_x2(const float* in, float* out, int n) {
  const int n4 = n / 4;
  const float4* in4 = reinterpret_cast<const float4*>(in);
  float4* out4 = reinterpret_cast<float4*>(out);
  const int stride = gridDim.x * blockDim.x;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + stride < n4; i += 2 * stride) {
    const float4 a = __ldg(in4 + i);
    const float4 b = __ldg(in4 + i + stride);
    out4[i] = a;
    out4[i + stride] = b;
  }
  if (i < n4) out4[i] = __ldg(in4 + i);
  for (int k = n4 * 4 + blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride) out[k] = in[k];
}

// Exercise (v9): an off-by-one at the ragged edge. Find it from the lab's output.
__global__ void copy_off_by_one(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) out[i] = in[i];
}

int main(int argc, char** argv) {
  lab::Lab L("copy", argc, argv, {1 << 26}, {(1 << 16) + 3});
  const int n = static_cast<int>(L.size(0));
  std::vector<float> h(n), back(n);
  for (int i = 0; i < n; ++i) h[i] = static_cast<float>(i % 1000) * 0.5f - 7.0f;
  float *in = nullptr, *out = nullptr;
  LAB_CHECK(cudaMalloc(&in, n * sizeof(float)));
  LAB_CHECK(cudaMalloc(&out, n * sizeof(float)));
  LAB_CHECK(cudaMemcpy(in, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  cudaDeviceProp prop{};
  LAB_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int threads = 256, blocks = (n + threads - 1) / threads;
  const int resident = 4 * prop.multiProcessorCount;  // a grid that fills the GPU a few times over

  auto check = [&] {
    LAB_CHECK(cudaMemcpy(back.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost));
    LAB_CHECK(cudaMemset(out, 0xFF, n * sizeof(float)));  // NaNs: the next version starts from garbage
    return lab::Lab::max_abs_diff(back.data(), h.data(), n);
  };
  LAB_CHECK(cudaMemset(out, 0xFF, n * sizeof(float)));
  L.version(1, "naive", "one thread per element", 0, [&] { copy_naive<<<blocks, threads>>>(in, out, n); }, check, 0);
  L.version(2, "strided", "lanes 128 bytes apart", 0, [&] { copy_strided<<<blocks, threads>>>(in, out, n); }, check, 0);
  L.version(3, "grid-stride", "fixed grid, loop over n", 0,
            [&] { copy_grid_stride<<<resident, threads>>>(in, out, n); }, check, 0);
  L.version(4, "float4", "16 bytes per lane", 0, [&] { copy_float4<<<resident, threads>>>(in, out, n); }, check, 0);
  L.version(5, "float4 x2 __ldg", "two loads in flight", 0,
            [&] { copy_float4_x2<<<resident, threads>>>(in, out, n); }, check, 0);
  L.broken_version(9, "exercise: ragged edge", "find the bug", 0,
                   [&] { copy_off_by_one<<<blocks, threads>>>(in, out, n); }, check, 0);
  cudaFree(in);
  cudaFree(out);
  return L.finish();
}
