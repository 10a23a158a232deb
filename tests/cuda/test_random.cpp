// kernels/cuda/random vs the CPU's random factories (core/generator.cpp, layers/dropout.cpp):
// for the same seed and Philox offset the device writes the same bytes. The CPU side runs the
// public API with a Generator set to (seed, offset), which also checks the block counts.

#include <ember/ember.h>
#include <ember/kernels/cuda/random.h>

#include <limits>

#include "kernel_check.h"

using namespace ember;
using namespace ember::testing;

namespace {

constexpr uint64_t kSeed = 0x1234abcd9876ULL, kOffset = 7;
const int64_t kSizes[] = {0, 1, 3, 5, 1001, 4097};

// The tensor's elements as T.
template <typename T>
std::vector<T> elements(const Tensor& t) {
  return t.to_vector<T>();
}

// Exact, except normal fills on a real GPU (Note [No FMA contraction] in kernels/random.h:
// CUDA's logf/cosf/log/cos are 1-2 ulp from glibc's). There Box-Muller's sqrt(-2 log u1) *
// cos(2 pi u2) carries a few ulp of relative error, and the cos factor near its zeros an
// absolute error of 2 ulp of 1, times the radius (<= 5.6 for f32 words) and std (2): up to
// ~25 ulp of 1 absolute, hence 64 ulp of 1 as the floor.
template <typename T>
void require_normal_match(const std::vector<T>& got, const std::vector<T>& want) {
  if (kSimt) {
    require_same_bits(got, want, "normal");
  } else {
    const double ulp = std::is_same_v<T, float> ? 1.2e-7 : 2.2e-16;
    require_close(got, want, 64 * ulp, 8 * ulp, "normal");
  }
}

}  // namespace

TEMPLATE_TEST_CASE("cuda fill_uniform and fill_normal write the CPU's bytes", "[cuda][random]", float, double) {
  using T = TestType;
  const DType dt = dtype_of<T>::value;
  for (const int64_t n : kSizes) {
    INFO("n " << n);
    Generator gen;
    gen.set_state(kSeed, kOffset);
    Tensor u = empty({n}, {.dtype = dt});
    uniform_(u, -2.0, 3.0, gen);
    CHECK(gen.offset() == kOffset + kernels::gpu::philox_blocks_uniform(dt, n));
    DeviceBuffer<T> du(static_cast<size_t>(n));
    kernels::gpu::fill_uniform(dt, n, du.data(), kSeed, kOffset, -2.0, 3.0);
    du.check_guards();
    require_same_bits(du.download(), elements<T>(u), "uniform");

    gen.set_state(kSeed, kOffset);
    Tensor z = empty({n}, {.dtype = dt});
    normal_(z, 0.5, 2.0, gen);
    CHECK(gen.offset() == kOffset + kernels::gpu::philox_blocks_normal(dt, n));
    DeviceBuffer<T> dz(static_cast<size_t>(n));
    kernels::gpu::fill_normal(dt, n, dz.data(), kSeed, kOffset, 0.5, 2.0);
    dz.check_guards();
    require_normal_match(dz.download(), elements<T>(z));
  }
}

TEST_CASE("cuda fill_bernoulli and fill_randint write the CPU's values", "[cuda][random]") {
  for (const int64_t n : kSizes) {
    for (const double p : {0.0, 0.3, 1.0}) {
      INFO("n " << n << " p " << p);
      Generator gen;
      gen.set_state(kSeed, kOffset);
      const Tensor b = bernoulli({n}, p, {.dtype = DType::f32}, gen);
      CHECK(gen.offset() == kOffset + kernels::gpu::philox_blocks_bernoulli(n));
      DeviceBuffer<float> db(static_cast<size_t>(n));
      kernels::gpu::fill_bernoulli(DType::f32, n, db.data(), kSeed, kOffset, p);
      db.check_guards();
      require_same_bits(db.download(), elements<float>(b), "bernoulli f32");
      // Other dtypes: the same 0/1 pattern, converted.
      gen.set_state(kSeed, kOffset);
      const Tensor b64 = bernoulli({n}, p, {.dtype = DType::i64}, gen);
      DeviceBuffer<int64_t> di(static_cast<size_t>(n));
      kernels::gpu::fill_bernoulli(DType::i64, n, di.data(), kSeed, kOffset, p);
      require_same_bits(di.download(), elements<int64_t>(b64), "bernoulli i64");
    }
    Generator gen;
    gen.set_state(kSeed, kOffset);
    const Tensor r = randint(-5, 1000, {n}, {.dtype = DType::i64}, gen);
    DeviceBuffer<int64_t> dr(static_cast<size_t>(n));
    kernels::gpu::fill_randint(n, dr.data(), kSeed, kOffset, -5, 1000);
    dr.check_guards();
    require_same_bits(dr.download(), elements<int64_t>(r), "randint");
  }
  DeviceBuffer<float> d(1);
  REQUIRE_THROWS_AS(kernels::gpu::fill_bernoulli(DType::f32, 1, d.data(), kSeed, 0, 1.5), ember::Error);
  REQUIRE_THROWS_AS(kernels::gpu::fill_uniform(DType::i32, 1, d.data(), kSeed, 0, 0, 1), ember::Error);
}

TEMPLATE_TEST_CASE("cuda dropout_forward computes layers/dropout.cpp's mask and output", "[cuda][random]", float,
                   double) {
  using T = TestType;
  const DType dt = dtype_of<T>::value;
  for (const int64_t n : kSizes) {
    for (const double p : {0.1, 0.5, 0.9}) {
      INFO("n " << n << " p " << p);
      auto x = random_values<T>(static_cast<size_t>(n), 5);
      if (n > 10) x[2] = std::numeric_limits<T>::infinity();
      const Tensor xt = from_vector<T>(x, Shape{n}, {.dtype = dt});
      // The CPU: y = dropout(x); the mask itself is dropout(ones).
      Generator gen;
      gen.set_state(kSeed, kOffset);
      const Tensor y = dropout(xt, p, true, gen);
      CHECK(gen.offset() == kOffset + kernels::gpu::philox_blocks_bernoulli(n));
      gen.set_state(kSeed, kOffset);
      const Tensor mask = dropout(ones({n}, {.dtype = dt}), p, true, gen);

      DeviceBuffer<T> dx(x), dy(static_cast<size_t>(n)), dmask(static_cast<size_t>(n));
      kernels::gpu::dropout_forward(dt, n, dx.data(), dy.data(), dmask.data(), kSeed, kOffset, p);
      dy.check_guards();
      dmask.check_guards();
      require_same_bits(dy.download(), elements<T>(y), "dropout output");
      require_same_bits(dmask.download(), elements<T>(mask), "dropout mask");
      // In place, without the mask.
      kernels::gpu::dropout_forward(dt, n, dx.data(), dx.data(), nullptr, kSeed, kOffset, p);
      require_same_bits(dx.download(), elements<T>(y), "dropout in place");
    }
  }
}
