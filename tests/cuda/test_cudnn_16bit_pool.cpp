// kernels/cuda/cudnn pooling and activations in f16 and bf16 (Note [16-bit pooling and
// activations] in kernels/cuda/cudnn.h): against the hand-written CUDA kernels (max pooling and
// ReLU bit for bit, on every 16-bit pattern for the activations) and against double references
// from the same 16-bit inputs; the layers reaching cuDNN as 16-bit calls (the shim's counters);
// alpha/beta blended in float with one rounding.
//
// Built when cuDNN is there (a GPU build with libcudnn, or SIMT with <cudnn.h>).

#include <cudnn.h>
#include <ember/ember.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "../../kernels/cpu/pool.h"
#include "../../kernels/cuda/cudnn.h"
#include "../../kernels/cuda/elementwise.h"
#include "../../kernels/cuda/pool.h"
#include "conv_check.h"
#include "cudnn_fixture.h"
#include "cudnn_max_pool.h"
#include "device_buffer.h"
#include "random_data.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

using ember::DType;
using ember::kernels::Pool2dGeometry;
using ember::testing::DeviceBuffer;
namespace cudnn = ember::kernels::gpu::cudnn;
namespace gpu = ember::kernels::gpu;
using namespace ember::testing::cudnn_fixture;

template <typename H>
DType dtype16() {
  return std::is_same_v<H, ember::Half> ? DType::f16 : DType::bf16;
}

template <typename H>
uint16_t bits(H v) {
  uint16_t b;
  std::memcpy(&b, &v, 2);
  return b;
}

// got and want hold the same 16-bit patterns (NaN payloads and the sign of zero included; on a
// real GPU any NaN for a NaN and either zero for a zero: Note [Bits on a real GPU] in
// device_buffer.h).
template <typename H>
void require_same_bits(const std::vector<H>& got, const std::vector<H>& want, const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(what << " element " << i << ": got 0x" << std::hex << bits(got[i]) << ", want 0x" << bits(want[i]));
    if (!ember::testing::kExactNanBits && ember::testing::is_nan_value(got[i]) &&
        ember::testing::is_nan_value(want[i]))
      continue;
    if (!ember::testing::kExactNanBits && (bits(got[i]) & 0x7fff) == 0 && (bits(want[i]) & 0x7fff) == 0) continue;
    REQUIRE(bits(got[i]) == bits(want[i]));
  }
}

template <typename H>
std::vector<H> all_patterns() {
  std::vector<H> v(65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto b = static_cast<uint16_t>(i);
    std::memcpy(&v[i], &b, 2);
  }
  return v;
}

ember::kernels::IterShape flat(int64_t n) {
  ember::kernels::IterShape s;
  s.ndim = 1;
  s.sizes[0] = n;
  return s;
}
ember::kernels::Operand operand(const void* p) {
  ember::kernels::Operand o;
  o.data = const_cast<void*>(p);
  o.strides[0] = 1;
  return o;
}

// One pooling geometry in 16 bits: cuDNN against the hand-written kernels and double references.
template <typename H>
void check_pool_16bit(const Pool2dGeometry& g, uint64_t seed) {
  const DType dt = dtype16<H>(), f64 = DType::f64;
  const size_t in_n = static_cast<size_t>(g.planes * g.in_h * g.in_w),
               out_n = static_cast<size_t>(g.planes * g.out_h * g.out_w);
  const int64_t window = g.kernel_h * g.kernel_w;
  std::vector<H> x = random_16bit<H>(in_n, seed);
  x[1] = H(-0.0f);  // a signed zero, and a tie of values in one window
  x[2] = H(0.0f);
  x[in_n / 2] = H(std::numeric_limits<float>::quiet_NaN());  // NaN wins its max windows
  const std::vector<H> go = random_16bit<H>(out_n, seed + 1);
  const std::vector<double> xd = to_double(x), god = to_double(go);
  DeviceBuffer<H> dx(x), dgo(go), dout(out_n), dgi(in_n), hout(out_n), hgi(in_n);
  DeviceBuffer<int64_t> idx(out_n);

  // Max: a selection, bit for bit the hand-written kernel's, forward and backward.
  cudnn::max_pool2d_forward(dt, cudnn::Layout::NCHW, 1, g, dx.data(), dout.data());
  gpu::max_pool2d_forward(dt, DType::i64, g, dx.data(), hout.data(), idx.data());
  require_same_bits(checked(dout), checked(hout), "max forward");
  cudnn::max_pool2d_backward(dt, cudnn::Layout::NCHW, 1, g, dx.data(), dout.data(), dgo.data(), dgi.data());
  gpu::max_pool2d_backward(dt, DType::i64, g, dgo.data(), idx.data(), hgi.data());
  if (g.stride_h >= g.kernel_h && g.stride_w >= g.kernel_w) {
    require_same_bits(checked(dgi), checked(hgi), "max backward (disjoint windows)");
  } else {
    // Overlapping windows: gradients summed in float, one rounding (the order may differ).
    std::vector<double> want(in_n, 0.0), abs_sum(in_n, 0.0);
    const std::vector<int64_t> at = idx.download();
    const int64_t plane_in = g.in_h * g.in_w, plane_out = g.out_h * g.out_w;
    for (size_t o = 0; o < out_n; ++o) {
      const size_t i = static_cast<size_t>(static_cast<int64_t>(o) / plane_out * plane_in + at[o]);
      want[i] += god[o];
      abs_sum[i] += std::fabs(god[o]);
    }
    require_16bit_within(checked(dgi), want, abs_sum, window, "max backward (overlapping windows)");
    require_16bit_within(checked(hgi), want, abs_sum, window, "hand-written max backward");
  }
  // Average: one rounding of the window mean, within the bound of the double reference.
  for (bool include_pad : {true, false}) {
    INFO("count_include_pad " << include_pad);
    std::vector<double> want(out_n), abs_sum(out_n);
    cudnn::avg_pool2d_forward(dt, cudnn::Layout::NCHW, 1, g, include_pad, dx.data(), dout.data());
    ember::kernels::cpu::avg_pool2d_forward(f64, g, include_pad, xd.data(), want.data());
    ember::kernels::cpu::avg_pool2d_forward(f64, g, include_pad, ember::testing::abs_of(xd).data(), abs_sum.data());
    std::vector<H> got = checked(dout);
    for (size_t i = 0; i < out_n; ++i)
      if (std::isnan(want[i])) {  // NaN spreads through its windows
        CHECK(std::isnan(static_cast<float>(got[i])));
        got[i] = H(0.0f), want[i] = 0.0, abs_sum[i] = 0.0;
      }
    require_16bit_within(got, want, abs_sum, window, "avg forward");
    std::vector<double> want_gi(in_n), abs_gi(in_n);
    cudnn::avg_pool2d_backward(dt, cudnn::Layout::NCHW, 1, g, include_pad, dx.data(), dout.data(), dgo.data(), dgi.data());
    ember::kernels::cpu::avg_pool2d_backward(f64, g, include_pad, god.data(), want_gi.data());
    ember::kernels::cpu::avg_pool2d_backward(f64, g, include_pad, ember::testing::abs_of(god).data(), abs_gi.data());
    require_16bit_within(checked(dgi), want_gi, abs_gi, window, "avg backward");
  }
}

}  // namespace

TEMPLATE_TEST_CASE("cudnn max/avg pooling in f16/bf16: the hand-written kernels' values, float sums rounded once",
                   "[cuda][cudnn][low_precision]", ember::Half, ember::BFloat16) {
  using H = TestType;
#if EMBER_SIMT
  const auto s0 = shim();
#endif
  const Pool2dGeometry cases[] = {
      pool_geometry(3, 8, 6, 2, 2, 0, false),  // disjoint 2x2 windows
      pool_geometry(2, 9, 7, 3, 2, 1, false),  // overlapping, padded
      pool_geometry(1, 5, 5, 3, 1, 1, false),  // every input in up to 9 windows
  };
  uint64_t seed = 40;
  for (const Pool2dGeometry& g : cases) {
    INFO("planes " << g.planes << ", " << g.in_h << "x" << g.in_w << ", kernel " << g.kernel_h << ", stride "
                   << g.stride_h << ", pad " << g.pad_h);
    check_pool_16bit<H>(g, seed);
    seed += 2;
  }
#if EMBER_SIMT
  const auto s1 = shim();
  const bool f16 = std::is_same_v<H, ember::Half>;
  const int64_t calls = 3 * 3;  // max + 2 avg per case
  for (int i : {0, 1}) {
    CHECK(s1.pooling_f16[i] - s0.pooling_f16[i] == (f16 ? calls : 0));
    CHECK(s1.pooling_bf16[i] - s0.pooling_bf16[i] == (f16 ? 0 : calls));
  }
  CHECK(s1.pooling_forward - s0.pooling_forward == calls);  // and nothing besides
#endif
}

// Every 16-bit pattern (NaNs, infinities, subnormals, both zeros) through ReLU, sigmoid and tanh.
// ReLU selects or zeroes, so it equals the hand-written kernel bit for bit anywhere; sigmoid and
// tanh run the same float functors in the emulator's shim (on a GPU, cuDNN's own within an ulp).
TEMPLATE_TEST_CASE("cudnn activations in f16/bf16 equal the hand-written kernels on every bit pattern",
                   "[cuda][cudnn][low_precision]", ember::Half, ember::BFloat16) {
  using H = TestType;
  const DType dt = dtype16<H>();
  const std::vector<H> x = all_patterns<H>();
  const auto n = static_cast<int64_t>(x.size());
  std::vector<H> gy = random_16bit<H>(x.size(), 9);
  DeviceBuffer<H> dx(x), dgy(gy), dy(x.size()), dgx(x.size()), hy(x.size()), hgx(x.size());
#if EMBER_SIMT
  const auto s0 = shim();
#endif
  for (const ActivationCase& act : kActivations) {
    INFO(act.name);
    cudnn::activation_forward(act.a, dt, n, dx.data(), dy.data());
    gpu::unary(act.op, dt, flat(n), operand(hy.data()), operand(dx.data()), 0.0);
    cudnn::activation_backward(act.a, dt, n, dx.data(), dy.data(), dgy.data(), dgx.data());
    gpu::unary_backward(act.op, dt, flat(n), operand(hgx.data()), operand(dgy.data()), operand(dx.data()),
                        operand(hy.data()), 0.0);
#if EMBER_SIMT
    require_same_bits(checked(dy), checked(hy), "forward");
    require_same_bits(checked(dgx), checked(hgx), "backward");
#else
    if (act.a == cudnn::Activation::Relu) {
      require_same_bits(checked(dy), checked(hy), "forward");
      require_same_bits(checked(dgx), checked(hgx), "backward");
    }
#endif
  }
  // ReLU's known answers: -0 and negatives give +0, NaN stays NaN, +inf stays.
  cudnn::activation_forward(cudnn::Activation::Relu, dt, n, dx.data(), dy.data());
  const std::vector<H> y = checked(dy);
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = static_cast<float>(x[i]), r = static_cast<float>(y[i]);
    INFO("x " << v << " relu " << r);
    if (std::isnan(v))
      REQUIRE(std::isnan(r));
    else if (v > 0)
      REQUIRE(bits(y[i]) == bits(x[i]));
    else
      REQUIRE(bits(y[i]) == 0);
  }
#if EMBER_SIMT
  const auto s1 = shim();
  const bool f16 = std::is_same_v<H, ember::Half>;
  const int64_t calls[2] = {4, 3};  // three activations both ways, and ReLU's known answers forward
  for (int i : {0, 1}) {
    CHECK(s1.activation_f16[i] - s0.activation_f16[i] == (f16 ? calls[i] : 0));
    CHECK(s1.activation_bf16[i] - s0.activation_bf16[i] == (f16 ? 0 : calls[i]));
  }
#endif
}

#if EMBER_SIMT
TEST_CASE("cudnn layers in f16/bf16: pooling reaches cuDNN natively (activations stay hand-written), unless "
          "EMBER_CUDNN=0",
          "[cuda][cudnn][cudnn_layers][low_precision]") {
  using namespace ember;
  const Device dev = Device::cuda(0);
  const int64_t expect = cudnn::enabled() ? 1 : 0;
  // Max pooling only when asked for (Note [cuDNN or the hand-written kernels]): both ways.
  for (const bool max_via_cudnn : {false, true}) {
    const ember::testing::CudnnMaxPool scope(max_via_cudnn);
    const int64_t pools = (max_via_cudnn ? 2 : 1) * expect;  // avg, and max when asked
    for (const DType dt : {DType::f16, DType::bf16}) {
      INFO("dtype " << dt << ", max pooling through cuDNN: " << max_via_cudnn);
      Generator gen(5);
      const Tensor x = randn({2, 3, 8, 8}, {}, gen).to(dt).to(dev).requires_grad_(true);
      const auto s0 = shim();
      Tensor y = relu(x);
      y = max_pool2d(y, {.kernel = {2, 2}});
      y = avg_pool2d(tanh(y), {.kernel = {2, 2}});
      y = sigmoid(y);
      y.to(DType::f32).sum().backward();
      const auto s1 = shim();
      CHECK(y.dtype() == dt);
      REQUIRE(x.grad().defined());
      CHECK(x.grad().dtype() == dt);
      const bool f16 = dt == DType::f16;
      for (int i : {0, 1}) {
        CHECK(s1.pooling_f16[i] - s0.pooling_f16[i] == (f16 ? pools : 0));
        CHECK(s1.pooling_bf16[i] - s0.pooling_bf16[i] == (f16 ? 0 : pools));
        // ReLU, tanh and sigmoid: the hand-written kernels (Note [cuDNN or the hand-written kernels]).
        CHECK(s1.activation_f16[i] == s0.activation_f16[i]);
        CHECK(s1.activation_bf16[i] == s0.activation_bf16[i]);
      }
      // No widened f32 call besides the 16-bit ones.
      CHECK(s1.pooling_forward - s0.pooling_forward == pools);
      CHECK(s1.activation_forward == s0.activation_forward);
      // The same values as the f32 layers on the same 16-bit input, rounded to 16 bits once per op.
      const Tensor x32 = x.detach().to(DType::f32);
      const Tensor pooled = max_pool2d(relu(x32), {.kernel = {2, 2}});
      const std::vector<float> want = pooled.to(dt).to(DType::f32).to(Device::cpu()).to_vector<float>();
      const std::vector<float> got =
          max_pool2d(relu(x.detach()), {.kernel = {2, 2}}).to(DType::f32).to(Device::cpu()).to_vector<float>();
      REQUIRE(got == want);  // max pooling and ReLU select: exact
    }
  }
}

// alpha/beta on 16-bit pooling: y = round(alpha * mean + beta * y), one rounding of the float blend.
TEST_CASE("cudnn shim: 16-bit pooling and activations blend alpha/beta in float with one rounding",
          "[cuda][cudnn][low_precision]") {
  using ember::Half;
  Objects o;
  REQUIRE(cudnnSetTensor4dDescriptor(o.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, 1, 1, 1, 2) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetTensor4dDescriptor(o.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, 1, 1, 1, 1) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetPooling2dDescriptor(o.pool, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, CUDNN_PROPAGATE_NAN, 1, 2, 0,
                                      0, 1, 2) == CUDNN_STATUS_SUCCESS);
  // mean(1, 2^-11) = 0.5 + 2^-12, a tie in f16 (spacing 2^-11 at 0.5); plus beta * y = 2^-14 it
  // rounds up to 0.5 + 2^-11 (rounding the mean first would give 0.5, and 0.5 + 2^-14 again 0.5).
  DeviceBuffer<Half> x(std::vector<Half>{Half(1.0f), Half(std::ldexp(1.0f, -11))});
  DeviceBuffer<Half> y(std::vector<Half>{Half(std::ldexp(1.0f, -14))});
  const float one = 1.0f, zero = 0.0f;
  REQUIRE(cudnnPoolingForward(o.h, o.pool, &one, o.x, x.data(), &one, o.y, y.data()) == CUDNN_STATUS_SUCCESS);
  CHECK(static_cast<float>(checked(y)[0]) == 0.5f + std::ldexp(1.0f, -11));
  // beta = 0: y is not read (NaN there does not matter); the tie rounds to even, 0.5.
  y.upload(std::vector<Half>{Half(std::numeric_limits<float>::quiet_NaN())});
  REQUIRE(cudnnPoolingForward(o.h, o.pool, &one, o.x, x.data(), &zero, o.y, y.data()) == CUDNN_STATUS_SUCCESS);
  CHECK(static_cast<float>(checked(y)[0]) == 0.5f);
  // ReLU with alpha = 0.5, beta = 1 on bfloat16: 0.5 * (1 + 2^-7) + 2^-9 = 0.5 + 2^-8 + 2^-9, one
  // rounding (spacing 2^-8 at 0.5, a tie between 0.5 + 2^-8 and 0.5 + 2^-7) to even: 0.5 + 2^-7.
  using ember::BFloat16;
  REQUIRE(cudnnSetTensor4dDescriptor(o.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_BFLOAT16, 1, 1, 1, 1) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetActivationDescriptor(o.act, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0) == CUDNN_STATUS_SUCCESS);
  DeviceBuffer<BFloat16> bx(std::vector<BFloat16>{BFloat16(1.0f + std::ldexp(1.0f, -7))});
  DeviceBuffer<BFloat16> by(std::vector<BFloat16>{BFloat16(std::ldexp(1.0f, -9))});
  const float half_alpha = 0.5f;
  REQUIRE(cudnnActivationForward(o.h, o.act, &half_alpha, o.x, bx.data(), &one, o.x, by.data()) ==
          CUDNN_STATUS_SUCCESS);
  CHECK(static_cast<float>(checked(by)[0]) == 0.5f + std::ldexp(1.0f, -7));
  // Operands of different data types: BAD_PARAM, as from cuDNN.
  REQUIRE(cudnnSetTensor4dDescriptor(o.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, 1, 1, 1, 1) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnActivationForward(o.h, o.act, &one, o.x, bx.data(), &zero, o.y, y.data()) == CUDNN_STATUS_BAD_PARAM);
}
#endif
