#pragma once
// Kernel launch and dynamic shared memory, one spelling for nvcc and for the SIMT emulator.
// Every kernels/cuda/*.cu file includes this header first.
//
//   EMBER_LAUNCH(kernel, grid, block, smem_bytes, stream, cost, args...)
//       any kernel. Template kernels with commas are parenthesised: EMBER_LAUNCH((k<float, 4>), ...)
//       `cost` is the launch's declared cost, cuda::cost(bytes read, bytes written[, flops]) from
//       core/cuda/ledger.h, computed from the launch's shapes; it is evaluated only while a
//       launch ledger records (Note [Launch ledger]), and a ledger in record-only mode skips the
//       launch after recording it.
//   EMBER_LAUNCH_FLAT(kernel, grid, block, stream, cost, args...)
//       a kernel with no __shared__ memory, no __syncthreads and no warp intrinsics: the emulator
//       runs its threads as plain loops and its blocks in parallel (a barrier in it is a
//       diagnosed error). Same as EMBER_LAUNCH with smem 0 on a GPU.
//   EMBER_DYNAMIC_SHARED(T, name);
//       inside a kernel: T* name points to the launch's dynamic shared memory.
//
// Static shared memory is written `__shared__ T x[N];` (never `static __shared__`). No raw <<<>>>
// anywhere else. docs/simt.md explains the emulator side.

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#define EMBER_LAUNCH_RAW_(kind, kernel, grid, block, smem, stream, ...) \
  kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#define EMBER_DYNAMIC_SHARED(T, name)                                   \
  extern __shared__ __align__(16) unsigned char ember_dynamic_smem_[]; \
  T* name = reinterpret_cast<T*>(ember_dynamic_smem_)
#elif defined(EMBER_SIMT)
#include <ember/kernels/simt/simt.h>
#define EMBER_LAUNCH_RAW_(kind, kernel, grid, block, smem, stream, ...) \
  EMBER_SIMT_LAUNCH(::ember::simt::detail::LaunchKind::kind, kernel, grid, block, smem, stream __VA_OPT__(, ) __VA_ARGS__)
#define EMBER_DYNAMIC_SHARED(T, name) \
  T* name = reinterpret_cast<T*>(::ember::simt::detail::dynamic_shared_memory(__FILE__, __LINE__))
#endif

#if defined(__CUDACC__) || defined(EMBER_SIMT)
#include <ember/core/cuda/ledger.h>

namespace ember::kernels::gpu::detail {
// Records one launch in the running ledger; returns whether to run it (Note [Launch ledger]).
inline bool ledger_launch(const char* kernel, const char* file, dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, const ::ember::cuda::Cost& cost) {
  const unsigned g[3] = {grid.x, grid.y, grid.z}, b[3] = {block.x, block.y, block.z};
  return ::ember::cuda::ledger_launch(kernel, file, g, b, smem, stream, cost);
}
}  // namespace ember::kernels::gpu::detail

#define EMBER_LAUNCH_RECORDED_(kind, kernel, grid, block, smem, stream, cost, ...)                            \
  do {                                                                                                       \
    if (!::ember::cuda::ledger_on() ||                                                                       \
        ::ember::kernels::gpu::detail::ledger_launch(#kernel, __FILE__, (grid), (block), (smem), (stream), (cost))) { \
      EMBER_LAUNCH_RAW_(kind, kernel, grid, block, smem, stream __VA_OPT__(, ) __VA_ARGS__);                  \
      if (::ember::cuda::ledger_on()) ::ember::cuda::ledger_launched(stream);                                \
    }                                                                                                        \
  } while (0)
#define EMBER_LAUNCH(kernel, grid, block, smem, stream, cost, ...) \
  EMBER_LAUNCH_RECORDED_(Fiber, kernel, grid, block, smem, stream, cost __VA_OPT__(, ) __VA_ARGS__)
#define EMBER_LAUNCH_FLAT(kernel, grid, block, stream, cost, ...) \
  EMBER_LAUNCH_RECORDED_(Flat, kernel, grid, block, 0, stream, cost __VA_OPT__(, ) __VA_ARGS__)
#else
#error "kernels/cuda needs nvcc (the CUDA flavour) or EMBER_SIMT (the SIMT emulator flavour)"
#endif
