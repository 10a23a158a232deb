// The entry points that GCC's address-sanitizer instrumentation calls before every load and store
// of a lab's kernels, answered by the emulator's counters instead of the ASan runtime (Note [Seeing
// every load and store] in kernels/simt/counters.cpp). Linked into the lab programs only: never
// into libember, and never into an EMBER_SANITIZE=address build, whose real runtime owns these
// names.
//
// __builtin_return_address(0) is the instruction right after the instrumented call: a distinct
// address for every load or store in the kernel's code, which is how lanes' accesses are grouped
// into warp requests.

#include <cstddef>
#include <cstdint>

#include "../internal.h"

namespace {
const bool g_linked = [] {
  ember::simt::detail::g_memory_hooks_linked.store(true);
  return true;
}();
}  // namespace

#define EMBER_SIMT_ACCESS_HOOK(kind, write, n)                                                          \
  extern "C" void __asan_##kind##n(uintptr_t p) {                                                       \
    ember::simt::detail::counters_access(reinterpret_cast<const void*>(p), n, write, __builtin_return_address(0)); \
  }
EMBER_SIMT_ACCESS_HOOK(load, false, 1)
EMBER_SIMT_ACCESS_HOOK(load, false, 2)
EMBER_SIMT_ACCESS_HOOK(load, false, 4)
EMBER_SIMT_ACCESS_HOOK(load, false, 8)
EMBER_SIMT_ACCESS_HOOK(load, false, 16)
EMBER_SIMT_ACCESS_HOOK(store, true, 1)
EMBER_SIMT_ACCESS_HOOK(store, true, 2)
EMBER_SIMT_ACCESS_HOOK(store, true, 4)
EMBER_SIMT_ACCESS_HOOK(store, true, 8)
EMBER_SIMT_ACCESS_HOOK(store, true, 16)
#undef EMBER_SIMT_ACCESS_HOOK

extern "C" {
void __asan_loadN(uintptr_t p, size_t n) {
  ember::simt::detail::counters_access(reinterpret_cast<const void*>(p), n, false, __builtin_return_address(0));
}
void __asan_storeN(uintptr_t p, size_t n) {
  ember::simt::detail::counters_access(reinterpret_cast<const void*>(p), n, true, __builtin_return_address(0));
}
// The rest of what instrumented code may call: the module constructor's checks, and the stack
// bookkeeping that `asan-stack=0` mostly removes. Nothing to do for any of them here.
void __asan_init() {}
void __asan_version_mismatch_check_v8() {}
void __asan_handle_no_return() {}
void __asan_poison_stack_memory(uintptr_t, size_t) {}
void __asan_unpoison_stack_memory(uintptr_t, size_t) {}
void __asan_alloca_poison(uintptr_t, size_t) {}
void __asan_allocas_unpoison(uintptr_t, uintptr_t) {}
}
