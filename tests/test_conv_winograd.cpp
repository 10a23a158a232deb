// The Winograd F(2x2, 3x3) convolution (kernels/cpu/conv_winograd.h): forward, input gradient and
// weight gradient against the float64 direct references over odd and even sizes, paddings 0-2,
// blocks of tiles that cross images and threads; the AVX-512 and portable transforms bit for
// bit, in f32 and bf16; bf16 against float32 on the widened values; which geometries take the
// path; and conv2d's autograd on it.

#include <catch2/catch.hpp>
#include <cmath>
#include <ember/ember.h>
#include <ember/kernels/cpu/conv.h>
#include <ember/kernels/cpu/conv_winograd.h>
#include <random>
#include <vector>

#include "test_util.h"

using namespace ember;
namespace kc = ember::kernels::cpu;

namespace {

using VF = std::vector<float>;
using VD = std::vector<double>;

kernels::Conv2dGeometry geometry(int64_t n, int64_t c_in, int64_t h, int64_t w, int64_t c_out, int64_t pad_h,
                                 int64_t pad_w) {
  kernels::Conv2dGeometry g;
  g.n = n, g.c_in = c_in, g.h = h, g.w = w, g.c_out = c_out, g.kh = 3, g.kw = 3;
  g.pad_h = pad_h, g.pad_w = pad_w;
  g.out_h = kernels::conv2d_out_size(h, 3, 1, pad_h, 1);
  g.out_w = kernels::conv2d_out_size(w, 3, 1, pad_w, 1);
  return g;
}

VF random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  VF v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

VD widen(const VF& v) { return VD(v.begin(), v.end()); }
VD absolute(const VD& v) {
  VD a(v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = std::abs(v[i]);
  return a;
}

// Every element of `got` within rel * scale of `want`, where scale is the same sum over absolute
// values (the size of the terms the sum rounded), plus a tiny floor.
void check_bound(const VF& got, const VD& want, const VD& scale, double rel) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]) / (scale[i] + 1e-30));
  INFO("worst error / sum of |terms| = " << worst);
  CHECK(worst <= rel);
}

struct Case {
  int64_t n, c_in, h, w, c_out, pad_h, pad_w;
};

// The three passes of one geometry on the Winograd path, each against the float64 reference;
// the errors are bounded relative to the sum of the absolute values of the terms.
void check_against_reference(const Case& c) {
  const kernels::Conv2dGeometry g = geometry(c.n, c.c_in, c.h, c.w, c.c_out, c.pad_h, c.pad_w);
  REQUIRE(kc::winograd_applies(g, false));
  const int64_t xn = g.n * g.c_in * g.h * g.w, wn = g.c_out * g.c_in * 9, yn = g.n * g.c_out * g.out_h * g.out_w;
  const VF x = random_floats(xn, 1), w = random_floats(wn, 2), bias = random_floats(g.c_out, 3),
           gy = random_floats(yn, 4);
  const VD xd = widen(x), wd = widen(w), gyd = widen(gy), bd = widen(bias);
  const VD xa = absolute(xd), wa = absolute(wd), gya = absolute(gyd), ba = absolute(bd);

  VF y(yn), gx(xn), gw(wn);
  VD y_ref(yn), gx_ref(xn), gw_ref(wn), y_abs(yn), gx_abs(xn), gw_abs(wn);
  const int64_t before = kc::winograd_convolutions();
  kc::conv2d_forward(DType::f32, g, x.data(), w.data(), bias.data(), y.data());
  kc::conv2d_backward_data(DType::f32, g, gy.data(), w.data(), gx.data());
  kc::conv2d_backward_weight(DType::f32, g, gy.data(), x.data(), gw.data());
  CHECK(kc::winograd_convolutions() == before + 3);

  kc::conv2d_forward_reference(DType::f64, g, xd.data(), wd.data(), bd.data(), y_ref.data());
  kc::conv2d_forward_reference(DType::f64, g, xa.data(), wa.data(), ba.data(), y_abs.data());
  kc::conv2d_backward_data_reference(DType::f64, g, gyd.data(), wd.data(), gx_ref.data());
  kc::conv2d_backward_data_reference(DType::f64, g, gya.data(), wa.data(), gx_abs.data());
  kc::conv2d_backward_weight_reference(DType::f64, g, gyd.data(), xd.data(), gw_ref.data());
  kc::conv2d_backward_weight_reference(DType::f64, g, gya.data(), xa.data(), gw_abs.data());
  // float32 rounding (6e-8) times the growth of the transforms (up to 4 times the inputs, 9/4 the
  // weights): 2.8e-7 of the sum of |terms| in the worst element of these cases.
  check_bound(y, y_ref, y_abs, 2e-6);
  check_bound(gx, gx_ref, gx_abs, 2e-6);
  check_bound(gw, gw_ref, gw_abs, 2e-6);
}

}  // namespace

TEST_CASE("winograd conv: forward and both gradients match the float64 reference", "[conv][winograd]") {
  testing::ThreadsGuard keep;
  const bool saved = kc::winograd_vectorized();
  const std::vector<Case> cases = {
      {2, 16, 14, 14, 32, 1, 1},  // the cnn model's second layer, smaller
      {3, 17, 9, 9, 19, 1, 1},    // odd sizes: the last tile row and column are cut
      {1, 16, 8, 11, 16, 0, 0},   // no padding, a 6 x 9 output
      {2, 16, 7, 10, 20, 2, 2},   // padding 2: the input gradient's padding is 0
      {2, 18, 10, 9, 16, 2, 0},   // padding differs between the dimensions
      {5, 16, 21, 21, 16, 1, 1},  // 605 tiles: blocks of 512 cross images and parts
      {1, 16, 3, 40, 17, 1, 1},   // one tile row of 20 tiles (3 AVX-512 input groups, 2 output)
  };
  std::vector<bool> vector_modes = {false};
  if (kc::set_winograd_vectorized(true)) vector_modes.push_back(true);
  for (bool vec : vector_modes)
    for (int threads : {1, 2})
      for (size_t i = 0; i < cases.size(); ++i) {
        REQUIRE(kc::set_winograd_vectorized(vec));
        set_num_threads(threads);
        INFO("case " << i << ", threads " << threads << ", AVX-512 transforms " << vec);
        check_against_reference(cases[i]);
      }
  kc::set_winograd_vectorized(saved);
}

TEST_CASE("winograd conv: the AVX-512 and portable transforms give the same bits (f32 and bf16)", "[conv][winograd]") {
  const bool saved = kc::winograd_vectorized();
  if (!kc::set_winograd_vectorized(true)) {
    WARN("this CPU has no AVX-512F: only the portable transforms exist here");
    CHECK_FALSE(kc::winograd_vectorized());
    return;
  }
  testing::ThreadsGuard keep;
  set_num_threads(1);
  const kernels::Conv2dGeometry g = geometry(3, 16, 13, 27, 24, 1, 2);
  const int64_t xn = g.n * g.c_in * g.h * g.w, wn = g.c_out * g.c_in * 9, yn = g.n * g.c_out * g.out_h * g.out_w;
  const VF x = random_floats(xn, 5), w = random_floats(wn, 6), bias = random_floats(g.c_out, 7),
           gy = random_floats(yn, 8);
  auto run = [&](bool vec) {
    REQUIRE(kc::set_winograd_vectorized(vec));
    VF y(yn), gx(xn), gw(wn);
    kc::conv2d_forward(DType::f32, g, x.data(), w.data(), bias.data(), y.data());
    kc::conv2d_backward_data(DType::f32, g, gy.data(), w.data(), gx.data());
    kc::conv2d_backward_weight(DType::f32, g, gy.data(), x.data(), gw.data());
    return std::vector<VF>{y, gx, gw};
  };
  const std::vector<VF> wide = run(true), portable = run(false);
  for (int pass = 0; pass < 3; ++pass) {
    INFO("pass " << pass);
    CHECK(wide[pass] == portable[pass]);
  }
  // bf16: the AVX-512 loops widen while loading and round while storing; the portable ones per element.
  auto to_bf16 = [](const VF& v) {
    std::vector<BFloat16> b;
    for (float f : v) b.push_back(BFloat16(f));
    return b;
  };
  const std::vector<BFloat16> xb = to_bf16(x), wb = to_bf16(w), bb = to_bf16(bias), gyb = to_bf16(gy);
  auto run_bf16 = [&](bool vec) {
    REQUIRE(kc::set_winograd_vectorized(vec));
    std::vector<BFloat16> y(yn), gx(xn), gw(wn);
    kc::conv2d_forward(DType::bf16, g, xb.data(), wb.data(), bb.data(), y.data());
    kc::conv2d_backward_data(DType::bf16, g, gyb.data(), wb.data(), gx.data());
    kc::conv2d_backward_weight(DType::bf16, g, gyb.data(), xb.data(), gw.data());
    std::vector<std::vector<uint16_t>> bits(3);
    for (const BFloat16& v : y) bits[0].push_back(v.bits);
    for (const BFloat16& v : gx) bits[1].push_back(v.bits);
    for (const BFloat16& v : gw) bits[2].push_back(v.bits);
    return bits;
  };
  const auto wide16 = run_bf16(true), portable16 = run_bf16(false);
  for (int pass = 0; pass < 3; ++pass) {
    INFO("bf16 pass " << pass);
    CHECK(wide16[pass] == portable16[pass]);
  }
  kc::set_winograd_vectorized(saved);
}

TEST_CASE("winograd conv: which convolutions take the path", "[conv][winograd]") {
  REQUIRE(kc::conv3x3_path() == kc::Conv3x3Path::winograd);  // the default (EMBER_CPU_CONV unset)
  const kernels::Conv2dGeometry base = geometry(2, 16, 8, 8, 16, 1, 1);
  CHECK(kc::winograd_applies(base, false));
  CHECK(kc::winograd_applies(base, true));
  auto with = [&](auto change) {
    kernels::Conv2dGeometry g = base;
    change(g);
    return kc::winograd_applies(g, false);
  };
  CHECK_FALSE(with([](auto& g) { g.c_in = 15; }));  // too few channels: im2col's one GEMM is faster
  CHECK_FALSE(with([](auto& g) { g.c_out = 1; }));
  CHECK_FALSE(with([](auto& g) { g.stride_h = 2; }));
  CHECK_FALSE(with([](auto& g) { g.dil_w = 2; }));
  CHECK_FALSE(with([](auto& g) { g.groups = 2; }));
  CHECK_FALSE(with([](auto& g) { g.kw = 5; }));
  CHECK_FALSE(with([](auto& g) { g.pad_h = 3; }));  // the input gradient would need padding -1
  // Forcing im2col turns it off, and the two paths agree to float32 rounding.
  const VF x = random_floats(base.n * 16 * 64, 9), w = random_floats(16 * 16 * 9, 10);
  VF y_w(base.n * 16 * 64), y_i(base.n * 16 * 64);
  kc::conv2d_forward(DType::f32, base, x.data(), w.data(), nullptr, y_w.data());
  kc::set_conv3x3_path(kc::Conv3x3Path::im2col);
  CHECK_FALSE(kc::winograd_applies(base, false));
  const int64_t before = kc::winograd_convolutions();
  kc::conv2d_forward(DType::f32, base, x.data(), w.data(), nullptr, y_i.data());
  CHECK(kc::winograd_convolutions() == before);
  kc::set_conv3x3_path(kc::Conv3x3Path::winograd);
  for (size_t i = 0; i < y_w.size(); ++i) CHECK(y_w[i] == Approx(y_i[i]).margin(1e-4));
  CHECK(std::string(kc::conv3x3_path_name(kc::Conv3x3Path::winograd)) == "winograd F(2x2,3x3)");
}

TEST_CASE("winograd conv: conv2d's autograd runs it and matches float64", "[conv][winograd]") {
  Generator gen(11);
  Tensor x = randn({2, 16, 10, 10}, {}, gen).requires_grad_();
  Tensor w = randn({24, 16, 3, 3}, {}, gen).requires_grad_();
  Tensor b = randn({24}, {}, gen).requires_grad_();
  const int64_t before = kc::winograd_convolutions();
  Tensor y = conv2d(x, w, b, {.padding = {1, 1}});
  Tensor gy = randn(y.shape(), {}, gen);
  y.backward(gy);
  CHECK(kc::winograd_convolutions() == before + 3);  // forward, input and weight gradients
  Tensor xd = x.detach().to(DType::f64).requires_grad_(), wd = w.detach().to(DType::f64).requires_grad_();
  Tensor bd = b.detach().to(DType::f64).requires_grad_();
  Tensor yd = conv2d(xd, wd, bd, {.padding = {1, 1}});
  yd.backward(gy.to(DType::f64));
  testing::check_close(y, yd.to_vector<double>(), 1e-4, 1e-5);
  testing::check_close(x.grad(), xd.grad().to_vector<double>(), 1e-4, 1e-5);
  testing::check_close(w.grad(), wd.grad().to_vector<double>(), 1e-4, 1e-5);
}

TEST_CASE("winograd conv: bf16 computes what float32 computes on the widened values, rounded once", "[conv][winograd][bf16]") {
  const kernels::Conv2dGeometry g = geometry(2, 16, 9, 12, 24, 1, 1);
  const int64_t xn = g.n * g.c_in * g.h * g.w, wn = g.c_out * g.c_in * 9, yn = g.n * g.c_out * g.out_h * g.out_w;
  auto bf16_values = [](size_t n, uint32_t seed) {  // bf16 values and their exact float32 widening
    const VF f = random_floats(n, seed);
    std::vector<BFloat16> b(n);
    VF wide(n);
    for (size_t i = 0; i < n; ++i) {
      b[i] = BFloat16(f[i]);
      wide[i] = static_cast<float>(b[i]);
    }
    return std::pair{b, wide};
  };
  const auto [x, xf] = bf16_values(xn, 12);
  const auto [w, wf] = bf16_values(wn, 13);
  const auto [bias, bf] = bf16_values(g.c_out, 14);
  const auto [gy, gyf] = bf16_values(yn, 15);
  std::vector<BFloat16> y(yn), gx(xn), gw(wn);
  const int64_t before = kc::winograd_convolutions();
  kc::conv2d_forward(DType::bf16, g, x.data(), w.data(), bias.data(), y.data());
  kc::conv2d_backward_data(DType::bf16, g, gy.data(), w.data(), gx.data());
  kc::conv2d_backward_weight(DType::bf16, g, gy.data(), x.data(), gw.data());
  CHECK(kc::winograd_convolutions() == before + 3);
  VF y32(yn), gx32(xn), gw32(wn);
  kc::winograd_forward(g, xf.data(), wf.data(), bf.data(), y32.data());
  kc::winograd_backward_data(g, gyf.data(), wf.data(), gx32.data());
  kc::winograd_backward_weight(g, gyf.data(), xf.data(), gw32.data());
  auto same = [](const std::vector<BFloat16>& got, const VF& f32) {
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i].bits != BFloat16(f32[i]).bits) return false;
    return true;
  };
  CHECK(same(y, y32));
  CHECK(same(gx, gx32));
  CHECK(same(gw, gw32));
}
