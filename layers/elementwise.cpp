// Elementwise ops with autograd. Each op: check arguments, allocate the output, switch on the
// device to the kernel, and record a backward node if an input requires grad.

#include "elementwise.h"

#include <cstdint>

#include "../core/autocast.h"
#include "../core/op_helpers.h"
#include "../kernels/cpu/elementwise.h"
#include "reduce.h"

#if EMBER_CUDA_BACKEND
#include "../kernels/cuda/elementwise.h"
#endif

namespace ember {

using kernels::BinaryOp;
using kernels::CompareOp;
using kernels::UnaryOp;

// ---- broadcasting helpers --------------------------------------------------------------------

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  // Sum the leading dims that `shape` lacks, and the dims where `shape` has 1 but grad does not.
  const int lead = grad.dim() - shape.size();
  EMBER_CHECK(lead >= 0, "sum_to: cannot reduce shape ", grad.shape(), " to ", shape);
  Dims dims;
  for (int i = 0; i < grad.dim(); ++i) {
    if (i < lead) {
      dims.push_back(i);
    } else if (shape[i - lead] == 1 && grad.shape()[i] != 1) {
      dims.push_back(i);
    }
  }
  Tensor r = dims.empty() ? grad : sum(grad, dims, true);
  return r.reshape(shape);
}

namespace {

const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
    case BinaryOp::Pow: return "pow";
    case BinaryOp::Maximum: return "maximum";
    case BinaryOp::Minimum: return "minimum";
  }
  return "binary";
}

// The forward computation of a binary op (no autograd). Returns a new dense tensor in the memory
// format of the first operand of the output's shape (Note [Memory formats] in core/memory_format.h).
Tensor binary_forward(BinaryOp op, const Tensor& a0, const Tensor& b0, double alpha) {
  const char* name = binary_name(op);
  detail::check_same_device(name, a0, b0);
  const DType dt = promote_types(a0.dtype(), b0.dtype());
  EMBER_CHECK(is_floating(dt), name, ": expected floating-point tensors, got ", describe(a0), " and ", describe(b0));
  const Shape shape = broadcast_shapes(a0.shape(), b0.shape(), name);
  const Tensor a = a0.to(dt), b = b0.to(dt);
  const MemoryFormat fmt = detail::elementwise_format(shape, {&a, &b});
  Tensor out = empty(shape, {.dtype = dt, .device = a.device()}, fmt);
  EMBER_KERNEL_CALL(out.device(), name, binary, op, dt, detail::iter_shape(shape, fmt),
                    detail::operand(out, shape, fmt), detail::operand(a, shape, fmt), detail::operand(b, shape, fmt),
                    alpha);
  return out;
}

Tensor unary_forward(UnaryOp op, const char* name, const Tensor& x, double alpha) {
  detail::check_floating(name, x);
  const MemoryFormat fmt = x.suggest_memory_format();
  Tensor out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()}, fmt);
  EMBER_KERNEL_CALL(x.device(), name, unary, op, x.dtype(), detail::iter_shape(x.shape(), fmt),
                    detail::operand(out, x.shape(), fmt), detail::operand(x, x.shape(), fmt), alpha);
  return out;
}

// grad_in = op.bwd(g, x, y, alpha); g, x, y all of x's shape.
Tensor unary_backward(UnaryOp op, const char* name, const Tensor& g0, const Tensor& x, const Tensor& y, double alpha) {
  const Tensor g = g0.to(x.dtype());
  // The gradient in the layout of the tensor the op saved.
  const MemoryFormat fmt = y.suggest_memory_format();
  Tensor gi = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()}, fmt);
  const Shape& s = x.shape();
  EMBER_KERNEL_CALL(x.device(), name, unary_backward, op, x.dtype(), detail::iter_shape(s, fmt),
                    detail::operand(gi, s, fmt), detail::operand(g, s, fmt), detail::operand(x, s, fmt),
                    detail::operand(y, s, fmt), alpha);
  return gi;
}

// Which tensors a unary op's backward reads.
enum class Saves { Input, Output, Nothing };

Saves saves_of(UnaryOp op) {
  switch (op) {
    case UnaryOp::Exp:
    case UnaryOp::Sqrt:
    case UnaryOp::Rsqrt:
    case UnaryOp::Relu:
    case UnaryOp::Sigmoid:
    case UnaryOp::Tanh: return Saves::Output;
    case UnaryOp::Neg:
    case UnaryOp::AddScalar:
    case UnaryOp::MulScalar:
    case UnaryOp::RsubScalar: return Saves::Nothing;
    default: return Saves::Input;
  }
}

// A differentiable unary op.
Tensor unary_op(UnaryOp op, const char* name, const char* node_name, const Tensor& x, double alpha = 0.0) {
  Tensor y = unary_forward(op, name, x, alpha);
  if (any_requires_grad({&x})) {
    const Saves what = saves_of(op);
    // Save only what backward reads: the input, the output, or nothing (then pass y's metadata
    // twice; the functor ignores it).
    SavedTensor sx(what == Saves::Input ? x : Tensor(), node_name);
    SavedTensor sy(what == Saves::Output ? y.detach() : Tensor(), node_name);
    record(node_name, {x}, {y}, [=](const std::vector<Tensor>& g) {
      Tensor xs = sx.defined() ? sx.get() : Tensor();
      Tensor ys = sy.defined() ? sy.get() : Tensor();
      // An op that reads neither gets g as a placeholder operand (the functor ignores it).
      if (!xs.defined()) xs = ys.defined() ? ys : g[0];
      if (!ys.defined()) ys = xs;
      return std::vector<Tensor>{unary_backward(op, node_name, g[0], xs, ys, alpha)};
    });
  }
  return y;
}

// Gradient of maximum/minimum: to a where a wins, b where b wins, half each on ties.
std::vector<Tensor> minmax_backward(const Tensor& g, const Tensor& a, const Tensor& b, bool is_max) {
  NoGradGuard ng;
  Tensor a_wins = is_max ? gt(a, b) : lt(a, b);
  Tensor tie = eq(a, b);
  Tensor zero = zeros({}, {.dtype = g.dtype(), .device = g.device()});
  Tensor half_g = mul(g, 0.5);
  Tensor ga = where(a_wins, g, where(tie, half_g, zero));
  Tensor gb = where(logical_not(a_wins), where(tie, half_g, g), zero);
  // Where a or b is NaN the result is NaN: send the gradient to the NaN operand (a first).
  return {sum_to(ga, a.shape()), sum_to(gb, b.shape())};
}

Tensor binary_op(BinaryOp op, const Tensor& a, const Tensor& b, double alpha = 1.0) {
  Tensor out = binary_forward(op, a, b, alpha);
  if (!any_requires_grad({&a, &b})) return out;

  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  const Shape sa = a.shape(), sb = b.shape();
  const DType da = a.dtype(), db = b.dtype();
  // Gradient for an operand: reduce broadcast dims, and return it in the operand's dtype.
  auto fit = [](const Tensor& g, const Shape& s, DType dt) { return sum_to(g, s).to(dt); };

  switch (op) {
    case BinaryOp::Add:
    case BinaryOp::Sub: {
      const double sign_b = op == BinaryOp::Add ? alpha : -alpha;
      record(op == BinaryOp::Add ? "AddBackward" : "SubBackward", {a, b}, {out}, [=](const std::vector<Tensor>& g) {
        return std::vector<Tensor>{need_a ? fit(g[0], sa, da) : Tensor(),
                                   need_b ? fit(sign_b == 1.0 ? g[0] : mul(g[0], sign_b), sb, db) : Tensor()};
      });
      break;
    }
    case BinaryOp::Mul: {
      SavedTensor ta(need_b ? a : Tensor(), "MulBackward"), tb(need_a ? b : Tensor(), "MulBackward");
      record("MulBackward", {a, b}, {out}, [=](const std::vector<Tensor>& g) {
        return std::vector<Tensor>{need_a ? fit(mul(g[0], tb.get()), sa, da) : Tensor(),
                                   need_b ? fit(mul(g[0], ta.get()), sb, db) : Tensor()};
      });
      break;
    }
    case BinaryOp::Div: {
      SavedTensor ta(need_b ? a : Tensor(), "DivBackward"), tb(b, "DivBackward");
      record("DivBackward", {a, b}, {out}, [=](const std::vector<Tensor>& g) {
        const Tensor& bv = tb.get();
        Tensor ga = need_a ? fit(div(g[0], bv), sa, da) : Tensor();
        // d(a/b)/db = -a / b^2
        Tensor gb = need_b ? fit(neg(div(mul(g[0], ta.get()), mul(bv, bv))), sb, db) : Tensor();
        return std::vector<Tensor>{ga, gb};
      });
      break;
    }
    case BinaryOp::Pow: {
      SavedTensor ta(a, "PowBackward"), tb(b, "PowBackward"), ty(out.detach(), "PowBackward");
      record("PowBackward", {a, b}, {out}, [=](const std::vector<Tensor>& g) {
        const Tensor& y = ty.get();
        const Shape& shape = y.shape();
        const DType dt = y.dtype();
        const Tensor av = ta.get().to(dt), bv = tb.get().to(dt), gv = g[0].to(dt);
        Tensor ga = need_a ? empty(shape, {.dtype = dt, .device = y.device()}) : Tensor();
        Tensor gb = need_b ? empty(shape, {.dtype = dt, .device = y.device()}) : Tensor();
        EMBER_KERNEL_CALL(y.device(), "pow backward", pow_backward, dt, detail::iter_shape(shape),
                          need_a ? detail::operand(ga) : kernels::Operand{},
                          need_b ? detail::operand(gb) : kernels::Operand{}, detail::operand(gv, shape),
                          detail::operand(av, shape), detail::operand(bv, shape), detail::operand(y));
        return std::vector<Tensor>{need_a ? fit(ga, sa, da) : Tensor(), need_b ? fit(gb, sb, db) : Tensor()};
      });
      break;
    }
    case BinaryOp::Maximum:
    case BinaryOp::Minimum: {
      const bool is_max = op == BinaryOp::Maximum;
      SavedTensor ta(a, "MaximumBackward"), tb(b, "MaximumBackward");
      record(is_max ? "MaximumBackward" : "MinimumBackward", {a, b}, {out}, [=](const std::vector<Tensor>& g) {
        std::vector<Tensor> r = minmax_backward(g[0], ta.get(), tb.get(), is_max);
        return std::vector<Tensor>{need_a ? r[0].to(da) : Tensor(), need_b ? r[1].to(db) : Tensor()};
      });
      break;
    }
  }
  return out;
}


}  // namespace

// ---- binary -------------------------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b, double alpha) { return binary_op(BinaryOp::Add, a, b, alpha); }
Tensor sub(const Tensor& a, const Tensor& b, double alpha) { return binary_op(BinaryOp::Sub, a, b, alpha); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Div, a, b); }
// exp, log, pow and rsqrt are on autocast's f32 list: 16-bit inputs are computed in f32 under
// autocast (Note [Autocast] in core/autocast.h).
using autocast::CastPolicy;

Tensor pow(const Tensor& a, const Tensor& b) {
  if (const auto dt = autocast::op_dtype(CastPolicy::fp32, {&a, &b}))
    return pow(autocast::cast(a, *dt), autocast::cast(b, *dt));
  return binary_op(BinaryOp::Pow, a, b);
}
Tensor maximum(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Minimum, a, b); }

// Tensor-scalar: unary kernels with the scalar as parameter (no broadcast machinery).
Tensor add(const Tensor& a, double b) { return unary_op(UnaryOp::AddScalar, "add", "AddBackward", a, b); }
Tensor sub(const Tensor& a, double b) { return unary_op(UnaryOp::AddScalar, "sub", "SubBackward", a, -b); }
Tensor mul(const Tensor& a, double b) { return unary_op(UnaryOp::MulScalar, "mul", "MulBackward", a, b); }
Tensor div(const Tensor& a, double b) { return unary_op(UnaryOp::MulScalar, "div", "DivBackward", a, 1.0 / b); }
Tensor rsub(const Tensor& a, double b) { return unary_op(UnaryOp::RsubScalar, "rsub", "RsubBackward", a, b); }
Tensor pow(const Tensor& a, double e) {
  if (const auto dt = autocast::op_dtype(CastPolicy::fp32, {&a})) return pow(autocast::cast(a, *dt), e);
  return unary_op(UnaryOp::PowScalar, "pow", "PowBackward", a, e);
}

// ---- unary ----------------------------------------------------------------------------------------

Tensor neg(const Tensor& x) { return unary_op(UnaryOp::Neg, "neg", "NegBackward", x); }
Tensor exp(const Tensor& x) {
  if (const auto dt = autocast::op_dtype(CastPolicy::fp32, {&x})) return exp(autocast::cast(x, *dt));
  return unary_op(UnaryOp::Exp, "exp", "ExpBackward", x);
}
Tensor log(const Tensor& x) {
  if (const auto dt = autocast::op_dtype(CastPolicy::fp32, {&x})) return log(autocast::cast(x, *dt));
  return unary_op(UnaryOp::Log, "log", "LogBackward", x);
}
Tensor sqrt(const Tensor& x) { return unary_op(UnaryOp::Sqrt, "sqrt", "SqrtBackward", x); }
Tensor rsqrt(const Tensor& x) {
  if (const auto dt = autocast::op_dtype(CastPolicy::fp32, {&x})) return rsqrt(autocast::cast(x, *dt));
  return unary_op(UnaryOp::Rsqrt, "rsqrt", "RsqrtBackward", x);
}
Tensor abs(const Tensor& x) { return unary_op(UnaryOp::Abs, "abs", "AbsBackward", x); }
Tensor relu(const Tensor& x) { return unary_op(UnaryOp::Relu, "relu", "ReluBackward", x); }
Tensor relu_backward(const Tensor& grad, const Tensor& out) {
  EMBER_CHECK(grad.shape() == out.shape(), "relu_backward: the gradient ", describe(grad), " and the output ",
              describe(out), " differ in shape");
  return unary_backward(UnaryOp::Relu, "ReluBackward", grad, out, out, 0.0);
}
Tensor leaky_relu(const Tensor& x, double slope) {
  return unary_op(UnaryOp::LeakyRelu, "leaky_relu", "LeakyReluBackward", x, slope);
}
Tensor sigmoid(const Tensor& x) { return unary_op(UnaryOp::Sigmoid, "sigmoid", "SigmoidBackward", x); }
Tensor tanh(const Tensor& x) { return unary_op(UnaryOp::Tanh, "tanh", "TanhBackward", x); }
Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  return approximate == GeluApproximation::Tanh ? unary_op(UnaryOp::GeluTanh, "gelu", "GeluBackward", x)
                                                : unary_op(UnaryOp::Gelu, "gelu", "GeluBackward", x);
}
Tensor silu(const Tensor& x) { return unary_op(UnaryOp::Silu, "silu", "SiluBackward", x); }

Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
  detail::check_floating("clamp", x);
  const MemoryFormat fmt = x.suggest_memory_format();
  Tensor y = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()}, fmt);
  EMBER_KERNEL_CALL(x.device(), "clamp", clamp, x.dtype(), detail::iter_shape(x.shape(), fmt),
                    detail::operand(y, x.shape(), fmt), detail::operand(x, x.shape(), fmt), lo.has_value(),
                    lo.value_or(0), hi.has_value(), hi.value_or(0));
  if (any_requires_grad({&x})) {
    SavedTensor sx(x, "ClampBackward");
    record("ClampBackward", {x}, {y}, [=](const std::vector<Tensor>& g) {
      const Tensor& xv = sx.get();
      // Gradient passes where lo <= x <= hi (PyTorch's convention at the bounds).
      Tensor pass = ones(xv.shape(), {.dtype = DType::boolean, .device = xv.device()});
      if (lo) pass = where(ge(xv, *lo), pass, zeros({}, {.dtype = DType::boolean, .device = xv.device()}));
      if (hi) pass = where(le(xv, *hi), pass, zeros({}, {.dtype = DType::boolean, .device = xv.device()}));
      return std::vector<Tensor>{where(pass, g[0], zeros({}, {.dtype = g[0].dtype(), .device = g[0].device()}))};
    });
  }
  return y;
}

// ---- comparisons and where ----------------------------------------------------------------------

namespace {
Tensor compare_op(CompareOp op, const char* name, const Tensor& a0, const Tensor& b0) {
  detail::check_same_device(name, a0, b0);
  const DType dt = promote_types(a0.dtype(), b0.dtype());
  const Shape shape = broadcast_shapes(a0.shape(), b0.shape(), name);
  const Tensor a = a0.to(dt), b = b0.to(dt);
  Tensor out = empty(shape, {.dtype = DType::boolean, .device = a.device()});
  EMBER_KERNEL_CALL(out.device(), name, compare, op, dt, detail::iter_shape(shape), detail::operand(out),
                    detail::operand(a, shape), detail::operand(b, shape));
  return out;
}
Tensor compare_scalar(CompareOp op, const char* name, const Tensor& a, double b) {
  // Compare in the tensor's dtype when the scalar is exactly representable there; else in float64.
  const bool exact_int = is_integral(a.dtype()) && b == static_cast<double>(static_cast<int64_t>(b));
  const DType dt = is_floating(a.dtype()) || exact_int ? a.dtype() : DType::f64;
  return compare_op(op, name, a, full({}, b, {.dtype = dt, .device = a.device()}));
}
}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare_op(CompareOp::Eq, "eq", a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare_op(CompareOp::Ne, "ne", a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare_op(CompareOp::Lt, "lt", a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare_op(CompareOp::Le, "le", a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare_op(CompareOp::Gt, "gt", a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare_op(CompareOp::Ge, "ge", a, b); }
Tensor eq(const Tensor& a, double b) { return compare_scalar(CompareOp::Eq, "eq", a, b); }
Tensor ne(const Tensor& a, double b) { return compare_scalar(CompareOp::Ne, "ne", a, b); }
Tensor lt(const Tensor& a, double b) { return compare_scalar(CompareOp::Lt, "lt", a, b); }
Tensor le(const Tensor& a, double b) { return compare_scalar(CompareOp::Le, "le", a, b); }
Tensor gt(const Tensor& a, double b) { return compare_scalar(CompareOp::Gt, "gt", a, b); }
Tensor ge(const Tensor& a, double b) { return compare_scalar(CompareOp::Ge, "ge", a, b); }

Tensor logical_not(const Tensor& x) {
  EMBER_CHECK(x.dtype() == DType::boolean, "logical_not: expected a bool tensor, got ", describe(x));
  Tensor out = empty(x.shape(), {.dtype = DType::boolean, .device = x.device()});
  EMBER_KERNEL_CALL(x.device(), "logical_not", logical_not, detail::iter_shape(x.shape()), detail::operand(out),
                    detail::operand(x));
  return out;
}

Tensor isnan(const Tensor& x) {
  Tensor out = empty(x.shape(), {.dtype = DType::boolean, .device = x.device()});
  EMBER_KERNEL_CALL(x.device(), "isnan", isnan, x.dtype(), detail::iter_shape(x.shape()), detail::operand(out),
                    detail::operand(x));
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a0, const Tensor& b0) {
  EMBER_CHECK(cond.dtype() == DType::boolean, "where: condition must be a bool tensor, got ", describe(cond));
  detail::check_same_device("where", cond, a0);
  detail::check_same_device("where", a0, b0);
  const DType dt = promote_types(a0.dtype(), b0.dtype());
  const Shape shape = broadcast_shapes(cond.shape(), broadcast_shapes(a0.shape(), b0.shape(), "where"), "where");
  const Tensor a = a0.to(dt), b = b0.to(dt);
  Tensor out = empty(shape, {.dtype = dt, .device = a.device()});
  EMBER_KERNEL_CALL(out.device(), "where", where, dt, detail::iter_shape(shape), detail::operand(out),
                    detail::operand(cond, shape), detail::operand(a, shape), detail::operand(b, shape));
  if (any_requires_grad({&a0, &b0})) {
    const bool need_a = a0.requires_grad(), need_b = b0.requires_grad();
    const Shape sa = a0.shape(), sb = b0.shape();
    const DType da = a0.dtype(), db = b0.dtype();
    SavedTensor sc(cond, "WhereBackward");
    record("WhereBackward", {a0, b0}, {out}, [=](const std::vector<Tensor>& g) {
      const Tensor& c = sc.get();
      Tensor zero = zeros({}, {.dtype = g[0].dtype(), .device = g[0].device()});
      return std::vector<Tensor>{need_a ? sum_to(where(c, g[0], zero), sa).to(da) : Tensor(),
                                 need_b ? sum_to(where(c, zero, g[0]), sb).to(db) : Tensor()};
    });
  }
  return out;
}

}  // namespace ember
