#pragma once
// How an op reaches its kernel (internal; used by core/, layers/, optim/ and parallel/).
//
// Note [Device dispatch]
// There is no dispatcher object and no registry: every op's entry point switches on the device
// type of its tensors, visibly. Written out, a dispatch reads
//
//   switch (x.device().type) {
//     case DeviceType::CPU: kernels::cpu::sum(args...); break;
//     case DeviceType::CUDA: EMBER_CUDA_CALL(x.device(), "sum", kernels::gpu::sum(args...)); break;
//   }
//
// and because most kernels take the same arguments on both backends (the contracts of
// kernels/<family>.h, declared once for both: Note [Shared kernel declarations]), the ops write it
// once:
//
//   EMBER_KERNEL_CALL(x.device(), "sum", sum, args...);
//
// which expands to exactly that switch, with the argument list written a single time so the two
// calls cannot drift apart. Where the backends differ (cuDNN or the hand-written kernel for a
// convolution, a host-side value that only one side computes), the op writes the switch itself.
//
// With a CUDA backend (a GPU build or the SIMT emulator) EMBER_CUDA_CALL makes the tensor's device
// current for the call and runs it; in a CPU-only build it throws the "no CUDA kernel in this
// build" error and the kernels::gpu call is not compiled at all. EMBER_CUDA_BACKEND is a private
// definition of libember, so this header reads the same in every build flavour.

#include "device.h"
#include "profiler.h"

namespace ember::detail {
[[noreturn]] void cuda_unavailable(const char* op);
// Whether `device` is a CUDA device whose current stream is capturing a CUDA graph (never in a
// CPU-only build).
bool capturing_graph(Device device);
// Throws ember::Error naming `op` and what it does that a graph cannot record (`why`: "waits for
// the device ...") when capturing_graph(device), abandoning the capture (Note [CUDA graphs in
// ember] in core/cuda/graph.h).
void check_not_capturing(Device device, const char* op, const char* why);
}  // namespace ember::detail

#if EMBER_CUDA_BACKEND
#include "cuda/runtime.h"
#define EMBER_CUDA_CALL(device, op_name, ...)                             \
  do {                                                                    \
    const ::ember::cuda::DeviceGuard ember_device_guard_((device).index); \
    __VA_ARGS__;                                                          \
    ::ember::profiler::wait_for_device_if_profiling();                    \
  } while (0)
#else
#define EMBER_CUDA_CALL(device, op_name, ...) ::ember::detail::cuda_unavailable(op_name)
#endif

// Calls kernels::cpu::kernel(args...) or kernels::gpu::kernel(args...) for `device`
// (Note [Device dispatch]), inside a profiler scope named `op_name` (Note [Profiler]). `kernel`
// is a bare name; the arguments are evaluated once, in the branch that runs.
#define EMBER_KERNEL_CALL(device, op_name, kernel, ...) \
  EMBER_KERNEL_CALL_IMPL_(/* no result */, 0.0, device, op_name, kernel, __VA_ARGS__)
// The same for a kernel that returns a host value (a norm, a check's verdict): `result = ...`.
#define EMBER_KERNEL_CALL_INTO(result, device, op_name, kernel, ...) \
  EMBER_KERNEL_CALL_IMPL_(result =, 0.0, device, op_name, kernel, __VA_ARGS__)
// The same for a kernel whose floating-point operation count is known (the profiler's GFLOP/s).
#define EMBER_KERNEL_CALL_COUNTED(flops, device, op_name, kernel, ...) \
  EMBER_KERNEL_CALL_IMPL_(/* no result */, flops, device, op_name, kernel, __VA_ARGS__)

#define EMBER_KERNEL_CALL_IMPL_(assign, flops, device, op_name, kernel, ...)                               \
  do {                                                                                                     \
    const ::ember::profiler::Scope ember_profile_scope_(op_name, static_cast<double>(flops));              \
    const ::ember::Device ember_kernel_device_ = (device);                                                 \
    switch (ember_kernel_device_.type) {                                                                   \
      case ::ember::DeviceType::CPU: assign ::ember::kernels::cpu::kernel(__VA_ARGS__); break;             \
      case ::ember::DeviceType::CUDA:                                                                      \
        EMBER_CUDA_CALL(ember_kernel_device_, op_name, assign ::ember::kernels::gpu::kernel(__VA_ARGS__)); \
        break;                                                                                             \
    }                                                                                                      \
  } while (0)
