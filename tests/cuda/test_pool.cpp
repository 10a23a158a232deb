// kernels/cuda/pool: every entry point against kernels/cpu/pool, exactly (0 tolerance): the
// kernels do the CPU's per-window operations in the CPU's order (Note [Pooling backward as a
// gather] in kernels/cuda/pool.cu).

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../../core/error.h"
#include "../../kernels/cpu/pool.h"
#include "../../kernels/cuda/pool.h"
#include "device_buffer.h"
#include "random_data.h"

namespace {

using ember::DType;
using ember::kernels::Pool2dGeometry;
using ember::testing::DeviceBuffer;
using ember::testing::random_vector;

struct Spec {
  const char* name;
  int64_t planes, in_h, in_w, k_h, k_w, s_h, s_w, p_h, p_w, d_h, d_w;
  bool ceil_mode;
};

Pool2dGeometry geometry(const Spec& s) {
  Pool2dGeometry g;
  g.planes = s.planes, g.in_h = s.in_h, g.in_w = s.in_w;
  g.kernel_h = s.k_h, g.kernel_w = s.k_w, g.stride_h = s.s_h, g.stride_w = s.s_w;
  g.pad_h = s.p_h, g.pad_w = s.p_w, g.dilation_h = s.d_h, g.dilation_w = s.d_w;
  g.out_h = ember::kernels::pool_output_size(s.in_h, s.k_h, s.p_h, s.s_h, s.d_h, s.ceil_mode);
  g.out_w = ember::kernels::pool_output_size(s.in_w, s.k_w, s.p_w, s.s_w, s.d_w, s.ceil_mode);
  return g;
}

// Window shapes that cover the interesting cases: the common 2x2/2, overlapping windows
// (3x3 stride 2 with padding), dilation, ceil_mode partial windows, odd sizes and many planes.
const std::vector<Spec>& specs() {
  static const std::vector<Spec> all = {
      {"2x2 stride 2", 3, 8, 10, 2, 2, 2, 2, 0, 0, 1, 1, false},
      {"3x3 stride 2 pad 1 (overlapping)", 2, 9, 11, 3, 3, 2, 2, 1, 1, 1, 1, false},
      {"3x2 stride 1 pad (1,1)", 2, 7, 5, 3, 2, 1, 1, 1, 1, 1, 1, false},
      {"2x2 stride 2 ceil_mode, odd input", 2, 7, 9, 2, 2, 2, 2, 0, 0, 1, 1, true},
      {"3x3 stride 2 pad 1 ceil_mode", 1, 10, 6, 3, 3, 2, 2, 1, 1, 1, 1, true},
      {"1x1 stride 1 (identity)", 2, 3, 4, 1, 1, 1, 1, 0, 0, 1, 1, false},
      {"many planes (1000+ windows)", 37, 6, 6, 2, 2, 2, 2, 0, 0, 1, 1, false},
  };
  return all;
}

// Max pooling with indices of type I (int64, or int32 as max_pool2d keeps them).
template <typename T, typename I>
void run_max_indexed(const Pool2dGeometry& g, const std::vector<T>& x, uint64_t seed) {
  const DType dt = ember::dtype_of<T>::value, it = std::is_same_v<I, int32_t> ? DType::i32 : DType::i64;
  INFO("indices " << it);
  const size_t in_n = static_cast<size_t>(g.planes * g.in_h * g.in_w), out_n = static_cast<size_t>(g.planes * g.out_h * g.out_w);
  DeviceBuffer<T> dx(x), dout(out_n), dgo(random_vector<T>(out_n, seed)), dgi(in_n);
  DeviceBuffer<I> didx(out_n);
  ember::kernels::gpu::max_pool2d_forward(dt, it, g, dx.data(), dout.data(), didx.data());
  std::vector<T> want(out_n);
  std::vector<I> want_idx(out_n);
  ember::kernels::cpu::max_pool2d_forward(dt, it, g, x.data(), want.data(), want_idx.data());
  ember::testing::require_close(checked(dout), want, 0, 0, "max forward");
  REQUIRE(checked(didx) == want_idx);

  const std::vector<T> go = dgo.download();
  ember::kernels::gpu::max_pool2d_backward(dt, it, g, dgo.data(), didx.data(), dgi.data());
  std::vector<T> want_gi(in_n);
  ember::kernels::cpu::max_pool2d_backward(dt, it, g, go.data(), want_idx.data(), want_gi.data());
  ember::testing::require_close(checked(dgi), want_gi, 0, 0, "max backward");
}

// Both index types, which must pick the same positions (compared through int64).
template <typename T>
void run_max(const Pool2dGeometry& g, const std::vector<T>& x, uint64_t seed) {
  run_max_indexed<T, int64_t>(g, x, seed);
  run_max_indexed<T, int32_t>(g, x, seed);
  const size_t out_n = static_cast<size_t>(g.planes * g.out_h * g.out_w);
  std::vector<T> out(out_n);
  std::vector<int64_t> i64(out_n);
  std::vector<int32_t> i32(out_n);
  ember::kernels::cpu::max_pool2d_forward(ember::dtype_of<T>::value, DType::i64, g, x.data(), out.data(), i64.data());
  ember::kernels::cpu::max_pool2d_forward(ember::dtype_of<T>::value, DType::i32, g, x.data(), out.data(), i32.data());
  REQUIRE(std::vector<int64_t>(i32.begin(), i32.end()) == i64);
}

// Average forward: the CPU sums a window in double (cpu_acc_t) and rounds once, the CUDA kernel
// in acc_t<T> (Note [Accumulation types] in core/dtype.h): bit-identical for f64; for f32 a
// window of K values in [-1, 1] summed in float is within (K - 1) eps * sum |x| of the exact sum,
// and divided by a divisor >= the count of values summed that is within K eps of the average.
// The backward adds shares in T on both sides, in the same order: exact.
template <typename T>
double avg_forward_tol(int64_t window) {
  return std::is_same_v<T, float> ? static_cast<double>(window) * std::numeric_limits<float>::epsilon() : 0.0;
}

template <typename T>
void run_avg(const Pool2dGeometry& g, bool include_pad, const std::vector<T>& x, uint64_t seed) {
  const DType dt = ember::dtype_of<T>::value;
  const size_t in_n = static_cast<size_t>(g.planes * g.in_h * g.in_w), out_n = static_cast<size_t>(g.planes * g.out_h * g.out_w);
  const std::vector<T> go = random_vector<T>(out_n, seed);
  DeviceBuffer<T> dx(x), dout(out_n), dgo(go), dgi(in_n);
  ember::kernels::gpu::avg_pool2d_forward(dt, g, include_pad, dx.data(), dout.data());
  std::vector<T> want(out_n);
  ember::kernels::cpu::avg_pool2d_forward(dt, g, include_pad, x.data(), want.data());
  ember::testing::require_close(checked(dout), want, avg_forward_tol<T>(g.kernel_h * g.kernel_w), 0, "avg forward");
  ember::kernels::gpu::avg_pool2d_backward(dt, g, include_pad, dgo.data(), dgi.data());
  std::vector<T> want_gi(in_n);
  ember::kernels::cpu::avg_pool2d_backward(dt, g, include_pad, go.data(), want_gi.data());
  ember::testing::require_close(checked(dgi), want_gi, 0, 0, "avg backward");
}

template <typename T>
void run_adaptive(int64_t planes, int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w, uint64_t seed) {
  const DType dt = ember::dtype_of<T>::value;
  Pool2dGeometry g;
  g.planes = planes, g.in_h = in_h, g.in_w = in_w, g.out_h = out_h, g.out_w = out_w;
  const size_t in_n = static_cast<size_t>(planes * in_h * in_w), out_n = static_cast<size_t>(planes * out_h * out_w);
  const std::vector<T> x = random_vector<T>(in_n, seed), go = random_vector<T>(out_n, seed + 1);
  DeviceBuffer<T> dx(x), dout(out_n), dgo(go), dgi(in_n);
  ember::kernels::gpu::adaptive_avg_pool2d_forward(dt, g, dx.data(), dout.data());
  std::vector<T> want(out_n);
  ember::kernels::cpu::adaptive_avg_pool2d_forward(dt, g, x.data(), want.data());
  // A cell spans at most ceil(in / out) + 1 rows and columns.
  const int64_t cell = (in_h / out_h + 2) * (in_w / out_w + 2);
  ember::testing::require_close(checked(dout), want, avg_forward_tol<T>(cell), 0, "adaptive forward");
  ember::kernels::gpu::adaptive_avg_pool2d_backward(dt, g, dgo.data(), dgi.data());
  std::vector<T> want_gi(in_n);
  ember::kernels::cpu::adaptive_avg_pool2d_backward(dt, g, go.data(), want_gi.data());
  ember::testing::require_close(checked(dgi), want_gi, 0, 0, "adaptive backward");
}

}  // namespace

TEMPLATE_TEST_CASE("cuda max_pool2d forward/backward equal the CPU (values, ties, indices)", "[cuda][pool]", float,
                   double) {
  using T = TestType;
  uint64_t seed = 1;
  for (const Spec& s : specs()) {
    INFO(s.name);
    const Pool2dGeometry g = geometry(s);
    const size_t in_n = static_cast<size_t>(g.planes * g.in_h * g.in_w);
    run_max<T>(g, random_vector<T>(in_n, seed), seed + 1);
    run_max<T>(g, ember::testing::random_ties<T>(in_n, seed + 2), seed + 3);  // first index wins on ties
    seed += 4;
  }
  // Dilation (max pooling only).
  const Spec dil{"3x3 dilation 2 pad 2", 2, 11, 12, 3, 3, 1, 2, 2, 2, 2, 2, false};
  const Pool2dGeometry g = geometry(dil);
  run_max<T>(g, random_vector<T>(static_cast<size_t>(g.planes * g.in_h * g.in_w), 99), 100);
}

TEMPLATE_TEST_CASE("cuda max_pool2d: NaN wins and propagates, -inf inputs", "[cuda][pool]", float, double) {
  using T = TestType;
  const Pool2dGeometry g = geometry({"3x3/2 pad 1", 2, 7, 7, 3, 3, 2, 2, 1, 1, 1, 1, false});
  std::vector<T> x = random_vector<T>(static_cast<size_t>(2 * 49), 5);
  x[10] = std::numeric_limits<T>::quiet_NaN();
  x[11] = std::numeric_limits<T>::quiet_NaN();  // two NaNs in one window: the first one's index
  for (size_t i = 49; i < 98; ++i) x[i] = -std::numeric_limits<T>::infinity();  // a plane of -inf
  run_max<T>(g, x, 6);
}

TEMPLATE_TEST_CASE("cuda avg_pool2d forward/backward equal the CPU (count_include_pad both ways)", "[cuda][pool]",
                   float, double) {
  using T = TestType;
  uint64_t seed = 20;
  for (const Spec& s : specs()) {
    INFO(s.name);
    const Pool2dGeometry g = geometry(s);
    const std::vector<T> x = random_vector<T>(static_cast<size_t>(g.planes * g.in_h * g.in_w), seed++);
    for (bool include_pad : {true, false}) run_avg<T>(g, include_pad, x, seed++);
  }
  // NaN and Inf propagate to the windows that contain them (forward), and through the shares.
  const Pool2dGeometry g = geometry({"3x3/2 pad 1", 1, 6, 6, 3, 3, 2, 2, 1, 1, 1, 1, false});
  std::vector<T> x = random_vector<T>(36, 3);
  x[7] = std::numeric_limits<T>::quiet_NaN();
  x[30] = std::numeric_limits<T>::infinity();
  run_avg<T>(g, true, x, 4);
}

TEMPLATE_TEST_CASE("cuda adaptive_avg_pool2d forward/backward equal the CPU", "[cuda][pool]", float, double) {
  using T = TestType;
  run_adaptive<T>(3, 10, 10, 3, 4, 1);    // overlapping cells (10 -> 3: cells share a row)
  run_adaptive<T>(2, 7, 9, 7, 9, 2);      // identity
  run_adaptive<T>(2, 3, 5, 5, 7, 3);      // more cells than inputs
  run_adaptive<T>(4, 13, 11, 1, 1, 4);    // global average
  run_adaptive<T>(33, 8, 8, 2, 2, 5);     // many planes
}

TEST_CASE("cuda pooling: zero planes is a no-op", "[cuda][pool]") {
  Pool2dGeometry g = geometry({"empty", 0, 4, 4, 2, 2, 2, 2, 0, 0, 1, 1, false});
  DeviceBuffer<float> x(1), out(1), gi(1);
  DeviceBuffer<int64_t> idx(1);
  ember::kernels::gpu::max_pool2d_forward(DType::f32, DType::i64, g, x.data(), out.data(), idx.data());
  ember::kernels::gpu::max_pool2d_backward(DType::f32, DType::i64, g, out.data(), idx.data(), gi.data());
  ember::kernels::gpu::avg_pool2d_forward(DType::f32, g, true, x.data(), out.data());
  ember::kernels::gpu::avg_pool2d_backward(DType::f32, g, true, out.data(), gi.data());
  ember::kernels::gpu::adaptive_avg_pool2d_forward(DType::f32, g, x.data(), out.data());
  ember::kernels::gpu::adaptive_avg_pool2d_backward(DType::f32, g, out.data(), gi.data());
  out.check_guards();
  gi.check_guards();
  idx.check_guards();
  // And a bad dtype is an ember::Error.
  g.planes = 1;
  REQUIRE_THROWS_AS(ember::kernels::gpu::avg_pool2d_forward(DType::i32, g, true, x.data(), out.data()), ember::Error);
}

TEST_CASE("max pooling refuses float or too-narrow index dtypes, on the CPU and cuda", "[cuda][pool]") {
  Pool2dGeometry g = geometry({"2x2", 1, 4, 4, 2, 2, 2, 2, 0, 0, 1, 1, false});
  DeviceBuffer<float> x(16), out(4), gi(16);
  DeviceBuffer<int64_t> idx(4);
  std::vector<float> hx(16), hout(4);
  std::vector<int64_t> hidx(4);
  CHECK_THROWS_WITH(ember::kernels::gpu::max_pool2d_forward(DType::f32, DType::f32, g, x.data(), out.data(), idx.data()),
                    Catch::Contains("max_pool2d: indices must be int32 or int64, got float32"));
  CHECK_THROWS_WITH(ember::kernels::cpu::max_pool2d_forward(DType::f32, DType::u8, g, hx.data(), hout.data(), hidx.data()),
                    Catch::Contains("indices must be int32 or int64"));
  // A plane of 2^31 positions (the geometry only: nothing is read before the check) needs int64.
  Pool2dGeometry big = g;
  big.in_h = 65536, big.in_w = 32768, big.out_h = 32768, big.out_w = 16384;
  CHECK_FALSE(ember::kernels::max_pool_indices_fit(DType::i32, big));
  CHECK(ember::kernels::max_pool_indices_fit(DType::i64, big));
  CHECK_THROWS_WITH(ember::kernels::cpu::max_pool2d_forward(DType::f32, DType::i32, big, hx.data(), hout.data(),
                                                            hidx.data()),
                    Catch::Contains("65536x32768 plane has more positions than int32 indices can address"));
  CHECK_THROWS_WITH(ember::kernels::gpu::max_pool2d_backward(DType::f32, DType::i32, big, out.data(), idx.data(),
                                                             gi.data()),
                    Catch::Contains("int32 indices"));
}
