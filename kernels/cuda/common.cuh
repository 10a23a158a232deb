#pragma once
// Shared building blocks of the hand-written CUDA kernels (include after "launch.h"):
//   - launch geometry: kThreads per block and a capped grid size for grid-stride loops;
//   - Pack<T, K>: K elements that move with one aligned vector load or store;
//   - StridedIndexer<N>: linear element index -> element offset in each of N strided operands;
//   - group reductions: a "group" of G threads (1, a warp of 32, or a block of 256) cooperates on
//     one output; warp shuffles reduce inside a warp, shared memory across the warps of a block.
// Private to kernels/cuda: no public header includes this file.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "../../core/dtype.h"
#include "../../core/error.h"
#include "../strided.h"

// Grid-stride loop over n items, one per thread (the flat kernels).
#define EMBER_THREAD_LOOP(i, n)                                                                      \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);             \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

namespace ember::kernels::gpu::detail {

inline constexpr int kThreads = 256;        // threads per block of the 1-D kernels
inline constexpr int kWarp = 32;
inline constexpr int64_t kMaxGrid = 65535;  // blocks of a grid-stride launch (enough to fill any GPU)

// Blocks for `n` work items at `per_block` items per block, at least 1, at most kMaxGrid (the
// kernels loop with a grid stride, so a capped grid still covers every item).
inline unsigned grid_for(int64_t n, int64_t per_block) {
  const int64_t b = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(b < 1 ? 1 : (b > kMaxGrid ? kMaxGrid : b));
}

// K elements of T that move with one aligned load/store (alignas 16 for 4 floats: a float4; for
// 8 bf16 values: one 16-byte access).
template <typename T, int K>
struct alignas(sizeof(T) * K) Pack {
  T v[K];
};

// The K elements at p as one vector access (p must be aligned to the pack's size, as a GPU requires;
// the SIMT build checks it and reports a misaligned p with the caller's file:line: Note [Vector
// access alignment] in kernels/simt/simt.h).
// EMBER_VECTOR_CHECK_HERE(p, bytes) makes the same check for an access of another type (CUDA's
// __half2) at its own line.
#if EMBER_SIMT
#define EMBER_VECTOR_SITE_ARGS , EMBER_SIMT_HERE_ARGS
#define EMBER_VECTOR_CHECK(p, bytes) ::ember::simt::check_vector_alignment(p, bytes, EMBER_SIMT_HERE)
#define EMBER_VECTOR_CHECK_HERE(p, bytes) \
  ::ember::simt::check_vector_alignment(p, bytes, ::ember::simt::detail::Site{__FILE__, __LINE__})
#else
#define EMBER_VECTOR_SITE_ARGS
#define EMBER_VECTOR_CHECK(p, bytes) (void)0
#define EMBER_VECTOR_CHECK_HERE(p, bytes) (void)0
#endif
template <int K, typename T>
__device__ inline Pack<T, K> vector_load(const T* p EMBER_VECTOR_SITE_ARGS) {
  EMBER_VECTOR_CHECK(p, sizeof(Pack<T, K>));
  return *reinterpret_cast<const Pack<T, K>*>(p);
}
template <int K, typename T>
__device__ inline void vector_store(T* p, const Pack<T, K>& v EMBER_VECTOR_SITE_ARGS) {
  EMBER_VECTOR_CHECK(p, sizeof(Pack<T, K>));
  *reinterpret_cast<Pack<T, K>*>(p) = v;
}

// Elements of T in 16 bytes, the widest access one thread can make (8 for f16/bf16, 4 for f32).
template <typename T>
inline constexpr int kLanes16 = 16 / static_cast<int>(sizeof(T));

// Whether p is aligned to `bytes` (null is).
inline bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }
inline bool all_aligned(std::initializer_list<const void*> ptrs, size_t bytes) {
  for (const void* p : ptrs)
    if (!aligned(p, bytes)) return false;
  return true;
}

// Note [Offset calculator]
// An elementwise kernel gives each thread a linear index i over the iteration shape (row-major)
// and needs the element offset of i in every operand: split i into coordinates with one
// div/mod per dim (innermost first) and dot them with each operand's strides. Division is the
// expensive part on a GPU, so the host first coalesces the shape: size-1 dims are dropped and a
// dim is merged into its outer neighbour when it is contiguous with it in every operand. A
// contiguous tensor becomes one dim, a transposed matrix stays two, a broadcast row stays two.
template <int N>
struct StridedIndexer {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};

  StridedIndexer() = default;
  StridedIndexer(const IterShape& shape, const Operand* ops) {
    for (int d = 0; d < shape.ndim; ++d) {
      if (shape.sizes[d] == 1) continue;  // never moves a pointer
      if (ndim > 0) {
        bool merge = true;
        for (int k = 0; k < N; ++k)
          if (strides[k][ndim - 1] != ops[k].strides[d] * shape.sizes[d]) merge = false;
        if (merge) {
          sizes[ndim - 1] *= shape.sizes[d];
          for (int k = 0; k < N; ++k) strides[k][ndim - 1] = ops[k].strides[d];
          continue;
        }
      }
      sizes[ndim] = shape.sizes[d];
      for (int k = 0; k < N; ++k) strides[k][ndim] = ops[k].strides[d];
      ++ndim;
    }
  }
  // The elements operand k touches, each counted once: a broadcast (stride 0) dimension adds none
  // (the declared costs of Note [Launch ledger]).
  int64_t distinct_elements(int k) const {
    int64_t e = 1;
    for (int d = 0; d < ndim; ++d)
      if (strides[k][d] != 0) e *= sizes[d];
    return e;
  }
  // Whether every operand walks memory with stride 1 (after coalescing: one dim, stride 1).
  bool contiguous() const {
    if (ndim == 0) return true;
    if (ndim > 1) return false;
    for (int k = 0; k < N; ++k)
      if (strides[k][0] != 1) return false;
    return true;
  }
  __host__ __device__ void offsets(int64_t i, int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t c = i % sizes[d];
      i /= sizes[d];
      for (int k = 0; k < N; ++k) off[k] += c * strides[k][d];
    }
  }
};

// ---- warp and block reductions ----------------------------------------------------------------

// Shuffles any value of at most 8 bytes; 1- and 2-byte types travel as 32-bit ints (the
// hardware shuffles 32-bit registers; Half and BFloat16 as their bits), structs through their
// own overloads below.
template <typename T>
__device__ inline T shfl_xor(T v, int mask) {
  if constexpr (is_low_precision_v<T>) {
    T r;
    r.bits = static_cast<uint16_t>(__shfl_xor_sync(0xffffffffu, static_cast<int>(v.bits), mask));
    return r;
  } else if constexpr (sizeof(T) < 4) {
    return static_cast<T>(__shfl_xor_sync(0xffffffffu, static_cast<int>(v), mask));
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(v), mask));
  } else {
    return __shfl_xor_sync(0xffffffffu, v, mask);
  }
}

// Butterfly reduction inside a warp: after log2(32) xor steps every lane holds the combination
// of all 32 lanes (no broadcast step needed). `combine` must be associative and commutative,
// and the result is the same on every lane because each lane combines the same values in the
// same tree (lane order only swaps operands of a commutative combine).
template <typename T, typename Combine, typename Shfl>
__device__ inline T warp_all_reduce(T v, Combine combine, Shfl shfl) {
  for (int m = kWarp / 2; m > 0; m /= 2) v = combine(v, shfl(v, m));
  return v;
}

// Reduction over a group of G threads (G = 1, 32 or kThreads = a whole block) that all call
// it; every thread of the group gets the result. Block groups: each warp reduces with shuffles,
// lane 0 parks its partial in shared memory, one barrier, then every thread combines the
// kThreads / 32 partials in the same fixed order, and a second barrier lets the caller reuse
// the shared slots in its next iteration.
template <int G, typename T, typename Combine, typename Shfl>
__device__ inline T group_all_reduce(T v, Combine combine, Shfl shfl) {
  static_assert(G == 1 || G == kWarp || G == kThreads, "group size must be 1, a warp or a block");
  if constexpr (G == 1) {
    return v;
  } else if constexpr (G == kWarp) {
    return warp_all_reduce(v, combine, shfl);
  } else {
    __shared__ T partial[kThreads / kWarp];
    v = warp_all_reduce(v, combine, shfl);
    if (threadIdx.x % kWarp == 0) partial[threadIdx.x / kWarp] = v;
    __syncthreads();
    T r = partial[0];
    for (int w = 1; w < kThreads / kWarp; ++w) r = combine(r, partial[w]);
    __syncthreads();
    return r;
  }
}

struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct ScalarShfl {
  template <typename T>
  __device__ T operator()(T v, int m) const { return shfl_xor(v, m); }
};

template <int G, typename T>
__device__ inline T group_sum(T v) {
  return group_all_reduce<G>(v, SumOp{}, ScalarShfl{});
}

// ---- groups on the host side ------------------------------------------------------------------

// Runs body.template operator()<G>() for a run-time group size g (1, kWarp or kThreads).
template <typename Body>
void with_group(int g, const Body& body) {
  if (g == 1) body.template operator()<1>();
  else if (g == kWarp) body.template operator()<kWarp>();
  else body.template operator()<kThreads>();
}

// Blocks of kThreads threads for `items` work items at one group of G threads per item.
template <int G>
unsigned grid_for_groups(int64_t items) {
  return grid_for(items, kThreads / G);
}

}  // namespace ember::kernels::gpu::detail

// The grid-stride loop of a group kernel (blocks of kThreads threads, groups of G): `item`
// walks the work items of this thread's group, `lane` is the thread's rank in the group. The
// loop is uniform across a group, so every thread of the group reaches the group reductions
// inside it.
#define EMBER_GROUP_LOOP(G, count, item, lane)                                                        \
  const int lane = static_cast<int>(threadIdx.x) % (G);                                                \
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * (::ember::kernels::gpu::detail::kThreads / (G)) + \
                      threadIdx.x / (G);                                                               \
       item < (count); item += static_cast<int64_t>(gridDim.x) * (::ember::kernels::gpu::detail::kThreads / (G)))

namespace ember::kernels::gpu::detail {

}  // namespace ember::kernels::gpu::detail
