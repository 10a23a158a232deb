// kernels/cuda/conv: im2col / col2im (exact) and the im2col + GEMM convolution against the
// CPU's direct seven-loop references.

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../../kernels/cpu/conv.h"
#include "../../kernels/cuda/conv.h"
#include "conv_check.h"
#include "device_buffer.h"
#include "random_data.h"

namespace {

using ember::DType;
using ember::kernels::Conv2dGeometry;
using ember::testing::abs_of;
using ember::testing::conv_cases;
using ember::testing::ConvCase;
using ember::testing::DeviceBuffer;
using ember::testing::geometry;
using ember::testing::random_vector;
using ember::testing::require_within;

template <typename T>
std::vector<T> download(const DeviceBuffer<T>& b) {
  b.check_guards();
  return b.download();
}

}  // namespace

TEMPLATE_TEST_CASE("cuda im2col and col2im equal the CPU's bit for bit", "[cuda][conv]", float, double) {
  using T = TestType;
  for (const ConvCase& nm : conv_cases()) {
    INFO(nm.name);
    const Conv2dGeometry& g = nm.g;
    const size_t x_img = static_cast<size_t>(g.c_in * g.h * g.w);
    const size_t col_n = static_cast<size_t>(g.c_in * g.kh * g.kw * g.out_h * g.out_w);
    const std::vector<T> x = random_vector<T>(x_img, 1);
    DeviceBuffer<T> dx(x), dcol(col_n);
    ember::kernels::gpu::im2col(g, dx.data(), dcol.data());
    std::vector<T> want(col_n);
    ember::kernels::cpu::im2col(g, x.data(), want.data());
    ember::testing::require_close(download(dcol), want, 0, 0, "im2col");

    // col2im accumulates onto x.
    const std::vector<T> col = random_vector<T>(col_n, 2);
    dcol.upload(col);
    ember::kernels::gpu::col2im(g, dcol.data(), dx.data());
    std::vector<T> want_x = x;
    ember::kernels::cpu::col2im(g, col.data(), want_x.data());
    ember::testing::require_close(download(dx), want_x, 0, 0, "col2im");
  }
}

TEMPLATE_TEST_CASE("cuda conv2d forward and backward match the direct references", "[cuda][conv]", float, double) {
  using T = TestType;
  const DType dt = ember::dtype_of<T>::value;
  uint64_t seed = 10;
  for (const ConvCase& nm : conv_cases()) {
    INFO(nm.name);
    const Conv2dGeometry& g = nm.g;
    const int64_t cin_g = g.c_in / g.groups, cout_g = g.c_out / g.groups, ohw = g.out_h * g.out_w;
    const size_t xn = static_cast<size_t>(g.n * g.c_in * g.h * g.w), wn = static_cast<size_t>(g.c_out * cin_g * g.kh * g.kw);
    const size_t yn = static_cast<size_t>(g.n * g.c_out * ohw);
    const std::vector<T> x = random_vector<T>(xn, seed++), w = random_vector<T>(wn, seed++);
    const std::vector<T> bias = random_vector<T>(static_cast<size_t>(g.c_out), seed++);
    const std::vector<T> gy = random_vector<T>(yn, seed++);
    DeviceBuffer<T> dx(x), dw(w), db(bias), dgy(gy), dy(yn), dgx(xn), dgw(wn), dgb(static_cast<size_t>(g.c_out));

    for (bool with_bias : {true, false}) {
      ember::kernels::gpu::conv2d_forward(dt, g, dx.data(), dw.data(), with_bias ? db.data() : nullptr, dy.data());
      std::vector<T> want(yn), bound(yn);
      ember::kernels::cpu::conv2d_forward_reference(dt, g, x.data(), w.data(), with_bias ? bias.data() : nullptr,
                                                    want.data());
      ember::kernels::cpu::conv2d_forward_reference(dt, g, abs_of(x).data(), abs_of(w).data(),
                                                    with_bias ? abs_of(bias).data() : nullptr, bound.data());
      require_within(download(dy), want, bound, cin_g * g.kh * g.kw + 1, "forward");
    }

    ember::kernels::gpu::conv2d_backward_data(dt, g, dgy.data(), dw.data(), dgx.data());
    std::vector<T> want_gx(xn), bound_gx(xn);
    ember::kernels::cpu::conv2d_backward_data_reference(dt, g, gy.data(), w.data(), want_gx.data());
    ember::kernels::cpu::conv2d_backward_data_reference(dt, g, abs_of(gy).data(), abs_of(w).data(), bound_gx.data());
    require_within(download(dgx), want_gx, bound_gx, cout_g * g.kh * g.kw, "backward data");

    ember::kernels::gpu::conv2d_backward_weight(dt, g, dgy.data(), dx.data(), dgw.data());
    std::vector<T> want_gw(wn), bound_gw(wn);
    ember::kernels::cpu::conv2d_backward_weight_reference(dt, g, gy.data(), x.data(), want_gw.data());
    ember::kernels::cpu::conv2d_backward_weight_reference(dt, g, abs_of(gy).data(), abs_of(x).data(), bound_gw.data());
    require_within(download(dgw), want_gw, bound_gw, g.n * ohw, "backward weight");

    // Bias: the CPU sums in cpu_acc_t (double), the CUDA kernel in acc_t<T> (float for f32:
    // Note [Accumulation types] in core/dtype.h), so an n * out_h * out_w term sum in T, bounded
    // like the products above (S = the sum of |grad_y|).
    ember::kernels::gpu::conv2d_backward_bias(dt, g, dgy.data(), dgb.data());
    std::vector<T> want_gb(static_cast<size_t>(g.c_out)), bound_gb(static_cast<size_t>(g.c_out));
    ember::kernels::cpu::conv2d_backward_bias(dt, g, gy.data(), want_gb.data());
    ember::kernels::cpu::conv2d_backward_bias(dt, g, abs_of(gy).data(), bound_gb.data());
    require_within(download(dgb), want_gb, bound_gb, g.n * ohw, "backward bias");
  }
}

TEST_CASE("cuda conv2d: a batch larger than one im2col chunk, and more images than blocks", "[cuda][conv]") {
  // 40 images of 3 x 16 x 16 with a 3x3 kernel: several GEMM products per batched call.
  const Conv2dGeometry g = geometry(40, 3, 16, 16, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  const size_t xn = static_cast<size_t>(g.n * g.c_in * g.h * g.w), wn = static_cast<size_t>(g.c_out * g.c_in * 9);
  const size_t yn = static_cast<size_t>(g.n * g.c_out * g.out_h * g.out_w);
  const std::vector<float> x = random_vector<float>(xn, 3), w = random_vector<float>(wn, 4);
  const std::vector<float> gy = random_vector<float>(yn, 5);
  DeviceBuffer<float> dx(x), dw(w), dy(yn), dgy(gy), dgw(wn);
  ember::kernels::gpu::conv2d_forward(DType::f32, g, dx.data(), dw.data(), nullptr, dy.data());
  std::vector<float> want(yn), bound(yn);
  ember::kernels::cpu::conv2d_forward_reference(DType::f32, g, x.data(), w.data(), nullptr, want.data());
  ember::kernels::cpu::conv2d_forward_reference(DType::f32, g, abs_of(x).data(), abs_of(w).data(), nullptr, bound.data());
  require_within(download(dy), want, bound, 27, "forward");
  ember::kernels::gpu::conv2d_backward_weight(DType::f32, g, dgy.data(), dx.data(), dgw.data());
  std::vector<float> want_gw(wn), bound_gw(wn);
  ember::kernels::cpu::conv2d_backward_weight_reference(DType::f32, g, gy.data(), x.data(), want_gw.data());
  ember::kernels::cpu::conv2d_backward_weight_reference(DType::f32, g, abs_of(gy).data(), abs_of(x).data(),
                                                        bound_gw.data());
  require_within(download(dgw), want_gw, bound_gw, g.n * 256, "backward weight");
}

TEST_CASE("cuda conv2d: NaN in the input reaches exactly the outputs whose window covers it", "[cuda][conv]") {
  const Conv2dGeometry g = geometry(1, 2, 6, 6, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  std::vector<float> x = random_vector<float>(static_cast<size_t>(2 * 36), 6);
  x[static_cast<size_t>(1 * 36 + 2 * 6 + 3)] = std::numeric_limits<float>::quiet_NaN();  // channel 1, (2, 3)
  x[static_cast<size_t>(0 * 36 + 5 * 6 + 0)] = std::numeric_limits<float>::infinity();   // channel 0, (5, 0)
  const std::vector<float> w(static_cast<size_t>(3 * 2 * 9), 0.5f);  // positive: +inf stays +inf
  DeviceBuffer<float> dx(x), dw(w), dy(static_cast<size_t>(3 * 36));
  ember::kernels::gpu::conv2d_forward(DType::f32, g, dx.data(), dw.data(), nullptr, dy.data());
  std::vector<float> want(static_cast<size_t>(3 * 36)), bound(want.size());
  ember::kernels::cpu::conv2d_forward_reference(DType::f32, g, x.data(), w.data(), nullptr, want.data());
  ember::kernels::cpu::conv2d_forward_reference(DType::f32, g, abs_of(x).data(), w.data(), nullptr, bound.data());
  require_within(download(dy), want, bound, 18, "forward with NaN/Inf");
}

TEST_CASE("cuda conv2d: empty batch and empty output", "[cuda][conv]") {
  Conv2dGeometry g = geometry(0, 3, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  DeviceBuffer<float> dx(1), dw(static_cast<size_t>(4 * 3 * 9)), dy(1), dgw(static_cast<size_t>(4 * 3 * 9)), dgb(4);
  ember::kernels::gpu::conv2d_forward(DType::f32, g, dx.data(), dw.data(), nullptr, dy.data());
  ember::kernels::gpu::conv2d_backward_data(DType::f32, g, dy.data(), dw.data(), dx.data());
  // No images: the weight and bias gradients are sums over nothing, zero.
  ember::kernels::gpu::conv2d_backward_weight(DType::f32, g, dy.data(), dx.data(), dgw.data());
  ember::kernels::gpu::conv2d_backward_bias(DType::f32, g, dy.data(), dgb.data());
  ember::testing::require_close(download(dgw), std::vector<float>(static_cast<size_t>(4 * 3 * 9), 0.0f), 0, 0, "gw");
  ember::testing::require_close(download(dgb), std::vector<float>(4, 0.0f), 0, 0, "gb");
  dx.check_guards();
  dy.check_guards();
}
