#pragma once
// Kernel launches on the emulator: what EMBER_LAUNCH and EMBER_LAUNCH_FLAT expand to (included by
// simt.h; the macros themselves are in kernels/cuda/launch.h).
//
// A launch converts the arguments to the kernel's parameter types once (a std::tuple), checks
// every pointer argument against the device-memory registry, and hands a type-erased request to
// the runtime (grid.cpp), which validates the configuration like an sm_90 device and runs the
// grid — now, or when the stream is synchronized if EMBER_SIMT_DEFER=1. Each CUDA thread calls
// the kernel with copies of the arguments, so by-value parameters are per thread as on a GPU.
//
//   fiber launch (EMBER_LAUNCH)      every CUDA thread can block at a barrier or warp op: the
//                                    block runs on fibers, one block at a time in the process.
//   flat launch (EMBER_LAUNCH_FLAT)  the kernel promises no __shared__, barriers or warp ops:
//                                    each block is a plain loop over its threads, and blocks are
//                                    spread over the host's cores.

#include <cstddef>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

namespace ember::simt::detail {

enum class LaunchKind : uint8_t { Fiber, Flat };

// The static __shared__ variables of the module (executable or shared library) that launches:
// the linker defines these for the section named in simt.h; hidden, so each module sees its own;
// weak, so a module without __shared__ variables links (both are then null).
struct SharedSection {
  unsigned char* begin;
  unsigned char* end;
};
#if EMBER_SIMT_SHARED_SECTION
extern "C" unsigned char __start_ember_simt_shared[] __attribute__((weak, visibility("hidden")));
extern "C" unsigned char __stop_ember_simt_shared[] __attribute__((weak, visibility("hidden")));
inline SharedSection module_shared_section() { return {__start_ember_simt_shared, __stop_ember_simt_shared}; }
#else
inline SharedSection module_shared_section() { return {nullptr, nullptr}; }
#endif

struct LaunchSite {
  const char* kernel;  // the kernel expression as written at the launch
  const char* file;
  unsigned line;
};

// Everything the runtime needs to run a grid, without the kernel's types.
struct LaunchRequest {
  LaunchKind kind;
  LaunchSite site;
  const void* func;  // identifies the kernel for cudaFuncSetAttribute
  dim3 grid, block;
  size_t dynamic_smem;
  cudaStream_t stream;
  SharedSection shared;
  void* call;                                         // the KernelCall below
  void (*run_thread)(void* call);                     // fiber: the CUDA thread in tls_exec (else null)
  void (*run_block)(void* call, const unsigned* order);  // flat: every thread of the block (else null)
};

// Whether launches may outlive their call: EMBER_SIMT_DEFER=1, or a stream capture is active.
bool defer_enabled();
// Validates and runs (or queues, or records in a capture) the grid; errors go to cudaGetLastError
// like CUDA's. `keep_alive` owns `call` when the launch is queued or recorded.
void submit_launch(const LaunchRequest& request, std::shared_ptr<void> keep_alive);
// Aborts with a diagnostic when `p` is neither device memory (one past the end allowed) nor
// pinned host memory.
void check_pointer_argument(const void* p, int index, const LaunchSite& site);
// EMBER_DYNAMIC_SHARED: the block's dynamic shared memory (an error outside a fiber launch).
unsigned char* dynamic_shared_memory(const char* file, unsigned line);

template <class F, class Tuple>
struct KernelCall {
  F kernel;
  Tuple args;

  static void run_thread(void* self) {
    auto* c = static_cast<KernelCall*>(self);
    std::apply(c->kernel, c->args);
  }
  // order: the threads' linear indices in the order to run them, or null for forward order.
  static void run_block(void* self, const unsigned* order) {
    auto* c = static_cast<KernelCall*>(self);
    ExecContext& ctx = tls_exec;
    const dim3 bd = ctx.block_dim;
    if (order == nullptr) {
      for (unsigned z = 0; z < bd.z; ++z)
        for (unsigned y = 0; y < bd.y; ++y)
          for (unsigned x = 0; x < bd.x; ++x) {
            ctx.thread_idx = uint3{x, y, z};
            std::apply(c->kernel, c->args);
          }
      return;
    }
    const unsigned n = bd.x * bd.y * bd.z;
    for (unsigned i = 0; i < n; ++i) {
      const unsigned t = order[i];
      ctx.thread_idx = uint3{t % bd.x, (t / bd.x) % bd.y, t / (bd.x * bd.y)};
      std::apply(c->kernel, c->args);
    }
  }
};

template <class Tuple, size_t... I>
void check_pointer_arguments(const Tuple& args, const LaunchSite& site, std::index_sequence<I...>) {
  (
      [&] {
        if constexpr (std::is_pointer_v<std::tuple_element_t<I, Tuple>>)
          check_pointer_argument(static_cast<const void*>(std::get<I>(args)), static_cast<int>(I), site);
      }(),
      ...);
}

// Each launch site instantiates only the runner its kind uses (run_thread for a fiber launch,
// run_block for a flat one): the other would be compiled for nothing, once per kernel.
template <LaunchKind kKind, class... P, class... A>
void launch(const LaunchSite& site, SharedSection shared, void (*kernel)(P...), dim3 grid, dim3 block,
            size_t dynamic_smem, cudaStream_t stream, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "EMBER_LAUNCH: wrong number of kernel arguments");
  using Tuple = std::tuple<std::decay_t<P>...>;
  using Call = KernelCall<void (*)(P...), Tuple>;
  LaunchRequest r{kKind,  site, reinterpret_cast<const void*>(kernel), grid, block, dynamic_smem, stream, shared,
                  nullptr, nullptr, nullptr};
  if constexpr (kKind == LaunchKind::Fiber) r.run_thread = &Call::run_thread;
  else r.run_block = &Call::run_block;
  if (defer_enabled()) {
    auto call = std::make_shared<Call>(Call{kernel, Tuple(std::forward<A>(args)...)});
    check_pointer_arguments(call->args, site, std::index_sequence_for<P...>{});
    r.call = call.get();
    submit_launch(r, std::move(call));
  } else {
    Call call{kernel, Tuple(std::forward<A>(args)...)};
    check_pointer_arguments(call.args, site, std::index_sequence_for<P...>{});
    r.call = &call;
    submit_launch(r, nullptr);
  }
}

}  // namespace ember::simt::detail

// C++ conveniences that <cuda_runtime.h> only declares for nvcc.
template <class T>
inline cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(entry), attr, value);
}

#define EMBER_SIMT_LAUNCH(kind, kernel, grid, block, smem, stream, ...)                                 \
  ::ember::simt::detail::launch<kind>(::ember::simt::detail::LaunchSite{#kernel, __FILE__, __LINE__},   \
                                ::ember::simt::detail::module_shared_section(), kernel, dim3(grid),     \
                                dim3(block), static_cast<size_t>(smem), (stream) __VA_OPT__(, ) __VA_ARGS__)
