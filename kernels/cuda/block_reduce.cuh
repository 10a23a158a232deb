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
// One channel of an (n, C, s) tensor, as a per-channel reduction walks it: element k
// (0 <= k < n * s) of channel c lies at ((k / s) * C + c) * s + k % s. A thread that visits k,
// k + step, k + 2 step, ... divides once, when its walk starts; advance() then adds the step's
// whole rows and remainder, carrying into the next row when the position passes the row's end,
// as one adds in base s. (Integer division is a software routine of dozens of instructions on a
// GPU, 64-bit more so: Note [Batch norm without per-element division] in batchnorm.cu.)
struct ChannelWalk {
  int64_t row = 0, col = 0, rows_per_step = 0, cols_per_step = 0, s = 0;
  __device__ ChannelWalk(int64_t k, int64_t step, int64_t s_) : s(s_) {
    if (s_ == 0) return;  // an empty channel: nothing is visited
    row = k / s_, col = k % s_;
    rows_per_step = step / s_, cols_per_step = step % s_;
  }
  __device__ int64_t offset(int64_t channels, int64_t c) const { return (row * channels + c) * s + col; }
  __device__ void advance() {
    row += rows_per_step;
    col += cols_per_step;
    if (col >= s) col -= s, ++row;
  }
};

inline unsigned grid_stride_blocks(int64_t n, int64_t per_block) {
  const int64_t b = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

}  // namespace ember::kernels::gpu::detail
