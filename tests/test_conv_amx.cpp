// The direct bf16 convolution on AMX tiles (kernels/cpu/bf16/conv_amx.h, Note [Direct convolution
// on AMX tiles]): forward pass and both gradients on the tile emulator (every CPU) against the
// float64 direct references of the same bf16 values, within f32 accumulation error and one bf16
// rounding, over kernel sizes, paddings, odd channel counts and widths that cut the 16-output
// tiles; conv2d's routing to it (EMBER_CPU_CONV=direct); and, on a CPU with AMX, the hardware's
// results against the emulator's bit for bit.

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/kernels/cpu/bf16/amx_tiles.h>
#include <ember/kernels/cpu/bf16/conv_amx.h>
#include <ember/kernels/cpu/conv.h>
#include <ember/kernels/cpu/winograd/conv3x3_choice.h>

#include "test_util.h"

using namespace ember;
namespace kc = ember::kernels::cpu;

namespace {

struct Case {
  int64_t n, c_in, h, w, c_out, kh, kw, pad_h, pad_w;
};

const std::vector<Case> kCases = {
    {2, 16, 9, 12, 24, 3, 3, 1, 1},  // the common 3x3 "same" convolution, odd width
    {1, 3, 7, 7, 5, 3, 3, 1, 1},     // 7 x 7 planes (ResNet's layer4), 3 and 5 channels: one pair without a partner
    {3, 40, 5, 14, 33, 3, 3, 0, 0},  // no padding; 20 channel pairs (past one tile of 16), 33 outputs (past 32)
    {1, 8, 6, 9, 4, 3, 5, 2, 1},     // a 3 x 5 filter, padding 2 x 1
    {2, 17, 4, 4, 19, 1, 1, 0, 0},   // 1 x 1
};

kernels::Conv2dGeometry geometry(const Case& c) {
  kernels::Conv2dGeometry g;
  g.n = c.n, g.c_in = c.c_in, g.h = c.h, g.w = c.w, g.c_out = c.c_out, g.kh = c.kh, g.kw = c.kw;
  g.pad_h = c.pad_h, g.pad_w = c.pad_w;
  g.out_h = kernels::conv2d_out_size(c.h, c.kh, 1, c.pad_h, 1);
  g.out_w = kernels::conv2d_out_size(c.w, c.kw, 1, c.pad_w, 1);
  return g;
}

std::vector<BFloat16> random_bf16(size_t n, uint32_t seed) {
  const std::vector<double> d = testing::random_vector<double>(n, seed);
  std::vector<BFloat16> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = BFloat16(static_cast<float>(d[i]));
  return v;
}

std::vector<double> wide(const std::vector<BFloat16>& v, bool magnitude = false) {
  std::vector<double> d;
  for (const BFloat16& x : v) d.push_back(magnitude ? std::abs(static_cast<double>(x)) : static_cast<double>(x));
  return d;
}

// got within f32 accumulation of terms_per_sum products and one bf16 rounding of ref, with S the
// same convolution on the absolute values (Note [Low-precision tolerances]'s bound).
void check_rounded(const char* what, const std::vector<BFloat16>& got, const std::vector<double>& ref,
                   const std::vector<double>& mag, int64_t terms_per_sum) {
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = double(terms_per_sum + 4) * std::ldexp(1.0, -24) * mag[i];
    const double bound = e + std::ldexp(1.0, -8) * (std::abs(ref[i]) + e);
    if (!(std::abs(static_cast<double>(got[i]) - ref[i]) <= bound) && bad++ < 3)
      FAIL_CHECK(what << " element " << i << ": " << static_cast<double>(got[i]) << ", reference " << ref[i]
                      << ", bound " << bound);
  }
  CHECK(bad == 0);
}

// The forward pass and both gradients of one case on `tiles`, checked against the references;
// returns the three outputs' bits.
std::vector<std::vector<uint16_t>> run_case(const Case& c, kc::AmxTiles tiles) {
  const kernels::Conv2dGeometry g = geometry(c);
  const int64_t xn = g.n * g.c_in * g.h * g.w, wn = g.c_out * g.c_in * g.kh * g.kw;
  const int64_t yn = g.n * g.c_out * g.out_h * g.out_w;
  const std::vector<BFloat16> x = random_bf16(xn, 1), w = random_bf16(wn, 2), b = random_bf16(g.c_out, 3),
                              gy = random_bf16(yn, 4);
  std::vector<BFloat16> y(yn), gx(xn), gw(wn);
  kc::amx_conv_forward(tiles, g, x.data(), w.data(), b.data(), y.data());
  kc::amx_conv_backward_data(tiles, g, gy.data(), w.data(), gx.data());
  kc::amx_conv_backward_weight(tiles, g, gy.data(), x.data(), gw.data());

  std::vector<double> y_ref(yn), y_mag(yn), gx_ref(xn), gx_mag(xn);
  kc::conv2d_forward_reference(DType::f64, g, wide(x).data(), wide(w).data(), wide(b).data(), y_ref.data());
  kc::conv2d_forward_reference(DType::f64, g, wide(x, true).data(), wide(w, true).data(), wide(b, true).data(),
                               y_mag.data());
  kc::conv2d_backward_data_reference(DType::f64, g, wide(gy).data(), wide(w).data(), gx_ref.data());
  kc::conv2d_backward_data_reference(DType::f64, g, wide(gy, true).data(), wide(w, true).data(), gx_mag.data());
  check_rounded("forward", y, y_ref, y_mag, g.c_in * g.kh * g.kw + 1);
  check_rounded("input gradient", gx, gx_ref, gx_mag, g.c_out * g.kh * g.kw);
  std::vector<double> gw_ref(wn), gw_mag(wn);
  kc::conv2d_backward_weight_reference(DType::f64, g, wide(gy).data(), wide(x).data(), gw_ref.data());
  kc::conv2d_backward_weight_reference(DType::f64, g, wide(gy, true).data(), wide(x, true).data(), gw_mag.data());
  check_rounded("weight gradient", gw, gw_ref, gw_mag, g.n * g.out_h * g.out_w);
  std::vector<std::vector<uint16_t>> bits(3);
  for (const BFloat16& v : y) bits[0].push_back(v.bits);
  for (const BFloat16& v : gx) bits[1].push_back(v.bits);
  for (const BFloat16& v : gw) bits[2].push_back(v.bits);
  return bits;
}

}  // namespace

TEST_CASE("conv2d on AMX tiles (emulated): forward and both gradients match the float64 reference", "[conv][amx][bf16]") {
  testing::ThreadsGuard keep;
  const int64_t dots = kc::amx_emulator::dot_products();
  for (int threads : {1, 2})
    for (size_t i = 0; i < kCases.size(); ++i) {
      set_num_threads(threads);
      INFO("case " << i << ", threads " << threads);
      REQUIRE(kc::amx_conv_applies(geometry(kCases[i])));
      run_case(kCases[i], kc::AmxTiles::emulated);
    }
  CHECK(kc::amx_emulator::dot_products() > dots);
}

TEST_CASE("conv2d on AMX tiles: which geometries it covers, and conv2d's routing to it", "[conv][amx][bf16]") {
  kernels::Conv2dGeometry g = geometry(kCases[0]);
  CHECK(kc::amx_conv_applies(g));
  auto with = [&](auto change) {
    kernels::Conv2dGeometry h = g;
    change(h);
    return kc::amx_conv_applies(h);
  };
  CHECK_FALSE(with([](auto& h) { h.stride_w = 2; }));
  CHECK_FALSE(with([](auto& h) { h.dil_h = 2; }));
  CHECK_FALSE(with([](auto& h) { h.groups = 2; }));
  CHECK_FALSE(with([](auto& h) { h.pad_w = 3; }));  // the input gradient would need padding -1
  // EMBER_CPU_CONV=direct's path, on the emulator: conv2d's bf16 passes run it (the same bits as
  // the kernel called directly).
  struct Restore {
    kc::Conv3x3Path path = kc::conv3x3_path();
    kc::AmxTiles tiles = kc::amx_tiles();
    ~Restore() {
      kc::set_conv3x3_path(path);
      kc::set_amx_tiles(tiles);
    }
  } restore;
  REQUIRE(kc::set_amx_tiles(kc::AmxTiles::emulated));
  kc::set_conv3x3_path(kc::Conv3x3Path::direct_amx);
  const int64_t xn = g.n * g.c_in * g.h * g.w, wn = g.c_out * g.c_in * 9, yn = g.n * g.c_out * g.out_h * g.out_w;
  const std::vector<BFloat16> x = random_bf16(xn, 5), w = random_bf16(wn, 6);
  std::vector<BFloat16> via_conv(yn), direct(yn);
  const int64_t dots = kc::amx_emulator::dot_products();
  kc::conv2d_forward(DType::bf16, g, x.data(), w.data(), nullptr, via_conv.data());
  CHECK(kc::amx_emulator::dot_products() > dots);
  kc::amx_conv_forward(kc::AmxTiles::emulated, g, x.data(), w.data(), nullptr, direct.data());
  for (int64_t i = 0; i < yn; ++i) REQUIRE(via_conv[i].bits == direct[i].bits);
  CHECK(std::string(kc::conv3x3_path_name(kc::Conv3x3Path::direct_amx)) == "direct on AMX tiles");
}

TEST_CASE("conv2d on AMX tiles: the hardware gives the emulator's bits", "[conv][amx][bf16]") {
  if (!kc::amx_hardware_usable()) {
    WARN("no AMX tiles here (" << kc::amx_description() << "): the direct convolution ran on the emulator only");
    return;
  }
  WARN("the direct AMX convolution on this CPU's tiles, against the emulator");
  testing::ThreadsGuard keep;
  for (int threads : {1, 2})
    for (size_t i = 0; i < kCases.size(); ++i) {
      set_num_threads(threads);
      INFO("case " << i << ", threads " << threads);
      CHECK(run_case(kCases[i], kc::AmxTiles::hardware) == run_case(kCases[i], kc::AmxTiles::emulated));
    }
}
