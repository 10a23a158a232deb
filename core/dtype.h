#pragma once
// Element types, the 16-bit floating-point types, and the type each one accumulates in.

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <type_traits>

#if defined(__CUDACC__)
#define EMBER_HD __host__ __device__
#else
#define EMBER_HD
#endif

namespace ember {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8, boolean };

inline constexpr int kNumDTypes = 8;

// Bytes per element.
constexpr int64_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
    case DType::boolean: return 1;
  }
  return 0;
}

constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
constexpr bool is_integral(DType t) { return !is_floating(t); }  // bool counts as integral
// The 16-bit floating types: stored in 16 bits, computed in float (Note [Accumulation types]).
constexpr bool is_low_precision(DType t) { return t == DType::f16 || t == DType::bf16; }

// PyTorch's names: "float32", "int64", "bool", ...
const char* dtype_name(DType t);
// Parses "float32"/"f32"/"float", "float64"/"f64"/"double", ...; throws on an unknown name.
DType dtype_from_name(const std::string& name);
std::ostream& operator<<(std::ostream& os, DType t);

// The dtype two operands are computed in (PyTorch's type promotion, simplified:
// floating beats integral, wider beats narrower; bool < u8 < i32 < i64 < f16/bf16 < f32 < f64).
DType promote_types(DType a, DType b);

// ---- 16-bit floating point types ----------------------------------------------------------

EMBER_HD inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
EMBER_HD inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE binary16. Conversion from f32 rounds to nearest, ties to even; overflow gives inf; NaN
// stays NaN (quiet); subnormals are produced and read exactly.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  EMBER_HD explicit Half(float f) : bits(from_float(f)) {}
  EMBER_HD operator float() const { return to_float(bits); }

  EMBER_HD static uint16_t from_float(float f) {
    const uint32_t x = float_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t abs = x & 0x7fffffffu;
    if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
    if (abs < 0x38800000u) {
      // Result is subnormal (or zero): value = m * 2^-24. Add 0.5 ulp-of-half via float arithmetic:
      // adding 0.5f (2^-1) aligns the binary point so the FPU does the RNE rounding for us.
      const float magic = bits_float(0x3f000000u);  // 0.5
      const float r = bits_float(abs) + magic;
      return static_cast<uint16_t>(sign | (float_bits(r) - 0x3f000000u));
    }
    // Normal: rebias exponent (127 -> 15), keep 10 mantissa bits, round to nearest even.
    const uint32_t mant_odd = (abs >> 13) & 1u;
    uint32_t r = abs + 0xc8000fffu + mant_odd;  // -(112 << 23) + 0xfff + odd
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  EMBER_HD static float to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf / NaN
    if (exp == 0) {
      // zero or subnormal: mant * 2^-24, exact in f32
      const float v = static_cast<float>(mant) * bits_float(0x33800000u);  // 2^-24
      return sign ? -v : v;
    }
    return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
  }
};

// bfloat16: the top 16 bits of an f32, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  EMBER_HD explicit BFloat16(float f) : bits(from_float(f)) {}
  EMBER_HD operator float() const { return to_float(bits); }

  EMBER_HD static uint16_t from_float(float f) {
    const uint32_t x = float_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
    const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
    return static_cast<uint16_t>((x + rounding) >> 16);
  }
  EMBER_HD static float to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }
};

// Compile-time mapping C++ type -> DType.
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::boolean; };

// Note [Accumulation types]
// A kernel reads elements of its dtype T, computes in acc_t<T> and rounds once, when it stores:
//
//   T          f16    bf16   f32    f64
//   acc_t<T>   float  float  float  double
//   cpu_acc_t  float  float  double double
//
// acc_t is what the CUDA kernels accumulate and compute in (PyTorch's acc_type<T, is_cuda=true>):
// float is the type GPUs are fast at (double runs at 1/32 to 1/64 of float's rate on every GPU
// but the datacenter ones), and a 16-bit value widened to float is exact, so f16/bf16 sums lose
// nothing to the accumulator that f32 sums do not. cpu_acc_t is what the CPU reference kernels
// accumulate in (PyTorch's acc_type<T, is_cuda=false>): the same, except that float32 sums,
// means, variances and dot products run in double — on a CPU that costs little, and it makes the
// reference the more accurate side of every CPU-vs-CUDA parity test, so a parity tolerance
// measures the CUDA kernel's float accumulation alone. Elementwise functors compute in acc_t on
// both backends (a Half is loaded, widened to float, computed on, and rounded on store). The CPU's
// pooling, batch-norm and loss kernels run f16/bf16 through their f32 versions instead, and so
// accumulate like f32 (Note [Low-precision CPU kernels through f32] in kernels/cpu/widen.h).
template <typename T> struct AccumulateType { using type = T; };
template <> struct AccumulateType<Half> { using type = float; };
template <> struct AccumulateType<BFloat16> { using type = float; };
template <typename T> using acc_t = typename AccumulateType<T>::type;
template <typename T> using cpu_acc_t = std::conditional_t<std::is_same_v<T, float>, double, acc_t<T>>;

// Whether T is one of the 16-bit floating-point types (computed in float, stored in 16 bits).
template <typename T> inline constexpr bool is_low_precision_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

}  // namespace ember

// Runs BODY (a lambda taking no argument) with `scalar_t` bound to the C++ type of DTYPE; NAME
// begins the error for a dtype the set does not cover. The sets, one switch under all of them:
//   _FLOATING  f32, f64, f16, bf16: the kernels a network trains with (f16/bf16 computed in acc_t)
//   _FLOAT     f32, f64: kernels without 16-bit versions
//   _ALL       every dtype
//   _ORDERED   the ordered arithmetic types, no bool (f16/bf16 compared as float): max/min/argmax
//   _ADDABLE   f32, f64, i32, i64: scatter_add
//   _INDEX     i32, i64: the index types of gather/scatter/index_select/labels
// and _BYTES, which binds scalar_t to the unsigned integer of DTYPE's size, for kernels that only
// move elements (gather).
#define EMBER_DTYPE_CASE(enum_value, type, ...) \
  case ::ember::DType::enum_value: {            \
    using scalar_t = type;                      \
    __VA_ARGS__();                              \
    break;                                      \
  }
#define EMBER_DTYPE_CASES_FLOAT(...) EMBER_DTYPE_CASE(f32, float, __VA_ARGS__) EMBER_DTYPE_CASE(f64, double, __VA_ARGS__)
#define EMBER_DTYPE_CASES_16BIT(...) \
  EMBER_DTYPE_CASE(f16, ::ember::Half, __VA_ARGS__) EMBER_DTYPE_CASE(bf16, ::ember::BFloat16, __VA_ARGS__)
#define EMBER_DTYPE_CASES_INDEX(...) \
  EMBER_DTYPE_CASE(i32, int32_t, __VA_ARGS__) EMBER_DTYPE_CASE(i64, int64_t, __VA_ARGS__)
#define EMBER_DTYPE_CASES_FLOATING(...) EMBER_DTYPE_CASES_FLOAT(__VA_ARGS__) EMBER_DTYPE_CASES_16BIT(__VA_ARGS__)
#define EMBER_DTYPE_CASES_ORDERED(...) \
  EMBER_DTYPE_CASES_FLOATING(__VA_ARGS__) EMBER_DTYPE_CASES_INDEX(__VA_ARGS__) EMBER_DTYPE_CASE(u8, uint8_t, __VA_ARGS__)
#define EMBER_DTYPE_CASES_ALL(...) EMBER_DTYPE_CASES_ORDERED(__VA_ARGS__) EMBER_DTYPE_CASE(boolean, bool, __VA_ARGS__)
#define EMBER_DTYPE_CASES_ADDABLE(...) EMBER_DTYPE_CASES_FLOAT(__VA_ARGS__) EMBER_DTYPE_CASES_INDEX(__VA_ARGS__)

// One switch over DTYPE with the cases CASES(BODY) and `otherwise` for every other dtype.
#define EMBER_DTYPE_SWITCH(DTYPE, CASES, otherwise, ...) \
  do {                                                   \
    switch (DTYPE) {                                     \
      CASES(__VA_ARGS__)                                 \
      default: otherwise;                                \
    }                                                    \
  } while (0)

#define EMBER_DISPATCH_FLOAT(DTYPE, NAME, ...)                                                                  \
  EMBER_DTYPE_SWITCH(DTYPE, EMBER_DTYPE_CASES_FLOAT,                                                            \
                     EMBER_THROW(NAME, ": dtype ", (DTYPE), " is not supported (expected float32 or float64)"), \
                     __VA_ARGS__)
#define EMBER_DISPATCH_FLOATING(DTYPE, NAME, ...)                                                                    \
  EMBER_DTYPE_SWITCH(DTYPE, EMBER_DTYPE_CASES_FLOATING,                                                              \
                     EMBER_THROW(NAME, ": dtype ", (DTYPE), " is not supported (expected a floating-point dtype)"), \
                     __VA_ARGS__)
#define EMBER_DISPATCH_ALL(DTYPE, NAME, ...) \
  EMBER_DTYPE_SWITCH(DTYPE, EMBER_DTYPE_CASES_ALL, EMBER_THROW(NAME, ": unknown dtype"), __VA_ARGS__)
#define EMBER_DISPATCH_ORDERED(DTYPE, NAME, ...)                                                             \
  EMBER_DTYPE_SWITCH(DTYPE, EMBER_DTYPE_CASES_ORDERED,                                                       \
                     EMBER_THROW(NAME, ": dtype ", (DTYPE), " is not supported (expected a floating-point dtype, " \
                                 "int32, int64 or uint8)"),                                                  \
                     __VA_ARGS__)
#define EMBER_DISPATCH_ADDABLE(DTYPE, NAME, ...)                                                     \
  EMBER_DTYPE_SWITCH(DTYPE, EMBER_DTYPE_CASES_ADDABLE,                                               \
                     EMBER_THROW(NAME, ": dtype ", (DTYPE), " is not supported (expected float32, " \
                                 "float64, int32 or int64)"),                                        \
                     __VA_ARGS__)
#define EMBER_DISPATCH_INDEX(DTYPE, NAME, ...)                                                        \
  EMBER_DTYPE_SWITCH(DTYPE, EMBER_DTYPE_CASES_INDEX,                                                  \
                     EMBER_THROW(NAME, ": index tensor must be int64 or int32, got ", (DTYPE)), __VA_ARGS__)

#define EMBER_DISPATCH_BYTES(DTYPE, NAME, ...)                                                        \
  do {                                                                                                \
    switch (::ember::dtype_size(DTYPE)) {                                                             \
      case 1: { using scalar_t = uint8_t; __VA_ARGS__(); break; }                                     \
      case 2: { using scalar_t = uint16_t; __VA_ARGS__(); break; }                                    \
      case 4: { using scalar_t = uint32_t; __VA_ARGS__(); break; }                                    \
      case 8: { using scalar_t = uint64_t; __VA_ARGS__(); break; }                                    \
      default: EMBER_THROW(NAME, ": unsupported element size for dtype ", (DTYPE));                   \
    }                                                                                                 \
  } while (0)
