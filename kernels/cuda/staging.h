#pragma once
// Small host-to-device uploads of kernel metadata (pointer lists, job tables) that must not block
// the host and must not depend on the host buffer outliving the copy. Private to kernels/cuda.

#include <cstddef>
#include <cstring>

#include "../../core/device.h"
#include "../../core/cuda/runtime.h"

namespace ember::kernels::gpu::detail {

// Copies `bytes` from host memory `src` to device memory `dst` (current device) on
// current_stream(), asynchronously. The bytes go through a pinned staging block first, so `src`
// may be freed as soon as this returns; the pinned pool hands the block out again only once the
// copy has finished (Note [Pinned host memory] in pinned.cu). Relying on cudaMemcpyAsync's
// staging of pageable memory instead would be correct on a GPU but not under the emulator's
// deferred streams (EMBER_SIMT_DEFER=1), which read the source when the copy runs.
inline void upload_async(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  void* staging = cuda::pinned_allocate(bytes);
  std::memcpy(staging, src, bytes);
  cuda::copy_bytes_async(dst, Device::cuda(cuda::current_device()), staging, Device::cpu(), bytes);
  cuda::pinned_free(staging);
}

}  // namespace ember::kernels::gpu::detail
