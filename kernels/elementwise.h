#pragma once
// Elementwise math written once: __host__ __device__ functors shared by the CPU loop
// (kernels/cpu/elementwise.cpp) and the CUDA kernels (kernels/cuda/elementwise.cu), and the
// contract of the elementwise kernels both backends declare (kernels/cpu/elementwise.h,
// kernels/cuda/elementwise.h).
//
// The kernels run over strided operands (kernels/strided.h): all operands share one iteration
// shape, broadcast operands have stride 0, and outputs must not partially overlap inputs (exact
// aliasing, out == in, is allowed). Pointers are host memory for kernels::cpu, device memory of
// the current device for kernels::gpu (queued on cuda::current_stream(), asynchronous).
//   unary(op, dtype, shape, out, in, alpha)            out = op(in, alpha); f32/f64
//   unary_backward(op, dtype, shape, grad_in, grad_out, x, y, alpha)
//                                                      grad_in = op.bwd(grad_out, x, y, alpha); x or y may
//                                                      be unused by the op (pass any operand)
//   binary(op, dtype, shape, out, a, b, alpha)         out = a op b (Add/Sub: a + alpha * b, a - alpha * b)
//   pow_backward(dtype, shape, grad_a, grad_b, g, a, b, y)
//                                                      Pow's partials da(g, a, b, y), db(g, a, b, y);
//                                                      either output may be null
//   compare(op, dtype, shape, out, a, b)               out (bool) = a op b; any dtype
//   where(dtype, shape, out, cond, a, b)               out = cond ? a : b; cond bool
//   clamp(dtype, shape, out, in, has_lo, lo, has_hi, hi)
//                                                      out = clamp(in, lo, hi) for the bounds given;
//                                                      NaN stays NaN
//   copy(shape, out_dtype, out, in_dtype, in)          conversion (f16/bf16 round to nearest even;
//                                                      float to int truncates)
//   fill(dtype, shape, out, value)                     out = value converted to dtype
//   logical_not(shape, out, in) / isnan(dtype, shape, out, in)
//                                                      out (bool) = !in (in: bool) / isnan(in) (any dtype)
//
// Each unary op is a struct with
//   fwd(x, a)         -> y              (a: the op's scalar parameter, e.g. the leaky slope)
//   bwd(g, x, y, a)   -> dL/dx          given g = dL/dy, the input x and the output y
// Each binary op has fwd(a, b) and, where differentiable, da(g, a, b, y) and db(g, a, b, y).

#include <cmath>
#include <type_traits>

#include "../core/dtype.h"  // EMBER_HD
#include "../core/error.h"

namespace ember::kernels {

enum class UnaryOp {
  Neg, Exp, Log, Sqrt, Rsqrt, Abs, Relu, LeakyRelu, Sigmoid, Tanh, Gelu, GeluTanh, Silu,
  AddScalar, MulScalar, RsubScalar, PowScalar,
};

enum class BinaryOp { Add, Sub, Mul, Div, Pow, Maximum, Minimum };

enum class CompareOp { Eq, Ne, Lt, Le, Gt, Ge };

namespace ops {

template <typename T>
EMBER_HD inline T sign(T x) {
  return static_cast<T>((x > T(0)) - (x < T(0)));
}

struct Neg {
  template <typename T> EMBER_HD static T fwd(T x, T) { return -x; }
  template <typename T> EMBER_HD static T bwd(T g, T, T, T) { return -g; }
};
struct Exp {
  template <typename T> EMBER_HD static T fwd(T x, T) { return std::exp(x); }
  template <typename T> EMBER_HD static T bwd(T g, T, T y, T) { return g * y; }
};
struct Log {
  template <typename T> EMBER_HD static T fwd(T x, T) { return std::log(x); }
  template <typename T> EMBER_HD static T bwd(T g, T x, T, T) { return g / x; }
};
struct Sqrt {
  template <typename T> EMBER_HD static T fwd(T x, T) { return std::sqrt(x); }
  template <typename T> EMBER_HD static T bwd(T g, T, T y, T) { return g / (T(2) * y); }
};
struct Rsqrt {
  template <typename T> EMBER_HD static T fwd(T x, T) { return T(1) / std::sqrt(x); }
  // d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 y^3
  template <typename T> EMBER_HD static T bwd(T g, T, T y, T) { return T(-0.5) * g * y * y * y; }
};
struct Abs {
  template <typename T> EMBER_HD static T fwd(T x, T) { return std::abs(x); }
  template <typename T> EMBER_HD static T bwd(T g, T x, T, T) { return g * sign(x); }
};
struct Relu {
  // x > 0 ? x : 0, with NaN propagating (NaN > 0 is false, so test the other way round).
  template <typename T> EMBER_HD static T fwd(T x, T) { return x <= T(0) ? T(0) : x; }
  template <typename T> EMBER_HD static T bwd(T g, T, T y, T) { return y > T(0) ? g : T(0); }
};
struct LeakyRelu {
  template <typename T> EMBER_HD static T fwd(T x, T a) { return x > T(0) ? x : x * a; }
  template <typename T> EMBER_HD static T bwd(T g, T x, T, T a) { return x > T(0) ? g : g * a; }
};
struct Sigmoid {
  // Written to avoid overflow for large |x|: exp of a non-positive number only.
  template <typename T> EMBER_HD static T fwd(T x, T) {
    if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
    const T e = std::exp(x);
    return e / (T(1) + e);
  }
  template <typename T> EMBER_HD static T bwd(T g, T, T y, T) { return g * y * (T(1) - y); }
};
struct Tanh {
  template <typename T> EMBER_HD static T fwd(T x, T) { return std::tanh(x); }
  template <typename T> EMBER_HD static T bwd(T g, T, T y, T) { return g * (T(1) - y * y); }
};
struct Gelu {  // exact: x * Phi(x)
  template <typename T> EMBER_HD static T fwd(T x, T) {
    return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440)));
  }
  template <typename T> EMBER_HD static T bwd(T g, T x, T, T) {
    const T cdf = T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752440)));
    const T pdf = std::exp(T(-0.5) * x * x) * T(0.39894228040143267794);  // 1/sqrt(2 pi)
    return g * (cdf + x * pdf);
  }
};
struct GeluTanh {  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  template <typename T> EMBER_HD static T fwd(T x, T) {
    const T k = T(0.79788456080286535588);
    return T(0.5) * x * (T(1) + std::tanh(k * (x + T(0.044715) * x * x * x)));
  }
  template <typename T> EMBER_HD static T bwd(T g, T x, T, T) {
    const T k = T(0.79788456080286535588);
    const T inner = k * (x + T(0.044715) * x * x * x);
    const T t = std::tanh(inner);
    const T dinner = k * (T(1) + T(3) * T(0.044715) * x * x);
    return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * dinner);
  }
};
struct Silu {  // x * sigmoid(x)
  template <typename T> EMBER_HD static T fwd(T x, T a) { return x * Sigmoid::fwd(x, a); }
  template <typename T> EMBER_HD static T bwd(T g, T x, T, T a) {
    const T s = Sigmoid::fwd(x, a);
    return g * s * (T(1) + x * (T(1) - s));
  }
};
struct AddScalar {
  template <typename T> EMBER_HD static T fwd(T x, T a) { return x + a; }
  template <typename T> EMBER_HD static T bwd(T g, T, T, T) { return g; }
};
struct MulScalar {
  template <typename T> EMBER_HD static T fwd(T x, T a) { return x * a; }
  template <typename T> EMBER_HD static T bwd(T g, T, T, T a) { return g * a; }
};
struct RsubScalar {
  template <typename T> EMBER_HD static T fwd(T x, T a) { return a - x; }
  template <typename T> EMBER_HD static T bwd(T g, T, T, T) { return -g; }
};
struct PowScalar {
  template <typename T> EMBER_HD static T fwd(T x, T a) {
    if (a == T(2)) return x * x;
    return std::pow(x, a);
  }
  template <typename T> EMBER_HD static T bwd(T g, T x, T, T a) {
    if (a == T(0)) return T(0);
    return g * a * std::pow(x, a - T(1));
  }
};

// Binary ops. da/db return the gradient contributions for a and b.
struct Add {
  template <typename T> EMBER_HD static T fwd(T a, T b) { return a + b; }
};
struct Sub {
  template <typename T> EMBER_HD static T fwd(T a, T b) { return a - b; }
};
struct Mul {
  template <typename T> EMBER_HD static T fwd(T a, T b) { return a * b; }
};
struct Div {
  template <typename T> EMBER_HD static T fwd(T a, T b) { return a / b; }
};
struct Pow {
  template <typename T> EMBER_HD static T fwd(T a, T b) { return std::pow(a, b); }
  // d/da a^b = b a^(b-1);  d/db a^b = a^b ln a (0 where a == 0 and b >= 0, as PyTorch)
  template <typename T> EMBER_HD static T da(T g, T a, T b, T) { return b == T(0) ? T(0) : g * b * std::pow(a, b - T(1)); }
  template <typename T> EMBER_HD static T db(T g, T a, T, T y) { return a == T(0) ? T(0) : g * y * std::log(a); }
};
struct Maximum {
  template <typename T> EMBER_HD static T fwd(T a, T b) { return (a != a || a > b) ? a : (b != b ? b : (a == b ? a : b)); }
};
struct Minimum {
  template <typename T> EMBER_HD static T fwd(T a, T b) { return (a != a || a < b) ? a : (b != b ? b : (a == b ? a : b)); }
};

// Converts one value between any two element types (the rule of copy/to()): through float for
// the 16-bit types (round to nearest even), v != 0 for bool, a C++ cast otherwise (float to
// integer truncates).
template <typename To, typename From>
EMBER_HD inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return static_cast<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace ops

// Maps a UnaryOp value to its functor type and calls fn.template operator()<Functor>() (host
// code: the CPU loop and the CUDA launcher both dispatch once, outside the element loop).
template <typename Fn>
void visit_unary(UnaryOp op, Fn&& fn) {
  switch (op) {
    case UnaryOp::Neg: return fn.template operator()<ops::Neg>();
    case UnaryOp::Exp: return fn.template operator()<ops::Exp>();
    case UnaryOp::Log: return fn.template operator()<ops::Log>();
    case UnaryOp::Sqrt: return fn.template operator()<ops::Sqrt>();
    case UnaryOp::Rsqrt: return fn.template operator()<ops::Rsqrt>();
    case UnaryOp::Abs: return fn.template operator()<ops::Abs>();
    case UnaryOp::Relu: return fn.template operator()<ops::Relu>();
    case UnaryOp::LeakyRelu: return fn.template operator()<ops::LeakyRelu>();
    case UnaryOp::Sigmoid: return fn.template operator()<ops::Sigmoid>();
    case UnaryOp::Tanh: return fn.template operator()<ops::Tanh>();
    case UnaryOp::Gelu: return fn.template operator()<ops::Gelu>();
    case UnaryOp::GeluTanh: return fn.template operator()<ops::GeluTanh>();
    case UnaryOp::Silu: return fn.template operator()<ops::Silu>();
    case UnaryOp::AddScalar: return fn.template operator()<ops::AddScalar>();
    case UnaryOp::MulScalar: return fn.template operator()<ops::MulScalar>();
    case UnaryOp::RsubScalar: return fn.template operator()<ops::RsubScalar>();
    case UnaryOp::PowScalar: return fn.template operator()<ops::PowScalar>();
  }
  EMBER_THROW("unary: unknown op");
}

}  // namespace ember::kernels
