// The Winograd F(2x2, 3x3) convolution (kernels/cpu/winograd/conv_winograd.h): forward, input gradient and
// weight gradient against the float64 direct references over odd and even sizes, paddings 0-2,
// blocks of tiles that cross images and threads; the AVX-512 and portable transforms bit for
// bit, in f32 and bf16 (both plane types); bf16 on float32 planes against float32 on the widened
// values; bf16 on bf16 planes against a scalar reference of its definition and against float64;
// bf16 on bf16 pairs on every engine — VDPBF16PS, AMX tiles on the emulator, and the hardware's
// tiles where the CPU has them (bit for bit against the emulator); which geometries may take the
// path, and the measured choice between it and im2col; and conv2d's autograd on it.

#include <catch2/catch.hpp>
#include <array>
#include <cfloat>
#include <cmath>
#include <ember/ember.h>
#include <ember/kernels/cpu/bf16/amx_tiles.h>
#include <ember/kernels/cpu/conv.h>
#include <ember/kernels/cpu/measured_choice.h>
#include <ember/kernels/cpu/winograd/conv_winograd.h>
#include <random>
#include <vector>

#include "fresh_choices.h"
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

// Forces the Winograd path wherever it applies for a test's lifetime (the default, automatic,
// measures it against im2col per layer and pass: Note [When bf16 Winograd pays]).
struct WinogradPathGuard {
  kc::Conv3x3Path saved = kc::conv3x3_path();
  WinogradPathGuard() { kc::set_conv3x3_path(kc::Conv3x3Path::winograd); }
  ~WinogradPathGuard() { kc::set_conv3x3_path(saved); }
};

// Restores the bf16 Winograd plane type when a test changes it.
struct Bf16ProductsGuard {
  bool saved = kc::winograd_bf16_products();
  ~Bf16ProductsGuard() { kc::set_winograd_bf16_products(saved); }
};

std::vector<BFloat16> to_bf16(const VF& v) {
  std::vector<BFloat16> b;
  for (float f : v) b.push_back(BFloat16(f));
  return b;
}

// The three passes of one geometry on the Winograd path, each against the float64 reference;
// the errors are bounded relative to the sum of the absolute values of the terms.
void check_against_reference(const Case& c) {
  const kernels::Conv2dGeometry g = geometry(c.n, c.c_in, c.h, c.w, c.c_out, c.pad_h, c.pad_w);
  REQUIRE(kc::winograd_applies(g));
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
  WinogradPathGuard winograd;
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
  WinogradPathGuard winograd;
  set_num_threads(1);
  // 16 -> 24 channels; 19 -> 21 leaves channels past the eight-at-a-time filter transforms in
  // every pass (Note [Filter transforms eight at a time]).
  for (const kernels::Conv2dGeometry& g : {geometry(3, 16, 13, 27, 24, 1, 2), geometry(2, 19, 9, 11, 21, 1, 1)}) {
    INFO("c_in " << g.c_in << ", c_out " << g.c_out);
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
    Bf16ProductsGuard keep_planes;
    for (bool bf16_planes : {false, true}) {
      if (!kc::set_winograd_bf16_products(bf16_planes)) continue;  // no AVX512_BF16: the next test says so
      const auto wide16 = run_bf16(true), portable16 = run_bf16(false);
      for (int pass = 0; pass < 3; ++pass) {
        INFO("bf16 pass " << pass << ", bf16 planes " << bf16_planes);
        CHECK(wide16[pass] == portable16[pass]);
      }
    }
  }
  kc::set_winograd_vectorized(saved);
}

TEST_CASE("winograd conv: which convolutions take the path", "[conv][winograd]") {
  REQUIRE(kc::conv3x3_path() == kc::Conv3x3Path::automatic);  // the default (EMBER_CPU_CONV unset)
  const kernels::Conv2dGeometry base = geometry(2, 16, 8, 8, 16, 1, 1);
  CHECK(kc::winograd_applies(base));
  auto with = [&](auto change) {
    kernels::Conv2dGeometry g = base;
    change(g);
    return kc::winograd_applies(g);
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
  {
    WinogradPathGuard winograd;
    kc::conv2d_forward(DType::f32, base, x.data(), w.data(), nullptr, y_w.data());
  }
  kc::set_conv3x3_path(kc::Conv3x3Path::im2col);
  CHECK_FALSE(kc::winograd_applies(base));
  const int64_t before = kc::winograd_convolutions();
  kc::conv2d_forward(DType::f32, base, x.data(), w.data(), nullptr, y_i.data());
  CHECK(kc::winograd_convolutions() == before);
  kc::set_conv3x3_path(kc::Conv3x3Path::automatic);
  for (size_t i = 0; i < y_w.size(); ++i) CHECK(y_w[i] == Approx(y_i[i]).margin(1e-4));
  CHECK(std::string(kc::conv3x3_path_name(kc::Conv3x3Path::winograd)) == "winograd F(2x2,3x3)");
}

namespace {

using testing::FreshChoices;

// The one conv2d 3x3 choice made for `shape`.
kc::MeasuredChoice choice_for(const std::string& shape) {
  for (const kc::MeasuredChoice& c : kc::measured_choices())
    if (c.family == "conv2d" && c.shape == shape) return c;
  FAIL("no choice made for " << shape);
  return {};
}

}  // namespace

TEST_CASE("winograd conv: automatic measures Winograd against im2col per layer and pass", "[conv][winograd][bf16]") {
  // Note [When bf16 Winograd pays]: each (pass, dtype, geometry, threads) times its candidates once
  // and keeps the fastest; the result of the first call is the chosen algorithm's.
  REQUIRE(kc::conv3x3_path() == kc::Conv3x3Path::automatic);
  Bf16ProductsGuard keep_planes;
  testing::ThreadsGuard keep;
  FreshChoices fresh;
  set_num_threads(1);
  const kernels::Conv2dGeometry g = geometry(4, 32, 7, 7, 48, 1, 1);
  const int64_t xn = g.n * 32 * 49, wn = 48 * 32 * 9, yn = g.n * 48 * 49;
  const VF xf = random_floats(xn, 31), wf = random_floats(wn, 32), gyf = random_floats(yn, 33);
  const std::vector<BFloat16> x = to_bf16(xf), w = to_bf16(wf), gy = to_bf16(gyf);
  auto passes = [&] {
    std::vector<std::vector<BFloat16>> out = {std::vector<BFloat16>(yn), std::vector<BFloat16>(xn),
                                              std::vector<BFloat16>(wn)};
    kc::conv2d_forward(DType::bf16, g, x.data(), w.data(), nullptr, out[0].data());
    kc::conv2d_backward_data(DType::bf16, g, gy.data(), w.data(), out[1].data());
    kc::conv2d_backward_weight(DType::bf16, g, gy.data(), x.data(), out[2].data());
    return out;
  };
  const bool pairs = kc::winograd_bf16_products();
  const auto measured = passes();
  const char* names[] = {"forward", "backward-data", "backward-weight"};
  const bool amx = kc::amx_tiles() == kc::AmxTiles::hardware;
  for (int pass = 0; pass < 3; ++pass) {
    const kc::MeasuredChoice c = choice_for(std::string(names[pass]) + " bfloat16 4x32x7x7 -> 48, pad 1x1, 1 thread");
    INFO(c.shape << ": " << c.candidates[c.chosen]);
    std::vector<std::string> want;  // the direct AMX convolution where the CPU has AMX
    if (amx) want.push_back("direct (amx)");
    if (pairs) want.push_back(std::string("winograd, bf16 pairs (") + (amx ? "amx" : "avx512_bf16") + ")");
    want.push_back("winograd, f32 planes");
    want.push_back("im2col");
    CHECK(c.candidates == want);
    CHECK(c.seconds[c.chosen] == *std::min_element(c.seconds.begin(), c.seconds.end()));
  }
  // Cached: the same bits, without measuring again.
  const size_t made = kc::measured_choices().size();
  CHECK(passes() == measured);
  CHECK(kc::measured_choices().size() == made);
  // The first call's result is the chosen algorithm's: forced, each pass alone gives its bits.
  for (int pass = 0; pass < 3; ++pass) {
    const kc::MeasuredChoice c = choice_for(std::string(names[pass]) + " bfloat16 4x32x7x7 -> 48, pad 1x1, 1 thread");
    const std::string chosen = c.candidates[c.chosen];
    kc::set_conv3x3_path(chosen == "im2col"         ? kc::Conv3x3Path::im2col
                         : chosen == "direct (amx)" ? kc::Conv3x3Path::direct_amx
                                                    : kc::Conv3x3Path::winograd);
    kc::set_winograd_bf16_products(chosen.find("bf16 pairs") != std::string::npos);
    INFO(c.shape << ": " << chosen);
    CHECK(passes()[pass] == measured[pass]);
    kc::set_conv3x3_path(kc::Conv3x3Path::automatic);
  }
  // float32 measures Winograd against im2col too.
  VF y(yn);
  kc::conv2d_forward(DType::f32, g, xf.data(), wf.data(), nullptr, y.data());
  const kc::MeasuredChoice c = choice_for("forward float32 4x32x7x7 -> 48, pad 1x1, 1 thread");
  CHECK(c.candidates == std::vector<std::string>{"winograd", "im2col"});
}

TEST_CASE("winograd conv: conv2d's autograd runs it and matches float64", "[conv][winograd]") {
  WinogradPathGuard winograd;
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

TEST_CASE("winograd conv: bf16 on float32 planes computes what float32 computes on the widened values, rounded once", "[conv][winograd][bf16]") {
  WinogradPathGuard winograd;
  Bf16ProductsGuard keep_planes;
  kc::set_winograd_bf16_products(false);
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

namespace {

// F(2x2, 3x3)'s matrices (Note [Winograd convolution]), for the scalar reference below.
constexpr double kBT[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
constexpr double kG[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
constexpr double kAT[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};

// The bf16 path's roundings: the transformed weights U to float32, then to bf16; the transformed
// tiles V and W as VCVTNE2PS2BF16 rounds float32 (to nearest even, denormals to zero).
double bf16_of(double x) { return static_cast<double>(BFloat16(static_cast<float>(x))); }
double bf16_tile_of(double x) {
  const float f = static_cast<float>(x);
  return std::abs(f) < FLT_MIN ? std::copysign(0.0, x) : static_cast<double>(BFloat16(f));
}

// bf16(B^T d B) of channel c's 4x4 input tile (ty, tx) of image img of x (n, C, h, w), zeros
// outside the image.
std::array<double, 16> input_tile(const VD& x, int64_t img, int64_t C, int64_t c, int64_t h, int64_t w, int64_t ty,
                                  int64_t tx, int64_t pad_h, int64_t pad_w) {
  std::array<double, 16> v;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      double sum = 0;
      for (int r = 0; r < 4; ++r)
        for (int q = 0; q < 4; ++q) {
          const int64_t iy = 2 * ty - pad_h + r, ix = 2 * tx - pad_w + q;
          if (iy >= 0 && iy < h && ix >= 0 && ix < w)
            sum += kBT[i][r] * x[((img * C + c) * h + iy) * w + ix] * kBT[j][q];
        }
      v[i * 4 + j] = bf16_tile_of(sum);
    }
  return v;
}

// The definition of a convolution on bf16 planes (Note [bf16 Winograd products]), in double:
// y (n, K, oh, ow) = A^T [sum_c bf16(G g G^T) . bf16(B^T d B)] A + bias for every 4x4 input tile
// d (zeros outside the image) and filter g = filter(k, c) (row-major 3x3).
template <typename Filter>
VD winograd_bf16_reference(int64_t n, int64_t C, int64_t h, int64_t w, int64_t K, int64_t pad_h, int64_t pad_w,
                           const VD& x, const Filter& filter, const VD& bias) {
  const int64_t oh = h + 2 * pad_h - 2, ow = w + 2 * pad_w - 2;
  std::vector<std::array<double, 16>> u(K * C);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t c = 0; c < C; ++c) {
      const std::array<double, 9> g = filter(k, c);
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
          double sum = 0;
          for (int a = 0; a < 3; ++a)
            for (int b = 0; b < 3; ++b) sum += kG[i][a] * g[a * 3 + b] * kG[j][b];
          u[k * C + c][i * 4 + j] = bf16_of(sum);
        }
    }
  VD y(n * K * oh * ow);
  for (int64_t img = 0; img < n; ++img)
    for (int64_t ty = 0; ty < (oh + 1) / 2; ++ty)
      for (int64_t tx = 0; tx < (ow + 1) / 2; ++tx) {
        std::vector<std::array<double, 16>> v(C);
        for (int64_t c = 0; c < C; ++c) v[c] = input_tile(x, img, C, c, h, w, ty, tx, pad_h, pad_w);
        for (int64_t k = 0; k < K; ++k) {
          double m[16] = {};
          for (int64_t c = 0; c < C; ++c)
            for (int e = 0; e < 16; ++e) m[e] += u[k * C + c][e] * v[c][e];
          for (int r = 0; r < 2; ++r)
            for (int q = 0; q < 2; ++q) {
              const int64_t oy = 2 * ty + r, ox = 2 * tx + q;
              if (oy >= oh || ox >= ow) continue;
              double sum = bias.empty() ? 0.0 : bias[k];
              for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j) sum += kAT[r][i] * m[i * 4 + j] * kAT[q][j];
              y[((img * K + k) * oh + oy) * ow + ox] = sum;
            }
        }
      }
  return y;
}

// The weight gradient on bf16 planes, in double: dU[k][c] = sum over tiles bf16(A dY A^T) .
// bf16(B^T d B), then dg = G^T dU G.
VD winograd_bf16_weight_reference(const kernels::Conv2dGeometry& g, const VD& x, const VD& gy) {
  const int64_t C = g.c_in, K = g.c_out, h = g.h, w = g.w, oh = g.out_h, ow = g.out_w;
  std::vector<std::array<double, 16>> du(K * C);
  for (auto& e : du) e.fill(0);
  for (int64_t img = 0; img < g.n; ++img)
    for (int64_t ty = 0; ty < (oh + 1) / 2; ++ty)
      for (int64_t tx = 0; tx < (ow + 1) / 2; ++tx) {
        std::vector<std::array<double, 16>> v(C), wt(K);
        for (int64_t c = 0; c < C; ++c) v[c] = input_tile(x, img, C, c, h, w, ty, tx, g.pad_h, g.pad_w);
        for (int64_t k = 0; k < K; ++k)
          for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j) {
              double sum = 0;  // (A dY A^T)[i][j] = sum over the 2x2 dY of A^T[r][i] dY[r][q] A^T[q][j]
              for (int r = 0; r < 2; ++r)
                for (int q = 0; q < 2; ++q) {
                  const int64_t oy = 2 * ty + r, ox = 2 * tx + q;
                  if (oy < oh && ox < ow) sum += kAT[r][i] * gy[((img * K + k) * oh + oy) * ow + ox] * kAT[q][j];
                }
              wt[k][i * 4 + j] = bf16_tile_of(sum);
            }
        for (int64_t k = 0; k < K; ++k)
          for (int64_t c = 0; c < C; ++c)
            for (int e = 0; e < 16; ++e) du[k * C + c][e] += wt[k][e] * v[c][e];
      }
  VD gw(K * C * 9);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t c = 0; c < C; ++c)
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) {
          double sum = 0;
          for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j) sum += kG[i][a] * du[k * C + c][i * 4 + j] * kG[j][b];
          gw[(k * C + c) * 9 + a * 3 + b] = sum;
        }
  return gw;
}

// ember's bf16 results against the definition's double values: the only difference is ember's
// float32 sums (M, the output transform, dU across tiles), so every element must be the
// reference rounded to bf16 or a neighbour of it, and almost all of them exactly it.
void check_definition(const std::vector<BFloat16>& got, const VD& want) {
  REQUIRE(got.size() == want.size());
  size_t exact = 0, neighbours = 0;
  double worst_ulps = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const BFloat16 r(static_cast<float>(want[i]));
    if (got[i].bits == r.bits) {
      ++exact;
      continue;
    }
    // A neighbour: the next bf16 value up or down (same sign), even across a power of two, where
    // the unit above is twice the one below.
    const bool same_sign = (got[i].bits & 0x8000) == (r.bits & 0x8000);
    if (same_sign && std::abs(int(got[i].bits & 0x7fff) - int(r.bits & 0x7fff)) == 1) ++neighbours;
    const double ulp = std::ldexp(1.0, std::ilogb(std::max(std::abs(want[i]), 1e-30)) - 7);
    worst_ulps = std::max(worst_ulps, std::abs(static_cast<double>(got[i]) - want[i]) / ulp);
  }
  INFO(exact << " of " << got.size() << " exact, " << neighbours << " neighbours; worst other error " << worst_ulps
             << " bf16 units of the reference");
  CHECK(exact + neighbours == got.size());
  CHECK(static_cast<double>(exact) >= 0.97 * static_cast<double>(got.size()));
}

// The RMS error relative to the RMS value: sqrt(sum (got - want)^2 / sum want^2). (Not the RMS of
// each element's relative error: the planes' rounding is of the transformed values, whose size is
// the layer's, so it is the small outputs' relative error that grows.)
double rms_relative(const std::vector<BFloat16>& got, const VD& want) {
  double err = 0, size = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = static_cast<double>(got[i]) - want[i];
    err += e * e;
    size += want[i] * want[i];
  }
  return std::sqrt(err / size);
}

}  // namespace

// Restores the AMX tiles (the engine of the bf16 pair products) when a test changes them.
struct TilesGuard {
  kc::AmxTiles saved = kc::amx_tiles();
  ~TilesGuard() { kc::set_amx_tiles(saved); }
};

TEST_CASE("winograd conv: bf16 products on bf16 pairs compute their definition, close to float64", "[conv][winograd][bf16]") {
  WinogradPathGuard winograd;
  Bf16ProductsGuard keep_planes;
  if (!kc::set_winograd_bf16_products(true)) {
    WARN("this CPU has no AVX512_BF16: bf16 convolutions keep float32 planes here");
    CHECK_FALSE(kc::winograd_bf16_products());
    CHECK(kc::set_winograd_bf16_products(false));
    return;
  }
  testing::ThreadsGuard keep;
  TilesGuard keep_tiles;
  // The engines: VDPBF16PS (tiles off), AMX on the emulator, and AMX on the hardware where it runs.
  std::vector<kc::AmxTiles> engines = {kc::AmxTiles::off, kc::AmxTiles::emulated};
  if (kc::amx_hardware_usable()) engines.push_back(kc::AmxTiles::hardware);
  else WARN("no AMX tiles here (" << kc::amx_description() << "): the AMX pair products ran on the emulator only");
  for (kc::AmxTiles engine : engines) {
    REQUIRE(kc::set_amx_tiles(engine));
    INFO("pair products on " << (engine == kc::AmxTiles::off ? "VDPBF16PS" : kc::amx_tiles_name(engine)) << " tiles");
    const std::vector<Case> cases = {
        {2, 16, 9, 12, 24, 1, 1},   // odd output width: cut tiles
        {3, 32, 14, 14, 64, 1, 1},  // the cnn model's second layer (n = 3)
        {1, 16, 8, 7, 20, 2, 0},    // padding 2 (the input gradient's 0) and 0
        {2, 17, 10, 11, 19, 1, 1},  // odd channel counts: a channel without its pair, K not a multiple of 8
        {5, 16, 21, 21, 16, 1, 1},  // 605 tiles: blocks of 256 cross images and parts
    };
    for (int threads : {1, 2})
      for (size_t ci = 0; ci < cases.size(); ++ci) {
        set_num_threads(threads);
        const Case& c = cases[ci];
        INFO("case " << ci << ", threads " << threads);
        const kernels::Conv2dGeometry g = geometry(c.n, c.c_in, c.h, c.w, c.c_out, c.pad_h, c.pad_w);
        const int64_t xn = g.n * g.c_in * g.h * g.w, wn = g.c_out * g.c_in * 9, yn = g.n * g.c_out * g.out_h * g.out_w;
        const std::vector<BFloat16> x = to_bf16(random_floats(xn, 21)), w = to_bf16(random_floats(wn, 22)),
                                    bias = to_bf16(random_floats(g.c_out, 23)), gy = to_bf16(random_floats(yn, 24));
        auto wide = [](const std::vector<BFloat16>& b) {
          VD d;
          for (const BFloat16& v : b) d.push_back(static_cast<double>(v));
          return d;
        };
        const VD xd = wide(x), wd = wide(w), bd = wide(bias), gyd = wide(gy);
        auto run = [&](bool bf16_planes) {
          kc::set_winograd_bf16_products(bf16_planes);
          std::vector<std::vector<BFloat16>> out = {std::vector<BFloat16>(yn), std::vector<BFloat16>(xn),
                                                    std::vector<BFloat16>(wn)};
          kc::conv2d_forward(DType::bf16, g, x.data(), w.data(), bias.data(), out[0].data());
          kc::conv2d_backward_data(DType::bf16, g, gy.data(), w.data(), out[1].data());
          kc::conv2d_backward_weight(DType::bf16, g, gy.data(), x.data(), out[2].data());
          return out;
        };
        const int64_t before = kc::winograd_convolutions();
        const auto planes16 = run(true);
        CHECK(kc::winograd_convolutions() == before + 3);
        const auto planes32 = run(false);
        auto bits = [](const std::vector<BFloat16>& v) {
          std::vector<uint16_t> b;
          for (const BFloat16& e : v) b.push_back(e.bits);
          return b;
        };
        for (int pass = 0; pass < 3; ++pass) CHECK(bits(planes16[pass]) != bits(planes32[pass]));  // the planes were rounded

        // The definition: forward; input gradient = the convolution of dy with the flipped,
        // channel-swapped filter and padding 2 - p; weight gradient.
        const VD y_def = winograd_bf16_reference(
            g.n, g.c_in, g.h, g.w, g.c_out, g.pad_h, g.pad_w, xd,
            [&](int64_t k, int64_t ch) {
              std::array<double, 9> f;
              for (int i = 0; i < 9; ++i) f[i] = wd[(k * g.c_in + ch) * 9 + i];
              return f;
            },
            bd);
        const VD gx_def = winograd_bf16_reference(
            g.n, g.c_out, g.out_h, g.out_w, g.c_in, 2 - g.pad_h, 2 - g.pad_w, gyd,
            [&](int64_t k, int64_t ch) {
              std::array<double, 9> f;
              for (int i = 0; i < 9; ++i) f[i] = wd[(ch * g.c_in + k) * 9 + 8 - i];
              return f;
            },
            VD{});
        const VD gw_def = winograd_bf16_weight_reference(g, xd, gyd);
        check_definition(planes16[0], y_def);
        check_definition(planes16[1], gx_def);
        check_definition(planes16[2], gw_def);

        // Against float64 on the same bf16 inputs: the planes' rounding adds to the results' own.
        VD y_ref(yn), gx_ref(xn), gw_ref(wn);
        kc::conv2d_forward_reference(DType::f64, g, xd.data(), wd.data(), bd.data(), y_ref.data());
        kc::conv2d_backward_data_reference(DType::f64, g, gyd.data(), wd.data(), gx_ref.data());
        kc::conv2d_backward_weight_reference(DType::f64, g, gyd.data(), xd.data(), gw_ref.data());
        const VD* refs[3] = {&y_ref, &gx_ref, &gw_ref};
        for (int pass = 0; pass < 3; ++pass) {
          const double e16 = rms_relative(planes16[pass], *refs[pass]);
          const double e32 = rms_relative(planes32[pass], *refs[pass]);
          INFO("pass " << pass << ": RMS relative error, bf16 planes " << e16 << ", float32 planes " << e32);
          CHECK(e32 <= 0.003);  // about the final rounding alone: 2^-8 / sqrt(3) = 0.0023 at most for a uniform error
          CHECK(e16 <= 3.5 * e32);
        }
      }
  }
}

TEST_CASE("winograd conv: AMX pair products on the hardware give the emulator's bits", "[conv][winograd][bf16][amx]") {
  if (!kc::amx_hardware_usable()) {
    WARN("no AMX tiles here (" << kc::amx_description() << "): the AMX pair products ran on the emulator only");
    return;
  }
  WARN("Winograd's AMX pair products on this CPU's tiles, against the emulator");
  WinogradPathGuard winograd;
  Bf16ProductsGuard keep_planes;
  TilesGuard keep_tiles;
  testing::ThreadsGuard keep;
  REQUIRE(kc::set_winograd_bf16_products(true));
  for (int threads : {1, 2})
    for (const Case& c : {Case{2, 17, 10, 11, 19, 1, 1}, Case{3, 32, 14, 14, 64, 1, 1}, Case{1, 40, 9, 9, 33, 2, 0}}) {
      set_num_threads(threads);
      const kernels::Conv2dGeometry g = geometry(c.n, c.c_in, c.h, c.w, c.c_out, c.pad_h, c.pad_w);
      const int64_t xn = g.n * g.c_in * g.h * g.w, wn = g.c_out * g.c_in * 9, yn = g.n * g.c_out * g.out_h * g.out_w;
      const std::vector<BFloat16> x = to_bf16(random_floats(xn, 41)), w = to_bf16(random_floats(wn, 42)),
                                  gy = to_bf16(random_floats(yn, 43));
      auto run = [&](kc::AmxTiles tiles) {
        REQUIRE(kc::set_amx_tiles(tiles));
        std::vector<std::vector<uint16_t>> bits(3);
        std::vector<BFloat16> y(yn), gx(xn), gw(wn);
        kc::conv2d_forward(DType::bf16, g, x.data(), w.data(), nullptr, y.data());
        kc::conv2d_backward_data(DType::bf16, g, gy.data(), w.data(), gx.data());
        kc::conv2d_backward_weight(DType::bf16, g, gy.data(), x.data(), gw.data());
        for (const BFloat16& v : y) bits[0].push_back(v.bits);
        for (const BFloat16& v : gx) bits[1].push_back(v.bits);
        for (const BFloat16& v : gw) bits[2].push_back(v.bits);
        return bits;
      };
      const auto hw = run(kc::AmxTiles::hardware), emu = run(kc::AmxTiles::emulated);
      for (int pass = 0; pass < 3; ++pass) {
        INFO("threads " << threads << ", c_in " << c.c_in << ", pass " << pass);
        CHECK(hw[pass] == emu[pass]);
      }
    }
}
