// kernels/cuda/cudnn: ember's cuDNN wrappers against the CPU references — convolution (the
// conv_cases of test_conv.cpp, within the same error bound), pooling and activations (exactly:
// on the emulator the shim computes with the CPU kernels) — plus the algorithm cache, the
// workspace, benchmark mode, and what a bad call turns into. On the SIMT flavour the calls run
// over the emulator's cuDNN shim (kernels/simt/cudnn_shim.cpp), whose counters show what ran and
// whose argument checks are tested here call by call. The f16/bf16 convolutions are tested in
// test_cudnn_16bit.cpp; what both files share is cudnn_fixture.h.
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
#include "../../kernels/cpu/elementwise.h"
#include "../../kernels/cpu/pool.h"
#include "../../kernels/cuda/cudnn.h"
#include "../../core/cuda/runtime.h"
#include "conv_check.h"
#include "cudnn_fixture.h"
#include "cudnn_max_pool.h"
#include "device_buffer.h"
#include "random_data.h"

#if EMBER_SIMT
#include "../../kernels/simt/cudnn_shim.h"
#endif

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

using ember::DType;
using ember::kernels::Conv2dGeometry;
using ember::kernels::Pool2dGeometry;
using ember::testing::abs_of;
using ember::testing::conv_cases;
using ember::testing::ConvCase;
using ember::testing::DeviceBuffer;
using ember::testing::geometry;
using ember::testing::random_vector;
using ember::testing::require_within;
namespace cudnn = ember::kernels::gpu::cudnn;
using namespace ember::testing::cudnn_fixture;


// Forward (with and without bias) and the three backward passes of g through cuDNN, against the
// direct references.
template <typename T>
void check_conv(const Conv2dGeometry& g, uint64_t seed) {
  const DType dt = ember::dtype_of<T>::value;
  const int64_t cin_g = g.c_in / g.groups, cout_g = g.c_out / g.groups, ohw = g.out_h * g.out_w;
  const size_t xn = static_cast<size_t>(g.n * g.c_in * g.h * g.w),
               wn = static_cast<size_t>(g.c_out * cin_g * g.kh * g.kw);
  const size_t yn = static_cast<size_t>(g.n * g.c_out * ohw);
  const std::vector<T> x = random_vector<T>(xn, seed), w = random_vector<T>(wn, seed + 1);
  const std::vector<T> bias = random_vector<T>(static_cast<size_t>(g.c_out), seed + 2);
  const std::vector<T> gy = random_vector<T>(yn, seed + 3);
  DeviceBuffer<T> dx(x), dw(w), db(bias), dgy(gy), dy(yn), dgx(xn), dgw(wn), dgb(static_cast<size_t>(g.c_out));
  for (bool with_bias : {true, false}) {
    cudnn::conv2d_forward(dt, cudnn::Layout::NCHW, g, dx.data(), dw.data(), with_bias ? db.data() : nullptr, dy.data());
    std::vector<T> want(yn), bound(yn);
    ember::kernels::cpu::conv2d_forward_reference(dt, g, x.data(), w.data(), with_bias ? bias.data() : nullptr,
                                                  want.data());
    ember::kernels::cpu::conv2d_forward_reference(dt, g, abs_of(x).data(), abs_of(w).data(),
                                                  with_bias ? abs_of(bias).data() : nullptr, bound.data());
    require_within(checked(dy), want, bound, cin_g * g.kh * g.kw + 1, "forward");
  }
  cudnn::conv2d_backward_data(dt, cudnn::Layout::NCHW, g, dgy.data(), dw.data(), dgx.data());
  std::vector<T> want_gx(xn), bound_gx(xn);
  ember::kernels::cpu::conv2d_backward_data_reference(dt, g, gy.data(), w.data(), want_gx.data());
  ember::kernels::cpu::conv2d_backward_data_reference(dt, g, abs_of(gy).data(), abs_of(w).data(), bound_gx.data());
  require_within(checked(dgx), want_gx, bound_gx, cout_g * g.kh * g.kw, "backward data");

  cudnn::conv2d_backward_weight(dt, cudnn::Layout::NCHW, g, dgy.data(), dx.data(), dgw.data());
  std::vector<T> want_gw(wn), bound_gw(wn);
  ember::kernels::cpu::conv2d_backward_weight_reference(dt, g, gy.data(), x.data(), want_gw.data());
  ember::kernels::cpu::conv2d_backward_weight_reference(dt, g, abs_of(gy).data(), abs_of(x).data(), bound_gw.data());
  require_within(checked(dgw), want_gw, bound_gw, g.n * ohw, "backward weight");

  // cuDNN sums in an order of its own: the bound of a sum of n * ohw terms, as the passes above.
  cudnn::conv2d_backward_bias(dt, cudnn::Layout::NCHW, g, dgy.data(), dgb.data());
  std::vector<T> want_gb(static_cast<size_t>(g.c_out)), bound_gb(want_gb.size());
  ember::kernels::cpu::conv2d_backward_bias(dt, g, gy.data(), want_gb.data());
  ember::kernels::cpu::conv2d_backward_bias(dt, g, abs_of(gy).data(), bound_gb.data());
  require_within(checked(dgb), want_gb, bound_gb, g.n * ohw, "backward bias");
}


}  // namespace

TEST_CASE("cudnn is available, and enabled unless EMBER_CUDNN=0", "[cuda][cudnn]") {
  REQUIRE(cudnn::available());
  const char* v = std::getenv("EMBER_CUDNN");
  const bool off = v != nullptr && std::strcmp(v, "0") == 0;
  CHECK(cudnn::enabled() == !off);
  CHECK(cudnn::use_for_conv() == !off);
  // Pooling: only windows cuDNN computes the same way (floor output size, no dilation).
  CHECK(cudnn::use_for_pool(pool_geometry(2, 8, 8, 2, 2, 0, false)) == !off);
  CHECK_FALSE(cudnn::use_for_pool(pool_geometry(2, 7, 7, 2, 2, 0, true)));    // ceil_mode adds a window
  CHECK(cudnn::use_for_pool(pool_geometry(2, 8, 8, 2, 2, 0, true)) == !off);  // ceil_mode adds none
  Pool2dGeometry dilated = pool_geometry(2, 9, 9, 3, 1, 0, false);
  dilated.dilation_h = dilated.dilation_w = 2;
  CHECK_FALSE(cudnn::use_for_pool(dilated));
}

TEMPLATE_TEST_CASE("cudnn conv2d forward and backward match the direct references", "[cuda][cudnn]", float, double) {
  using T = TestType;
  uint64_t seed = 40;
#if EMBER_SIMT
  const auto before = shim();
#endif
  for (const ConvCase& c : conv_cases()) {
    INFO(c.name);
    check_conv<T>(c.g, seed);
    seed += 4;
  }
#if EMBER_SIMT
  // Every pass went through the shim: two forwards (bias added with cudnnAddTensor) per case.
  const auto after = shim();
  const auto n = static_cast<int64_t>(conv_cases().size());
  CHECK(after.convolution[pass(Pass::Forward)] - before.convolution[pass(Pass::Forward)] == 2 * n);
  CHECK(after.convolution[pass(Pass::BackwardData)] - before.convolution[pass(Pass::BackwardData)] == n);
  CHECK(after.convolution[pass(Pass::BackwardFilter)] - before.convolution[pass(Pass::BackwardFilter)] == n);
  CHECK(after.add_tensor - before.add_tensor == n);
  CHECK(after.backward_bias - before.backward_bias == n);
#endif
}

#if EMBER_SIMT
TEST_CASE("cudnn picks the heuristics' first supported algorithm, skipping unsupported ones", "[cuda][cudnn]") {
  // The heuristics' ranking (benchmark mode, under EMBER_CUDNN_BENCHMARK=1, ranks by time).
  const bool was = cudnn::benchmark();
  cudnn::set_benchmark(false);
  // 3x3, stride 1, float32: Winograd (non-fused) ranks first.
  check_conv<float>(geometry(1, 2, 6, 7, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1), 1);
  CHECK(shim().last_algorithm[pass(Pass::Forward)] == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED);
  CHECK(shim().last_algorithm[pass(Pass::BackwardData)] == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED);
  CHECK(shim().last_algorithm[pass(Pass::BackwardFilter)] == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED);
  // Strided and dilated: Winograd and FFT report NOT_SUPPORTED, so ember's ranking drops them and
  // GEMM runs (ALGO_1 for the backward passes).
  check_conv<float>(geometry(2, 4, 11, 10, 6, 3, 2, 2, 1, 1, 0, 1, 2, 2), 2);
  CHECK(shim().last_algorithm[pass(Pass::Forward)] == CUDNN_CONVOLUTION_FWD_ALGO_GEMM);
  CHECK(shim().last_algorithm[pass(Pass::BackwardData)] == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
  CHECK(shim().last_algorithm[pass(Pass::BackwardFilter)] == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
  // float64: Winograd and FFT are float32-only.
  check_conv<double>(geometry(1, 2, 6, 7, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1), 3);
  CHECK(shim().last_algorithm[pass(Pass::Forward)] == CUDNN_CONVOLUTION_FWD_ALGO_GEMM);
  cudnn::set_benchmark(was);
}
#endif

TEST_CASE("cudnn algorithm cache: one choice per problem and pass, asked of cuDNN once", "[cuda][cudnn]") {
  // A shape no other test uses.
  const Conv2dGeometry g = geometry(1, 3, 7, 5, 2, 2, 3, 1, 1, 0, 1, 1, 1, 1);
  const int64_t cached0 = cudnn::cached_algorithm_count();
#if EMBER_SIMT
  const auto s0 = shim();
#endif
  check_conv<float>(g, 7);
  CHECK(cudnn::cached_algorithm_count() == cached0 + 3);  // forward, backward data, backward filter
#if EMBER_SIMT
  const auto s1 = shim();
  for (int p = 0; p < 3; ++p) {
    INFO("pass " << p << (cudnn::benchmark() ? " (benchmark mode: Find)" : " (heuristics)"));
    const int64_t asked_get = s1.get_algorithm[p] - s0.get_algorithm[p];
    const int64_t asked_find = s1.find_algorithm[p] - s0.find_algorithm[p];
    CHECK(asked_get == (cudnn::benchmark() ? 0 : 1));
    CHECK(asked_find == (cudnn::benchmark() ? 1 : 0));
  }
#endif
  // The same problem again: answered from the cache.
  check_conv<float>(g, 8);
  CHECK(cudnn::cached_algorithm_count() == cached0 + 3);
#if EMBER_SIMT
  const auto s2 = shim();
  for (int p = 0; p < 3; ++p) {
    CHECK(s2.get_algorithm[p] == s1.get_algorithm[p]);
    CHECK(s2.find_algorithm[p] == s1.find_algorithm[p]);
    CHECK(s2.convolution[p] > s1.convolution[p]);
  }
  // TF32 math is part of the key too: asked again. (The shim computes TF32 in full float32, so
  // the float32 bound still holds; a GPU's TF32 would not meet it.)
  cudnn::set_allow_tf32(true);
  check_conv<float>(g, 9);
  cudnn::set_allow_tf32(false);
  CHECK_FALSE(cudnn::allow_tf32());
  CHECK(cudnn::cached_algorithm_count() == cached0 + 6);
#endif
}

#if EMBER_SIMT
// Not in the benchmark-mode run (cuda-cudnn-benchmark:), where Find has sized the workspace first.
TEST_CASE("cudnn workspace: grows to the largest need, then is reused", "[cuda][cudnn][cudnn_workspace]") {
  REQUIRE_FALSE(cudnn::benchmark());
  // Larger than every other problem of this program: Winograd's workspace for it is megabytes.
  const Conv2dGeometry g = geometry(4, 16, 40, 40, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  Objects o;
  o.conv3x3(4, 16, 40, 40, 16);
  const auto ranking = o.forward_ranking();
  REQUIRE(!ranking.empty());
  REQUIRE(ranking[0].algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED);
  const size_t need = ranking[0].memory;
  REQUIRE(need > (size_t{1} << 20));
  const std::vector<float> x = random_vector<float>(static_cast<size_t>(4 * 16 * 1600), 1);
  const std::vector<float> w = random_vector<float>(static_cast<size_t>(16 * 16 * 9), 2);
  DeviceBuffer<float> dx(x), dw(w), dy(static_cast<size_t>(4 * 16 * 1600));
  const auto m0 = ember::cuda::memory_stats(0);
  cudnn::conv2d_forward(DType::f32, cudnn::Layout::NCHW, g, dx.data(), dw.data(), nullptr, dy.data());
  const auto m1 = ember::cuda::memory_stats(0);
  CHECK(shim().last_workspace_bytes[pass(Pass::Forward)] == need);
  CHECK(m1.allocation_count > m0.allocation_count);  // the workspace grew ...
  CHECK(m1.allocated_bytes >= static_cast<int64_t>(need));
  CHECK(m1.allocated_bytes > m0.allocated_bytes);
  cudnn::conv2d_forward(DType::f32, cudnn::Layout::NCHW, g, dx.data(), dw.data(), nullptr, dy.data());
  CHECK(ember::cuda::memory_stats(0).allocation_count == m1.allocation_count);  // ... once
  std::vector<float> want(static_cast<size_t>(4 * 16 * 1600)), bound(want.size());
  ember::kernels::cpu::conv2d_forward_reference(DType::f32, g, x.data(), w.data(), nullptr, want.data());
  ember::kernels::cpu::conv2d_forward_reference(DType::f32, g, abs_of(x).data(), abs_of(w).data(), nullptr,
                                                bound.data());
  require_within(checked(dy), want, bound, 16 * 9, "forward");
}

// Run by ctest as cuda-cudnn-lowmem:workspace_fallback, with a 64 MiB emulated device.
TEST_CASE("cudnn: when the workspace cannot grow, the next algorithm that needs less runs", "[.cudnn_lowmem]") {
  size_t free_bytes = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  INFO("run with EMBER_SIMT_DEVICE_MEMORY of at most 1 GiB (ctest cuda-cudnn-lowmem:workspace_fallback)");
  REQUIRE(total <= (size_t{1} << 30));
  cudnn::set_benchmark(false);
  const Conv2dGeometry g = geometry(8, 16, 32, 32, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  Objects o;
  o.conv3x3(8, 16, 32, 32, 16);
  const auto ranking = o.forward_ranking();
  REQUIRE(ranking.size() >= 2);
  REQUIRE(ranking[0].algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED);
  REQUIRE(ranking[1].algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD);
  REQUIRE(ranking[1].memory == 0);
  const std::vector<float> x = random_vector<float>(static_cast<size_t>(8 * 16 * 1024), 3);
  const std::vector<float> w = random_vector<float>(static_cast<size_t>(16 * 16 * 9), 4);
  DeviceBuffer<float> dx(x), dw(w), dy(static_cast<size_t>(8 * 16 * 1024));
  // Leave less free memory than the first algorithm's workspace.
  ember::cuda::empty_cache(0);
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  REQUIRE(free_bytes > ranking[0].memory);
  void* filler = nullptr;
  REQUIRE(cudaMalloc(&filler, free_bytes - ranking[0].memory / 2) == cudaSuccess);
  const auto m0 = ember::cuda::memory_stats(0);
  cudnn::conv2d_forward(DType::f32, cudnn::Layout::NCHW, g, dx.data(), dw.data(), nullptr, dy.data());
  CHECK(ember::cuda::memory_stats(0).oom_count > m0.oom_count);
  CHECK(shim().last_algorithm[pass(Pass::Forward)] == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD);
  std::vector<float> want(static_cast<size_t>(8 * 16 * 1024)), bound(want.size());
  ember::kernels::cpu::conv2d_forward_reference(DType::f32, g, x.data(), w.data(), nullptr, want.data());
  ember::kernels::cpu::conv2d_forward_reference(DType::f32, g, abs_of(x).data(), abs_of(w).data(), nullptr,
                                                bound.data());
  require_within(checked(dy), want, bound, 16 * 9, "forward after the fallback");
  // Benchmark mode with memory this short: Find's workspace halves from 1 GiB until one fits (or
  // none does), and Find ranks only what ran in it.
  cudnn::set_benchmark(true);
  const auto s0 = shim();
  const Conv2dGeometry g2 = geometry(2, 4, 12, 12, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  check_conv<float>(g2, 5);
  cudnn::set_benchmark(false);
  CHECK(shim().find_algorithm[pass(Pass::Forward)] == s0.find_algorithm[pass(Pass::Forward)] + 1);
  REQUIRE(cudaFree(filler) == cudaSuccess);
}
#endif

TEMPLATE_TEST_CASE("cudnn pooling equals the CPU kernels (max and average, both paddings)", "[cuda][cudnn]", float,
                   double) {
  using T = TestType;
  const DType dt = ember::dtype_of<T>::value;
  // Exact on the emulator; a few ulps of cuDNN's own rounding on a GPU, of the result and of the
  // inputs' magnitude (at most 1 here; Note [Bits on a real GPU]).
  const double cudnn_rtol = ember::testing::kCudnnUlps * std::numeric_limits<T>::epsilon();
  struct Case {
    const char* name;
    Pool2dGeometry g;
  };
  const std::vector<Case> cases = {
      {"2x2 stride 2", pool_geometry(3, 8, 10, 2, 2, 0, false)},
      {"3x3 stride 2 pad 1 (overlapping)", pool_geometry(2, 9, 11, 3, 2, 1, false)},
      {"3x3 stride 1 pad 1", pool_geometry(2, 7, 5, 3, 1, 1, false)},
      {"2x2 stride 2 ceil_mode without an extra window", pool_geometry(2, 8, 6, 2, 2, 0, true)},
  };
  uint64_t seed = 60;
#if EMBER_SIMT
  const auto s0 = shim();
#endif
  for (const Case& c : cases) {
    INFO(c.name);
    const Pool2dGeometry& g = c.g;
    const size_t in_n = static_cast<size_t>(g.planes * g.in_h * g.in_w),
                 out_n = static_cast<size_t>(g.planes * g.out_h * g.out_w);
    for (bool ties : {false, true}) {
      const std::vector<T> x = ties ? ember::testing::random_ties<T>(in_n, seed) : random_vector<T>(in_n, seed);
      const std::vector<T> go = random_vector<T>(out_n, seed + 1);
      seed += 2;
      DeviceBuffer<T> dx(x), dout(out_n), dgo(go), dgi(in_n);
      // Max: values, and the gradient to the first maximum of each window (as the indices say).
      cudnn::max_pool2d_forward(dt, cudnn::Layout::NCHW, 1, g, dx.data(), dout.data());
      std::vector<T> want(out_n), want_gi(in_n);
      std::vector<int64_t> idx(out_n);
      ember::kernels::cpu::max_pool2d_forward(dt, DType::i64, g, x.data(), want.data(), idx.data());
      ember::testing::require_close(checked(dout), want, 0, 0, "max forward");
      cudnn::max_pool2d_backward(dt, cudnn::Layout::NCHW, 1, g, dx.data(), dout.data(), dgo.data(), dgi.data());
      ember::kernels::cpu::max_pool2d_backward(dt, DType::i64, g, go.data(), idx.data(), want_gi.data());
      ember::testing::require_close(checked(dgi), want_gi, 0, 0, "max backward");
      for (bool include_pad : {true, false}) {
        cudnn::avg_pool2d_forward(dt, cudnn::Layout::NCHW, 1, g, include_pad, dx.data(), dout.data());
        ember::kernels::cpu::avg_pool2d_forward(dt, g, include_pad, x.data(), want.data());
        ember::testing::require_close(checked(dout), want, cudnn_rtol, cudnn_rtol, "avg forward");
        cudnn::avg_pool2d_backward(dt, cudnn::Layout::NCHW, 1, g, include_pad, dx.data(), dout.data(), dgo.data(), dgi.data());
        ember::kernels::cpu::avg_pool2d_backward(dt, g, include_pad, go.data(), want_gi.data());
        ember::testing::require_close(checked(dgi), want_gi, cudnn_rtol, cudnn_rtol, "avg backward");
      }
    }
  }
#if EMBER_SIMT
  const auto s1 = shim();
  CHECK(s1.pooling_forward - s0.pooling_forward == static_cast<int64_t>(cases.size()) * 2 * 3);
  CHECK(s1.pooling_backward - s0.pooling_backward == static_cast<int64_t>(cases.size()) * 2 * 3);
#endif
  // NaN wins a max window and spreads through an average one.
  const Pool2dGeometry g = pool_geometry(1, 6, 6, 3, 2, 1, false);
  std::vector<T> x = random_vector<T>(36, 3);
  x[7] = std::numeric_limits<T>::quiet_NaN();
  DeviceBuffer<T> dx(x), dout(static_cast<size_t>(g.out_h * g.out_w));
  std::vector<T> want(dout.size());
  std::vector<int64_t> idx(dout.size());
  cudnn::max_pool2d_forward(dt, cudnn::Layout::NCHW, 1, g, dx.data(), dout.data());
  ember::kernels::cpu::max_pool2d_forward(dt, DType::i64, g, x.data(), want.data(), idx.data());
  ember::testing::require_close(checked(dout), want, 0, 0, "max forward with NaN");
  cudnn::avg_pool2d_forward(dt, cudnn::Layout::NCHW, 1, g, false, dx.data(), dout.data());
  ember::kernels::cpu::avg_pool2d_forward(dt, g, false, x.data(), want.data());
  ember::testing::require_close(checked(dout), want, cudnn_rtol, cudnn_rtol, "avg forward with NaN");
}

TEMPLATE_TEST_CASE("cudnn activations equal the CPU kernels (ReLU, sigmoid, tanh)", "[cuda][cudnn]", float, double) {
  using T = TestType;
  const DType dt = ember::dtype_of<T>::value;
  // Exact on the emulator; a few ulps of cuDNN's own exp and rounding on a GPU, relative to the
  // values (about 1) and to the result (Note [Bits on a real GPU]).
  const double cudnn_rtol = ember::testing::kCudnnUlps * std::numeric_limits<T>::epsilon();
  const double cudnn_atol = cudnn_rtol;
  const size_t n = 1000;
  std::vector<T> x = random_vector<T>(n, 11, -6.0, 6.0);
  x[3] = 0;
  x[4] = std::numeric_limits<T>::quiet_NaN();
  x[5] = std::numeric_limits<T>::infinity();
  x[6] = -std::numeric_limits<T>::infinity();
  const std::vector<T> gy = random_vector<T>(n, 12);
  DeviceBuffer<T> dx(x), dy(n), dgy(gy), dgx(n);
  ember::kernels::IterShape shape;
  shape.ndim = 1;
  shape.sizes[0] = static_cast<int64_t>(n);
  auto operand = [](const void* p) {
    ember::kernels::Operand o;
    o.data = const_cast<void*>(p);
    o.strides[0] = 1;
    return o;
  };
  for (const ActivationCase& act : kActivations) {
    INFO(act.name);
    cudnn::activation_forward(act.a, dt, static_cast<int64_t>(n), dx.data(), dy.data());
    std::vector<T> want(n), want_gx(n);
    ember::kernels::cpu::unary(act.op, dt, shape, operand(want.data()), operand(x.data()), 0.0);
    ember::testing::require_close(checked(dy), want, cudnn_atol, cudnn_rtol, "forward");
    cudnn::activation_backward(act.a, dt, static_cast<int64_t>(n), dx.data(), dy.data(), dgy.data(), dgx.data());
    ember::kernels::cpu::unary_backward(act.op, dt, shape, operand(want_gx.data()), operand(gy.data()),
                                        operand(x.data()), operand(want.data()), 0.0);
    ember::testing::require_close(checked(dgx), want_gx, cudnn_atol, cudnn_rtol, "backward");
  }
  // Empty: nothing to do, nothing written.
  cudnn::activation_forward(cudnn::Activation::Relu, dt, 0, dx.data(), dy.data());
  dy.check_guards();
}

TEST_CASE("cudnn conv2d: an empty batch gives zero weight and bias gradients", "[cuda][cudnn]") {
  const Conv2dGeometry g = geometry(0, 3, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  DeviceBuffer<float> dx(1), dw(static_cast<size_t>(4 * 3 * 9)), dy(1), dgw(static_cast<size_t>(4 * 3 * 9)), dgb(4);
  cudnn::conv2d_forward(DType::f32, cudnn::Layout::NCHW, g, dx.data(), dw.data(), nullptr, dy.data());
  cudnn::conv2d_backward_data(DType::f32, cudnn::Layout::NCHW, g, dy.data(), dw.data(), dx.data());
  cudnn::conv2d_backward_weight(DType::f32, cudnn::Layout::NCHW, g, dy.data(), dx.data(), dgw.data());
  cudnn::conv2d_backward_bias(DType::f32, cudnn::Layout::NCHW, g, dy.data(), dgb.data());
  ember::testing::require_close(checked(dgw), std::vector<float>(static_cast<size_t>(4 * 3 * 9), 0.0f), 0, 0, "gw");
  ember::testing::require_close(checked(dgb), std::vector<float>(4, 0.0f), 0, 0, "gb");
  dx.check_guards();
  dy.check_guards();
  // Zero planes of pooling: no call at all.
  Pool2dGeometry pg = pool_geometry(0, 4, 4, 2, 2, 0, false);
  cudnn::max_pool2d_forward(DType::f32, cudnn::Layout::NCHW, 1, pg, dx.data(), dy.data());
  cudnn::avg_pool2d_backward(DType::f32, cudnn::Layout::NCHW, 1, pg, true, dx.data(), dy.data(), dy.data(), dx.data());
  dx.check_guards();
  dy.check_guards();
}

TEST_CASE("cudnn: a call cuDNN rejects is an ember error naming the call and the status", "[cuda][cudnn]") {
  // 3 input channels cannot be split into 2 groups: the filter descriptor says 1 channel per
  // group, 1 x 2 != 3, and cuDNN's first look at the problem says BAD_PARAM.
  Conv2dGeometry g = geometry(1, 3, 5, 5, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  g.groups = 2;
  DeviceBuffer<float> dx(75), dw(18), dy(50);
  const std::string msg =
      error_of([&] { cudnn::conv2d_forward(DType::f32, cudnn::Layout::NCHW, g, dx.data(), dw.data(), nullptr, dy.data()); });
  INFO(msg);
  CHECK(msg.find(cudnn::benchmark() ? "cudnnFindConvolutionForwardAlgorithmEx"
                                    : "cudnnGetConvolutionForwardAlgorithm_v7") != std::string::npos);
  CHECK(msg.find("CUDNN_STATUS_BAD_PARAM") != std::string::npos);
  CHECK(msg.find("cudnn.cu") != std::string::npos);
  // A dtype cuDNN is not asked about.
  const std::string bad_type =
      error_of([&] { cudnn::activation_forward(cudnn::Activation::Relu, DType::i32, 4, dx.data(), dy.data()); });
  CHECK(bad_type.find("unsupported dtype") != std::string::npos);
#if EMBER_SIMT
  // Pooling with an output size that is not cuDNN's (a ceil_mode window): the shim answers
  // NOT_SUPPORTED. cuDNN 9 on an H200 accepted the call (status success), so ember never makes it:
  // use_for_pool() sends such windows to the hand-written kernels.
  const Pool2dGeometry pg = pool_geometry(1, 7, 7, 2, 2, 0, true);
  CHECK_FALSE(cudnn::use_for_pool(pg));
  const std::string pool_msg = error_of([&] { cudnn::avg_pool2d_forward(DType::f32, cudnn::Layout::NCHW, 1, pg, true, dx.data(), dy.data()); });
  INFO(pool_msg);
  CHECK(pool_msg.find("cudnnPoolingForward") != std::string::npos);
  CHECK(pool_msg.find("CUDNN_STATUS_NOT_SUPPORTED") != std::string::npos);
#endif
}

#if EMBER_SIMT
TEST_CASE("cudnn shim: arguments are checked as cuDNN documents them", "[cuda][cudnn]") {
  Objects o;
  CHECK(std::string(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM)) == "CUDNN_STATUS_BAD_PARAM");
  // Descriptors.
  CHECK(cudnnSetTensor4dDescriptor(o.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, -1, 2, 3, 3) == CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetTensor4dDescriptor(o.x, CUDNN_TENSOR_NCHW, static_cast<cudnnDataType_t>(99), 1, 2, 3, 3) ==
        CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetTensor4dDescriptor(o.x, static_cast<cudnnTensorFormat_t>(7), CUDNN_DATA_FLOAT, 1, 2, 3, 3) ==
        CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetTensor4dDescriptor(o.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 65536, 65536, 1, 1) ==
        CUDNN_STATUS_NOT_SUPPORTED);  // over 2^31 - 1 elements
  CHECK(cudnnSetFilter4dDescriptor(o.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 0, 2, 3, 3) == CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetConvolution2dDescriptor(o.conv, 1, 1, 0, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
        CUDNN_STATUS_BAD_PARAM);  // stride 0
  CHECK(cudnnSetConvolution2dDescriptor(o.conv, -1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
        CUDNN_STATUS_BAD_PARAM);  // negative padding
  CHECK(cudnnSetConvolutionGroupCount(o.conv, 0) == CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetConvolutionMathType(o.conv, static_cast<cudnnMathType_t>(9)) == CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetPooling2dDescriptor(o.pool, CUDNN_POOLING_MAX, CUDNN_PROPAGATE_NAN, 0, 2, 0, 0, 2, 2) ==
        CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetActivationDescriptor(o.act, static_cast<cudnnActivationMode_t>(42), CUDNN_PROPAGATE_NAN, 0) ==
        CUDNN_STATUS_BAD_PARAM);

  // A consistent problem, then one thing wrong at a time.
  o.conv3x3(1, 2, 5, 5, 3);
  int count = 0;
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  auto heuristics = [&] {
    return cudnnGetConvolutionForwardAlgorithm_v7(o.h, o.x, o.w, o.conv, o.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count,
                                                  perf);
  };
  REQUIRE(heuristics() == CUDNN_STATUS_SUCCESS);
  REQUIRE(count == CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
  // Every algorithm is listed; DIRECT is never supported.
  bool direct_listed = false;
  for (int i = 0; i < count; ++i) {
    if (perf[i].algo == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT) {
      direct_listed = true;
      CHECK(perf[i].status == CUDNN_STATUS_NOT_SUPPORTED);
    }
  }
  CHECK(direct_listed);
  // The workspace-size queries agree with the ranking, and refuse what it marks unsupported.
  for (int i = 0; i < count; ++i) {
    size_t bytes = 0;
    const cudnnStatus_t st = cudnnGetConvolutionForwardWorkspaceSize(o.h, o.x, o.w, o.conv, o.y, perf[i].algo, &bytes);
    CHECK(st == perf[i].status);
    if (st == CUDNN_STATUS_SUCCESS) CHECK(bytes == perf[i].memory);
  }
  size_t data_bytes = 1, filter_bytes = 1;
  CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(o.h, o.w, o.y, o.conv, o.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
                                                     &data_bytes) == CUDNN_STATUS_SUCCESS);
  CHECK(data_bytes == 0);
  CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(o.h, o.x, o.y, o.conv, o.w,
                                                       CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD,
                                                       &filter_bytes) == CUDNN_STATUS_NOT_SUPPORTED);
  CHECK(cudnnGetConvolutionForwardAlgorithm_v7(o.h, o.x, o.w, o.conv, o.y, 0, &count, perf) == CUDNN_STATUS_BAD_PARAM);
  REQUIRE(cudnnSetFilter4dDescriptor(o.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 3, 4, 3, 3) == CUDNN_STATUS_SUCCESS);
  CHECK(heuristics() == CUDNN_STATUS_BAD_PARAM);  // filter channels != input channels
  REQUIRE(cudnnSetFilter4dDescriptor(o.w, CUDNN_DATA_DOUBLE, CUDNN_TENSOR_NCHW, 3, 2, 3, 3) == CUDNN_STATUS_SUCCESS);
  CHECK(heuristics() == CUDNN_STATUS_BAD_PARAM);  // data types differ
  REQUIRE(cudnnSetFilter4dDescriptor(o.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 3, 2, 9, 9) == CUDNN_STATUS_SUCCESS);
  CHECK(heuristics() == CUDNN_STATUS_BAD_PARAM);  // filter larger than the padded input
  REQUIRE(cudnnSetFilter4dDescriptor(o.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 3, 2, 3, 3) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetTensor4dDescriptor(o.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 3, 4, 5) == CUDNN_STATUS_SUCCESS);
  CHECK(heuristics() == CUDNN_STATUS_NOT_SUPPORTED);  // y is not the computed output size
  REQUIRE(cudnnSetTensor4dDescriptor(o.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 3, 5, 5) == CUDNN_STATUS_SUCCESS);
  CHECK(heuristics() == CUDNN_STATUS_BAD_PARAM);  // batch differs
  REQUIRE(cudnnSetTensor4dDescriptor(o.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 3, 5, 5) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetConvolution2dDescriptor(o.conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_DOUBLE) ==
          CUDNN_STATUS_SUCCESS);
  CHECK(heuristics() == CUDNN_STATUS_NOT_SUPPORTED);  // float data with a double compute type
  REQUIRE(cudnnSetConvolution2dDescriptor(o.conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(heuristics() == CUDNN_STATUS_SUCCESS);

  // Execution: the algorithm, the workspace, the memory.
  DeviceBuffer<float> x(random_vector<float>(50, 1)), w(random_vector<float>(54, 2)), y(75), ws(1 << 14);
  const float one = 1, zero = 0;
  auto forward = [&](cudnnConvolutionFwdAlgo_t algo, void* wsp, size_t bytes, const void* xp) {
    return cudnnConvolutionForward(o.h, &one, o.x, xp, o.w, w.data(), o.conv, algo, wsp, bytes, &zero, o.y, y.data());
  };
  CHECK(forward(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, x.data()) == CUDNN_STATUS_SUCCESS);
  CHECK(forward(CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, nullptr, 0, x.data()) == CUDNN_STATUS_NOT_SUPPORTED);
  CHECK(forward(CUDNN_CONVOLUTION_FWD_ALGO_GEMM, nullptr, 64, x.data()) == CUDNN_STATUS_BAD_PARAM);   // null, size 64
  CHECK(forward(CUDNN_CONVOLUTION_FWD_ALGO_GEMM, ws.data(), 4, x.data()) == CUDNN_STATUS_BAD_PARAM);  // too small
  CHECK(forward(CUDNN_CONVOLUTION_FWD_ALGO_GEMM, ws.data(), ws.size() * 4, x.data()) == CUDNN_STATUS_SUCCESS);
  CHECK(forward(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, nullptr) == CUDNN_STATUS_BAD_PARAM);
  // Alignment: data to its element size, the workspace to 16 bytes.
  const void* odd = reinterpret_cast<const char*>(x.data()) + 2;
  CHECK(forward(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, odd) ==
        CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER);
  CHECK(forward(CUDNN_CONVOLUTION_FWD_ALGO_GEMM, ws.data() + 1, (ws.size() - 1) * 4, x.data()) ==
        CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER);
  const std::vector<float> host(50);
  CHECK(forward(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, host.data()) ==
        CUDNN_STATUS_EXECUTION_FAILED);  // not device memory
  CHECK(cudnnConvolutionForward(o.h, nullptr, o.x, x.data(), o.w, w.data(), o.conv,
                                CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, o.y,
                                y.data()) == CUDNN_STATUS_BAD_PARAM);  // alpha null

  // Bias, pooling and activation shapes.
  REQUIRE(cudnnSetTensor4dDescriptor(o.b, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 2, 1, 1) == CUDNN_STATUS_SUCCESS);
  DeviceBuffer<float> bias(3);
  CHECK(cudnnAddTensor(o.h, &one, o.b, bias.data(), &one, o.y, y.data()) == CUDNN_STATUS_BAD_PARAM);  // 2 vs 3
  CHECK(cudnnConvolutionBackwardBias(o.h, &one, o.y, y.data(), &zero, o.b, bias.data()) == CUDNN_STATUS_BAD_PARAM);
  REQUIRE(cudnnSetPooling2dDescriptor(o.pool, CUDNN_POOLING_MAX, CUDNN_PROPAGATE_NAN, 2, 2, 0, 0, 2, 2) ==
          CUDNN_STATUS_SUCCESS);
  CHECK(cudnnPoolingForward(o.h, o.pool, &one, o.x, x.data(), &zero, o.y, y.data()) ==
        CUDNN_STATUS_BAD_PARAM);  // channels 2 vs 3
  REQUIRE(cudnnSetActivationDescriptor(o.act, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnActivationForward(o.h, o.act, &one, o.x, x.data(), &zero, o.y, y.data()) == CUDNN_STATUS_BAD_PARAM);
  REQUIRE(cudnnSetActivationDescriptor(o.act, CUDNN_ACTIVATION_ELU, CUDNN_PROPAGATE_NAN, 1.0) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnActivationForward(o.h, o.act, &one, o.x, x.data(), &zero, o.x, x.data()) ==
        CUDNN_STATUS_NOT_SUPPORTED);  // the shim computes ReLU, sigmoid and tanh only

  // Handles and descriptors that are not live.
  cudnnHandle_t gone = nullptr;
  REQUIRE(cudnnCreate(&gone) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnDestroy(gone) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnSetStream(gone, nullptr) == CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnDestroy(gone) == CUDNN_STATUS_BAD_PARAM);
  cudnnTensorDescriptor_t unset = nullptr;
  REQUIRE(cudnnCreateTensorDescriptor(&unset) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnActivationForward(o.h, o.act, &one, unset, x.data(), &zero, unset, x.data()) == CUDNN_STATUS_BAD_PARAM);
  REQUIRE(cudnnDestroyTensorDescriptor(unset) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnDestroyTensorDescriptor(unset) == CUDNN_STATUS_BAD_PARAM);
}

TEST_CASE("cudnn shim: alpha and beta blend into the output as cuDNN defines", "[cuda][cudnn]") {
  Objects o;
  o.conv3x3(1, 2, 4, 4, 2);
  const std::vector<float> xv = random_vector<float>(32, 1), wv = random_vector<float>(36, 2);
  const std::vector<float> y0 = random_vector<float>(32, 3);
  DeviceBuffer<float> x(xv), w(wv), y(y0), nan_y(std::vector<float>(32, std::numeric_limits<float>::quiet_NaN()));
  const float alpha = 2.0f, beta = 0.5f, one = 1.0f, zero = 0.0f;
  std::vector<float> conv(32);
  const Conv2dGeometry g = geometry(1, 2, 4, 4, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  ember::kernels::cpu::conv2d_forward(DType::f32, g, xv.data(), wv.data(), nullptr, conv.data());
  REQUIRE(cudnnConvolutionForward(o.h, &alpha, o.x, x.data(), o.w, w.data(), o.conv,
                                  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &beta, o.y,
                                  y.data()) == CUDNN_STATUS_SUCCESS);
  std::vector<float> want(32);
  for (size_t i = 0; i < 32; ++i) want[i] = alpha * conv[i] + beta * y0[i];
  ember::testing::require_close(checked(y), want, 0, 0, "conv alpha/beta");
  // beta = 0: the output is not read, so the NaN in it is gone.
  REQUIRE(cudnnConvolutionForward(o.h, &one, o.x, x.data(), o.w, w.data(), o.conv,
                                  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, o.y,
                                  nan_y.data()) == CUDNN_STATUS_SUCCESS);
  ember::testing::require_close(checked(nan_y), conv, 0, 0, "conv beta 0");
  // Bias: C = alpha A + beta C, A broadcast.
  REQUIRE(cudnnSetTensor4dDescriptor(o.b, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 2, 1, 1) == CUDNN_STATUS_SUCCESS);
  DeviceBuffer<float> bias(std::vector<float>{1.0f, -2.0f});
  y.upload(y0);
  REQUIRE(cudnnAddTensor(o.h, &alpha, o.b, bias.data(), &beta, o.y, y.data()) == CUDNN_STATUS_SUCCESS);
  for (size_t i = 0; i < 32; ++i) want[i] = alpha * (i < 16 ? 1.0f : -2.0f) + beta * y0[i];
  ember::testing::require_close(checked(y), want, 0, 0, "add tensor");
  // Bias gradient, activation and pooling with alpha 2, beta 0.5.
  DeviceBuffer<float> db(std::vector<float>{4.0f, 8.0f});
  REQUIRE(cudnnConvolutionBackwardBias(o.h, &alpha, o.y, y.data(), &beta, o.b, db.data()) == CUDNN_STATUS_SUCCESS);
  double s0 = 0, s1 = 0;
  for (size_t i = 0; i < 16; ++i) s0 += want[i], s1 += want[16 + i];
  ember::testing::require_close(
      checked(db), std::vector<float>{alpha * static_cast<float>(s0) + 2.0f, alpha * static_cast<float>(s1) + 4.0f},
      1e-5, 1e-6, "bias gradient");
  REQUIRE(cudnnSetActivationDescriptor(o.act, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0) == CUDNN_STATUS_SUCCESS);
  y.upload(y0);
  REQUIRE(cudnnActivationForward(o.h, o.act, &alpha, o.x, x.data(), &beta, o.x, y.data()) == CUDNN_STATUS_SUCCESS);
  for (size_t i = 0; i < 32; ++i) want[i] = alpha * (xv[i] <= 0 ? 0.0f : xv[i]) + beta * y0[i];
  ember::testing::require_close(checked(y), want, 0, 0, "relu alpha/beta");
  REQUIRE(cudnnSetPooling2dDescriptor(o.pool, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, CUDNN_PROPAGATE_NAN, 2, 2, 0,
                                      0, 2, 2) == CUDNN_STATUS_SUCCESS);
  cudnnTensorDescriptor_t pooled = nullptr;
  REQUIRE(cudnnCreateTensorDescriptor(&pooled) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetTensor4dDescriptor(pooled, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 2, 2, 2) == CUDNN_STATUS_SUCCESS);
  const std::vector<float> p0 = random_vector<float>(8, 4);
  DeviceBuffer<float> p(p0);
  REQUIRE(cudnnPoolingForward(o.h, o.pool, &alpha, o.x, x.data(), &beta, pooled, p.data()) == CUDNN_STATUS_SUCCESS);
  Pool2dGeometry pg = pool_geometry(2, 4, 4, 2, 2, 0, false);
  std::vector<float> avg(8);
  ember::kernels::cpu::avg_pool2d_forward(DType::f32, pg, true, xv.data(), avg.data());
  for (size_t i = 0; i < 8; ++i) want[i] = alpha * avg[i] + beta * p0[i];
  want.resize(8);
  ember::testing::require_close(checked(p), want, 0, 0, "pooling alpha/beta");
  REQUIRE(cudnnDestroyTensorDescriptor(pooled) == CUDNN_STATUS_SUCCESS);
}

TEST_CASE("cudnn serves the layers: conv2d, avg pooling, max pooling when asked (not the activations), unless "
          "EMBER_CUDNN=0",
          "[cuda][cudnn][cudnn_layers]") {
  using namespace ember;
  const Device dev = Device::cuda(0);
  const int64_t expect = cudnn::enabled() ? 1 : 0;
  for (const bool max_via_cudnn : {false, true}) {
    INFO("max pooling through cuDNN: " << max_via_cudnn);
    const ember::testing::CudnnMaxPool scope(max_via_cudnn);
    Generator gen(7);
    const Tensor x = randn({2, 3, 8, 8}, {}, gen).to(dev).requires_grad_(true);
    const Tensor w = randn({4, 3, 3, 3}, {}, gen).to(dev).requires_grad_(true);
    const Tensor b = randn({4}, {}, gen).to(dev).requires_grad_(true);
    const auto s0 = shim();
    Tensor y = conv2d(x, w, b, {.padding = {1, 1}});
    y = relu(y);
    y = max_pool2d(y, {.kernel = {2, 2}});
    y = avg_pool2d(tanh(y), {.kernel = {2, 2}});
    y = sigmoid(y);
    sum(y).backward();
    const auto s1 = shim();
    CHECK(s1.convolution[pass(Pass::Forward)] - s0.convolution[pass(Pass::Forward)] == expect);
    CHECK(s1.convolution[pass(Pass::BackwardData)] - s0.convolution[pass(Pass::BackwardData)] == expect);
    CHECK(s1.convolution[pass(Pass::BackwardFilter)] - s0.convolution[pass(Pass::BackwardFilter)] == expect);
    CHECK(s1.backward_bias - s0.backward_bias == expect);
    const int64_t pools = (max_via_cudnn ? 2 : 1) * expect;  // avg, and max when asked
    CHECK(s1.pooling_forward - s0.pooling_forward == pools);
    CHECK(s1.pooling_backward - s0.pooling_backward == pools);
    // ReLU, tanh and sigmoid: the hand-written kernels (Note [cuDNN or the hand-written kernels]).
    CHECK(s1.activation_forward == s0.activation_forward);
    CHECK(s1.activation_backward == s0.activation_backward);
    // A ceil_mode window cuDNN does not have, and a strided input: the hand-written kernels.
    const Tensor odd = randn({1, 2, 7, 7}, {}, gen).to(dev);
    (void)max_pool2d(odd, {.kernel = {2, 2}, .ceil_mode = true});
    (void)avg_pool2d(odd, {.kernel = {2, 2}, .ceil_mode = true});
    (void)relu(odd.transpose(2, 3));
    const auto s2 = shim();
    CHECK(s2.pooling_forward == s1.pooling_forward);
    CHECK(s2.activation_forward == s1.activation_forward);
  }
}
#endif
