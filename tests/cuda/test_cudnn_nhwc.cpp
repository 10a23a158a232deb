// Channels-last through cuDNN (Note [Channels-last convolutions and pooling] in
// kernels/cuda/cudnn.h): every convolution pass, the bias gradient and max/average pooling with
// Layout::NHWC against the same call in NCHW on the same values, in float32, float16 and bfloat16.
// On the emulator the shim stages NHWC operands through NCHW copies (Note [The shim's memory
// formats]), so the two layouts agree bit for bit; on a GPU cuDNN may pick another algorithm for
// NHWC, so the comparison allows the rounding of a reordered float sum. Then the layers: a
// channels-last conv2d and max_pool2d on a CUDA device reach cuDNN in NHWC (the shim's counters)
// and return channels-last results equal to the NCHW layers'.
//
// Built when cuDNN is there (a GPU build with libcudnn, or SIMT with <cudnn.h>).

#include <cudnn.h>
#include <ember/ember.h>

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "../../kernels/cuda/cudnn.h"
#include "../memory_format_cnn.h"
#include "channels_last_data.h"
#include "cudnn_fixture.h"
#include "cudnn_max_pool.h"
#include "device_buffer.h"
#include "random_data.h"

#if EMBER_SIMT
#include "../../kernels/simt/cudnn_shim.h"
#endif

namespace {

using ember::DType;
using ember::kernels::Conv2dGeometry;
using ember::kernels::Pool2dGeometry;
using ember::testing::DeviceBuffer;
namespace cudnn = ember::kernels::gpu::cudnn;
using namespace ember::testing::cudnn_fixture;

// (n, c, h, w) in NCHW order <-> the same tensor in NHWC memory.
template <typename T>
std::vector<T> to_nhwc(const std::vector<T>& v, int64_t n, int64_t c, int64_t h, int64_t w) {
  return ember::testing::permute_channels(v, n, c, h * w, true);
}
template <typename T>
std::vector<T> from_nhwc(const std::vector<T>& v, int64_t n, int64_t c, int64_t h, int64_t w) {
  return ember::testing::permute_channels(v, n, c, h * w, false);
}

// The NHWC result (already brought back to NCHW order) against the NCHW one: the same bits on the
// emulator; on a GPU within `terms` float roundings of the largest value plus one rounding to T.
template <typename T>
void require_same(const std::vector<T>& nhwc, const std::vector<T>& nchw, int64_t terms, const std::string& what,
                  bool same_order_on_emulator = true) {
  INFO(what);
  REQUIRE(nhwc.size() == nchw.size());
#if EMBER_SIMT
  if (same_order_on_emulator) {
    (void)terms;
    for (size_t i = 0; i < nchw.size(); ++i) {
      INFO("element " << i << ": NHWC " << static_cast<float>(nhwc[i]) << ", NCHW " << static_cast<float>(nchw[i]));
      REQUIRE(std::memcmp(&nhwc[i], &nchw[i], sizeof(T)) == 0);
    }
    return;
  }
#else
  (void)same_order_on_emulator;
#endif
  // A GPU's cuDNN (and the emulator where the orders differ): within the two sums' rounding.
  double scale = 0;
  for (const T& v : nchw) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  const double u = std::is_same_v<T, ember::Half> ? 0x1p-11 : std::is_same_v<T, ember::BFloat16> ? 0x1p-8 : 0x1p-24;
  const double tol = (2.0 * static_cast<double>(terms) * 0x1p-24 + 2.0 * u) * scale + 1e-30;
  for (size_t i = 0; i < nchw.size(); ++i) {
    INFO("element " << i);
    REQUIRE(std::fabs(static_cast<double>(nhwc[i]) - static_cast<double>(nchw[i])) <= tol);
  }
}

template <typename T>
void check_conv_nhwc(const Conv2dGeometry& g, uint64_t seed) {
  const DType dt = ember::dtype_of<T>::value;
  const int64_t cin_g = g.c_in / g.groups;
  const size_t xn = static_cast<size_t>(g.n * g.c_in * g.h * g.w);
  const size_t wn = static_cast<size_t>(g.c_out * cin_g * g.kh * g.kw);
  const size_t yn = static_cast<size_t>(g.n * g.c_out * g.out_h * g.out_w), bn = static_cast<size_t>(g.c_out);
  const std::vector<T> x = random_16bit<T>(xn, seed), w = random_16bit<T>(wn, seed + 1);
  const std::vector<T> b = random_16bit<T>(bn, seed + 2);
  const std::vector<T> gy = random_16bit<T>(yn, seed + 3);
  const auto x_cl = to_nhwc(x, g.n, g.c_in, g.h, g.w), w_cl = to_nhwc(w, g.c_out, cin_g, g.kh, g.kw);
  const auto gy_cl = to_nhwc(gy, g.n, g.c_out, g.out_h, g.out_w);
  DeviceBuffer<T> dx(x), dw(w), db(b), dgy(gy), dx_cl(x_cl), dw_cl(w_cl), dgy_cl(gy_cl);
  DeviceBuffer<T> y(yn), y_cl(yn), gx(xn), gx_cl(xn), gw(wn), gw_cl(wn), gb(bn), gb_cl(bn);
  const auto nchw = cudnn::Layout::NCHW, nhwc = cudnn::Layout::NHWC;

  for (const bool with_bias : {true, false}) {
    const void* bias = with_bias ? db.data() : nullptr;
    cudnn::conv2d_forward(dt, nchw, g, dx.data(), dw.data(), bias, y.data());
    cudnn::conv2d_forward(dt, nhwc, g, dx_cl.data(), dw_cl.data(), bias, y_cl.data());
    require_same(from_nhwc(checked(y_cl), g.n, g.c_out, g.out_h, g.out_w), checked(y), cin_g * g.kh * g.kw + 1,
                 with_bias ? "forward with bias" : "forward");
  }
  cudnn::conv2d_backward_data(dt, nchw, g, dgy.data(), dw.data(), gx.data());
  cudnn::conv2d_backward_data(dt, nhwc, g, dgy_cl.data(), dw_cl.data(), gx_cl.data());
  require_same(from_nhwc(checked(gx_cl), g.n, g.c_in, g.h, g.w), checked(gx), (g.c_out / g.groups) * g.kh * g.kw,
               "backward data");
  cudnn::conv2d_backward_weight(dt, nchw, g, dgy.data(), dx.data(), gw.data());
  cudnn::conv2d_backward_weight(dt, nhwc, g, dgy_cl.data(), dx_cl.data(), gw_cl.data());
  require_same(from_nhwc(checked(gw_cl), g.c_out, cin_g, g.kh, g.kw), checked(gw), g.n * g.out_h * g.out_w,
               "backward weight");
  // bf16: the hand-written per-channel sums (cuDNN has no bf16 bias gradient), NHWC as column sums
  // in another order than NCHW's planes: equal within the float sums' rounding on the emulator too.
  cudnn::conv2d_backward_bias(dt, nchw, g, dgy.data(), gb.data());
  cudnn::conv2d_backward_bias(dt, nhwc, g, dgy_cl.data(), gb_cl.data());
  require_same(checked(gb_cl), checked(gb), g.n * g.out_h * g.out_w, "backward bias", dt != DType::bf16);
}

Conv2dGeometry conv_geometry(int64_t n, int64_t c_in, int64_t h, int64_t w, int64_t c_out, int64_t k, int64_t stride,
                             int64_t pad) {
  Conv2dGeometry g;
  g.n = n, g.c_in = c_in, g.h = h, g.w = w, g.c_out = c_out, g.kh = g.kw = k;
  g.stride_h = g.stride_w = stride, g.pad_h = g.pad_w = pad;
  g.out_h = ember::kernels::conv2d_out_size(h, k, stride, pad, 1);
  g.out_w = ember::kernels::conv2d_out_size(w, k, stride, pad, 1);
  return g;
}

template <typename T>
void check_pool_nhwc(int64_t n, int64_t c, const Pool2dGeometry& g0, uint64_t seed) {
  const DType dt = ember::dtype_of<T>::value;
  Pool2dGeometry g = g0;
  g.planes = n * c;
  const size_t in_n = static_cast<size_t>(g.planes * g.in_h * g.in_w);
  const size_t out_n = static_cast<size_t>(g.planes * g.out_h * g.out_w);
  const std::vector<T> x = random_16bit<T>(in_n, seed), go = random_16bit<T>(out_n, seed + 1);
  const auto x_cl = to_nhwc(x, n, c, g.in_h, g.in_w);
  const auto go_cl = to_nhwc(go, n, c, g.out_h, g.out_w);
  DeviceBuffer<T> dx(x), dx_cl(x_cl), dgo(go), dgo_cl(go_cl), out(out_n), out_cl(out_n), gi(in_n), gi_cl(in_n);
  const auto nchw = cudnn::Layout::NCHW, nhwc = cudnn::Layout::NHWC;
  const int64_t window = g.kernel_h * g.kernel_w;

  cudnn::max_pool2d_forward(dt, nchw, c, g, dx.data(), out.data());
  cudnn::max_pool2d_forward(dt, nhwc, c, g, dx_cl.data(), out_cl.data());
  const std::vector<T> out_nchw = checked(out);
  REQUIRE(from_nhwc(checked(out_cl), n, c, g.out_h, g.out_w) == out_nchw);  // a selection: exact anywhere
  cudnn::max_pool2d_backward(dt, nchw, c, g, dx.data(), out.data(), dgo.data(), gi.data());
  cudnn::max_pool2d_backward(dt, nhwc, c, g, dx_cl.data(), out_cl.data(), dgo_cl.data(), gi_cl.data());
  require_same(from_nhwc(checked(gi_cl), n, c, g.in_h, g.in_w), checked(gi), window, "max pool backward");
  for (const bool include_pad : {true, false}) {
    cudnn::avg_pool2d_forward(dt, nchw, c, g, include_pad, dx.data(), out.data());
    cudnn::avg_pool2d_forward(dt, nhwc, c, g, include_pad, dx_cl.data(), out_cl.data());
    require_same(from_nhwc(checked(out_cl), n, c, g.out_h, g.out_w), checked(out), window, "avg pool forward");
    cudnn::avg_pool2d_backward(dt, nchw, c, g, include_pad, dx.data(), out.data(), dgo.data(), gi.data());
    cudnn::avg_pool2d_backward(dt, nhwc, c, g, include_pad, dx_cl.data(), out_cl.data(), dgo_cl.data(), gi_cl.data());
    require_same(from_nhwc(checked(gi_cl), n, c, g.in_h, g.in_w), checked(gi), window, "avg pool backward");
  }
}

}  // namespace

TEMPLATE_TEST_CASE("cudnn NHWC convolutions equal NCHW ones on the same values", "[cuda][cudnn][channels_last]", float,
                   ember::Half, ember::BFloat16) {
  using T = TestType;
#if EMBER_SIMT
  const auto before = ember::simt::cudnn_shim::calls();
#endif
  uint64_t seed = 900;
  // Odd channel counts (a channel without a vector partner), padding, stride 2, a 1x1 and a 5x5.
  for (const Conv2dGeometry& g :
       {conv_geometry(2, 3, 9, 7, 5, 3, 1, 1), conv_geometry(3, 8, 10, 10, 16, 3, 2, 1),
        conv_geometry(2, 16, 6, 6, 8, 1, 1, 0), conv_geometry(1, 4, 11, 9, 6, 5, 1, 2)}) {
    INFO("n " << g.n << " c_in " << g.c_in << " " << g.h << "x" << g.w << " c_out " << g.c_out << " k " << g.kh
              << " stride " << g.stride_h << " pad " << g.pad_h);
    check_conv_nhwc<T>(g, seed);
    seed += 10;
  }
#if EMBER_SIMT
  // Every pass reached the shim with NHWC descriptors: 4 geometries x (2 forwards, 1 data, 1 filter).
  const auto after = ember::simt::cudnn_shim::calls();
  CHECK(after.convolution_nhwc[0] - before.convolution_nhwc[0] == 8);
  CHECK(after.convolution_nhwc[1] - before.convolution_nhwc[1] == 4);
  CHECK(after.convolution_nhwc[2] - before.convolution_nhwc[2] == 4);
#endif
}

TEMPLATE_TEST_CASE("cudnn NHWC pooling equals NCHW pooling on the same values", "[cuda][cudnn][channels_last]", float,
                   ember::Half, ember::BFloat16) {
  using T = TestType;
  check_pool_nhwc<T>(2, 3, pool_geometry(0, 8, 8, 2, 2, 0, false), 950);     // ResNet's and cnn's 2x2
  check_pool_nhwc<T>(3, 5, pool_geometry(0, 9, 7, 3, 2, 1, false), 960);     // overlapping, padded
  check_pool_nhwc<T>(1, 16, pool_geometry(0, 7, 7, 7, 1, 0, false), 970);    // a global window
}

TEST_CASE("cudnn NHWC refuses float64 with a clear error", "[cuda][cudnn][channels_last]") {
  const Conv2dGeometry g = conv_geometry(1, 2, 4, 4, 2, 3, 1, 1);
  DeviceBuffer<double> x(32), w(36), y(32);
  const std::string msg = error_of(
      [&] { cudnn::conv2d_forward(DType::f64, cudnn::Layout::NHWC, g, x.data(), w.data(), nullptr, y.data()); });
  CHECK(msg.find("NHWC (channels-last) float64") != std::string::npos);
  const std::string pool_msg = error_of([&] {
    cudnn::max_pool2d_forward(DType::f64, cudnn::Layout::NHWC, 2, pool_geometry(2, 4, 4, 2, 2, 0, false), x.data(),
                              y.data());
  });
  CHECK(pool_msg.find("NHWC (channels-last) float64") != std::string::npos);
}

TEST_CASE("a channels-last conv2d and max_pool2d on a CUDA device run cuDNN in NHWC", "[cuda][cudnn][channels_last]") {
  using namespace ember;
  using ember::testing::rnd;
  using ember::testing::vec;
  // With EMBER_CUDNN=0 the layers run the hand-written NCHW kernels instead, and no call is NHWC.
  const int64_t want = kernels::gpu::cudnn::use_for_conv() ? 1 : 0;
  const Device gpu = Device::cuda(0);
  // Max pooling reaches cuDNN only when asked for (Note [cuDNN or the hand-written kernels]);
  // otherwise the hand-written channels-last kernels pool in place.
  const ember::testing::CudnnMaxPool scope(true);
  for (const DType dt : {DType::f32, DType::bf16}) {
    INFO(dt);
    const Tensor x0 = rnd({2, 6, 8, 8}, 31, 1.0, gpu).to(dt), w0 = rnd({10, 6, 3, 3}, 32, 0.3, gpu).to(dt);
    const Tensor b0 = rnd({10}, 33, 0.5, gpu).to(dt);
    struct Run {
      std::vector<double> y, gx, gw, gb;
    };
    auto run = [&](MemoryFormat fmt) {
      Tensor x = x0.contiguous(fmt).detach(), w = w0.contiguous(fmt).detach(), b = b0.detach();
      for (Tensor* t : {&x, &w, &b}) t->requires_grad_(true);
      const Tensor y = max_pool2d(conv2d(x, w, b, {.padding = {1, 1}}), {.kernel = {2, 2}});
      CHECK(y.suggest_memory_format() == fmt);
      const Tensor y32 = y.to(DType::f32);
      sum(mul(y32, y32)).backward();
      return Run{vec(y), vec(x.grad()), vec(w.grad()), vec(b.grad())};
    };
#if EMBER_SIMT
    const auto before = simt::cudnn_shim::calls();
#endif
    const Run cl = run(MemoryFormat::channels_last);
#if EMBER_SIMT
    // Each pass reached cuDNN in NHWC: no copy through NCHW around it.
    const auto after = simt::cudnn_shim::calls();
    CHECK(after.convolution_nhwc[0] - before.convolution_nhwc[0] == want);
    CHECK(after.convolution_nhwc[1] - before.convolution_nhwc[1] == want);
    CHECK(after.convolution_nhwc[2] - before.convolution_nhwc[2] == want);
    CHECK(after.pooling_nhwc[0] - before.pooling_nhwc[0] == want);
    CHECK(after.pooling_nhwc[1] - before.pooling_nhwc[1] == want);
#else
    (void)want;
#endif
    const Run plain = run(MemoryFormat::contiguous);
#if EMBER_SIMT
    // The shim stages NHWC through NCHW copies: the same values as the NCHW layers.
    CHECK(cl.y == plain.y);
    CHECK(cl.gx == plain.gx);
    CHECK(cl.gw == plain.gw);
    CHECK(cl.gb == plain.gb);
#else
    // cuDNN's NHWC algorithms sum in their own order (bf16: one rounding of 2^-8 either way).
    const double tol = dt == DType::bf16 ? 2e-2 : 1e-4;
    CHECK(ember::testing::max_rel_diff(cl.y, plain.y) < tol);
    CHECK(ember::testing::max_rel_diff(cl.gx, plain.gx) < tol);
    CHECK(ember::testing::max_rel_diff(cl.gw, plain.gw) < tol);
    CHECK(ember::testing::max_rel_diff(cl.gb, plain.gb) < tol);
#endif
  }
}
