#pragma once
// Kernel launch and dynamic shared memory, one spelling for nvcc and for the SIMT emulator.
// Every kernels/cuda/*.cu file includes this header first.
//
//   EMBER_LAUNCH(kernel, grid, block, smem_bytes, stream, args...)
//       any kernel. Template kernels with commas are parenthesised: EMBER_LAUNCH((k<float, 4>), ...)
//   EMBER_LAUNCH_FLAT(kernel, grid, block, stream, args...)
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
#define EMBER_LAUNCH(kernel, grid, block, smem, stream, ...) \
  kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#define EMBER_LAUNCH_FLAT(kernel, grid, block, stream, ...) kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#define EMBER_DYNAMIC_SHARED(T, name)                                   \
  extern __shared__ __align__(16) unsigned char ember_dynamic_smem_[]; \
  T* name = reinterpret_cast<T*>(ember_dynamic_smem_)
#elif defined(EMBER_SIMT)
#include <ember/kernels/simt/simt.h>
#define EMBER_LAUNCH(kernel, grid, block, smem, stream, ...)                                              \
  EMBER_SIMT_LAUNCH(::ember::simt::detail::LaunchKind::Fiber, kernel, grid, block, smem, stream __VA_OPT__(, ) \
                        __VA_ARGS__)
#define EMBER_LAUNCH_FLAT(kernel, grid, block, stream, ...)                                             \
  EMBER_SIMT_LAUNCH(::ember::simt::detail::LaunchKind::Flat, kernel, grid, block, 0, stream __VA_OPT__(, ) \
                        __VA_ARGS__)
#define EMBER_DYNAMIC_SHARED(T, name) \
  T* name = reinterpret_cast<T*>(::ember::simt::detail::dynamic_shared_memory(__FILE__, __LINE__))
#else
#error "kernels/cuda needs nvcc (the CUDA flavour) or EMBER_SIMT (the SIMT emulator flavour)"
#endif
