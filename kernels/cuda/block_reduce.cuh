#pragma once
// Block-wide reductions for the kernels of kernels/cuda (include after "launch.h"). Private to
// kernels/cuda: no public header includes this file.
//
// block_reduce(v, combine): every thread of the block passes its value and gets the combination
// of all of them. Two stages: a warp reduces its 32 values with __shfl_xor_sync (a butterfly:
// after 5 steps every lane holds the warp's result, no shared memory needed), lane 0 of each warp
// parks that in shared memory, and after one barrier every thread combines the per-warp partials
// in the same fixed order (warp 0, 1, ...), so every thread gets the same bits. A second barrier
// lets the caller call block_reduce again right away (the partials are reused).
//
// Requirements: blockDim.x is a multiple of 32 and at most 1024, blockDim.y == blockDim.z == 1,
// and every thread of the block calls it (no early return before it: a barrier and full-mask
// shuffles are inside). `combine` must be associative and commutative (up to rounding).

#include <cstdint>

namespace ember::kernels::gpu::detail {

template <typename T, typename Combine>
__device__ inline T block_reduce(T v, Combine combine) {
  __shared__ T partial[32];
  for (int mask = 16; mask > 0; mask /= 2) v = combine(v, __shfl_xor_sync(0xffffffffu, v, mask));
  const int warps = static_cast<int>(blockDim.x) / 32;
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  T r = partial[0];
  for (int w = 1; w < warps; ++w) r = combine(r, partial[w]);
  __syncthreads();
  return r;
}

struct Plus {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};

template <typename T>
__device__ inline T block_sum(T v) {
  return block_reduce(v, Plus{});
}

// Blocks for a grid-stride loop over `n` items at `per_block` items per block: at least 1, at most
// 65535 (the loop covers the rest; 65535 blocks fill any GPU many times over).
inline unsigned grid_stride_blocks(int64_t n, int64_t per_block) {
  const int64_t b = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

}  // namespace ember::kernels::gpu::detail
