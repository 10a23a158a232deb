// The entry points that GCC's thread-sanitizer instrumentation calls before every load and store
// of a lab's kernels, answered by the emulator's counters instead of the TSan runtime (Note [Seeing
// every load and store] in kernels/simt/counters.cpp). Linked into the lab programs only: never
// into libember, and never into an EMBER_SANITIZE build, whose real runtime owns these names.
//
// __builtin_return_address(0) is the instruction right after the instrumented call: a distinct
// address for every load or store in the kernel's code, which is how lanes' accesses are grouped
// into warp requests.
//
// The instrumented code also calls these hooks for its atomic operations (GCC turns every
// __atomic builtin into a call): they must do the operation itself, atomically, here in code that
// is not instrumented. An atomic counts as a store, as in counters.h.

#include <cstddef>
#include <cstdint>

#include "../internal.h"

namespace {
const bool g_linked = [] {
  ember::simt::detail::g_memory_hooks_linked.store(true);
  return true;
}();

inline void seen(const volatile void* p, size_t n, bool write, void* pc) {
  ember::simt::detail::counters_access(const_cast<const void*>(p), n, write, pc);
}
}  // namespace

extern "C" {

#define EMBER_SIMT_ACCESS_HOOK(name, write, n) \
  void name(void* p) { seen(p, n, write, __builtin_return_address(0)); }
EMBER_SIMT_ACCESS_HOOK(__tsan_read1, false, 1)
EMBER_SIMT_ACCESS_HOOK(__tsan_read2, false, 2)
EMBER_SIMT_ACCESS_HOOK(__tsan_read4, false, 4)
EMBER_SIMT_ACCESS_HOOK(__tsan_read8, false, 8)
EMBER_SIMT_ACCESS_HOOK(__tsan_read16, false, 16)
EMBER_SIMT_ACCESS_HOOK(__tsan_write1, true, 1)
EMBER_SIMT_ACCESS_HOOK(__tsan_write2, true, 2)
EMBER_SIMT_ACCESS_HOOK(__tsan_write4, true, 4)
EMBER_SIMT_ACCESS_HOOK(__tsan_write8, true, 8)
EMBER_SIMT_ACCESS_HOOK(__tsan_write16, true, 16)
EMBER_SIMT_ACCESS_HOOK(__tsan_unaligned_read2, false, 2)
EMBER_SIMT_ACCESS_HOOK(__tsan_unaligned_read4, false, 4)
EMBER_SIMT_ACCESS_HOOK(__tsan_unaligned_read8, false, 8)
EMBER_SIMT_ACCESS_HOOK(__tsan_unaligned_read16, false, 16)
EMBER_SIMT_ACCESS_HOOK(__tsan_unaligned_write2, true, 2)
EMBER_SIMT_ACCESS_HOOK(__tsan_unaligned_write4, true, 4)
EMBER_SIMT_ACCESS_HOOK(__tsan_unaligned_write8, true, 8)
EMBER_SIMT_ACCESS_HOOK(__tsan_unaligned_write16, true, 16)
#undef EMBER_SIMT_ACCESS_HOOK
void __tsan_read_range(void* p, size_t n) { seen(p, n, false, __builtin_return_address(0)); }
void __tsan_write_range(void* p, size_t n) { seen(p, n, true, __builtin_return_address(0)); }

// Bookkeeping the runtime would do: nothing here (function entry/exit is also switched off with
// --param=tsan-instrument-func-entry-exit=0).
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}

// Atomics: the operation itself (with the memory order asked for, which GCC passes in the
// __ATOMIC_* encoding), and one access for the counters.
#define EMBER_SIMT_ATOMICS(bits, T)                                                                          \
  T __tsan_atomic##bits##_load(const volatile T* a, int mo) {                                               \
    seen(a, sizeof(T), false, __builtin_return_address(0));                                                 \
    return __atomic_load_n(a, mo);                                                                          \
  }                                                                                                         \
  void __tsan_atomic##bits##_store(volatile T* a, T v, int mo) {                                            \
    seen(a, sizeof(T), true, __builtin_return_address(0));                                                  \
    __atomic_store_n(a, v, mo);                                                                             \
  }                                                                                                         \
  T __tsan_atomic##bits##_exchange(volatile T* a, T v, int mo) {                                            \
    seen(a, sizeof(T), true, __builtin_return_address(0));                                                  \
    return __atomic_exchange_n(a, v, mo);                                                                   \
  }                                                                                                         \
  T __tsan_atomic##bits##_fetch_add(volatile T* a, T v, int mo) {                                           \
    seen(a, sizeof(T), true, __builtin_return_address(0));                                                  \
    return __atomic_fetch_add(a, v, mo);                                                                    \
  }                                                                                                         \
  T __tsan_atomic##bits##_fetch_sub(volatile T* a, T v, int mo) {                                           \
    seen(a, sizeof(T), true, __builtin_return_address(0));                                                  \
    return __atomic_fetch_sub(a, v, mo);                                                                    \
  }                                                                                                         \
  T __tsan_atomic##bits##_fetch_and(volatile T* a, T v, int mo) {                                           \
    seen(a, sizeof(T), true, __builtin_return_address(0));                                                  \
    return __atomic_fetch_and(a, v, mo);                                                                    \
  }                                                                                                         \
  T __tsan_atomic##bits##_fetch_or(volatile T* a, T v, int mo) {                                            \
    seen(a, sizeof(T), true, __builtin_return_address(0));                                                  \
    return __atomic_fetch_or(a, v, mo);                                                                     \
  }                                                                                                         \
  T __tsan_atomic##bits##_fetch_xor(volatile T* a, T v, int mo) {                                           \
    seen(a, sizeof(T), true, __builtin_return_address(0));                                                  \
    return __atomic_fetch_xor(a, v, mo);                                                                    \
  }                                                                                                         \
  T __tsan_atomic##bits##_fetch_nand(volatile T* a, T v, int mo) {                                          \
    seen(a, sizeof(T), true, __builtin_return_address(0));                                                  \
    return __atomic_fetch_nand(a, v, mo);                                                                   \
  }                                                                                                         \
  int __tsan_atomic##bits##_compare_exchange_strong(volatile T* a, T* expected, T v, int mo, int fail_mo) { \
    seen(a, sizeof(T), true, __builtin_return_address(0));                                                  \
    return __atomic_compare_exchange_n(a, expected, v, false, mo, fail_mo);                                 \
  }                                                                                                         \
  int __tsan_atomic##bits##_compare_exchange_weak(volatile T* a, T* expected, T v, int mo, int fail_mo) {   \
    seen(a, sizeof(T), true, __builtin_return_address(0));                                                  \
    return __atomic_compare_exchange_n(a, expected, v, true, mo, fail_mo);                                  \
  }                                                                                                         \
  T __tsan_atomic##bits##_compare_exchange_val(volatile T* a, T expected, T v, int mo, int fail_mo) {       \
    seen(a, sizeof(T), true, __builtin_return_address(0));                                                  \
    __atomic_compare_exchange_n(a, &expected, v, false, mo, fail_mo);                                       \
    return expected;                                                                                        \
  }
EMBER_SIMT_ATOMICS(8, uint8_t)
EMBER_SIMT_ATOMICS(16, uint16_t)
EMBER_SIMT_ATOMICS(32, uint32_t)
EMBER_SIMT_ATOMICS(64, uint64_t)
#undef EMBER_SIMT_ATOMICS
void __tsan_atomic_thread_fence(int mo) { __atomic_thread_fence(mo); }
void __tsan_atomic_signal_fence(int mo) { __atomic_signal_fence(mo); }
}
