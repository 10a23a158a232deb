// CPU elementwise kernels: the per-op functors from kernels/elementwise.h run through
// cpu_foreach (kernels/cpu/loops.h). Each element is loaded, widened to A = acc_t<T> (float for
// f16/bf16; T itself for f32/f64), computed on in A and rounded once when stored (Note
// [Accumulation types] in core/dtype.h). Contiguous bf16 and f32 ReLU (forward and backward) and
// contiguous f32 <-> bf16 copies run the AVX-512 loops of bf16_convert.h instead, which compute the
// same bits 16 elements at a time (Note [Vectorized bf16 conversion on the CPU]).

#include "elementwise.h"

#include <cmath>

#include "../../core/cpu/parallel.h"
#include "../../core/error.h"
#include "bf16/bf16_convert.h"
#include "loops.h"

namespace ember::kernels::cpu {

namespace {

// The element count when every operand walks the whole iteration contiguously (the coalesced shape
// is one dim of stride 1 in each), else -1.
template <int N>
int64_t contiguous_numel(const IterShape& shape, const std::array<Operand, N>& ops) {
  std::array<const int64_t*, N> st;
  for (int k = 0; k < N; ++k) st[k] = ops[k].strides;
  const Coalesced<N> c = coalesce<N>(shape, st);
  if (c.ndim != 1) return -1;
  for (int k = 0; k < N; ++k)
    if (c.strides[k][0] != 1) return -1;
  return c.sizes[0];
}

// f(lo, hi) on [0, n) split across threads as cpu_foreach splits it.
template <typename F>
void contiguous_chunks(int64_t n, const F& f) {
  parallel_for(0, n, kElementwiseGrain, [&](int64_t lo, int64_t hi) { f(lo, hi); });
}

// ReLU over contiguous operands of f32, bf16 or f16: the vectorized loops of bf16_convert.h, split
// across threads; false (nothing done) for any other case.
bool relu_contiguous(DType dtype, const IterShape& shape, Operand out, Operand in) {
  if (shape.numel() == 0 || !(dtype == DType::f32 || is_low_precision(dtype))) return false;
  const int64_t n = contiguous_numel<2>(shape, {out, in});
  if (n < 0) return false;
  auto run = [&]<typename T>(void (*loop)(const T*, T*, int64_t)) {
    const auto* x = static_cast<const T*>(in.data);
    auto* y = static_cast<T*>(out.data);
    contiguous_chunks(n, [&](int64_t lo, int64_t hi) { loop(x + lo, y + lo, hi - lo); });
  };
  if (dtype == DType::bf16) run(relu_bf16);
  else if (dtype == DType::f16) run(relu_f16);
  else run(relu_f32);
  return true;
}

// Its gradient from y (gi = y > 0 ? g : 0), the same cases.
bool relu_backward_contiguous(DType dtype, const IterShape& shape, Operand grad_in, Operand grad_out, Operand y) {
  if (shape.numel() == 0 || y.data == nullptr || !(dtype == DType::f32 || is_low_precision(dtype))) return false;
  const int64_t n = contiguous_numel<3>(shape, {grad_in, grad_out, y});
  if (n < 0) return false;
  auto run = [&]<typename T>(void (*loop)(const T*, const T*, T*, int64_t)) {
    const auto* g = static_cast<const T*>(grad_out.data);
    const auto* yv = static_cast<const T*>(y.data);
    auto* gi = static_cast<T*>(grad_in.data);
    contiguous_chunks(n, [&](int64_t lo, int64_t hi) { loop(g + lo, yv + lo, gi + lo, hi - lo); });
  };
  if (dtype == DType::bf16) run(relu_backward_bf16);
  else if (dtype == DType::f16) run(relu_backward_f16);
  else run(relu_backward_f32);
  return true;
}

}  // namespace

void unary(UnaryOp op, DType dtype, const IterShape& shape, Operand out, Operand in, double alpha) {
  if (op == UnaryOp::Relu && relu_contiguous(dtype, shape, out, in)) return;
  EMBER_DISPATCH_FLOATING(dtype, "unary", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    const A a = static_cast<A>(alpha);
    visit_unary(op, [&]<typename Op>() {
      cpu_foreach<T, T>(shape, {out, in}, [a](T& y, T x) { y = static_cast<T>(Op::fwd(static_cast<A>(x), a)); });
    });
  });
}

void unary_backward(UnaryOp op, DType dtype, const IterShape& shape, Operand grad_in, Operand grad_out, Operand x,
                    Operand y, double alpha) {
  if (op == UnaryOp::Relu && relu_backward_contiguous(dtype, shape, grad_in, grad_out, y)) return;
  EMBER_DISPATCH_FLOATING(dtype, "unary_backward", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    const A a = static_cast<A>(alpha);
    visit_unary(op, [&]<typename Op>() {
      cpu_foreach<T, T, T, T>(shape, {grad_in, grad_out, x, y}, [a](T& gi, T g, T xv, T yv) {
        gi = static_cast<T>(Op::bwd(static_cast<A>(g), static_cast<A>(xv), static_cast<A>(yv), a));
      });
    });
  });
}

void binary(BinaryOp op, DType dtype, const IterShape& shape, Operand out, Operand a, Operand b, double alpha) {
  EMBER_DISPATCH_FLOATING(dtype, "binary", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    const A al = static_cast<A>(alpha);
    // f(x, y) computes in A; the loop widens the loads and rounds the store.
    auto run = [&](auto f) {
      cpu_foreach<T, T, T>(shape, {out, a, b},
                           [f](T& o, T x, T y) { o = static_cast<T>(f(static_cast<A>(x), static_cast<A>(y))); });
    };
    switch (op) {
      case BinaryOp::Add:
        if (alpha == 1.0) run([](A x, A y) { return x + y; });
        else run([al](A x, A y) { return x + al * y; });
        break;
      case BinaryOp::Sub:
        if (alpha == 1.0) run([](A x, A y) { return x - y; });
        else run([al](A x, A y) { return x - al * y; });
        break;
      case BinaryOp::Mul: run([](A x, A y) { return x * y; }); break;
      case BinaryOp::Div: run([](A x, A y) { return x / y; }); break;
      case BinaryOp::Pow: run([](A x, A y) { return ops::Pow::fwd(x, y); }); break;
      case BinaryOp::Maximum: run([](A x, A y) { return ops::Maximum::fwd(x, y); }); break;
      case BinaryOp::Minimum: run([](A x, A y) { return ops::Minimum::fwd(x, y); }); break;
    }
  });
}

void pow_backward(DType dtype, const IterShape& shape, Operand grad_a, Operand grad_b, Operand g, Operand a, Operand b,
                  Operand y) {
  EMBER_DISPATCH_FLOATING(dtype, "pow_backward", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    if (grad_a.data != nullptr)
      cpu_foreach<T, T, T, T, T>(shape, {grad_a, g, a, b, y}, [](T& o, T gv, T av, T bv, T yv) {
        o = static_cast<T>(
            ops::Pow::da(static_cast<A>(gv), static_cast<A>(av), static_cast<A>(bv), static_cast<A>(yv)));
      });
    if (grad_b.data != nullptr)
      cpu_foreach<T, T, T, T, T>(shape, {grad_b, g, a, b, y}, [](T& o, T gv, T av, T bv, T yv) {
        o = static_cast<T>(
            ops::Pow::db(static_cast<A>(gv), static_cast<A>(av), static_cast<A>(bv), static_cast<A>(yv)));
      });
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
  EMBER_DISPATCH_FLOATING(dtype, "clamp", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    // The bounds rounded to T first, so a clamped element equals the bound in T.
    const A l = has_lo ? static_cast<A>(static_cast<T>(lo)) : -INFINITY;
    const A h = has_hi ? static_cast<A>(static_cast<T>(hi)) : INFINITY;
    cpu_foreach<T, T>(shape, {out, in}, [l, h](T& o, T xt) {
      const A x = static_cast<A>(xt);
      o = x != x ? xt : static_cast<T>(x < l ? l : (x > h ? h : x));
    });
  });
}

using ops::convert;

void copy(const IterShape& shape, DType out_dtype, Operand out, DType in_dtype, Operand in) {
  // f32 <-> bf16 and f32 <-> f16 over contiguous operands: the vectorized conversions (bf16_convert.h).
  const bool narrowing = in_dtype == DType::f32 && is_low_precision(out_dtype);
  const bool widening = out_dtype == DType::f32 && is_low_precision(in_dtype);
  if ((narrowing || widening) && shape.numel() > 0) {
    if (const int64_t n = contiguous_numel<2>(shape, {out, in}); n >= 0) {
      const DType half_type = narrowing ? out_dtype : in_dtype;
      contiguous_chunks(n, [&](int64_t lo, int64_t hi) {
        const int64_t m = hi - lo;
        if (narrowing) {
          const float* src = static_cast<const float*>(in.data) + lo;
          if (half_type == DType::bf16) f32_to_bf16(src, static_cast<BFloat16*>(out.data) + lo, m);
          else f32_to_f16(src, static_cast<Half*>(out.data) + lo, m);
        } else {
          float* dst = static_cast<float*>(out.data) + lo;
          if (half_type == DType::bf16) bf16_to_f32(static_cast<const BFloat16*>(in.data) + lo, dst, m);
          else f16_to_f32(static_cast<const Half*>(in.data) + lo, dst, m);
        }
      });
      return;
    }
  }
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
