// kernels/cuda/elementwise vs the kernels/cpu reference on the same seeded inputs: every entry
// point, f32 and f64, odd sizes, broadcast and strided operands, unaligned views (the
// non-vectorized contiguous path), NaN/Inf, empty shapes. bool data travels as uint8_t buffers.

#include <ember/kernels/cpu/elementwise.h>
#include <ember/kernels/cuda/elementwise.h>

#include <cmath>
#include <limits>

#include "kernel_check.h"

using namespace ember;
using namespace ember::kernels;
using namespace ember::testing;

namespace {

const int64_t kSizes[] = {0, 1, 31, 33, 1000, 4099};

// Inputs in the op's domain, with NaN, +-inf and 0 mixed in (when n is large enough).
template <typename T>
std::vector<T> unary_input(UnaryOp op, size_t n, uint64_t seed) {
  const bool positive = op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Rsqrt || op == UnaryOp::PowScalar;
  std::vector<T> v = random_values<T>(n, seed, positive ? 0.05 : -4, 4);
  if (n > 40) {
    v[3] = std::numeric_limits<T>::quiet_NaN();
    v[17] = std::numeric_limits<T>::infinity();
    v[29] = -std::numeric_limits<T>::infinity();
    v[37] = T(0);
  }
  return v;
}

const UnaryOp kUnaryOps[] = {UnaryOp::Neg,     UnaryOp::Exp,       UnaryOp::Log,        UnaryOp::Sqrt,
                             UnaryOp::Rsqrt,   UnaryOp::Abs,       UnaryOp::Relu,       UnaryOp::LeakyRelu,
                             UnaryOp::Sigmoid, UnaryOp::Tanh,      UnaryOp::Gelu,       UnaryOp::GeluTanh,
                             UnaryOp::Silu,    UnaryOp::AddScalar, UnaryOp::MulScalar,  UnaryOp::RsubScalar,
                             UnaryOp::PowScalar};

template <typename T>
void check_unary(UnaryOp op, int64_t n, double alpha, int64_t misalign) {
  const std::vector<T> x = unary_input<T>(op, static_cast<size_t>(n + misalign), 100 + static_cast<int>(op));
  const IterShape s = iter_shape({n});
  std::vector<T> want(static_cast<size_t>(n + misalign));
  cpu::unary(op, dtype_of<T>::value, s, contiguous(want.data() + misalign, s),
             contiguous(const_cast<T*>(x.data()) + misalign, s), alpha);
  DeviceBuffer<T> dx(x), dy(static_cast<size_t>(n + misalign));
  gpu::unary(op, dtype_of<T>::value, s, contiguous(dy.data() + misalign, s), contiguous(dx.data() + misalign, s),
              alpha);
  dy.check_guards();
  std::vector<T> got = dy.download();
  got.erase(got.begin(), got.begin() + misalign);
  want.erase(want.begin(), want.begin() + misalign);
  const Tol t = same_math<T>();
  require_close(got, want, t.atol, t.rtol, "unary");
}

}  // namespace

TEMPLATE_TEST_CASE("cuda unary matches the CPU", "[cuda][elementwise]", float, double) {
  for (const UnaryOp op : kUnaryOps) {
    const double alpha = op == UnaryOp::PowScalar ? 2.0 : (op == UnaryOp::LeakyRelu ? 0.01 : 0.75);
    for (const int64_t n : kSizes) {
      INFO("op " << static_cast<int>(op) << " n " << n);
      check_unary<TestType>(op, n, alpha, 0);
    }
    INFO("op " << static_cast<int>(op) << " misaligned");
    check_unary<TestType>(op, 1003, op == UnaryOp::PowScalar ? 0.5 : alpha, 1);  // unaligned: scalar path
  }
}

TEMPLATE_TEST_CASE("cuda unary on a transposed and a broadcast input", "[cuda][elementwise]", float, double) {
  using T = TestType;
  const IterShape s = iter_shape({37, 45});
  const std::vector<T> x = random_values<T>(37 * 45, 7);
  // in is the transpose of a contiguous (45, 37) matrix; a second case broadcasts a row.
  for (const Operand in_op : {strided(nullptr, {1, 37}), strided(nullptr, {0, 1})}) {
    std::vector<T> want(37 * 45);
    cpu::unary(UnaryOp::Tanh, dtype_of<T>::value, s, contiguous(want.data(), s),
               with_data(in_op, const_cast<T*>(x.data())), 0);
    DeviceBuffer<T> dx(x), dy(37 * 45);
    gpu::unary(UnaryOp::Tanh, dtype_of<T>::value, s, contiguous(dy.data(), s), with_data(in_op, dx.data()), 0);
    dy.check_guards();
    const Tol t = same_math<T>();
    require_close(dy.download(), want, t.atol, t.rtol, "tanh strided");
  }
}

TEMPLATE_TEST_CASE("cuda unary_backward matches the CPU", "[cuda][elementwise]", float, double) {
  using T = TestType;
  for (const UnaryOp op : kUnaryOps) {
    for (const int64_t n : {int64_t{0}, int64_t{33}, int64_t{1000}}) {
      INFO("op " << static_cast<int>(op) << " n " << n);
      const double alpha = op == UnaryOp::PowScalar ? 3.0 : 0.2;
      const IterShape s = iter_shape({n});
      const auto x = unary_input<T>(op, static_cast<size_t>(n), 5);
      const auto g = random_values<T>(static_cast<size_t>(n), 6);
      std::vector<T> y(static_cast<size_t>(n)), want(static_cast<size_t>(n));
      cpu::unary(op, dtype_of<T>::value, s, contiguous(y.data(), s), contiguous(const_cast<T*>(x.data()), s), alpha);
      cpu::unary_backward(op, dtype_of<T>::value, s, contiguous(want.data(), s),
                          contiguous(const_cast<T*>(g.data()), s), contiguous(const_cast<T*>(x.data()), s),
                          contiguous(y.data(), s), alpha);
      DeviceBuffer<T> dx(x), dg(g), dyv(y), dgi(static_cast<size_t>(n));
      gpu::unary_backward(op, dtype_of<T>::value, s, contiguous(dgi.data(), s), contiguous(dg.data(), s),
                           contiguous(dx.data(), s), contiguous(dyv.data(), s), alpha);
      dgi.check_guards();
      const Tol t = same_math<T>();
      require_close(dgi.download(), want, t.atol, t.rtol, "unary_backward");
    }
  }
}

namespace {

// a: (4, 1, 33) broadcast along dim 1, b: (1, 5, 33) broadcast along dim 0, out (4, 5, 33).
struct BroadcastCase {
  IterShape s = iter_shape({4, 5, 33});
  Operand a = strided(nullptr, {33, 0, 1});
  Operand b = strided(nullptr, {0, 33, 1});
  int64_t na = 4 * 33, nb = 5 * 33, n = 4 * 5 * 33;
};

}  // namespace

TEMPLATE_TEST_CASE("cuda binary matches the CPU, contiguous and broadcast", "[cuda][elementwise]", float, double) {
  using T = TestType;
  const BinaryOp ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div,
                          BinaryOp::Pow, BinaryOp::Maximum, BinaryOp::Minimum};
  for (const BinaryOp op : ops) {
    for (const double alpha : {1.0, -0.5}) {
      INFO("op " << static_cast<int>(op) << " alpha " << alpha);
      const double lo = op == BinaryOp::Pow ? 0.1 : -3;
      // Contiguous, with NaN and equal values (Maximum/Minimum ties and NaN rules).
      for (const int64_t n : kSizes) {
        auto a = random_values<T>(static_cast<size_t>(n), 11, lo, 3), b = random_values<T>(static_cast<size_t>(n), 12, lo, 3);
        if (n > 40) {
          a[5] = std::numeric_limits<T>::quiet_NaN();
          b[6] = std::numeric_limits<T>::quiet_NaN();
          b[7] = a[7];
          a[8] = T(0);
          b[8] = T(-0.0);
          b[9] = std::numeric_limits<T>::infinity();
        }
        const IterShape s = iter_shape({n});
        std::vector<T> want(static_cast<size_t>(n));
        cpu::binary(op, dtype_of<T>::value, s, contiguous(want.data(), s), contiguous(a.data(), s),
                    contiguous(b.data(), s), alpha);
        DeviceBuffer<T> da(a), db(b), dout(static_cast<size_t>(n));
        gpu::binary(op, dtype_of<T>::value, s, contiguous(dout.data(), s), contiguous(da.data(), s),
                     contiguous(db.data(), s), alpha);
        dout.check_guards();
        const Tol t = same_math<T>();
        require_close(dout.download(), want, t.atol, t.rtol, "binary");
      }
      // Broadcast.
      const BroadcastCase bc;
      auto a = random_values<T>(static_cast<size_t>(bc.na), 13, lo, 3), b = random_values<T>(static_cast<size_t>(bc.nb), 14, lo, 3);
      std::vector<T> want(static_cast<size_t>(bc.n));
      cpu::binary(op, dtype_of<T>::value, bc.s, contiguous(want.data(), bc.s), with_data(bc.a, a.data()),
                  with_data(bc.b, b.data()), alpha);
      DeviceBuffer<T> da(a), db(b), dout(static_cast<size_t>(bc.n));
      gpu::binary(op, dtype_of<T>::value, bc.s, contiguous(dout.data(), bc.s), with_data(bc.a, da.data()),
                   with_data(bc.b, db.data()), alpha);
      dout.check_guards();
      const Tol t = same_math<T>();
      require_close(dout.download(), want, t.atol, t.rtol, "binary broadcast");
    }
  }
}

TEMPLATE_TEST_CASE("cuda binary in place (out aliases a)", "[cuda][elementwise]", float, double) {
  using T = TestType;
  const int64_t n = 1001;
  const IterShape s = iter_shape({n});
  auto a = random_values<T>(n, 21), b = random_values<T>(n, 22);
  DeviceBuffer<T> da(a), db(b);
  cpu::binary(BinaryOp::Mul, dtype_of<T>::value, s, contiguous(a.data(), s), contiguous(a.data(), s),
              contiguous(b.data(), s), 1.0);
  gpu::binary(BinaryOp::Mul, dtype_of<T>::value, s, contiguous(da.data(), s), contiguous(da.data(), s),
               contiguous(db.data(), s), 1.0);
  da.check_guards();
  require_close(da.download(), a, 0, 0, "in-place mul");  // one rounding each: exact everywhere
}

TEMPLATE_TEST_CASE("cuda pow_backward matches the CPU", "[cuda][elementwise]", float, double) {
  using T = TestType;
  const BroadcastCase bc;
  auto a = random_values<T>(static_cast<size_t>(bc.na), 31, 0.0, 2), b = random_values<T>(static_cast<size_t>(bc.nb), 32, -2, 2);
  a[0] = T(0);
  b[1] = T(0);
  auto g = random_values<T>(static_cast<size_t>(bc.n), 33);
  std::vector<T> y(static_cast<size_t>(bc.n)), want_a(static_cast<size_t>(bc.n)), want_b(static_cast<size_t>(bc.n));
  const Operand oa = with_data(bc.a, a.data()), ob = with_data(bc.b, b.data());
  cpu::binary(BinaryOp::Pow, dtype_of<T>::value, bc.s, contiguous(y.data(), bc.s), oa, ob, 1.0);
  cpu::pow_backward(dtype_of<T>::value, bc.s, contiguous(want_a.data(), bc.s), contiguous(want_b.data(), bc.s),
                    contiguous(g.data(), bc.s), oa, ob, contiguous(y.data(), bc.s));
  DeviceBuffer<T> da(a), db(b), dg(g), dy(y), dga(static_cast<size_t>(bc.n)), dgb(static_cast<size_t>(bc.n));
  gpu::pow_backward(dtype_of<T>::value, bc.s, contiguous(dga.data(), bc.s), contiguous(dgb.data(), bc.s),
                     contiguous(dg.data(), bc.s), with_data(bc.a, da.data()), with_data(bc.b, db.data()),
                     contiguous(dy.data(), bc.s));
  dga.check_guards();
  dgb.check_guards();
  const Tol t = same_math<T>();
  require_close(dga.download(), want_a, t.atol, t.rtol, "pow grad a");
  require_close(dgb.download(), want_b, t.atol, t.rtol, "pow grad b");
  // Only grad_b requested: grad_a's buffer must stay untouched.
  DeviceBuffer<T> untouched(static_cast<size_t>(bc.n));
  const auto before = untouched.download();
  gpu::pow_backward(dtype_of<T>::value, bc.s, Operand{}, contiguous(dgb.data(), bc.s), contiguous(dg.data(), bc.s),
                     with_data(bc.a, da.data()), with_data(bc.b, db.data()), contiguous(dy.data(), bc.s));
  require_same_bits(untouched.download(), before, "untouched");
}

namespace {

template <typename T>
void check_compare_where(uint64_t seed) {
  const DType dt = dtype_of<T>::value;
  const BroadcastCase bc;
  auto a = random_values<T>(static_cast<size_t>(bc.na), seed, -3, 3), b = random_values<T>(static_cast<size_t>(bc.nb), seed + 1, -3, 3);
  for (size_t i = 0; i < b.size(); i += 7) b[i] = a[i % a.size()];  // some equal pairs
  if constexpr (std::is_floating_point_v<T>) a[2] = std::numeric_limits<T>::quiet_NaN();
  const Operand oa = with_data(bc.a, a.data()), ob = with_data(bc.b, b.data());
  DeviceBuffer<T> da(a), db(b);
  for (const CompareOp op : {CompareOp::Eq, CompareOp::Ne, CompareOp::Lt, CompareOp::Le, CompareOp::Gt, CompareOp::Ge}) {
    INFO("dtype " << dt << " compare " << static_cast<int>(op));
    std::vector<uint8_t> want(static_cast<size_t>(bc.n));
    cpu::compare(op, dt, bc.s, contiguous(want.data(), bc.s), oa, ob);
    DeviceBuffer<uint8_t> dout(static_cast<size_t>(bc.n));
    gpu::compare(op, dt, bc.s, contiguous(dout.data(), bc.s), with_data(bc.a, da.data()), with_data(bc.b, db.data()));
    dout.check_guards();
    require_same_bits(dout.download(), want, "compare");
  }
  // where(cond, a, b) with cond = a < b, broadcast like a.
  std::vector<uint8_t> cond(static_cast<size_t>(bc.na));
  for (size_t i = 0; i < cond.size(); ++i) cond[i] = (i * 7919) % 3 == 0;
  std::vector<T> want(static_cast<size_t>(bc.n));
  cpu::where(dt, bc.s, contiguous(want.data(), bc.s), with_data(bc.a, cond.data()), oa, ob);
  DeviceBuffer<uint8_t> dc(cond);
  DeviceBuffer<T> dout(static_cast<size_t>(bc.n));
  gpu::where(dt, bc.s, contiguous(dout.data(), bc.s), with_data(bc.a, dc.data()), with_data(bc.a, da.data()),
              with_data(bc.b, db.data()));
  dout.check_guards();
  require_same_bits(dout.download(), want, "where");
}

}  // namespace

TEST_CASE("cuda compare and where match the CPU for every dtype", "[cuda][elementwise]") {
  check_compare_where<float>(40);
  check_compare_where<double>(41);
  check_compare_where<Half>(42);
  check_compare_where<BFloat16>(43);
  check_compare_where<int32_t>(44);
  check_compare_where<int64_t>(45);
  check_compare_where<uint8_t>(46);
}

TEMPLATE_TEST_CASE("cuda clamp matches the CPU (NaN stays NaN)", "[cuda][elementwise]", float, double) {
  using T = TestType;
  const int64_t n = 1037;
  const IterShape s = iter_shape({n});
  auto x = random_values<T>(n, 51, -5, 5);
  x[10] = std::numeric_limits<T>::quiet_NaN();
  x[11] = std::numeric_limits<T>::infinity();
  DeviceBuffer<T> dx(x);
  for (const auto& [has_lo, has_hi] : {std::pair{true, true}, std::pair{true, false}, std::pair{false, true}}) {
    std::vector<T> want(n);
    cpu::clamp(dtype_of<T>::value, s, contiguous(want.data(), s), contiguous(x.data(), s), has_lo, -1.5, has_hi, 2.25);
    DeviceBuffer<T> dout(n);
    gpu::clamp(dtype_of<T>::value, s, contiguous(dout.data(), s), contiguous(dx.data(), s), has_lo, -1.5, has_hi, 2.25);
    dout.check_guards();
    require_same_bits(dout.download(), want, "clamp");
  }
}

namespace {

// Values every dtype can hold without undefined behaviour in a float -> integer cast: small
// integers and halves, plus 16-bit edge cases (overflow to inf, subnormals, ties) for float
// sources converted to f16/bf16, and NaN/inf when the destination is floating.
template <typename From>
std::vector<From> copy_source(size_t n, bool to_floating, uint64_t seed) {
  std::vector<From> v = random_values<From>(n, seed, 0, 100);
  if constexpr (std::is_floating_point_v<From>) {
    if (to_floating && n > 20) {
      v[1] = From(70000);             // f16 overflow -> inf
      v[2] = From(1e-6);              // f16 subnormal
      v[3] = From(1.0009765625);      // 1 + 2^-10: exactly representable in f16
      v[4] = From(1.00048828125);     // 1 + 2^-11: an f16 tie, rounds to even (1.0)
      v[5] = From(3.00390625);        // a bf16 tie
      v[6] = std::numeric_limits<From>::quiet_NaN();
      v[7] = -std::numeric_limits<From>::infinity();
      v[8] = From(-0.0);
    }
  }
  return v;
}

template <typename To, typename From>
void check_copy(int64_t n) {
  const DType to = dtype_of<To>::value, from = dtype_of<From>::value;
  INFO("copy " << from << " -> " << to << " n " << n);
  const auto x = copy_source<From>(static_cast<size_t>(n), is_floating(to), 60);
  const IterShape s = iter_shape({n});
  std::vector<To> want(static_cast<size_t>(n));
  cpu::copy(s, to, contiguous(want.data(), s), from, contiguous(const_cast<From*>(x.data()), s));
  DeviceBuffer<From> dx(x);
  DeviceBuffer<To> dout(static_cast<size_t>(n));
  gpu::copy(s, to, contiguous(dout.data(), s), from, contiguous(dx.data(), s));
  dout.check_guards();
  require_same_bits(dout.download(), want, "copy");
}

template <typename From>
void check_copy_to_all(int64_t n) {
  check_copy<float, From>(n);
  check_copy<double, From>(n);
  check_copy<Half, From>(n);
  check_copy<BFloat16, From>(n);
  check_copy<int32_t, From>(n);
  check_copy<int64_t, From>(n);
  check_copy<uint8_t, From>(n);
}

}  // namespace

TEST_CASE("cuda copy converts between every pair of dtypes like the CPU", "[cuda][elementwise]") {
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{33}, int64_t{1001}}) {
    check_copy_to_all<float>(n);
    check_copy_to_all<double>(n);
    check_copy_to_all<Half>(n);
    check_copy_to_all<BFloat16>(n);
    check_copy_to_all<int32_t>(n);
    check_copy_to_all<int64_t>(n);
    check_copy_to_all<uint8_t>(n);
  }
}

TEST_CASE("cuda copy f32 -> f16/bf16 rounds bit-identically to core/dtype.h on many bit patterns",
          "[cuda][elementwise]") {
  // Random bit patterns cover every exponent (subnormals, overflow, NaN payloads) and mantissa
  // tail, so ties and carries into the exponent all occur.
  const int64_t n = 1 << 14;
  std::mt19937 rng(7);
  std::vector<float> x(n);
  for (auto& v : x) {
    const uint32_t bits = rng();
    std::memcpy(&v, &bits, 4);
  }
  const IterShape s = iter_shape({n});
  DeviceBuffer<float> dx(x);
  DeviceBuffer<Half> dh(n);
  DeviceBuffer<BFloat16> db(n);
  gpu::copy(s, DType::f16, contiguous(dh.data(), s), DType::f32, contiguous(dx.data(), s));
  gpu::copy(s, DType::bf16, contiguous(db.data(), s), DType::f32, contiguous(dx.data(), s));
  const auto h = dh.download();
  const auto b = db.download();
  for (int64_t i = 0; i < n; ++i) {
    INFO("element " << i);
    REQUIRE(h[i].bits == Half(x[i]).bits);
    REQUIRE(b[i].bits == BFloat16(x[i]).bits);
  }
}

namespace {

template <typename T>
void check_transpose(int64_t rows, int64_t cols) {
  INFO("transpose " << dtype_of<T>::value << " " << rows << "x" << cols);
  // out (rows, cols) contiguous; in = the transpose of a contiguous (cols, rows) matrix.
  const IterShape s = iter_shape({rows, cols});
  const auto x = random_values<T>(static_cast<size_t>(rows * cols), 70, 0, 100);
  const Operand in_op = strided(nullptr, {1, rows});
  std::vector<T> want(static_cast<size_t>(rows * cols));
  cpu::copy(s, dtype_of<T>::value, contiguous(want.data(), s), dtype_of<T>::value,
            with_data(in_op, const_cast<T*>(x.data())));
  DeviceBuffer<T> dx(x), dout(static_cast<size_t>(rows * cols));
  gpu::copy(s, dtype_of<T>::value, contiguous(dout.data(), s), dtype_of<T>::value, with_data(in_op, dx.data()));
  dout.check_guards();
  require_same_bits(dout.download(), want, "transpose");
}

}  // namespace

TEST_CASE("cuda copy of a transposed matrix (tiled transpose) and of permuted 3-D views", "[cuda][elementwise]") {
  for (const auto& [r, c] : {std::pair<int64_t, int64_t>{1, 1}, {32, 32}, {67, 45}, {33, 200}, {5, 31}}) {
    check_transpose<float>(r, c);
    check_transpose<double>(r, c);
    check_transpose<Half>(r, c);
    check_transpose<uint8_t>(r, c);
  }
  // A (3, 4, 5) view of a contiguous (5, 3, 4) buffer, and a sliced view with padding.
  const IterShape s = iter_shape({3, 4, 5});
  const auto x = random_values<float>(5 * 3 * 4 * 2, 71);
  for (const Operand in_op : {strided(nullptr, {4, 1, 12}), strided(nullptr, {40, 10, 2})}) {
    std::vector<float> want(60);
    cpu::copy(s, DType::f32, contiguous(want.data(), s), DType::f32, with_data(in_op, const_cast<float*>(x.data())));
    DeviceBuffer<float> dx(x), dout(60);
    gpu::copy(s, DType::f32, contiguous(dout.data(), s), DType::f32, with_data(in_op, dx.data()));
    dout.check_guards();
    require_same_bits(dout.download(), want, "permuted copy");
  }
  // Converting copy of a transposed layout takes the generic path.
  const IterShape s2 = iter_shape({40, 30});
  const auto y = random_values<float>(1200, 72);
  std::vector<double> want(1200);
  cpu::copy(s2, DType::f64, contiguous(want.data(), s2), DType::f32, strided(const_cast<float*>(y.data()), {1, 40}));
  DeviceBuffer<float> dy(y);
  DeviceBuffer<double> dout(1200);
  gpu::copy(s2, DType::f64, contiguous(dout.data(), s2), DType::f32, strided(dy.data(), {1, 40}));
  dout.check_guards();
  require_same_bits(dout.download(), want, "transposed convert");
}

TEST_CASE("cuda fill, logical_not and isnan match the CPU", "[cuda][elementwise]") {
  const int64_t n = 1001;
  const IterShape s = iter_shape({n});
  auto fill_check = [&](auto tag, double value) {
    using T = decltype(tag);
    std::vector<T> want(n);
    cpu::fill(dtype_of<T>::value, s, contiguous(want.data(), s), value);
    DeviceBuffer<T> d(n);
    gpu::fill(dtype_of<T>::value, s, contiguous(d.data(), s), value);
    d.check_guards();
    require_same_bits(d.download(), want, "fill");
  };
  for (const double v : {0.0, -2.5, 3.14159, 1e5}) {
    fill_check(float{}, v);
    fill_check(double{}, v);
    fill_check(Half{}, v);
    fill_check(BFloat16{}, v);
    fill_check(int32_t{}, v);
    fill_check(int64_t{}, v);
  }
  fill_check(uint8_t{}, 7.0);
  fill_check(double{}, std::numeric_limits<double>::quiet_NaN());
  fill_check(float{}, std::numeric_limits<double>::quiet_NaN());
  // Fill of a strided view writes only the view (the guard check covers the rest).
  {
    const IterShape sv = iter_shape({10, 3});
    std::vector<float> host(60, 1.0f), want = host;
    cpu::fill(DType::f32, sv, strided(want.data(), {6, 2}), -1.0);
    DeviceBuffer<float> d(host);
    gpu::fill(DType::f32, sv, strided(d.data(), {6, 2}), -1.0);
    require_same_bits(d.download(), want, "strided fill");
  }
  // logical_not on bool bytes; isnan on floats (with NaN) and integers.
  std::vector<uint8_t> b(n);
  for (int64_t i = 0; i < n; ++i) b[i] = (i * 31) % 5 < 2;
  std::vector<uint8_t> want(n);
  cpu::logical_not(s, contiguous(want.data(), s), contiguous(b.data(), s));
  DeviceBuffer<uint8_t> db(b), dout(n);
  gpu::logical_not(s, contiguous(dout.data(), s), contiguous(db.data(), s));
  dout.check_guards();
  require_same_bits(dout.download(), want, "logical_not");

  auto isnan_check = [&](auto tag) {
    using T = decltype(tag);
    auto x = random_values<T>(n, 80);
    if constexpr (std::is_floating_point_v<T>) {
      x[3] = std::numeric_limits<T>::quiet_NaN();
      x[4] = std::numeric_limits<T>::infinity();
    }
    std::vector<uint8_t> w(n);
    cpu::isnan(dtype_of<T>::value, s, contiguous(w.data(), s), contiguous(x.data(), s));
    DeviceBuffer<T> dx(x);
    DeviceBuffer<uint8_t> d(n);
    gpu::isnan(dtype_of<T>::value, s, contiguous(d.data(), s), contiguous(dx.data(), s));
    d.check_guards();
    require_same_bits(d.download(), w, "isnan");
  };
  isnan_check(float{});
  isnan_check(double{});
  isnan_check(int32_t{});
  isnan_check(uint8_t{});
  {  // f16 NaN
    std::vector<Half> x(5, Half(1.0f));
    x[2].bits = 0x7e00;
    std::vector<uint8_t> w(5);
    const IterShape s5 = iter_shape({5});
    cpu::isnan(DType::f16, s5, contiguous(w.data(), s5), contiguous(x.data(), s5));
    DeviceBuffer<Half> dx(x);
    DeviceBuffer<uint8_t> d(5);
    gpu::isnan(DType::f16, s5, contiguous(d.data(), s5), contiguous(dx.data(), s5));
    require_same_bits(d.download(), w, "isnan f16");
    REQUIRE(w[2] == 1);
  }
}

TEST_CASE("cuda elementwise entry points reject unsupported dtypes", "[cuda][elementwise]") {
  const IterShape s = iter_shape({4});
  DeviceBuffer<int32_t> d(4);
  REQUIRE_THROWS_AS(gpu::unary(UnaryOp::Exp, DType::i32, s, contiguous(d.data(), s), contiguous(d.data(), s), 0),
                    ember::Error);
  REQUIRE_THROWS_AS(gpu::clamp(DType::i32, s, contiguous(d.data(), s), contiguous(d.data(), s), true, 0, true, 1),
                    ember::Error);
}
