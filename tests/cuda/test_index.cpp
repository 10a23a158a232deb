// kernels/cuda/index vs the kernels/cpu reference: gather and scatter_add along each dim, with
// int32 and int64 indices, a broadcast index (index_select and its backward), strided operands;
// indices_in_range; one_hot.

#include <ember/kernels/cpu/index.h>
#include <ember/kernels/cuda/index.h>

#include "kernel_check.h"

using namespace ember;
using namespace ember::kernels;
using namespace ember::testing;

namespace {

template <typename I>
std::vector<I> random_indices(size_t n, int64_t size, uint64_t seed) {
  const auto u = random_values<double>(n, seed, 0, static_cast<double>(size));
  std::vector<I> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<I>(u[i]);
  return v;
}

// The index's shape `shape`; the indexed operand is `self` (contiguous, `self_size` along dim,
// the index's sizes elsewhere); the other data operand is contiguous over `shape`.
template <typename T, typename I>
void check_gather_scatter(const IterShape& shape, int dim, int64_t self_size, bool broadcast_index) {
  INFO("dim " << dim << " self size " << self_size << (broadcast_index ? " broadcast index" : "") << " dtype "
              << dtype_of<T>::value << " index " << dtype_of<I>::value);
  IterShape self_shape = shape;
  self_shape.sizes[dim] = self_size;
  const int64_t n = shape.numel(), ns = self_shape.numel();
  // A broadcast index varies only along dim (index_select): stride 0 elsewhere.
  Operand index_op = contiguous(nullptr, shape);
  int64_t n_index = n;
  if (broadcast_index) {
    for (int d = 0; d < shape.ndim; ++d) index_op.strides[d] = d == dim ? 1 : 0;
    n_index = shape.sizes[dim];
  }
  const auto idx = random_indices<I>(static_cast<size_t>(n_index), self_size, 9);
  const auto self = random_values<T>(static_cast<size_t>(ns), 10, -50, 50);
  const auto src = random_values<T>(static_cast<size_t>(n), 11, -50, 50);
  const DType dt = dtype_of<T>::value, it = dtype_of<I>::value;

  // gather: out (shape) = self[idx]
  std::vector<T> want(static_cast<size_t>(n));
  cpu::gather(dt, shape, dim, contiguous(want.data(), shape), contiguous(const_cast<T*>(self.data()), self_shape), it,
              with_data(index_op, const_cast<I*>(idx.data())));
  DeviceBuffer<T> dself(self), dout(static_cast<size_t>(n)), dsrc(src);
  DeviceBuffer<I> didx(idx);
  gpu::gather(dt, shape, dim, contiguous(dout.data(), shape), contiguous(dself.data(), self_shape), it,
               with_data(index_op, didx.data()));
  dout.check_guards();
  require_same_bits(dout.download(), want, "gather");

  // scatter_add: self[idx] += src (accumulates)
  std::vector<T> acc = self;
  cpu::scatter_add(dt, shape, dim, contiguous(acc.data(), self_shape), contiguous(const_cast<T*>(src.data()), shape),
                   it, with_data(index_op, const_cast<I*>(idx.data())));
  gpu::scatter_add(dt, shape, dim, contiguous(dself.data(), self_shape), contiguous(dsrc.data(), shape), it,
                    with_data(index_op, didx.data()));
  dself.check_guards();
  // Integers add exactly in any order; floats meet in atomicAdd in an unspecified order: each
  // output is a sum of up to 34 terms of magnitude <= 50 (|sum| <= 1700), whose rounding in
  // another order differs by at most ~34 * eps * 1700: 3.5e-3 in f32, 1.3e-11 in f64.
  if constexpr (std::is_integral_v<T>) require_same_bits(dself.download(), acc, "scatter_add");
  else require_close(dself.download(), acc, std::is_same_v<T, float> ? 3.5e-3 : 1.3e-11, 0, "scatter_add");
}

}  // namespace

TEST_CASE("cuda gather and scatter_add match the CPU", "[cuda][index]") {
  const IterShape s2 = iter_shape({33, 17}), s3 = iter_shape({4, 9, 5});
  for (const bool bcast : {false, true}) {
    for (int dim = 0; dim < 2; ++dim) {
      check_gather_scatter<float, int64_t>(s2, dim, 7, bcast);
      check_gather_scatter<double, int32_t>(s2, dim, 40, bcast);
      check_gather_scatter<int32_t, int64_t>(s2, dim, 3, bcast);
      check_gather_scatter<int64_t, int32_t>(s2, dim, 5, bcast);
    }
    for (int dim = 0; dim < 3; ++dim) check_gather_scatter<float, int32_t>(s3, dim, 6, bcast);
  }
  // gather moves any dtype as raw bytes (f16 here); scatter_add rejects it.
  const IterShape s = iter_shape({8});
  std::vector<Half> self(5);
  for (int i = 0; i < 5; ++i) self[i] = Half(static_cast<float>(i) + 0.5f);
  const std::vector<int64_t> idx = {4, 0, 1, 1, 3, 2, 0, 4};
  DeviceBuffer<Half> dself(self), dout(8);
  DeviceBuffer<int64_t> didx(idx);
  gpu::gather(DType::f16, s, 0, contiguous(dout.data(), s), contiguous(dself.data(), s), DType::i64,
               contiguous(didx.data(), s));
  const auto got = dout.download();
  for (int i = 0; i < 8; ++i) CHECK(got[i].bits == self[idx[i]].bits);
  REQUIRE_THROWS_AS(gpu::scatter_add(DType::f16, s, 0, contiguous(dself.data(), s), contiguous(dout.data(), s),
                                      DType::i64, contiguous(didx.data(), s)),
                    ember::Error);
  // Empty shapes do nothing.
  const IterShape e = iter_shape({0, 3});
  gpu::gather(DType::f16, e, 0, contiguous(dout.data(), e), contiguous(dself.data(), e), DType::i64,
               contiguous(didx.data(), e));
  dout.check_guards();
}

TEST_CASE("cuda scatter_add with many collisions sums every contribution", "[cuda][index]") {
  // 4096 sources into 3 slots: the atomics must not lose an update. Integers: exact.
  const int64_t n = 4096;
  const IterShape s = iter_shape({n});
  std::vector<int64_t> idx(n), src(n);
  for (int64_t i = 0; i < n; ++i) {
    idx[i] = i % 3;
    src[i] = i;
  }
  std::vector<int64_t> want(3, 0);
  cpu::scatter_add(DType::i64, s, 0, strided(want.data(), {1}), contiguous(src.data(), s), DType::i64,
                   contiguous(idx.data(), s));
  DeviceBuffer<int64_t> dacc(std::vector<int64_t>(3, 0)), dsrc(src), didx(idx);
  gpu::scatter_add(DType::i64, s, 0, strided(dacc.data(), {1}), contiguous(dsrc.data(), s), DType::i64,
                    contiguous(didx.data(), s));
  dacc.check_guards();
  require_same_bits(dacc.download(), want, "collisions");
}

TEST_CASE("cuda indices_in_range reports the first offending value", "[cuda][index]") {
  const IterShape s = iter_shape({40, 30});
  std::vector<int32_t> idx(1200, 3);
  int64_t bad = 0;
  {
    DeviceBuffer<int32_t> d(idx);
    CHECK(gpu::indices_in_range(DType::i32, s, contiguous(d.data(), s), 4, &bad));
  }
  idx[700] = 9;
  idx[1100] = -2;
  DeviceBuffer<int32_t> d(idx);
  CHECK_FALSE(gpu::indices_in_range(DType::i32, s, contiguous(d.data(), s), 4, &bad));
  CHECK(bad == 9);
  CHECK_FALSE(cpu::indices_in_range(DType::i32, s, contiguous(idx.data(), s), 4, &bad));
  // A transposed view walks the buffer in another order: offset 700 is position (10, 23) = 423,
  // offset 1100 is (20, 36) = 836, so 700's value is still the first.
  bad = 0;
  CHECK_FALSE(gpu::indices_in_range(DType::i32, iter_shape({30, 40}), strided(d.data(), {1, 30}), 4, &bad));
  CHECK(bad == 9);
  // int64, empty.
  DeviceBuffer<int64_t> e(0);
  CHECK(gpu::indices_in_range(DType::i64, iter_shape({0}), contiguous(e.data(), iter_shape({0})), 4, &bad));
}

TEST_CASE("cuda one_hot matches the CPU", "[cuda][index]") {
  const int64_t n = 37, classes = 11;
  const auto labels = random_indices<int64_t>(n, classes, 12);
  auto check = [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> want(n * classes);
    cpu::one_hot(dtype_of<T>::value, DType::i64, n, labels.data(), classes, want.data());
    DeviceBuffer<int64_t> dl(labels);
    DeviceBuffer<T> dout(n * classes);
    gpu::one_hot(dtype_of<T>::value, DType::i64, n, dl.data(), classes, dout.data());
    dout.check_guards();
    require_same_bits(dout.download(), want, "one_hot");
  };
  check(float{});
  check(double{});
  check(int64_t{});
  check(Half{});
  const auto labels32 = random_indices<int32_t>(n, classes, 13);
  std::vector<uint8_t> want(n * classes);
  cpu::one_hot(DType::u8, DType::i32, n, labels32.data(), classes, want.data());
  DeviceBuffer<int32_t> dl(labels32);
  DeviceBuffer<uint8_t> dout(n * classes);
  gpu::one_hot(DType::u8, DType::i32, n, dl.data(), classes, dout.data());
  require_same_bits(dout.download(), want, "one_hot u8");
}
