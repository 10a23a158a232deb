#pragma once
// Device functions that kernels use and that <cuda_runtime.h>/<cuda_fp16.h> do not provide in
// host mode (included by simt.h). glibc already declares __expf, __logf, __sinf, __powf, ...
//
// Numerics: the "fast" intrinsics (__expf, __fdividef, rsqrtf) are exact here and approximate on
// a GPU, and the rounding-mode variants (_rz, _ru, _rd) use the host's round-to-nearest unless
// noted. Compare GPU results with tolerances (docs/simt.md, "What it cannot emulate").

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>

// ---- min / max (CUDA's math_functions.hpp overloads, device side) ------------------------------
#define EMBER_SIMT_MINMAX(T)                              \
  inline T min(T a, T b) { return b < a ? b : a; }        \
  inline T max(T a, T b) { return a < b ? b : a; }
EMBER_SIMT_MINMAX(int)
EMBER_SIMT_MINMAX(unsigned int)
EMBER_SIMT_MINMAX(long)
EMBER_SIMT_MINMAX(unsigned long)
EMBER_SIMT_MINMAX(long long)
EMBER_SIMT_MINMAX(unsigned long long)
#undef EMBER_SIMT_MINMAX
// Mixed signedness compares as unsigned, as CUDA does.
inline unsigned int min(int a, unsigned int b) { return min(static_cast<unsigned int>(a), b); }
inline unsigned int min(unsigned int a, int b) { return min(a, static_cast<unsigned int>(b)); }
inline unsigned int max(int a, unsigned int b) { return max(static_cast<unsigned int>(a), b); }
inline unsigned int max(unsigned int a, int b) { return max(a, static_cast<unsigned int>(b)); }
inline unsigned long long min(long long a, unsigned long long b) { return min(static_cast<unsigned long long>(a), b); }
inline unsigned long long min(unsigned long long a, long long b) { return min(a, static_cast<unsigned long long>(b)); }
inline unsigned long long max(long long a, unsigned long long b) { return max(static_cast<unsigned long long>(a), b); }
inline unsigned long long max(unsigned long long a, long long b) { return max(a, static_cast<unsigned long long>(b)); }
// Floating point min/max are fminf/fmaxf (NaN-ignoring), as on the GPU.
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(float a, double b) { return fmin(a, b); }
inline double min(double a, float b) { return fmin(a, b); }
inline double max(float a, double b) { return fmax(a, b); }
inline double max(double a, float b) { return fmax(a, b); }

// ---- single precision ----------------------------------------------------------------------------
inline float __fdividef(float x, float y) { return x / y; }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : (x == x ? x : 0.f)); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
inline double normcdf(double x) { return 0.5 * erfc(-x * 0.70710678118654752); }

// ---- double precision ----------------------------------------------------------------------------
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline double __drcp_rn(double x) { return 1.0 / x; }
inline double __dsqrt_rn(double x) { return sqrt(x); }

// ---- conversions and reinterpretation --------------------------------------------------------
inline int __float2int_rn(float x) { return static_cast<int>(nearbyintf(x)); }
inline int __float2int_rz(float x) { return static_cast<int>(truncf(x)); }
inline int __float2int_rd(float x) { return static_cast<int>(floorf(x)); }
inline int __float2int_ru(float x) { return static_cast<int>(ceilf(x)); }
inline unsigned int __float2uint_rn(float x) { return static_cast<unsigned int>(nearbyintf(x)); }
inline unsigned int __float2uint_rz(float x) { return static_cast<unsigned int>(truncf(x)); }
inline long long __float2ll_rn(float x) { return static_cast<long long>(nearbyintf(x)); }
inline long long __float2ll_rz(float x) { return static_cast<long long>(truncf(x)); }
inline float __int2float_rn(int x) { return static_cast<float>(x); }
inline float __uint2float_rn(unsigned int x) { return static_cast<float>(x); }
inline float __ll2float_rn(long long x) { return static_cast<float>(x); }
inline int __double2int_rn(double x) { return static_cast<int>(nearbyint(x)); }
inline float __double2float_rn(double x) { return static_cast<float>(x); }

template <class To, class From>
inline To ember_simt_bit_cast(From v) {
  static_assert(sizeof(To) == sizeof(From));
  To t;
  std::memcpy(&t, &v, sizeof(To));
  return t;
}
inline int __float_as_int(float x) { return ember_simt_bit_cast<int>(x); }
inline unsigned int __float_as_uint(float x) { return ember_simt_bit_cast<unsigned int>(x); }
inline float __int_as_float(int x) { return ember_simt_bit_cast<float>(x); }
inline float __uint_as_float(unsigned int x) { return ember_simt_bit_cast<float>(x); }
inline long long __double_as_longlong(double x) { return ember_simt_bit_cast<long long>(x); }
inline double __longlong_as_double(long long x) { return ember_simt_bit_cast<double>(x); }

// ---- integer and bit operations --------------------------------------------------------------
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned int>(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned int __brev(unsigned int x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
  return __builtin_bswap32(x);
}
inline unsigned long long __brevll(unsigned long long x) {
  return (static_cast<unsigned long long>(__brev(static_cast<unsigned int>(x))) << 32) |
         __brev(static_cast<unsigned int>(x >> 32));
}
inline unsigned int __umulhi(unsigned int a, unsigned int b) {
  return static_cast<unsigned int>((static_cast<unsigned long long>(a) * b) >> 32);
}
inline int __mulhi(int a, int b) { return static_cast<int>((static_cast<long long>(a) * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
inline int __mul24(int a, int b) { return (a << 8 >> 8) * (b << 8 >> 8); }
inline unsigned int __umul24(unsigned int a, unsigned int b) { return (a & 0xFFFFFFu) * (b & 0xFFFFFFu); }
inline unsigned int __funnelshift_l(unsigned int lo, unsigned int hi, unsigned int shift) {
  const unsigned long long v = (static_cast<unsigned long long>(hi) << 32) | lo;
  return static_cast<unsigned int>((v << (shift & 31)) >> 32);
}
inline unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int shift) {
  const unsigned long long v = (static_cast<unsigned long long>(hi) << 32) | lo;
  return static_cast<unsigned int>(v >> (shift & 31));
}

// ---- loads and stores with cache hints: plain accesses here ---------------------------------
// One copy of sizeof(T) bytes, so that a float4 is one 16-byte access as on a GPU (a member-wise
// `*p` may become four 4-byte loads, which the kernel labs' counters would see as four requests).
template <class T>
inline T ember_simt_load_whole(const T* p) {
  T v;
  __builtin_memcpy(static_cast<void*>(&v), static_cast<const void*>(p), sizeof(T));
  return v;
}
template <class T>
inline T __ldg(const T* p) { return ember_simt_load_whole(p); }
template <class T>
inline T __ldcg(const T* p) { return ember_simt_load_whole(p); }
template <class T>
inline T __ldcs(const T* p) { return ember_simt_load_whole(p); }
template <class T>
inline T __ldlu(const T* p) { return ember_simt_load_whole(p); }
// Stores likewise: one sizeof(T) copy. (The host side of cuda_fp16.h / cuda_bf16.h assigns a
// __half2 or __nv_bfloat162 member by member, two 2-byte stores where the GPU makes one 4-byte
// store; kernels whose accesses are counted move pairs with __ldg and __stcs.)
template <class T>
inline void ember_simt_store_whole(T* p, const T& v) {
  __builtin_memcpy(static_cast<void*>(p), static_cast<const void*>(&v), sizeof(T));
}
template <class T>
inline void __stcg(T* p, T v) { ember_simt_store_whole(p, v); }
template <class T>
inline void __stcs(T* p, T v) { ember_simt_store_whole(p, v); }
template <class T>
inline void __stwt(T* p, T v) { ember_simt_store_whole(p, v); }

// ---- time ------------------------------------------------------------------------------------
inline long long clock64() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// Fibers are cooperative: a spin-wait on another thread of the same block never ends (see
// docs/simt.md). __nanosleep does not yield.
inline void __nanosleep(unsigned int) {}

// ---- half and bfloat16 functions that are device-only in the CUDA headers ----------------------
// Computed in float (double for fma) and rounded once; may differ from the GPU by an ulp.
#define EMBER_SIMT_HALF_UNARY(T, to_float, from_float, name, expr) \
  inline T name(T a) {                                           \
    const float x = to_float(a);                                 \
    return from_float(expr);                                     \
  }
#define EMBER_SIMT_HALF_FUNCTIONS(T, to_float, from_float)                                        \
  inline T __hfma(T a, T b, T c) {                                                                \
    return from_float(static_cast<float>(static_cast<double>(to_float(a)) * to_float(b) + to_float(c))); \
  }                                                                                               \
  EMBER_SIMT_HALF_UNARY(T, to_float, from_float, hexp, expf(x))                                    \
  EMBER_SIMT_HALF_UNARY(T, to_float, from_float, hexp2, exp2f(x))                                  \
  EMBER_SIMT_HALF_UNARY(T, to_float, from_float, hlog, logf(x))                                    \
  EMBER_SIMT_HALF_UNARY(T, to_float, from_float, hlog2, log2f(x))                                  \
  EMBER_SIMT_HALF_UNARY(T, to_float, from_float, hsqrt, sqrtf(x))                                  \
  EMBER_SIMT_HALF_UNARY(T, to_float, from_float, hrsqrt, 1.0f / sqrtf(x))                          \
  EMBER_SIMT_HALF_UNARY(T, to_float, from_float, hrcp, 1.0f / x)                                   \
  EMBER_SIMT_HALF_UNARY(T, to_float, from_float, hsin, sinf(x))                                    \
  EMBER_SIMT_HALF_UNARY(T, to_float, from_float, hcos, cosf(x))                                    \
  EMBER_SIMT_HALF_UNARY(T, to_float, from_float, htanh, tanhf(x))
EMBER_SIMT_HALF_FUNCTIONS(__half, __half2float, __float2half_rn)
EMBER_SIMT_HALF_FUNCTIONS(__nv_bfloat16, __bfloat162float, __float2bfloat16_rn)
#undef EMBER_SIMT_HALF_FUNCTIONS
#undef EMBER_SIMT_HALF_UNARY
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
  return __halves2half2(__hfma(__low2half(a), __low2half(b), __low2half(c)),
                        __hfma(__high2half(a), __high2half(b), __high2half(c)));
}
