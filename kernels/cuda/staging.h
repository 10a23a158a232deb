#pragma once
// Small host-to-device uploads of kernel metadata (pointer lists, job tables) that must not block
// the host and must not depend on the host buffer outliving the copy. Private to kernels/cuda.

#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>

#include "../../core/device.h"
#include "../../core/cuda/graph.h"
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

// Host records that a launch reads on the device (a batched GEMM's pointer lists, a multi-tensor
// launch's tensor records and job table), uploaded for it. Eagerly they go into scratch memory
// through upload_async and are released with this object (stream-ordered, after the launch).
// While a CUDA graph captures, a copy recorded in the graph would read the staging block again at
// every replay, long after it was reused: the records go up once, now, outside the capture, into
// memory the graph keeps (cuda::hold_for_replays; Note [CUDA graphs in ember] in
// core/cuda/graph.h). Every replay touches the same tensors at the same addresses, so the same
// records serve them all. `host` may be freed when the constructor returns.
class LaunchRecords {
 public:
  LaunchRecords(const void* host, size_t bytes) {
    if (!cuda::is_capturing()) {
      ptr_ = eager_.emplace(bytes).get();
      upload_async(ptr_, host, bytes);
      return;
    }
    const int device = cuda::current_device();
    auto kept = cuda::replay_input(device, [&] { return std::make_shared<cuda::Scratch>(bytes); });
    cuda::replay_input(device, [&] {
      cuda::copy_bytes(kept->get(), Device::cuda(device), host, Device::cpu(), bytes);
      return 0;
    });
    ptr_ = kept->get();
    cuda::hold_for_replays(std::move(kept));
  }
  LaunchRecords(const LaunchRecords&) = delete;
  LaunchRecords& operator=(const LaunchRecords&) = delete;

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  std::optional<cuda::Scratch> eager_;
  void* ptr_ = nullptr;
};

}  // namespace ember::kernels::gpu::detail
