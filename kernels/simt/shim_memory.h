#pragma once
// What the library shims (cublas_shim.cpp, cudnn_shim.cpp) check of a pointer argument, asked
// through the public CUDA API as a real library would.

#include <cuda_runtime.h>

#include <cstddef>

namespace ember::simt {

// Whether [p, p + bytes) lies in device memory of the emulator (cudaMalloc'ed). Both ends are
// asked, so an operand that starts inside an allocation but runs past it is caught in most cases.
inline bool is_device_range(const void* p, size_t bytes) {
  if (p == nullptr) return false;
  auto device = [](const void* q) {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, q) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
  };
  return device(p) && (bytes == 0 || device(static_cast<const char*>(p) + bytes - 1));
}

}  // namespace ember::simt
