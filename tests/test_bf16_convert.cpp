// The vectorized bf16 and f16 conversion and ReLU loops (Note [Vectorized bf16 conversion on the
// CPU] in kernels/cpu/bf16/bf16_convert.h) against the scalar ones, bit for bit: every 16-bit pattern, f32
// edge values (ties both ways, subnormals, infinities, NaNs with payloads, the largest finite
// values) and random bits, at lengths that leave a scalar tail; and the elementwise ops and max
// pooling that call them, against scalar references on the same inputs.

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <ember/kernels/cpu/bf16/bf16_convert.h>
#include <ember/core/cpu/cpu_features.h>

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

// Every bit pattern of a 16-bit type (BFloat16 or Half).
template <typename T>
std::vector<T> all_16bit() {
  std::vector<T> v(65536);
  for (uint32_t b = 0; b < 65536; ++b) v[b].bits = static_cast<uint16_t>(b);
  return v;
}
std::vector<BFloat16> all_bf16() { return all_16bit<BFloat16>(); }

// f32 -> a 16-bit type: the vectorized loop against the scalar one on src, at lengths around the
// vector width (masked tails) and whole.
template <typename T>
void check_narrowing(const std::vector<float>& src, void (*narrow)(const float*, T*, int64_t),
                     void (*narrow_scalar)(const float*, T*, int64_t)) {
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(15), int64_t(16), int64_t(17), int64_t(src.size())}) {
    std::vector<T> want(n), got(n);
    narrow_scalar(src.data(), want.data(), n);
    narrow(src.data(), got.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      INFO("input bits 0x" << std::hex << to_bits(src[i]));
      REQUIRE(got[i].bits == want[i].bits);
    }
  }
}

// The vectorized loops of a 16-bit type against its scalar ones, on every bit pattern: widening,
// and ReLU forward and backward (every pattern as g, against y cycling through every pattern at
// another offset). The lengths leave a masked tail.
template <typename T>
void check_every_value(void (*widen)(const T*, float*, int64_t), void (*widen_scalar)(const T*, float*, int64_t),
                       void (*relu)(const T*, T*, int64_t), void (*relu_scalar)(const T*, T*, int64_t),
                       void (*relu_bwd)(const T*, const T*, T*, int64_t),
                       void (*relu_bwd_scalar)(const T*, const T*, T*, int64_t)) {
  const std::vector<T> x = all_16bit<T>();
  {
    const int64_t n = static_cast<int64_t>(x.size()) - 3;
    std::vector<float> want(n), got(n);
    widen_scalar(x.data(), want.data(), n);
    widen(x.data(), got.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      INFO("bits 0x" << std::hex << x[i].bits);
      REQUIRE(to_bits(got[i]) == to_bits(want[i]));
    }
  }
  const int64_t n = static_cast<int64_t>(x.size()) - 5;
  std::vector<T> y(n), want(n), got(n);
  for (int64_t i = 0; i < n; ++i) y[i] = x[(i * 7919 + 11) % 65536];
  auto same = [&](const char* what) {  // every element; the inputs named in the message
    for (int64_t i = 0; i < n; ++i) {
      INFO(what << ": x (or g) bits 0x" << std::hex << x[i].bits << ", y bits 0x" << y[i].bits);
      REQUIRE(got[i].bits == want[i].bits);
    }
  };
  relu_scalar(x.data(), want.data(), n);
  relu(x.data(), got.data(), n);
  same("relu");
  relu_bwd_scalar(x.data(), y.data(), want.data(), n);
  relu_bwd(x.data(), y.data(), got.data(), n);
  same("relu backward");
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
  check_narrowing<BFloat16>(src, f32_to_bf16, f32_to_bf16_scalar);
}

TEST_CASE("bf16 convert: widening and ReLU forward and backward equal the scalar loops for every bf16", "[bf16][elementwise]") {
  check_every_value<BFloat16>(bf16_to_f32, bf16_to_f32_scalar, relu_bf16, relu_bf16_scalar, relu_backward_bf16,
                              relu_backward_bf16_scalar);
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


// ---- f16: the same loops on IEEE binary16 (VCVTPH2PS / VCVTPS2PH with the NaN lanes rebuilt) ----

namespace {

std::vector<Half> all_f16() { return all_16bit<Half>(); }

// f32 values where rounding to f16 is delicate: around the largest finite f16 (65504) and the
// overflow threshold (65520), the subnormal range and its ties, the halfway points between
// neighbouring f16 values, NaNs with payloads; plus the bf16-sensitive set and random bits.
std::vector<float> edge_floats_f16() {
  std::vector<float> v = edge_floats();
  for (uint32_t b : {0x477fe000u, 0x477fefffu, 0x477ff000u, 0x477ff001u, 0x47800000u, 0x33000000u, 0x33000001u,
                     0x33800000u, 0x337fffffu, 0x387fc000u, 0x387fe000u, 0x38800000u, 0x3f801000u, 0x3f803000u,
                     0x3f802fffu, 0x7f800001u, 0x7fc00000u, 0xffa00000u, 0x7f801234u, 0x00000001u})
    for (uint32_t sign : {0u, 0x80000000u}) v.push_back(from_bits(b | sign));
  for (const Half& h : all_f16()) {  // every f16 value, and the points halfway to the next one
    const float f = static_cast<float>(h);
    v.push_back(f);
    if (std::isfinite(f)) v.push_back(from_bits(to_bits(f) + 0x1000u));
  }
  return v;
}

}  // namespace

TEST_CASE("f16 convert: f32 -> f16 equals the scalar rounding bit for bit", "[f16][elementwise]") {
  const std::vector<float> src = edge_floats_f16();
  // Spot checks of the scalar rule itself: ties to even, overflow, subnormals, canonical NaN.
  CHECK(Half(from_bits(0x3f801000u)).bits == 0x3c00);  // 1 + 2^-11: a tie, to even (1)
  CHECK(Half(from_bits(0x3f803000u)).bits == 0x3c02);  // 1 + 3 * 2^-11: a tie, to even (1 + 2^-9)
  CHECK(Half(65520.0f).bits == 0x7c00);                // halfway to 65536 rounds up: infinity
  CHECK(Half(65519.0f).bits == 0x7bff);
  CHECK(Half(from_bits(0x33800000u)).bits == 0x0001);  // 2^-24, the smallest subnormal
  CHECK(Half(from_bits(0x33000000u)).bits == 0x0000);  // 2^-25: a tie, to even (0)
  CHECK(Half(from_bits(0xffa00000u)).bits == 0xfe00);  // a NaN: sign kept, payload dropped
  check_narrowing<Half>(src, f32_to_f16, f32_to_f16_scalar);
}

TEST_CASE("f16 convert: widening and ReLU forward and backward equal the scalar loops for every f16", "[f16][elementwise]") {
  check_every_value<Half>(f16_to_f32, f16_to_f32_scalar, relu_f16, relu_f16_scalar, relu_backward_f16,
                          relu_backward_f16_scalar);
}

// Through the public ops on 16-bit tensors of type T (dtype dt): the casts both ways, relu and
// its gradient give the bits of the scalar per-element rules, on inputs with NaNs, infinities,
// zeros of both signs and ties; 2x2 max pooling gives the f32 result on the widened input,
// rounded, with the same indices (also on planes with odd height and width, whose last row and
// column are not read), and its gradient lands where the f32 one does.
template <typename T>
void check_ops(DType dt, const std::vector<float>& specials, void (*narrow_scalar)(const float*, T*, int64_t),
               void (*widen_scalar)(const T*, float*, int64_t), void (*relu_scalar)(const T*, T*, int64_t),
               void (*relu_bwd_scalar)(const T*, const T*, T*, int64_t)) {
  auto values = [](const Tensor& t) {
    const Tensor c = t.contiguous();
    const T* p = c.data_ptr<T>();
    return std::vector<T>(p, p + c.numel());
  };
  std::mt19937 rng(5);
  const int64_t n = 2 * 3 * 10 * 34;  // not a multiple of 16
  std::vector<float> xf(n);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const int64_t ns = static_cast<int64_t>(specials.size());
  for (int64_t i = 0; i < n; ++i) xf[i] = (i % 13 == 0) ? specials[(i / 13) % ns] : nd(rng);

  Tensor x16 = from_vector(xf, {2, 3, 10, 34}).to(dt);
  std::vector<T> want_x(n);
  narrow_scalar(xf.data(), want_x.data(), n);
  const std::vector<T> got_x = values(x16);
  for (int64_t i = 0; i < n; ++i) REQUIRE(got_x[i].bits == want_x[i].bits);

  std::vector<float> want_back(n);
  widen_scalar(want_x.data(), want_back.data(), n);
  const std::vector<float> got_back = x16.to(DType::f32).to_vector<float>();
  for (int64_t i = 0; i < n; ++i) REQUIRE(to_bits(got_back[i]) == to_bits(want_back[i]));

  Tensor xr = x16.detach().requires_grad_(true);
  Tensor y = relu(xr);
  std::vector<T> want_y(n);
  relu_scalar(want_x.data(), want_y.data(), n);
  const std::vector<T> got_y = values(y);
  for (int64_t i = 0; i < n; ++i) REQUIRE(got_y[i].bits == want_y[i].bits);

  std::vector<float> gf(n);  // another set of values, NaNs included
  for (int64_t i = 0; i < n; ++i) gf[i] = xf[(i * 37 + 5) % n];
  Tensor g = from_vector(gf, {2, 3, 10, 34}).to(dt);
  y.backward(g);
  const std::vector<T> g16 = values(g);
  std::vector<T> want_gi(n);
  relu_bwd_scalar(g16.data(), want_y.data(), want_gi.data(), n);
  const std::vector<T> got_gi = values(xr.grad());
  for (int64_t i = 0; i < n; ++i) REQUIRE(got_gi[i].bits == want_gi[i].bits);

  for (const Shape& shape : {Shape{2, 3, 10, 34}, Shape{2, 3, 15, 17}, Shape{1, 2, 5, 68}}) {
    const Tensor xs = x16.reshape(Shape{n}).narrow(0, 0, shape[0] * shape[1] * shape[2] * shape[3]).reshape(shape);
    auto [p16, i16] = max_pool2d_with_indices(xs, Pool2dOptions{});
    auto [pf, iff] = max_pool2d_with_indices(xs.to(DType::f32), Pool2dOptions{});
    const std::vector<float> pfv = pf.to_vector<float>();
    std::vector<T> want_p(pfv.size());
    narrow_scalar(pfv.data(), want_p.data(), static_cast<int64_t>(pfv.size()));
    const std::vector<T> got_p = values(p16);
    REQUIRE(got_p.size() == want_p.size());
    for (size_t i = 0; i < got_p.size(); ++i) REQUIRE(got_p[i].bits == want_p[i].bits);
    CHECK(i16.to_vector<int64_t>() == iff.to_vector<int64_t>());

    Tensor xg = xs.detach().requires_grad_(true), xg32 = xs.to(DType::f32).detach().requires_grad_(true);
    const Tensor gp = from_vector(std::vector<float>(got_p.size(), 0.5f), p16.shape());
    max_pool2d(xg, Pool2dOptions{}).backward(gp.to(dt));
    max_pool2d(xg32, Pool2dOptions{}).backward(gp);
    CHECK(xg.grad().to(DType::f32).to_vector<float>() == xg32.grad().to_vector<float>());
  }
}

TEST_CASE("bf16 convert: the ops that use it give the scalar results", "[bf16][elementwise]") {
  check_ops<BFloat16>(DType::bf16,
                      {0.0f, -0.0f, INFINITY, -INFINITY, NAN, from_bits(0x7f800001u), from_bits(0x3f808000u)},
                      f32_to_bf16_scalar, bf16_to_f32_scalar, relu_bf16_scalar, relu_backward_bf16_scalar);
}

TEST_CASE("f16 convert: the ops that use it give the scalar results", "[f16][elementwise]") {
  check_ops<Half>(DType::f16, {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 65520.0f, from_bits(0x33000000u)},
                  f32_to_f16_scalar, f16_to_f32_scalar, relu_f16_scalar, relu_backward_f16_scalar);
}
