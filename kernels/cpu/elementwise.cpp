// CPU elementwise kernels: the per-op functors from kernels/elementwise.h run through
// cpu_foreach (kernels/cpu/loops.h).

#include "elementwise.h"

#include <cmath>

#include "../../core/error.h"
#include "loops.h"

namespace ember::kernels::cpu {

void unary(UnaryOp op, DType dtype, const IterShape& shape, Operand out, Operand in, double alpha) {
  EMBER_DISPATCH_FLOAT(dtype, "unary", [&] {
    const scalar_t a = static_cast<scalar_t>(alpha);
    visit_unary(op, [&]<typename Op>() {
      cpu_foreach<scalar_t, scalar_t>(shape, {out, in}, [a](scalar_t& y, scalar_t x) { y = Op::fwd(x, a); });
    });
  });
}

void unary_backward(UnaryOp op, DType dtype, const IterShape& shape, Operand grad_in, Operand grad_out, Operand x,
                    Operand y, double alpha) {
  EMBER_DISPATCH_FLOAT(dtype, "unary_backward", [&] {
    const scalar_t a = static_cast<scalar_t>(alpha);
    visit_unary(op, [&]<typename Op>() {
      cpu_foreach<scalar_t, scalar_t, scalar_t, scalar_t>(
          shape, {grad_in, grad_out, x, y},
          [a](scalar_t& gi, scalar_t g, scalar_t xv, scalar_t yv) { gi = Op::bwd(g, xv, yv, a); });
    });
  });
}

void binary(BinaryOp op, DType dtype, const IterShape& shape, Operand out, Operand a, Operand b, double alpha) {
  EMBER_DISPATCH_FLOAT(dtype, "binary", [&] {
    using T = scalar_t;
    const T al = static_cast<T>(alpha);
    auto run = [&](auto f) { cpu_foreach<T, T, T>(shape, {out, a, b}, f); };
    switch (op) {
      case BinaryOp::Add:
        if (alpha == 1.0) run([](T& o, T x, T y) { o = x + y; });
        else run([al](T& o, T x, T y) { o = x + al * y; });
        break;
      case BinaryOp::Sub:
        if (alpha == 1.0) run([](T& o, T x, T y) { o = x - y; });
        else run([al](T& o, T x, T y) { o = x - al * y; });
        break;
      case BinaryOp::Mul: run([](T& o, T x, T y) { o = x * y; }); break;
      case BinaryOp::Div: run([](T& o, T x, T y) { o = x / y; }); break;
      case BinaryOp::Pow: run([](T& o, T x, T y) { o = ops::Pow::fwd(x, y); }); break;
      case BinaryOp::Maximum: run([](T& o, T x, T y) { o = ops::Maximum::fwd(x, y); }); break;
      case BinaryOp::Minimum: run([](T& o, T x, T y) { o = ops::Minimum::fwd(x, y); }); break;
    }
  });
}

void pow_backward(DType dtype, const IterShape& shape, Operand grad_a, Operand grad_b, Operand g, Operand a, Operand b,
                  Operand y) {
  EMBER_DISPATCH_FLOAT(dtype, "pow_backward", [&] {
    using T = scalar_t;
    if (grad_a.data != nullptr)
      cpu_foreach<T, T, T, T, T>(shape, {grad_a, g, a, b, y},
                                 [](T& o, T gv, T av, T bv, T yv) { o = ops::Pow::da(gv, av, bv, yv); });
    if (grad_b.data != nullptr)
      cpu_foreach<T, T, T, T, T>(shape, {grad_b, g, a, b, y},
                                 [](T& o, T gv, T av, T bv, T yv) { o = ops::Pow::db(gv, av, bv, yv); });
  });
}

void compare(CompareOp op, DType dtype, const IterShape& shape, Operand out, Operand a, Operand b) {
  EMBER_DISPATCH_ALL(dtype, "compare", [&] {
    using T = scalar_t;
    auto run = [&](auto f) { cpu_foreach<bool, T, T>(shape, {out, a, b}, f); };
    // Compare in float for the 16-bit types (they have no operators of their own).
    using C = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;
    switch (op) {
      case CompareOp::Eq: run([](bool& o, T x, T y) { o = C(x) == C(y); }); break;
      case CompareOp::Ne: run([](bool& o, T x, T y) { o = C(x) != C(y); }); break;
      case CompareOp::Lt: run([](bool& o, T x, T y) { o = C(x) < C(y); }); break;
      case CompareOp::Le: run([](bool& o, T x, T y) { o = C(x) <= C(y); }); break;
      case CompareOp::Gt: run([](bool& o, T x, T y) { o = C(x) > C(y); }); break;
      case CompareOp::Ge: run([](bool& o, T x, T y) { o = C(x) >= C(y); }); break;
    }
  });
}

void where(DType dtype, const IterShape& shape, Operand out, Operand cond, Operand a, Operand b) {
  EMBER_DISPATCH_ALL(dtype, "where", [&] {
    using T = scalar_t;
    cpu_foreach<T, bool, T, T>(shape, {out, cond, a, b}, [](T& o, bool c, T x, T y) { o = c ? x : y; });
  });
}

void clamp(DType dtype, const IterShape& shape, Operand out, Operand in, bool has_lo, double lo, bool has_hi,
           double hi) {
  EMBER_DISPATCH_FLOAT(dtype, "clamp", [&] {
    using T = scalar_t;
    const T l = has_lo ? static_cast<T>(lo) : -INFINITY, h = has_hi ? static_cast<T>(hi) : INFINITY;
    cpu_foreach<T, T>(shape, {out, in}, [l, h](T& o, T x) { o = x != x ? x : (x < l ? l : (x > h ? h : x)); });
  });
}

using ops::convert;

void copy(const IterShape& shape, DType out_dtype, Operand out, DType in_dtype, Operand in) {
  EMBER_DISPATCH_ALL(out_dtype, "copy", [&] {
    using To = scalar_t;
    EMBER_DISPATCH_ALL(in_dtype, "copy", [&] {
      using From = scalar_t;
      cpu_foreach<To, From>(shape, {out, in}, [](To& o, From v) { o = convert<To>(v); });
    });
  });
}

void fill(DType dtype, const IterShape& shape, Operand out, double value) {
  EMBER_DISPATCH_ALL(dtype, "fill", [&] {
    using T = scalar_t;
    const T v = convert<T>(value);
    cpu_foreach<T>(shape, {out}, [v](T& o) { o = v; });
  });
}

void logical_not(const IterShape& shape, Operand out, Operand in) {
  cpu_foreach<bool, bool>(shape, {out, in}, [](bool& o, bool v) { o = !v; });
}

void isnan(DType dtype, const IterShape& shape, Operand out, Operand in) {
  EMBER_DISPATCH_ALL(dtype, "isnan", [&] {
    using T = scalar_t;
    cpu_foreach<bool, T>(shape, {out, in}, [](bool& o, T v) {
      if constexpr (std::is_integral_v<T>) o = false;
      else o = std::isnan(static_cast<float>(v));
    });
  });
}

}  // namespace ember::kernels::cpu
