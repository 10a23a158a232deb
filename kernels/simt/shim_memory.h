#pragma once
// What the library shims (cublas_shim.cpp, cudnn_shim.cpp) use of the emulator: the check of a
// pointer argument, asked through the public CUDA API as a real library would, the one place
// where a shim's host computation enters stream order, and the stream wait the emulator makes itself.

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>

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

// Runs a shim's computation in stream order on `stream`: after the work queued there, now; or,
// when the stream is capturing, recorded as a kernel node of the graph (graphs.cpp), as the
// library's kernels would be on a GPU. `work` must own every host value it reads (scaling factors,
// descriptor contents): it runs again at each replay. Returns the error of the synchronization or
// of the capture (cudaErrorStreamCaptureInvalidated).
cudaError_t run_in_stream_order(cudaStream_t stream, std::function<void()> work);

// cudaStreamSynchronize without the capture-mode check of "potentially unsafe" calls (Note [Stream
// capture in the emulator]), for the waits the emulator makes itself (a shim computing on the host,
// a copy into pageable memory): on a GPU those happen inside the library or the driver, not as
// calls of the program. Waiting for a capturing stream is still cudaErrorStreamCaptureUnsupported
// and invalidates its capture.
cudaError_t synchronize_stream(cudaStream_t stream);

}  // namespace ember::simt
