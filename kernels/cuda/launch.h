#pragma once
// Kernel launch and dynamic shared memory, one spelling for nvcc and for the SIMT emulator.
// (Placeholder for nvcc only: the SIMT emulator branch replaces this file.)
#if defined(__CUDACC__)
#include <cuda_runtime.h>
#define EMBER_LAUNCH(kernel, grid, block, smem, stream, ...) kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#define EMBER_LAUNCH_FLAT(kernel, grid, block, stream, ...) kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#define EMBER_DYNAMIC_SHARED(T, name)                                 \
  extern __shared__ __align__(16) unsigned char ember_dynamic_smem_[]; \
  T* name = reinterpret_cast<T*>(ember_dynamic_smem_)
#else
#error "kernels/cuda needs nvcc or the SIMT emulator"
#endif
