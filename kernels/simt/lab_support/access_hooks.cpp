// The entry points that GCC's thread-sanitizer instrumentation calls before every load and store
// of a lab's kernels, answered by the emulator's counters instead of the TSan runtime (Note [Seeing
// every load and store] in kernels/simt/counters.cpp). Linked into the lab programs only: never
// into libember, and never into an EMBER_SANITIZE=thread build, whose real runtime owns these
// names.
//
// __builtin_return_address(0) is the instruction right after the instrumented call: a distinct
// address for every load or store in the kernel's code, which is how lanes' accesses are grouped
// into warp requests.
//
// The instrumentation also replaces every atomic builtin of the translation unit (the emulator's
// atomicAdd & co. in atomics.h, and the host code's) with a call here, so these functions do the
// atomic operation themselves. A read-modify-write (fetch-op, exchange, compare-and-swap) counts as
// one store access, as a GPU's atomic instruction is one request; an atomic load is not counted:
// CUDA kernels do not make them, and the emulator's compare-and-swap loops (atomics.h) begin with
// one that a GPU's atomicAdd does not have.

#include <cstddef>
#include <cstdint>

#include "../internal.h"

namespace {
const bool g_linked = [] {
  ember::simt::detail::g_memory_hooks_linked.store(true);
  return true;
}();

inline void count(const volatile void* p, size_t n, bool write, const void* pc) {
  ember::simt::detail::counters_access(const_cast<const void*>(p), n, write, pc);
}
inline void count_atomic(const volatile void* p, size_t n, const void* pc) {
  ember::simt::detail::counters_atomic_access(const_cast<const void*>(p), n, pc);
}
}  // namespace

#define EMBER_SIMT_ACCESS_HOOK(n)                                                                        \
  extern "C" void __tsan_read##n(void* p) { count(p, n, false, __builtin_return_address(0)); }           \
  extern "C" void __tsan_write##n(void* p) { count(p, n, true, __builtin_return_address(0)); }           \
  extern "C" void __tsan_unaligned_read##n(void* p) { count(p, n, false, __builtin_return_address(0)); } \
  extern "C" void __tsan_unaligned_write##n(void* p) { count(p, n, true, __builtin_return_address(0)); }
EMBER_SIMT_ACCESS_HOOK(1)
EMBER_SIMT_ACCESS_HOOK(2)
EMBER_SIMT_ACCESS_HOOK(4)
EMBER_SIMT_ACCESS_HOOK(8)
EMBER_SIMT_ACCESS_HOOK(16)
#undef EMBER_SIMT_ACCESS_HOOK

extern "C" {
void __tsan_read_range(void* p, size_t n) { count(p, n, false, __builtin_return_address(0)); }
void __tsan_write_range(void* p, size_t n) { count(p, n, true, __builtin_return_address(0)); }
// The rest of what instrumented code calls: the module constructor, function entry and exit, and
// the virtual-table pointer checks. Nothing to do for any of them here.
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}
}

// Atomics, for every width: TSan's memory-order argument has the values of GCC's __ATOMIC_*
// constants; the operations here are all sequentially consistent, which is at least as strong.
#define EMBER_SIMT_ATOMIC_HOOKS(bits, T)                                                                             \
  extern "C" T __tsan_atomic##bits##_load(const volatile T* a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); } \
  extern "C" void __tsan_atomic##bits##_store(volatile T* a, T v, int) {                                             \
    count_atomic(a, sizeof(T), __builtin_return_address(0));                                                         \
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                                        \
  }                                                                                                                  \
  EMBER_SIMT_ATOMIC_RMW(bits, T, exchange, __atomic_exchange_n)                                                      \
  EMBER_SIMT_ATOMIC_RMW(bits, T, fetch_add, __atomic_fetch_add)                                                      \
  EMBER_SIMT_ATOMIC_RMW(bits, T, fetch_sub, __atomic_fetch_sub)                                                      \
  EMBER_SIMT_ATOMIC_RMW(bits, T, fetch_and, __atomic_fetch_and)                                                      \
  EMBER_SIMT_ATOMIC_RMW(bits, T, fetch_or, __atomic_fetch_or)                                                        \
  EMBER_SIMT_ATOMIC_RMW(bits, T, fetch_xor, __atomic_fetch_xor)                                                      \
  EMBER_SIMT_ATOMIC_RMW(bits, T, fetch_nand, __atomic_fetch_nand)                                                    \
  extern "C" int __tsan_atomic##bits##_compare_exchange_strong(volatile T* a, T* expected, T v, int, int) {          \
    count_atomic(a, sizeof(T), __builtin_return_address(0));                                                         \
    return __atomic_compare_exchange_n(a, expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                   \
  }                                                                                                                  \
  extern "C" int __tsan_atomic##bits##_compare_exchange_weak(volatile T* a, T* expected, T v, int, int) {            \
    count_atomic(a, sizeof(T), __builtin_return_address(0));                                                         \
    return __atomic_compare_exchange_n(a, expected, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                    \
  }                                                                                                                  \
  extern "C" T __tsan_atomic##bits##_compare_exchange_val(volatile T* a, T expected, T v, int, int) {                \
    count_atomic(a, sizeof(T), __builtin_return_address(0));                                                         \
    __atomic_compare_exchange_n(a, &expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                         \
    return expected;                                                                                                 \
  }
#define EMBER_SIMT_ATOMIC_RMW(bits, T, op, builtin)                  \
  extern "C" T __tsan_atomic##bits##_##op(volatile T* a, T v, int) { \
    count_atomic(a, sizeof(T), __builtin_return_address(0));         \
    return builtin(a, v, __ATOMIC_SEQ_CST);                          \
  }
EMBER_SIMT_ATOMIC_HOOKS(8, uint8_t)
EMBER_SIMT_ATOMIC_HOOKS(16, uint16_t)
EMBER_SIMT_ATOMIC_HOOKS(32, uint32_t)
EMBER_SIMT_ATOMIC_HOOKS(64, uint64_t)
#undef EMBER_SIMT_ATOMIC_RMW
#undef EMBER_SIMT_ATOMIC_HOOKS

extern "C" {
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
}
