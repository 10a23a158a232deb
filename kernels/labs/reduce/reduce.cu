// Lab: reduce — the sum of n floats. Every thread holds a value; the lab is about how threads
// combine them: in shared memory with barriers (v1-v4), with warp shuffles that need no barrier
// (v5), and in one pass with one atomic per block (v6). Read kernels/labs/reduce/README.md alongside.
//   nvcc -O3 -arch=sm_90 -std=c++17 -o reduce kernels/labs/reduce/reduce.cu && ./reduce
//   cmake --build build --target lab_reduce && ./build/labs/lab_reduce   (the emulator)
//
// v1 interleaved addressing: `if (tid % (2*s) == 0)`, the active threads spread over every warp
// v2 strided index: the active threads packed into the first warps, but 2- to 8-way bank conflicts
// v3 sequential addressing: thread t adds s[t + stride], conflict-free
// v4 the first add during the load: each thread reads two elements, half the blocks
// v5 the last 64 partial sums finished by one warp with __shfl_down_sync: no barrier, no shared memory
// v6 one pass: grid-stride loads, shuffles within each warp, one atomicAdd per block
// v9 exercise: v5 with the 2007 "unrolled last warp" over shared memory instead of shuffles

#include "../common/lab.cuh"

#include <cstdint>
#include <vector>

constexpr int kBlock = 256;  // threads per block (8 warps) in every version
constexpr unsigned kFullWarp = 0xffffffffu;

// v1-v5 reduce each block's elements to one partial sum, out[blockIdx.x]; reduce_to_one (below)
// launches them again on the partial sums until one value is left.

// v1: interleaved addressing. In step s, thread t adds s[t + s] into s[t] when t is a multiple
// of 2s. Correct, but the working threads are spread out: in the first step every other lane of
// every warp works, in the fifth one lane per warp. A warp issues its instruction however few
// lanes are active, so the tree costs 47 warp-steps where 12 would do (v2).
__global__ void reduce_interleaved(const float* in, float* out, int n) {
  __shared__ float s[kBlock];
  const int tid = threadIdx.x, i = blockIdx.x * blockDim.x + tid;
  s[tid] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (int stride = 1; stride < blockDim.x; stride *= 2) {
    if (tid % (2 * stride) == 0) s[tid] += s[tid + stride];
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = s[0];
}

// v2: strided index. Thread t works on element 2*stride*t, so the working threads are the first
// ones: whole warps work or idle. But lanes of one warp now touch words 2*stride apart: with
// stride 1, lanes t and t + 16 both hit bank (2t) % 32 — a 2-way conflict, up to 8-way later.
__global__ void reduce_strided(const float* in, float* out, int n) {
  __shared__ float s[kBlock];
  const int tid = threadIdx.x, i = blockIdx.x * blockDim.x + tid;
  s[tid] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (int stride = 1; stride < blockDim.x; stride *= 2) {
    const int k = 2 * stride * tid;
    if (k < blockDim.x) s[k] += s[k + stride];
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = s[0];
}

// v3: sequential addressing. Fold the upper half onto the lower half: thread t adds s[t + stride]
// for t < stride, stride halving each step. The working threads are the first ones (as in v2) and
// the lanes of a warp read consecutive words, one bank each: conflict-free.
__global__ void reduce_sequential(const float* in, float* out, int n) {
  __shared__ float s[kBlock];
  const int tid = threadIdx.x, i = blockIdx.x * blockDim.x + tid;
  s[tid] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (tid < stride) s[tid] += s[tid + stride];
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = s[0];
}

// v4: the first add during the load. In v3 half of the threads go idle after the first step; here
// each thread reads two elements a block apart (both loads coalesced) and adds them before the
// tree, so a block covers 2 * blockDim.x elements and the grid has half the blocks.
__global__ void reduce_first_add(const float* in, float* out, int n) {
  __shared__ float s[kBlock];
  const int tid = threadIdx.x, i = blockIdx.x * 2 * blockDim.x + tid;
  s[tid] = (i < n ? in[i] : 0.0f) + (i + blockDim.x < n ? in[i + blockDim.x] : 0.0f);
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (tid < stride) s[tid] += s[tid + stride];
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = s[0];
}

// v5: the last warp with shuffles. Once 64 partial sums are left, one warp finishes: each lane adds
// two of them, then __shfl_down_sync(mask, v, offset) hands every lane the v of the lane `offset`
// above it, in registers. Five shuffles (offsets 16, 8, 4, 2, 1) leave the warp's sum in lane 0.
// The 32 lanes of a warp execute a shuffle together, so these six steps need no __syncthreads and
// no shared memory: 3 barriers per block instead of v4's 9.
__global__ void reduce_warp_shuffle(const float* in, float* out, int n) {
  __shared__ float s[kBlock];
  const int tid = threadIdx.x, i = blockIdx.x * 2 * blockDim.x + tid;
  s[tid] = (i < n ? in[i] : 0.0f) + (i + blockDim.x < n ? in[i + blockDim.x] : 0.0f);
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 32; stride /= 2) {
    if (tid < stride) s[tid] += s[tid + stride];
    __syncthreads();
  }
  if (tid < 32) {
    float v = s[tid] + s[tid + 32];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(kFullWarp, v, offset);
    if (tid == 0) out[blockIdx.x] = v;
  }
}

// The sum of v over the 32 lanes of a warp, in lane 0 (the other lanes hold partial sums).
__device__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(kFullWarp, v, offset);
  return v;
}

// v6: one pass. A fixed grid walks the input with a grid-stride loop (coalesced, like the copy
// lab's v3), each thread summing its elements in a register. Each warp reduces its 32 sums with
// shuffles; lane 0 of each warp leaves the warp's sum in shared memory; after the one barrier,
// warp 0 reduces those 8 sums and thread 0 adds the block's sum to *out with atomicAdd. One
// launch, no partial-sum array. The order of the atomics differs from run to run, so in general
// the last bits of a float sum do too (not with this lab's data: see main).
__global__ void reduce_one_pass(const float* in, float* out, int n) {
  __shared__ float warp_sums[kBlock / 32];
  float v = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v += in[i];
  v = warp_sum(v);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = warp_sum(lane < blockDim.x / 32 ? warp_sums[lane] : 0.0f);
    if (lane == 0) atomicAdd(out, v);
  }
}

// Exercise (v9): v5 with the last warp done the way it was written before warp shuffles existed,
// through shared memory, trusting the 32 lanes to run in lock-step. Read the output, then the
// warp-op column, and explain the wrong sum.
__global__ void reduce_exercise(const float* in, float* out, int n) {
  __shared__ float s[kBlock];
  const int tid = threadIdx.x, i = blockIdx.x * 2 * blockDim.x + tid;
  s[tid] = (i < n ? in[i] : 0.0f) + (i + blockDim.x < n ? in[i + blockDim.x] : 0.0f);
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 32; stride /= 2) {
    if (tid < stride) s[tid] += s[tid + stride];
    __syncthreads();
  }
  if (tid < 32) {
    volatile float* w = s;
    w[tid] = w[tid] + w[tid + 32];
    w[tid] = w[tid] + w[tid + 16];
    w[tid] = w[tid] + w[tid + 8];
    w[tid] = w[tid] + w[tid + 4];
    w[tid] = w[tid] + w[tid + 2];
    w[tid] = w[tid] + w[tid + 1];
    if (tid == 0) out[blockIdx.x] = w[0];
  }
}

using BlockReduce = void (*)(const float*, float*, int);

// Sums in[0..n) with a kernel that leaves one partial sum per block: launches it on the input,
// then on the partial sums, until one value is left; returns where it is. Two scratch arrays of
// `blocks of the first pass` floats take turns as the output.
const float* reduce_to_one(BlockReduce kernel, int per_block, const float* in, int n, float* scratch_a,
                          float* scratch_b) {
  const float* src = in;
  float* dst = scratch_a;
  for (int count = n; count > 1;) {
    const int blocks = (count + per_block - 1) / per_block;
    kernel<<<blocks, kBlock>>>(src, dst, count);
    src = dst;
    dst = dst == scratch_a ? scratch_b : scratch_a;
    count = blocks;
  }
  return src;
}

int main(int argc, char** argv) {
  lab::Lab L("reduce", argc, argv, {(1 << 24) - 3}, {200003});
  const int n = static_cast<int>(L.size(0));
  // Note [An exact sum]
  // Every element is 0 or 1, so every partial sum, whatever the order of the additions, is an
  // integer between 0 and n. A float holds every integer up to 2^24 exactly, so for n <= 2^24
  // no addition rounds and every correct version must give the reference exactly (tolerance 0):
  // a difference is a bug, never reordering. (With general floats, the tree of v1-v5 and the
  // atomics of v6 add in different orders from the CPU loop and each other, and the results
  // differ in the last bits; a check would then need a tolerance of one rounding per addition on
  // the longest chain of additions that leads to the result.)
  if (n > (1 << 24)) {
    std::fprintf(stderr, "lab reduce: n = %d; at most 2^24 = 16777216 keeps the sum exact in float\n", n);
    return 2;
  }
  std::vector<float> h(n);
  for (int i = 0; i < n; ++i) h[i] = static_cast<float>((static_cast<uint32_t>(i) * 2654435761u >> 13) & 1u);
  double ref = 0;  // the CPU reference: the plain loop
  for (int i = 0; i < n; ++i) ref += h[i];

  cudaDeviceProp prop{};
  LAB_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int resident = 2 * prop.multiProcessorCount;  // v6's grid: two blocks per SM
  const int first_pass_blocks = (n + kBlock - 1) / kBlock;
  float *in = nullptr, *scratch_a = nullptr, *scratch_b = nullptr;
  LAB_CHECK(cudaMalloc(&in, n * sizeof(float)));
  LAB_CHECK(cudaMalloc(&scratch_a, first_pass_blocks * sizeof(float)));
  LAB_CHECK(cudaMalloc(&scratch_b, first_pass_blocks * sizeof(float)));
  LAB_CHECK(cudaMemcpy(in, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  const float* result = nullptr;  // where the version left the sum

  auto check = [&] {
    float got = 0;
    LAB_CHECK(cudaMemcpy(&got, result, sizeof(float), cudaMemcpyDeviceToHost));
    // NaNs: the next version starts from garbage
    LAB_CHECK(cudaMemset(scratch_a, 0xFF, first_pass_blocks * sizeof(float)));
    LAB_CHECK(cudaMemset(scratch_b, 0xFF, first_pass_blocks * sizeof(float)));
    const float want = static_cast<float>(ref);
    return lab::Lab::max_abs_diff(&got, &want, 1);
  };
  auto passes = [&](BlockReduce kernel, int per_block) {
    return [&, kernel, per_block] { result = reduce_to_one(kernel, per_block, in, n, scratch_a, scratch_b); };
  };
  LAB_CHECK(cudaMemset(scratch_a, 0xFF, first_pass_blocks * sizeof(float)));
  LAB_CHECK(cudaMemset(scratch_b, 0xFF, first_pass_blocks * sizeof(float)));
  const double adds = n;
  L.version(1, "interleaved", "tid % (2s) == 0", adds, passes(reduce_interleaved, kBlock), check, 0);
  L.version(2, "strided index", "no divergence", adds, passes(reduce_strided, kBlock), check, 0);
  L.version(3, "sequential", "no bank conflicts", adds, passes(reduce_sequential, kBlock), check, 0);
  L.version(4, "first add in load", "half the blocks", adds, passes(reduce_first_add, 2 * kBlock), check, 0);
  L.version(5, "warp shuffle tail", "no barriers in a warp", adds, passes(reduce_warp_shuffle, 2 * kBlock), check, 0);
  L.version(6, "one pass + atomic", "grid-stride, one launch", adds,
            [&] {
              LAB_CHECK(cudaMemsetAsync(scratch_a, 0, sizeof(float)));
              reduce_one_pass<<<resident, kBlock>>>(in, scratch_a, n);
              result = scratch_a;
            },
            check, 0);
  L.broken_version(9, "exercise: last warp", "find the bug", adds, passes(reduce_exercise, 2 * kBlock), check, 0);
  cudaFree(in);
  cudaFree(scratch_a);
  cudaFree(scratch_b);
  return L.finish();
}
