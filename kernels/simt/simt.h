#pragma once
// The CUDA kernel language for g++: compiling kernels/cuda/*.cu as C++ over ember's emulator.
//
// Included by kernels/cuda/launch.h when EMBER_SIMT is set, and it must come before any CUDA
// header: crt/host_defines.h only defines __global__, __shared__, ... when they are not defined
// yet, so this header defines them first and then includes the real <cuda_runtime.h>,
// <cuda_fp16.h> and <cuda_bf16.h> for the types (dim3, float4, __half, cudaError_t, ...) and the
// runtime API *declarations*. The emulator (kernels/simt/*.cpp, compiled into libember) provides
// the definitions over host memory; no libcudart is linked. See docs/simt.md.
//
// What a kernel sees:
//   threadIdx, blockIdx, blockDim, gridDim   per-OS-thread values the scheduler maintains
//   warpSize                                 32
//   __syncthreads[_count|_and|_or], __syncwarp, __shfl*_sync, __ballot/__any/__all_sync,
//   __reduce_add_sync, __activemask          scheduling points (sync.h)
//   atomicXxx, __threadfence*                real atomics (atomics.h)
//   __expf, rsqrtf, __ldg, min/max, ...      what the host headers lack (intrinsics.h)
// and the launch helpers behind EMBER_LAUNCH / EMBER_LAUNCH_FLAT / EMBER_DYNAMIC_SHARED
// (kernel_launch.h).

#if defined(__CUDACC__)
#error "kernels/simt/simt.h is the emulator's kernel language; nvcc compiles kernels natively"
#endif

// ---- keywords, defined before the CUDA headers see them ----------------------------------------
// (#undef first: a CUDA header included earlier may already have defined them.)
#undef __global__
#undef __device__
#undef __host__
#undef __constant__
#undef __managed__
#undef __shared__
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
// Static __shared__ variables: function-local statics in one linker section, so that the
// emulator can find all of them (__start_/__stop_ember_simt_shared) and poison them with 0xFF
// before every block. Consequence: write `__shared__ T x[N];`, never `static __shared__` (that
// would read `static static`). ASan puts no redzones around variables in a user section, so an
// ASan build uses plain statics instead: out-of-bounds accesses are reported exactly, and the
// per-block poisoning of static shared memory is off.
#if defined(__SANITIZE_ADDRESS__)
#define __shared__ static
#define EMBER_SIMT_SHARED_SECTION 0
#else
#define __shared__ __attribute__((section("ember_simt_shared"), aligned(16))) static
#define EMBER_SIMT_SHARED_SECTION 1
#endif

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
#ifndef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
#endif
#ifndef __grid_constant__
#define __grid_constant__
#endif
// __noinline__ is deliberately left alone: libstdc++ spells __attribute__((__noinline__)), so a
// macro would break it. Kernels do not use __noinline__ (contract in docs/simt.md).
// __CUDA_ARCH__ is not defined: architecture-specific paths take their portable fallback.

#include <cstdint>

// ---- the per-OS-thread execution context -------------------------------------------------------
namespace ember::simt::detail {

// Where a barrier or warp intrinsic was called. __builtin_FILE()/__builtin_LINE() give the
// caller's position only when they are the default argument itself (EMBER_SIMT_HERE_ARGS).
struct Site {
  const char* file;
  unsigned line;
};

enum class Mode : uint8_t { Host, Flat, Fiber };

// What the CUDA built-in variables read. One per OS thread: fiber-mode blocks run all their
// threads on the launching OS thread (the scheduler rewrites thread_idx before resuming each
// fiber); flat-mode blocks are spread over a pool of OS threads, each with its own context.
struct ExecContext {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  Mode mode;
  unsigned char* dynamic_smem;
  const char* kernel_name;
};

// initial-exec: one fs-relative load per access (kernels read threadIdx in their inner loops).
inline thread_local ExecContext tls_exec __attribute__((tls_model("initial-exec"))) = {
    {0, 0, 0}, {0, 0, 0}, {1, 1, 1}, {1, 1, 1}, Mode::Host, nullptr, nullptr};

// Error exits used by the inline code below (defined in diagnostics.cpp).
[[noreturn]] void fatal_outside_kernel(const char* what, Site site);
[[noreturn]] void fatal_in_flat_kernel(const char* what, Site site);
[[noreturn]] void fatal_misaligned_vector(const void* p, unsigned bytes, Site site);

}  // namespace ember::simt::detail

// Note [Vector access alignment]
// A GPU's vector load or store (ld.global.v2 / .v4: 8 or 16 bytes in one access) needs an address
// aligned to its size; a misaligned one faults the kernel (cudaErrorMisalignedAddress), which
// ends the CUDA context. Fibers are host code, whose loads take any address, so the same mistake
// would run here and fault only on a GPU. ember's kernels make their vector accesses through
// kernels/cuda/common.cuh's vector_load / vector_store, which in the SIMT build call this check
// with their caller's file:line: a misaligned address is reported like the other kernel bugs,
// with the kernel and block (tests/simt/bugs.cu, case vector_misaligned).
namespace ember::simt {
inline void check_vector_alignment(const void* p, unsigned bytes, detail::Site site) {
  if (reinterpret_cast<uintptr_t>(p) % bytes != 0) detail::fatal_misaligned_vector(p, bytes, site);
}
}  // namespace ember::simt

#define EMBER_SIMT_HERE_ARGS const char *ember_simt_file_ = __builtin_FILE(), unsigned ember_simt_line_ = __builtin_LINE()
#define EMBER_SIMT_HERE \
  ::ember::simt::detail::Site { ember_simt_file_, ember_simt_line_ }

// CUDA's built-in variables, read-only views of the context.
#define threadIdx (static_cast<const uint3&>(::ember::simt::detail::tls_exec.thread_idx))
#define blockIdx (static_cast<const uint3&>(::ember::simt::detail::tls_exec.block_idx))
#define blockDim (static_cast<const dim3&>(::ember::simt::detail::tls_exec.block_dim))
#define gridDim (static_cast<const dim3&>(::ember::simt::detail::tls_exec.grid_dim))
inline constexpr int warpSize = 32;

// Sanitizer hooks shared by the pieces below.
#if defined(__SANITIZE_THREAD__)
#define EMBER_SIMT_TSAN 1
#define EMBER_SIMT_NO_TSAN __attribute__((no_sanitize_thread))
#else
#define EMBER_SIMT_TSAN 0
#define EMBER_SIMT_NO_TSAN
#endif
#if defined(__SANITIZE_ADDRESS__)
#define EMBER_SIMT_ASAN 1
#else
#define EMBER_SIMT_ASAN 0
#endif

#include "atomics.h"
#include "intrinsics.h"
#include "sync.h"
#include "kernel_launch.h"
