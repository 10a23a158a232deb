// kernels/cuda/cudnn in f16 and bf16 (Note [16-bit convolutions] in kernels/cuda/cudnn.h):
// convolutions with 16-bit data and float compute against double references from the same 16-bit
// inputs, the conv2d layer reaching cuDNN as 16-bit calls, and what the emulator's cuDNN shim
// accepts and refuses in 16 bits. The cuDNN tests of f32 and f64 are in test_cudnn.cpp.
//
// Built when cuDNN is there (a GPU build with libcudnn, or SIMT with <cudnn.h>).

#include <cudnn.h>
#include <ember/ember.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../../core/error.h"
#include "../../kernels/cpu/conv.h"
#include "../../kernels/cuda/cudnn.h"
#include "../../core/cuda/runtime.h"
#include "conv_check.h"
#include "cudnn_fixture.h"
#include "device_buffer.h"
#include "random_data.h"

#if EMBER_SIMT
#include "../../kernels/simt/cudnn_shim.h"
#endif

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

using ember::DType;
using ember::kernels::Conv2dGeometry;
using ember::testing::abs_of;
using ember::testing::conv_cases;
using ember::testing::ConvCase;
using ember::testing::DeviceBuffer;
using ember::testing::random_vector;
namespace cudnn = ember::kernels::gpu::cudnn;
using namespace ember::testing::cudnn_fixture;

// The double reference of one kernel run on the absolute values too (the bound's S).
struct Reference {
  std::vector<double> want, abs_sum;
};

// Forward (with and without bias) and the three backward passes of g in 16 bits through cuDNN,
// against double references from the same 16-bit inputs.
template <typename H>
void check_conv_16bit(const Conv2dGeometry& g, uint64_t seed) {
  const DType dt = std::is_same_v<H, ember::Half> ? DType::f16 : DType::bf16, f64 = DType::f64;
  const int64_t cin_g = g.c_in / g.groups, cout_g = g.c_out / g.groups, ohw = g.out_h * g.out_w;
  const size_t xn = static_cast<size_t>(g.n * g.c_in * g.h * g.w),
               wn = static_cast<size_t>(g.c_out * cin_g * g.kh * g.kw);
  const size_t yn = static_cast<size_t>(g.n * g.c_out * ohw), bn = static_cast<size_t>(g.c_out);
  const std::vector<H> x = random_16bit<H>(xn, seed), w = random_16bit<H>(wn, seed + 1);
  const std::vector<H> bias = random_16bit<H>(bn, seed + 2), gy = random_16bit<H>(yn, seed + 3);
  const std::vector<double> xd = to_double(x), wd = to_double(w), bd = to_double(bias), gyd = to_double(gy);
  DeviceBuffer<H> dx(x), dw(w), db(bias), dgy(gy), dy(yn), dgx(xn), dgw(wn), dgb(bn);
  for (bool with_bias : {true, false}) {
    cudnn::conv2d_forward(dt, cudnn::Layout::NCHW, g, dx.data(), dw.data(), with_bias ? db.data() : nullptr, dy.data());
    Reference r{std::vector<double>(yn), std::vector<double>(yn)};
    ember::kernels::cpu::conv2d_forward_reference(f64, g, xd.data(), wd.data(), with_bias ? bd.data() : nullptr,
                                                  r.want.data());
    ember::kernels::cpu::conv2d_forward_reference(f64, g, abs_of(xd).data(), abs_of(wd).data(),
                                                  with_bias ? abs_of(bd).data() : nullptr, r.abs_sum.data());
    require_16bit_within(checked(dy), r.want, r.abs_sum, cin_g * g.kh * g.kw + 1,
                         with_bias ? "forward with bias" : "forward");
  }
  cudnn::conv2d_backward_data(dt, cudnn::Layout::NCHW, g, dgy.data(), dw.data(), dgx.data());
  Reference rx{std::vector<double>(xn), std::vector<double>(xn)};
  ember::kernels::cpu::conv2d_backward_data_reference(f64, g, gyd.data(), wd.data(), rx.want.data());
  ember::kernels::cpu::conv2d_backward_data_reference(f64, g, abs_of(gyd).data(), abs_of(wd).data(),
                                                      rx.abs_sum.data());
  require_16bit_within(checked(dgx), rx.want, rx.abs_sum, cout_g * g.kh * g.kw, "backward data");

  cudnn::conv2d_backward_weight(dt, cudnn::Layout::NCHW, g, dgy.data(), dx.data(), dgw.data());
  Reference rw{std::vector<double>(wn), std::vector<double>(wn)};
  ember::kernels::cpu::conv2d_backward_weight_reference(f64, g, gyd.data(), xd.data(), rw.want.data());
  ember::kernels::cpu::conv2d_backward_weight_reference(f64, g, abs_of(gyd).data(), abs_of(xd).data(),
                                                        rw.abs_sum.data());
  require_16bit_within(checked(dgw), rw.want, rw.abs_sum, g.n * ohw, "backward weight");

  cudnn::conv2d_backward_bias(dt, cudnn::Layout::NCHW, g, dgy.data(), dgb.data());
  Reference rb{std::vector<double>(bn), std::vector<double>(bn)};
  ember::kernels::cpu::conv2d_backward_bias(f64, g, gyd.data(), rb.want.data());
  ember::kernels::cpu::conv2d_backward_bias(f64, g, abs_of(gyd).data(), rb.abs_sum.data());
  require_16bit_within(checked(dgb), rb.want, rb.abs_sum, g.n * ohw, "backward bias");
}

}  // namespace

TEMPLATE_TEST_CASE("cudnn conv2d in f16/bf16: float sums, one rounding, against double references",
                   "[cuda][cudnn][low_precision]", ember::Half, ember::BFloat16) {
  using H = TestType;
  uint64_t seed = 140;
#if EMBER_SIMT
  const auto before = shim();
#endif
  for (const ConvCase& c : conv_cases()) {
    INFO(c.name);
    check_conv_16bit<H>(c.g, seed);
    seed += 4;
  }
#if EMBER_SIMT
  // Every pass reached the shim in 16 bits (two forwards per case: with and without bias).
  const auto after = shim();
  const auto n = static_cast<int64_t>(conv_cases().size());
  const bool f16 = std::is_same_v<H, ember::Half>;
  for (Pass p : {Pass::Forward, Pass::BackwardData, Pass::BackwardFilter}) {
    const int64_t f16_calls = after.convolution_f16[pass(p)] - before.convolution_f16[pass(p)];
    const int64_t bf16_calls = after.convolution_bf16[pass(p)] - before.convolution_bf16[pass(p)];
    const int64_t expect = p == Pass::Forward ? 2 * n : n;
    CHECK(f16_calls == (f16 ? expect : 0));
    CHECK(bf16_calls == (f16 ? 0 : expect));
  }
  CHECK(after.add_tensor_16bit - before.add_tensor_16bit == n);
  // cuDNN 9 has no bf16 bias gradient: bf16's is the hand-written reduction.
  CHECK(after.backward_bias_16bit - before.backward_bias_16bit == (f16 ? n : 0));
#endif
}

#if EMBER_SIMT
// conv2d on f16/bf16 CUDA tensors reaches cuDNN as 16-bit convolutions, forward and both backward
// passes, and makes no f32 convolution (the widened path made only f32 ones); gradients come out
// in the inputs' dtype. With EMBER_CUDNN=0 the hand-written kernels widen: no cuDNN call at all.
// The bias joins the float sum before the one rounding: with x = (1, 2^-11), w = (1, 1) and bias
// 2^-13, the exact 1 + 2^-11 + 2^-13 rounds to f16's 1 + 2^-10, where rounding the convolution
// first (1 + 2^-11 is a tie, to even: 1) and then the sum (1 + 2^-13) gives 1.
TEST_CASE("cudnn conv2d layer in f16/bf16: native 16-bit convolutions, unless EMBER_CUDNN=0",
          "[cuda][cudnn][cudnn_layers][low_precision]") {
  using namespace ember;
  const Device dev = Device::cuda(0);
  const int64_t expect = cudnn::enabled() ? 1 : 0;
  for (const DType dt : {DType::f16, DType::bf16}) {
    INFO("dtype " << dt);
    Generator gen(11);
    const auto leaf = [&](Shape s) { return randn(s, {}, gen).to(dt).to(dev).requires_grad_(true); };
    const Tensor x = leaf({2, 4, 9, 7}), w = leaf({6, 2, 3, 2}), b = leaf({6});
    const Conv2dOptions opt{.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}, .groups = 2};
    const auto s0 = shim();
    const Tensor y = conv2d(x, w, b, opt);
    y.to(DType::f32).sum().backward();
    const auto s1 = shim();
    CHECK(y.dtype() == dt);
    for (const Tensor* t : {&x, &w, &b}) {
      REQUIRE(t->grad().defined());
      CHECK(t->grad().dtype() == dt);
    }
    for (Pass p : {Pass::Forward, Pass::BackwardData, Pass::BackwardFilter}) {
      const int64_t all = s1.convolution[pass(p)] - s0.convolution[pass(p)];
      const int64_t f16 = s1.convolution_f16[pass(p)] - s0.convolution_f16[pass(p)];
      const int64_t bf16 = s1.convolution_bf16[pass(p)] - s0.convolution_bf16[pass(p)];
      CHECK(all == expect);  // no widened f32 convolution besides
      CHECK(f16 == (dt == DType::f16 ? expect : 0));
      CHECK(bf16 == (dt == DType::bf16 ? expect : 0));
    }
    CHECK(s1.backward_bias_16bit - s0.backward_bias_16bit == (dt == DType::f16 ? expect : 0));
    // Against the f32 CPU convolution of the same 16-bit values: one rounding of the float sum.
    const auto f32 = [](const Tensor& t) { return t.detach().to(DType::f32).to(Device::cpu()); };
    const std::vector<float> got = f32(y).to_vector<float>();
    const std::vector<float> want = conv2d(f32(x), f32(w), f32(b), opt).to_vector<float>();
    const double u = dt == DType::f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
      CHECK(std::fabs(got[i] - want[i]) <= 1.01 * u * std::fabs(want[i]) + 1e-4);
    }
  }
  // One rounding of conv + bias (cuDNN only: the widened path rounds once as well).
  const Tensor x = from_vector<float>({1.0f, std::ldexp(1.0f, -11)}, {1, 2, 1, 1}).to(DType::f16).to(dev);
  const Tensor w = from_vector<float>({1.0f, 1.0f}, {1, 2, 1, 1}).to(DType::f16).to(dev);
  const Tensor b = from_vector<float>({std::ldexp(1.0f, -13)}, {1}).to(DType::f16).to(dev);
  const std::vector<float> y = conv2d(x, w, b).to(DType::f32).to(Device::cpu()).to_vector<float>();
  REQUIRE(y.size() == 1);
  CHECK(y[0] == 1.0f + std::ldexp(1.0f, -10));
}

// What cuDNN refuses of 16-bit convolutions, the shim refuses too: 16-bit data with a double
// compute type and bfloat16 with bfloat16 compute (not in cuDNN's supported configurations:
// NOT_SUPPORTED), and data types that differ between x, w and y (BAD_PARAM). Half data with half
// compute (TRUE_HALF_CONFIG) is cuDNN's but not the shim's (NOT_SUPPORTED); FFT and Winograd are
// float32 only in the shim (Note [The shim's convolution algorithms]), so the heuristics rank them
// unsupported. (16-bit pooling and activations: test_cudnn_16bit_pool.cpp.)
TEST_CASE("cudnn shim: 16-bit convolutions with float compute only, refusing what cuDNN refuses",
          "[cuda][cudnn][low_precision]") {
  Objects o;
  const auto set = [&](cudnnDataType_t xt, cudnnDataType_t wt, cudnnDataType_t yt, cudnnDataType_t compute) {
    REQUIRE(cudnnSetTensor4dDescriptor(o.x, CUDNN_TENSOR_NCHW, xt, 1, 2, 4, 4) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetTensor4dDescriptor(o.y, CUDNN_TENSOR_NCHW, yt, 1, 2, 4, 4) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetFilter4dDescriptor(o.w, wt, CUDNN_TENSOR_NCHW, 2, 2, 3, 3) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetConvolution2dDescriptor(o.conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, compute) ==
            CUDNN_STATUS_SUCCESS);
  };
  DeviceBuffer<ember::Half> x(random_16bit<ember::Half>(32, 5)), w(random_16bit<ember::Half>(36, 6)), y(32);
  const float one = 1.0f, zero = 0.0f;
  const auto forward = [&] {
    return cudnnConvolutionForward(o.h, &one, o.x, x.data(), o.w, w.data(), o.conv,
                                   CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, o.y, y.data());
  };
  const auto heuristics_status = [&] {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int count = 0;
    return cudnnGetConvolutionForwardAlgorithm_v7(o.h, o.x, o.w, o.conv, o.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count,
                                                  perf);
  };
  set(CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_FLOAT);
  CHECK(forward() == CUDNN_STATUS_SUCCESS);
  for (const cudnnConvolutionFwdAlgoPerf_t& p : o.forward_ranking()) {
    const bool fft_or_winograd = p.algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT ||
                                 p.algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
                                 p.algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
                                 p.algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
    if (fft_or_winograd) CHECK(p.status == CUDNN_STATUS_NOT_SUPPORTED);
  }
  CHECK(cudnnConvolutionForward(o.h, &one, o.x, x.data(), o.w, w.data(), o.conv, CUDNN_CONVOLUTION_FWD_ALGO_FFT,
                                nullptr, 0, &zero, o.y, y.data()) == CUDNN_STATUS_NOT_SUPPORTED);
  set(CUDNN_DATA_BFLOAT16, CUDNN_DATA_BFLOAT16, CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT);
  CHECK(forward() == CUDNN_STATUS_SUCCESS);
  set(CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_DOUBLE);
  CHECK(forward() == CUDNN_STATUS_NOT_SUPPORTED);
  CHECK(heuristics_status() == CUDNN_STATUS_NOT_SUPPORTED);
  set(CUDNN_DATA_BFLOAT16, CUDNN_DATA_BFLOAT16, CUDNN_DATA_BFLOAT16, CUDNN_DATA_DOUBLE);
  CHECK(forward() == CUDNN_STATUS_NOT_SUPPORTED);
  set(CUDNN_DATA_BFLOAT16, CUDNN_DATA_BFLOAT16, CUDNN_DATA_BFLOAT16, CUDNN_DATA_BFLOAT16);
  CHECK(forward() == CUDNN_STATUS_NOT_SUPPORTED);
  set(CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_HALF);  // TRUE_HALF_CONFIG: not the shim's
  CHECK(forward() == CUDNN_STATUS_NOT_SUPPORTED);
  set(CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_DATA_HALF, CUDNN_DATA_FLOAT);
  CHECK(forward() == CUDNN_STATUS_BAD_PARAM);
  set(CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT);
  CHECK(forward() == CUDNN_STATUS_BAD_PARAM);
  CHECK(heuristics_status() == CUDNN_STATUS_BAD_PARAM);
  set(CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT);
  CHECK(forward() == CUDNN_STATUS_BAD_PARAM);
  // A 16-bit pointer off its 2-byte alignment.
  set(CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_FLOAT);
  const void* odd = reinterpret_cast<const char*>(x.data()) + 1;
  CHECK(cudnnConvolutionForward(o.h, &one, o.x, odd, o.w, w.data(), o.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                nullptr, 0, &zero, o.y, y.data()) == CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER);
}

// alpha and beta on 16-bit data: out = round(alpha * conv + beta * out), blended in float and
// rounded once; cudnnAddTensor and the bias gradient likewise.
TEST_CASE("cudnn shim: 16-bit alpha/beta blend in float with one rounding", "[cuda][cudnn][low_precision]") {
  using ember::Half;
  Objects o;
  REQUIRE(cudnnSetTensor4dDescriptor(o.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, 1, 2, 1, 1) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetTensor4dDescriptor(o.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, 1, 1, 1, 1) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetTensor4dDescriptor(o.b, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, 1, 1, 1, 1) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetFilter4dDescriptor(o.w, CUDNN_DATA_HALF, CUDNN_TENSOR_NCHW, 1, 2, 1, 1) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetConvolution2dDescriptor(o.conv, 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
          CUDNN_STATUS_SUCCESS);
  // conv = 1 + 2^-11 (a tie in f16), beta * out = 2^-13: one rounding gives 1 + 2^-10.
  DeviceBuffer<Half> x(std::vector<Half>{Half(1.0f), Half(std::ldexp(1.0f, -11))});
  DeviceBuffer<Half> w(std::vector<Half>{Half(1.0f), Half(1.0f)});
  DeviceBuffer<Half> y(std::vector<Half>{Half(std::ldexp(1.0f, -14))});
  const float one = 1.0f, four = 4.0f, zero = 0.0f;
  REQUIRE(cudnnConvolutionForward(o.h, &one, o.x, x.data(), o.w, w.data(), o.conv,
                                  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &four, o.y,
                                  y.data()) == CUDNN_STATUS_SUCCESS);
  CHECK(static_cast<float>(checked(y)[0]) == 1.0f + std::ldexp(1.0f, -10));
  // cudnnAddTensor: y = round(4 * 2^-13 + 1 * (1 + 2^-10)) = round(1 + 2^-10 + 2^-11), a tie
  // between 1 + 2^-10 and 1 + 2^-9, to even: 1 + 2^-9.
  DeviceBuffer<Half> b(std::vector<Half>{Half(std::ldexp(1.0f, -13))});
  REQUIRE(cudnnAddTensor(o.h, &four, o.b, b.data(), &one, o.y, y.data()) == CUDNN_STATUS_SUCCESS);
  CHECK(static_cast<float>(checked(y)[0]) == 1.0f + std::ldexp(1.0f, -9));
  // Bias gradient of one channel of dy = (1, 2^-11): the float sum 1 + 2^-11 plus beta * db =
  // 4 * 2^-14 rounds once to 1 + 2^-10.
  REQUIRE(cudnnSetTensor4dDescriptor(o.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, 1, 1, 1, 2) == CUDNN_STATUS_SUCCESS);
  DeviceBuffer<Half> db(std::vector<Half>{Half(std::ldexp(1.0f, -14))});
  REQUIRE(cudnnConvolutionBackwardBias(o.h, &one, o.x, x.data(), &four, o.b, db.data()) == CUDNN_STATUS_SUCCESS);
  CHECK(static_cast<float>(checked(db)[0]) == 1.0f + std::ldexp(1.0f, -10));
  CHECK(shim().add_tensor_16bit > 0);
  // cuDNN 9 has no bf16 bias gradient (an H200 answered CUDNN_STATUS_NOT_SUPPORTED): nor has the shim.
  REQUIRE(cudnnSetTensor4dDescriptor(o.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_BFLOAT16, 1, 1, 1, 2) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetTensor4dDescriptor(o.b, CUDNN_TENSOR_NCHW, CUDNN_DATA_BFLOAT16, 1, 1, 1, 1) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnConvolutionBackwardBias(o.h, &one, o.x, x.data(), &zero, o.b, db.data()) == CUDNN_STATUS_NOT_SUPPORTED);
}
#endif
