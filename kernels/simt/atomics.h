#pragma once
// CUDA atomics and fences for the emulator (included by simt.h).
//
// Exactly the overloads CUDA has (so code that compiles here compiles with nvcc), implemented with
// relaxed __atomic builtins — CUDA's atomicXxx are relaxed too. They are real atomics because
// EMBER_LAUNCH_FLAT blocks run in parallel on several OS threads; TSan understands them. Floating
// point and 16-bit types go through a compare-and-swap loop on their bits.

#include <cstring>
#include <type_traits>

namespace ember::simt::detail {

template <class T, class F>
inline T atomic_update(T* address, F update) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8, "atomic of an unsupported size");
  using Bits = std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;
  Bits* p = reinterpret_cast<Bits*>(address);
  Bits old_bits = __atomic_load_n(p, __ATOMIC_RELAXED), new_bits;
  T old_value;
  do {
    std::memcpy(static_cast<void*>(&old_value), &old_bits, sizeof(T));
    const T new_value = update(old_value);
    std::memcpy(&new_bits, &new_value, sizeof(T));
  } while (!__atomic_compare_exchange_n(p, &old_bits, new_bits, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  return old_value;
}

}  // namespace ember::simt::detail

#define EMBER_SIMT_ATOMIC_FETCH(name, builtin, T) \
  inline T name(T* address, T value) { return builtin(address, value, __ATOMIC_RELAXED); }
#define EMBER_SIMT_ATOMIC_CAS_LOOP(name, T, expr)                                               \
  inline T name(T* address, T value) {                                                          \
    return ::ember::simt::detail::atomic_update(address, [value](T old) -> T { return (expr); }); \
  }

EMBER_SIMT_ATOMIC_FETCH(atomicAdd, __atomic_fetch_add, int)
EMBER_SIMT_ATOMIC_FETCH(atomicAdd, __atomic_fetch_add, unsigned int)
EMBER_SIMT_ATOMIC_FETCH(atomicAdd, __atomic_fetch_add, unsigned long long)
EMBER_SIMT_ATOMIC_CAS_LOOP(atomicAdd, float, old + value)
EMBER_SIMT_ATOMIC_CAS_LOOP(atomicAdd, double, old + value)
EMBER_SIMT_ATOMIC_CAS_LOOP(atomicAdd, __half, __float2half_rn(__half2float(old) + __half2float(value)))
EMBER_SIMT_ATOMIC_CAS_LOOP(atomicAdd, __nv_bfloat16,
                           __float2bfloat16_rn(__bfloat162float(old) + __bfloat162float(value)))

EMBER_SIMT_ATOMIC_FETCH(atomicSub, __atomic_fetch_sub, int)
EMBER_SIMT_ATOMIC_FETCH(atomicSub, __atomic_fetch_sub, unsigned int)

EMBER_SIMT_ATOMIC_FETCH(atomicExch, __atomic_exchange_n, int)
EMBER_SIMT_ATOMIC_FETCH(atomicExch, __atomic_exchange_n, unsigned int)
EMBER_SIMT_ATOMIC_FETCH(atomicExch, __atomic_exchange_n, unsigned long long)
EMBER_SIMT_ATOMIC_CAS_LOOP(atomicExch, float, value)

EMBER_SIMT_ATOMIC_CAS_LOOP(atomicMax, int, old < value ? value : old)
EMBER_SIMT_ATOMIC_CAS_LOOP(atomicMax, unsigned int, old < value ? value : old)
EMBER_SIMT_ATOMIC_CAS_LOOP(atomicMax, long long, old < value ? value : old)
EMBER_SIMT_ATOMIC_CAS_LOOP(atomicMax, unsigned long long, old < value ? value : old)
EMBER_SIMT_ATOMIC_CAS_LOOP(atomicMin, int, value < old ? value : old)
EMBER_SIMT_ATOMIC_CAS_LOOP(atomicMin, unsigned int, value < old ? value : old)
EMBER_SIMT_ATOMIC_CAS_LOOP(atomicMin, long long, value < old ? value : old)
EMBER_SIMT_ATOMIC_CAS_LOOP(atomicMin, unsigned long long, value < old ? value : old)

EMBER_SIMT_ATOMIC_FETCH(atomicAnd, __atomic_fetch_and, int)
EMBER_SIMT_ATOMIC_FETCH(atomicAnd, __atomic_fetch_and, unsigned int)
EMBER_SIMT_ATOMIC_FETCH(atomicAnd, __atomic_fetch_and, unsigned long long)
EMBER_SIMT_ATOMIC_FETCH(atomicOr, __atomic_fetch_or, int)
EMBER_SIMT_ATOMIC_FETCH(atomicOr, __atomic_fetch_or, unsigned int)
EMBER_SIMT_ATOMIC_FETCH(atomicOr, __atomic_fetch_or, unsigned long long)
EMBER_SIMT_ATOMIC_FETCH(atomicXor, __atomic_fetch_xor, int)
EMBER_SIMT_ATOMIC_FETCH(atomicXor, __atomic_fetch_xor, unsigned int)
EMBER_SIMT_ATOMIC_FETCH(atomicXor, __atomic_fetch_xor, unsigned long long)

// ((old >= limit) ? 0 : old + 1) and (((old == 0) || (old > limit)) ? limit : old - 1), as PTX.
EMBER_SIMT_ATOMIC_CAS_LOOP(atomicInc, unsigned int, old >= value ? 0u : old + 1)
EMBER_SIMT_ATOMIC_CAS_LOOP(atomicDec, unsigned int, (old == 0 || old > value) ? value : old - 1)

#undef EMBER_SIMT_ATOMIC_FETCH
#undef EMBER_SIMT_ATOMIC_CAS_LOOP

#define EMBER_SIMT_ATOMIC_CAS(T)                                                                   \
  inline T atomicCAS(T* address, T compare, T value) {                                             \
    __atomic_compare_exchange_n(address, &compare, value, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED); \
    return compare;                                                                                \
  }
EMBER_SIMT_ATOMIC_CAS(int)
EMBER_SIMT_ATOMIC_CAS(unsigned int)
EMBER_SIMT_ATOMIC_CAS(unsigned long long)
EMBER_SIMT_ATOMIC_CAS(unsigned short)
#undef EMBER_SIMT_ATOMIC_CAS

inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
