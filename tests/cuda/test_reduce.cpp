// kernels/cuda/reduce vs the kernels/cpu reference: every entry point over shapes that select
// each group size (a thread, a warp, a block per output, a sum split across blocks), reductions over one, several and all
// dims, strided inputs, NaN/ties/±0 (extremum parity is exact), empty reductions.

#include <ember/kernels/cpu/reduce.h>
#include <ember/kernels/cuda/reduce.h>

#include <limits>

#include "kernel_check.h"

using namespace ember;
using namespace ember::kernels;
using namespace ember::testing;

namespace {

// An input shape and the kept shape (reduced dims set to 1).
struct ReduceCase {
  IterShape in, out;
  const char* what;
};

IterShape kept(const IterShape& in, std::initializer_list<int> reduced) {
  IterShape o = in;
  for (const int d : reduced) o.sizes[d] = 1;
  return o;
}

std::vector<ReduceCase> cases() {
  std::vector<ReduceCase> c;
  auto add = [&](std::initializer_list<int64_t> sizes, std::initializer_list<int> reduced, const char* what) {
    const IterShape in = iter_shape(sizes);
    c.push_back({in, kept(in, reduced), what});
  };
  add({7, 1000}, {1}, "rows of 1000: a warp per output");
  add({3, 5000}, {1}, "rows of 5000: a block per output");
  add({5000, 3}, {1}, "rows of 3: a thread per output");
  add({1000, 7}, {0}, "columns of 1000 (strided reduced dim)");
  add({4, 6, 33}, {0, 2}, "two reduced dims");
  add({31, 33}, {0, 1}, "everything");
  add({1}, {0}, "one element");
  add({6000, 5}, {0}, "columns, many elements");
  // Few outputs of many elements: split across blocks, partials added in order (Note [Split sums]).
  add({200000}, {0}, "everything, 200000 elements: split sum");
  add({2, 70000}, {1}, "two rows of 70000: split sum");
  add({40000, 3}, {0}, "three strided columns of 40000: split sum");
  return c;
}

// The output operand: contiguous over the kept shape, stride 0 along the reduced dims.
Operand output_operand(void* data, const ReduceCase& rc) {
  Operand op = contiguous(data, rc.out);
  for (int d = 0; d < rc.in.ndim; ++d)
    if (rc.out.sizes[d] != rc.in.sizes[d]) op.strides[d] = 0;
  return op;
}

template <typename T>
std::vector<T> reduce_input(size_t n, uint64_t seed, bool specials) {
  // Small integers make ties frequent (first-index rule), then NaN, ±0 and ±inf.
  std::vector<T> v = random_values<T>(n, seed, std::is_unsigned_v<T> ? 0 : -20, 20);
  for (auto& x : v) x = static_cast<T>(static_cast<int64_t>(x));
  if constexpr (std::is_floating_point_v<T>) {
    if (specials && n > 100) {
      v[n / 3] = std::numeric_limits<T>::quiet_NaN();
      v[n / 2] = -std::numeric_limits<T>::infinity();
      v[n / 5] = std::numeric_limits<T>::infinity();
      v[7] = T(-0.0);
    }
  }
  return v;
}

}  // namespace

TEMPLATE_TEST_CASE("cuda sum and var match the CPU", "[cuda][reduce]", float, double) {
  using T = TestType;
  const DType dt = dtype_of<T>::value;
  for (const ReduceCase& rc : cases()) {
    INFO(rc.what);
    const int64_t n = rc.in.numel(), m = rc.out.numel();
    const auto x = random_values<T>(static_cast<size_t>(n), 3, -2, 5);
    std::vector<T> want_sum(static_cast<size_t>(m)), want_var(static_cast<size_t>(m));
    const Operand in = contiguous(const_cast<T*>(x.data()), rc.in);
    cpu::sum(dt, rc.in, in, output_operand(want_sum.data(), rc), rc.out);
    cpu::var(dt, rc.in, in, output_operand(want_var.data(), rc), rc.out, 1);
    DeviceBuffer<T> dx(x), dsum(static_cast<size_t>(m)), dvar(static_cast<size_t>(m));
    const Operand din = contiguous(dx.data(), rc.in);
    gpu::sum(dt, rc.in, din, output_operand(dsum.data(), rc), rc.out);
    gpu::var(dt, rc.in, din, output_operand(dvar.data(), rc), rc.out, 1);
    dsum.check_guards();
    dvar.check_guards();
    const Tol t = reordered_sum<T>();
    require_close(dsum.download(), want_sum, t.atol, t.rtol, "sum");
    // var: the same two-pass formula; the mean and the squared deviations are sums in another order.
    require_close(dvar.download(), want_var, t.atol, std::max(t.rtol, 1e-12), "var");
  }
}

TEMPLATE_TEST_CASE("cuda sum and var of a transposed input, NaN and empty reductions", "[cuda][reduce]", float,
                   double) {
  using T = TestType;
  const DType dt = dtype_of<T>::value;
  // (40, 50) view of a contiguous (50, 40) buffer, reduced over dim 1.
  const IterShape in_shape = iter_shape({40, 50}), out_shape = iter_shape({40, 1});
  auto x = random_values<T>(2000, 9);
  x[17] = std::numeric_limits<T>::quiet_NaN();
  const Operand in = strided(x.data(), {1, 40});
  std::vector<T> want(40), want_var(40);
  cpu::sum(dt, in_shape, in, strided(want.data(), {1, 0}), out_shape);
  cpu::var(dt, in_shape, in, strided(want_var.data(), {1, 0}), out_shape, 0);
  DeviceBuffer<T> dx(x), dout(40), dvar(40);
  gpu::sum(dt, in_shape, strided(dx.data(), {1, 40}), strided(dout.data(), {1, 0}), out_shape);
  gpu::var(dt, in_shape, strided(dx.data(), {1, 40}), strided(dvar.data(), {1, 0}), out_shape, 0);
  const Tol t = reordered_sum<T>();
  require_close(dout.download(), want, t.atol, t.rtol, "transposed sum");
  require_close(dvar.download(), want_var, t.atol, std::max(t.rtol, 1e-12), "transposed var");

  // Reducing an empty dim: sum 0, var NaN. Zero outputs: nothing happens.
  const IterShape e_in = iter_shape({3, 0}), e_out = iter_shape({3, 1});
  DeviceBuffer<T> ds(3), dv(3);
  gpu::sum(dt, e_in, strided(dx.data(), {0, 1}), strided(ds.data(), {1, 0}), e_out);
  gpu::var(dt, e_in, strided(dx.data(), {0, 1}), strided(dv.data(), {1, 0}), e_out, 1);
  ds.check_guards();
  for (const T v : ds.download()) CHECK(v == T(0));
  for (const T v : dv.download()) CHECK(std::isnan(static_cast<double>(v)));
  const IterShape z_in = iter_shape({0, 4}), z_out = iter_shape({0, 1});
  gpu::sum(dt, z_in, strided(dx.data(), {4, 1}), strided(ds.data(), {1, 0}), z_out);
}

namespace {

template <typename T>
void check_extremum(uint64_t seed) {
  const DType dt = dtype_of<T>::value;
  for (const ReduceCase& rc : cases()) {
    for (const Extremum kind : {Extremum::Max, Extremum::Min}) {
      for (const bool specials : {false, true}) {
        INFO(rc.what << " dtype " << dt << (kind == Extremum::Max ? " max" : " min") << (specials ? " specials" : ""));
        const int64_t n = rc.in.numel(), m = rc.out.numel();
        const auto x = reduce_input<T>(static_cast<size_t>(n), seed, specials);
        const Operand in = contiguous(const_cast<T*>(x.data()), rc.in);
        std::vector<T> want(static_cast<size_t>(m)), want_v(static_cast<size_t>(m));
        std::vector<int64_t> want_i(static_cast<size_t>(m));
        cpu::extremum(kind, dt, rc.in, in, output_operand(want.data(), rc), rc.out);
        cpu::arg_extremum(kind, dt, rc.in, in, output_operand(want_v.data(), rc), output_operand(want_i.data(), rc),
                          rc.out);
        DeviceBuffer<T> dx(x), dout(static_cast<size_t>(m)), dv(static_cast<size_t>(m));
        DeviceBuffer<int64_t> di(static_cast<size_t>(m)), di2(static_cast<size_t>(m));
        const Operand din = contiguous(dx.data(), rc.in);
        gpu::extremum(kind, dt, rc.in, din, output_operand(dout.data(), rc), rc.out);
        gpu::arg_extremum(kind, dt, rc.in, din, output_operand(dv.data(), rc), output_operand(di.data(), rc), rc.out);
        gpu::arg_extremum(kind, dt, rc.in, din, Operand{}, output_operand(di2.data(), rc), rc.out);  // no values
        dout.check_guards();
        dv.check_guards();
        di.check_guards();
        // The choice is exact (same element, same bits: -0 vs +0 and NaN payloads included).
        require_same_bits(dout.download(), want, "extremum");
        require_same_bits(dv.download(), want_v, "arg_extremum values");
        require_same_bits(di.download(), want_i, "arg_extremum indices");
        require_same_bits(di2.download(), want_i, "arg_extremum indices without values");
      }
    }
  }
}

}  // namespace

TEST_CASE("cuda extremum and arg_extremum pick exactly the CPU's element", "[cuda][reduce]") {
  check_extremum<float>(1);
  check_extremum<double>(2);
  check_extremum<int32_t>(3);
  check_extremum<int64_t>(4);
  check_extremum<uint8_t>(5);
  // An empty reduction is an error, as on the CPU.
  const IterShape in = iter_shape({3, 0}), out = iter_shape({3, 1});
  DeviceBuffer<float> d(3);
  REQUIRE_THROWS_AS(gpu::extremum(Extremum::Max, DType::f32, in, strided(d.data(), {0, 1}),
                                   strided(d.data(), {1, 0}), out),
                    ember::Error);
}

TEMPLATE_TEST_CASE("cuda extremum_backward and index_backward match the CPU", "[cuda][reduce]", float, double) {
  using T = TestType;
  const DType dt = dtype_of<T>::value;
  for (const ReduceCase& rc : cases()) {
    INFO(rc.what);
    const int64_t n = rc.in.numel(), m = rc.out.numel();
    const auto x = reduce_input<T>(static_cast<size_t>(n), 11, true);  // ties and NaN
    const auto g = random_values<T>(static_cast<size_t>(m), 12);
    const Operand in = contiguous(const_cast<T*>(x.data()), rc.in);
    std::vector<T> value(static_cast<size_t>(m)), want(static_cast<size_t>(n)), want_ib(static_cast<size_t>(n));
    std::vector<int64_t> idx(static_cast<size_t>(m));
    cpu::arg_extremum(Extremum::Max, dt, rc.in, in, output_operand(value.data(), rc), output_operand(idx.data(), rc),
                      rc.out);
    cpu::extremum_backward(dt, rc.in, contiguous(want.data(), rc.in), in, output_operand(value.data(), rc),
                           output_operand(const_cast<T*>(g.data()), rc), rc.out);
    cpu::index_backward(dt, rc.in, contiguous(want_ib.data(), rc.in), output_operand(const_cast<T*>(g.data()), rc),
                        output_operand(idx.data(), rc), rc.out);
    DeviceBuffer<T> dx(x), dg(g), dval(value), dgi(static_cast<size_t>(n)), dib(static_cast<size_t>(n));
    DeviceBuffer<int64_t> didx(idx);
    gpu::extremum_backward(dt, rc.in, contiguous(dgi.data(), rc.in), contiguous(dx.data(), rc.in),
                            output_operand(dval.data(), rc), output_operand(dg.data(), rc), rc.out);
    gpu::index_backward(dt, rc.in, contiguous(dib.data(), rc.in), output_operand(dg.data(), rc),
                         output_operand(didx.data(), rc), rc.out);
    dgi.check_guards();
    dib.check_guards();
    // Same count, same single division: exact.
    require_same_bits(dgi.download(), want, "extremum_backward");
    require_same_bits(dib.download(), want_ib, "index_backward");
  }
}
