// bf16 products on the CPU (Note [Low-precision products] in layers/gemm.cpp, Note [bf16
// convolutions] in kernels/cpu/conv.cpp): mm, bmm, matmul, linear and conv2d — forward and every
// input gradient — on bf16 tensors equal the double-precision result of the same bf16 values,
// rounded to bf16 once, within f32 accumulation error. Run on every bf16 GEMM kernel — AVX512_BF16,
// the f32 fallback, AMX on the tile emulator and AMX on the hardware's tiles where the CPU has
// them; counters show which kernel did the work.
//
// Bound per element, with S the same op on |inputs| (and |upstream gradient|), K the longest sum:
//   |got - ref| <= e + 2^-8 (|ref| + e),  e = (K + 4) 2^-24 S
// i.e. f32 accumulation in any order, then one rounding to bf16 (unit roundoff 2^-8).

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <ember/kernels/cpu/bf16/amx_tiles.h>
#include <ember/kernels/cpu/bf16/gemm_bf16.h>
#include <ember/core/cpu/parallel.h>

#include "test_util.h"

using namespace ember;
namespace kc = ember::kernels::cpu;

namespace {

using Op = std::function<Tensor(const std::vector<Tensor>&)>;

void check_close(const std::string& what, const Tensor& got, const Tensor& ref, const Tensor& mag, int64_t K) {
  REQUIRE(got.defined());
  CHECK(got.dtype() == DType::bf16);
  REQUIRE(got.shape() == ref.shape());
  const std::vector<double> g = got.to(DType::f64).contiguous().to_vector<double>();
  const std::vector<double> r = ref.contiguous().to_vector<double>(), s = mag.contiguous().to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double e = double(K + 4) * std::ldexp(1.0, -24) * s[i];
    const double bound = e + std::ldexp(1.0, -8) * (std::abs(r[i]) + e);
    if (!(std::abs(g[i] - r[i]) <= bound) && bad++ < 3)
      FAIL_CHECK(what << " element " << i << ": " << g[i] << ", reference " << r[i] << ", bound " << bound);
  }
  CHECK(bad == 0);
}

// op on bf16 inputs (all requiring grad) against op on their f64 copies; K: the longest sum in the
// forward or backward pass.
void check_op(const std::string& name, const Op& op, const std::vector<Shape>& shapes, int64_t K) {
  Generator gen(42);
  std::vector<Tensor> x16, x64, a64;
  for (const Shape& s : shapes) {
    Tensor t = randn(s, {}, gen).to(DType::bf16);
    x16.push_back(t.detach().requires_grad_());
    x64.push_back(t.to(DType::f64).requires_grad_());
    a64.push_back(t.to(DType::f64).abs().requires_grad_());
  }
  const Tensor y16 = op(x16);
  const Tensor gy = randn(y16.shape(), {}, gen).to(DType::bf16);
  y16.backward(gy);
  const Tensor y64 = op(x64), ya = op(a64);
  y64.backward(gy.to(DType::f64));
  ya.backward(gy.to(DType::f64).abs());
  check_close(name + " forward", y16, y64.detach(), ya.detach(), K);
  for (size_t i = 0; i < x16.size(); ++i)
    check_close(name + " gradient " + std::to_string(i), x16[i].grad(), x64[i].grad(), a64[i].grad(), K);
}

void check_all_ops() {
  check_op("mm", [](const std::vector<Tensor>& t) { return mm(t[0], t[1]); }, {{37, 70}, {70, 45}}, 70);
  check_op("bmm", [](const std::vector<Tensor>& t) { return bmm(t[0], t[1]); }, {{3, 13, 40}, {3, 40, 33}}, 40);
  check_op("matmul (broadcast batch)", [](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); },
           {{2, 3, 9, 20}, {3, 20, 7}}, 40);
  check_op("linear", [](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); },
           {{5, 3, 70}, {45, 70}, {45}}, 70);
  // Big enough for the threaded GEMM split and several chunks of images per part.
  check_op("conv2d", [](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2], {.padding = {1, 1}}); },
           {{6, 3, 14, 14}, {16, 3, 3, 3}, {16}}, 6 * 14 * 14);
  check_op("conv2d strided, grouped",
           [](const std::vector<Tensor>& t) {
             return conv2d(t[0], t[1], t[2], {.stride = {2, 1}, .padding = {0, 2}, .groups = 2});
           },
           {{3, 4, 11, 9}, {6, 2, 3, 2}, {6}}, 3 * 5 * 12);
  // Rows of 39 columns: more than one vector of 32 bf16 in the im2col and col2im rows.
  check_op("conv2d wide rows", [](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2], {.padding = {1, 2}}); },
           {{2, 3, 5, 37}, {4, 3, 3, 3}, {4}}, 2 * 5 * 39);
  check_op("conv2d stride 2, wide rows",
           [](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2], {.stride = {2, 2}, .padding = {1, 1}}); },
           {{2, 3, 5, 70}, {4, 3, 3, 3}, {4}}, 2 * 3 * 35);
  check_op("conv2d 1x1", [](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2]); },
           {{4, 8, 5, 5}, {12, 8, 1, 1}, {12}}, 4 * 25);
}

struct PathGuard {
  kc::Bf16GemmPath path = kc::bf16_gemm_path();
  kc::AmxTiles tiles = kc::amx_tiles();
  ~PathGuard() {
    kc::set_amx_tiles(tiles);
    kc::set_bf16_gemm_path(path);
  }
};

}  // namespace

TEST_CASE("bf16 products on the CPU: AVX512_BF16 kernel, rounded once, gradients too", "[bf16][gemm][conv]") {
  if (!kc::bf16_gemm_native_available()) {
    WARN("this CPU has no AVX512_BF16: the native path is not tested here");
    return;
  }
  const PathGuard guard;
  REQUIRE(kc::set_bf16_gemm_path(kc::Bf16GemmPath::avx512_bf16));
  const int64_t before = kc::bf16_gemm_native_products();
  check_all_ops();
  CHECK(kc::bf16_gemm_native_products() > before);  // the products ran on the native kernel
}

TEST_CASE("bf16 products on the CPU: f32 fallback, rounded once, gradients too", "[bf16][gemm][conv]") {
  const PathGuard guard;
  REQUIRE(kc::set_bf16_gemm_path(kc::Bf16GemmPath::f32_fallback));
  const int64_t before = kc::bf16_gemm_native_products();
  check_all_ops();
  CHECK(kc::bf16_gemm_native_products() == before);
}

TEST_CASE("bf16 products on the CPU: AMX kernel on emulated tiles, rounded once, gradients too", "[bf16][linalg][conv][amx]") {
  const PathGuard guard;
  REQUIRE(kc::set_amx_tiles(kc::AmxTiles::emulated));
  REQUIRE(kc::set_bf16_gemm_path(kc::Bf16GemmPath::amx));
  const int64_t before = kc::bf16_gemm_amx_products(), dots = kc::amx_emulator::dot_products();
  check_all_ops();
  CHECK(kc::bf16_gemm_amx_products() > before);
  CHECK(kc::amx_emulator::dot_products() > dots);
}

TEST_CASE("bf16 products on the CPU: AMX kernel on hardware tiles, rounded once, gradients too", "[bf16][linalg][conv][amx]") {
  if (!kc::amx_hardware_usable()) {
    WARN("no AMX tiles here (" << kc::amx_description() << "): the AMX kernel ran on the emulator only");
    return;
  }
  const PathGuard guard;
  REQUIRE(kc::set_amx_tiles(kc::AmxTiles::hardware));
  REQUIRE(kc::set_bf16_gemm_path(kc::Bf16GemmPath::amx));
  const int64_t before = kc::bf16_gemm_amx_products(), dots = kc::amx_emulator::dot_products();
  check_all_ops();
  CHECK(kc::bf16_gemm_amx_products() > before);
  CHECK(kc::amx_emulator::dot_products() == dots);
}
