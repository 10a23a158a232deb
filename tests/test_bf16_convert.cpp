// The vectorized bf16 conversion and ReLU loops (Note [Vectorized bf16 conversion on the CPU] in
// kernels/cpu/bf16_convert.h) against the scalar ones, bit for bit: every bf16 bit pattern, f32
// edge values (ties both ways, subnormals, infinities, NaNs with payloads, the largest finite
// values) and random bits, at lengths that leave a scalar tail; and the elementwise ops and max
// pooling that call them, against scalar references on the same inputs.

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <ember/kernels/cpu/bf16_convert.h>
#include <ember/kernels/cpu/cpu_features.h>

#include "test_util.h"

using namespace ember;
using namespace ember::kernels::cpu;

namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// f32 values where rounding to bf16 is delicate, plus random bit patterns.
std::vector<float> edge_floats() {
  std::vector<uint32_t> bits;
  const uint32_t hi_patterns[] = {0x0000, 0x0001, 0x007f, 0x0080, 0x0081, 0x3f80, 0x3f81, 0x7f7f, 0x7f80,
                                  0x7f81, 0x7fbf, 0x7fc0, 0x7fff, 0x4049, 0x3380, 0x0040};
  const uint32_t lo_patterns[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000, 0xc000};
  for (uint32_t sign : {0u, 0x80000000u})
    for (uint32_t h : hi_patterns)
      for (uint32_t l : lo_patterns) bits.push_back(sign | (h << 16) | l);
  std::mt19937 rng(12);
  for (int i = 0; i < 4000; ++i) bits.push_back(rng());
  std::vector<float> v;
  for (uint32_t b : bits) v.push_back(from_bits(b));
  return v;
}

// The elements of a bf16 CPU tensor, in order.
std::vector<BFloat16> bf16_values(const Tensor& t) {
  const Tensor c = t.contiguous();
  const BFloat16* p = c.data_ptr<BFloat16>();
  return std::vector<BFloat16>(p, p + c.numel());
}

std::vector<BFloat16> all_bf16() {
  std::vector<BFloat16> v(65536);
  for (uint32_t b = 0; b < 65536; ++b) v[b].bits = static_cast<uint16_t>(b);
  return v;
}

}  // namespace

TEST_CASE("bf16 convert: the path follows the CPU's features", "[bf16][elementwise]") {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx512f && f.avx512bw && f.avx512vl)) CHECK_FALSE(bf16_convert_vectorized());
  INFO("vectorized: " << bf16_convert_vectorized());
  SUCCEED();
}

TEST_CASE("bf16 convert: f32 -> bf16 equals the scalar rounding bit for bit", "[bf16][elementwise]") {
  const std::vector<float> src = edge_floats();
  // Spot checks of the scalar rule itself: a tie rounds to even, NaN stays NaN with the quiet bit.
  CHECK(BFloat16(from_bits(0x3f808000u)).bits == 0x3f80);
  CHECK(BFloat16(from_bits(0x3f818000u)).bits == 0x3f82);
  CHECK(BFloat16(from_bits(0x7f7fffffu)).bits == 0x7f80);  // the largest float rounds to inf
  CHECK(BFloat16(from_bits(0x7f800001u)).bits == 0x7fc0);  // a signalling NaN is quieted
  CHECK(BFloat16(from_bits(0x00008000u)).bits == 0x0000);  // a subnormal tie to even (0)
  CHECK(BFloat16(from_bits(0x00018000u)).bits == 0x0002);
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(15), int64_t(16), int64_t(17), int64_t(src.size())}) {
    std::vector<BFloat16> want(n), got(n);
    f32_to_bf16_scalar(src.data(), want.data(), n);
    f32_to_bf16(src.data(), got.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      INFO("input bits 0x" << std::hex << to_bits(src[i]));
      REQUIRE(got[i].bits == want[i].bits);
    }
  }
}

TEST_CASE("bf16 convert: bf16 -> f32 equals the scalar widening for every bf16", "[bf16][elementwise]") {
  const std::vector<BFloat16> src = all_bf16();
  const int64_t n = static_cast<int64_t>(src.size()) - 3;  // a scalar tail too
  std::vector<float> want(n), got(n);
  bf16_to_f32_scalar(src.data(), want.data(), n);
  bf16_to_f32(src.data(), got.data(), n);
  for (int64_t i = 0; i < n; ++i) REQUIRE(to_bits(got[i]) == to_bits(want[i]));
}

TEST_CASE("bf16 convert: ReLU forward and backward equal the scalar functor for every bf16", "[bf16][elementwise]") {
  const std::vector<BFloat16> x = all_bf16();
  const int64_t n = static_cast<int64_t>(x.size()) - 5;
  std::vector<BFloat16> want(n), got(n);
  relu_bf16_scalar(x.data(), want.data(), n);
  relu_bf16(x.data(), got.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    INFO("x bits 0x" << std::hex << x[i].bits);
    REQUIRE(got[i].bits == want[i].bits);
  }
  // Backward: every bf16 as g, against y cycling through every bf16 at another offset.
  std::vector<BFloat16> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = x[(i * 7919 + 11) % 65536];
  relu_backward_bf16_scalar(x.data(), y.data(), want.data(), n);
  relu_backward_bf16(x.data(), y.data(), got.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    INFO("g bits 0x" << std::hex << x[i].bits << " y bits 0x" << y[i].bits);
    REQUIRE(got[i].bits == want[i].bits);
  }
}

TEST_CASE("f32 ReLU loops: forward and backward equal the scalar functor bit for bit", "[elementwise]") {
  // Every bf16 pattern widened (signs, zeros, subnormals, infinities, NaN payloads), plus f32
  // subnormals and the smallest values around zero; n leaves a masked tail.
  std::vector<float> x;
  for (const BFloat16& b : all_bf16()) x.push_back(static_cast<float>(b));
  for (float v : {1e-45f, -1e-45f, 1.17e-38f, -1.17e-38f, 0.0f, -0.0f}) x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size()) - 3;
  std::vector<float> want(n), got(n);
  relu_f32_scalar(x.data(), want.data(), n);
  relu_f32(x.data(), got.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    INFO("x bits 0x" << std::hex << to_bits(x[i]));
    REQUIRE(to_bits(got[i]) == to_bits(want[i]));
  }
  std::vector<float> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = x[(i * 7919 + 11) % n];
  relu_backward_f32_scalar(x.data(), y.data(), want.data(), n);
  relu_backward_f32(x.data(), y.data(), got.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    INFO("g bits 0x" << std::hex << to_bits(x[i]) << " y bits 0x" << to_bits(y[i]));
    REQUIRE(to_bits(got[i]) == to_bits(want[i]));
  }
}

// Through the public ops: bf16 relu, its gradient, the casts and 2x2 max pooling give the bits of
// the scalar per-element rules on inputs with NaNs, infinities, zeros of both signs and ties.
TEST_CASE("bf16 convert: the ops that use it give the scalar results", "[bf16][elementwise]") {
  std::mt19937 rng(5);
  const int64_t n = 2 * 3 * 10 * 34;  // not a multiple of 16
  std::vector<float> xf(n);
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, from_bits(0x7f800001u), from_bits(0x3f808000u)};
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int64_t i = 0; i < n; ++i) xf[i] = (i % 13 == 0) ? specials[(i / 13) % 7] : nd(rng);

  Tensor x32 = from_vector(xf, {2, 3, 10, 34});
  Tensor xb = x32.to(DType::bf16);
  std::vector<BFloat16> want_b(n);
  f32_to_bf16_scalar(xf.data(), want_b.data(), n);
  const std::vector<BFloat16> got_b = bf16_values(xb);
  for (int64_t i = 0; i < n; ++i) REQUIRE(got_b[i].bits == want_b[i].bits);

  std::vector<float> want_back(n);
  bf16_to_f32_scalar(want_b.data(), want_back.data(), n);
  const std::vector<float> got_back = xb.to(DType::f32).to_vector<float>();
  for (int64_t i = 0; i < n; ++i) REQUIRE(to_bits(got_back[i]) == to_bits(want_back[i]));

  Tensor xr = xb.detach().requires_grad_(true);
  Tensor y = relu(xr);
  std::vector<BFloat16> want_y(n);
  relu_bf16_scalar(want_b.data(), want_y.data(), n);
  const std::vector<BFloat16> got_y = bf16_values(y);
  for (int64_t i = 0; i < n; ++i) REQUIRE(got_y[i].bits == want_y[i].bits);

  std::vector<float> gf(n);  // another set of values, NaNs included
  for (int64_t i = 0; i < n; ++i) gf[i] = xf[(i * 37 + 5) % n];
  Tensor g = from_vector(gf, {2, 3, 10, 34}).to(DType::bf16);
  y.backward(g);
  const std::vector<BFloat16> gb = bf16_values(g);
  std::vector<BFloat16> want_gi(n);
  relu_backward_bf16_scalar(gb.data(), want_y.data(), want_gi.data(), n);
  const std::vector<BFloat16> got_gi = bf16_values(xr.grad());
  for (int64_t i = 0; i < n; ++i) REQUIRE(got_gi[i].bits == want_gi[i].bits);

  // 2x2 max pooling: the bf16 result is the f32 result on the widened input, rounded, with the same
  // indices; also on a plane with odd height and width (the last row and column are not read).
  for (const Shape& shape : {Shape{2, 3, 10, 34}, Shape{2, 3, 15, 17}, Shape{1, 2, 5, 68}}) {
    const Tensor xs = xb.reshape(Shape{n}).narrow(0, 0, shape[0] * shape[1] * shape[2] * shape[3]).reshape(shape);
    auto [pb, ib] = max_pool2d_with_indices(xs, Pool2dOptions{});
    auto [pf, iff] = max_pool2d_with_indices(xs.to(DType::f32), Pool2dOptions{});
    const std::vector<float> pfv = pf.to_vector<float>();
    std::vector<BFloat16> want_p(pfv.size());
    f32_to_bf16_scalar(pfv.data(), want_p.data(), static_cast<int64_t>(pfv.size()));
    const std::vector<BFloat16> got_p = bf16_values(pb);
    REQUIRE(got_p.size() == want_p.size());
    for (size_t i = 0; i < got_p.size(); ++i) REQUIRE(got_p[i].bits == want_p[i].bits);
    CHECK(ib.to_vector<int64_t>() == iff.to_vector<int64_t>());
  }
}
