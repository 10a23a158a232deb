#pragma once
// How an op reaches its CUDA kernel (internal; used by core/ and layers/).
//
//   switch (x.device().type) {
//     case DeviceType::CPU: kernels::cpu::sum(args...); break;
//     case DeviceType::CUDA: EMBER_CUDA_CALL(x.device(), "sum", kernels::cuda::sum(args...)); break;
//   }
//
// With a CUDA backend (a GPU build or the SIMT emulator) EMBER_CUDA_CALL makes the tensor's device
// current for the call and runs it; in a CPU-only build it throws the "no CUDA kernel in this
// build" error. EMBER_CUDA_BACKEND is a private definition of libember, so this header reads the
// same in every build flavour.

#include "device.h"

namespace ember::detail {
[[noreturn]] void cuda_unavailable(const char* op);
}  // namespace ember::detail

#if EMBER_CUDA_BACKEND
#include "../kernels/cuda/runtime.h"
#define EMBER_CUDA_CALL(device, op_name, ...)                          \
  do {                                                                 \
    const ::ember::cuda::DeviceGuard ember_device_guard_((device).index); \
    __VA_ARGS__;                                                       \
  } while (0)
#else
#define EMBER_CUDA_CALL(device, op_name, ...) ::ember::detail::cuda_unavailable(op_name)
#endif
